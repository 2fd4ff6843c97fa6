"""Server optimisers: FedAvgM (Hsu et al. 2019) and FedAdagrad / FedAdam / FedYogi
(Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2).

The pseudo-gradient of a round is the FedAvg delta (numSamples-weighted mean of the client
deltas, exact, rounded half to even) in real units: ``delta = q / 2**frac_bits`` (exact in
float64). The optimiser then runs **element-wise** IEEE-754 float64 arithmetic only
(``+ - * /``, ``sqrt``, ``abs``, ``sign``: correctly rounded on every platform, with or
without SIMD; each NumPy ufunc call is one rounding, no FMA contraction) — never a reduction
over floats. The step is quantised back to fixed point with ``np.rint`` (round half to even)
and added to the int64 global params.

State (float64 ``(d,)`` arrays, real units) travels in the published global state, so the next
aggregator (and every verifier) resumes from the same bytes:

* FedAvgM: ``{"momentum": v}``;
* FedAdagrad / FedAdam / FedYogi: ``{"m": m, "v": v}``; at the start ``m = 0``, ``v = tau**2``
  (the paper's ``v_{-1} >= tau**2``); no bias correction (as in the paper).

Subnormals: state entries with magnitude below ``2**-900`` are stored as exact zeros, so a
platform that flushes subnormals to zero (FTZ/DAZ) computes the same bytes as one that does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from aggregators.base import (
    AggregationInput,
    AggregationInputError,
    AggregationOutput,
    AggregationRule,
    ParamSpec,
)
from aggregators.fedavg import weighted_mean_delta
from aggregators.intmath import rint_to_int64, to_int32_range
from aggregators.registry import register_rule

__all__ = ["FedAdagrad", "FedAdam", "FedAvgM", "FedYogi"]

_TINY = 2.0**-900


def _pos(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def _unit(v: Any) -> str | None:
    return None if 0.0 <= v < 1.0 else "must be in [0, 1)"


def _flush(x: NDArray[np.float64]) -> NDArray[np.float64]:
    x[np.abs(x) < _TINY] = 0.0
    return x


def _state_array(state: Mapping[str, NDArray[Any]], key: str, d: int) -> NDArray[np.float64]:
    if key not in state:
        raise AggregationInputError(f"server-optimiser state lacks {key!r}")
    a = np.asarray(state[key])
    if a.dtype != np.float64 or a.shape != (d,):
        raise AggregationInputError(
            f"server-optimiser state {key!r} must be float64 of shape ({d},), "
            f"got {a.dtype} {a.shape}"
        )
    if d and not np.isfinite(a).all():
        raise AggregationInputError(f"server-optimiser state {key!r} is not finite")
    return np.array(a, dtype=np.float64, copy=True)  # never mutate the caller's arrays


class _ServerOpt(AggregationRule):
    stateful: ClassVar[bool] = True
    state_keys: ClassVar[tuple[str, ...]] = ()

    def _load_state(self, inp: AggregationInput) -> dict[str, NDArray[np.float64]] | None:
        """Existing state, or ``None`` at the start (empty mapping)."""
        if not inp.state:
            return None
        extra = sorted(set(inp.state) - set(self.state_keys))
        if extra:
            raise AggregationInputError(
                f"{self.name}: unexpected server-optimiser state key(s) {', '.join(extra)}"
            )
        return {k: _state_array(inp.state, k, inp.dim) for k in self.state_keys}

    def _pseudo_gradient(self, inp: AggregationInput) -> NDArray[np.float64]:
        dq = weighted_mean_delta(inp)  # exact, |dq| <= value_bound <= 2**30
        return dq.astype(np.float64) * (2.0**-inp.frac_bits)  # exact power-of-two scaling

    def _apply(
        self, inp: AggregationInput, step: NDArray[np.float64], state: dict[str, Any]
    ) -> AggregationOutput:
        q = rint_to_int64(step * float(1 << inp.frac_bits), what=f"{self.name} step")
        params = to_int32_range(inp.global_params + q)
        return AggregationOutput(params=params, state=state)


@register_rule
class FedAvgM(_ServerOpt):
    """FedAvg with server momentum: ``v = momentum * v + delta``; ``x += server_lr * v``."""

    name: ClassVar[str] = "fedavgm"
    summary: ClassVar[str] = "FedAvg with server momentum (Hsu et al. 2019)"
    state_keys: ClassVar[tuple[str, ...]] = ("momentum",)
    param_specs: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("server_lr", float, default=1.0, check=_pos, doc="server learning rate"),
        ParamSpec("momentum", float, default=0.9, check=_unit, doc="server momentum beta"),
    )

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp, check_values=False)
        st = self._load_state(inp)
        delta = self._pseudo_gradient(inp)
        beta = float(self._params["momentum"])
        lr = float(self._params["server_lr"])
        v = _flush(delta if st is None else st["momentum"] * beta + delta)
        return self._apply(inp, v * lr, {"momentum": v})


class _Adaptive(_ServerOpt):
    state_keys: ClassVar[tuple[str, ...]] = ("m", "v")
    _default_eta: ClassVar[float] = 0.01

    def _second_moment(
        self, v: NDArray[np.float64], d2: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        raise NotImplementedError

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp, check_values=False)
        st = self._load_state(inp)
        delta = self._pseudo_gradient(inp)
        p = self._params
        eta, beta1, tau = float(p["eta"]), float(p["beta1"]), float(p["tau"])
        if st is None:
            m = np.zeros(inp.dim, dtype=np.float64)
            v = np.full(inp.dim, tau * tau, dtype=np.float64)
        else:
            m, v = st["m"], st["v"]
        m = _flush(m * beta1 + delta * (1.0 - beta1))
        v = _flush(self._second_moment(v, delta * delta))
        step = (m * eta) / (np.sqrt(v) + tau)
        return self._apply(inp, step, {"m": m, "v": v})


def _adaptive_specs(eta: float, with_beta2: bool) -> tuple[ParamSpec, ...]:
    specs = [
        ParamSpec("eta", float, default=eta, check=_pos, doc="server learning rate"),
        ParamSpec("beta1", float, default=0.9, check=_unit, doc="first-moment decay"),
    ]
    if with_beta2:
        specs.append(
            ParamSpec("beta2", float, default=0.99, check=_unit, doc="second-moment decay")
        )
    specs.append(ParamSpec("tau", float, default=1e-3, check=_pos, doc="adaptivity (epsilon)"))
    return tuple(specs)


@register_rule
class FedAdagrad(_Adaptive):
    """``v = v + delta**2``; ``x += eta * m / (sqrt(v) + tau)``."""

    name: ClassVar[str] = "fedadagrad"
    summary: ClassVar[str] = "FedAdagrad server optimiser (Reddi et al. 2021)"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = _adaptive_specs(0.1, with_beta2=False)

    def _second_moment(
        self, v: NDArray[np.float64], d2: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        return v + d2


@register_rule
class FedAdam(_Adaptive):
    """``v = beta2 * v + (1 - beta2) * delta**2``; ``x += eta * m / (sqrt(v) + tau)``."""

    name: ClassVar[str] = "fedadam"
    summary: ClassVar[str] = "FedAdam server optimiser (Reddi et al. 2021)"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = _adaptive_specs(0.01, with_beta2=True)

    def _second_moment(
        self, v: NDArray[np.float64], d2: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        b2 = float(self._params["beta2"])
        return v * b2 + d2 * (1.0 - b2)


@register_rule
class FedYogi(_Adaptive):
    """``v = v - (1 - beta2) * delta**2 * sign(v - delta**2)``; ``x += eta*m/(sqrt(v)+tau)``."""

    name: ClassVar[str] = "fedyogi"
    summary: ClassVar[str] = "FedYogi server optimiser (Reddi et al. 2021)"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = _adaptive_specs(0.01, with_beta2=True)

    def _second_moment(
        self, v: NDArray[np.float64], d2: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        b2 = float(self._params["beta2"])
        return v - (d2 * (1.0 - b2)) * np.sign(v - d2)
