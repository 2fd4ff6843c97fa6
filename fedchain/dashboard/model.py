"""A run's live view: the events of ``events.jsonl`` folded into rounds, attempts and stakes.

:class:`RunView` is a pure fold. :meth:`RunView.apply` takes one event (the kinds documented
in :mod:`fedchain.sim.driver.events`; unknown kinds are counted and kept in the feed, missing
fields are tolerated) and updates: the run's identity, the current round/phase/attempt, one
:class:`RoundView` per round with its phase history and one :class:`AttemptView` per attempt
(the contract's choice, the submission, timeouts, challenges, PBFT disputes with views,
votes and view changes, the resolution), the committee's stakes and credits over time,
slashings, accuracy and loss. :meth:`RunView.merge_records` and
:meth:`RunView.merge_summary` add what only ``rounds.jsonl`` and ``summary.json`` hold (gas
per operation, phase seconds, privacy accounting, the final figures), and
:meth:`RunView.snapshot` returns everything JSON-ready. The same view feeds the live pages,
the JSON API and the HTML report, so they show the same numbers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

#: Phases of a round in protocol order, as ``phase`` events name them.
PHASE_ORDER = ("collecting", "attesting", "aggregating", "submitted", "disputed", "finalized")
#: How the pages label them ("submitted" is the optimistic-rollup challenge window).
PHASE_LABELS = {
    "collecting": "collecting",
    "attesting": "attesting",
    "aggregating": "aggregating",
    "submitted": "challenge window",
    "disputed": "PBFT dispute",
    "finalized": "finalized",
}
#: Events kept for the live feed.
FEED_LENGTH = 200


@dataclass
class AttemptView:
    """One attempt of a round: who the contract chose and what happened to its aggregate."""

    attempt: int
    chosen: str | None = None
    deadline_block: int | None = None
    submission: dict[str, Any] | None = None
    timed_out: dict[str, Any] | None = None
    challenges: list[dict[str, Any]] = field(default_factory=list)
    disputes: list[dict[str, Any]] = field(default_factory=list)
    votes: dict[str, dict[str, Any]] = field(default_factory=dict)
    resolved: dict[str, Any] | None = None
    refused: list[str] = field(default_factory=list)
    undecided: bool = False
    expired: dict[str, Any] | None = None
    #: fault-proof moves on this attempt's claim, in order (``game_move`` events)
    games: list[dict[str, Any]] = field(default_factory=list)

    @property
    def refuted(self) -> bool:
        """A one-step proof refuted this attempt's claim (a ``prove`` or ``proveNorm`` move)."""
        return any(m.get("move") in ("prove", "proveNorm") for m in self.games)

    @property
    def outcome(self) -> str:
        """A short word for the attempt's fate."""
        if self.refuted:
            return "refuted"
        if self.resolved is not None:
            return "rejected" if self.resolved.get("verdict") == "faulty" else "upheld"
        if self.expired is not None:
            return "dispute expired"
        if self.timed_out is not None:
            return "timed out"
        if self.disputes or self.challenges:
            return "disputed"
        if self.submission is not None:
            return "submitted"
        return "waiting" if self.chosen else "-"


@dataclass
class RoundView:
    """One round: its phase history, registrations, attestations, attempts and result."""

    round: int
    phase: str = "collecting"
    attempt: int = 0
    phases: list[dict[str, Any]] = field(default_factory=list)
    registered: int = 0
    refused: int = 0
    relayed: int = 0  # registered in a relayer's submitUpdates batch
    batches: set[int] = field(default_factory=set)  # those batches' first update indices
    attested: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[int, AttemptView] = field(default_factory=dict)
    finalized: dict[str, Any] | None = None
    record: dict[str, Any] = field(default_factory=dict)

    def attempt_view(self, attempt: int) -> AttemptView:
        if attempt not in self.attempts:
            self.attempts[attempt] = AttemptView(attempt)
        return self.attempts[attempt]

    @property
    def started(self) -> float | None:
        return self.phases[0]["t"] if self.phases else None

    @property
    def ended(self) -> float | None:
        return self.finalized.get("t") if self.finalized else None


def _verdict_word(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return "faulty" if value else "upheld"


def registration(rv: RoundView) -> dict[str, int]:
    """How a round's updates reached the chain: ``relayed`` in ``batches`` relayed
    ``submitUpdates`` transactions, ``alone`` by the clients' own ``submitUpdate``."""
    return {
        "relayed": rv.relayed,
        "batches": len(rv.batches) if rv.batches else int(rv.relayed > 0),
        "alone": rv.registered - rv.relayed,
    }


class RunView:
    """The fold of one run's events (plus its records and summary), JSON-ready on demand."""

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self.status = "waiting"
        self.stalled: str | None = None
        self.current: dict[str, Any] = {"round": 0, "phase": None, "attempt": 0}
        self.rounds: dict[int, RoundView] = {}
        self.stakes: dict[str, dict[str, Any]] = {}
        self.stake_history: list[dict[str, Any]] = []
        self.slashes: list[dict[str, Any]] = []
        self.equivocations: list[dict[str, Any]] = []
        self.crashes: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []
        self.nodes: dict[str, dict[str, Any]] = {}
        self.feed: deque[dict[str, Any]] = deque(maxlen=FEED_LENGTH)
        self.kinds: dict[str, int] = {}
        self.n_events = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.summary: dict[str, Any] | None = None
        self.verdict: dict[str, Any] | None = None
        self.records: list[dict[str, Any]] = []
        self.gas_ops: dict[str, int] = {}  # testnets: summed from the nodes' logs
        self.privacy_stop: dict[str, Any] | None = None  # the budget stopped the run

    # -- the fold ----------------------------------------------------------------------------

    def round_view(self, round_: int) -> RoundView:
        if round_ not in self.rounds:
            self.rounds[round_] = RoundView(round_)
        return self.rounds[round_]

    def apply_all(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.apply(event)

    def apply(self, event: dict[str, Any]) -> None:
        """Fold one event into the view."""
        kind = str(event.get("kind", "?"))
        t = event.get("t")
        self.n_events += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if isinstance(t, int | float):
            self.first_t = t if self.first_t is None else min(self.first_t, t)
            self.last_t = t if self.last_t is None else max(self.last_t, t)
        if kind != "update_registered":  # thousands per run at scale: counted, not listed
            self.feed.append(event)
        handler = getattr(self, "_on_" + kind, None)
        if handler is not None:
            handler(event)
        if self.status == "waiting" and kind != "run_started":
            self.status = "running"

    def _round_of(self, event: dict[str, Any]) -> RoundView | None:
        r = event.get("round")
        return self.round_view(int(r)) if isinstance(r, int) and r > 0 else None

    def _attempt_of(self, event: dict[str, Any]) -> AttemptView | None:
        rv = self._round_of(event)
        if rv is None:
            return None
        return rv.attempt_view(int(event.get("attempt") or 0))

    def _on_run_started(self, e: dict[str, Any]) -> None:
        self.info = {k: v for k, v in e.items() if k not in ("t", "kind")}
        self.info["started"] = e.get("t")
        self.status = "running"
        for agg in e.get("aggregators") or []:
            name = agg.get("name") if isinstance(agg, dict) else str(agg)
            if name:
                self.stakes.setdefault(name, {})

    def _on_phase(self, e: dict[str, Any]) -> None:
        rv = self._round_of(e)
        if rv is None:
            return
        phase = str(e.get("phase"))
        attempt = int(e.get("attempt") or 0)
        last = rv.phases[-1] if rv.phases else None
        if last is None or (last["phase"], last["attempt"]) != (phase, attempt):
            rv.phases.append({"phase": phase, "attempt": attempt, "t": e.get("t")})
        rv.phase, rv.attempt = phase, attempt
        if rv.round >= self.current["round"]:
            self.current = {"round": rv.round, "phase": phase, "attempt": attempt}

    def _on_chosen(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is not None:
            av.chosen = e.get("aggregator")
            av.deadline_block = e.get("deadline_block")

    def _on_update_registered(self, e: dict[str, Any]) -> None:
        rv = self._round_of(e)
        if rv is None:
            return
        rv.registered += 1
        if e.get("relayed"):
            rv.relayed += 1
            if isinstance(e.get("batch"), int):
                rv.batches.add(e["batch"])

    def _on_client_refused(self, e: dict[str, Any]) -> None:
        rv = self._round_of(e)
        if rv is not None:
            rv.refused += 1

    def _on_attested(self, e: dict[str, Any]) -> None:
        rv = self._round_of(e)
        if rv is not None and e.get("aggregator"):
            rv.attested[str(e["aggregator"])] = {"held": e.get("held"), "updates": e.get("updates")}

    def _on_aggregate_submitted(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is not None:
            av.submission = {
                k: e.get(k) for k in ("aggregator", "digest", "faulty", "behaviour", "block", "gas")
            }
            av.submission["t"] = e.get("t")

    def _on_timeout(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is not None:
            av.timed_out = {
                "aggregator": e.get("aggregator"),
                "block": e.get("block"),
                "t": e.get("t"),
            }

    def _on_challenge(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is not None:
            av.challenges.append(
                {"challenger": e.get("challenger"), "block": e.get("block"), "t": e.get("t")}
            )

    def _on_dispute(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is None:
            return
        av.disputes.append(
            {
                "decided": e.get("decided"),
                "verdict": e.get("verdict"),
                "view": e.get("view"),
                "view_changes": e.get("view_changes"),
                "signer_names": e.get("signers") or [],
                "t": e.get("t"),
            }
        )
        for vote in e.get("votes") or []:
            member = vote.get("member")
            if member:
                av.votes[str(member)] = {**av.votes.get(str(member), {}), **vote}

    def _on_pbft_vote(self, e: dict[str, Any]) -> None:
        """A testnet member's own verdict as its PBFT instance starts (node logs)."""
        av = self._attempt_of(e)
        if av is not None and e.get("member"):
            vote = av.votes.setdefault(str(e["member"]), {"member": e["member"]})
            vote["reexecution"] = _verdict_word(e.get("verdict"))
            if e.get("pbft"):
                vote["pbft"] = e["pbft"]

    def _on_gas(self, e: dict[str, Any]) -> None:
        """Gas of one transaction a testnet node sent (node logs)."""
        op, gas = e.get("operation"), e.get("gas")
        if op and isinstance(gas, int):
            self.gas_ops[str(op)] = self.gas_ops.get(str(op), 0) + gas

    def _on_pbft_decided(self, e: dict[str, Any]) -> None:
        """A testnet member's PBFT decision (node logs)."""
        av = self._attempt_of(e)
        if av is None or not e.get("member"):
            return
        vote = av.votes.setdefault(str(e["member"]), {"member": e["member"]})
        vote.update(decided=_verdict_word(e.get("verdict")), view=e.get("view"))
        if not av.disputes:
            av.disputes.append(
                {
                    "decided": True,
                    "verdict": _verdict_word(e.get("verdict")),
                    "view": e.get("view"),
                    "view_changes": e.get("view"),
                    "signer_names": [],
                    "t": e.get("t"),
                }
            )

    def _on_pbft_view(self, e: dict[str, Any]) -> None:
        member = e.get("member")
        if member:
            node = self.nodes.setdefault(str(member), {})
            node["view"] = e.get("view")
            node["view_changes"] = e.get("view_changes")

    def _on_game_move(self, e: dict[str, Any]) -> None:
        """One fault-proof transaction (docs/fault-proof.md): claim, opening, reveal, pick,
        one-step proof, timeout, withdrawal."""
        av = self._attempt_of(e)
        if av is not None:
            av.games.append(
                {k: e.get(k) for k in ("player", "move", "role", "id", "gas", "block", "t")}
            )

    def _on_dispute_resolved(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is not None:
            av.resolved = {
                k: e.get(k) for k in ("verdict", "signers", "gas", "block", "by") if k in e
            }
            av.resolved["t"] = e.get("t")

    def _on_resolve_refused(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is not None:
            av.refused.append(str(e.get("error")))

    def _on_dispute_undecided(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is not None:
            av.undecided = True

    def _on_dispute_expired(self, e: dict[str, Any]) -> None:
        av = self._attempt_of(e)
        if av is not None:
            av.expired = {"by": e.get("by"), "block": e.get("block"), "t": e.get("t")}

    def _on_slashed(self, e: dict[str, Any]) -> None:
        self.slashes.append(
            {
                "aggregator": e.get("aggregator"),
                "amount": e.get("amount"),
                "round": e.get("round") or self.current["round"],
                "t": e.get("t"),
            }
        )
        name = e.get("aggregator")
        if name:
            self.stakes.setdefault(str(name), {})["slashed"] = True

    def _on_equivocation_slashed(self, e: dict[str, Any]) -> None:
        self.equivocations.append({k: v for k, v in e.items() if k != "kind"})

    def _on_slash_refused(self, e: dict[str, Any]) -> None:
        self.notes.append({k: v for k, v in e.items() if k != "kind"} | {"what": "slash_refused"})

    def _on_stakes(self, e: dict[str, Any]) -> None:
        aggs = e.get("aggregators") or {}
        if not isinstance(aggs, dict):
            return
        for name, info in aggs.items():
            self.stakes[str(name)] = {**self.stakes.get(str(name), {}), **dict(info)}
        self.stake_history.append(
            {
                "t": e.get("t"),
                "round": self.current["round"],
                "stakes": {str(n): i.get("stake") for n, i in aggs.items()},
            }
        )
        if e.get("treasury") is not None:
            self.info["treasury"] = e.get("treasury")

    def _on_round_finalized(self, e: dict[str, Any]) -> None:
        rv = self._round_of(e)
        if rv is None:
            return
        rv.finalized = {
            k: e.get(k)
            for k in ("attempt", "aggregator", "accuracy", "loss", "gas", "digest", "wall_seconds")
        }
        rv.finalized["t"] = e.get("t")
        if rv.round >= self.current["round"]:
            self.current = {"round": rv.round, "phase": "finalized", "attempt": rv.attempt}
        if rv.phase != "finalized":
            rv.phases.append({"phase": "finalized", "attempt": e.get("attempt") or 0, "t": e["t"]})
            rv.phase = "finalized"

    def _on_round_evaluated(self, e: dict[str, Any]) -> None:
        """Accuracy and loss of a testnet's finalized model (evaluated by the dashboard)."""
        rv = self._round_of(e)
        if rv is not None:
            rv.finalized = {**(rv.finalized or {}), "accuracy": e.get("accuracy")}
            rv.finalized["loss"] = e.get("loss")

    def _on_privacy_budget_exhausted(self, e: dict[str, Any]) -> None:
        self.privacy_stop = {"round": e.get("round"), "epsilon": e.get("epsilon")}

    def _on_stalled(self, e: dict[str, Any]) -> None:
        self.status = "stalled"
        self.stalled = str(e.get("reason"))

    def _on_crash(self, e: dict[str, Any]) -> None:
        self.crashes.append({k: v for k, v in e.items() if k != "kind"})

    def _on_restart(self, e: dict[str, Any]) -> None:
        self.crashes.append({k: v for k, v in e.items() if k != "kind"} | {"what": "restarted"})

    def _on_node(self, e: dict[str, Any]) -> None:
        """A testnet node process's life: start, done, error, retry, killed (node logs)."""
        name = e.get("node")
        if name:
            node = self.nodes.setdefault(str(name), {})
            node["last_action"] = e.get("action")
            node["last_t"] = e.get("t")

    def _on_run_finished(self, e: dict[str, Any]) -> None:
        if self.status != "stalled":
            self.status = "finished"
        self.info["finished"] = e.get("t")

    # -- what only the records and the summary hold -----------------------------------------

    def merge_records(self, records: list[dict[str, Any]]) -> None:
        """Add each ``rounds.jsonl`` record (gas, phase seconds, privacy, attempts' details)."""
        self.records = records
        for rec in records:
            r = rec.get("round")
            if not isinstance(r, int):
                continue
            rv = self.round_view(r)
            rv.record = rec
            if rec.get("finalized") and rv.finalized is None:
                rv.finalized = {
                    "attempt": rec.get("attempt"),
                    "aggregator": rec.get("aggregator_name"),
                    "accuracy": rec.get("accuracy"),
                    "loss": rec.get("loss"),
                    "gas": rec.get("gas"),
                    "digest": rec.get("digest"),
                    "wall_seconds": rec.get("wall_seconds"),
                    "t": None,
                }
                rv.phase = "finalized"
            for a in rec.get("attempts") or []:
                av = rv.attempt_view(int(a.get("attempt") or 0))
                if av.submission is None and a.get("digest"):
                    av.submission = {
                        "aggregator": a.get("aggregator_name"),
                        "digest": a.get("digest"),
                        "faulty": a.get("faulty"),
                        "behaviour": a.get("behaviour"),
                        "block": a.get("submit_block"),
                        "gas": a.get("gas_submit"),
                        "t": None,
                    }
                if not av.challenges:
                    av.challenges = [dict(c) for c in a.get("challenges") or []]
                # The record's disputes add PBFT ticks, resolution block and gas.
                for i, d in enumerate(a.get("disputes") or []):
                    if i < len(av.disputes):
                        av.disputes[i] = {**av.disputes[i], **d}
                    else:
                        av.disputes.append(dict(d))
                if av.timed_out is None and a.get("timed_out"):
                    av.timed_out = {
                        "aggregator": a.get("aggregator_name"),
                        "block": a.get("advanced_block"),
                    }
            chosen = rec.get("contract_choice")
            attempt = rec.get("attempt")
            if isinstance(attempt, int) and chosen and rv.attempt_view(attempt).chosen is None:
                rv.attempt_view(attempt).chosen = rec.get("aggregator_name")

    def merge_summary(self, summary: dict[str, Any], verdict: dict[str, Any] | None) -> None:
        """Add the run's ``summary.json`` (and ``verdict.json`` of a scenario run)."""
        self.summary = summary
        self.verdict = verdict
        if self.status in ("waiting", "running"):
            self.status = "stalled" if summary.get("liveness_lost") else "finished"
        if summary.get("stalled"):
            self.stalled = str(summary["stalled"])
        if not self.info:
            cfg = summary.get("config") or {}
            self.info = {
                "name": cfg.get("name"),
                "run_kind": "run" if (summary.get("scenario") or {}).get("source") else "demo",
                "task": summary.get("task_address"),
                "chain_id": summary.get("chain_id"),
                "rounds": summary.get("rounds_requested"),
                "clients": cfg.get("clients"),
                "rule": cfg.get("rule"),
                "aggregators": [],
            }

    # -- derived -----------------------------------------------------------------------------

    def curves(self) -> dict[str, list[tuple[int, float]]]:
        """Accuracy and loss of every finalized round, in round order."""
        acc: list[tuple[int, float]] = []
        loss: list[tuple[int, float]] = []
        for r in sorted(self.rounds):
            fin = self.rounds[r].finalized
            if not fin:
                continue
            if isinstance(fin.get("accuracy"), int | float):
                acc.append((r, float(fin["accuracy"])))
            if isinstance(fin.get("loss"), int | float):
                loss.append((r, float(fin["loss"])))
        return {"accuracy": acc, "loss": loss}

    def gas_by_operation(self) -> dict[str, int]:
        """Total gas per contract operation: the summary's, else summed over finalized rounds."""
        if self.summary and isinstance(self.summary.get("gas_by_operation"), dict):
            return {
                op: int(s.get("total", 0)) if isinstance(s, dict) else int(s)
                for op, s in self.summary["gas_by_operation"].items()
            }
        out: dict[str, int] = dict(self.gas_ops)
        for rv in self.rounds.values():
            gas = (rv.finalized or {}).get("gas") or rv.record.get("gas") or {}
            for op, v in gas.items():
                out[op] = out.get(op, 0) + int(v)
        return out

    def privacy(self) -> dict[str, Any] | None:
        """The privacy budget: per round (``rounds.jsonl``) and in total (``summary.json``).

        ``None`` when the run has no privacy fields, or they say ``mode = "none"``.
        """
        per_round = []
        for rec in self.records:
            p = rec.get("privacy")
            if isinstance(p, dict) and p.get("mode", "none") != "none":
                per_round.append({"round": rec.get("round"), **p})
        total = (self.summary or {}).get("privacy")
        if isinstance(total, dict) and total.get("mode", "none") == "none":
            total = None
        if not per_round and not isinstance(total, dict):
            return None
        return {
            "rounds": per_round,
            "total": total if isinstance(total, dict) else None,
            "stopped": self.privacy_stop,
        }

    def rounds_finalized(self) -> int:
        return sum(1 for rv in self.rounds.values() if rv.finalized)

    def final_accuracy(self) -> float | None:
        if self.summary is not None:
            value = self.summary.get("final_accuracy")
            return float(value) if isinstance(value, int | float) else None
        acc = self.curves()["accuracy"]
        return acc[-1][1] if acc else None

    def snapshot(self) -> dict[str, Any]:
        """Everything the pages show, JSON-ready."""
        rounds = []
        for r in sorted(self.rounds):
            rv = self.rounds[r]
            rounds.append(
                {
                    "round": rv.round,
                    "phase": rv.phase,
                    "attempt": rv.attempt,
                    "phases": rv.phases,
                    "registered": rv.registered or rv.record.get("updates_registered", 0),
                    "refused": rv.refused,
                    "registration": registration(rv),
                    "attested": rv.attested,
                    "attempts": [
                        {**asdict(av), "outcome": av.outcome, "refuted": av.refuted}
                        for _, av in sorted(rv.attempts.items())
                    ],
                    "finalized": rv.finalized,
                }
            )
        return {
            "info": self.info,
            "status": self.status,
            "stalled": self.stalled,
            "current": self.current,
            "rounds": rounds,
            "rounds_finalized": self.rounds_finalized(),
            "final_accuracy": self.final_accuracy(),
            "stakes": self.stakes,
            "stake_history": self.stake_history,
            "slashes": self.slashes,
            "equivocations": self.equivocations,
            "crashes": self.crashes,
            "nodes": self.nodes,
            "curves": self.curves(),
            "gas_by_operation": self.gas_by_operation(),
            "privacy": self.privacy(),
            "feed": list(self.feed),
            "n_events": self.n_events,
            "first_t": self.first_t,
            "last_t": self.last_t,
            "summary": self.summary,
            "verdict": self.verdict,
        }
