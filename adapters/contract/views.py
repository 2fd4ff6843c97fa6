"""Read-only views of ``FedChainTask`` (rounds, committee, config, balances) and event decoding."""

from __future__ import annotations

from typing import Any

from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from adapters.contract.base import TaskBase
from adapters.contract.types import (
    AggregatorInfo,
    ChosenAggregator,
    EventRecord,
    Phase,
    RoundInfo,
    TaskConfig,
    _opt_address,
    bitmap_bits,
)


class ViewsMixin(TaskBase):
    """Read-only contract views and receipt events."""

    def current_round(self) -> int:
        return int(self._call("currentRound"))

    def task_started(self) -> bool:
        return bool(self._call("taskStarted"))

    def task_completed(self) -> bool:
        """True once the last round is final or the task was aborted (``abortTask``)."""
        return bool(self._call("taskCompleted"))

    def global_model_digest(self) -> bytes:
        return bytes(self._call("globalModelDigest"))

    def round_digest(self, round: int) -> bytes:
        """Finalized digest of ``round`` (32 zero bytes if not finalized)."""
        return bytes(self._call("roundDigest", round))

    def phase(self, round: int) -> Phase:
        return Phase(self._call("phase", round))

    def round_info(self, round: int) -> RoundInfo:
        return RoundInfo.from_tuple(self._call("getRound", round))

    def update_count(self, round: int) -> int:
        return int(self._call("updateCount", round))

    def included_updates(self, round: int) -> list[bool]:
        """The round's included set, one flag per registered update (final once
        ``round_info(round).availability_fixed``)."""
        return bitmap_bits(self._call("includedUpdates", round), self.update_count(round))

    def attestation(self, round: int, member: int) -> list[bool]:
        """What committee member ``member`` (index) attested for ``round``."""
        return bitmap_bits(self._call("attestation", round, member), self.update_count(round))

    def current_aggregator(self) -> ChosenAggregator:
        """Raises :class:`CollectionNotClosed` while the current round is collecting."""
        address, attempt, deadline = self._call("currentAggregator")
        return ChosenAggregator(_opt_address(address), int(attempt), int(deadline))

    def aggregators(self) -> list[str]:
        return [to_checksum_address(a) for a in self._call("aggregators")]

    def aggregator_info(self, address: str) -> AggregatorInfo:
        registered, active, slashed, stake, index, active_from = self._call(
            "aggregatorInfo", to_checksum_address(address)
        )
        return AggregatorInfo(
            to_checksum_address(address),
            bool(registered),
            bool(active),
            bool(slashed),
            int(stake),
            int(index),
            int(active_from),
        )

    def is_client(self, address: str) -> bool:
        return bool(self._call("clientInfo", to_checksum_address(address))[0])

    def credits(self, address: str) -> int:
        return int(self._call("credits", to_checksum_address(address)))

    def owner(self) -> str:
        return to_checksum_address(self._call("owner"))

    def committee_size(self) -> int:
        """Registered aggregators (frozen at ``start``): the ``n`` of the quorum maths."""
        return int(self._call("committeeSize"))

    def commit_quorum(self) -> int:
        """Signatures a dispute certificate needs: ``n - (n - 1) // 3``.

        Raises :class:`EmptyCommittee` while nobody is registered."""
        return int(self._call("commitQuorum"))

    def eip712_domain(self) -> dict[str, Any]:
        """The ERC-5267 EIP-712 domain: ``{name, version, chainId, verifyingContract}``."""
        _fields, name, version, chain_id, verifying, _salt, _ext = self._call("eip712Domain")
        return {
            "name": str(name),
            "version": str(version),
            "chainId": int(chain_id),
            "verifyingContract": to_checksum_address(verifying),
        }

    def config(self) -> TaskConfig:
        """The task parameters (read once from the chain, then cached: they are immutable)."""
        if self._config is None:
            self._config = TaskConfig.from_tuple(self._call("config"))
        return self._config

    def balance(self) -> int:
        """Wei held by the contract."""
        return self.chain.balance(self.address)

    def events(self, receipt: Any) -> list[EventRecord]:
        """Decode this contract's events from ``receipt``, in log order."""
        if self._events_by_topic is None:
            self._events_by_topic = {}
            for entry in self.artifact["abi"]:
                if entry.get("type") == "event":
                    types = ",".join(i["type"] for i in entry["inputs"])
                    self._events_by_topic[keccak(text=f"{entry['name']}({types})")] = entry["name"]
        records: list[EventRecord] = []
        for log in receipt["logs"]:
            if to_checksum_address(log["address"]) != self.address or not log["topics"]:
                continue
            name = self._events_by_topic.get(bytes(log["topics"][0]))
            if name is None:
                continue
            decoded = getattr(self.contract.events, name)().process_log(log)
            records.append(
                EventRecord(
                    name, dict(decoded["args"]), int(log["blockNumber"]), int(log["logIndex"])
                )
            )
        return records
