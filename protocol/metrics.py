"""Per-round phase timings and a tiny progress display (stderr, no dependencies)."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

#: The phases of one round, in protocol order (DESIGN.md "Roles and one round").
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
)


class PhaseClock:
    """Accumulates wall-clock seconds per (round, phase)."""

    def __init__(self) -> None:
        self.seconds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    @contextmanager
    def phase(self, round_: int, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[round_][name] += time.perf_counter() - start

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
