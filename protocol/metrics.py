"""Per-round phase timings and a tiny progress display (stderr, no dependencies)."""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

#: The phases of one round, in protocol order (DESIGN.md "Roles and one round"), then the
#: in-process driver's own work: ``drive`` (stepping nodes, reading views, bookkeeping),
#: ``mine`` (mining idle blocks), ``oracle`` (the fault log's honest re-execution) and
#: ``dispute`` (running the committee's PBFT instance).
PHASES = (
    "train",
    "upload",
    "register",
    "fetch",
    "aggregate",
    "publish",
    "submit",
    "verify",
    "finalize",
    "evaluate",
    "dispute",
    "oracle",
    "drive",
    "mine",
)


@dataclass
class _OpenPhase:
    round: int
    name: str
    since: float  # when this phase last started or resumed


class PhaseClock:
    """Accumulates wall-clock seconds per (round, phase), each second charged to one phase.

    Phases nest (a verifier's ``fetch`` runs inside its ``verify``; every node step runs
    inside the driver's ``drive``): time is charged to the innermost open phase only, so
    the phases of a round add up to the wall time spent inside them and never double count.
    Nesting is tracked per thread.
    """

    def __init__(self) -> None:
        self.seconds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._local = threading.local()

    def _open(self) -> list[_OpenPhase]:
        stack: list[_OpenPhase] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @contextmanager
    def phase(self, round_: int, name: str) -> Iterator[None]:
        stack = self._open()
        now = time.perf_counter()
        if stack:  # pause the enclosing phase
            outer = stack[-1]
            self.seconds[outer.round][outer.name] += now - outer.since
        current = _OpenPhase(round_, name, now)
        stack.append(current)
        try:
            yield
        finally:
            now = time.perf_counter()
            self.seconds[round_][name] += now - current.since
            stack.pop()
            if stack:  # resume the enclosing phase
                stack[-1].since = now

    def for_round(self, round_: int) -> dict[str, float]:
        got = self.seconds.get(round_, {})
        return {p: round(got[p], 4) for p in PHASES if p in got} | {
            p: round(v, 4) for p, v in got.items() if p not in PHASES
        }


class Progress:
    """Line-oriented progress for long work; rewrites one status line on a terminal."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._status_len = 0

    def status(self, text: str) -> None:
        """Show transient status (overwritten by the next line on a terminal)."""
        if self.quiet or not self._tty:
            return
        pad = max(0, self._status_len - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._status_len = len(text)

    def line(self, text: str) -> None:
        """Print a permanent line."""
        if self.quiet:
            return
        if self._tty and self._status_len:
            self.stream.write("\r" + " " * self._status_len + "\r")
            self._status_len = 0
        self.stream.write(text + "\n")
        self.stream.flush()
