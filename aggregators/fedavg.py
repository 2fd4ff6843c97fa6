"""FedAvg (numSamples-weighted mean of the updates) and FedProx (same server rule).

``new = global + round_half_even(sum_k n_k * q_k / sum_k n_k)`` computed exactly: the
numerator with :func:`aggregators.intmath.weighted_sum_chunks` (exact integers), the division
with :func:`aggregators.intmath.div_round_half_even_f64` / ``div_round_half_even`` (round half
to even), fused per column chunk with the addition to the global params and the int32 check.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from aggregators.base import AggregationInput, AggregationOutput, AggregationRule, ParamSpec
from aggregators.intmath import (
    div_round_half_even,
    div_round_half_even_f64,
    saturate_int32,
    weighted_sum_chunks,
)
from aggregators.registry import register_rule

__all__ = ["FedAvg", "FedProx", "weighted_mean_delta"]


def weighted_mean_delta(
    inp: AggregationInput, *, add_to: NDArray[np.int64] | None = None
) -> NDArray[np.int64]:
    """``round_half_even(sum_k n_k q_k / sum_k n_k)`` per coordinate (int64).

    The weighted mean of values in ``[-vb, vb]`` lies in ``[-vb, vb]`` and rounding cannot
    leave that integer interval, so the delta always fits int32. With ``add_to``, returns
    ``add_to + delta`` saturated to the int32 range (total execution: the one-step fault
    proof's ``OneStepMath.sat32``), fused into the same chunk loop.
    """
    n = [int(x) for x in inp.num_samples]
    total = sum(n)
    out = np.empty(inp.dim, dtype=np.int64)

    def finish(s: int, e: int, num: NDArray[Any]) -> None:
        if num.dtype == np.float64:  # exact integers with |num| + total < 2**53
            q = div_round_half_even_f64(num, total).astype(np.int64)
        else:
            q = np.asarray(div_round_half_even(num, total), dtype=np.int64)
        out[s:e] = q if add_to is None else saturate_int32(add_to[s:e] + q)

    weighted_sum_chunks(inp.updates, n, inp.value_bound, finish)
    return out


@register_rule
class FedAvg(AggregationRule):
    """McMahan et al. 2017: numSamples-weighted average of the client deltas."""

    name: ClassVar[str] = "fedavg"
    summary: ClassVar[str] = "numSamples-weighted mean of the deltas"
    sum_based: ClassVar[bool] = True

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        # the value bound is checked per block only where exactness needs it (huge weights)
        self.prepare(inp, check_values=False)
        params = weighted_mean_delta(inp, add_to=inp.global_params)
        return AggregationOutput(params=params, state={})


def _nonneg(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


@register_rule
class FedProx(FedAvg):
    """Li et al. 2020: the proximal term ``mu/2 ||w - w_global||^2`` is applied by the clients
    during local training (``clients/`` reads ``mu`` from the task's rule parameters); the
    server aggregates exactly like FedAvg. ``mu`` is part of the on-chain parameter hash."""

    name: ClassVar[str] = "fedprox"
    summary: ClassVar[str] = "FedAvg on the server; clients add the proximal term mu"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("mu", float, default=0.01, check=_nonneg, doc="proximal coefficient (clients)"),
    )
