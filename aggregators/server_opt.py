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


#: columns per element-wise block: every temporary (256 KiB) stays in L2
_OPT_CHUNK = 1 << 15


def _check_state(
    state: Mapping[str, NDArray[Any]], keys: tuple[str, ...], d: int, rule: str
) -> dict[str, NDArray[np.float64]] | None:
    """Validated (not copied) state arrays, or ``None`` at the start (empty mapping).
    Finiteness is checked block by block in :meth:`_ServerOpt.aggregate`."""
    if not state:
        return None
    extra = sorted(set(state) - set(keys))
    if extra:
        raise AggregationInputError(
            f"{rule}: unexpected server-optimiser state key(s) {', '.join(extra)}"
        )
    out = {}
    for key in keys:
        if key not in state:
            raise AggregationInputError(f"server-optimiser state lacks {key!r}")
        a = np.asarray(state[key])
        if a.dtype != np.float64 or a.shape != (d,):
            raise AggregationInputError(
                f"server-optimiser state {key!r} must be float64 of shape ({d},), "
                f"got {a.dtype} {a.shape}"
            )
        out[key] = a
    return out


class _ServerOpt(AggregationRule):
    """Shared driver: exact FedAvg pseudo-gradient, then the element-wise optimiser on blocks
    of ``_OPT_CHUNK`` coordinates (cache-resident temporaries; results do not depend on the
    blocking because every operation is element-wise). New state goes to fresh arrays: the
    caller's state is never mutated."""

    stateful: ClassVar[bool] = True
    sum_based: ClassVar[bool] = True
    state_keys: ClassVar[tuple[str, ...]] = ()

    def _initial(self, key: str, n: int) -> NDArray[np.float64]:
        return np.zeros(n, dtype=np.float64)

    def _step(
        self,
        delta: NDArray[np.float64],
        old: dict[str, NDArray[np.float64]],
        new: dict[str, NDArray[np.float64]],
    ) -> NDArray[np.float64]:
        """Write the new state into ``new`` (views) and return the step in real units."""
        raise NotImplementedError

    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        self.prepare(inp, check_values=False)
        d = inp.dim
        state_in = _check_state(inp.state, self.state_keys, d, self.name)
        dq = weighted_mean_delta(inp)  # exact, |dq| <= value_bound <= 2**30
        new_state = {k: np.empty(d, dtype=np.float64) for k in self.state_keys}
        params = np.empty(d, dtype=np.int64)
        down = 2.0**-inp.frac_bits
        up = float(1 << inp.frac_bits)
        for s in range(0, d, _OPT_CHUNK):
            e = min(d, s + _OPT_CHUNK)
            delta = dq[s:e].astype(np.float64)
            delta *= down  # exact power-of-two scaling
            if state_in is None:
                old = {k: self._initial(k, e - s) for k in self.state_keys}
            else:
                old = {k: state_in[k][s:e] for k in self.state_keys}
                for k, a in old.items():
                    if not np.isfinite(a).all():
                        raise AggregationInputError(f"server-optimiser state {k!r} is not finite")
            step = self._step(delta, old, {k: new_state[k][s:e] for k in self.state_keys})
            step *= up  # exact power-of-two scaling (or overflow to inf, caught below)
            q = rint_to_int64(step, what=f"{self.name} step")
            params[s:e] = to_int32_range(inp.global_params[s:e] + q)
        return AggregationOutput(params=params, state=new_state)


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

    def _step(
        self,
        delta: NDArray[np.float64],
        old: dict[str, NDArray[np.float64]],
        new: dict[str, NDArray[np.float64]],
    ) -> NDArray[np.float64]:
        v = new["momentum"]
        np.multiply(old["momentum"], float(self._params["momentum"]), out=v)
        v += delta
        _flush(v)
        return v * float(self._params["server_lr"])


class _Adaptive(_ServerOpt):
    state_keys: ClassVar[tuple[str, ...]] = ("m", "v")

    def _initial(self, key: str, n: int) -> NDArray[np.float64]:
        if key == "v":
            tau = float(self._params["tau"])
            return np.full(n, tau * tau, dtype=np.float64)
        return np.zeros(n, dtype=np.float64)

    def _second_moment(
        self, v: NDArray[np.float64], d2: NDArray[np.float64], out: NDArray[np.float64]
    ) -> None:
        raise NotImplementedError

    def _step(
        self,
        delta: NDArray[np.float64],
        old: dict[str, NDArray[np.float64]],
        new: dict[str, NDArray[np.float64]],
    ) -> NDArray[np.float64]:
        p = self._params
        eta, beta1, tau = float(p["eta"]), float(p["beta1"]), float(p["tau"])
        m, v = new["m"], new["v"]
        np.multiply(old["m"], beta1, out=m)  # m = m*beta1 + delta*(1-beta1)
        m += delta * (1.0 - beta1)
        _flush(m)
        self._second_moment(old["v"], delta * delta, v)
        _flush(v)
        den = np.sqrt(v)
        den += tau
        step = m * eta
        step /= den  # x += eta * m / (sqrt(v) + tau)
        return step


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
        self, v: NDArray[np.float64], d2: NDArray[np.float64], out: NDArray[np.float64]
    ) -> None:
        np.add(v, d2, out=out)


@register_rule
class FedAdam(_Adaptive):
    """``v = beta2 * v + (1 - beta2) * delta**2``; ``x += eta * m / (sqrt(v) + tau)``."""

    name: ClassVar[str] = "fedadam"
    summary: ClassVar[str] = "FedAdam server optimiser (Reddi et al. 2021)"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = _adaptive_specs(0.01, with_beta2=True)

    def _second_moment(
        self, v: NDArray[np.float64], d2: NDArray[np.float64], out: NDArray[np.float64]
    ) -> None:
        b2 = float(self._params["beta2"])
        np.multiply(v, b2, out=out)
        d2 *= 1.0 - b2
        out += d2


@register_rule
class FedYogi(_Adaptive):
    """``v = v - (1 - beta2) * delta**2 * sign(v - delta**2)``; ``x += eta*m/(sqrt(v)+tau)``."""

    name: ClassVar[str] = "fedyogi"
    summary: ClassVar[str] = "FedYogi server optimiser (Reddi et al. 2021)"
    param_specs: ClassVar[tuple[ParamSpec, ...]] = _adaptive_specs(0.01, with_beta2=True)

    def _second_moment(
        self, v: NDArray[np.float64], d2: NDArray[np.float64], out: NDArray[np.float64]
    ) -> None:
        b2 = float(self._params["beta2"])
        sgn = np.sign(v - d2)
        d2 *= 1.0 - b2
        d2 *= sgn
        np.subtract(v, d2, out=out)
