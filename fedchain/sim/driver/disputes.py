"""Disputes: the committee's PBFT verdict on a challenged aggregate, carried on-chain.

When a round is *Disputed*, :class:`DisputeDriver` runs one PBFT instance among the
committee (:class:`consensus.committee.Committee`, on the seeded in-memory network) and
sends the resulting certificate to ``resolveDispute``. The certificate carries only members
eligible on-chain (registered, not slashed) at that moment. A committee that cannot gather
``n - f`` such votes leaves the dispute open; the aggregators then expire it once
``disputeTimeout`` blocks have passed (``expireDispute``), and the round moves on.

No failed transaction aborts a run: a refused ``resolveDispute`` is logged, the chain is
read again at the next step and the committee acts again (a bounded number of times per
dispute). Equivocation evidence a replica recorded is submitted by that replica's node
(``slashEquivocation``), once per offender.
"""

from __future__ import annotations

import time
from typing import Any

from eth_account.signers.local import LocalAccount

from adapters.contract import Phase, TaskContract
from consensus.committee import Committee, DisputeOutcome
from consensus.evidence import proof_of
from consensus.messages import Domain, Instance
from consensus.pbft import Replica
from fedchain.sim.driver.events import EventLog, emit_stakes
from fedchain.sim.driver.faults import FaultLog
from protocol.errors import ContractRevert, FedchainError

#: How often one dispute's certificate may be refused before the driver waits for expiry.
MAX_RESOLVE_TRIES = 3


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
        self._tries: dict[tuple[int, int], int] = {}
        self._undecided: set[tuple[int, int]] = set()
        self._reported: set[str] = set()
        self._restarts_seen = 0
        #: "not faulty" certificates carried on-chain, by (round, attempt): under ``dispute
        #: = "both"`` a later one-step refutation of the same aggregate slashes their signers
        self.upheld: dict[tuple[int, int], Any] = {}
        #: the fault-proof games (``both``), else None
        self.games: Any = None

    def eligible(self, address: str) -> bool:
        """May ``address`` sign a certificate now (registered, not slashed on-chain)?"""
        info = self.task.aggregator_info(address)
        return info.registered and not info.slashed

    def step(self, round_: int) -> bool:
        """Resolve the round's open dispute; True if a transaction was sent."""
        if self.task.phase(round_) != Phase.DISPUTED:
            return False
        info = self.task.round_info(round_)
        attempt, digest = info.submission_attempt, info.aggregate_digest
        key = (round_, attempt)
        if key in self._undecided or self._tries.get(key, 0) >= MAX_RESOLVE_TRIES:
            return False  # no certificate to be had: the dispute times out on-chain
        instance = Instance(self.task.address, self.domain.chain_id, round_, attempt, digest)
        outcome = self.committee.dispute(instance, max_ticks=self.max_ticks, eligible=self.eligible)
        self._emit_restarts()
        acted = self._report_equivocation(round_)
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
            votes=self._votes(instance, outcome),
        )
        if not outcome.decided or outcome.certificate is None:
            self._undecided.add(key)
            self.events.emit(
                "dispute_undecided",
                round=round_,
                attempt=attempt,
                dispute_deadline=info.dispute_deadline,
            )
            return acted
        sender = self.accounts[outcome.decided_by or 0]
        self._tries[key] = self._tries.get(key, 0) + 1
        try:
            receipt = self.task.resolve_dispute(sender, *outcome.certificate.to_contract_args())
        except ContractRevert as exc:
            # e.g. a signer slashed between the decision and this transaction: log it; the
            # next step re-reads the chain and builds the certificate again.
            dispute["resolve_error"] = str(exc)
            self.events.emit("resolve_refused", round=round_, attempt=attempt, error=str(exc))
            return acted
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
        if not outcome.certificate.faulty:
            self.upheld[key] = outcome.certificate
        self._emit_slashes(receipt)
        return True

    def _emit_restarts(self) -> None:
        """One ``pbft_restart`` event per replica crash-restart (``[pbft] restart``)."""
        for record in self.committee.restarts[self._restarts_seen :]:
            address = self.accounts[record.aggregator].address
            self.events.emit(
                "pbft_restart",
                round=record.round,
                aggregator=self.names.get(address, address),
                phase=record.phase,
                crashed_tick=record.crashed_tick,
                restarted_tick=record.restarted_tick,
                restored=record.restored,
            )
        self._restarts_seen = len(self.committee.restarts)

    def slash_refuted_certificates(self) -> bool:
        """A certificate that called an aggregate "not faulty" whose claim a proof then
        refuted (``refutedByProof``: a timeout proves nothing): an honest member sends it to
        ``slashRefutedCertificate``, which slashes every signer (docs/fault-proof.md, "PBFT
        becomes accountable", "Certificates and refutations")."""
        if self.games is None or not self.upheld:
            return False
        acted = False
        for key, cert in list(self.upheld.items()):
            cid = self.task.claim_of(*key)
            if cid is None or not self.games.view("refuted", cid):
                continue
            if not self.games.view("refutedByProof", cid):
                del self.upheld[key]  # refuted by timeout: the certificate stands
                continue
            del self.upheld[key]
            honest = [i for i, b in enumerate(self.committee.behaviours) if b == "honest"] or [0]
            sender = self.accounts[honest[0]]
            _, _, _, view, sigs = cert.to_contract_args()
            try:
                receipt = self.task.slash_refuted_certificate(
                    sender, key[0], key[1], cert.aggregate_digest, view, sigs
                )
            except ContractRevert as exc:
                self.events.emit("slash_refused", round=key[0], attempt=key[1], error=str(exc))
                continue
            acted = True
            self.faults.attempt(*key)["certificate_slashed"] = int(receipt["gasUsed"])
            self.events.emit(
                "certificate_slashed",
                round=key[0],
                attempt=key[1],
                claim=cid,
                signers=[self.names.get(s, s) for s, _ in cert.signatures],
                gas=int(receipt["gasUsed"]),
            )
            self._emit_slashes(receipt)
        return acted

    def _votes(self, instance: Instance, outcome: DisputeOutcome) -> list[dict[str, Any]]:
        """Per member: PBFT behaviour, own re-execution verdict, decision, certificate."""
        signed = set() if outcome.certificate is None else dict(outcome.certificate.signatures)
        votes = []
        for i, node in enumerate(self.committee.nodes):
            address = self.accounts[i].address
            reexecution = None
            if isinstance(node, Replica):
                try:
                    reexecution = "faulty" if node.validate(instance) else "upheld"
                except FedchainError:  # its inputs are unavailable to it: it abstains
                    reexecution = None
            decision = self.committee.net.decisions[i].get(instance)
            votes.append(
                {
                    "member": self.names.get(address, address),
                    "pbft": self.committee.behaviours[i],
                    "reexecution": reexecution,
                    "decided": None
                    if decision is None
                    else ("faulty" if decision.faulty else "upheld"),
                    "view": None if decision is None else decision.certificate.view,
                    "signed": address in signed,
                }
            )
        return votes

    def _report_equivocation(self, round_: int) -> bool:
        """Each replica's recorded, slashable evidence is submitted by its own node."""
        acted = False
        for node in self.committee.nodes:
            if not isinstance(node, Replica) or self.committee.behaviours[node.index] != "honest":
                continue
            for evidence in list(node.evidence):
                proof = proof_of(evidence)
                if proof is None:
                    continue
                offender = self.accounts[proof.sender].address
                if offender in self._reported or not self.eligible(offender):
                    continue
                self._reported.add(offender)
                reporter = self.accounts[node.index]
                try:
                    receipt = self.task.slash_equivocation(reporter, *proof.contract_args())
                except ContractRevert as exc:
                    self.events.emit("slash_refused", offender=offender, error=str(exc))
                    continue
                acted = True
                self.faults.equivocation(
                    round_,
                    self.names.get(offender, offender),
                    self.names.get(reporter.address, reporter.address),
                    evidence.kind,
                    int(receipt["gasUsed"]),
                )
                self.events.emit(
                    "equivocation_slashed",
                    round=round_,
                    offender=self.names.get(offender, offender),
                    reporter=self.names.get(reporter.address, reporter.address),
                    message=evidence.kind,
                    gas=int(receipt["gasUsed"]),
                )
                self._emit_slashes(receipt)
        return acted

    def _emit_slashes(self, receipt: Any) -> None:
        slashed = False
        for ev in self.task.events(receipt):
            if ev.name == "Slashed":
                who = str(ev.args["aggregator"])
                self.events.emit(
                    "slashed", aggregator=self.names.get(who, who), amount=int(ev.args["amount"])
                )
                slashed = True
        if slashed:
            members = {str(a.address): self.names.get(a.address, a.address) for a in self.accounts}
            emit_stakes(self.events, self.task, members)
