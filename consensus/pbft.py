"""PBFT (Castro & Liskov, OSDI '99) for dispute votes, as a pure state machine.

A :class:`Replica` never does I/O, reads a clock or starts a thread. Drivers (``memnet`` for
simulation, ``tcp`` for real processes) feed it ``start(instance)``, ``on_message(msg)`` and
``on_timer(timer_id)`` and carry out the returned actions: :class:`Send`, :class:`Broadcast`,
:class:`SetTimer`, :class:`CancelTimer` and :class:`Decide`.

What is agreed: for each dispute instance (task, chain, round, attempt, aggregate digest) the
verdict ``faulty``. Replicas run a sequence of instances with sequence numbers 1, 2, ... The
primary of view ``v`` is ``committee[v mod n]``; it proposes its own re-execution verdict and a
backup votes for a fresh proposal only if it equals its own ``validate(instance)`` verdict.

Protocol summary (details and the safety argument are in ``docs/pbft.md``):

* normal case: PRE-PREPARE(v, s, instance, verdict) from the primary; every replica that
  accepts it (the primary included) broadcasts PREPARE; a replica is *prepared* with the
  pre-prepare and ``n - f`` matching prepares, then broadcasts COMMIT (the signed on-chain
  ``DisputeVerdict``); with ``n - f`` matching commits it is *committed-local* and executes
  sequence numbers in order, emitting :class:`Decide` with the commit certificate.
* one dispute in flight: a fresh proposal for ``s`` is voted on only once ``s - 1`` has been
  executed, so the new primary's re-issued proposals never leave gaps and no null requests are
  needed (disputes are rare; pipelining buys nothing).
* view change with prepared certificates, NEW-VIEW with ``n - f`` view-changes and the
  re-issued pre-prepares, exponential back-off of the view-change and request timers, and the
  ``f + 1`` rule to join a view change that a correct replica started; the view-change timer
  starts only once ``n - f`` view-changes for the new view are in (PBFT's rule against
  replicas leap-frogging views on their own).
* checkpoints every ``K`` executed sequence numbers, stable with ``n - f`` matching messages;
  the log below the low-water mark is garbage-collected and proposals are bounded by the high
  water mark ``h + L``.
* recovery of lagging replicas: periodic retransmission of a replica's own messages while it
  has unfinished work; a replica that sees a retransmission for something it already executed
  answers with a :class:`~consensus.messages.CommitProof` (or its stable checkpoint proof), so
  the lagging replica executes, or fast-forwards, without trusting any single peer; after a
  fast-forward it asks for the skipped decisions with :class:`~consensus.messages.Fetch`.
* duplicates are ignored; two different signed messages from one sender for the same slot are
  recorded as :class:`Evidence` and the later one is ignored.

Byzantine behaviours used by tests and experiments (:class:`SilentReplica`,
:class:`LyingVoter`, :class:`EquivocatingPrimary`, :class:`DoubleVoter`,
:class:`RandomByzantine`) live at the end.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeAlias

from eth_account.signers.local import LocalAccount
from eth_hash.auto import keccak

from consensus.certificate import CommitCertificate
from consensus.messages import (
    GENESIS_STATE_DIGEST,
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
    SignedT,
    ViewChange,
    checksum_address,
    sign,
    verify_signer,
)
from consensus.quorums import commit_quorum, max_faulty, weak_quorum
from protocol.errors import ConsensusError

__all__ = [
    "Action",
    "Broadcast",
    "CancelTimer",
    "Decide",
    "DoubleVoter",
    "EquivocatingPrimary",
    "Evidence",
    "LyingVoter",
    "NewViewPlan",
    "Node",
    "RandomByzantine",
    "Replica",
    "ReplicaConfig",
    "Send",
    "SetTimer",
    "SilentReplica",
    "compute_new_view",
    "state_transition",
]


# --------------------------------------------------------------------------------------------
# Configuration, actions, evidence
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaConfig:
    """Protocol parameters. Durations are in abstract time units (memnet: ticks; tcp: scaled).

    ``checkpoint_interval`` is K, ``log_window`` is L (high-water mark = h + L, L >= K).
    Timeouts back off as ``timeout * 2**min(k, max_backoff_exponent)`` where ``k`` counts view
    changes since the last executed sequence number.
    """

    checkpoint_interval: int = 4
    log_window: int = 8
    request_timeout: float = 40.0
    view_change_timeout: float = 40.0
    retransmit_interval: float = 15.0
    max_backoff_exponent: int = 6
    history_limit: int = 1024
    catchup_limit: int = 64
    max_evidence: int = 256
    record_trace: bool = False

    def __post_init__(self) -> None:
        if self.checkpoint_interval < 1 or self.log_window < self.checkpoint_interval:
            raise ConsensusError("need checkpoint_interval >= 1 and log_window >= it")
        if min(self.request_timeout, self.view_change_timeout, self.retransmit_interval) <= 0:
            raise ConsensusError("timeouts must be positive")
        if self.max_backoff_exponent < 0 or self.history_limit < 1 or self.catchup_limit < 1:
            raise ConsensusError("invalid limits")


@dataclass(frozen=True)
class Send:
    """Deliver ``msg`` to replica ``to``."""

    to: int
    msg: Message


@dataclass(frozen=True)
class Broadcast:
    """Deliver ``msg`` to every other replica (a replica processes its own messages itself)."""

    msg: Message


@dataclass(frozen=True)
class SetTimer:
    """Call ``on_timer(timer_id)`` after ``delay`` time units (ids are never reused)."""

    timer_id: str
    delay: float


@dataclass(frozen=True)
class CancelTimer:
    timer_id: str


@dataclass(frozen=True)
class Decide:
    """The instance committed with verdict ``faulty``; ``certificate`` goes on-chain.

    ``seq`` is the sequence number it executed at (known from the commit proof if the replica
    learned the decision while catching up).
    """

    instance: Instance
    faulty: bool
    certificate: CommitCertificate
    seq: int


Action: TypeAlias = Send | Broadcast | SetTimer | CancelTimer | Decide


@dataclass(frozen=True)
class Evidence:
    """Two conflicting messages signed by one replica (``kind`` names the slot type).

    ``commit`` evidence is two ``DisputeVerdict`` signatures for the same dispute and view with
    different verdicts: checkable on-chain, hence slashable.
    """

    kind: str
    sender: int
    first: Message
    second: Message


class Node(Protocol):
    """What a network driver needs from a replica (honest, Byzantine or silent)."""

    index: int

    def start(self, instance: Instance) -> list[Action]: ...

    def on_message(self, msg: Message) -> list[Action]: ...

    def on_timer(self, timer_id: str) -> list[Action]: ...


# --------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------


def state_transition(prev: bytes, seq: int, key: InstanceKey, faulty: bool) -> bytes:
    """Rolling state digest: ``keccak256(prev ‖ seq ‖ round ‖ attempt ‖ digest ‖ faulty)``."""
    r, a, d = key
    return keccak(
        prev
        + seq.to_bytes(32, "big")
        + r.to_bytes(32, "big")
        + a.to_bytes(32, "big")
        + d
        + (b"\x01" if faulty else b"\x00")
    )


@dataclass(frozen=True)
class NewViewPlan:
    """What a NEW-VIEW must contain, computed deterministically from its view-changes."""

    min_seq: int
    stable_source: ViewChange
    proposals: tuple[tuple[int, InstanceKey, bool], ...]


def compute_new_view(view_changes: Sequence[ViewChange]) -> NewViewPlan:
    """PBFT's ``O`` set: the latest stable checkpoint and, above it, for every sequence number
    with a prepared certificate, the proposal of the certificate from the highest view.

    With one dispute in flight there are no gaps between ``min_seq`` and the highest
    certificate (a fresh proposal for ``s`` needs ``s - 1`` committed), so no null requests.
    """
    if not view_changes:
        raise ConsensusError("a new view needs view-changes")
    source = view_changes[0]
    for vc in view_changes[1:]:
        if vc.stable_seq > source.stable_seq:
            source = vc
    min_seq = source.stable_seq
    best: dict[int, PrePrepare] = {}
    for vc in view_changes:
        for cert in vc.prepared:
            pp = cert.pre_prepare
            if pp.seq <= min_seq:
                continue
            cur = best.get(pp.seq)
            if cur is None or (pp.view, pp.faulty, pp.key) > (cur.view, cur.faulty, cur.key):
                best[pp.seq] = pp
    proposals = tuple((s, best[s].key, best[s].faulty) for s in sorted(best))
    return NewViewPlan(min_seq, source, proposals)


@dataclass
class _Slot:
    """Log entry for one sequence number in the current view."""

    pre_prepare: PrePrepare | None = None
    prepares: dict[int, Prepare] = field(default_factory=dict)
    reissued: bool = False
    disagreed: bool = False
    own_prepare: Prepare | None = None
    own_commit: Commit | None = None
    cert: PreparedCert | None = None
    commit_msgs: tuple[Commit, ...] = ()
    committed: bool = False


@dataclass
class _Proof:
    """Everything needed to prove an executed sequence number to a lagging replica."""

    pre_prepare: PrePrepare
    prepares: tuple[Prepare, ...]
    commits: tuple[Commit, ...]
    signed: CommitProof | None = None


@dataclass
class _Decided:
    seq: int  # 0 if learned from a bare certificate
    faulty: bool
    certificate: CommitCertificate
    proof: _Proof | None


# --------------------------------------------------------------------------------------------
# The replica
# --------------------------------------------------------------------------------------------


class Replica:
    """One committee member's PBFT state machine (pure: see the module docstring).

    ``committee`` lists member addresses in on-chain registration order; ``account`` must be
    ``committee[index]``'s key; ``validate(instance)`` is this replica's own re-execution
    verdict (True: the aggregate is faulty). It is called at most once per instance unless it
    raises (then the replica abstains and asks again later).
    """

    def __init__(
        self,
        index: int,
        committee: Sequence[str],
        account: LocalAccount,
        domain: Domain,
        validate: Callable[[Instance], bool],
        config: ReplicaConfig | None = None,
    ) -> None:
        members = tuple(checksum_address(a) for a in committee)
        if len(set(members)) != len(members) or not members:
            raise ConsensusError("committee must be non-empty without duplicates")
        if not 0 <= index < len(members):
            raise ConsensusError(f"index {index} outside a committee of {len(members)}")
        if account.address != members[index]:
            raise ConsensusError("account is not the committee member at this index")
        self.index = index
        self.committee = members
        self.account = account
        self.domain = domain
        self.validate = validate
        self.config = config or ReplicaConfig()
        self.n = len(members)
        self.f = max_faulty(self.n)
        self.quorum = commit_quorum(self.n)
        self.weak = weak_quorum(self.n)
        self.K = self.config.checkpoint_interval
        self.L = self.config.log_window

        self.view = 0
        self.active = True  # False while changing to ``self.view``
        self.h = 0  # low-water mark = last stable checkpoint
        self.stable_digest = GENESIS_STATE_DIGEST
        self.stable_proof: tuple[Checkpoint, ...] = ()
        self.last_executed = 0
        self.state_digest = GENESIS_STATE_DIGEST

        self._executed: dict[int, tuple[InstanceKey, bool]] = {}
        self._own_checkpoints: dict[int, Checkpoint] = {}
        self._slots: dict[int, _Slot] = {}
        self._slot_of: dict[InstanceKey, int] = {}
        self._commits: dict[InstanceKey, dict[int, Commit]] = {}
        self._prepared: dict[int, PreparedCert] = {}
        self._proofs: dict[int, _Proof] = {}
        self._checkpoints: dict[int, dict[int, Checkpoint]] = {}
        self._late: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._view_changes: dict[int, dict[int, ViewChange]] = {}  # view -> sender -> msg
        self._own_vc: ViewChange | None = None
        self._new_view: NewView | None = None
        self._catchup: dict[int, CommitProof] = {}
        self._gap: set[int] = set()  # seqs skipped by a state transfer, decisions unknown
        self._fetch: Fetch | None = None
        self._fetch_tries = 0
        self._vc_valid: OrderedDict[bytes, bool] = OrderedDict()

        self._pending: dict[InstanceKey, Instance] = {}
        self._verdicts: dict[InstanceKey, bool] = {}
        self._tries: dict[InstanceKey, int] = {}  # view changes while the instance was in flight
        self._decided: OrderedDict[InstanceKey, _Decided] = OrderedDict()

        self._timers: dict[str, str] = {}
        self._in_progress = False
        self._dirty = False
        self._timer_gen = 0
        self._vc_attempts = 0
        self._vc_backoff = self.config.view_change_timeout
        self._out: list[Action] = []

        self.evidence: list[Evidence] = []
        self._evidence_slots: set[tuple[Any, ...]] = set()
        self.trace: list[tuple[int, InstanceKey, bool]] = []
        self.stats: dict[str, int] = {
            "rejected": 0,
            "duplicates": 0,
            "view_changes": 0,
            "new_views": 0,
            "executed": 0,
            "decided": 0,
            "state_transfers": 0,
            "catchup_executions": 0,
            "retransmissions": 0,
            "disagreements": 0,
            "divergences": 0,
        }
        self.last_rejection: str = ""

    # ---- public API ---------------------------------------------------------------------

    def primary(self, view: int) -> int:
        return view % self.n

    @property
    def is_primary(self) -> bool:
        return self.primary(self.view) == self.index

    def start(self, instance: Instance) -> list[Action]:
        """This replica has observed the dispute (e.g. the on-chain challenge event)."""
        if not instance.matches(self.domain):
            raise ConsensusError("instance belongs to another task or chain than this replica")
        self._out = []
        key = instance.key
        if key not in self._decided and key not in self._pending:
            self._pending[key] = instance
            self._verdict(key)
            self._progress()
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
        purpose = next((p for p, t in self._timers.items() if t == timer_id), None)
        if purpose is not None:
            del self._timers[purpose]
            stuck = purpose == "request" and self.active and bool(self._pending)
            if stuck or (purpose == "view_change" and not self.active):
                self._start_view_change(self.view + 1)
            elif purpose == "retransmit":
                self._retransmit()
        return self._finish()

    def learn(self, certificate: CommitCertificate) -> list[Action]:
        """Accept a decision observed elsewhere (e.g. on-chain) after verifying it."""
        self._out = []
        certificate.verify(self.committee, self.domain)
        key = certificate.key
        if key not in self._decided:
            self._record_decision(key, _Decided(0, certificate.faulty, certificate, None))
        return self._finish()

    @property
    def pending(self) -> tuple[Instance, ...]:
        return tuple(self._pending.values())

    def decision(self, key: InstanceKey) -> tuple[bool, CommitCertificate] | None:
        d = self._decided.get(key)
        return None if d is None else (d.faulty, d.certificate)

    def log_size(self) -> int:
        """Number of protocol messages held (bounded by n, K, L; not by history)."""
        size = len(self.stable_proof) + len(self._catchup)
        size += sum(len(b) for b in self._view_changes.values())
        for slot in self._slots.values():
            size += (slot.pre_prepare is not None) + len(slot.prepares) + len(slot.commit_msgs)
        size += sum(len(b) for b in self._commits.values())
        size += sum(len(b) for b in self._checkpoints.values())
        size += sum(1 + len(c.prepares) for c in self._prepared.values())
        size += sum(1 + len(p.prepares) + len(p.commits) for p in self._proofs.values())
        return size

    def status(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "view": self.view,
            "active": self.active,
            "low_water": self.h,
            "last_executed": self.last_executed,
            "pending": len(self._pending),
            "decided": len(self._decided),
            "log_size": self.log_size(),
            "evidence": len(self.evidence),
            **self.stats,
        }

    # ---- plumbing -------------------------------------------------------------------------

    def _finish(self) -> list[Action]:
        self._maintain_timers()
        out, self._out = self._out, []
        return out

    def _sign(self, msg: SignedT) -> SignedT:
        return sign(msg, self.account, self.domain)

    def _broadcast(self, msg: Message) -> None:
        self._out.append(Broadcast(msg))

    def _send(self, to: int, msg: Message) -> None:
        if to != self.index:
            self._out.append(Send(to, msg))

    def _verify(self, msg: Message) -> None:
        verify_signer(msg, self.committee, self.domain)

    def _record_evidence(self, kind: str, slot: Any, first: Message, second: Message) -> None:
        tag = (kind, first.sender, slot)
        if tag in self._evidence_slots or len(self.evidence) >= self.config.max_evidence:
            return
        try:
            self._verify(second)
        except ConsensusError:
            return  # an unsigned forgery is not evidence against the claimed sender
        self._evidence_slots.add(tag)
        self.evidence.append(Evidence(kind, first.sender, first, second))

    def _set_timer(self, purpose: str, delay: float) -> None:
        self._cancel_timer(purpose)
        self._timer_gen += 1
        tid = f"{purpose}:{self.index}:{self._timer_gen}"
        self._timers[purpose] = tid
        self._out.append(SetTimer(tid, delay))

    def _cancel_timer(self, purpose: str) -> None:
        tid = self._timers.pop(purpose, None)
        if tid is not None:
            self._out.append(CancelTimer(tid))

    def _backoff(self, base: float) -> float:
        return base * float(1 << min(self._vc_attempts, self.config.max_backoff_exponent))

    def _restart_request_timer(self) -> None:
        self._cancel_timer("request")
        if self.active and self._pending:
            self._set_timer("request", self._backoff(self.config.request_timeout))

    def _unsettled(self) -> bool:
        return bool(
            self._pending
            or self._gap
            or not self.active
            or any(s > self.h for s in self._own_checkpoints)
            or any(
                s > self.last_executed and sl.pre_prepare is not None
                for s, sl in self._slots.items()
            )
        )

    def _maintain_timers(self) -> None:
        if self.active and self._pending and "request" not in self._timers:
            self._set_timer("request", self._backoff(self.config.request_timeout))
        if not self._pending and "request" in self._timers:
            self._cancel_timer("request")
        if "retransmit" not in self._timers and self._unsettled():
            self._set_timer("retransmit", self.config.retransmit_interval)

    def _verdict(self, key: InstanceKey) -> bool | None:
        v = self._verdicts.get(key)
        if v is None and key in self._pending:
            try:
                out = self.validate(self._pending[key])
            except Exception:  # the node's re-execution failed: abstain, retry later
                return None
            if not isinstance(out, bool):
                return None
            self._verdicts[key] = v = out
        return v

    def _dispatch(self, msg: Message) -> None:
        if isinstance(msg, PrePrepare):
            self._on_pre_prepare(msg)
        elif isinstance(msg, Prepare):
            self._on_prepare(msg)
        elif isinstance(msg, Commit):
            self._on_commit(msg)
        elif isinstance(msg, Checkpoint):
            self._on_checkpoint(msg)
        elif isinstance(msg, ViewChange):
            self._on_view_change(msg)
        elif isinstance(msg, NewView):
            self._on_new_view(msg)
        elif isinstance(msg, CommitProof):
            self._on_commit_proof(msg)
        elif isinstance(msg, Fetch):
            self._on_fetch(msg)
        else:  # pragma: no cover - the Message union is closed
            raise ConsensusError(f"unknown message {type(msg).__name__}")

    def _progress(self) -> None:
        """Execute what is committed, vote on what is now votable, propose if primary.

        Re-entrant calls (a vote completing a quorum, say) only mark the work dirty; the
        outermost call loops until nothing changes, so the call depth stays bounded.
        """
        if self._in_progress:
            self._dirty = True
            return
        self._in_progress = True
        try:
            while True:
                self._dirty = False
                self._try_execute()
                for s in sorted(self._slots):
                    self._try_vote(s)
                self._try_propose()
                if not self._dirty:
                    break
        finally:
            self._in_progress = False

    def _retransmitted(self, tag: tuple[Any, ...]) -> bool:
        """True the second time ``tag`` is seen (a retransmission); remembers a bounded set."""
        if tag in self._late:
            return True
        self._late[tag] = None
        if len(self._late) > 16 * self.n:
            self._late.popitem(last=False)
        return False

    def _in_window(self, seq: int) -> bool:
        return self.h < seq <= self.h + self.L

    # ---- normal case ----------------------------------------------------------------------

    def _try_propose(self) -> None:
        if not self.active or not self.is_primary:
            return
        s = self.last_executed + 1
        if not self._in_window(s):
            return
        if any(q > self.last_executed and sl.pre_prepare for q, sl in self._slots.items()):
            return  # one dispute in flight
        # Least-tried first, then in order of arrival: a dispute the committee cannot agree on
        # (honest re-executions differ) must not block the ones after it forever.
        order = sorted(enumerate(self._pending), key=lambda e: (self._tries.get(e[1], 0), e[0]))
        for _, key in order:
            if key in self._decided or key in self._slot_of:
                continue
            verdict = self._verdict(key)
            if verdict is None:
                continue
            pp = self._sign(PrePrepare(self.view, s, *key, verdict, self.index))
            slot = self._slots.setdefault(s, _Slot())
            slot.pre_prepare = pp
            self._slot_of[key] = s
            self._broadcast(pp)
            self._try_vote(s)
            return

    def _on_pre_prepare(self, m: PrePrepare) -> None:
        if m.view != self.view or not self.active or not self._in_window(m.seq):
            return
        slot = self._slots.get(m.seq)
        if slot is not None and slot.pre_prepare is not None:
            if slot.pre_prepare == m:
                self.stats["duplicates"] += 1
                self._help_seq(m.sender, m.seq)
            else:
                self._record_evidence("pre-prepare", (m.view, m.seq), slot.pre_prepare, m)
            return
        if m.sender != self.primary(m.view):
            raise ConsensusError("pre-prepare from a replica that is not the primary")
        self._verify(m)
        if m.seq <= self.last_executed or m.key in self._decided:
            return
        other = self._slot_of.get(m.key)
        if other is not None and other != m.seq:
            other_pp = self._slots[other].pre_prepare
            if other_pp is not None:
                self._record_evidence("duplicate-instance", (m.view, m.key), other_pp, m)
            return
        slot = self._slots.setdefault(m.seq, _Slot())
        slot.pre_prepare = m
        self._slot_of[m.key] = m.seq
        self._try_vote(m.seq)
        self._check_prepared(m.seq)

    def _try_vote(self, seq: int) -> None:
        slot = self._slots.get(seq)
        if slot is None or slot.pre_prepare is None or slot.own_prepare is not None:
            return
        if not self.active:
            return
        pp = slot.pre_prepare
        if not slot.reissued:
            # fresh proposal: one in flight, dispute observed, own verdict must agree
            if seq != self.last_executed + 1 or pp.key in self._decided:
                return
            if pp.key not in self._pending:
                return
            verdict = self._verdict(pp.key)
            if verdict is None:
                return
            if verdict != pp.faulty:
                if not slot.disagreed:
                    slot.disagreed = True
                    self.stats["disagreements"] += 1
                return
        p = self._sign(Prepare(pp.view, pp.seq, *pp.key, pp.faulty, self.index))
        slot.own_prepare = p
        slot.prepares[self.index] = p
        self._broadcast(p)
        self._check_prepared(seq)

    def _on_prepare(self, m: Prepare) -> None:
        if m.view == self.view and m.seq <= self.h:
            if self._retransmitted(("prepare", m.sender, m.view, m.seq)):
                self._help_seq(m.sender, m.seq)
            return
        if m.view != self.view or not self._in_window(m.seq):
            return
        slot = self._slots.setdefault(m.seq, _Slot())
        prev = slot.prepares.get(m.sender)
        if prev is not None:
            if prev == m:
                self.stats["duplicates"] += 1
                self._help_seq(m.sender, m.seq)
            else:
                self._record_evidence("prepare", (m.view, m.seq), prev, m)
            return
        self._verify(m)
        slot.prepares[m.sender] = m
        self._check_prepared(m.seq)

    def _check_prepared(self, seq: int) -> None:
        slot = self._slots.get(seq)
        if slot is None or slot.pre_prepare is None:
            return
        pp = slot.pre_prepare
        if slot.cert is None:
            matching = sorted(
                (p for p in slot.prepares.values() if p.content == pp.content),
                key=lambda p: p.sender,
            )
            if len(matching) < self.quorum:
                return
            slot.cert = PreparedCert(pp, tuple(matching[: self.quorum]))
            cur = self._prepared.get(seq)
            if cur is None or cur.view <= pp.view:
                self._prepared[seq] = slot.cert
        if slot.own_prepare is not None and slot.own_commit is None and self.active:
            c = self._sign(Commit(*pp.key, pp.faulty, pp.view, self.index))
            slot.own_commit = c
            self._commits.setdefault(pp.key, {})[self.index] = c
            self._broadcast(c)
        self._check_committed(seq)

    def _on_commit(self, m: Commit) -> None:
        if m.view != self.view:
            return
        bucket = self._commits.get(m.key)
        prev = None if bucket is None else bucket.get(m.sender)
        if prev is not None:
            if prev == m:
                self.stats["duplicates"] += 1
                seq = self._slot_of.get(m.key)
                if seq is None and m.key in self._decided:
                    seq = self._decided[m.key].seq
                if seq is not None:
                    self._help_seq(m.sender, seq)
            else:
                self._record_evidence("commit", (m.view, m.key), prev, m)
            return
        if m.key in self._decided and m.key not in self._slot_of:
            if self._retransmitted(("commit", m.sender, m.view, m.key)):
                self._help_decided(m.sender, m.key)
            return
        if bucket is None:
            held = sum(
                1 for k, b in self._commits.items() if m.sender in b and k not in self._decided
            )
            if held > self.L:
                return  # per-sender quota on commits for not-yet-proposed instances
        self._verify(m)
        self._commits.setdefault(m.key, {})[m.sender] = m
        seq = self._slot_of.get(m.key)
        if seq is not None:
            self._check_committed(seq)

    def _check_committed(self, seq: int) -> None:
        slot = self._slots.get(seq)
        if slot is None or slot.committed or slot.cert is None or slot.pre_prepare is None:
            return
        pp = slot.pre_prepare
        bucket = self._commits.get(pp.key, {})
        matching = sorted(
            (c for c in bucket.values() if c.faulty == pp.faulty and c.view == pp.view),
            key=lambda c: c.sender,
        )
        if len(matching) >= self.quorum:
            slot.committed = True
            slot.commit_msgs = tuple(matching[: self.quorum])
            self._progress()

    # ---- execution, decisions -------------------------------------------------------------

    def _try_execute(self) -> None:
        progressed = False
        while True:
            s = self.last_executed + 1
            if not self._in_window(s):
                break
            slot = self._slots.get(s)
            if slot is not None and slot.committed and slot.pre_prepare and slot.cert:
                self._execute(s, _Proof(slot.pre_prepare, slot.cert.prepares, slot.commit_msgs))
            elif s in self._catchup:
                cp = self._catchup.pop(s)
                self.stats["catchup_executions"] += 1
                self._execute(s, _Proof(cp.pre_prepare, cp.prepares, cp.commits))
            else:
                break
            progressed = True
        if progressed:
            self._vc_attempts = 0
            self._restart_request_timer()

    def _execute(self, seq: int, proof: _Proof) -> None:
        pp = proof.pre_prepare
        self.state_digest = state_transition(self.state_digest, seq, pp.key, pp.faulty)
        self.last_executed = seq
        self._executed[seq] = (pp.key, pp.faulty)
        self._proofs[seq] = proof
        self.stats["executed"] += 1
        if self.config.record_trace:
            self.trace.append((seq, pp.key, pp.faulty))
        if pp.key not in self._decided:
            self._decide(seq, proof)
        if seq % self.K == 0:
            c = self._sign(Checkpoint(seq, self.state_digest, self.index))
            self._own_checkpoints[seq] = c
            self._checkpoints.setdefault(seq, {})[self.index] = c
            self._broadcast(c)
            self._check_stable(seq)

    def _decide(self, seq: int, proof: _Proof) -> None:
        pp = proof.pre_prepare
        cert = CommitCertificate.from_commits(proof.commits, self.committee)
        self._record_decision(pp.key, _Decided(seq, pp.faulty, cert, proof))

    def _record_decision(self, key: InstanceKey, entry: _Decided) -> None:
        self._decided[key] = entry
        while len(self._decided) > self.config.history_limit:
            self._decided.popitem(last=False)
        inst = self._pending.pop(key, None) or Instance.in_domain(self.domain, key)
        self._verdicts.pop(key, None)
        self._tries.pop(key, None)
        self.stats["decided"] += 1
        self._out.append(Decide(inst, entry.faulty, entry.certificate, entry.seq))

    # ---- checkpoints and garbage collection -------------------------------------------------

    def _on_checkpoint(self, m: Checkpoint) -> None:
        if m.seq == 0 or m.seq % self.K:
            raise ConsensusError("checkpoint at a sequence number that is not a multiple of K")
        if m.seq <= self.h:
            # Never answer a checkpoint with anything: checkpoints are relayed inside stable
            # proofs, so the signer is not necessarily who sent it (answering would amplify).
            # A replica whose checkpoint does not become stable asks with FETCH instead.
            return
        prev = self._checkpoints.get(m.seq, {}).get(m.sender)
        if prev is not None:
            if prev == m:
                self.stats["duplicates"] += 1
            else:
                self._record_evidence("checkpoint", m.seq, prev, m)
            return
        self._verify(m)
        if m.seq > self.h + self.L:
            # far ahead of us: keep only the sender's highest such checkpoint (bounded memory)
            for s in [s for s in self._checkpoints if s > self.h + self.L and s != m.seq]:
                old = self._checkpoints[s].get(m.sender)
                if old is not None:
                    if s > m.seq:
                        return
                    del self._checkpoints[s][m.sender]
        self._checkpoints.setdefault(m.seq, {})[m.sender] = m
        self._check_stable(m.seq)
        self._progress()

    def _check_stable(self, seq: int) -> None:
        if seq <= self.h:
            return
        groups: dict[bytes, list[Checkpoint]] = {}
        for c in self._checkpoints.get(seq, {}).values():
            groups.setdefault(c.state_digest, []).append(c)
        for digest, group in groups.items():
            if len(group) >= self.quorum:
                proof = tuple(sorted(group, key=lambda c: c.sender)[: self.quorum])
                self._adopt_stable(seq, digest, proof)
                return

    def _adopt_stable(self, seq: int, digest: bytes, proof: tuple[Checkpoint, ...]) -> None:
        if seq <= self.h:
            return
        if seq <= self.last_executed:
            own = self._own_checkpoints.get(seq)
            if own is not None and own.state_digest != digest:
                self.stats["divergences"] += 1
        else:
            # state transfer: a quorum vouches for the state digest at ``seq``; ask peers for
            # the commit proofs of the skipped sequence numbers to learn their decisions
            lo = max(self.last_executed + 1, seq - self.config.catchup_limit + 1)
            self._gap.update(range(lo, seq + 1))
            self.last_executed = seq
            self.state_digest = digest
            self.stats["state_transfers"] += 1
            self._request_gap()
        self.h = seq
        self.stable_digest = digest
        self.stable_proof = proof
        for d in (self._prepared, self._proofs, self._executed, self._catchup):
            for s in [s for s in d if s <= seq]:
                del d[s]
        for s in [s for s in self._own_checkpoints if s < seq]:
            del self._own_checkpoints[s]
        for s in [s for s in self._checkpoints if s <= seq]:
            del self._checkpoints[s]
        for s in [s for s in self._slots if s <= seq]:
            slot = self._slots.pop(s)
            if slot.pre_prepare is not None and self._slot_of.get(slot.pre_prepare.key) == s:
                del self._slot_of[slot.pre_prepare.key]
        for k in [k for k in self._commits if k in self._decided and k not in self._slot_of]:
            del self._commits[k]

    # ---- view change ----------------------------------------------------------------------

    def _start_view_change(self, new_view: int) -> None:
        if new_view <= self.view:
            return
        self.stats["view_changes"] += 1
        for s, slot in self._slots.items():
            if s > self.last_executed and slot.pre_prepare is not None:
                key = slot.pre_prepare.key
                if key in self._pending:
                    self._tries[key] = self._tries.get(key, 0) + 1
        self.view = new_view
        self.active = False
        self._new_view = None
        self._slots.clear()
        self._slot_of.clear()
        self._commits.clear()
        self._cancel_timer("request")
        prepared = tuple(self._prepared[s] for s in sorted(self._prepared) if s > self.h)
        vc = self._sign(
            ViewChange(
                new_view, self.h, self.stable_digest, self.stable_proof, prepared, self.index
            )
        )
        self._own_vc = vc
        for v in [v for v in self._view_changes if v < new_view]:
            del self._view_changes[v]
        self._view_changes.setdefault(new_view, {})[self.index] = vc
        self._broadcast(vc)
        self._cancel_timer("view_change")
        self._vc_backoff = self._backoff(self.config.view_change_timeout)
        self._vc_attempts += 1
        self._maybe_start_view_change_timer()
        self._try_new_view()

    def _maybe_start_view_change_timer(self) -> None:
        """PBFT starts the new view's timer only once ``n - f`` view-changes for it are in:
        a replica that is ahead of the others then waits for them instead of timing out
        again and again on its own (leapfrogging views), while the ``f + 1`` rule pulls
        laggards up."""
        if self.active or "view_change" in self._timers:
            return
        if len(self._view_changes.get(self.view, {})) >= self.quorum:
            self._set_timer("view_change", self._vc_backoff)

    def _valid_view_change(self, vc: ViewChange) -> bool:
        tag = vc.struct_hash() + vc.signature + vc.sender.to_bytes(4, "big")
        hit = self._vc_valid.get(tag)
        if hit is None:
            try:
                self._check_view_change(vc)
                hit = True
            except ConsensusError as exc:
                self.last_rejection = f"view-change from {vc.sender}: {exc}"
                hit = False
            self._vc_valid[tag] = hit
            if len(self._vc_valid) > 8 * self.n:
                self._vc_valid.popitem(last=False)
        return hit

    def _check_view_change(self, vc: ViewChange) -> None:
        self._verify(vc)
        if vc.stable_seq % self.K:
            raise ConsensusError("stable checkpoint not at a multiple of K")
        if vc.stable_seq == 0:
            if vc.checkpoint_proof or vc.state_digest != GENESIS_STATE_DIGEST:
                raise ConsensusError("genesis checkpoint must have an empty proof")
        else:
            self._check_checkpoint_proof(vc.stable_seq, vc.state_digest, vc.checkpoint_proof)
        last = vc.stable_seq
        for cert in vc.prepared:
            pp = cert.pre_prepare
            if not last < pp.seq <= vc.stable_seq + self.L:
                raise ConsensusError("prepared certificates out of order or outside the window")
            last = pp.seq
            if pp.view >= vc.new_view:
                raise ConsensusError("prepared certificate from a view not before the new one")
            self._check_prepared_cert(pp, cert.prepares)

    def _check_checkpoint_proof(self, seq: int, digest: bytes, proof: Iterable[Checkpoint]) -> None:
        senders = set()
        for c in proof:
            if c.seq != seq or c.state_digest != digest or c.sender in senders:
                raise ConsensusError("checkpoint proof messages do not match")
            self._verify(c)
            senders.add(c.sender)
        if len(senders) < self.quorum:
            raise ConsensusError("checkpoint proof below quorum")

    def _check_prepared_cert(self, pp: PrePrepare, prepares: Iterable[Prepare]) -> None:
        if pp.sender != self.primary(pp.view):
            raise ConsensusError("certificate pre-prepare not from that view's primary")
        self._verify(pp)
        senders = set()
        for p in prepares:
            if p.content != pp.content or p.sender in senders:
                raise ConsensusError("certificate prepares do not match")
            self._verify(p)
            senders.add(p.sender)
        if len(senders) < self.quorum:
            raise ConsensusError("prepared certificate below quorum")

    def _on_view_change(self, m: ViewChange) -> None:
        prev = self._view_changes.get(m.new_view, {}).get(m.sender)
        if prev is not None:
            if prev == m:
                self.stats["duplicates"] += 1
                self._help_view_change(m)
            else:
                self._record_evidence("view-change", m.new_view, prev, m)
            return
        if not self._valid_view_change(m):
            raise ConsensusError("invalid view-change")
        if m.new_view < self.view or (m.new_view == self.view and self.active):
            # the sender is behind us; the new primary answers at once, others on retransmission
            again = self._retransmitted(("view-change", m.sender, m.new_view, m.signature))
            if again or m.new_view < self.view or (self.active and self.is_primary):
                self._help_view_change(m)
            return
        # keep each sender's few highest views (bounded memory against view spam)
        views = sorted(v for v, b in self._view_changes.items() if m.sender in b)
        if len(views) >= 4:
            if views[0] > m.new_view:
                return
            del self._view_changes[views[0]][m.sender]
        self._view_changes.setdefault(m.new_view, {})[m.sender] = m
        # f + 1 rule: join the smallest view that f + 1 others have asked for, past ours
        highest: dict[int, int] = {}
        for v, bucket in self._view_changes.items():
            for sender in bucket:
                if sender != self.index and v > highest.get(sender, -1):
                    highest[sender] = v
        higher = sorted((v for v in highest.values() if v > self.view), reverse=True)
        if len(higher) >= self.weak:
            self._start_view_change(higher[self.weak - 1])
        if not self.active:
            self._maybe_start_view_change_timer()
            self._try_new_view()

    def _try_new_view(self) -> None:
        if self.active or not self.is_primary:
            return
        vcs = sorted(
            self._view_changes.get(self.view, {}).values(),
            key=lambda v: (v.sender != self.index, v.sender),
        )
        if len(vcs) < self.quorum:
            return
        chosen = tuple(vcs[: self.quorum])
        plan = compute_new_view(chosen)
        pps = tuple(
            self._sign(PrePrepare(self.view, s, *key, faulty, self.index))
            for s, key, faulty in plan.proposals
        )
        nv = self._sign(NewView(self.view, chosen, pps, self.index))
        self._broadcast(nv)
        self._install_new_view(nv, plan)

    def _on_new_view(self, m: NewView) -> None:
        if m.view < self.view or (m.view == self.view and self.active):
            if self._new_view is not None and m == self._new_view:
                self.stats["duplicates"] += 1
            return
        if m.view == 0 or m.sender != self.primary(m.view):
            raise ConsensusError("new-view not from the new view's primary")
        self._verify(m)
        senders = set()
        for vc in m.view_changes:
            if vc.new_view != m.view or vc.sender in senders:
                raise ConsensusError("new-view carries mismatched or duplicate view-changes")
            if not self._valid_view_change(vc):
                raise ConsensusError("new-view carries an invalid view-change")
            senders.add(vc.sender)
        if len(senders) < self.quorum:
            raise ConsensusError("new-view below quorum of view-changes")
        plan = compute_new_view(m.view_changes)
        if len(m.pre_prepares) != len(plan.proposals):
            raise ConsensusError("new-view proposals differ from the recomputed set")
        for pp, (s, key, faulty) in zip(m.pre_prepares, plan.proposals, strict=True):
            if pp.content != (m.view, s, key, faulty) or pp.sender != m.sender:
                raise ConsensusError("new-view proposals differ from the recomputed set")
            self._verify(pp)
        self._install_new_view(m, plan)

    def _install_new_view(self, nv: NewView, plan: NewViewPlan) -> None:
        if nv.view != self.view or self.active:
            # jumping straight from an active lower view: drop that view's messages
            self._slots.clear()
            self._slot_of.clear()
            self._commits.clear()
        self.view = nv.view
        self.active = True
        self._new_view = nv
        self._own_vc = None
        self.stats["new_views"] += 1
        self._cancel_timer("view_change")
        self._view_changes = {v: b for v, b in self._view_changes.items() if v > nv.view}
        src = plan.stable_source
        if plan.min_seq > self.h:
            self._adopt_stable(plan.min_seq, src.state_digest, src.checkpoint_proof)
        # messages stored while waiting for this new-view may only be for this view
        for s, slot in list(self._slots.items()):
            if slot.pre_prepare is not None:
                del self._slots[s]
        self._slot_of.clear()
        for pp in nv.pre_prepares:
            if not self._in_window(pp.seq):
                continue
            slot = self._slots.setdefault(pp.seq, _Slot())
            slot.pre_prepare = pp
            slot.reissued = True
            self._slot_of[pp.key] = pp.seq
        self._restart_request_timer()
        for s in sorted(self._slots):
            self._try_vote(s)
            self._check_prepared(s)
        self._progress()

    # ---- lagging replicas -----------------------------------------------------------------

    def _commit_proof(self, proof: _Proof) -> CommitProof:
        if proof.signed is None:
            proof.signed = self._sign(
                CommitProof(proof.pre_prepare, proof.prepares, proof.commits, self.index)
            )
        return proof.signed

    def _send_stable_proof(self, to: int) -> None:
        for c in self.stable_proof:
            self._send(to, c)

    def _proof_at(self, seq: int) -> _Proof | None:
        proof = self._proofs.get(seq)
        if proof is None:
            for d in self._decided.values():
                if d.seq == seq:
                    return d.proof
        return proof

    def _help_seq(self, to: int, seq: int) -> None:
        """``to`` retransmitted a message for ``seq``: if we executed it, prove it to them."""
        if seq > self.last_executed:
            return
        if seq <= self.h:
            self._send_stable_proof(to)
        proof = self._proof_at(seq)
        if proof is not None:
            self._send(to, self._commit_proof(proof))

    def _help_decided(self, to: int, key: InstanceKey) -> None:
        d = self._decided.get(key)
        if d is not None and d.proof is not None:
            if d.seq <= self.h:
                self._send_stable_proof(to)
            self._send(to, self._commit_proof(d.proof))

    def _help_view_change(self, m: ViewChange) -> None:
        """A view-change from behind shows where its sender is: send what it lacks."""
        if self.active and m.new_view <= self.view and self._new_view is not None:
            self._send(m.sender, self._new_view)
        if m.stable_seq < self.h:
            self._send_stable_proof(m.sender)
        proofs: dict[int, _Proof] = {s: p for s, p in self._proofs.items() if s > m.stable_seq}
        for d in reversed(self._decided.values()):
            if len(proofs) >= self.config.catchup_limit:
                break
            if d.seq > m.stable_seq and d.proof is not None:
                proofs.setdefault(d.seq, d.proof)
        for s in sorted(proofs)[: self.config.catchup_limit]:
            self._send(m.sender, self._commit_proof(proofs[s]))

    def _request_gap(self) -> None:
        while len(self._gap) > self.config.catchup_limit:
            self._gap.discard(min(self._gap))
        if not self._gap:
            self._fetch = None
            return
        self._request(min(self._gap), max(self._gap))

    def _request(self, lo: int, hi: int) -> None:
        if self._fetch is None or (self._fetch.from_seq, self._fetch.to_seq) != (lo, hi):
            self._fetch = self._sign(Fetch(lo, hi, self.index))
            self._fetch_tries = 0
        self._broadcast(self._fetch)

    def _on_fetch(self, m: Fetch) -> None:
        """Answer with our stable checkpoint proof (if it covers ``from_seq``) and the commit
        proofs we hold in the range. Answers are never answered, so nothing amplifies."""
        if m.to_seq < m.from_seq:
            raise ConsensusError("empty fetch range")
        self._verify(m)
        if self.h >= m.from_seq:
            self._send_stable_proof(m.sender)
        hi = min(m.to_seq, self.last_executed, m.from_seq + self.config.catchup_limit - 1)
        for seq in range(m.from_seq, hi + 1):
            proof = self._proof_at(seq)
            if proof is not None:
                self._send(m.sender, self._commit_proof(proof))

    def _on_commit_proof(self, m: CommitProof) -> None:
        pp = m.pre_prepare
        known = self._executed.get(pp.seq)
        wanted = pp.seq in self._gap or pp.key not in self._decided
        if not wanted and (known is not None or pp.seq <= self.last_executed):
            if known is not None and known != (pp.key, pp.faulty):
                self._check_commit_proof(m)
                self.stats["divergences"] += 1
            return
        self._check_commit_proof(m)
        self._gap.discard(pp.seq)
        if known is not None and known != (pp.key, pp.faulty):
            self.stats["divergences"] += 1
        proof = _Proof(pp, m.prepares, m.commits)
        cur = self._prepared.get(pp.seq)
        if self._in_window(pp.seq) and (cur is None or cur.view < pp.view):
            self._prepared[pp.seq] = PreparedCert(pp, m.prepares)
        if pp.key not in self._decided:
            self._decide(pp.seq, proof)
        if pp.seq > self.last_executed and self._in_window(pp.seq):
            self._catchup[pp.seq] = m
            self._progress()

    def _check_commit_proof(self, m: CommitProof) -> None:
        self._verify(m)
        pp = m.pre_prepare
        self._check_prepared_cert(pp, m.prepares)
        senders = set()
        for c in m.commits:
            if (c.key, c.faulty, c.view) != (pp.key, pp.faulty, pp.view) or c.sender in senders:
                raise ConsensusError("commit proof commits do not match its pre-prepare")
            self._verify(c)
            senders.add(c.sender)
        if len(senders) < self.quorum:
            raise ConsensusError("commit proof below quorum")

    # ---- retransmission -------------------------------------------------------------------

    def _retransmit(self) -> None:
        if not self._unsettled():
            return
        self.stats["retransmissions"] += 1
        if not self.active and self._own_vc is not None:
            self._broadcast(self._own_vc)
        if self.active:
            for s in sorted(self._slots):
                if s <= self.last_executed:
                    continue
                slot = self._slots[s]
                if slot.pre_prepare is not None and slot.pre_prepare.sender == self.index:
                    if not slot.reissued:
                        self._broadcast(slot.pre_prepare)
                    elif self._new_view is not None:
                        self._broadcast(self._new_view)
                for own in (slot.own_prepare, slot.own_commit):
                    if own is not None:
                        self._broadcast(own)
        unstable = [s for s in self._own_checkpoints if s > self.h]
        if unstable:
            self._broadcast(self._own_checkpoints[max(unstable)])
        if self._gap:
            self._fetch_tries += 1
            if self._fetch_tries > 20:  # nobody holds these proofs any more: give up
                self._gap.clear()
                self._fetch = None
            else:
                self._request_gap()
        elif unstable:
            c = max(unstable)
            self._request(c, c)  # ask for someone's stable proof at (or past) our checkpoint


# --------------------------------------------------------------------------------------------
# Byzantine behaviours (for tests and experiments)
# --------------------------------------------------------------------------------------------


class SilentReplica:
    """A crashed or silent member: receives everything, says nothing, never decides."""

    def __init__(self, index: int) -> None:
        self.index = index

    def start(self, instance: Instance) -> list[Action]:
        return []

    def on_message(self, msg: Message) -> list[Action]:
        return []

    def on_timer(self, timer_id: str) -> list[Action]:
        return []


def _flip(msg: PrePrepare | Prepare | Commit) -> PrePrepare | Prepare | Commit:
    return replace(msg, faulty=not msg.faulty, signature=b"")


class _Byzantine(Replica):
    """Runs the honest state machine but rewrites what it sends (``_tamper``)."""

    def start(self, instance: Instance) -> list[Action]:
        return self._tamper(super().start(instance))

    def on_message(self, msg: Message) -> list[Action]:
        return self._tamper(super().on_message(msg), msg)

    def on_timer(self, timer_id: str) -> list[Action]:
        return self._tamper(super().on_timer(timer_id))

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        raise NotImplementedError

    def _resign(self, msg: SignedT) -> SignedT:
        return sign(replace(msg, signature=b""), self.account, self.domain)

    def _others(self) -> list[int]:
        return [i for i in range(self.n) if i != self.index]


class LyingVoter(_Byzantine):
    """Votes (prepare and commit) the opposite of every proposal it sees, at once, and
    proposes the opposite of its own verdict when it is primary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lied: set[tuple[int, int]] = set()

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        out: list[Action] = []
        if isinstance(received, PrePrepare) and (received.view, received.seq) not in self._lied:
            self._lied.add((received.view, received.seq))
            pp = received
            out.append(Broadcast(self._resign(Prepare(*_slot_args(pp), not pp.faulty, self.index))))
            out.append(Broadcast(self._resign(Commit(*pp.key, not pp.faulty, pp.view, self.index))))
        for a in actions:
            if isinstance(a, Broadcast) and isinstance(a.msg, (PrePrepare, Prepare, Commit)):
                if isinstance(a.msg, (Prepare, Commit)) and self._already_lied(a.msg):
                    continue
                out.append(Broadcast(self._resign(_flip(a.msg))))
            else:
                out.append(a)
        return out

    def _already_lied(self, msg: Prepare | Commit) -> bool:
        if isinstance(msg, Prepare):
            return (msg.view, msg.seq) in self._lied
        return False


def _slot_args(pp: PrePrepare) -> tuple[int, int, int, int, bytes]:
    return (pp.view, pp.seq, pp.round, pp.attempt, pp.aggregate_digest)


class EquivocatingPrimary(_Byzantine):
    """As primary, sends verdict ``a`` to one half of the committee and ``not a`` to the other;
    its prepares and commits follow the same split, everything else is honest."""

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        out: list[Action] = []
        others = self._others()
        half = set(others[: len(others) // 2])
        for a in actions:
            if (
                isinstance(a, Broadcast)
                and isinstance(a.msg, (PrePrepare, Prepare, Commit))
                and self.primary(a.msg.view) == self.index
            ):
                flipped = self._resign(_flip(a.msg))
                out.extend(Send(i, flipped if i in half else a.msg) for i in others)
                continue
            out.append(a)
        return out


class RandomByzantine(_Byzantine):
    """A seeded fuzzer: each outgoing message is passed, dropped, flipped, split between two
    conflicting versions, or doubled; as a new primary it may also forge the re-issued set."""

    def __init__(self, *args: Any, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rng = random.Random(seed)

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        out: list[Action] = []
        others = self._others()
        for a in actions:
            if not isinstance(a, (Broadcast, Send)):
                out.append(a)
                continue
            msg = a.msg
            roll = self.rng.random()
            if isinstance(msg, (PrePrepare, Prepare, Commit)):
                if roll < 0.15:
                    continue
                if roll < 0.35:
                    out.append(replace(a, msg=self._resign(_flip(msg))))
                    continue
                if roll < 0.65:
                    flipped = self._resign(_flip(msg))
                    for i in others:
                        out.append(Send(i, flipped if self.rng.random() < 0.5 else msg))
                    continue
                if roll < 0.75:
                    out.append(a)
                    out.append(replace(a, msg=self._resign(_flip(msg))))
                    continue
            elif isinstance(msg, NewView) and msg.pre_prepares and roll < 0.5:
                forged = tuple(
                    self._resign(replace(p, faulty=not p.faulty)) for p in msg.pre_prepares
                )
                out.append(replace(a, msg=self._resign(replace(msg, pre_prepares=forged))))
                continue
            elif roll < 0.1:
                continue
            out.append(a)
        return out


class DoubleVoter(_Byzantine):
    """Split-brain colluder: shows the even-indexed members a world where every proposal is
    "faulty" and the odd-indexed ones a world where it is "not faulty" (pre-prepares when
    primary, prepares and commits always, each world self-consistent, so keeping the first
    message per slot does not help). All such members use the same split, so ``f + 1`` of them
    can drive correct members whose own verdicts differ into conflicting decisions; ``f``
    cannot."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._voted: set[tuple[int, int]] = set()

    def _world(
        self, msg: PrePrepare | Prepare | Commit, faulty: bool
    ) -> PrePrepare | Prepare | Commit:
        if isinstance(msg, PrePrepare):
            return self._resign(replace(msg, faulty=faulty))
        if isinstance(msg, Prepare):
            return self._resign(replace(msg, faulty=faulty))
        return self._resign(replace(msg, faulty=faulty))

    def _split(self, msg: PrePrepare | Prepare | Commit) -> list[Action]:
        even, odd = self._world(msg, True), self._world(msg, False)
        return [Send(i, even if i % 2 == 0 else odd) for i in self._others()]

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        out: list[Action] = []
        if isinstance(received, PrePrepare) and (received.view, received.seq) not in self._voted:
            self._voted.add((received.view, received.seq))
            pp = received
            out += self._split(Prepare(*_slot_args(pp), pp.faulty, self.index))
            out += self._split(Commit(*pp.key, pp.faulty, pp.view, self.index))
        for a in actions:
            if isinstance(a, Broadcast) and isinstance(a.msg, PrePrepare):
                pp = a.msg
                out += self._split(pp)
                if (pp.view, pp.seq) not in self._voted:
                    self._voted.add((pp.view, pp.seq))
                    out += self._split(Prepare(*_slot_args(pp), pp.faulty, self.index))
                    out += self._split(Commit(*pp.key, pp.faulty, pp.view, self.index))
            elif isinstance(a, Broadcast) and isinstance(a.msg, (Prepare, Commit)):
                continue
            else:
                out.append(a)
        return out
