"""``TaskContract``: the contract areas composed into one wrapper, with deploy/attach."""

from __future__ import annotations

from typing import Any

from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address

from adapters.chain import Chain
from adapters.contract.artifact import ARTIFACT_PATH, load_artifact
from adapters.contract.disputes import DisputesMixin
from adapters.contract.intake import IntakeMixin
from adapters.contract.rounds import RoundsMixin
from adapters.contract.types import TaskConfig


class TaskContract(IntakeMixin, RoundsMixin, DisputesMixin):
    """One deployed ``FedChainTask``. Build with :meth:`deploy` or :meth:`at`."""

    @classmethod
    def deploy_evidence(cls, chain: Chain, deployer: LocalAccount) -> tuple[str, Any]:
        """Deploy an ``EquivocationEvidence`` (its own transaction, gas recorded as
        ``deployEvidence``); returns ``(address, receipt)``. One instance can serve any number
        of tasks: it keys all its state by the calling task."""
        artifact = load_artifact(ARTIFACT_PATH.with_name("EquivocationEvidence.json"))
        return chain.deploy(deployer, artifact["abi"], artifact["bytecode"], op="deployEvidence")

    @classmethod
    def deploy(
        cls,
        chain: Chain,
        deployer: LocalAccount,
        config: TaskConfig,
        evidence: str | None = None,
    ) -> TaskContract:
        """Deploy a new task owned by ``deployer`` (gas recorded as ``deploy``). EIP-3860: the
        task's ``EquivocationEvidence`` is a separate contract, created first by its own
        transaction unless ``evidence`` names one already deployed (the task's constructor
        accepts it only with the audited code hash, ``EvidenceCodeMismatch`` otherwise)."""
        evidence_receipt = None
        if evidence is None:
            evidence, evidence_receipt = cls.deploy_evidence(chain, deployer)
        artifact = load_artifact()
        address, receipt = chain.deploy(
            deployer,
            artifact["abi"],
            artifact["bytecode"],
            config.as_tuple(),
            to_checksum_address(evidence),
            op="deploy",
        )
        task = cls(chain, address, artifact)
        task.deploy_receipt = receipt
        task.evidence_deploy_receipt = evidence_receipt
        task._config = config
        return task

    @classmethod
    def at(cls, chain: Chain, address: str) -> TaskContract:
        """Attach to an already deployed task."""
        if not chain.w3.eth.get_code(to_checksum_address(address)):
            raise ValueError(f"no contract code at {address}")
        return cls(chain, address)

    def __repr__(self) -> str:
        return f"TaskContract({self.address})"
