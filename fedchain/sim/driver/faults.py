"""Fault records: what every attempt of every round did, for ``rounds.jsonl`` and reports.

The :class:`FaultLog` absorbs the aggregators' step events (submission, withholding,
timeout, challenge), the disputes' outcomes and node crashes. It compares every submitted
aggregate with an honest oracle's re-execution, so a run can tell faulty aggregates,
rejections, false rejections and faulty finalizations apart. It only observes: nothing in
it feeds back into the protocol.
"""

from __future__ import annotations

import time
from typing import Any

from adapters.contract import Phase, TaskContract
from adapters.storage import ContentStore, has_digest
from aggregators.behaviours import Behaviour
from aggregators.node import AggregatorEvent, AggregatorNode
from fedchain.sim.driver.events import EventLog, emit_stakes
from protocol.metrics import PhaseClock


class FaultLog:
    """Per-(round, attempt) records and crash records of one run."""

    def __init__(
        self,
        task: TaskContract,
        store: ContentStore,
        oracle: AggregatorNode,
        names: dict[str, str],
        events: EventLog,
        clock: PhaseClock | None = None,
    ) -> None:
        self.task = task
        self.clock = clock or PhaseClock()
        self.store = store
        self.oracle = oracle
        self.names = names
        self.events = events
        self.attempts: dict[tuple[int, int], dict[str, Any]] = {}
        self.chosen: dict[tuple[int, int], str] = {}
        self.honest_digests: dict[int, bytes] = {}
        #: the stopping rule's decision of each round's honest re-execution
        self.honest_stops: dict[int, bool] = {}
        self.crashes: list[dict[str, Any]] = []
        self.equivocations: list[dict[str, Any]] = []
        self.attestations: dict[int, dict[str, Any]] = {}
        #: the honest re-execution's privacy notes per round (clip norms, dropped peers, ...)
        self.privacy_notes: dict[int, dict[str, Any]] = {}
        self.selections: dict[int, dict[str, Any]] = {}
        self._attesting: set[int] = set()
        #: the fault-proof games contract (``--dispute fault-proof|both``), read for claims
        self.games: Any = None

    def attempt(self, round_: int, attempt: int) -> dict[str, Any]:
        return self.attempts.setdefault(
            (round_, attempt),
            {"round": round_, "attempt": attempt, "challenges": [], "disputes": []},
        )

    def note_chosen(self, round_: int) -> None:
        """Record the contract's choice for the current attempt (read independently), and
        the start of the round's attestation phase."""
        phase = self.task.phase(round_)
        if phase == Phase.ATTESTING and round_ not in self._attesting:
            self._attesting.add(round_)
            self.events.emit("phase", round=round_, attempt=0, phase="attesting")
        if phase == Phase.AGGREGATING:
            chosen = self.task.current_aggregator()
            if chosen.address is not None and (round_, chosen.attempt) not in self.chosen:
                self.chosen[(round_, chosen.attempt)] = chosen.address
                self.events.emit("phase", round=round_, attempt=chosen.attempt, phase="aggregating")
                self.events.emit(
                    "chosen",
                    round=round_,
                    attempt=chosen.attempt,
                    aggregator=self.names.get(chosen.address, chosen.address),
                    deadline_block=chosen.deadline_block,
                )

    def absorb(self, node: AggregatorNode, behaviour: Behaviour, ev: AggregatorEvent) -> None:
        """Record one aggregator step event."""
        name = node.name
        if ev.action == "submitAggregate":
            rec = self.attempt(ev.round, ev.detail["attempt"])
            # The oracle re-executes while the round's inputs are current (before finalize).
            with self.clock.phase(ev.round, "oracle"):
                honest = self.oracle.compute(ev.round)[0]
            honest_digest = honest.digest
            self.honest_digests[ev.round] = honest_digest
            self.honest_stops[ev.round] = honest.stop
            wrong_stop = bool(ev.detail.get("stop", False)) != honest.stop
            notes = dict(honest.notes)
            selection = notes.pop("selection", {})
            self.privacy_notes[ev.round] = notes
            if honest.selected is not None or selection:
                # which updates a selection rule kept (Krum, Multi-Krum, Bulyan) and what a
                # pre-aggregator did (NNM neighbourhoods...), in registered-update indices
                self.selections[ev.round] = {
                    "selected": list(honest.selected) if honest.selected is not None else None,
                    **selection,
                }
            available = has_digest(self.store, bytes.fromhex(ev.detail["digest"]))
            rec.update(
                aggregator=node.address,
                aggregator_name=name,
                behaviour=behaviour.publish if behaviour.faulty_in(ev.round) else "honest",
                digest=ev.detail["digest"],
                honest_digest=honest_digest.hex(),
                available=available,
                faulty=ev.detail["digest"] != honest_digest.hex() or not available or wrong_stop,
                stop=bool(ev.detail.get("stop", False)),
                honest_stop=honest.stop,
                submit_block=ev.detail["block"],
                submit_time=time.perf_counter(),
                included=ev.detail["included"],
                excluded=ev.detail["excluded"],
                gas_submit=ev.detail["gas"],
            )
            if "claim" in ev.detail:
                rec["claim"] = ev.detail["claim"]
            self.events.emit(
                "aggregate_submitted",
                round=ev.round,
                attempt=ev.detail["attempt"],
                aggregator=name,
                digest=ev.detail["digest"],
                faulty=rec["faulty"],
                behaviour=rec["behaviour"],
                block=ev.detail["block"],
                gas=ev.detail["gas"],
            )
            self.events.emit(
                "phase", round=ev.round, attempt=ev.detail["attempt"], phase="submitted"
            )
        elif ev.action == "withhold":
            rec = self.attempt(ev.round, ev.detail["attempt"])
            rec.update(
                aggregator=node.address,
                aggregator_name=name,
                behaviour="withhold",
                withheld=True,
                faulty=True,
            )
        elif ev.action == "advanceAttempt":
            rec = self.attempt(ev.round, ev.detail["attempt"])
            rec.setdefault("aggregator", ev.detail["laggard"])
            rec.setdefault("aggregator_name", self.names.get(ev.detail["laggard"] or "", "-"))
            rec.update(
                timed_out=True, advanced_block=ev.detail["block"], gas_advance=ev.detail["gas"]
            )
            self.events.emit(
                "timeout",
                round=ev.round,
                attempt=ev.detail["attempt"],
                aggregator=rec["aggregator_name"],
                block=ev.detail["block"],
            )
        elif ev.action == "expireDispute":
            rec = self.attempt(ev.round, ev.detail["attempt"])
            rec.update(expired=True, expired_block=ev.detail["block"], gas_expire=ev.detail["gas"])
            self.events.emit(
                "dispute_expired",
                round=ev.round,
                attempt=ev.detail["attempt"],
                by=name,
                block=ev.detail["block"],
            )
        elif ev.action in ("abortTask", "leaveCommittee"):
            # the exits (issue 20): the task made no progress / was never started
            self.events.emit(
                "exit",
                action=ev.action,
                round=ev.round,
                aggregator=name,
                block=ev.detail["block"],
                gas=ev.detail["gas"],
            )
        elif ev.action == "attest":
            rec = self.attestations.setdefault(ev.round, {"attesters": {}, "gas": 0})
            rec["attesters"][name] = ev.detail["held"]
            rec["gas"] += ev.detail["gas"] or 0
            self.events.emit(
                "attested",
                round=ev.round,
                aggregator=name,
                held=ev.detail["held"],
                updates=ev.detail["updates"],
            )
        elif ev.action.startswith("game-"):
            self._game(name, ev)
        elif ev.action == "rejectRefuted":
            # the task discards an aggregate whose claim a one-step proof refuted: the
            # submitter is slashed and the round re-opens at the next attempt
            rec = self.attempt(ev.round, ev.detail["attempt"])
            rec.update(
                refuted_rejected=True,
                rejected_by=name,
                reject_block=ev.detail["block"],
                gas_reject=ev.detail["gas"],
            )
            submitter = str(ev.detail.get("submitter") or "")
            self.events.emit(
                "refuted_rejected",
                round=ev.round,
                attempt=ev.detail["attempt"],
                claim=ev.detail.get("claim"),
                submitter=self.names.get(submitter, submitter),
                by=name,
                block=ev.detail["block"],
                gas=ev.detail["gas"],
            )
            emit_stakes(self.events, self.task, self._members())
        elif ev.action == "challenge":
            rec = self.attempt(ev.round, ev.detail["attempt"])
            rec["challenges"].append(
                {
                    "challenger": name,
                    "block": ev.detail["block"],
                    "gas": ev.detail["gas"],
                    "time": time.perf_counter(),
                }
            )
            self.events.emit(
                "challenge",
                round=ev.round,
                attempt=ev.detail["attempt"],
                challenger=name,
                block=ev.detail["block"],
            )
            self.events.emit(
                "phase", round=ev.round, attempt=ev.detail["attempt"], phase="disputed"
            )

    def _members(self) -> dict[str, str]:
        """Committee addresses -> names, in committee order."""
        return {a: self.names.get(a, a) for a in self.task.aggregators()}

    def _game(self, name: str, ev: AggregatorEvent) -> None:
        """A fault-proof move (docs/fault-proof.md): one ``game_move`` event per transaction,
        kept per attempt (``games``) with its gas."""
        move = ev.action.removeprefix("game-")
        if move == "open":
            return  # the openLeaf / openDescent transaction itself follows as a move
        attempt = int(ev.detail.get("attempt", 0))
        rec = self.attempt(ev.round, attempt)
        entry = {
            "player": name,
            "move": move,
            "id": ev.detail.get("id"),
            "role": ev.detail.get("role"),
            "gas": ev.detail.get("gas"),
        }
        rec.setdefault("games", []).append(entry)
        self.events.emit("game_move", round=ev.round, attempt=attempt, **entry)

    def equivocation(self, round_: int, offender: str, reporter: str, kind: str, gas: int) -> None:
        """An equivocating member was slashed on a replica's recorded evidence."""
        self.equivocations.append(
            {"round": round_, "offender": offender, "reporter": reporter, "kind": kind, "gas": gas}
        )

    def crashed(self, name: str, round_: int, block: int, what: str) -> None:
        self.crashes.append({"aggregator": name, "round": round_, "block": block, "what": what})
        self.events.emit("crash", round=round_, aggregator=name, block=block, what=what)

    def restarted(self, name: str, block: int) -> None:
        self.crashes[-1]["restarted_block"] = block
        self.events.emit("restart", aggregator=name, block=block)

    def attempt_records(self, round_: int) -> list[dict[str, Any]]:
        """The round's attempts, with detection latencies derived (JSON-ready)."""
        out = []
        for (r, _), rec in sorted(self.attempts.items()):
            if r != round_:
                continue
            rec = dict(rec)
            submit_time = rec.pop("submit_time", None)
            challenge_time = None
            if rec["challenges"]:
                first = rec["challenges"][0]
                challenge_time = first.pop("time", None)
                if "submit_block" in rec:
                    rec["blocks_to_challenge"] = first["block"] - rec["submit_block"]
            for d in rec["disputes"]:
                t = d.pop("resolve_time", None)
                if t is not None and submit_time is not None:
                    d["seconds_from_submission"] = round(t - submit_time, 3)
                if "resolve_block" in d and "submit_block" in rec:
                    d["blocks_from_submission"] = d["resolve_block"] - rec["submit_block"]
            if challenge_time is not None and submit_time is not None:
                rec["seconds_to_challenge"] = round(challenge_time - submit_time, 3)
            rec["dispute_gas"] = (
                sum(c.get("gas") or 0 for c in rec["challenges"])
                + sum(d.get("gas_resolve", 0) for d in rec["disputes"])
                + (rec.get("gas_expire") or 0)
                + (rec.get("gas_reject") or 0)
            )
            rec["rejected"] = any(d.get("verdict") == "faulty" for d in rec["disputes"]) or bool(
                rec.get("refuted_rejected")
            )
            if "claim" in rec and self.games is not None:
                rec["claim_refuted"] = bool(self.games.view("refuted", rec["claim"]))
            if rec.get("games"):
                rec["game_gas"] = sum(m.get("gas") or 0 for m in rec["games"])
            out.append(rec)
        return out


def fault_summary(
    records: list[dict[str, Any]],
    crashes: list[dict[str, Any]],
    equivocations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The run's fault counts over every attempt of every recorded round."""
    finalized = [r for r in records if r["finalized"]]
    attempts = [a for r in records for a in r["attempts"]]
    faulty = [a for a in attempts if a.get("faulty")]
    submitted_faulty = [a for a in faulty if not a.get("withheld")]
    detect_blocks = [
        d["blocks_from_submission"]
        for a in submitted_faulty
        for d in a["disputes"]
        if d.get("verdict") == "faulty" and "blocks_from_submission" in d
    ]
    detect_blocks += [  # a one-step refutation: submission to rejectRefuted
        a["reject_block"] - a["submit_block"]
        for a in submitted_faulty
        if a.get("refuted_rejected") and "reject_block" in a and "submit_block" in a
    ]
    detect_seconds = [
        d["seconds_from_submission"]
        for a in submitted_faulty
        for d in a["disputes"]
        if d.get("verdict") == "faulty" and "seconds_from_submission" in d
    ]
    return {
        "faulty_aggregates": len(submitted_faulty),
        "withheld": sum(1 for a in faulty if a.get("withheld")),
        "timeouts": sum(1 for a in attempts if a.get("timed_out")),
        "challenges": sum(len(a["challenges"]) for a in attempts),
        "disputes": sum(len(a["disputes"]) for a in attempts),
        "rejected": sum(1 for a in submitted_faulty if a["rejected"]),
        "dispute_timeouts": sum(1 for a in attempts if a.get("expired")),
        "honest_expired": sum(1 for a in attempts if a.get("expired") and not a.get("faulty")),
        "equivocations_slashed": len(equivocations or []),
        "false_rejections": sum(1 for a in attempts if a["rejected"] and not a.get("faulty")),
        "faulty_finalized": sum(1 for r in finalized if r["faulty_finalized"]),
        "view_changes": sum(d["view_changes"] for a in attempts for d in a["disputes"]),
        "detection_blocks_mean": mean_or_none(detect_blocks),
        "detection_seconds_mean": mean_or_none(detect_seconds),
        "dispute_gas_total": sum(a["dispute_gas"] for a in attempts),
        # the fault proof (docs/fault-proof.md): claims refuted by a one-step proof, the
        # honest claims among them (must be 0), every game transaction's gas
        "claims": sum(1 for a in attempts if "claim" in a),
        "claims_refuted": sum(1 for a in attempts if a.get("claim_refuted")),
        "honest_claims_refuted": sum(
            1 for a in attempts if a.get("claim_refuted") and not a.get("faulty")
        ),
        "faulty_claims_unrefuted": sum(
            1 for a in submitted_faulty if "claim" in a and not a.get("claim_refuted")
        ),
        "game_moves": sum(len(a.get("games", [])) for a in attempts),
        "game_gas_total": sum(a.get("game_gas", 0) for a in attempts),
        "crashes": crashes,
        "equivocations": equivocations or [],
    }


def mean_or_none(values: list[float] | list[int]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None
