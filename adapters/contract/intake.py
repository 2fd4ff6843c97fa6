"""Intake: committee and client membership, stakes and credits, and update registration
(own, batched signed records) with the update list rebuilt from events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eth_abi.abi import decode as abi_decode
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address

from adapters.contract.errors import AccumulatorForgotten
from adapters.contract.types import (
    _CLIENT_TOPIC,
    _UPDATES_TOPIC,
    RegisteredUpdate,
    _digest,
    _UpdateLog,
)
from adapters.contract.views import ViewsMixin
from adapters.records import (
    NO_CHUNK_ROOT,
    AccumulatorMismatch,
    SignedUpdate,
    decode_update_entries,
    extend_updates,
)
from protocol.eip712 import domain_separator


class IntakeMixin(ViewsMixin):
    """Registration, stakes and update intake; the per-round update list rebuilt from events."""

    def register_aggregator(self, acct: LocalAccount, value: int | None = None) -> Any:
        """Join the committee; sends ``aggregator_stake`` unless ``value`` is given."""
        stake = self.config().aggregator_stake if value is None else value
        return self._tx(acct, "registerAggregator", value=stake)

    def register_client(self, acct: LocalAccount, value: int | None = None) -> Any:
        """Register as a client; sends the task's ``client_deposit`` unless ``value`` is
        given."""
        deposit = self.config().client_deposit if value is None else value
        return self._tx(acct, "registerClient", value=deposit)

    def release_deposit(self, acct: LocalAccount) -> Any:
        """After the task completed or was aborted: the client deposit goes to the caller's
        credits (then ``withdraw``)."""
        return self._tx(acct, "releaseDeposit")

    def allow_clients(self, acct: LocalAccount, addresses: Sequence[str]) -> Any:
        """Owner: allow ``addresses`` to register as clients (``client_allowlist`` tasks)."""
        return self._tx(acct, "allowClients", [to_checksum_address(a) for a in addresses])

    def leave_committee(self, acct: LocalAccount) -> Any:
        """Leave the committee before ``start`` (the stake goes to the caller's credits)."""
        return self._tx(acct, "leaveCommittee")

    def top_up_stake(self, acct: LocalAccount, value: int) -> Any:
        return self._tx(acct, "topUpStake", value=value)

    def release_stake(self, acct: LocalAccount) -> Any:
        return self._tx(acct, "releaseStake")

    def withdraw(self, acct: LocalAccount) -> Any:
        return self._tx(acct, "withdraw")

    def submit_update(
        self,
        acct: LocalAccount,
        round: int,
        digest: bytes,
        num_samples: int,
        chunk_root: bytes = NO_CHUNK_ROOT,
    ) -> Any:
        """Register ``acct``'s own update (no signature needed: it sends the transaction);
        ``chunk_root`` is U_i (:func:`protocol.merkle.vector_root` of the quantised update)."""
        return self._tx(acct, "submitUpdate", round, bytes(digest), num_samples, bytes(chunk_root))

    def submit_updates(
        self,
        acct: LocalAccount,
        round: int,
        records: Sequence[SignedUpdate],
        gas: int | None = None,
    ) -> Any:
        """Relay a batch of clients' signed update records (``acct`` pays, anyone may).

        Records of clients that already have an update this round, and those left once
        collection closes, are skipped; :meth:`accepted_updates` reads what the receipt
        registered."""
        packed = b"".join(rec.packed() for rec in records)
        return self._tx(acct, "submitUpdates", round, packed, gas=gas)

    def accepted_updates(self, receipt: Any) -> list[RegisteredUpdate]:
        """The updates a ``submitUpdate``/``submitUpdates`` receipt registered, in order."""
        out: list[RegisteredUpdate] = []
        for ev in self.events(receipt):
            if ev.name == "UpdatesRegistered":
                out += decode_update_entries(int(ev.args["firstIndex"]), bytes(ev.args["entries"]))
        return out

    def updates(self, round: int) -> list[RegisteredUpdate]:
        """The updates registered for ``round``, in registration order.

        Rebuilt from the round's ``UpdatesRegistered`` events (read incrementally and kept)
        and checked against the on-chain accumulator and count: a list that does not hash to
        it raises :class:`~adapters.records.AccumulatorMismatch`, never a silent answer. For a
        round older than the previous one the contract keeps only the count: the list must
        have that length and every batch must hash to the accumulator its event carries."""
        acc, count = self.update_accumulator(round)
        log = self._update_logs.get(round)
        for fresh in (False, True):
            if log is None or fresh:
                log = self._update_logs[round] = _UpdateLog()
            if len(log.entries) < count:
                self._scan_updates(round, log)
            if len(log.entries) >= count and acc in (None, log.accs[count]):
                return log.entries[:count]
            # a cached prefix from a reverted chain (snapshot) fails here: rescan once
        have = len(log.entries) if log is not None else 0
        raise AccumulatorMismatch(
            f"round {round}: {have} updates rebuilt from UpdatesRegistered events do not match "
            f"the on-chain accumulator of {count} updates at {self.address}"
        )

    def _scan_updates(self, round: int, log: _UpdateLog) -> None:
        """Append the round's events since the last scan to ``log`` (each batch checked)."""
        to_block = self.chain.block_number()
        from_block = log.next_block or self.round_info(round).open_block
        if from_block > to_block:
            return
        events = self.chain.logs(
            self.address, [_UPDATES_TOPIC, round.to_bytes(32, "big")], from_block, to_block
        )
        for event in events:
            first, acc, entries = abi_decode(["uint256", "uint256", "bytes"], event.data)
            if first < len(log.entries):
                continue  # already read (overlapping scan)
            if first > len(log.entries):
                raise AccumulatorMismatch(
                    f"round {round}: UpdatesRegistered events skip updates "
                    f"{len(log.entries)}..{first - 1}"
                )
            for entry in decode_update_entries(first, entries):
                e = entry
                log.accs.append(
                    extend_updates(log.accs[-1], e.client, e.digest, e.num_samples, e.chunk_root)
                )
                log.entries.append(entry)
            if log.accs[-1] != acc:
                raise AccumulatorMismatch(
                    f"round {round}: the batch ending at update {len(log.entries) - 1} does "
                    "not hash to the accumulator its event carries"
                )
        log.next_block = to_block + 1

    def update_accumulator(self, round: int) -> tuple[int | None, int]:
        """The on-chain accumulator over ``round``'s update list, and its length. The contract
        keeps the accumulator of the current and the previous round only: for an earlier
        round it is None (its last ``UpdatesRegistered`` event carries it) and the length
        comes from the round's state."""
        try:
            acc, count = self._call("updateAccumulator", round)
        except AccumulatorForgotten:
            return None, self.round_info(round).update_count
        return int(acc), int(count)

    def has_submitted(self, round: int, address: str) -> bool:
        """Whether ``address`` has an update registered for ``round`` (the current round)."""
        return bool(self._call("updateSubmitted", round, to_checksum_address(address)))

    def client_index(self, address: str) -> int | None:
        """The registration index of client ``address`` (None if not registered).

        Read from the ``ClientRegistered`` events (one log query for every client so far, then
        incrementally), falling back to the ``clientInfo`` view for an address they miss."""
        address = to_checksum_address(address)
        if address not in self._client_indices:
            to_block = self.chain.block_number()
            for log in self.chain.logs(
                self.address, [_CLIENT_TOPIC], self._clients_next_block, to_block
            ):
                client = to_checksum_address(log.topics[1][-20:])
                self._client_indices[client] = int.from_bytes(log.data, "big")
            self._clients_next_block = to_block + 1
        if address not in self._client_indices:
            registered, index = self._call("clientInfo", address)
            if not registered:
                return None
            self._client_indices[address] = int(index)
        return self._client_indices[address]

    def client_count(self) -> int:
        return int(self._call("clientCount"))

    @property
    def domain_separator(self) -> bytes:
        """The task's EIP-712 domain separator (what clients' records are signed under)."""
        if self._separator is None:
            self._separator = domain_separator(self.chain.chain_id, self.address)
        return self._separator

    def update_record_digest(
        self, round: int, digest: bytes, num_samples: int, chunk_root: bytes = NO_CHUNK_ROOT
    ) -> bytes:
        """The EIP-712 digest of an update record, computed on-chain."""
        return bytes(
            self._call(
                "updateRecordDigest",
                round,
                _digest("digest", digest),
                num_samples,
                bytes(chunk_root),
            )
        )
