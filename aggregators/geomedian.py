"""Geometric median (RFA, Pillutla et al. 2022) by smoothed Weiszfeld, in exact integers.

Starting from ``z_0 = 0`` (the previous global model: updates are deltas from it), each
of ``iters`` iterations computes, per update ``i``, ``r_i = isqrt_round(||x_i - z||^2)``
(fixed-point units), ``b_i = max(nu_q, r_i)`` with ``nu_q`` the smoothing ``nu`` in
fixed point (at least 1), the integer weight ``w_i = floor(2**S / b_i)`` with
``S = bitlen(max b) + 32`` (relative weight error below ``2**-32``), and
``z = round_half_even(sum_i w_i x_i / sum_i w_i)`` (exact sums, Python ints when int64 could
overflow). Unweighted: ``num_samples`` is ignored (self-reported). This is ByzFL's
``GeometricMedian(nu, T)`` in fixed point (same start, same smoothing, same iteration).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from aggregators.base import AggregationInput, AggregationOutput, AggregationRule, ParamSpec
from aggregators.fixedmath import fixed_point, isqrt_round, row_sq_norms
from aggregators.intmath import div_round_half_even, exact_weighted_sum, to_int32_range
from aggregators.registry import register_rule

__all__ = ["GeometricMedian", "geometric_median_delta"]


def geometric_median_delta(
    updates: np.ndarray, nu_q: int, iters: int, value_bound: int
) -> np.ndarray:
    """The smoothed-Weiszfeld estimate (int64, ``(d,)``) of the rows of ``updates``."""
    _k, d = updates.shape
    z = np.zeros(d, dtype=np.int64)
    nu_q = max(1, int(nu_q))
    for _ in range(int(iters)):
        diffs = updates.astype(np.int64) - z[None, :]
        b = [max(nu_q, isqrt_round(n2)) for n2 in row_sq_norms(diffs)]
        shift = max(b).bit_length() + 32
        w = [(1 << shift) // bi for bi in b]
        total = exact_weighted_sum(updates, w, value_bound)
        z = np.asarray(div_round_half_even(total, sum(w)), dtype=np.int64)
    return z


@register_rule
class GeometricMedian(AggregationRule):
    """RFA / geometric median: smoothed Weiszfeld from the previous model, fixed
    iterations, unweighted (see the module docstring)."""

    name: ClassVar[str] = "geomedian"
    summary: ClassVar[str] = "geometric median (smoothed Weiszfeld, fixed iterations)"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec(
            "nu",
            float,
            default=0.1,
            check=lambda v: None if v > 0 else "must be > 0",
            doc="smoothing (real units): distances below nu count as nu",
        ),
        ParamSpec(
            "iters",
            int,
            default=3,
            check=lambda v: None if 1 <= v <= 100 else "must be in 1..100",
            doc="Weiszfeld iterations",
        ),
    )

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp)
        delta = geometric_median_delta(
            inp.updates,
            fixed_point(float(self._params["nu"]), inp.frac_bits),
            int(self._params["iters"]),
            inp.value_bound,
        )
        return AggregationOutput(params=to_int32_range(inp.global_params + delta), state={})
