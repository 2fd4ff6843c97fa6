"""Disputes: the committee's PBFT verdict on a challenged aggregate, carried on-chain.

When a round is *Disputed*, :class:`DisputeDriver` runs one PBFT instance among the
committee (:class:`consensus.committee.Committee`, on the seeded in-memory network) and
sends the resulting certificate to ``resolveDispute``. A committee that cannot gather
``n - f`` votes stalls the dispute, and the run reports lost liveness.
"""

from __future__ import annotations

import time
from typing import Any

from eth_account.signers.local import LocalAccount

from adapters.contract import Phase, TaskContract
from consensus.committee import Committee
from consensus.messages import Domain, Instance
from consensus.quorums import commit_quorum, max_faulty
from fedchain.driver.events import EventLog
from fedchain.driver.faults import FaultLog


class DisputeDriver:
    """Runs the committee on the current round's open dispute, if any."""

    def __init__(
        self,
        task: TaskContract,
        committee: Committee,
        domain: Domain,
        accounts: list[LocalAccount],
        names: dict[str, str],
        faults: FaultLog,
        events: EventLog,
        *,
        max_ticks: int,
    ) -> None:
        self.task = task
        self.committee = committee
        self.domain = domain
        self.accounts = accounts
        self.names = names
        self.faults = faults
        self.events = events
        self.max_ticks = max_ticks
        self.stalled: str | None = None

    def step(self, round_: int) -> bool:
        """Resolve the round's open dispute; True if a transaction was sent."""
        if self.task.phase(round_) != Phase.DISPUTED:
            return False
        info = self.task.round_info(round_)
        attempt, digest = info.submission_attempt, info.aggregate_digest
        instance = Instance(self.task.address, self.domain.chain_id, round_, attempt, digest)
        outcome = self.committee.dispute(instance, max_ticks=self.max_ticks)
        rec = self.faults.attempt(round_, attempt)
        verdict = None if outcome.faulty is None else ("faulty" if outcome.faulty else "upheld")
        dispute: dict[str, Any] = {
            "decided": outcome.decided,
            "verdict": verdict,
            "view": outcome.view,
            "view_changes": outcome.view_changes,
            "pbft_ticks": outcome.ticks,
        }
        rec["disputes"].append(dispute)
        self.events.emit(
            "dispute",
            round=round_,
            attempt=attempt,
            decided=outcome.decided,
            verdict=verdict,
            view=outcome.view,
            view_changes=outcome.view_changes,
            signers=[]
            if outcome.certificate is None
            else [self.names.get(s, s) for s, _ in outcome.certificate.signatures],
        )
        n = len(self.accounts)
        if not outcome.decided or outcome.certificate is None:
            self.stalled = (
                f"the dispute over round {round_} attempt {attempt} gathered no quorum of "
                f"{commit_quorum(n)} PBFT votes within {outcome.ticks} ticks "
                f"(more than f = {max_faulty(n)} Byzantine aggregators?)"
            )
            return False
        sender = self.accounts[outcome.decided_by or 0]
        receipt = self.task.resolve_dispute(sender, *outcome.certificate.to_contract_args())
        dispute.update(
            resolve_block=int(receipt["blockNumber"]),
            gas_resolve=int(receipt["gasUsed"]),
            signers=len(outcome.certificate.signatures),
            resolve_time=time.perf_counter(),
        )
        self.events.emit(
            "dispute_resolved",
            round=round_,
            attempt=attempt,
            verdict=verdict,
            signers=len(outcome.certificate.signatures),
            gas=int(receipt["gasUsed"]),
            block=int(receipt["blockNumber"]),
        )
        for ev in self.task.events(receipt):
            if ev.name == "Slashed":
                who = str(ev.args["aggregator"])
                self.events.emit(
                    "slashed", aggregator=self.names.get(who, who), amount=int(ev.args["amount"])
                )
        return True
