"""The run's live event log: ``events.jsonl``, one JSON object per state change.

Every line has ``t`` (Unix time, seconds), ``kind`` and, where they apply, ``round``,
``attempt``, ``block`` and the node names involved. Kinds written by the round driver:

================== ==============================================================
kind               fields
================== ==============================================================
run_started        name, run_kind, task, chain_id, rounds, clients, rule, aggregators
                   [{name, address}], byzantine
phase              round, phase (collecting | attesting | aggregating | submitted |
                   disputed | finalized), attempt
chosen             round, attempt, aggregator, deadline_block
update_registered  round, client, index
aggregate_submitted round, attempt, aggregator, digest, faulty, behaviour
timeout            round, attempt, aggregator (the laggard)
challenge          round, attempt, challenger
dispute            round, attempt, decided, verdict, view, view_changes, votes
dispute_resolved   round, attempt, verdict, signers, gas
resolve_refused    round, attempt, error (the certificate was refused; tried again)
dispute_undecided  round, attempt, dispute_deadline (no n - f eligible votes)
dispute_expired    round, attempt, by, block (discarded after the dispute timeout)
attested           round, aggregator, held, updates
equivocation_slashed round, offender, reporter, message, gas
slash_refused      offender, error
slashed            aggregator, amount (wei)
stakes             aggregators {name: {stake, active, slashed}}
round_finalized    round, attempt, aggregator, accuracy, loss, gas, digest
stalled            round, reason
run_finished       rounds_finalized, final_accuracy, summary
================== ==============================================================

Readers tail the file; writers append whole lines and flush, so a reader never sees half a
record (it may see none yet).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any


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
