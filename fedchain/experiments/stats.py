"""Statistics over seeds: mean, sample standard deviation, Student-t 95 % confidence interval.

Pure functions on lists of floats. ``None`` and NaN values (a metric a unit could not
measure) are left out; a cell with one value has a mean but no spread (``std`` and ``ci95``
are NaN), which the summary prints as "n=1".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Stat", "describe", "group_rows"]


@dataclass(frozen=True)
class Stat:
    """Mean, sample std (ddof 1), half-width of the 95 % CI (Student t), the count, and the
    smallest and largest value."""

    mean: float
    std: float
    ci95: float
    n: int
    min: float = math.nan
    max: float = math.nan

    @property
    def low(self) -> float:
        return self.mean - self.ci95

    @property
    def high(self) -> float:
        return self.mean + self.ci95

    def text(self, digits: int = 3) -> str:
        """``0.912 ± 0.004 (95 % CI 0.902–0.922, n=3)``; ``0.912 (n=1)`` for one value."""
        if self.n == 0:
            return "-"
        if self.n == 1 or math.isnan(self.std):
            return f"{self.mean:.{digits}f} (n=1)"
        return (
            f"{self.mean:.{digits}f} ± {self.std:.{digits}f} "
            f"(95 % CI {self.low:.{digits}f}–{self.high:.{digits}f}, n={self.n})"
        )


def describe(values: Iterable[Any]) -> Stat:
    """The :class:`Stat` of the finite numbers among ``values``."""
    xs = [float(v) for v in values if v is not None and not _nan(v)]
    n = len(xs)
    if n == 0:
        return Stat(math.nan, math.nan, math.nan, 0)
    mean = math.fsum(xs) / n
    if n == 1:
        return Stat(mean, math.nan, math.nan, 1, xs[0], xs[0])
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    from scipy.stats import t

    return Stat(mean, std, float(t.ppf(0.975, n - 1)) * std / math.sqrt(n), n, min(xs), max(xs))


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def group_rows(
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    order: Mapping[str, Sequence[Any]] | None = None,
) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    """Rows grouped by their values of ``keys``: in the order of ``order``'s value lists
    (an experiment's axes) where given, else in first-seen order."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(_hashable(r.get(k)) for k in keys), []).append(r)
    if not order:
        return groups
    ranks = {k: {_hashable(v): i for i, v in enumerate(order.get(k, ()))} for k in keys}

    def rank(key: tuple[Any, ...]) -> tuple[int, ...]:
        return tuple(ranks[k].get(v, len(ranks[k])) for k, v in zip(keys, key, strict=True))

    return dict(sorted(groups.items(), key=lambda kv: rank(kv[0])))


def _hashable(v: Any) -> Any:
    if isinstance(v, list | dict):
        import json

        return json.dumps(v, sort_keys=True)
    return v
