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
* stable storage: before anything leaves a replica, the driver writes its signed state (a
  :class:`Persist` action leads the batch); a restarted replica is built from it and never
  signs a message that conflicts with one it signed before.
* duplicates are ignored; two different signed messages from one sender for the same slot are
  recorded as :class:`Evidence` and the later one is ignored.

Layout (indy-plenum's split of its replica into services): :mod:`.interface` (configuration,
actions, the ``Node`` protocol), :mod:`.log` (slots, proofs, the state digest), :mod:`.core`
(shared state and plumbing), :mod:`.ordering` (normal case and execution),
:mod:`.checkpoints` (stable checkpoints, garbage collection, state transfer),
:mod:`.view_change` (VIEW-CHANGE, NEW-VIEW, timers), :mod:`.catchup` (lagging replicas),
:mod:`.stable` (the signed state a replica persists before sending and restarts from),
:mod:`.replica` (the thin :class:`Replica` composing them) and :mod:`.byzantine` (behaviours
for tests and experiments). Thresholds come from :mod:`consensus.quorums` only.
"""

from consensus.pbft.byzantine import (
    DoubleVoter,
    EquivocatingPrimary,
    LyingVoter,
    RandomByzantine,
    SilentReplica,
)
from consensus.pbft.interface import (
    Action,
    Broadcast,
    CancelTimer,
    Decide,
    Evidence,
    Node,
    Persist,
    ReplicaConfig,
    Send,
    SetTimer,
)
from consensus.pbft.log import state_transition
from consensus.pbft.replica import Replica
from consensus.pbft.view_change import NewViewPlan, compute_new_view

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
    "Persist",
    "RandomByzantine",
    "Replica",
    "ReplicaConfig",
    "Send",
    "SetTimer",
    "SilentReplica",
    "compute_new_view",
    "state_transition",
]
