"""Byzantine-robust rules: Krum, Multi-Krum, coordinate-wise Median, Trimmed mean, Bulyan.

All arithmetic is exact on integers; see ``docs/rules.md`` for the definitions, the rounding
rule (round half to even, everywhere) and the tie-breaks (on-chain index, i.e. row order).

Robust rules are *unweighted*: ``num_samples`` is self-reported by clients, so letting it
weight a robust statistic would hand a Byzantine client the influence the rule removes.

Implementation notes (speed without giving up exactness):

* Coordinate-wise rules stream the ``(K, d)`` int32 matrix in column chunks, transpose a
  chunk to ``(c, K)`` and sort each row with NumPy's integer sort (exact, and SIMD-accelerated
  where the CPU allows; the *values* are the same with any algorithm).
* Krum-family rules need the ``K x K`` squared distances; they come from an exact Gram matrix
  (``aggregators.intmath.gram_exact``: float64 BLAS on chunks small enough that every partial
  sum is an integer below 2**53). Bulyan computes that matrix once and reuses it for all of its
  Krum iterations.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from aggregators.base import AggregationInput, AggregationOutput, AggregationRule, ParamSpec
from aggregators.intmath import (
    column_chunks,
    div_round_half_even,
    exact_weighted_sum,
    pairwise_sq_dists,
    saturate_int32,
)
from aggregators.registry import register_rule
from protocol.errors import RuleParameterError

__all__ = [
    "Bulyan",
    "Krum",
    "Median",
    "MultiKrum",
    "TrimmedMean",
    "beta_fraction",
    "bulyan_select",
    "krum_scores",
    "trim_count",
]

_INT64_MAX = 2**63 - 1
#: bytes of one transposed int32 chunk for the sort-based rules (about the L2 size)
_SORT_CHUNK_BYTES = 1 << 21


def _nonneg_int(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


def _sorted_chunks(
    updates: NDArray[np.int32], rows: NDArray[np.intp] | None
) -> Iterator[tuple[int, int, NDArray[np.int32]]]:
    """Yield ``(start, stop, x)`` with ``x`` the ``(c, K)`` chunk, each row sorted ascending.

    ``rows`` optionally restricts to a subset of update rows (Bulyan's selection). No value
    bound is needed here: sorting is exact and sums of at most K int32 values fit int64.
    """
    k = updates.shape[0] if rows is None else len(rows)
    d = updates.shape[1]
    for s, e in column_chunks(k, d, bytes_per_elem=4, target=_SORT_CHUNK_BYTES):
        src = updates[:, s:e] if rows is None else updates[rows, s:e]
        x = np.ascontiguousarray(src.T)
        x.sort(axis=1)  # integer sort: exact, result independent of the algorithm
        yield s, e, x


def _mean_of_sorted_slice(x: NDArray[np.int32], lo: int, hi: int) -> NDArray[np.int64]:
    """``round_half_even(mean(x[:, lo:hi]))`` per row, exact (int64 sum of int32 values)."""
    if hi - lo == 1:
        return x[:, lo].astype(np.int64)
    total = x[:, lo:hi].sum(axis=1, dtype=np.int64)  # <= K * 2**30: no overflow
    return div_round_half_even(total, hi - lo)


class _NoParams(AggregationRule):
    def _finish(
        self, inp: AggregationInput, delta: NDArray[np.int64], **kw: Any
    ) -> AggregationOutput:
        # total execution: saturate to int32 (docs/fault-proof.md), never raise
        params = saturate_int32(inp.global_params + delta)
        return AggregationOutput(params=params, state={}, **kw)


@register_rule
class Median(_NoParams):
    """Coordinate-wise median (Yin et al. 2018). Even K: the mean of the two middle values,
    rounded half to even. Tolerates f < K/2 Byzantine updates per coordinate."""

    name: ClassVar[str] = "median"
    summary: ClassVar[str] = "coordinate-wise median (even K: mean of the two middle values)"

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp, check_values=False)
        k, d = inp.updates.shape
        delta = np.empty(d, dtype=np.int64)
        lo, hi = (k - 1) // 2, k // 2 + 1
        for s, e, x in _sorted_chunks(inp.updates, None):
            delta[s:e] = _mean_of_sorted_slice(x, lo, hi)
        return self._finish(inp, delta)


def _beta_check(v: Any) -> str | None:
    return None if 0.0 <= v < 0.5 else "must be in [0, 0.5)"


def beta_fraction(beta: float) -> Fraction:
    """The trimmed-mean ``beta`` as the exact rational of its decimal ``repr`` (``0.1`` is
    ``1/10``, not the binary float): the ``betaNum / betaDen`` a one-step proof uses."""
    return Fraction(repr(float(beta)))


def trim_count(beta: float, k: int) -> int:
    """Values trimmed per side: ``floor(beta * K)`` computed exactly on the decimal ``repr`` of
    ``beta`` (the same string the on-chain parameter hash commits to), so ``0.3 * 10`` is 3.
    Integer maths on the rational :func:`beta_fraction` (no float product)."""
    f = beta_fraction(beta)
    return (f.numerator * k) // f.denominator


@register_rule
class TrimmedMean(_NoParams):
    """Coordinate-wise trimmed mean (Yin et al. 2018): drop the ``b = floor(beta*K)`` smallest
    and ``b`` largest values per coordinate, average the rest (rounded half to even)."""

    name: ClassVar[str] = "trimmed_mean"
    summary: ClassVar[str] = "coordinate-wise mean after trimming floor(beta*K) values per side"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("beta", float, default=0.1, check=_beta_check, doc="fraction trimmed per side"),
    )

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp, check_values=False)
        k, d = inp.updates.shape
        b = trim_count(float(self._params["beta"]), k)
        delta = np.empty(d, dtype=np.int64)
        for s, e, x in _sorted_chunks(inp.updates, None):
            delta[s:e] = _mean_of_sorted_slice(x, b, k - b)
        return self._finish(inp, delta)


# ----------------------------------------------------------------------------------------
# Krum family


def _compact(dist: NDArray[Any], k: int) -> NDArray[Any]:
    """Use int64 when every Krum score (a sum of < K distances) provably fits, else objects.

    The choice depends on the actual (exact) values, never on the platform, and both paths
    compute the same exact integers.
    """
    if dist.size == 0:
        return dist.astype(np.int64)
    mx = int(dist.max())
    if mx * max(1, k) <= _INT64_MAX:
        return dist.astype(np.int64)
    return dist.astype(object)


def _neighbour_table(dist: NDArray[Any]) -> tuple[NDArray[Any], NDArray[np.intp]]:
    """Per row i: distances to every j != i sorted ascending (ties by j), and those j."""
    k = dist.shape[0]
    off = ~np.eye(k, dtype=bool)
    vals = dist[off].reshape(k, k - 1)
    idx = np.broadcast_to(np.arange(k), (k, k)).copy()[off].reshape(k, k - 1)
    order = np.argsort(vals, axis=1, kind="stable")
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(idx, order, axis=1)


def krum_scores(dist: NDArray[Any], f: int) -> list[int]:
    """Krum score of each row: the sum of its ``n - f - 2`` smallest squared distances to the
    other rows (Blanchard et al. 2017). Exact Python ints."""
    k = dist.shape[0]
    nn = k - f - 2
    if k == 1:
        return [0]
    dist = _compact(dist, k)
    vals, _ = _neighbour_table(dist)
    sums = vals[:, :nn].sum(axis=1) if nn > 0 else np.zeros(k, dtype=np.int64)
    return [int(x) for x in sums]


def _rank(scores: list[int]) -> list[int]:
    """Row indices by ascending score, ties by on-chain index."""
    return sorted(range(len(scores)), key=lambda i: (scores[i], i))


def _f_spec() -> ParamSpec:
    return ParamSpec(
        "f", int, required=True, check=_nonneg_int, doc="number of Byzantine updates tolerated"
    )


@register_rule
class Krum(_NoParams):
    """Krum (Blanchard et al. 2017): the update with the smallest score, where a score is the
    sum of squared distances to its ``n - f - 2`` nearest updates. Requires ``n >= 2f + 3``.
    With ``m > 1`` this is Multi-Krum (see :class:`MultiKrum`)."""

    name: ClassVar[str] = "krum"
    summary: ClassVar[str] = "Krum: the update closest to its n-f-2 nearest neighbours"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = (
        _f_spec(),
        ParamSpec(
            "m",
            int,
            default=1,
            check=lambda v: None if v >= 1 else "must be >= 1",
            doc="updates kept and averaged (1 = Krum)",
        ),
    )

    def _m_for(self, k: int) -> int:
        return int(self._params["m"])

    def min_updates(self) -> int:
        f = int(self._params["f"])
        return max(2 * f + 3, self._m_for(0) + f)

    def check_num_updates(self, k: int) -> None:
        f = int(self._params["f"])
        if k < 2 * f + 3:
            raise RuleParameterError(
                f"{self.name}: f={f} needs n >= 2f+3 = {2 * f + 3} updates, got {k}"
            )
        m = self._m_for(k)
        if m > k - f:
            raise RuleParameterError(
                f"{self.name}: m={m} must be <= n - f = {k - f} (n={k}, f={f})"
            )

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp, check_values=False)
        k, _ = inp.updates.shape
        f = int(self._params["f"])
        m = self._m_for(k)
        dist = pairwise_sq_dists(inp.updates, inp.value_bound)  # checks the value bound
        scores = krum_scores(dist, f)
        chosen = sorted(_rank(scores)[:m])
        if m == 1:
            delta = inp.updates[chosen[0]].astype(np.int64)
        else:
            w = np.zeros(k, dtype=np.int64)
            w[chosen] = 1
            total = exact_weighted_sum(inp.updates, w, inp.value_bound)
            delta = np.asarray(div_round_half_even(total, m), dtype=np.int64)
        return self._finish(inp, delta, selected=tuple(chosen))


@register_rule
class MultiKrum(Krum):
    """Multi-Krum (Blanchard et al. 2017): the ``m`` updates with the smallest Krum scores,
    averaged uniformly (rounded half to even). ``m = 0`` means ``n - f``."""

    name: ClassVar[str] = "multikrum"
    summary: ClassVar[str] = "Multi-Krum: mean of the m best-scored updates (m=0: n-f)"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = (
        _f_spec(),
        ParamSpec(
            "m", int, default=0, check=_nonneg_int, doc="updates kept and averaged (0 = n - f)"
        ),
    )

    def _m_for(self, k: int) -> int:
        m = int(self._params["m"])
        f = int(self._params["f"])
        return m if m > 0 else max(1, k - f)

    def min_updates(self) -> int:
        f = int(self._params["f"])
        m = int(self._params["m"])
        return max(2 * f + 3, m + f)


# ----------------------------------------------------------------------------------------
# Bulyan


def bulyan_select(dist: NDArray[Any], f: int) -> list[int]:
    """The paper's iterative selection (El Mhamdi et al. 2018): ``theta = n - 2f`` times, run
    Krum on the remaining set ``R`` (score = sum of squared distances to the
    ``max(1, |R| - f - 2)`` nearest others in ``R``) and move the winner (lowest score, then
    lowest index) to the selection. Returns the selected rows in selection order.

    Reuses one distance matrix: per row, neighbours are pre-sorted once; each iteration only
    masks out removed rows.
    """
    k = dist.shape[0]
    theta = k - 2 * f
    dist = _compact(dist, k)
    if k == 1:
        return [0]
    vals, nbr = _neighbour_table(dist)
    alive = np.ones(k, dtype=bool)
    chosen: list[int] = []
    zero = vals.dtype.type(0) if vals.dtype != object else 0
    for _ in range(theta):
        r = int(alive.sum())
        if r == 1:
            chosen.append(int(np.flatnonzero(alive)[0]))
            break
        nn = min(r - 1, max(1, r - f - 2))
        live = alive[nbr]  # (k, k-1): neighbour still in R
        take = live & (np.cumsum(live, axis=1) <= nn)
        scores = np.where(take, vals, zero).sum(axis=1)
        cand = np.flatnonzero(alive)
        best = min(cand.tolist(), key=lambda i: (int(scores[i]), i))
        chosen.append(best)
        alive[best] = False
    return chosen


def _closest_to_median_sum(x: NDArray[np.int32], beta: int) -> NDArray[np.int64]:
    """Per row of the row-sorted ``x`` (c, theta): the sum of the ``beta`` values closest to the
    row's median (even theta: mean of the two middle values), ties toward the lower value.

    Exact: work in doubled units. With ``M2 = 2*median`` (an integer), a value's key is
    ``2*|2x - M2| + (2x > M2)``: distance first, then lower value first. Along a sorted row the
    keys are V-shaped, so the ``beta`` smallest keys form a window ``[s, s+beta)`` with ``s`` in
    ``[0, span]``, ``span = theta - beta``. Sliding the window right replaces ``key[s]`` by
    ``key[s+beta]``; the window is the first ``s`` where that would strictly worsen
    (``key[s] < key[s+beta]``), else ``span`` (proof in ``docs/rules.md``). Equal keys mean
    equal values, so the *sum* is unique. Only the ``2*span`` boundary columns need keys:
    ``sum = sum(x[:, :beta]) + sum_{p < s} (x[:, beta+p] - x[:, p])``.
    """
    theta = x.shape[1]
    span = theta - beta
    first = x[:, :beta].sum(axis=1, dtype=np.int64)  # <= K * 2**31: fits int64
    if span == 0:
        return np.asarray(first, dtype=np.int64)
    mid = theta // 2
    lo_mid = x[:, mid - 1 if theta % 2 == 0 else mid].astype(np.int64)
    m2 = (lo_mid + x[:, mid])[:, None]  # 2 * median, exact
    left = x[:, :span].astype(np.int64)  # leaves the window when it slides right
    right = x[:, beta:].astype(np.int64)  # enters the window when it slides right
    dl = 2 * left - m2
    dr = 2 * right - m2
    key_l = 2 * np.abs(dl) + (dl > 0)  # |.| <= 2**34: int64
    key_r = 2 * np.abs(dr) + (dr > 0)
    worse = key_l < key_r  # sliding right from s would worsen
    start = np.where(worse.any(axis=1), worse.argmax(axis=1), span)  # first True, else span
    taken = np.arange(span)[None, :] < start[:, None]
    gain = np.where(taken, right - left, 0).sum(axis=1)
    return np.asarray(first + gain, dtype=np.int64)


@register_rule
class Bulyan(_NoParams):
    """Bulyan (El Mhamdi et al. 2018) over Krum: iterative Krum selection of ``theta = n - 2f``
    updates, then per coordinate the mean of the ``beta = theta - 2f`` selected values closest
    to their median (rounded half to even). Requires ``n >= 4f + 3``."""

    name: ClassVar[str] = "bulyan"
    summary: ClassVar[str] = "Bulyan: iterative Krum selection, then trimmed mean around the median"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = (_f_spec(),)

    def min_updates(self) -> int:
        return 4 * int(self._params["f"]) + 3

    def check_num_updates(self, k: int) -> None:
        f = int(self._params["f"])
        if k < 4 * f + 3:
            raise RuleParameterError(
                f"bulyan: f={f} needs n >= 4f+3 = {4 * f + 3} updates, got {k}"
            )

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp, check_values=False)
        k, d = inp.updates.shape
        f = int(self._params["f"])
        theta = k - 2 * f
        beta = theta - 2 * f
        dist = pairwise_sq_dists(inp.updates, inp.value_bound)  # checks the value bound
        chosen = bulyan_select(dist, f)
        rows = np.array(sorted(chosen), dtype=np.intp)
        delta = np.empty(d, dtype=np.int64)
        for s, e, x in _sorted_chunks(inp.updates, rows):
            delta[s:e] = div_round_half_even(_closest_to_median_sum(x, beta), beta)
        return self._finish(inp, delta, selected=tuple(int(i) for i in rows))
