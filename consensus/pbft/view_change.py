"""View change: VIEW-CHANGE, NEW-VIEW, the view-change timer and the ``f + 1`` rule.

A replica whose request timer fires asks for view ``v + 1`` with its stable checkpoint (and
proof) and its prepared certificates above it. The timer for the new view starts only once
``n - f`` view-changes for it are in (no leap-frogging alone); a replica that sees ``f + 1``
view-changes for views above its own joins the smallest view ``f + 1`` of them reached. The new
primary with ``n - f`` valid view-changes computes ``O`` (:func:`compute_new_view`) and
broadcasts NEW-VIEW; backups check every signature and certificate and recompute ``O``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from consensus.messages import (
    GENESIS_STATE_DIGEST,
    InstanceKey,
    NewView,
    PrePrepare,
    ViewChange,
)
from consensus.pbft.core import ReplicaCore
from protocol.errors import ConsensusError

__all__ = ["NewViewPlan", "ViewChangeService", "compute_new_view"]


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


class ViewChangeService:
    """View-changes received (per view), our own, the installed NEW-VIEW, the timer."""

    def __init__(self, core: ReplicaCore) -> None:
        self.core = core
        self.received: dict[int, dict[int, ViewChange]] = {}  # view -> sender -> msg
        self.own: ViewChange | None = None
        self.new_view: NewView | None = None
        self._valid: OrderedDict[bytes, bool] = OrderedDict()
        self._timeout = core.config.view_change_timeout

    def start(self, new_view: int) -> None:
        """Leave the current view for ``new_view`` (ignored unless it is higher)."""
        c = self.core
        if new_view <= c.view:
            return
        c.stats["view_changes"] += 1
        for pp in c.ordering.in_flight():
            if pp.key in c.disputes:
                c.tries[pp.key] = c.tries.get(pp.key, 0) + 1
        c.view = new_view
        c.active = False
        self.new_view = None
        c.ordering.reset_view()
        c.cancel_timer("request")
        prepared = tuple(c.prepared[s] for s in sorted(c.prepared) if s > c.h)
        vc = c.sign(ViewChange(new_view, c.h, c.stable_digest, c.stable_proof, prepared, c.index))
        self.own = vc
        for v in [v for v in self.received if v < new_view]:
            del self.received[v]
        self.received.setdefault(new_view, {})[c.index] = vc
        c.broadcast(vc)
        c.cancel_timer("view_change")
        self._timeout = c.view_change_delay()
        c.count_view_change()
        self._maybe_start_timer()
        self._try_new_view()

    def _maybe_start_timer(self) -> None:
        """PBFT starts the new view's timer only once ``n - f`` view-changes for it are in:
        a replica that is ahead of the others then waits for them instead of timing out
        again and again on its own (leapfrogging views), while the ``f + 1`` rule pulls
        laggards up."""
        c = self.core
        if c.active or c.has_timer("view_change"):
            return
        if len(self.received.get(c.view, {})) >= c.quorum:
            c.set_timer("view_change", self._timeout)

    # ---- validity ---------------------------------------------------------------------------

    def _is_valid(self, vc: ViewChange) -> bool:
        tag = vc.struct_hash() + vc.signature + vc.sender.to_bytes(4, "big")
        hit = self._valid.get(tag)
        if hit is None:
            try:
                self._check(vc)
                hit = True
            except ConsensusError as exc:
                self.core.last_rejection = f"view-change from {vc.sender}: {exc}"
                hit = False
            self._valid[tag] = hit
            if len(self._valid) > 8 * self.core.n:
                self._valid.popitem(last=False)
        return hit

    def _check(self, vc: ViewChange) -> None:
        c = self.core
        c.verify(vc)
        if vc.stable_seq % c.K:
            raise ConsensusError("stable checkpoint not at a multiple of K")
        if vc.stable_seq == 0:
            if vc.checkpoint_proof or vc.state_digest != GENESIS_STATE_DIGEST:
                raise ConsensusError("genesis checkpoint must have an empty proof")
        else:
            c.checkpoints.check_proof(vc.stable_seq, vc.state_digest, vc.checkpoint_proof)
        last = vc.stable_seq
        for cert in vc.prepared:
            pp = cert.pre_prepare
            if not last < pp.seq <= vc.stable_seq + c.L:
                raise ConsensusError("prepared certificates out of order or outside the window")
            last = pp.seq
            if pp.view >= vc.new_view:
                raise ConsensusError("prepared certificate from a view not before the new one")
            c.check_prepared_cert(pp, cert.prepares)

    # ---- VIEW-CHANGE ------------------------------------------------------------------------

    def on_view_change(self, m: ViewChange) -> None:
        c = self.core
        prev = self.received.get(m.new_view, {}).get(m.sender)
        if prev is not None:
            if prev == m:
                c.stats["duplicates"] += 1
                self._help(m)
            else:
                c.record_evidence("view-change", m.new_view, prev, m)
            return
        if not self._is_valid(m):
            raise ConsensusError("invalid view-change")
        if m.new_view < c.view or (m.new_view == c.view and c.active):
            # the sender is behind us; the new primary answers at once, others on retransmission
            again = c.retransmitted(("view-change", m.sender, m.new_view, m.signature))
            if again or m.new_view < c.view or (c.active and c.is_primary):
                self._help(m)
            return
        # keep each sender's few highest views (bounded memory against view spam)
        views = sorted(v for v, b in self.received.items() if m.sender in b)
        if len(views) >= 4:
            if views[0] > m.new_view:
                return
            del self.received[views[0]][m.sender]
        self.received.setdefault(m.new_view, {})[m.sender] = m
        # f + 1 rule: join the smallest view that f + 1 others have asked for, past ours
        highest: dict[int, int] = {}
        for v, bucket in self.received.items():
            for sender in bucket:
                if sender != c.index and v > highest.get(sender, -1):
                    highest[sender] = v
        higher = sorted((v for v in highest.values() if v > c.view), reverse=True)
        if len(higher) >= c.weak:
            self.start(higher[c.weak - 1])
        if not c.active:
            self._maybe_start_timer()
            self._try_new_view()

    def _help(self, m: ViewChange) -> None:
        """A view-change from behind shows where its sender is: send what it lacks."""
        c = self.core
        if c.active and m.new_view <= c.view and self.new_view is not None:
            c.send(m.sender, self.new_view)
        c.catchup.help_behind(m.sender, m.stable_seq)

    # ---- NEW-VIEW ---------------------------------------------------------------------------

    def _try_new_view(self) -> None:
        c = self.core
        if c.active or not c.is_primary:
            return
        vcs = sorted(
            self.received.get(c.view, {}).values(),
            key=lambda v: (v.sender != c.index, v.sender),
        )
        if len(vcs) < c.quorum:
            return
        chosen = tuple(vcs[: c.quorum])
        plan = compute_new_view(chosen)
        pps = tuple(
            c.sign(PrePrepare(c.view, s, *key, faulty, c.index))
            for s, key, faulty in plan.proposals
        )
        nv = c.sign(NewView(c.view, chosen, pps, c.index))
        c.broadcast(nv)
        self._install(nv, plan)

    def on_new_view(self, m: NewView) -> None:
        c = self.core
        if m.view < c.view or (m.view == c.view and c.active):
            if self.new_view is not None and m == self.new_view:
                c.stats["duplicates"] += 1
            return
        if m.view == 0 or m.sender != c.primary(m.view):
            raise ConsensusError("new-view not from the new view's primary")
        c.verify(m)
        senders = set()
        for vc in m.view_changes:
            if vc.new_view != m.view or vc.sender in senders:
                raise ConsensusError("new-view carries mismatched or duplicate view-changes")
            if not self._is_valid(vc):
                raise ConsensusError("new-view carries an invalid view-change")
            senders.add(vc.sender)
        if len(senders) < c.quorum:
            raise ConsensusError("new-view below quorum of view-changes")
        plan = compute_new_view(m.view_changes)
        if len(m.pre_prepares) != len(plan.proposals):
            raise ConsensusError("new-view proposals differ from the recomputed set")
        for pp, (s, key, faulty) in zip(m.pre_prepares, plan.proposals, strict=True):
            if pp.content != (m.view, s, key, faulty) or pp.sender != m.sender:
                raise ConsensusError("new-view proposals differ from the recomputed set")
            c.verify(pp)
        self._install(m, plan)

    def _install(self, nv: NewView, plan: NewViewPlan) -> None:
        c = self.core
        if nv.view != c.view or c.active:
            # jumping straight from an active lower view: drop that view's messages
            c.ordering.reset_view()
        c.view = nv.view
        c.active = True
        c.unsaved = True
        self.new_view = nv
        self.own = None
        c.stats["new_views"] += 1
        c.cancel_timer("view_change")
        self.received = {v: b for v, b in self.received.items() if v > nv.view}
        src = plan.stable_source
        if plan.min_seq > c.h:
            c.checkpoints.adopt_stable(plan.min_seq, src.state_digest, src.checkpoint_proof)
        c.ordering.enter_view(nv.pre_prepares)

    # ---- retransmission, size ---------------------------------------------------------------

    def retransmit(self) -> None:
        if not self.core.active and self.own is not None:
            self.core.broadcast(self.own)

    def log_size(self) -> int:
        return sum(len(b) for b in self.received.values())
