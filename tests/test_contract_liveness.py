"""Availability attestations, the dispute timeout and equivocation slashing on FedChainTask.

Block arithmetic as in tests/test_contract.py: a transaction sent while the latest block is
``b`` executes in block ``b + 1``; ``exec_at(chain, B)`` mines so the next one runs in ``B``.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount

from adapters.contract import (
    AggregatorIsSlashed,
    AlreadyAttested,
    AttestationClosed,
    AttestationOpen,
    BadBitmap,
    CollectionNotClosed,
    DisputeNotTimedOut,
    DisputeTimedOut,
    EvidenceFault,
    EvidenceKind,
    InvalidEvidence,
    InvalidSignature,
    NoOpenDispute,
    NotAggregator,
    NotChosenAggregator,
    Phase,
    QuorumNotReached,
    SignerNotMember,
    bitmap_bits,
    bitmap_words,
)
from consensus.evidence import proof_of
from consensus.messages import TYPE_HASHES, Commit, Domain, Prepare, PrePrepare, sign
from consensus.pbft import Evidence
from consensus.quorums import commit_quorum, max_faulty
from tests.test_contract import BURN, assert_accounting, chosen, dg, exec_at, fill, names
from tests.test_contract_dispute import by_address, certificate, submit_and_challenge

TaskSetup = Any  # tests/conftest.py:TaskSetup


def index_of(s: TaskSetup, acct: LocalAccount) -> int:
    return s.aggregators.index(acct)


# ----------------------------------------------------------------------------------------
# Availability attestations
# ----------------------------------------------------------------------------------------


def test_bitmap_packing_round_trips() -> None:
    rng = random.Random(1)
    for count in (0, 1, 255, 256, 257, 600):
        bits = [rng.random() < 0.5 for _ in range(count)]
        words = bitmap_words(bits)
        assert len(words) == (count + 255) // 256
        assert bitmap_bits(words, count) == bits


def test_attestation_phase_and_quorum_fix_the_included_set(task_factory: Any) -> None:
    """n = 4, f = 1: the included set is what f + 1 = 2 members attested, fixed by the third
    (n - f) attestation; aggregation starts at that block."""
    s = task_factory(n_aggregators=4, attest_window=10, submit_timeout=3)
    task = s.task
    fill(s, 1)  # 4 updates: max reached, collection closes now
    info = task.round_info(1)
    assert task.phase(1) == Phase.ATTESTING and info.collection_closed
    assert not info.availability_fixed and info.attest_end == info.close_block + 10
    with pytest.raises(AttestationOpen):
        task.current_aggregator()
    with pytest.raises(AttestationOpen):
        task.submit_aggregate(s.aggregators[0], 1, dg("early"))
    a0, a1, a2, a3 = s.aggregators
    receipt = task.attest(a0, 1, [True, True, False, False])
    assert names(task, receipt) == ["UpdatesAttested"]
    task.attest(a1, 1, [True, False, True, False])
    assert task.included_updates(1) == [True, False, False, False]  # only update 0 has f + 1
    assert task.attestation(1, 1) == [True, False, True, False]
    assert task.attestation(1, 3) == [False] * 4
    assert task.phase(1) == Phase.ATTESTING
    receipt = task.attest(a2, 1, [False, False, True, False])  # the (n - f)-th: fixed now
    info = task.round_info(1)
    assert info.availability_fixed and info.attest_count == 3
    assert task.phase(1) == Phase.AGGREGATING
    assert task.included_updates(1) == [True, False, True, False]
    assert info.attempt_start == receipt["blockNumber"]
    assert info.deadline_block == receipt["blockNumber"] + 3
    with pytest.raises(AttestationClosed):
        task.attest(a3, 1, [True] * 4)  # late: the set never changes once fixed
    assert task.included_updates(1) == [True, False, True, False]
    agg = chosen(s)
    task.submit_aggregate(agg, 1, dg("agg"))
    assert_accounting(s)


def test_attestation_window_edges(task_factory: Any) -> None:
    """Without n - f attestations the set is fixed at closeBlock + attestWindow: an
    attestation executing in attestEnd - 1 counts, one in attestEnd is refused."""
    s = task_factory(n_aggregators=4, attest_window=4, submit_timeout=2)
    task, chain = s.task, s.chain
    fill(s, 1)
    end = task.round_info(1).attest_end
    exec_at(chain, end - 1)
    task.attest(s.aggregators[0], 1, [True] * 4)
    assert task.phase(1) == Phase.ATTESTING  # latest block is end - 1
    chain.mine(1)  # latest block = end: fixed
    assert task.phase(1) == Phase.AGGREGATING
    assert task.included_updates(1) == [False] * 4  # one attestation < f + 1
    with pytest.raises(AttestationClosed):
        task.attest(s.aggregators[1], 1, [True] * 4)
    info = task.round_info(1)
    assert info.attempt_start == end and info.deadline_block == end + 2


def test_attestation_rejections(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4, attest_window=10)
    task = s.task
    with pytest.raises(CollectionNotClosed):
        task.attest(s.aggregators[0], 1, [])
    fill(s, 1)
    with pytest.raises(NotAggregator):
        task.attest(s.clients[0], 1, [True] * 4)
    with pytest.raises(BadBitmap):  # bits past the update count
        task._tx(s.aggregators[0], "attest", 1, [0b10000])
    with pytest.raises(BadBitmap):  # wrong number of words
        task._tx(s.aggregators[0], "attest", 1, [1, 0])
    task.attest(s.aggregators[0], 1, [True] * 4)
    with pytest.raises(AlreadyAttested):
        task.attest(s.aggregators[0], 1, [True] * 4)


def test_included_set_counts_against_brute_force(task_factory: Any) -> None:
    """n = 7 (threshold f + 1 = 3): after every attestation the on-chain bit-sliced count
    equals a plain count (up to n - f - 1 = 4 attesters, so the phase stays open)."""
    s = task_factory(n_aggregators=7, n_clients=8, min_updates=8, max_updates=8, attest_window=50)
    task = s.task
    fill(s, 1)
    rng = random.Random(7)
    held: list[list[bool]] = []
    threshold = max_faulty(7) + 1
    for member in s.aggregators[: commit_quorum(7) - 1]:
        bits = [rng.random() < 0.6 for _ in range(8)]
        held.append(bits)
        task.attest(member, 1, bits)
        expected = [sum(h[i] for h in held) >= threshold for i in range(8)]
        assert task.included_updates(1) == expected


def test_availability_library_multiword(tmp_path: Path) -> None:
    """The library's counter against a plain count over several words and up to 256
    attesters (a small harness contract compiled with the project's solc-js)."""
    from adapters import compile as c
    from adapters.chain import Chain

    harness = """
    pragma solidity ^0.8.24;
    import {Availability} from "./lib/Availability.sol";
    contract Harness {
        function count(uint256[] calldata words, uint256 threshold)
            external pure returns (uint256)
        {
            uint256[9] memory counter;
            for (uint256 i = 0; i < words.length; ++i) Availability.add(counter, words[i]);
            return Availability.atLeast(counter, threshold);
        }
        function all(uint256 n) external pure returns (uint256[] memory) {
            return Availability.allSet(n);
        }
    }
    """
    sources = {u: {"content": p.read_text()} for u, p in c._local_sources().items()}
    sources["Harness.sol"] = {"content": harness}
    out = c._run_solc({"language": "Solidity", "sources": sources, "settings": c.SETTINGS})
    compiled = out["contracts"]["Harness.sol"]["Harness"]
    chain = Chain.embedded(num_accounts=1)
    address, _ = chain.deploy(
        chain.accounts[0], compiled["abi"], "0x" + compiled["evm"]["bytecode"]["object"]
    )
    h = chain.w3.eth.contract(address=address, abi=compiled["abi"])
    rng = random.Random(3)
    for members, threshold in ((1, 1), (4, 2), (10, 4), (255, 86), (256, 256), (256, 1)):
        words = [rng.getrandbits(256) for _ in range(members)]
        got = h.functions.count(words, threshold).call()
        want = sum(
            1 << bit for bit in range(256) if sum((w >> bit) & 1 for w in words) >= threshold
        )
        assert got == want
    assert h.functions.count([], 0).call() == 2**256 - 1  # everything has count >= 0
    for n in (0, 1, 255, 256, 257, 600):
        assert bitmap_bits(h.functions.all(n).call(), n) == [True] * n


def test_attest_window_zero_includes_everything(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)  # attest_window 0 (the test default): no attesting
    fill(s, 1)
    assert s.task.phase(1) == Phase.AGGREGATING
    assert s.task.included_updates(1) == [True] * 4
    with pytest.raises(AttestationClosed):
        s.task.attest(s.aggregators[0], 1, [True] * 4)


# ----------------------------------------------------------------------------------------
# Dispute timeout
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_dispute_timeout_edges(task_factory: Any, offset: int) -> None:
    """resolveDispute works iff block.number <= challengeBlock + disputeTimeout, and
    expireDispute iff block.number > it (executing at deadline - 1, deadline, deadline + 1)."""
    s = task_factory(n_aggregators=4, dispute_timeout=5, challenge_window=3)
    task, chain = s.task, s.chain
    submitter, _, receipt = submit_and_challenge(s)
    deadline = receipt["blockNumber"] + 5
    assert task.round_info(1).dispute_deadline == deadline
    signers = by_address([a for a in s.aggregators if a != submitter])
    cert = certificate(s, signers, faulty=True)
    exec_at(chain, deadline + offset)  # refused calls send nothing, so both run in this block
    if offset <= 0:
        with pytest.raises(DisputeNotTimedOut):
            task.expire_dispute(s.owner, 1)
        receipt = task.resolve_certificate(s.owner, cert)
        assert receipt["blockNumber"] == deadline + offset
        assert task.round_info(1).attempt == 1 and task.aggregator_info(submitter.address).slashed
    else:
        with pytest.raises(DisputeTimedOut):
            task.resolve_certificate(s.owner, cert)
        receipt = task.expire_dispute(s.owner, 1)
        assert receipt["blockNumber"] == deadline + 1
        assert not task.aggregator_info(submitter.address).slashed
    assert_accounting(s)


def test_expired_dispute_discards_aggregate_and_settles_bonds(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4, dispute_timeout=3, submit_timeout=2)
    task, chain = s.task, s.chain
    cfg = task.config()
    submitter, challenger, receipt = submit_and_challenge(s)
    stakes_before = {a.address: task.aggregator_info(a.address).stake for a in s.aggregators}
    owner_before = task.credits(s.owner.address)
    exec_at(chain, receipt["blockNumber"] + 4)
    expired = task.expire_dispute(s.aggregators[3], 1)
    assert names(task, expired) == ["DisputeExpired"]
    ev = task.events(expired)[0].args
    assert (ev["attempt"], ev["submitter"], ev["challenger"]) == (
        0,
        submitter.address,
        challenger.address,
    )
    # issue 20: nothing was proven, so the submitter's bond comes back; the challenge bond
    # is burned (never to the owner, never to either side)
    assert ev["treasuryAmount"] == cfg.challenge_bond
    assert task.credits(BURN) == cfg.challenge_bond
    assert task.credits(s.owner.address) == owner_before == 0
    assert task.credits(submitter.address) == cfg.aggregate_bond
    assert task.credits(challenger.address) == 0
    # nobody is slashed, stakes untouched
    for a in s.aggregators:
        info = task.aggregator_info(a.address)
        assert not info.slashed and info.stake == stakes_before[a.address]
    # re-opened for the next aggregator, starting now; the discarded digest is gone
    info = task.round_info(1)
    assert info.phase == Phase.AGGREGATING and info.attempt == 1
    assert info.attempt_start == expired["blockNumber"]
    assert info.aggregate_digest == bytes(32) and info.challenger is None
    nxt = chosen(s)
    assert nxt != submitter
    with pytest.raises(NotChosenAggregator):
        task.submit_aggregate(submitter, 1, dg("again"))
    with pytest.raises(NoOpenDispute):
        task.expire_dispute(s.owner, 1)
    task.submit_aggregate(nxt, 1, dg("honest"))
    chain.mine(cfg.challenge_window)
    task.finalize(s.owner, 1)
    assert task.round_digest(1) == dg("honest")
    assert_accounting(s)


# ----------------------------------------------------------------------------------------
# Equivocation slashing
# ----------------------------------------------------------------------------------------


def _pair(s: TaskSetup, who: LocalAccount, kind: str) -> Evidence:
    dom = Domain(s.chain.chain_id, s.task.address)
    i = index_of(s, who)
    if kind == "commit":
        a = Commit(1, 0, dg("x"), True, 2, i)
        b = replace(a, faulty=False)
    elif kind == "prepare":
        a = Prepare(2, 5, 1, 0, dg("x"), True, i)  # type: ignore[assignment]
        b = replace(a, faulty=False)
    else:
        a = PrePrepare(2, 5, 1, 0, dg("x"), True, i)  # type: ignore[assignment]
        b = replace(a, aggregate_digest=dg("y"))  # another proposal at the same slot
    return Evidence(kind, i, sign(a, who, dom), sign(b, who, dom))


@pytest.mark.parametrize("kind", ["pre-prepare", "prepare", "commit"])
def test_equivocation_is_slashed(task_factory: Any, kind: str) -> None:
    s = task_factory(n_aggregators=4)
    task = s.task
    liar, reporter = s.aggregators[1], s.aggregators[2]
    proof = proof_of(_pair(s, liar, kind))
    assert proof is not None and proof.sender == 1
    stake = task.aggregator_info(liar.address).stake
    receipt = task.slash_equivocation(reporter, *proof.contract_args())
    assert names(task, receipt) == ["Slashed", "EquivocationSlashed"]
    ev = task.events(receipt)[1].args
    assert ev["aggregator"] == liar.address and ev["reporter"] == reporter.address
    assert ev["kind"] == proof.kind and ev["viewNumber"] == proof.view
    info = task.aggregator_info(liar.address)
    assert info.slashed and info.stake == 0 and not info.active
    assert task.credits(reporter.address) == stake // 2
    assert task.credits(BURN) == stake - stake // 2 and task.credits(s.owner.address) == 0
    with pytest.raises(AggregatorIsSlashed):  # at most once
        task.slash_equivocation(reporter, *proof.contract_args())
    assert_accounting(s)
    # out of the quorums and the rotation from now on
    fill(s, 1, n=2)
    s.chain.mine_to(task.round_info(1).close_block)
    for _ in range(4):  # (laggards turn inactive: the choice may become nobody)
        assert task.current_aggregator().address != liar.address
        s.chain.mine(task.config().submit_timeout + 1)
        task.advance_attempt(s.owner, 1)


def test_equivocation_evidence_refusals(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task, chain = s.task, s.chain
    dom = Domain(chain.chain_id, task.address)
    liar, other, reporter = s.aggregators[0], s.aggregators[1], s.aggregators[3]
    c = Commit(1, 0, dg("x"), True, 0, 0)
    vote = (1, 0, dg("x"), True, sign(c, liar, dom).signature)
    flipped = (1, 0, dg("x"), False, sign(replace(c, faulty=False), liar, dom).signature)
    commit = int(EvidenceKind.COMMIT)

    def refused(reason: EvidenceFault, *args: Any) -> None:
        with pytest.raises(InvalidEvidence) as info:
            task.slash_equivocation(reporter, *args)
        assert info.value.error_args["reason"] == reason

    refused(EvidenceFault.UNKNOWN_KIND, 3, 0, 0, vote, flipped)
    refused(EvidenceFault.NOT_CONFLICTING, commit, 0, 0, vote, vote)  # the same message twice
    other_dispute = (
        2,
        0,
        dg("x"),
        False,
        sign(Commit(2, 0, dg("x"), False, 0, 0), liar, dom).signature,
    )
    refused(EvidenceFault.NOT_CONFLICTING, commit, 0, 0, vote, other_dispute)  # two disputes
    by_other = (
        1,
        0,
        dg("x"),
        False,
        sign(replace(c, faulty=False, sender=1), other, dom).signature,
    )
    refused(EvidenceFault.DIFFERENT_SIGNERS, commit, 0, 0, vote, by_other)
    # a prepare pair at different sequence numbers is two legal votes: the contract hashes
    # both with one seq, so the second recovers to someone else
    p1 = sign(Prepare(0, 1, 1, 0, dg("x"), True, 0), liar, dom)
    p2 = sign(Prepare(0, 2, 1, 0, dg("y"), True, 0), liar, dom)
    with pytest.raises((SignerNotMember, InvalidEvidence)):
        task.slash_equivocation(
            reporter,
            int(EvidenceKind.PREPARE),
            0,
            1,
            (1, 0, dg("x"), True, p1.signature),
            (1, 0, dg("y"), True, p2.signature),
        )
    # a stranger's pair, and a malformed signature
    stranger = s.spare[0]
    sv = (1, 0, dg("x"), True, sign(c, stranger, dom).signature)
    sf = (1, 0, dg("x"), False, sign(replace(c, faulty=False), stranger, dom).signature)
    with pytest.raises(SignerNotMember):
        task.slash_equivocation(reporter, commit, 0, 0, sv, sf)
    with pytest.raises(InvalidSignature):
        task.slash_equivocation(
            reporter, commit, 0, 0, (1, 0, dg("x"), True, b"\x01" * 64), flipped
        )
    # evidence signed for another task (domain) recovers to two strangers here
    other_task = task_factory(n_aggregators=0, n_clients=0, start=False).task
    od = Domain(chain.chain_id, other_task.address)
    ov = (1, 0, dg("x"), True, sign(c, liar, od).signature)
    of = (1, 0, dg("x"), False, sign(replace(c, faulty=False), liar, od).signature)
    with pytest.raises((SignerNotMember, InvalidEvidence)):
        task.slash_equivocation(reporter, commit, 0, 0, ov, of)
    assert not task.aggregator_info(liar.address).slashed
    assert_accounting(s)


def test_equivocator_signature_no_longer_counts(task_factory: Any) -> None:
    """After an equivocation slash, the member's signature no longer counts: a certificate
    that needs it is short of the quorum; one from the remaining eligible members is
    accepted."""
    s = task_factory(n_aggregators=4)
    task = s.task
    submitter, challenger, _ = submit_and_challenge(s)
    liar = next(a for a in s.aggregators if a not in (submitter, challenger))
    proof = proof_of(_pair(s, liar, "commit"))
    assert proof is not None
    task.slash_equivocation(challenger, *proof.contract_args())
    eligible = by_address([a for a in s.aggregators if a != liar])
    short = by_address([liar, *[a for a in s.aggregators if a != liar][:2]])
    with pytest.raises(QuorumNotReached):
        task.resolve_certificate(s.owner, certificate(s, short, True))
    task.resolve_certificate(s.owner, certificate(s, eligible, True))
    assert task.aggregator_info(submitter.address).slashed
    assert_accounting(s)


def test_slot_vote_type_hashes_match_python(task_factory: Any) -> None:
    s = task_factory(n_aggregators=1, n_clients=0, start=False)
    assert bytes(s.task._call("PRE_PREPARE_TYPEHASH")) == TYPE_HASHES["PrePrepare"]
    assert bytes(s.task._call("PREPARE_TYPEHASH")) == TYPE_HASHES["Prepare"]
