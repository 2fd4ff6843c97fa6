"""The replica: a thin composition of the ordering, checkpoint, view-change and catch-up
services over shared state (:class:`~consensus.pbft.core.ReplicaCore`).

It owns the public API (``start``, ``on_message``, ``on_timer``, ``learn`` and the read-only
views), routes each message type to the service that handles it, and keeps the request and
retransmission timers running while there is unfinished work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eth_account.signers.local import LocalAccount

from consensus.certificate import CommitCertificate
from consensus.messages import (
    Checkpoint,
    Commit,
    CommitProof,
    Domain,
    Fetch,
    Instance,
    InstanceKey,
    Message,
    NewView,
    Prepare,
    PreparedCert,
    PrePrepare,
    ViewChange,
)
from consensus.pbft.catchup import CatchupService
from consensus.pbft.checkpoints import CheckpointService
from consensus.pbft.core import ReplicaCore
from consensus.pbft.interface import Action, Persist, ReplicaConfig
from consensus.pbft.log import Decided, Slot
from consensus.pbft.ordering import OrderingService
from consensus.pbft.stable import restore, snapshot
from consensus.pbft.view_change import ViewChangeService
from protocol.errors import ConsensusError

__all__ = ["Replica"]


class Replica(ReplicaCore):
    """One committee member's PBFT state machine (pure: see :mod:`consensus.pbft`).

    ``committee`` lists member addresses in on-chain registration order; ``account`` must be
    ``committee[index]``'s key; ``validate(instance)`` is this replica's own re-execution
    verdict (True: the aggregate is faulty). It is called at most once per instance unless it
    raises (then the replica abstains and asks again later).

    ``state`` is the last :class:`~consensus.pbft.interface.Persist` state this member's
    driver wrote: the replica restarts from it (see :mod:`consensus.pbft.stable`), and the
    driver then calls :meth:`resume`.
    """

    def __init__(
        self,
        index: int,
        committee: Sequence[str],
        account: LocalAccount,
        domain: Domain,
        validate: Callable[[Instance], bool],
        config: ReplicaConfig | None = None,
        *,
        state: bytes | None = None,
    ) -> None:
        super().__init__(index, committee, account, domain, validate, config)
        self.ordering = OrderingService(self)
        self.checkpoints = CheckpointService(self)
        self.view_changes = ViewChangeService(self)
        self.catchup = CatchupService(self)
        if state is not None:
            restore(self, state)

    # ---- inputs ---------------------------------------------------------------------------

    def start(self, instance: Instance) -> list[Action]:
        """This replica has observed the dispute (e.g. the on-chain challenge event)."""
        if not instance.matches(self.domain):
            raise ConsensusError("instance belongs to another task or chain than this replica")
        self._out = []
        key = instance.key
        if key not in self.decided and key not in self.disputes:
            self.disputes[key] = instance
            self.verdict(key)
            self.ordering.progress()
        return self._finish()

    def on_message(self, msg: Message) -> list[Action]:
        """Handle one received message; invalid ones are dropped (see ``stats``)."""
        self._out = []
        try:
            if not 0 <= msg.sender < self.n:
                raise ConsensusError("sender outside the committee")
            if msg.sender != self.index:
                self._dispatch(msg)
        except ConsensusError as exc:
            self.stats["rejected"] += 1
            self.last_rejection = f"{type(msg).__name__} from {msg.sender}: {exc}"
        return self._finish()

    def on_timer(self, timer_id: str) -> list[Action]:
        self._out = []
        purpose = self.pop_timer(timer_id)
        if purpose is not None:
            stuck = purpose == "request" and self.active and bool(self.disputes)
            if stuck or (purpose == "view_change" and not self.active):
                self.view_changes.start(self.view + 1)
            elif purpose == "retransmit":
                self._retransmit()
        return self._finish()

    def resume(self) -> list[Action]:
        """After a restart from stable storage: start the timers and re-send this replica's
        own latest messages (the peers answer what it missed while it was down)."""
        self._out = []
        if self._unsettled():
            self._retransmit()
        return self._finish()

    def learn(self, certificate: CommitCertificate) -> list[Action]:
        """Accept a decision observed elsewhere (e.g. on-chain) after verifying it."""
        self._out = []
        certificate.verify(self.committee, self.domain)
        key = certificate.key
        if key not in self.decided:
            self.record_decision(key, Decided(0, certificate.faulty, certificate, None))
        return self._finish()

    def _dispatch(self, msg: Message) -> None:
        if isinstance(msg, PrePrepare):
            self.ordering.on_pre_prepare(msg)
        elif isinstance(msg, Prepare):
            self.ordering.on_prepare(msg)
        elif isinstance(msg, Commit):
            self.ordering.on_commit(msg)
        elif isinstance(msg, Checkpoint):
            self.checkpoints.on_checkpoint(msg)
        elif isinstance(msg, ViewChange):
            self.view_changes.on_view_change(msg)
        elif isinstance(msg, NewView):
            self.view_changes.on_new_view(msg)
        elif isinstance(msg, CommitProof):
            self.catchup.on_commit_proof(msg)
        elif isinstance(msg, Fetch):
            self.catchup.on_fetch(msg)
        else:  # pragma: no cover - the Message union is closed
            raise ConsensusError(f"unknown message {type(msg).__name__}")

    # ---- timers ---------------------------------------------------------------------------

    def _finish(self) -> list[Action]:
        self._maintain_timers()
        out, self._out = self._out, []
        if self.unsaved:
            self.unsaved = False
            if self.config.stable_storage:
                out.insert(0, Persist(snapshot(self)))
        return out

    def _unsettled(self) -> bool:
        return bool(
            self.disputes
            or self.catchup.gap
            or not self.active
            or self.checkpoints.unstable()
            or self.ordering.in_flight()
        )

    def _maintain_timers(self) -> None:
        if self.active and self.disputes and not self.has_timer("request"):
            self.set_timer("request", self._backoff(self.config.request_timeout))
        if not self.disputes and self.has_timer("request"):
            self.cancel_timer("request")
        if not self.has_timer("retransmit") and self._unsettled():
            self.set_timer("retransmit", self.config.retransmit_interval)

    def _retransmit(self) -> None:
        """While work is unfinished, every service re-sends its own latest messages."""
        if not self._unsettled():
            return
        self.stats["retransmissions"] += 1
        self.view_changes.retransmit()
        self.ordering.retransmit(self.view_changes.new_view)
        unstable = self.checkpoints.retransmit()
        self.catchup.retransmit(unstable)

    # ---- read-only views ------------------------------------------------------------------

    @property
    def pending(self) -> tuple[Instance, ...]:
        """Disputes observed and not decided yet."""
        return tuple(self.disputes.values())

    def decision(self, key: InstanceKey) -> tuple[bool, CommitCertificate] | None:
        d = self.decided.get(key)
        return None if d is None else (d.faulty, d.certificate)

    def matching_commits(
        self, key: InstanceKey, faulty: bool, view: int
    ) -> tuple[tuple[str, bytes], ...]:
        """Every verified commit this replica holds for ``key`` with this verdict and view, as
        ``(signer address, signature)``: the certificate a decision carried plus commits that
        arrived after it (they stay in the log until the next stable checkpoint)."""
        bucket = self.ordering.commits.get(key, {})
        return tuple(
            (self.committee[m.sender], m.signature)
            for m in bucket.values()
            if m.faulty == faulty and m.view == view
        )

    def log_size(self) -> int:
        """Number of protocol messages held (bounded by n, K, L; not by history)."""
        size = len(self.stable_proof) + len(self.catchup.ready)
        size += sum(1 + len(c.prepares) for c in self.prepared.values())
        size += sum(1 + len(p.prepares) + len(p.commits) for p in self.proofs.values())
        size += self.ordering.log_size() + self.checkpoints.log_size()
        return size + self.view_changes.log_size()

    def status(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "view": self.view,
            "active": self.active,
            "low_water": self.h,
            "last_executed": self.last_executed,
            "pending": len(self.disputes),
            "decided": len(self.decided),
            "log_size": self.log_size(),
            "evidence": len(self.evidence),
            **self.stats,
        }

    # White-box names the unit tests inspect (tests/test_pbft_replica.py).
    @property
    def _slots(self) -> dict[int, Slot]:
        return self.ordering.slots

    @property
    def _commits(self) -> dict[InstanceKey, dict[int, Commit]]:
        return self.ordering.commits

    @property
    def _prepared(self) -> dict[int, PreparedCert]:
        return self.prepared

    @property
    def _decided(self) -> dict[InstanceKey, Decided]:
        return self.decided

    @property
    def _new_view(self) -> NewView | None:
        return self.view_changes.new_view
