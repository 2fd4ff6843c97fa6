"""The aggregator node: driven by chain state, idempotent and restartable.

One :meth:`AggregatorNode.step` reads the contract and does what the protocol asks now:

* the round's collection closed and the contract chose *this* node for the current attempt:
  fetch exactly the registered updates, verify each against its on-chain digest (the store
  does), run the rule, publish the new global state and ``submitAggregate``;
* the chosen aggregator let its deadline pass: ``advanceAttempt`` (anyone may);
* another node submitted: re-execute the round and compare digests (a mismatch is recorded
  as a fault; challenging it is the dispute path's job);
* the challenge window is over: ``finalize``.

Nothing here is remembered that the chain does not also know, so a restarted node resumes
from chain + storage state without double submissions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eth_account.signers.local import LocalAccount

from aggregators.execution import RoundResult, execute_round, rule_for
from fedchain.chain import Chain
from fedchain.cid import cid_from_digest, sha256_digest
from fedchain.contract import Phase, TaskContract
from fedchain.errors import ContractRevert, StorageError
from fedchain.metrics import PhaseClock
from fedchain.storage import ContentStore
from fedchain.task import TaskManifest

#: A behaviour may replace the honest result's payload before publication (faulty aggregator).
#: It returns the bytes to publish and whether to make them available in storage.
PublishHook = Callable[[RoundResult], tuple[bytes, bool]]


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
        publish_hook: PublishHook | None = None,
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
        self.publish_hook = publish_hook
        self.verifications: dict[tuple[int, int], Verification] = {}
        self._cache: dict[tuple[int, bytes, tuple[bytes, ...]], RoundResult] = {}

    # -- protocol steps --------------------------------------------------------------------

    def step(self) -> list[AggregatorEvent]:
        """Do whatever the chain state asks of this node now; return what was done."""
        task = self.task
        round_ = task.current_round()
        if round_ == 0:  # task not started
            return []
        phase = task.phase(round_)
        if phase == Phase.AGGREGATING:
            return self._on_aggregating(round_)
        if phase == Phase.SUBMITTED:
            return self._on_submitted(round_)
        return []

    def _on_aggregating(self, round_: int) -> list[AggregatorEvent]:
        chosen = self.task.current_aggregator()
        block = self.chain.block_number()
        if block > chosen.deadline_block:
            return self._try(round_, "advanceAttempt", lambda: self.task.advance_attempt(
                self.account, round_), {"laggard": chosen.address, "attempt": chosen.attempt})
        if chosen.address != self.address:
            return []
        result = self.compute(round_)
        payload, available = result.payload, True
        if self.publish_hook is not None:
            payload, available = self.publish_hook(result)
        digest = sha256_digest(payload)
        if available:
            with self.clock.phase(round_, "publish"):
                self.store.put(payload)
        with self.clock.phase(round_, "submit"):
            events = self._try(
                round_,
                "submitAggregate",
                lambda: self.task.submit_aggregate(self.account, round_, digest),
                {
                    "attempt": chosen.attempt,
                    "digest": digest.hex(),
                    "honest": digest == result.digest,
                    "included": list(result.included),
                    "excluded": {str(k): v for k, v in result.excluded.items()},
                },
            )
        return events

    def _on_submitted(self, round_: int) -> list[AggregatorEvent]:
        info = self.task.round_info(round_)
        events: list[AggregatorEvent] = []
        key = (round_, info.attempt)
        if info.aggregator != self.address and key not in self.verifications:
            with self.clock.phase(round_, "verify"):
                verification = self.verify(
                    round_, info.submission_attempt, info.aggregator or "", info.aggregate_digest
                )
            self.verifications[key] = verification
            events.append(
                AggregatorEvent(
                    round_,
                    "verify",
                    {"attempt": info.attempt, "agrees": verification.agrees,
                     "submitter": info.aggregator},
                )
            )
        if self.chain.block_number() > info.challenge_deadline:
            with self.clock.phase(round_, "finalize"):
                events += self._try(
                    round_, "finalize", lambda: self.task.finalize(self.account, round_), {}
                )
        return events

    # -- computation -----------------------------------------------------------------------

    def compute(self, round_: int) -> RoundResult:
        """Fetch the round's registered inputs and re-execute the rule (cached)."""
        with self.clock.phase(round_, "fetch"):
            global_digest = self.task.global_model_digest()
            updates = self.task.updates(round_)
            key = (round_, global_digest, tuple(u.digest for u in updates))
            if key in self._cache:
                return self._cache[key]
            global_payload = self.store.get(cid_from_digest(global_digest))
            payloads: list[bytes | None] = []
            for update in updates:
                try:
                    payloads.append(self.store.get(cid_from_digest(update.digest)))
                except StorageError:
                    payloads.append(None)
        with self.clock.phase(round_, "aggregate"):
            result = execute_round(
                self.manifest,
                round_,
                global_payload,
                payloads,
                [u.num_samples for u in updates],
                rule=self.rule,
            )
        self._cache = {key: result}
        return result

    def verify(self, round_: int, attempt: int, submitter: str, submitted: bytes) -> Verification:
        """Re-execute round ``round_`` and compare with the submitted digest."""
        expected = self.compute(round_)
        available = self.store.has(cid_from_digest(submitted))
        return Verification(round_, attempt, submitter, submitted, expected.digest, available)

    # -- helpers ---------------------------------------------------------------------------

    def _try(
        self, round_: int, action: str, call: Callable[[], Any], detail: dict[str, Any]
    ) -> list[AggregatorEvent]:
        """Send a transaction; a revert because another node got there first is not an error."""
        try:
            receipt = call()
        except ContractRevert as exc:
            return [AggregatorEvent(round_, f"{action}-refused", {"error": exc.error_name})]
        detail = dict(detail)
        detail["gas"] = int(receipt["gasUsed"]) if receipt is not None else None
        return [AggregatorEvent(round_, action, detail)]
