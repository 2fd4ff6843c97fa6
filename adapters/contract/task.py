"""``TaskContract``: the contract areas composed into one wrapper, with deploy/attach."""

from __future__ import annotations

from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address

from adapters.chain import Chain
from adapters.contract.artifact import load_artifact
from adapters.contract.disputes import DisputesMixin
from adapters.contract.intake import IntakeMixin
from adapters.contract.rounds import RoundsMixin
from adapters.contract.types import TaskConfig


class TaskContract(IntakeMixin, RoundsMixin, DisputesMixin):
    """One deployed ``FedChainTask``. Build with :meth:`deploy` or :meth:`at`."""

    @classmethod
    def deploy(cls, chain: Chain, deployer: LocalAccount, config: TaskConfig) -> TaskContract:
        """Deploy a new task owned by ``deployer`` (gas recorded as ``deploy``)."""
        artifact = load_artifact()
        address, receipt = chain.deploy(
            deployer, artifact["abi"], artifact["bytecode"], config.as_tuple(), op="deploy"
        )
        task = cls(chain, address, artifact)
        task.deploy_receipt = receipt
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
