"""The run's live event log: ``events.jsonl``, one JSON object per state change.

Every line has ``t`` (Unix time, seconds), ``kind`` and, where they apply, ``round``,
``attempt``, ``block`` and the node names involved. Kinds written by the round driver:

==================== ============================================================
kind                 fields
==================== ============================================================
run_started          name, run_kind, task, chain_id, rounds, clients, rule, aggregators
                     [{name, address}], byzantine, bonds {stake, aggregate_bond,
                     challenge_bond, timeout_penalty} (wei), windows {collect, attest,
                     submit_timeout, challenge, dispute_timeout} (blocks)
phase                round, phase (collecting | attesting | aggregating | submitted |
                     disputed | finalized), attempt
chosen               round, attempt, aggregator, deadline_block
update_registered    round, client, digest, num_samples, relayed (true: in a relayer's
                     ``submitUpdates`` batch; false: the client's own ``submitUpdate``);
                     relayed ones also index (position in the round's update list),
                     batch, batch_size (the first index and the number of updates their
                     transaction registered: one ``UpdatesRegistered`` event)
client_refused       round, client (its submitUpdate was refused)
aggregate_submitted  round, attempt, aggregator, digest, faulty, behaviour, block, gas
timeout              round, attempt, aggregator (the laggard), block
challenge            round, attempt, challenger, block
dispute              round, attempt, decided, verdict, view, view_changes, signers (names in
                     the certificate), votes [{member, pbft, reexecution, decided, view,
                     signed}]: per member its PBFT behaviour, its own re-execution verdict,
                     the verdict and view it decided (null: none) and whether its signature
                     is in the certificate
dispute_resolved     round, attempt, verdict, signers, gas, block
resolve_refused      round, attempt, error (the certificate was refused; tried again)
dispute_undecided    round, attempt, dispute_deadline (no n - f eligible votes)
dispute_expired      round, attempt, by, block (discarded after the dispute timeout)
attested             round, aggregator, held, updates
equivocation_slashed round, offender, reporter, message, gas
slash_refused        offender, error
slashed              aggregator, amount (wei)
stakes               aggregators {name: {stake, active, slashed, credits}} (wei; credits are
                     pull payments not yet withdrawn: returned bonds and rewards),
                     treasury (the owner's credits); after set-up, every finalized round
                     and every slashing
round_finalized      round, attempt, aggregator, accuracy, loss, gas, digest, wall_seconds
crash, restart       round, aggregator, block, what (a scenario's crashed aggregator)
stalled              round, reason
privacy_budget_exhausted
                     round, epsilon (the run stops before the next round would exceed
                     the target ε: --budget-policy stop)
run_finished         rounds_finalized, final_accuracy, summary
==================== ============================================================

A testnet has no ``events.jsonl``: its nodes log JSON lines to ``DIR/logs/NODE.log``.
``fedchain dashboard`` derives the kinds above from those lines and from the chain
(:mod:`fedchain.dashboard.testnet_view`), plus these, which only a testnet has:

==================== ============================================================
pbft_vote            round, attempt, member, verdict (its own re-execution, as its PBFT
                     instance starts)
pbft_decided         round, attempt, member, verdict, view
pbft_view            member, view, view_changes (a replica moved to a new view)
gas                  operation, gas (a transaction a node sent)
round_evaluated      round, accuracy, loss (the dashboard evaluated the finalized model)
node                 node, action (start, done, error, timeout, retry, interrupted)
==================== ============================================================

Readers tail the file; writers append whole lines and flush, so a reader never sees half a
record (it may see none yet).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from adapters.contract import TaskContract


class EventLog:
    """Append-only JSON-lines event sink (``None`` path: events are dropped)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: IO[str] | None = path.open("a", encoding="utf-8") if path else None

    def emit(self, kind: str, **fields: Any) -> None:
        """Append one event (``t`` and ``kind`` first, then ``fields``)."""
        if self._file is None:
            return
        record = {"t": round(time.time(), 6), "kind": kind, **fields}
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete event in ``path`` (a trailing partial line is ignored)."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.endswith("\n"):
                out.append(json.loads(line))
    return out


def emit_stakes(events: EventLog, task: TaskContract, members: Mapping[str, str]) -> None:
    """One ``stakes`` event: each member's stake, flags and credits, and the treasury's.

    ``members`` maps committee addresses to names, in committee order.
    """
    stakes = {}
    for address, name in members.items():
        info = task.aggregator_info(address)
        stakes[name] = {
            "stake": info.stake,
            "active": info.active,
            "slashed": info.slashed,
            "credits": task.credits(address),
        }
    events.emit("stakes", aggregators=stakes, treasury=task.credits(task.owner()))
