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
* another node submitted: re-execute the round and compare digests; a mismatch or an
  unavailable aggregate is challenged (bonded) inside the window;
* the challenge window is over: ``finalize``;
* a dispute went unresolved past its deadline: ``expireDispute`` (anyone may).

Its :class:`~aggregators.behaviours.Behaviour` can make it faulty in any of the threat
model's ways. Nothing here is remembered that the chain does not also know, so a restarted
node resumes from chain + storage state without double submissions.

Block timing: views see the latest block ``b``; a transaction sent now executes in a later
block (``b + 1`` on an automining chain). So the node submits or challenges only while
``b + 1 <= deadline`` and advances or finalizes once ``b + 1 > deadline``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from eth_account.signers.local import LocalAccount

from adapters.chain import Chain
from adapters.contract import Phase, RegisteredUpdate, RoundInfo, TaskContract
from adapters.round_inputs import fetch_included
from adapters.storage import ContentStore, PeerStore, get_by_digest, has_digest
from aggregators.behaviours import HONEST, Behaviour, RoundContext
from aggregators.execution import RoundResult, execute_round, rule_for
from aggregators.private import PrivateInputs
from protocol.cid import content_digest
from protocol.errors import ContractRevert, FedchainError, StorageError
from protocol.manifest import TaskManifest
from protocol.metrics import PhaseClock


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

    @property
    def agrees(self) -> bool:
        return self.available and self.submitted == self.expected


@dataclass
class _RoundInputs:
    global_payload: bytes
    updates: list[bytes | None]
    num_samples: list[int]
    private: PrivateInputs | None = None


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
        self.verifications: dict[tuple[int, int], Verification] = {}
        self.withheld: set[tuple[int, int]] = set()
        self.challenged: set[tuple[int, int]] = set()
        self.attested: set[int] = set()
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
        if round_ == 0:  # task not started
            return []
        phase = task.phase(round_)
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
            # (reported once per block, so the driver lets time pass).
            block = self.chain.block_number()
            if self._last_try.get(("fetch-failed", round_)) == block:
                return []
            self._last_try[("fetch-failed", round_)] = block
            return [AggregatorEvent(round_, "fetch-failed", {"error": str(exc)})]
        return []

    def _on_collecting(self, round_: int) -> list[AggregatorEvent]:
        """A round short of minUpdates past its collection timeout: ``skipRound`` (anyone
        may), so the round ends carrying the model forward instead of waiting forever."""
        cfg = self.task.config()
        if round_ not in self._open_blocks:  # one getRound per round, not one per block
            self._open_blocks = {round_: self.task.round_info(round_).open_block}
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
        return self.private is None or self.private.valid(round_, update.client, payload)

    def _on_disputed(self, round_: int) -> list[AggregatorEvent]:
        info = self.task.round_info(round_)
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
        with self.clock.phase(round_, "publish"):
            if publication.available:
                self.store.put(publication.payload)
            if publication.push_to and isinstance(self.store, PeerStore):
                committee = self.task.aggregators()
                self.store.push(publication.payload, [committee[i] for i in publication.push_to])
        self._crash_here("after-publish", round_)
        with self.clock.phase(round_, "submit"):
            return self._try(
                round_,
                "submitAggregate",
                lambda: self.task.submit_aggregate(self.account, round_, digest),
                {
                    "attempt": chosen.attempt,
                    "digest": digest.hex(),
                    "honest": digest == result.digest and publication.available,
                    "included": list(result.included),
                    "excluded": {str(k): v for k, v in result.excluded.items()},
                    "privacy": result.notes,
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
                    round_, info.submission_attempt, submitter, info.aggregate_digest
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
        verification = self.verify(round_, attempt, submitter, digest)
        return not verification.agrees

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
        inputs = _RoundInputs(global_payload, payloads, [u.num_samples for u in updates], private)
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

    def verify(self, round_: int, attempt: int, submitter: str, submitted: bytes) -> Verification:
        """Re-execute round ``round_`` and compare with the submitted digest."""
        expected, _ = self.compute(round_)
        available = has_digest(self.store, submitted)
        return Verification(round_, attempt, submitter, submitted, expected.digest, available)

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
