"""Issue 22 / EIP-3860: the task's EquivocationEvidence is deployed by a transaction of its own
and handed to the task's constructor, which accepts it only if its code hash is the generated
``EVIDENCE_CODEHASH``. Against the real FedChainTask on the embedded chain.

The attack: a task deployer passes a look-alike "evidence checker" (same selectors, other
code) that accepts any evidence and names any committee member as the equivocator, so that
``slashEquivocation`` would slash honest members (and pay the deployer the reward).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from eth_utils.crypto import keccak

from adapters.compile import CODEHASH_UNIT, CONTRACTS_DIR
from adapters.contract import EvidenceCodeMismatch, TaskContract


def _generated_codehash() -> bytes:
    text = (CONTRACTS_DIR / CODEHASH_UNIT).read_text("utf-8")
    match = re.search(r"EVIDENCE_CODEHASH = 0x([0-9a-f]{64});", text)
    assert match is not None
    return bytes.fromhex(match.group(1))


def _always_accepts(victim: str) -> str:
    """Creation code of a contract that answers every call with ``victim`` (as
    ``slashEquivocation``'s ``signer``): an evidence checker that accepts anything."""
    runtime = bytes([0x73]) + bytes.fromhex(victim[2:]) + bytes.fromhex("60005260206000f3")
    assert len(runtime) == 29
    init = bytes.fromhex("601d600c600039601d6000f3")
    return "0x" + (init + runtime).hex()


def test_a_task_refuses_an_evidence_look_alike(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4, start=False)
    cfg = s.task.config()
    victim = s.aggregators[0].address
    fake, _ = s.chain.deploy(s.owner, [], _always_accepts(victim), op="deploy-fake")
    fake_hash = keccak(bytes(s.chain.w3.eth.get_code(fake)))
    assert fake_hash != _generated_codehash()
    with pytest.raises(EvidenceCodeMismatch) as exc:
        TaskContract.deploy(s.chain, s.owner, cfg, evidence=fake)
    assert exc.value.error_args["evidence"] == fake
    codehash = exc.value.error_args["codehash"]
    assert isinstance(codehash, bytes) and codehash == fake_hash
    # no contract at all: an account with no code (codehash 0, or keccak("") once funded)
    for nothing in ("0x" + "be" * 20, s.clients[0].address):
        with pytest.raises(EvidenceCodeMismatch):
            TaskContract.deploy(s.chain, s.owner, cfg, evidence=nothing)


def test_the_real_evidence_is_accepted_and_serves_many_tasks(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4, start=False)
    evidence = s.task.evidence_address
    # what eth_getCode returns at the deployed EquivocationEvidence hashes to the constant
    assert keccak(bytes(s.chain.w3.eth.get_code(evidence))) == _generated_codehash()
    assert s.task.evidence_deploy_receipt["status"] == 1
    # a second task (another deployer) reuses the same instance: it keys state by the task
    other = TaskContract.deploy(s.chain, s.clients[1], s.task.config(), evidence=evidence)
    assert other.evidence_address == evidence
    assert other.evidence_deploy_receipt is None
    sealed = b"\x42" * 32
    s.task.commit_equivocation(s.clients[2], sealed)
    assert other.equivocation_committed_at(sealed) == s.task.equivocation_committed_at(sealed) > 0
