"""Pre-aggregators (NNM, bucketing, static clipping, ARC) and rules composed with them.

A pre-aggregator maps the round's ``(K, d)`` update matrix to another integer matrix that
an ordinary rule then aggregates. A composed rule is named ``PRE+...+RULE``, e.g.
``nnm+median`` or ``bucketing+krum`` or ``arc+nnm+trimmed_mean``: the pre-aggregators run
left to right, then the rule. Its parameters are the rule's plus the pre-aggregators'
(``f`` is shared: NNM, ARC and Krum all mean the same number of Byzantine updates).

Every step is exact integer arithmetic (round half to even, :func:`isqrt_round`), so a
composed rule is re-executable bit for bit like every other rule:

* **NNM** (nearest-neighbour mixing, Allouah et al. 2023): every row is replaced by the
  mean of its ``K - f`` nearest rows (itself included; squared distances from the exact
  Krum distance matrix :func:`aggregators.intmath.pairwise_sq_dists`; ties by row index).
* **Bucketing** (Karimireddy et al. 2022): the rows are permuted and averaged in buckets
  of ``s`` (the last bucket may be smaller). The permutation is :func:`hash_permutation`
  of ``SHA-256("fedchain/bucketing/v1" || global params || update matrix)``: it is fixed
  only once collection has closed (the matrix is the registered updates, whose digests
  are on-chain), so no client knows it when it commits its update. A client that
  registers last could grind its own update to steer the permutation (as it could grind
  its digest); bucketing's guarantee assumes it cannot, see ``docs/robustness.md``.
* **Static clipping**: rows with L2 norm above ``c`` (real units) are scaled to norm ``c``:
  ``round_half_even(x * c_q / isqrt_round(||x||^2))``.
* **ARC** (adaptive robust clipping, Allouah et al. 2024): the ``floor(2 f (K - f) / K)``
  rows of largest norm (ties: higher row index first) are clipped to the norm of the
  largest remaining one.

Composed rules are *unweighted* (every row counts once, ``num_samples`` is ignored):
after bucketing a row is no longer one client, and a robust pipeline must not let a
self-reported sample count buy influence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from aggregators.base import (
    AggregationInput,
    AggregationOutput,
    AggregationRule,
    ParamSpec,
)
from aggregators.fixedmath import (
    fixed_point,
    hash_permutation,
    isqrt_round,
    row_sq_norms,
    scale_rows,
)
from aggregators.intmath import div_round_half_even, exact_weighted_sum, pairwise_sq_dists
from protocol.errors import RuleParameterError

__all__ = [
    "PRE_AGGREGATORS",
    "arc_clip",
    "bucket_means",
    "bucketing_seed",
    "composite_rule_class",
    "nnm_mix",
    "static_clip",
]


def nnm_mix(
    updates: NDArray[np.int32], f: int, value_bound: int
) -> tuple[NDArray[np.int32], list[list[int]]]:
    """Nearest-neighbour mixing: row ``i`` becomes the mean (rounded half to even) of its
    ``K - f`` nearest rows, itself included. Returns the mixed rows and each row's
    neighbourhood (sorted row indices). Ties in distance break by row index."""
    k = updates.shape[0]
    if not 0 <= f < k:
        raise RuleParameterError(f"nnm: f={f} must be < the number of updates {k}")
    dist = pairwise_sq_dists(updates, value_bound)
    keep = k - f
    out = np.empty(updates.shape, dtype=np.int32)
    hoods: list[list[int]] = []
    for i in range(k):
        order = sorted(range(k), key=lambda j: (int(dist[i, j]), j != i, j))[:keep]
        w = np.zeros(k, dtype=np.int64)
        w[order] = 1
        total = exact_weighted_sum(updates, w, value_bound)
        out[i] = np.asarray(div_round_half_even(total, keep), dtype=np.int64)
        hoods.append(sorted(order))
    return out, hoods


def bucketing_seed(global_params: NDArray[np.int64], updates: NDArray[np.int32]) -> bytes:
    """The bucketing permutation's seed: SHA-256 of a domain tag, the global parameters
    (little-endian int64) and the update matrix (little-endian int32, row-major)."""
    h = hashlib.sha256(b"fedchain/bucketing/v1")
    h.update(np.ascontiguousarray(global_params, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(updates, dtype="<i4").tobytes())
    return h.digest()


def bucket_means(
    updates: NDArray[np.int32], s: int, perm: list[int], value_bound: int
) -> NDArray[np.int32]:
    """Rows taken in ``perm`` order, averaged in buckets of ``s`` (rounded half to even);
    a last, smaller bucket holds the rest. ``ceil(K / s)`` rows."""
    k = updates.shape[0]
    rows = []
    for start in range(0, k, s):
        members = perm[start : start + s]
        w = np.zeros(k, dtype=np.int64)
        w[members] = 1
        total = exact_weighted_sum(updates, w, value_bound)
        rows.append(np.asarray(div_round_half_even(total, len(members)), dtype=np.int64))
    return np.stack(rows).astype(np.int32)


def static_clip(updates: NDArray[np.int32], c_q: int) -> NDArray[np.int32]:
    """Scale every row whose L2 norm exceeds ``c_q`` (fixed-point units) to norm ``c_q``."""
    norms = [isqrt_round(n2) for n2 in row_sq_norms(updates.astype(np.int64))]
    num = [c_q if r > c_q else 1 for r in norms]
    den = [r if r > c_q else 1 for r in norms]
    return scale_rows(updates, num, den).astype(np.int32)


def arc_clip(updates: NDArray[np.int32], f: int) -> tuple[NDArray[np.int32], list[int]]:
    """ARC: clip the ``floor(2 f (K - f) / K)`` largest rows to the norm of the largest
    remaining row. Returns the rows and the clipped row indices."""
    k = updates.shape[0]
    n2 = row_sq_norms(updates.astype(np.int64))
    order = sorted(range(k), key=lambda i: (n2[i], i))
    clipped = (2 * f * (k - f)) // k
    if clipped <= 0 or clipped >= k:
        return updates.copy(), []
    cut = k - clipped
    threshold = isqrt_round(n2[order[cut - 1]])
    largest = order[cut:]
    num = [1] * k
    den = [1] * k
    for i in largest:
        r = isqrt_round(n2[i])
        if r > threshold:
            num[i], den[i] = threshold, r
    return scale_rows(updates, num, den).astype(np.int32), sorted(largest)


@dataclass(frozen=True)
class _Pre:
    name: str
    specs: tuple[ParamSpec, ...]
    #: rows out for K rows in
    rows_out: Callable[[int, Mapping[str, Any]], int]
    #: row i of the output is row i of the input (selection indices map back to clients)
    keeps_rows: bool


def _f_spec() -> ParamSpec:
    return ParamSpec(
        "f",
        int,
        required=True,
        check=lambda v: None if v >= 0 else "must be >= 0",
        doc="number of Byzantine updates tolerated",
    )


PRE_AGGREGATORS: dict[str, _Pre] = {
    "nnm": _Pre("nnm", (_f_spec(),), lambda k, p: k, True),
    "bucketing": _Pre(
        "bucketing",
        (
            ParamSpec(
                "s",
                int,
                default=2,
                check=lambda v: None if v >= 1 else "must be >= 1",
                doc="bucket size",
            ),
        ),
        lambda k, p: -(-k // int(p["s"])),
        False,
    ),
    "clip": _Pre(
        "clip",
        (
            ParamSpec(
                "c",
                float,
                default=2.0,
                check=lambda v: None if v > 0 else "must be > 0",
                doc="static L2 clip (real units)",
            ),
        ),
        lambda k, p: k,
        True,
    ),
    "arc": _Pre("arc", (_f_spec(),), lambda k, p: k, True),
}


class _Composite(AggregationRule):
    """A rule preceded by pre-aggregators (see the module docstring)."""

    base_cls: ClassVar[type[AggregationRule]]
    pres: ClassVar[tuple[_Pre, ...]]

    def _validate_params(self) -> None:
        names = {s.name for s in self.base_cls.param_specs}
        self._base = self.base_cls(**{k: v for k, v in self._params.items() if k in names})

    def _rows_after(self, k: int) -> int:
        for pre in self.pres:
            k = pre.rows_out(k, self._params)
        return k

    def check_num_updates(self, k: int) -> None:
        if k < 1:
            raise RuleParameterError(f"{self.name}: needs at least 1 update, got {k}")
        f = int(self._params.get("f", 0))
        if any(p.name in ("nnm", "arc") for p in self.pres) and f >= k:
            raise RuleParameterError(f"{self.name}: f={f} must be < the number of updates {k}")
        self._base.check_num_updates(self._rows_after(k))

    def min_updates(self) -> int:
        k = max(1, int(self._params.get("f", 0)) + 1)
        while k < 10_000:
            try:
                self.check_num_updates(k)
                return k
            except RuleParameterError:
                k += 1
        return k  # pragma: no cover - unreachable for sane parameters

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp)
        rows = inp.updates
        vb = inp.value_bound
        details: dict[str, Any] = {}
        identity = True
        for pre in self.pres:
            if pre.name == "nnm":
                rows, hoods = nnm_mix(rows, int(self._params["f"]), vb)
                details["nnm_neighbours"] = hoods
            elif pre.name == "bucketing":
                perm = hash_permutation(bucketing_seed(inp.global_params, rows), rows.shape[0])
                rows = bucket_means(rows, int(self._params["s"]), perm, vb)
                details["bucket_order"] = perm
                identity = False
            elif pre.name == "clip":
                rows = static_clip(rows, fixed_point(float(self._params["c"]), inp.frac_bits))
            elif pre.name == "arc":
                rows, clipped = arc_clip(rows, int(self._params["f"]))
                details["arc_clipped"] = clipped
        out = self._base.aggregate(
            AggregationInput(
                global_params=inp.global_params,
                updates=np.ascontiguousarray(rows, dtype=np.int32),
                num_samples=np.ones(rows.shape[0], dtype=np.int64),
                state=inp.state,
                frac_bits=inp.frac_bits,
                value_bound=vb,
            )
        )
        selected = out.selected if identity else None
        if out.selected is not None and not identity:
            details["selected_buckets"] = list(out.selected)
        return AggregationOutput(
            params=out.params, state=out.state, selected=selected, details=details
        )


_COMPOSITES: dict[str, type[AggregationRule]] = {}


def composite_rule_class(
    name: str, lookup: Callable[[str], type[AggregationRule]]
) -> type[AggregationRule]:
    """The class of the composed rule ``PRE+...+RULE`` (cached); ``lookup`` finds ``RULE``."""
    if name in _COMPOSITES:
        return _COMPOSITES[name]
    *pre_names, base_name = name.split("+")
    unknown = [p for p in pre_names if p not in PRE_AGGREGATORS]
    if unknown or not pre_names:
        raise RuleParameterError(
            f"unknown pre-aggregator(s) {unknown} in rule {name!r} "
            f"(known: {', '.join(sorted(PRE_AGGREGATORS))})"
        )
    base = lookup(base_name)
    if base.stateful:
        raise RuleParameterError(f"rule {name!r}: {base_name} carries state; not composable")
    specs: dict[str, ParamSpec] = {s.name: s for s in base.param_specs}
    for p in pre_names:
        for s in PRE_AGGREGATORS[p].specs:
            specs.setdefault(s.name, s)
    cls = type(
        "Composite_" + name.replace("+", "_"),
        (_Composite,),
        {
            "name": name,
            "summary": f"{' then '.join(pre_names)}, then {base_name}",
            "param_specs": tuple(specs.values()),
            "base_cls": base,
            "pres": tuple(PRE_AGGREGATORS[p] for p in pre_names),
            "sum_based": False,
        },
    )
    _COMPOSITES[name] = cls
    return cls
