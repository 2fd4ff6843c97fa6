"""The aggregator node: driven by chain state, idempotent and restartable.

One :meth:`AggregatorNode.step` reads the contract and does what the protocol asks now:

* the round's collection closed: fetch every registered update from its publisher, pin what
  arrived and ``attest`` to it (one bitmap); the contract fixes the round's included set (the
  updates at least f + 1 members attested) once n - f attested or the window passed;
* the included set is fixed and the contract chose *this* node for the current attempt:
  fetch exactly the included updates (from this node, else from the members that attested to
  them), verify each against its on-chain digest (the store does), run the rule, publish the
  new global state and ``submitAggregate``;
* the chosen aggregator let its deadline pass: ``advanceAttempt`` (anyone may);
* another node submitted: re-execute the round and compare digests and the stopping rule's
  decision (``aggregators.stopping``); a mismatch or an unavailable aggregate is challenged
  (bonded) inside the window;
* the challenge window is over: ``finalize``;
* a dispute went unresolved past its deadline: ``expireDispute`` (anyone may);
* the exits (issue 20): the task made no progress for ``abortTimeout`` blocks (since the
  current round opened, or since deployment if it never started): ``abortTask`` (anyone
  may; every stake, bond and credit becomes withdrawable); the owner never called ``start``
  within ``leave_after_blocks`` blocks of deployment: ``leaveCommittee`` (the stake is
  credited back).

Its :class:`~aggregators.behaviours.Behaviour` can make it faulty in any of the threat
model's ways. Nothing here is remembered that the chain does not also know, so a restarted
node resumes from chain + storage state without double submissions.

Block timing: views see the latest block ``b``; a transaction sent now executes in a later
block (``b + 1`` on an automining chain). So the node submits or challenges only while
``b + 1 <= deadline`` and advances or finalizes once ``b + 1 > deadline``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from hashlib import sha256
from typing import Any, Protocol

from eth_account.signers.local import LocalAccount

from adapters.chain import Chain
from adapters.contract import Phase, RegisteredUpdate, RoundInfo, TaskContract
from adapters.records import UpdateEntry
from adapters.round_inputs import attesters, fetch_included
from adapters.storage import ContentStore, PeerStore, get_by_digest, has_digest
from aggregators.availability import challenge_target, chunk_answer, update_row
from aggregators.behaviours import HONEST, Behaviour, RoundContext
from aggregators.execution import RoundResult, execute_round, rule_for
from aggregators.fault_agent import (
    FaultAgent,
    check_fault_params,
    matches_commitment,
    round_view,
)
from aggregators.private import PrivateInputs
from protocol.cid import content_digest
from protocol.errors import ContractRevert, FedchainError, StorageError
from protocol.manifest import TaskManifest
from protocol.merkle import ChunkTree
from protocol.metrics import PhaseClock
from protocol.payloads import decode_global_state

#: Phases in which a task-level availability challenge may be open.
_AVAILABILITY_PHASES = (Phase.AGGREGATING, Phase.SUBMITTED, Phase.DISPUTED)


class NodeCrashed(FedchainError):
    """Raised by a node whose behaviour makes it crash at this point (scenario runs)."""


@dataclass
class AggregatorEvent:
    """What an aggregator did in one step (for logs and reports)."""

    round: int
    action: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verification:
    """A verifier's comparison of a submitted aggregate with its own re-execution."""

    round: int
    attempt: int
    submitter: str
    submitted: bytes
    expected: bytes
    available: bool
    #: the submission's stop claim and the re-executed stopping decision
    submitted_stop: bool = False
    expected_stop: bool = False

    @property
    def agrees(self) -> bool:
        return (
            self.available
            and self.submitted == self.expected
            and self.submitted_stop == self.expected_stop
        )


@dataclass
class _RoundInputs:
    global_payload: bytes
    #: each registered update's payload (None: not included or not fetched)
    updates: list[bytes | None]
    #: the round's registered records (client, digest, weight, U_i), in registration order
    records: list[UpdateEntry]
    private: PrivateInputs | None = None
    #: the task's included set (``includedUpdates``), one flag per record (None: unknown)
    included: list[bool] | None = None

    @property
    def num_samples(self) -> list[int]:
        """Each record's registered weight."""
        return [r.num_samples for r in self.records]


class PrivateSource(Protocol):
    """What an aggregator of a secure-aggregation or HE task reads beyond the updates
    (``fedchain.private_view``): whether a payload is valid (what it attests to) and the
    round's published context for :func:`~aggregators.execution.execute_round`."""

    def valid(self, round_: int, client: str, payload: bytes) -> bool: ...

    def settled(self, round_: int) -> bool: ...

    def inputs(self, round_: int, updates: Sequence[RegisteredUpdate]) -> PrivateInputs: ...


class AggregatorNode:
    """One aggregator with its own key; computes, submits, verifies and finalizes rounds."""

    def __init__(
        self,
        name: str,
        account: LocalAccount,
        chain: Chain,
        task: TaskContract,
        store: ContentStore,
        manifest: TaskManifest,
        *,
        clock: PhaseClock | None = None,
        behaviour: Behaviour = HONEST,
        colluders: frozenset[str] = frozenset(),
        private: PrivateSource | None = None,
        leave_after_blocks: int | None = None,
        fault: FaultAgent | None = None,
        dispute: str = "pbft",
    ) -> None:
        self.name = name
        self.account = account
        self.address: str = account.address
        self.chain = chain
        self.task = task
        self.store = store
        self.manifest = manifest
        self.rule = rule_for(manifest)
        self.clock = clock or PhaseClock()
        self.behaviour = behaviour
        self.colluders = colluders
        #: secure aggregation / HE: the round's published context, and payload validity
        self.private = private
        #: leave the committee when ``start`` was not called this many blocks after the
        #: deployment (None: stay until ``abortTask``)
        self.leave_after_blocks = leave_after_blocks
        self.left = False
        #: the fault-proof side (``dispute`` fault-proof or both), else None
        self.fault = fault
        self.dispute = dispute
        if fault is not None:
            check_fault_params(task, manifest)
        #: submissions whose claim a game settles (fault-proof mode: no PBFT challenge); a
        #: submission without a claim, or whose bytes differ from an honest claim's, is
        #: still challenged through PBFT
        self.covered: set[tuple[int, int]] = set()
        self.verifications: dict[tuple[int, int], Verification] = {}
        self.withheld: set[tuple[int, int]] = set()
        self.challenged: set[tuple[int, int]] = set()
        self.attested: set[int] = set()
        #: (round, included set) whose every included update this node could fetch
        self._available: set[tuple[int, tuple[bool, ...]]] = set()
        self._open_blocks: dict[int, int] = {}
        self._last_try: dict[tuple[str, int], int] = {}
        self._cache: dict[
            tuple[int, bytes, int, tuple[bool, ...]], tuple[RoundResult, _RoundInputs]
        ]
        self._cache = {}

    # -- protocol steps --------------------------------------------------------------------

    def step(self) -> list[AggregatorEvent]:
        """Do whatever the chain state asks of this node now; return what was done."""
        task = self.task
        round_ = task.current_round()
        exits = self._exits(round_)
        if exits is not None:
            return exits
        if round_ == 0:  # task not started
            return []
        phase = task.phase(round_)
        if self.fault is not None and phase in _AVAILABILITY_PHASES:
            # a task-level availability challenge first: finalize waits for it
            answered = self._availability_step(round_)
            if answered:
                return answered
        events = self._phase_step(round_, phase)
        if self.fault is not None and not events:
            # after the phase's work (its deadlines are the tighter), one game transaction per
            # step: every transaction spends a block of everyone's windows, so the nodes take
            # turns instead of one node's game moves running out the others' attest window
            events = self._play_games()
        return events

    def _phase_step(self, round_: int, phase: Phase) -> list[AggregatorEvent]:
        try:
            if phase == Phase.COLLECTING:
                return self._on_collecting(round_)
            if phase == Phase.ATTESTING:
                return self._on_attesting(round_)
            if phase == Phase.AGGREGATING:
                return self._on_aggregating(round_)
            if phase == Phase.SUBMITTED:
                return self._on_submitted(round_)
            if phase == Phase.DISPUTED:
                return self._on_disputed(round_)
        except StorageError as exc:
            # An included payload no attester served yet: nothing to do but try again later
            # (reported once per block, so the driver lets time pass); on a fault-proof task
            # `_availability_step` challenges its availability meanwhile.
            block = self.chain.block_number()
            if self._last_try.get(("fetch-failed", round_)) == block:
                return []
            self._last_try[("fetch-failed", round_)] = block
            return [AggregatorEvent(round_, "fetch-failed", {"error": str(exc)})]
        return []

    def _exits(self, round_: int) -> list[AggregatorEvent] | None:
        """The task's exits, or None when neither applies now.

        ``abortTask`` once the next block is past ``openBlock(current round) +
        abortTimeout`` (round 0's open block is the deployment block: a task never
        started); before ``start``, ``leaveCommittee`` once the next block is past
        ``deployment + leave_after_blocks``. One ``getRound`` per round is cached, so the
        check costs a block-number read per step."""
        if round_ not in self._open_blocks:
            self._open_blocks = {round_: self.task.round_info(round_).open_block}
        opened = self._open_blocks[round_]
        next_block = self.chain.block_number() + 1
        if next_block > opened + self.task.config().abort_timeout:
            if self.task.task_completed():
                return []
            return self._try(round_, "abortTask", lambda: self.task.abort_task(self.account), {})
        if self.left:  # a member that left still ends the task (anyone may), nothing else
            return []
        if round_ != 0 or self.leave_after_blocks is None:
            return None
        if next_block <= opened + self.leave_after_blocks:
            return None
        events = self._try(
            round_, "leaveCommittee", lambda: self.task.leave_committee(self.account), {}
        )
        if (
            any(e.action == "leaveCommittee" for e in events)
            or not self.task.aggregator_info(self.address).registered
        ):
            self.left = True
        return events

    def _on_collecting(self, round_: int) -> list[AggregatorEvent]:
        """A round short of minUpdates past its collection timeout: ``skipRound`` (anyone
        may), so the round ends carrying the model forward instead of waiting forever."""
        cfg = self.task.config()
        timeout = self._open_blocks[round_] + cfg.collect_window + cfg.collect_timeout
        if self.chain.block_number() + 1 <= timeout:
            return []
        info = self.task.round_info(round_)
        if info.close_block != 0:
            return []
        return self._try(
            round_,
            "skipRound",
            lambda: self.task.skip_round(self.account, round_),
            {"updates": info.update_count},
        )

    def _on_attesting(self, round_: int) -> list[AggregatorEvent]:
        if round_ in self.attested or self.behaviour.attest == "none":
            return []
        updates = self.task.updates(round_)
        if self.behaviour.attest == "all":
            held = [True] * len(updates)
        else:
            with self.clock.phase(round_, "fetch"):
                held = [self._pin_from_publisher(round_, u) for u in updates]
        events = self._try(
            round_,
            "attest",
            lambda: self.task.attest(self.account, round_, held),
            {"held": sum(held), "updates": len(updates)},
        )
        if any(e.action == "attest" or e.action.endswith("-refused") for e in events):
            self.attested.add(round_)  # done, or too late / already done before a restart
        return events

    def _pin_from_publisher(self, round_: int, update: RegisteredUpdate) -> bool:
        """Fetch ``update`` from its publisher (the client's node) and pin it; True if held.

        Under secure aggregation or HE only a valid payload counts as held: an honest
        aggregator never helps include a payload whose masks could not be removed."""
        try:
            if isinstance(self.store, PeerStore):
                payload = self.store.fetch_from(update.digest, [update.client])
            else:
                payload = get_by_digest(self.store, update.digest)
        except StorageError:
            return False
        if self.fault is not None and not matches_commitment(
            self.manifest, round_, payload, update.chunk_root
        ):
            # fault proof: only the vector its client signed (U_i) counts as held, so an
            # update that is not is never included (a submitter excludes it as the task's
            # decision, which no exclusion game can overturn)
            return False
        return self.private is None or self.private.valid(round_, update.client, payload)

    def _on_disputed(self, round_: int) -> list[AggregatorEvent]:
        info = self.task.round_info(round_)
        if self.fault is not None and (refuted := self._refuted_claim(round_, info)) is not None:
            return refuted  # a one-step proof beats the open vote
        if self.chain.block_number() + 1 <= info.dispute_deadline:
            return []
        return self._try(
            round_,
            "expireDispute",
            lambda: self.task.expire_dispute(self.account, round_),
            {"attempt": info.submission_attempt, "submitter": info.aggregator},
        )

    def _crash_here(self, phase: str, round_: int) -> None:
        b = self.behaviour
        if b.crash_at == phase and (b.crash_round is None or b.crash_round == round_):
            raise NodeCrashed(f"{self.name} crashed at {phase} in round {round_}")

    def _on_aggregating(self, round_: int) -> list[AggregatorEvent]:
        # SecAgg+: every member attests the reveal payloads it holds once the window closes
        attest = getattr(self.private, "attest_reveals", None)
        held = None if attest is None else attest(self.account, round_)
        if held is not None:
            return [AggregatorEvent(round_, "reveals-attested", {"held": held})]
        chosen = self.task.current_aggregator()
        block = self.chain.block_number()
        if block + 1 > chosen.deadline_block:
            return self._try(
                round_,
                "advanceAttempt",
                lambda: self.task.advance_attempt(self.account, round_),
                {"laggard": chosen.address, "attempt": chosen.attempt},
            )
        if chosen.address != self.address or (round_, chosen.attempt) in self.withheld:
            return []
        if self.private is not None and not self.private.settled(round_):
            return []  # reveals may still come: the round's inputs are not final yet
        self._crash_here("before-submit", round_)
        result, inputs = self.compute(round_)
        ctx = RoundContext(
            self.manifest,
            round_,
            inputs.global_payload,
            inputs.updates,
            inputs.num_samples,
            result,
            inputs.private,
        )
        publication = self.behaviour.publication(ctx)
        if publication is None:
            self.withheld.add((round_, chosen.attempt))
            return [AggregatorEvent(round_, "withhold", {"attempt": chosen.attempt})]
        digest = content_digest(publication.payload)
        stop = result.stop if publication.stop is None else publication.stop
        with self.clock.phase(round_, "publish"):
            if publication.available:
                self.store.put(publication.payload)
            if publication.push_to and isinstance(self.store, PeerStore):
                committee = self.task.aggregators()
                self.store.push(publication.payload, [committee[i] for i in publication.push_to])
        self._crash_here("after-publish", round_)
        if self.fault is not None and block + 2 > chosen.deadline_block:
            # the claim and the submission are two transactions: no time left for both (said
            # once per block, so the driver lets time pass towards advanceAttempt)
            if self._last_try.get(("claim-too-late", round_)) == block:
                return []
            self._last_try[("claim-too-late", round_)] = block
            return [AggregatorEvent(round_, "claim-too-late", {"attempt": chosen.attempt})]
        claim = self._claim(round_, chosen.attempt, inputs, result, publication.payload, stop)

        def submit() -> Any:
            if claim is None:
                return self.task.submit_aggregate(self.account, round_, digest, stop=stop)
            # a fault-proof task binds the claim to the submission (docs/fault-proof.md)
            return self.task.submit_aggregate_with_claim(self.account, round_, digest, claim)

        with self.clock.phase(round_, "submit"):
            return self._try(
                round_,
                "submitAggregate",
                submit,
                {
                    "attempt": chosen.attempt,
                    "digest": digest.hex(),
                    "honest": digest == result.digest
                    and publication.available
                    and stop == result.stop,
                    "stop": stop,
                    "included": list(result.included),
                    "excluded": {str(k): v for k, v in result.excluded.items()},
                    "privacy": result.notes,
                    **({} if claim is None else {"claim": claim}),
                },
            )

    def _on_submitted(self, round_: int) -> list[AggregatorEvent]:
        info = self.task.round_info(round_)
        events: list[AggregatorEvent] = []
        key = (round_, info.submission_attempt)
        block = self.chain.block_number()
        submitter = info.aggregator or ""
        if submitter != self.address and key not in self.verifications:
            self._crash_here("before-verify", round_)
            with self.clock.phase(round_, "verify"):
                verification = self.verify(
                    round_, info.submission_attempt, submitter, info.aggregate_digest, info.stop
                )
            self.verifications[key] = verification
            events.append(
                AggregatorEvent(
                    round_,
                    "verify",
                    {
                        "attempt": info.submission_attempt,
                        "agrees": verification.agrees,
                        "submitter": submitter,
                    },
                )
            )
        known = self.verifications.get(key)
        if known is not None and self.fault is not None and submitter != self.address:
            events += self._watch(round_, info, known)
        if (
            known is not None
            and key not in self.challenged
            and block + 1 <= info.challenge_deadline
            and self.wants_to_challenge(known)
        ):
            self.challenged.add(key)
            events += self._try(
                round_,
                "challenge",
                lambda: self.task.challenge(self.account, round_),
                {
                    "attempt": info.submission_attempt,
                    "submitter": submitter,
                    "agrees": known.agrees,
                },
            )
            return events
        if self.fault is not None and (refuted := self._refuted_claim(round_, info)) is not None:
            return events + refuted
        if block + 1 > info.challenge_deadline:
            self._crash_here("before-finalize", round_)
            with self.clock.phase(round_, "finalize"):
                events += self._try(
                    round_, "finalize", lambda: self.task.finalize(self.account, round_), {}
                )
        return events

    def wants_to_challenge(self, verification: Verification) -> bool:
        """Honest nodes challenge exactly the aggregates they could not reproduce."""
        mode = self.behaviour.challenger
        if mode == "never":
            return False
        key = (verification.round, verification.attempt)
        if self.dispute == "fault-proof" and key in self.covered:
            return False  # the game replaces the vote
        if mode == "frivolous":
            return verification.agrees
        if self.behaviour.pbft == "colluding" and verification.submitter in self.colluders:
            return False
        return not verification.agrees

    def dispute_verdict(self, round_: int, attempt: int, digest: bytes) -> bool:
        """This node's PBFT verdict for a disputed aggregate: True means faulty."""
        info: RoundInfo = self.task.round_info(round_)
        submitter = info.aggregator or ""
        if self.behaviour.pbft == "colluding" and submitter in self.colluders:
            return False
        verification = self.verify(round_, attempt, submitter, digest, info.stop)
        return not verification.agrees or self._claim_contradicts(round_, attempt)

    def _claim_contradicts(self, round_: int, attempt: int) -> bool:
        """On a fault-proof task a "not faulty" verdict vouches for the whole submission:
        the digest AND the claim bound to it (docs/fault-proof.md, "Certificates and
        refutations"). True when the bound claim is not this node's re-execution (another
        new root or excluded set): a proof could refute it and slash every signer of a "not
        faulty" certificate, so an honest node votes "faulty" even on the right digest."""
        if self.fault is None:
            return False
        cid = self.task.claim_of(round_, attempt)
        if cid is None:
            return False
        result, inputs = self.compute(round_)
        view = self._fault_view(round_, inputs, result)
        if view is None:
            return False  # outside the proof's scope: the digest alone is judged
        return not self.fault.vouches_for(cid, view)

    # -- fault proof (docs/fault-proof.md) ------------------------------------------------

    def _fault_view(self, round_: int, inputs: _RoundInputs, result: RoundResult) -> Any:
        """The round as a step replays it, or None when this round is outside the proof's
        scope (the rule's result is not the step's). A round carried forward is in scope:
        the step's rules carry forward at K = 0 only (``StepRule.of``), as the step does."""
        view = round_view(
            self.manifest,
            round_,
            inputs.global_payload,
            inputs.updates,
            inputs.records,
            inputs.included,
        )
        if result.carried_forward:
            if view.included:
                return None  # the view and execute_round disagree on what is included
            # nothing included: the step carries every coordinate forward (K = 0)
            view.__dict__["honest_state"] = view.prev.copy()
            return view
        honest = decode_global_state(self.manifest.layout, result.payload).params
        try:
            if view.honest_tree.root != ChunkTree(honest).root:
                return None
        except FedchainError:
            return None
        return view

    def _claim(
        self,
        round_: int,
        attempt: int,
        inputs: _RoundInputs,
        result: RoundResult,
        payload: bytes,
        stop: bool = False,
    ) -> int | None:
        """Post the claim for the published state before submitting it (fault-proof mode);
        with a stopping rule, commit its norm too - a wrong one when this node's published
        ``stop`` is not the re-executed decision (the task computes stop from the norm)."""
        if self.fault is None:
            return None
        view = self._fault_view(round_, inputs, result)
        if view is None:
            return None
        state = decode_global_state(self.manifest.layout, payload).params
        norm = self.manifest.stop_norm is not None
        lie = None if stop == result.stop else ("false_stop" if stop else "omit_stop")
        with self.clock.phase(round_, "claim"):
            return self.fault.claim(round_, attempt, view, state, norm, lie)

    def _watch(self, round_: int, info: RoundInfo, known: Verification) -> list[AggregatorEvent]:
        """Check the submitter's claim against this node's re-execution; open a game."""
        assert self.fault is not None
        key = (round_, info.submission_attempt)
        if key in self.fault.watched:
            return []
        submitter = info.aggregator or ""
        cid = self.task.claim_of(round_, info.submission_attempt)
        if cid is None:
            return []
        result, inputs = self.compute(round_)
        events: list[AggregatorEvent] = []
        if known.submitted == known.expected and not known.available:
            # the honest aggregate's bytes, withheld by their submitter: this node computed
            # the same bytes (content addressing), so it serves them itself
            with self.clock.phase(round_, "publish"):
                self.store.put(result.payload)
            self.verifications[key] = replace(known, available=True)
            events.append(AggregatorEvent(round_, "republish", {"digest": known.expected.hex()}))
        view = self._fault_view(round_, inputs, result)
        if view is None:
            self.fault.watched.add(key)
            return events
        if known.submitted == known.expected or self.fault.claimed_root(cid) != (
            view.honest_tree.root
        ):
            self.covered.add(key)  # the game settles it (or nothing is wrong): no PBFT vote
        claimed = None
        if known.available:
            try:
                payload = get_by_digest(self.store, info.aggregate_digest)
                claimed = decode_global_state(self.manifest.layout, payload).params
            except FedchainError:
                claimed = None
        spare = self.colluders if self.behaviour.pbft == "colluding" else frozenset()
        self.fault.spare = spare
        with self.clock.phase(round_, "game"):
            attempt = info.submission_attempt
            opened = self.fault.watch(round_, attempt, view, cid, submitter, claimed)
        if not opened:
            return events
        return [
            *events,
            AggregatorEvent(round_, "game-open", {"claim": cid, "submitter": submitter}),
        ]

    def _refuted_claim(self, round_: int, info: RoundInfo) -> list[AggregatorEvent] | None:
        """The submission's claim: refuted -> ``rejectRefuted`` (anyone may: the attempt
        advances, the submitter is slashed); still open -> wait (``finalize`` would revert);
        settled or no claim -> None (carry on)."""
        assert self.fault is not None
        cid = self.task.claim_of(round_, info.submission_attempt)
        if cid is None:
            return None
        if self.fault.refuted(cid):
            submitter = info.aggregator or ""
            if submitter == self.address or (
                self.behaviour.pbft == "colluding" and submitter in self.colluders
            ):
                return []  # a faulty node does not help reject its own (or a partner's) lie
            return self._try(
                round_,
                "rejectRefuted",
                lambda: self.task.reject_refuted(self.account, round_),
                {"attempt": info.submission_attempt, "claim": cid, "submitter": info.aggregator},
            )
        if not self.fault.settled(cid):
            return []
        return None

    def _play_games(self) -> list[AggregatorEvent]:
        assert self.fault is not None
        return [
            AggregatorEvent(
                m.round,
                f"game-{m.move}",
                {"attempt": m.attempt, "id": m.ref, "gas": m.gas, "role": m.role},
            )
            for m in self.fault.play(limit=1)
        ]

    # -- task-level availability (docs/fault-proof.md) ---------------------------------------

    def _availability_step(self, round_: int) -> list[AggregatorEvent]:
        """Answer the round's open availability challenge when this node holds the update
        (its bytes open against U_i), or expire it once its deadline has passed."""
        assert self.fault is not None
        open_ = self.task.availability_challenge(round_)
        if open_ is None:
            return self._challenge_unavailable(round_)
        detail = {"index": open_.index, "j": open_.j, "challenger": open_.challenger}
        if self.chain.block_number() + 1 > open_.deadline:
            return self._try(
                round_,
                "expireAvailability",
                lambda: self.task.expire_availability(self.account, round_),
                detail,
            )
        if open_.challenger == self.address or self.behaviour.attest == "all":
            return []  # it lacks the update; a member attesting blindly never serves either
        payload = self._held(self.task.updates(round_)[open_.index])
        row = None if payload is None else update_row(self.manifest, round_, payload)
        if row is None or ChunkTree(row).root != open_.chunk_root:
            return []
        answer = chunk_answer(row, open_.j)
        return self._try(
            round_,
            "answerAvailability",
            lambda: self.task.answer_availability(
                self.account, round_, answer.dim, answer.chunk, answer.proof
            ),
            detail,
        )

    def _held(self, update: RegisteredUpdate) -> bytes | None:
        """The payload of ``update`` from this node's own store, or None."""
        local = self.store.local if isinstance(self.store, PeerStore) else self.store
        try:
            return get_by_digest(local, update.digest)
        except StorageError:
            return None

    def _challenge_unavailable(self, round_: int) -> list[AggregatorEvent]:
        """Challenge the availability of the first included update this node can fetch from
        nobody and did not attest (one open challenge per round)."""
        task = self.task
        included = task.included_updates(round_)
        key = (round_, tuple(included))
        if key in self._available:
            return []  # every included update was fetched already
        updates = task.updates(round_)
        mine = task.attestation(round_, task.aggregator_info(self.address).index)
        sources = attesters(task, round_, len(updates))
        held = [
            not included[u.index] or mine[u.index] or self._fetchable(u, sources.get(u.index, []))
            for u in updates
        ]
        target = challenge_target(updates, included, mine, held)
        if target is None:
            self._available.add(key)
            return []
        # a chunk the colluders cannot predict (any j: the contract takes it modulo the count)
        j = int.from_bytes(sha256(f"{self.address}:{round_}:{target}".encode()).digest()[:3], "big")
        return self._try(
            round_,
            "challengeAvailability",
            lambda: task.challenge_availability(self.account, round_, target, j),
            {"index": target, "j": j},
        )

    def _fetchable(self, update: RegisteredUpdate, where: list[str]) -> bool:
        try:
            if isinstance(self.store, PeerStore):
                self.store.fetch_from(update.digest, where)
            else:
                get_by_digest(self.store, update.digest)
        except StorageError:
            return False
        return True

    # -- computation -----------------------------------------------------------------------

    def compute(self, round_: int) -> tuple[RoundResult, _RoundInputs]:
        """Fetch the round's included inputs and re-execute the rule (cached).

        Updates outside the included set are excluded as unavailable, whatever this node
        holds. An included update this node lacks is fetched from the members that attested
        to it (at least one of them is correct); if none serves it yet, StorageError."""
        with self.clock.phase(round_, "fetch"):
            global_digest = self.task.global_model_digest()
            # A round's update list only grows, and only while it collects, and its included
            # set is a bitmap view: both identify the inputs, so a cache hit costs two narrow
            # views, not the whole list.
            included = self.task.included_updates(round_)
            key = (round_, global_digest, self.task.update_count(round_), tuple(included))
            if key in self._cache:
                return self._cache[key]
            global_payload = get_by_digest(self.store, global_digest)
            updates, payloads = fetch_included(self.task, self.store, round_, included=included)
            private = None if self.private is None else self.private.inputs(round_, updates)
        inputs = _RoundInputs(global_payload, payloads, list(updates), private, list(included))
        with self.clock.phase(round_, "aggregate"):
            result = execute_round(
                self.manifest,
                round_,
                global_payload,
                payloads,
                inputs.num_samples,
                rule=self.rule,
                private=private,
                chunk_roots=[u.chunk_root for u in updates],
            )
        self._cache = {key: (result, inputs)}
        return result, inputs

    def verify(
        self, round_: int, attempt: int, submitter: str, submitted: bytes, stop: bool = False
    ) -> Verification:
        """Re-execute round ``round_`` and compare with the submitted digest and stop claim."""
        expected, _ = self.compute(round_)
        available = has_digest(self.store, submitted)
        return Verification(
            round_, attempt, submitter, submitted, expected.digest, available, stop, expected.stop
        )

    # -- helpers ---------------------------------------------------------------------------

    def _try(
        self, round_: int, action: str, call: Callable[[], Any], detail: dict[str, Any]
    ) -> list[AggregatorEvent]:
        """Send a transaction; a revert because another node got there first is not an error.

        Each (action, round) is tried at most once per block: until a new block shows the
        effect of someone's transaction, trying again would only be refused again.
        """
        block = self.chain.block_number()
        if self._last_try.get((action, round_)) == block:
            return []
        self._last_try[(action, round_)] = block
        try:
            receipt = call()
        except ContractRevert as exc:
            return [AggregatorEvent(round_, f"{action}-refused", {"error": exc.error_name})]
        detail = dict(detail)
        detail["gas"] = int(receipt["gasUsed"]) if receipt is not None else None
        detail["block"] = int(receipt["blockNumber"]) if receipt is not None else None
        return [AggregatorEvent(round_, action, detail)]
