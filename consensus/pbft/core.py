"""What the services of one replica share: identity, protocol state, outbox, timers.

This is indy-plenum's ``ConsensusSharedData`` plus the plumbing every service needs: signing
and checking messages, emitting actions, named timers with exponential back-off, the verdict
cache and the decision history. The services (:mod:`.ordering`, :mod:`.checkpoints`,
:mod:`.view_change`, :mod:`.catchup`) hold a reference to it and keep their own message logs;
they call each other through the attributes declared here (plenum uses an internal bus; direct
calls keep the order of the emitted actions, hence every seeded memnet schedule, unchanged).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from eth_account.signers.local import LocalAccount

from consensus.certificate import CommitCertificate
from consensus.messages import (
    GENESIS_STATE_DIGEST,
    Checkpoint,
    CommitProof,
    Domain,
    Fetch,
    Instance,
    InstanceKey,
    Message,
    Prepare,
    PreparedCert,
    PrePrepare,
    SignedT,
    checksum_address,
    sign,
    verify_signer,
)
from consensus.pbft.interface import (
    Action,
    Broadcast,
    CancelTimer,
    Decide,
    Evidence,
    ReplicaConfig,
    Send,
    SetTimer,
)
from consensus.pbft.log import Decided, Proof
from consensus.quorums import commit_quorum, max_faulty, weak_quorum
from protocol.errors import ConsensusError

if TYPE_CHECKING:
    from consensus.pbft.catchup import CatchupService
    from consensus.pbft.checkpoints import CheckpointService
    from consensus.pbft.ordering import OrderingService
    from consensus.pbft.view_change import ViewChangeService

__all__ = ["ReplicaCore"]


class ReplicaCore:
    """Shared state and plumbing of one committee member (see the module docstring).

    ``committee`` lists member addresses in on-chain registration order; ``account`` must be
    ``committee[index]``'s key; ``validate(instance)`` is this replica's own re-execution
    verdict (True: the aggregate is faulty).
    """

    # The services, composed by ``Replica``.
    ordering: OrderingService
    checkpoints: CheckpointService
    view_changes: ViewChangeService
    catchup: CatchupService

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
        # per sequence number above h: what executed, prepared certificates, commit proofs
        self.executed: dict[int, tuple[InstanceKey, bool]] = {}
        self.prepared: dict[int, PreparedCert] = {}
        self.proofs: dict[int, Proof] = {}
        # disputes observed and not decided, own verdicts, tries; the decision history
        self.disputes: dict[InstanceKey, Instance] = {}
        self.verdicts: dict[InstanceKey, bool] = {}
        self.tries: dict[InstanceKey, int] = {}  # view changes while the instance was in flight
        self.decided: OrderedDict[InstanceKey, Decided] = OrderedDict()

        self._late: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._timers: dict[str, str] = {}  # purpose -> timer id
        self._timer_gen = 0
        self._vc_attempts = 0
        self._out: list[Action] = []
        self.unsaved = False  # the signed state changed since the last Persist

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

    # ---- who, where ---------------------------------------------------------------------

    def primary(self, view: int) -> int:
        return view % self.n

    @property
    def is_primary(self) -> bool:
        return self.primary(self.view) == self.index

    def in_window(self, seq: int) -> bool:
        return self.h < seq <= self.h + self.L

    # ---- messages out, signatures -------------------------------------------------------

    def sign(self, msg: SignedT) -> SignedT:
        if not isinstance(msg, CommitProof | Fetch):  # (answers to others bind nothing)
            self.unsaved = True  # stable storage first: its batch starts with Persist
        return sign(msg, self.account, self.domain)

    def verify(self, msg: Message) -> None:
        verify_signer(msg, self.committee, self.domain)

    def broadcast(self, msg: Message) -> None:
        self._out.append(Broadcast(msg))

    def send(self, to: int, msg: Message) -> None:
        if to != self.index:
            self._out.append(Send(to, msg))

    def check_prepared_cert(self, pp: PrePrepare, prepares: Iterable[Prepare]) -> None:
        """A prepared certificate: the view's primary's pre-prepare and ``n - f`` matching
        prepares from distinct members, all validly signed (raises ConsensusError)."""
        if pp.sender != self.primary(pp.view):
            raise ConsensusError("certificate pre-prepare not from that view's primary")
        self.verify(pp)
        senders = set()
        for p in prepares:
            if p.content != pp.content or p.sender in senders:
                raise ConsensusError("certificate prepares do not match")
            self.verify(p)
            senders.add(p.sender)
        if len(senders) < self.quorum:
            raise ConsensusError("prepared certificate below quorum")

    def record_evidence(self, kind: str, slot: Any, first: Message, second: Message) -> None:
        tag = (kind, first.sender, slot)
        if tag in self._evidence_slots or len(self.evidence) >= self.config.max_evidence:
            return
        try:
            self.verify(second)
        except ConsensusError:
            return  # an unsigned forgery is not evidence against the claimed sender
        self._evidence_slots.add(tag)
        self.evidence.append(Evidence(kind, first.sender, first, second))

    def retransmitted(self, tag: tuple[Any, ...]) -> bool:
        """True the second time ``tag`` is seen (a retransmission); remembers a bounded set."""
        if tag in self._late:
            return True
        self._late[tag] = None
        if len(self._late) > 16 * self.n:
            self._late.popitem(last=False)
        return False

    # ---- timers and back-off ------------------------------------------------------------

    def set_timer(self, purpose: str, delay: float) -> None:
        self.cancel_timer(purpose)
        self._timer_gen += 1
        tid = f"{purpose}:{self.index}:{self._timer_gen}"
        self._timers[purpose] = tid
        self._out.append(SetTimer(tid, delay))

    def cancel_timer(self, purpose: str) -> None:
        tid = self._timers.pop(purpose, None)
        if tid is not None:
            self._out.append(CancelTimer(tid))

    def has_timer(self, purpose: str) -> bool:
        return purpose in self._timers

    def pop_timer(self, timer_id: str) -> str | None:
        """The purpose of a timer that fired (None if it was cancelled or replaced)."""
        purpose = next((p for p, t in self._timers.items() if t == timer_id), None)
        if purpose is not None:
            del self._timers[purpose]
        return purpose

    def _backoff(self, base: float) -> float:
        return base * float(1 << min(self._vc_attempts, self.config.max_backoff_exponent))

    def restart_request_timer(self) -> None:
        self.cancel_timer("request")
        if self.active and self.disputes:
            self.set_timer("request", self._backoff(self.config.request_timeout))

    def view_change_delay(self) -> float:
        return self._backoff(self.config.view_change_timeout)

    def count_view_change(self) -> None:
        self._vc_attempts += 1

    def reset_backoff(self) -> None:
        """Something executed: the network works, timeouts go back to their base values."""
        self._vc_attempts = 0

    # ---- verdicts and decisions ---------------------------------------------------------

    def verdict(self, key: InstanceKey) -> bool | None:
        """This replica's own verdict (cached); None while ``validate`` fails."""
        v = self.verdicts.get(key)
        if v is None and key in self.disputes:
            try:
                out = self.validate(self.disputes[key])
            except Exception:  # the node's re-execution failed: abstain, retry later
                return None
            if not isinstance(out, bool):
                return None
            self.verdicts[key] = v = out
        return v

    def decide(self, seq: int, proof: Proof) -> None:
        pp = proof.pre_prepare
        cert = CommitCertificate.from_commits(proof.commits, self.committee)
        self.record_decision(pp.key, Decided(seq, pp.faulty, cert, proof))

    def record_decision(self, key: InstanceKey, entry: Decided) -> None:
        self.unsaved = True
        self.decided[key] = entry
        while len(self.decided) > self.config.history_limit:
            self.decided.popitem(last=False)
        inst = self.disputes.pop(key, None) or Instance.in_domain(self.domain, key)
        self.verdicts.pop(key, None)
        self.tries.pop(key, None)
        self.stats["decided"] += 1
        self._out.append(Decide(inst, entry.faulty, entry.certificate, entry.seq))
