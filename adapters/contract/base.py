"""State shared by the ``TaskContract`` mixins: the web3 handle, caches, and the
transaction and call helpers."""

from __future__ import annotations

from typing import Any

from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address

from adapters.chain import Chain
from adapters.contract.artifact import load_artifact, task_abi
from adapters.contract.types import TaskConfig, _UpdateLog


class TaskBase:
    """One deployed ``FedChainTask``: attributes and the transaction/call helpers."""

    def __init__(self, chain: Chain, address: str, artifact: dict[str, Any] | None = None) -> None:
        self.chain = chain
        self.artifact = artifact or load_artifact()
        self.address: str = to_checksum_address(address)
        self.contract: Any = chain.w3.eth.contract(
            address=self.address, abi=task_abi(self.artifact)
        )
        self.deploy_receipt: Any = None
        #: receipt of the EquivocationEvidence deployment `deploy` made (None: given or attached)
        self.evidence_deploy_receipt: Any = None
        self._config: TaskConfig | None = None
        self._events_by_topic: dict[bytes, str] | None = None
        self._update_logs: dict[int, _UpdateLog] = {}
        self._client_indices: dict[str, int] = {}
        self._clients_next_block = 0
        self._separator: bytes | None = None

    def _tx(
        self, acct: LocalAccount, name: str, *args: Any, value: int = 0, gas: int | None = None
    ) -> Any:
        fn = getattr(self.contract.functions, name)(*args)
        return self.chain.transact(acct, fn, name, value, gas=gas)

    def _call(self, name: str, *args: Any) -> Any:
        """View call through the chain's per-block cache. The key (address, function name,
        args) determines the calldata (no overloads), so a hit skips ABI encoding."""
        key = ("FedChainTask", self.address, name, args)
        try:
            hash(key)
        except TypeError:  # unhashable argument: fall back to the calldata key
            return self.chain.call(getattr(self.contract.functions, name)(*args))
        return self.chain.cached_call(key, lambda: getattr(self.contract.functions, name)(*args))
