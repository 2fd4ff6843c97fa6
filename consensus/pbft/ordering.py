"""Normal-case ordering: PRE-PREPARE, PREPARE, COMMIT, in-order execution.

The primary proposes its own verdict for the next sequence number (one dispute in flight); a
backup prepares a fresh proposal only if it equals its own verdict (re-issued proposals of a
NEW-VIEW are prepared by everyone). *Prepared* is the pre-prepare plus ``n - f`` matching
prepares; a prepared replica that voted commits (the signed on-chain ``DisputeVerdict``);
*committed-local* is prepared plus ``n - f`` matching commits. Sequence numbers execute in
order, each execution updating the rolling state digest, deciding the instance (if not decided
before) and, every ``K`` sequence numbers, triggering a checkpoint.
"""

from __future__ import annotations

from consensus.messages import (
    Commit,
    InstanceKey,
    NewView,
    Prepare,
    PreparedCert,
    PrePrepare,
)
from consensus.pbft.core import ReplicaCore
from consensus.pbft.log import Proof, Slot, state_transition
from protocol.errors import ConsensusError

__all__ = ["OrderingService"]


class OrderingService:
    """The current view's message log (slots, commits) and the normal-case protocol."""

    def __init__(self, core: ReplicaCore) -> None:
        self.core = core
        self.slots: dict[int, Slot] = {}
        self.slot_of: dict[InstanceKey, int] = {}
        self.commits: dict[InstanceKey, dict[int, Commit]] = {}
        self._in_progress = False
        self._dirty = False

    def progress(self) -> None:
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
                for s in sorted(self.slots):
                    self._try_vote(s)
                self._try_propose()
                if not self._dirty:
                    break
        finally:
            self._in_progress = False

    def in_flight(self) -> list[PrePrepare]:
        """Pre-prepares held for sequence numbers not executed yet."""
        done = self.core.last_executed
        return [sl.pre_prepare for s, sl in self.slots.items() if s > done and sl.pre_prepare]

    # ---- proposals and votes --------------------------------------------------------------

    def _try_propose(self) -> None:
        c = self.core
        if not c.active or not c.is_primary:
            return
        s = c.last_executed + 1
        if not c.in_window(s):
            return
        if self.in_flight():
            return  # one dispute in flight
        # Least-tried first, then in order of arrival: a dispute the committee cannot agree on
        # (honest re-executions differ) must not block the ones after it forever.
        order = sorted(enumerate(c.disputes), key=lambda e: (c.tries.get(e[1], 0), e[0]))
        for _, key in order:
            if key in c.decided or key in self.slot_of:
                continue
            verdict = c.verdict(key)
            if verdict is None:
                continue
            pp = c.sign(PrePrepare(c.view, s, *key, verdict, c.index))
            slot = self.slots.setdefault(s, Slot())
            slot.pre_prepare = pp
            self.slot_of[key] = s
            c.broadcast(pp)
            self._try_vote(s)
            return

    def on_pre_prepare(self, m: PrePrepare) -> None:
        c = self.core
        if m.view != c.view or not c.active or not c.in_window(m.seq):
            return
        slot = self.slots.get(m.seq)
        if slot is not None and slot.pre_prepare is not None:
            if slot.pre_prepare == m:
                c.stats["duplicates"] += 1
                c.catchup.help_seq(m.sender, m.seq)
            else:
                c.record_evidence("pre-prepare", (m.view, m.seq), slot.pre_prepare, m)
            return
        if m.sender != c.primary(m.view):
            raise ConsensusError("pre-prepare from a replica that is not the primary")
        c.verify(m)
        if m.seq <= c.last_executed or m.key in c.decided:
            return
        other = self.slot_of.get(m.key)
        if other is not None and other != m.seq:
            other_pp = self.slots[other].pre_prepare
            if other_pp is not None:
                c.record_evidence("duplicate-instance", (m.view, m.key), other_pp, m)
            return
        slot = self.slots.setdefault(m.seq, Slot())
        slot.pre_prepare = m
        self.slot_of[m.key] = m.seq
        self._try_vote(m.seq)
        self.check_prepared(m.seq)

    def _try_vote(self, seq: int) -> None:
        c = self.core
        slot = self.slots.get(seq)
        if slot is None or slot.pre_prepare is None or slot.own_prepare is not None:
            return
        if not c.active:
            return
        pp = slot.pre_prepare
        if not slot.reissued:
            # fresh proposal: one in flight, dispute observed, own verdict must agree
            if seq != c.last_executed + 1 or pp.key in c.decided:
                return
            if pp.key not in c.disputes:
                return
            verdict = c.verdict(pp.key)
            if verdict is None:
                return
            if verdict != pp.faulty:
                if not slot.disagreed:
                    slot.disagreed = True
                    c.stats["disagreements"] += 1
                return
        p = c.sign(Prepare(pp.view, pp.seq, *pp.key, pp.faulty, c.index))
        slot.own_prepare = p
        slot.prepares[c.index] = p
        c.broadcast(p)
        self.check_prepared(seq)

    def on_prepare(self, m: Prepare) -> None:
        c = self.core
        if m.view == c.view and m.seq <= c.h:
            if c.retransmitted(("prepare", m.sender, m.view, m.seq)):
                c.catchup.help_seq(m.sender, m.seq)
            return
        if m.view != c.view or not c.in_window(m.seq):
            return
        slot = self.slots.setdefault(m.seq, Slot())
        prev = slot.prepares.get(m.sender)
        if prev is not None:
            if prev == m:
                c.stats["duplicates"] += 1
                c.catchup.help_seq(m.sender, m.seq)
            else:
                c.record_evidence("prepare", (m.view, m.seq), prev, m)
            return
        c.verify(m)
        slot.prepares[m.sender] = m
        self.check_prepared(m.seq)

    def check_prepared(self, seq: int) -> None:
        c = self.core
        slot = self.slots.get(seq)
        if slot is None or slot.pre_prepare is None:
            return
        pp = slot.pre_prepare
        if slot.cert is None:
            matching = sorted(
                (p for p in slot.prepares.values() if p.content == pp.content),
                key=lambda p: p.sender,
            )
            if len(matching) < c.quorum:
                return
            slot.cert = PreparedCert(pp, tuple(matching[: c.quorum]))
            cur = c.prepared.get(seq)
            if cur is None or cur.view <= pp.view:
                c.prepared[seq] = slot.cert
        if slot.own_prepare is not None and slot.own_commit is None and c.active:
            commit = c.sign(Commit(*pp.key, pp.faulty, pp.view, c.index))
            slot.own_commit = commit
            self.commits.setdefault(pp.key, {})[c.index] = commit
            c.broadcast(commit)
        self._check_committed(seq)

    def on_commit(self, m: Commit) -> None:
        c = self.core
        if m.view != c.view:
            return
        bucket = self.commits.get(m.key)
        prev = None if bucket is None else bucket.get(m.sender)
        if prev is not None:
            if prev == m:
                c.stats["duplicates"] += 1
                seq = self.slot_of.get(m.key)
                if seq is None and m.key in c.decided:
                    seq = c.decided[m.key].seq
                if seq is not None:
                    c.catchup.help_seq(m.sender, seq)
            else:
                c.record_evidence("commit", (m.view, m.key), prev, m)
            return
        if m.key in c.decided and m.key not in self.slot_of:
            if c.retransmitted(("commit", m.sender, m.view, m.key)):
                c.catchup.help_decided(m.sender, m.key)
            return
        if bucket is None:
            held = sum(1 for k, b in self.commits.items() if m.sender in b and k not in c.decided)
            if held > c.L:
                return  # per-sender quota on commits for not-yet-proposed instances
        c.verify(m)
        self.commits.setdefault(m.key, {})[m.sender] = m
        seq = self.slot_of.get(m.key)
        if seq is not None:
            self._check_committed(seq)

    def _check_committed(self, seq: int) -> None:
        slot = self.slots.get(seq)
        if slot is None or slot.committed or slot.cert is None or slot.pre_prepare is None:
            return
        pp = slot.pre_prepare
        bucket = self.commits.get(pp.key, {})
        matching = sorted(
            (m for m in bucket.values() if m.faulty == pp.faulty and m.view == pp.view),
            key=lambda m: m.sender,
        )
        if len(matching) >= self.core.quorum:
            slot.committed = True
            slot.commit_msgs = tuple(matching[: self.core.quorum])
            self.progress()

    # ---- execution ------------------------------------------------------------------------

    def _try_execute(self) -> None:
        c = self.core
        progressed = False
        while True:
            s = c.last_executed + 1
            if not c.in_window(s):
                break
            slot = self.slots.get(s)
            if slot is not None and slot.committed and slot.pre_prepare and slot.cert:
                self._execute(s, Proof(slot.pre_prepare, slot.cert.prepares, slot.commit_msgs))
            elif s in c.catchup.ready:
                cp = c.catchup.ready.pop(s)
                c.stats["catchup_executions"] += 1
                self._execute(s, Proof(cp.pre_prepare, cp.prepares, cp.commits))
            else:
                break
            progressed = True
        if progressed:
            c.reset_backoff()
            c.restart_request_timer()

    def _execute(self, seq: int, proof: Proof) -> None:
        c = self.core
        pp = proof.pre_prepare
        c.state_digest = state_transition(c.state_digest, seq, pp.key, pp.faulty)
        c.last_executed = seq
        c.unsaved = True
        c.executed[seq] = (pp.key, pp.faulty)
        c.proofs[seq] = proof
        c.stats["executed"] += 1
        if c.config.record_trace:
            c.trace.append((seq, pp.key, pp.faulty))
        if pp.key not in c.decided:
            c.decide(seq, proof)
        if seq % c.K == 0:
            c.checkpoints.on_executed(seq)

    # ---- view changes, garbage collection, retransmission ---------------------------------

    def reset_view(self) -> None:
        """Leaving the view: its pre-prepares, prepares and commits no longer count."""
        self.slots.clear()
        self.slot_of.clear()
        self.commits.clear()

    def enter_view(self, reissued: tuple[PrePrepare, ...]) -> None:
        """A NEW-VIEW was installed: hold its re-issued proposals, vote on them, go on."""
        c = self.core
        # messages stored while waiting for this new-view may only be for this view
        for s, slot in list(self.slots.items()):
            if slot.pre_prepare is not None:
                del self.slots[s]
        self.slot_of.clear()
        for pp in reissued:
            if not c.in_window(pp.seq):
                continue
            slot = self.slots.setdefault(pp.seq, Slot())
            slot.pre_prepare = pp
            slot.reissued = True
            self.slot_of[pp.key] = pp.seq
        c.restart_request_timer()
        for s in sorted(self.slots):
            self._try_vote(s)
            self.check_prepared(s)
        self.progress()

    def collect_garbage(self, seq: int) -> None:
        """Drop slots at or below the stable checkpoint ``seq`` and decided commits."""
        for s in [s for s in self.slots if s <= seq]:
            slot = self.slots.pop(s)
            if slot.pre_prepare is not None and self.slot_of.get(slot.pre_prepare.key) == s:
                del self.slot_of[slot.pre_prepare.key]
        for k in [k for k in self.commits if k in self.core.decided and k not in self.slot_of]:
            del self.commits[k]

    def retransmit(self, new_view: NewView | None) -> None:
        """Re-send own messages for unexecuted sequence numbers (re-issued ones via NEW-VIEW)."""
        c = self.core
        if not c.active:
            return
        for s in sorted(self.slots):
            if s <= c.last_executed:
                continue
            slot = self.slots[s]
            if slot.pre_prepare is not None and slot.pre_prepare.sender == c.index:
                if not slot.reissued:
                    c.broadcast(slot.pre_prepare)
                elif new_view is not None:
                    c.broadcast(new_view)
            for own in (slot.own_prepare, slot.own_commit):
                if own is not None:
                    c.broadcast(own)

    def log_size(self) -> int:
        size = sum(len(b) for b in self.commits.values())
        for slot in self.slots.values():
            size += (slot.pre_prepare is not None) + len(slot.prepares) + len(slot.commit_msgs)
        return size
