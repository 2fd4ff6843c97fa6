"""Adaptive colluding client attacks (issue 23): min-max, min-sum, Fang, optimised ALIE/IPM,
Mimic.

All are *omniscient*: the colluders see the round's honest updates (updates are public on
fedchain) and, as in the papers, compute one vector that every colluder sends
(:func:`clients.attacks.colluding_update`). Vectors are handled flat (the tensors of a
delta concatenated in their dict order) in float64, and returned as float32 tensors.

* ``min_max`` / ``min_sum`` (Shejwalkar & Houmansadr, NDSS 2021): ``m - gamma * p`` with
  ``p`` the honest coordinate-wise standard deviation (``perturbation = "std"``), the unit
  mean (``"unit"``) or its sign (``"sign"``), and the largest ``gamma`` (bisection) whose
  maximum distance (min-max) / sum of squared distances (min-sum) to the honest updates
  stays within the honest updates' own largest one.
* ``fang_trmean`` (Fang et al., USENIX Security 2020, the trimmed-mean/median attack with
  full knowledge): per coordinate, push against the honest direction ``s = sign(mean)``
  beyond the honest extreme: values in ``[w_max, b w_max]`` (or ``[w_max / b, w_max]``)
  when ``s < 0`` and in ``[w_min / b, w_min]`` (or ``[b w_min, w_min]``) when ``s > 0``,
  drawn uniformly with ``seed``, ``b = 2``.
* ``fang_krum`` (Fang et al. 2020, the Krum attack): ``-lambda * s`` (the previous model
  minus ``lambda`` times the honest direction, in delta space) with the largest
  ``lambda`` (halving from an upper bound) for which Krum with the given ``f`` selects it
  among the honest updates and ``num_byzantine`` copies.
* ``alie_opt`` / ``ipm_opt``: ALIE's ``z`` / IPM's ``epsilon`` chosen by ByzFL's line
  search (expansion then contraction, ``evals`` evaluations) to maximise the distance
  between the *deployed* rule's aggregate (``aggregate``: the task's rule and
  pre-aggregators, run bit-exactly on the quantised vectors) and the honest mean.
* ``mimic`` (Karimireddy et al., ICLR 2022): every colluder sends a copy of one honest
  update - the one farthest from the honest mean by default (over-representing one
  client of a heterogeneous population), or the honest update at ``index``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from protocol.errors import ConfigError

__all__ = [
    "Aggregate",
    "alie_opt",
    "fang_krum",
    "fang_trmean",
    "ipm_opt",
    "line_search",
    "mimic",
    "min_max",
    "min_sum",
]

Delta = dict[str, npt.NDArray[np.float32]]
#: The deployed rule as the attackers simulate it: (K, d) float64 updates -> (d,) aggregate.
Aggregate = Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]


def _flat(deltas: Sequence[Mapping[str, npt.ArrayLike]], who: str) -> tuple[Any, Any]:
    if not deltas:
        raise ConfigError(f"{who} needs at least one honest delta")
    names = list(deltas[0])
    shapes = [np.asarray(deltas[0][n]).shape for n in names]
    rows = []
    for i, d in enumerate(deltas):
        if list(d) != names:
            raise ConfigError(f"{who}: honest delta {i} has different tensor names")
        rows.append(np.concatenate([np.asarray(d[n], np.float64).ravel() for n in names]))
    return np.stack(rows), (names, shapes)


def _unflat(vec: npt.NDArray[np.float64], layout: tuple[Any, Any]) -> Delta:
    names, shapes = layout
    out: Delta = {}
    at = 0
    for n, shp in zip(names, shapes, strict=True):
        size = int(np.prod(shp, dtype=np.int64))
        out[n] = vec[at : at + size].reshape(shp).astype(np.float32)
        at += size
    return out


def _perturbation(x: npt.NDArray[np.float64], kind: str) -> npt.NDArray[np.float64]:
    mean = x.mean(axis=0)
    if kind == "std":
        return np.asarray(x.std(axis=0))
    if kind == "unit":
        n = float(np.linalg.norm(mean))
        return np.asarray(mean / n if n > 0 else mean)
    if kind == "sign":
        return np.asarray(np.sign(mean))
    raise ConfigError(f"perturbation must be 'std', 'unit' or 'sign', got {kind!r}")


def _largest_gamma(ok: Callable[[float], bool], start: float = 10.0, steps: int = 40) -> float:
    """The largest gamma >= 0 with ``ok(gamma)`` (bracket by doubling, then bisection)."""
    lo, hi = 0.0, start
    while ok(hi) and hi < 1e6:
        lo, hi = hi, hi * 2
    for _ in range(steps):
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _sq_dists(a: npt.NDArray[np.float64], x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(((x - a[None, :]) ** 2).sum(axis=1))


def min_max(
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]], perturbation: str = "std"
) -> Delta:
    """Min-max (Shejwalkar & Houmansadr 2021): the farthest ``mean - gamma p`` whose largest
    distance to an honest update is within the largest honest pairwise distance."""
    x, layout = _flat(honest_deltas, "min_max")
    mean, p = x.mean(axis=0), _perturbation(x, perturbation)
    g = x @ x.T
    sq = np.diag(g)
    bound = float((sq[:, None] + sq[None, :] - 2 * g).max())
    gamma = _largest_gamma(lambda t: float(_sq_dists(mean - t * p, x).max()) <= bound)
    return _unflat(mean - gamma * p, layout)


def min_sum(
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]], perturbation: str = "std"
) -> Delta:
    """Min-sum (Shejwalkar & Houmansadr 2021): the farthest ``mean - gamma p`` whose sum of
    squared distances to the honest updates is within the largest such honest sum."""
    x, layout = _flat(honest_deltas, "min_sum")
    mean, p = x.mean(axis=0), _perturbation(x, perturbation)
    g = x @ x.T
    sq = np.diag(g)
    bound = float((sq[:, None] + sq[None, :] - 2 * g).sum(axis=1).max())
    gamma = _largest_gamma(lambda t: float(_sq_dists(mean - t * p, x).sum()) <= bound)
    return _unflat(mean - gamma * p, layout)


def fang_trmean(
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]], b: float = 2.0, seed: int = 0
) -> Delta:
    """Fang et al. (2020) against the trimmed mean and the median (full knowledge)."""
    if not (math.isfinite(b) and b > 1):
        raise ConfigError(f"fang_trmean b must be > 1, got {b}")
    x, layout = _flat(honest_deltas, "fang_trmean")
    s = np.sign(x.mean(axis=0))
    wmax, wmin = x.max(axis=0), x.min(axis=0)
    u = np.random.default_rng(seed).random(x.shape[1])
    # s <= 0: go above the largest value; s > 0: below the smallest
    up_lo = np.where(wmax > 0, wmax, wmax / b)
    up_hi = np.where(wmax > 0, b * wmax, wmax)
    dn_lo = np.where(wmin > 0, wmin / b, b * wmin)
    dn_hi = np.where(wmin > 0, wmin, wmin)
    out = np.where(s > 0, dn_lo + u * (dn_hi - dn_lo), up_lo + u * (up_hi - up_lo))
    return _unflat(out, layout)


def _krum_pick(v: npt.NDArray[np.float64], f: int) -> int:
    k = v.shape[0]
    g = v @ v.T
    sq = np.diag(g)
    dist = sq[:, None] + sq[None, :] - 2 * g
    nn = max(0, k - f - 2)
    scores = [float(np.sort(np.delete(dist[i], i))[:nn].sum()) for i in range(k)]
    return int(np.argmin(scores))


def fang_krum(
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]],
    num_byzantine: int = 1,
    f: int | None = None,
    num_clients: int | None = None,
    threshold: float = 1e-5,
) -> Delta:
    """Fang et al. (2020) against Krum: ``-lambda * sign(honest mean)`` with the largest
    ``lambda`` (halving) that Krum selects when every colluder sends it."""
    x, layout = _flat(honest_deltas, "fang_krum")
    m = int(num_byzantine)
    f = m if f is None else int(f)
    s = np.sign(x.mean(axis=0))
    d = x.shape[1]
    n = x.shape[0] + m
    # the paper's upper bound on lambda, from the honest updates' spread (w_Re = 0 here)
    dist = _sq_dists(np.zeros(d), x)
    spread = max(float(np.sqrt(_sq_dists(x[i], x)).sum()) for i in range(x.shape[0]))
    lam = spread / ((n - 2 * f - 1) * math.sqrt(d)) + float(np.sqrt(dist).max()) / math.sqrt(d)
    while lam > threshold:
        crafted = -lam * s
        v = np.vstack([x, np.repeat(crafted[None, :], m, axis=0)])
        if _krum_pick(v, f) >= x.shape[0]:
            return _unflat(crafted, layout)
        lam /= 2
    return _unflat(-lam * s, layout)


def line_search(
    evaluate: Callable[[float], float],
    start: float,
    delta: float,
    evals: int = 20,
    ratio: float = 0.8,
) -> float:
    """ByzFL's one-dimensional search (expansion, then contraction) maximising ``evaluate``."""
    best_x, best_y = start, evaluate(start)
    remaining = evals - 1
    while remaining > 0:
        prop = best_x + delta
        y = evaluate(prop)
        remaining -= 1
        if y > best_y:
            best_x, best_y = prop, y
            delta *= 2
        else:
            delta *= ratio
            break
    while remaining > 0:
        prop = best_x + delta
        y = evaluate(prop)
        remaining -= 1
        if y > best_y:
            best_x, best_y = prop, y
        delta *= ratio
    return best_x


def _damage(
    x: npt.NDArray[np.float64], crafted: npt.NDArray[np.float64], m: int, aggregate: Aggregate
) -> float:
    v = np.vstack([x, np.repeat(crafted[None, :], m, axis=0)])
    return float(np.linalg.norm(aggregate(v) - x.mean(axis=0)))


def _mean_aggregate(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(v.mean(axis=0))


def alie_opt(
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]],
    num_byzantine: int = 1,
    num_clients: int | None = None,
    evals: int = 20,
    aggregate: Aggregate | None = None,
) -> Delta:
    """ALIE with ``z`` chosen by line search against the deployed rule (ByzFL's
    ``Optimal_ALittleIsEnough``: start 0, step 10)."""
    x, layout = _flat(honest_deltas, "alie_opt")
    agg = aggregate or _mean_aggregate
    mean, std = x.mean(axis=0), x.std(axis=0)
    m = int(num_byzantine)
    z = line_search(lambda t: _damage(x, mean - t * std, m, agg), 0.0, 10.0, evals)
    return _unflat(mean - z * std, layout)


def ipm_opt(
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]],
    num_byzantine: int = 1,
    num_clients: int | None = None,
    evals: int = 20,
    aggregate: Aggregate | None = None,
) -> Delta:
    """IPM with ``epsilon`` chosen by line search against the deployed rule (ByzFL's
    ``Optimal_InnerProductManipulation``: start 0, step 10)."""
    x, layout = _flat(honest_deltas, "ipm_opt")
    agg = aggregate or _mean_aggregate
    mean = x.mean(axis=0)
    m = int(num_byzantine)
    eps = line_search(lambda t: _damage(x, -t * mean, m, agg), 0.0, 10.0, evals)
    return _unflat(-eps * mean, layout)


def mimic(honest_deltas: Sequence[Mapping[str, npt.ArrayLike]], index: int = -1) -> Delta:
    """Mimic: copy one honest update (``index``; -1: the one farthest from the honest mean)."""
    x, layout = _flat(honest_deltas, "mimic")
    if index < 0:
        index = int(np.argmax(_sq_dists(x.mean(axis=0), x)))
    if index >= x.shape[0]:
        raise ConfigError(f"mimic index {index} >= {x.shape[0]} honest updates")
    return _unflat(x[index].copy(), layout)
