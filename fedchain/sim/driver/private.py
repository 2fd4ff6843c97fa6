"""The in-process clients' records in a secure-aggregation task, relayed in batches.

Each client's duties (register its encryption key, post a key record before a round it
would not otherwise be a peer of, reveal its shares while a round is Revealing) are
:meth:`fedchain.private_view.SecAggClient.due`; this driver collects them for every
in-process client once per block, has each client sign its own records, and relays them in
batches (``PrivacyRecords.submitRecords``, paid by the ``relayer``): the contract checks
every signature, so the relayer can neither forge nor alter a record, and any client could
still send its own. :meth:`PrivateDriver.setup` runs the key set-up before the task starts
(round 0: every encryption key, then every client's first key record, dealt to all).
"""

from __future__ import annotations

from collections.abc import Sequence

from eth_account.signers.local import LocalAccount

from adapters.contract import Phase, TaskContract
from adapters.privacy_records import KINDS, REVEAL, SignedRecord
from clients.node import ClientNode
from fedchain.config import RECORD_BATCH, REVEAL_BATCH
from fedchain.private_view import SecAggClient, SecAggView
from fedchain.sim.driver.events import EventLog
from protocol.errors import ContractRevert, FedchainError
from protocol.metrics import PhaseClock

__all__ = ["PrivateDriver"]


class PrivateDriver:
    """Relays the secure-aggregation records of in-process clients (see module docstring)."""

    def __init__(
        self,
        view: SecAggView,
        clients: Sequence[ClientNode],
        relayer: LocalAccount,
        task: TaskContract,
        events: EventLog,
        clock: PhaseClock,
        *,
        batch: int = RECORD_BATCH,
    ) -> None:
        self.view = view
        self.clients = [c for c in clients if isinstance(c.private, SecAggClient)]
        self.relayer = relayer
        self.task = task
        self.events = events
        self.clock = clock
        self.batch = max(1, int(batch))
        view.pinner = relayer

    def setup(self) -> None:
        """Register every encryption key, pin round 1's mask graph (SecAgg+), then every first
        key record (before the start)."""
        for _ in range(4):  # keys, then key records; a last pass finds nothing due
            sent = self._publish(0, Phase.PENDING)
            if self.view.pin_graph(self.relayer, 1):
                self.events.emit("graph_seed", round=1)
                sent = True
            if not sent:
                return
        raise FedchainError("secure aggregation set-up did not settle: records still due")

    def step(self) -> bool:
        """Publish what the current round asks of the clients; True if anything was sent."""
        if self.task.task_completed():
            return False
        round_ = self.task.current_round()
        pinned = self.view.pin_graph(self.relayer, round_ + 1)
        if pinned:
            self.events.emit("graph_seed", round=round_ + 1)
        return self._publish(round_, self.task.phase(round_)) or pinned

    def _publish(self, round_: int, phase: Phase) -> bool:
        everyone = self.view.spec.num_clients or len(self.clients)
        with self.clock.phase(round_, "records"):
            signed: list[tuple[ClientNode, SignedRecord]] = []
            for node in self.clients:
                assert isinstance(node.private, SecAggClient)
                for kind, payload in node.private.due(round_, phase, everyone):
                    signed.append(
                        (node, self.view.records.sign(node.account, round_, kind, payload))
                    )
            # 32-byte reveals (SecAgg+ digests) go through submitReveals, in larger batches
            digests = [(n, r) for n, r in signed if r.kind == REVEAL and len(r.payload) == 32]
            others = [(n, r) for n, r in signed if not (r.kind == REVEAL and len(r.payload) == 32)]
            for start in range(0, len(others), self.batch):
                self._relay(round_, others[start : start + self.batch])
            for start in range(0, len(digests), REVEAL_BATCH):
                self._relay(round_, digests[start : start + REVEAL_BATCH], digests=True)
        return bool(signed)

    def _relay(
        self, round_: int, chunk: list[tuple[ClientNode, SignedRecord]], digests: bool = False
    ) -> None:
        records = [rec for _, rec in chunk]
        kinds = sorted({KINDS[rec.kind] for rec in records})
        try:
            if digests:
                indexed = [(node.client_index(), rec) for node, rec in chunk]
                receipt = self.view.records.submit_reveals(self.relayer, round_, indexed)
            else:
                receipt = self.view.records.submit_records(self.relayer, round_, records)
        except ContractRevert as exc:
            # e.g. the round moved on under us: the chain says what is left, next block
            self.events.emit("records_refused", round=round_, kinds=kinds, error=exc.error_name)
            return
        self.events.emit(
            "records",
            round=round_,
            kinds=kinds,
            count=len(records),
            bytes=sum(len(r.payload) for r in records),
            gas=int(receipt["gasUsed"]),
        )
