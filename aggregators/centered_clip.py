"""Centred clipping (Karimireddy et al. 2021) in exact integers.

The centre is the previous global model, i.e. ``v_0 = 0`` in delta space (the state a
re-executor already has; no extra state is carried). Each of ``iters`` iterations clips
every ``x_i - v`` to L2 norm ``tau`` (real units; ``tau_q`` in fixed point) and moves the
centre by their mean::

    r_i = isqrt_round(||x_i - v||^2)
    c_i = x_i - v                                    if r_i <= tau_q
        = round_half_even((x_i - v) * tau_q / r_i)   otherwise
    v  <- v + round_half_even(sum_i c_i / K)

Unweighted (``num_samples`` ignored). This is ByzFL's ``CenteredClipping(m=0, L, tau)``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from aggregators.base import AggregationInput, AggregationOutput, AggregationRule, ParamSpec
from aggregators.fixedmath import fixed_point, isqrt_round, row_sq_norms, scale_rows
from aggregators.intmath import div_round_half_even, to_int32_range
from aggregators.registry import register_rule

__all__ = ["CenteredClipping", "centered_clip_delta"]


def centered_clip_delta(updates: np.ndarray, tau_q: int, iters: int) -> np.ndarray:
    """The centred-clipping estimate (int64, ``(d,)``) of the rows of ``updates``."""
    k, d = updates.shape
    v = np.zeros(d, dtype=np.int64)
    for _ in range(int(iters)):
        diffs = updates.astype(np.int64) - v[None, :]
        r = [isqrt_round(n2) for n2 in row_sq_norms(diffs)]
        num = [tau_q if ri > tau_q else 1 for ri in r]
        den = [ri if ri > tau_q else 1 for ri in r]
        clipped = scale_rows(diffs, num, den)
        total = clipped.sum(axis=0, dtype=np.int64)  # K * 2**32 at most: fits
        v = v + np.asarray(div_round_half_even(total, k), dtype=np.int64)
    return v


@register_rule
class CenteredClipping(AggregationRule):
    """Centred clipping around the previous global model (see the module docstring)."""

    name: ClassVar[str] = "centered_clip"
    summary: ClassVar[str] = "centred clipping around the previous model (tau, iterations)"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec(
            "tau",
            float,
            default=1.0,
            check=lambda v: None if v > 0 else "must be > 0",
            doc="clipping radius (real units, L2)",
        ),
        ParamSpec(
            "iters",
            int,
            default=3,
            check=lambda v: None if 1 <= v <= 100 else "must be in 1..100",
            doc="clipping iterations L",
        ),
    )

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp)
        tau_q = max(1, fixed_point(float(self._params["tau"]), inp.frac_bits))
        delta = centered_clip_delta(inp.updates, tau_q, int(self._params["iters"]))
        return AggregationOutput(params=to_int32_range(inp.global_params + delta), state={})
