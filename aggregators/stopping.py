"""The verifiable stopping rule: end a task once the global model stops moving.

A task with ``stop_norm`` set (its manifest's ``stop``) ends early when the L2 norm of the
aggregate's own update, the global model delta ``new - previous`` of a round, stays below
``stop_norm`` for ``stop_patience`` consecutive rounds. Everything is integer arithmetic on
the fixed-point parameters, so every aggregator that re-executes a round reaches the same
decision bit for bit:

* the threshold is ``stop_norm`` in fixed-point units, ``T = round(stop_norm * 2**frac_bits)``
  (a product by a power of two is exact in binary floating point; Python's ``round`` is
  half to even), computed once from the manifest;
* a round is *quiet* when ``sum(delta_i ** 2) < T ** 2`` (exact integers, no square root);
* the counter of consecutive quiet rounds is part of the global state
  (``meta/stop_count`` in the payload, so the submitted digest binds it): a quiet round
  adds one, any other resets it to 0, and a round carried forward (too few valid updates,
  a private sum that failed) leaves it unchanged: no update is not convergence;
* the round's decision is ``stop = count >= patience``. The chosen aggregator submits it
  next to the digest (``submitAggregate(round, digest, stop)``); verifiers compare both
  with their own re-execution, so a wrong "stop" and a missing one are challenged exactly
  like a wrong aggregate; a finalized round that says stop completes the task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from protocol.errors import ConfigError

__all__ = [
    "StopRule",
    "delta_norm_sq",
    "next_stop_count",
    "stop_decision",
    "threshold_units",
]

#: Largest |delta| for which the int64 sum of squares below cannot overflow (with
#: :data:`_FAST_SIZE` coordinates at most): 2**20 squared is 2**40, times 2**22 is 2**62.
_FAST_BOUND = 1 << 20
_FAST_SIZE = 1 << 22


def threshold_units(stop_norm: float, frac_bits: int) -> int:
    """``stop_norm`` in fixed-point units (exact scaling, then half-to-even rounding)."""
    if not (isinstance(stop_norm, int | float) and math.isfinite(stop_norm) and stop_norm > 0):
        raise ConfigError(f"stop_norm must be a finite number > 0, got {stop_norm!r}")
    return round(float(stop_norm) * (1 << frac_bits))


def delta_norm_sq(previous: NDArray[np.integer], new: NDArray[np.integer]) -> int:
    """The exact squared L2 norm of ``new - previous`` (fixed-point units squared)."""
    prev = np.asarray(previous, dtype=np.int64)
    cur = np.asarray(new, dtype=np.int64)
    if prev.shape != cur.shape:
        raise ValueError(f"parameter shapes differ: {prev.shape} and {cur.shape}")
    # global parameters fit int32, so each difference fits int64 exactly
    delta = (cur - prev).reshape(-1)
    if delta.size == 0:
        return 0
    if delta.size <= _FAST_SIZE and int(np.abs(delta).max()) <= _FAST_BOUND:
        return int(np.dot(delta, delta))
    return sum(int(x) * int(x) for x in delta.tolist())


def next_stop_count(count: int, norm_sq: int, threshold: int, carried: bool = False) -> int:
    """The counter after a round: +1 if quiet (``norm_sq < threshold**2``), else 0;
    unchanged for a round carried forward."""
    if count < 0 or norm_sq < 0 or threshold < 0:
        raise ValueError("stop counter, norm and threshold are non-negative")
    if carried:
        return count
    return count + 1 if norm_sq < threshold * threshold else 0


def stop_decision(count: int, patience: int) -> bool:
    """Whether a round whose counter is ``count`` ends the task."""
    return count >= patience


@dataclass(frozen=True)
class StopRule:
    """A task's stopping rule: threshold in fixed-point units and patience (rounds)."""

    threshold: int
    patience: int

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ConfigError(f"stop threshold must be >= 1 fixed-point unit, got {self.threshold}")
        if self.patience < 1:
            raise ConfigError(f"stop_patience must be >= 1, got {self.patience}")

    @classmethod
    def of(cls, stop_norm: float, patience: int, frac_bits: int) -> StopRule:
        return cls(threshold_units(stop_norm, frac_bits), int(patience))

    def step(
        self,
        count: int,
        previous: NDArray[np.integer],
        new: NDArray[np.integer],
        carried: bool = False,
    ) -> tuple[int, bool]:
        """(new counter, stop) for a round from ``previous`` to ``new`` parameters."""
        norm_sq = 0 if carried else delta_norm_sq(previous, new)
        nxt = next_stop_count(count, norm_sq, self.threshold, carried)
        return nxt, (not carried) and stop_decision(nxt, self.patience)
