"""Malicious client behaviours, as pure functions on a client's data or on its float update.

A *delta* is the client's update: a ``dict`` mapping tensor name to a float32 array
(``local - global``, see :func:`clients.training.compute_delta`). Three kinds of attack:

* ``data`` attacks poison the local dataset before honest training (``label_flip``);
* ``delta`` attacks rewrite the attacker's own update (``sign_flip``, ``scale``,
  ``gaussian_noise``);
* ``omniscient`` attacks craft an update from the honest updates the attacker can see
  (colluding clients): ``alie`` (Baruch et al., 2019, "A Little Is Enough") and
  ``inner_product_manipulation`` (Xie et al., 2019). In both papers the ``m`` colluders
  compute *one* vector from the honest updates only and all send it:
  :func:`colluding_update` is that vector (``COLLUSION_MODES``).

Randomised attacks take an explicit seed. Malformed payloads (NaN/Inf, wrong shapes,
oversized blobs) are produced by the payload layer, not here.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from clients.data import Dataset
from protocol.errors import ConfigError

__all__ = [
    "CLIENT_ATTACKS",
    "COLLUSION_MODES",
    "AttackSpec",
    "alie",
    "alie_z",
    "apply_attack",
    "colluding_update",
    "gaussian_noise",
    "inner_product_manipulation",
    "label_flip",
    "scale",
    "sign_flip",
]

Delta = dict[str, npt.NDArray[np.float32]]
AttackKind = Literal["data", "delta", "omniscient"]


def _as_f32(delta: Mapping[str, npt.ArrayLike]) -> Delta:
    return {name: np.asarray(arr, dtype=np.float32) for name, arr in delta.items()}


def label_flip(
    dataset: Dataset, num_classes: int | None = None, seed: int = 0, fraction: float = 1.0
) -> Dataset:
    """Return a copy of ``dataset`` with labels flipped ``y -> C - 1 - y``.

    ``C`` is ``num_classes`` (default: ``dataset.num_classes``). With ``fraction < 1`` only
    ``round(fraction * n)`` samples, chosen by a NumPy generator seeded with ``seed``, are
    flipped; with the default ``fraction=1`` every label is flipped and ``seed`` is unused.
    Features are shared with the input (never modified); labels are a new array.
    """
    c = dataset.num_classes if num_classes is None else int(num_classes)
    if c != dataset.num_classes:
        raise ConfigError(
            f"label_flip num_classes={c} does not match the dataset's {dataset.num_classes}"
        )
    if not 0.0 <= float(fraction) <= 1.0:
        raise ConfigError(f"label_flip fraction must lie in [0, 1], got {fraction}")
    y = dataset.y.copy()
    n = y.shape[0]
    if fraction >= 1.0:
        y = (c - 1) - y
    else:
        k = round(float(fraction) * n)
        chosen = np.random.default_rng(seed).choice(n, size=k, replace=False)
        y[chosen] = (c - 1) - y[chosen]
    return Dataset(dataset.x, y.astype(np.int64), dataset.num_classes, dataset.input_shape)


def sign_flip(delta: Mapping[str, npt.ArrayLike], scale: float = 1.0) -> Delta:
    """Send the reversed update ``-scale * delta`` (gradient ascent instead of descent)."""
    if not (math.isfinite(scale) and scale > 0):
        raise ConfigError(f"sign_flip scale must be a positive finite number, got {scale}")
    s = np.float32(scale)
    return {name: -s * arr for name, arr in _as_f32(delta).items()}


def scale(delta: Mapping[str, npt.ArrayLike], factor: float) -> Delta:
    """Boost (or shrink) the update: ``factor * delta`` (model-replacement style boosting)."""
    if not math.isfinite(factor):
        raise ConfigError(f"scale factor must be finite, got {factor}")
    f = np.float32(factor)
    return {name: f * arr for name, arr in _as_f32(delta).items()}


def gaussian_noise(
    delta: Mapping[str, npt.ArrayLike], sigma: float, seed: int = 0, replace: bool = False
) -> Delta:
    """Add i.i.d. ``N(0, sigma^2)`` noise to every coordinate of the update.

    With ``replace=True`` the update is discarded and pure noise of the same shapes is sent
    (the classic "Gaussian" Byzantine attack). Noise is drawn tensor by tensor, in the dict's
    order, from a NumPy generator seeded with ``seed``.
    """
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ConfigError(f"gaussian_noise sigma must be a non-negative finite number, got {sigma}")
    rng = np.random.default_rng(seed)
    out: Delta = {}
    for name, arr in _as_f32(delta).items():
        noise = rng.normal(0.0, float(sigma), size=arr.shape).astype(np.float32)
        out[name] = noise if replace else arr + noise
    return out


def _stack(honest_deltas: Sequence[Mapping[str, npt.ArrayLike]], who: str) -> dict[str, Any]:
    if len(honest_deltas) == 0:
        raise ConfigError(f"{who} needs at least one honest delta")
    first = _as_f32(honest_deltas[0])
    stacked: dict[str, Any] = {}
    for name, arr in first.items():
        parts = []
        for i, d in enumerate(honest_deltas):
            if set(d) != set(first):
                raise ConfigError(f"{who}: honest delta {i} has different tensor names")
            a = np.asarray(d[name], dtype=np.float64)
            if a.shape != arr.shape:
                raise ConfigError(f"{who}: honest delta {i} tensor {name!r} has shape {a.shape}")
            parts.append(a)
        stacked[name] = np.stack(parts)
    return stacked


def alie_z(num_clients: int, num_byzantine: int) -> float:
    """The paper's ``z_max`` for ALIE: ``s = floor(n/2 + 1) - m``, ``z = Phi^-1((n - s) / n)``.

    ``n`` is the total number of clients in the round and ``m`` the number of colluding
    attackers; ``s`` is how many honest clients the attackers need to "win over" so that a
    majority-based rule picks their value. Raises :class:`ConfigError` when the formula is
    undefined (``m < 1``, ``m >= n``, or ``(n - s) / n`` outside ``(0, 1)``).
    """
    n, m = int(num_clients), int(num_byzantine)
    if m < 1 or m >= n:
        raise ConfigError(f"ALIE needs 1 <= num_byzantine < num_clients, got m={m}, n={n}")
    s = math.floor(n / 2 + 1) - m
    q = (n - s) / n
    if not 0.0 < q < 1.0:
        raise ConfigError(f"ALIE z is undefined for n={n}, m={m} (quantile {q})")
    return NormalDist().inv_cdf(q)


def alie(
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]],
    z: float | None = None,
    num_byzantine: int = 1,
    num_clients: int | None = None,
) -> Delta:
    """A Little Is Enough: per coordinate ``mean - z * std`` of the honest deltas seen.

    ``mean`` and ``std`` (population standard deviation, ``ddof=0``) are taken coordinate-wise
    in float64 over ``honest_deltas`` and the result is rounded to float32. With ``z=None``
    the paper's :func:`alie_z` is used with ``num_clients`` (default: the honest deltas plus
    ``num_byzantine``) and ``num_byzantine``. The crafted update hides inside the honest
    spread, so distance- and median-based robust rules accept it while it biases the model.
    """
    stacked = _stack(honest_deltas, "alie")
    if z is None:
        n = len(honest_deltas) + int(num_byzantine) if num_clients is None else int(num_clients)
        z = alie_z(n, num_byzantine)
    if not math.isfinite(z):
        raise ConfigError(f"alie z must be finite, got {z}")
    return {
        name: (s.mean(axis=0) - float(z) * s.std(axis=0)).astype(np.float32)
        for name, s in stacked.items()
    }


def inner_product_manipulation(
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]], epsilon: float = 0.1
) -> Delta:
    """Inner-product manipulation: send ``-epsilon * mean(honest_deltas)``.

    Small ``epsilon`` (e.g. 0.1) keeps the update close to the honest ones while making the
    aggregate's inner product with the true gradient negative once enough attackers collude;
    large ``epsilon`` (e.g. 100) is a blunt reversal. The mean is taken in float64.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ConfigError(f"inner_product_manipulation epsilon must be positive, got {epsilon}")
    stacked = _stack(honest_deltas, "inner_product_manipulation")
    return {
        name: (-float(epsilon) * s.mean(axis=0)).astype(np.float32) for name, s in stacked.items()
    }


#: Weight inflation (issue 20): the update itself is honest, but the client registers
#: ``numSamples = claim`` instead of its real sample count, to dominate numSamples-weighted
#: rules (FedAvg and the server optimisers). The task's ``maxSamples`` bounds it: the contract
#: refuses a larger claim, and execution excludes one a chain ever carries.
WEIGHT_INFLATION = "weight_inflation"
#: Default claim of a weight-inflation client: 2**40 samples.
DEFAULT_WEIGHT_CLAIM = 2**40


def inflated_weight(num_samples: int, claim: int = DEFAULT_WEIGHT_CLAIM) -> int:
    """The numSamples a weight-inflating client registers instead of ``num_samples``."""
    del num_samples  # the real count is what the attack hides
    return int(claim)


@dataclass(frozen=True)
class AttackSpec:
    """A registered client attack: its ``kind``, the function, and a one-line description.

    ``kind`` says which input :func:`apply_attack` passes first: ``"data"`` -> ``dataset``,
    ``"delta"`` -> ``delta``, ``"omniscient"`` -> ``honest_deltas``.
    """

    name: str
    kind: AttackKind
    fn: Callable[..., Any]
    description: str


def _adaptive_specs() -> tuple[AttackSpec, ...]:
    """The issue-23 adaptive colluding attacks (:mod:`clients.adaptive_attacks`)."""
    from clients import adaptive_attacks as a

    return (
        AttackSpec("min_max", "omniscient", a.min_max, "Shejwalkar & Houmansadr min-max"),
        AttackSpec("min_sum", "omniscient", a.min_sum, "Shejwalkar & Houmansadr min-sum"),
        AttackSpec("fang_trmean", "omniscient", a.fang_trmean, "Fang et al. vs trimmed mean"),
        AttackSpec("fang_krum", "omniscient", a.fang_krum, "Fang et al. vs Krum"),
        AttackSpec("alie_opt", "omniscient", a.alie_opt, "ALIE, z by line search vs the rule"),
        AttackSpec("ipm_opt", "omniscient", a.ipm_opt, "IPM, epsilon by line search vs rule"),
        AttackSpec("mimic", "omniscient", a.mimic, "copy one honest update"),
    )


CLIENT_ATTACKS: dict[str, AttackSpec] = {
    spec.name: spec
    for spec in (
        AttackSpec("label_flip", "data", label_flip, "train on labels y -> C-1-y"),
        AttackSpec("sign_flip", "delta", sign_flip, "send -scale * delta"),
        AttackSpec("scale", "delta", scale, "send factor * delta"),
        AttackSpec("gaussian_noise", "delta", gaussian_noise, "add N(0, sigma^2) noise"),
        AttackSpec("alie", "omniscient", alie, "mean - z * std of honest deltas"),
        AttackSpec(
            "inner_product_manipulation",
            "omniscient",
            inner_product_manipulation,
            "send -epsilon * mean of honest deltas",
        ),
        *_adaptive_specs(),
    )
}


def apply_attack(
    name: str,
    *,
    dataset: Dataset | None = None,
    delta: Mapping[str, npt.ArrayLike] | None = None,
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]] | None = None,
    **params: Any,
) -> Dataset | Delta:
    """Run the registered attack ``name`` on the input its kind needs, with ``params``.

    Pass ``dataset=`` for data attacks (returns a :class:`Dataset`), ``delta=`` for delta
    attacks and ``honest_deltas=`` for omniscient attacks (both return a delta). An unknown
    name, a missing input, or a parameter the attack does not take raises
    :class:`ConfigError`.
    """
    spec = CLIENT_ATTACKS.get(name)
    if spec is None:
        raise ConfigError(f"unknown client attack {name!r}; known: {sorted(CLIENT_ATTACKS)}")
    inputs: dict[AttackKind, tuple[str, Any]] = {
        "data": ("dataset", dataset),
        "delta": ("delta", delta),
        "omniscient": ("honest_deltas", honest_deltas),
    }
    arg_name, value = inputs[spec.kind]
    if value is None:
        raise ConfigError(f"client attack {name!r} needs {arg_name}=")
    signature = inspect.signature(spec.fn)
    accepted = list(signature.parameters)[1:]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ConfigError(f"client attack {name!r} does not take {unknown}; accepted: {accepted}")
    missing = sorted(
        p.name
        for p in list(signature.parameters.values())[1:]
        if p.default is inspect.Parameter.empty and p.name not in params
    )
    if missing:
        raise ConfigError(f"client attack {name!r} requires {missing}")
    result: Dataset | Delta = spec.fn(value, **params)
    return result


#: How omniscient attackers collude. ``"paper"`` (Baruch et al. 2019, Xie et al. 2019): the
#: colluders compute one vector from the honest updates only and every one of them sends it.
#: ``"sequential"``: each attacker crafts its own vector from every update registered before
#: it, the earlier attackers' crafted vectors included (what fedchain did before issue 10;
#: with IPM the later attackers then partly undo the earlier ones, see docs/experiments.md).
COLLUSION_MODES = ("paper", "sequential")


def colluding_update(
    name: str,
    honest_deltas: Sequence[Mapping[str, npt.ArrayLike]],
    *,
    num_colluders: int,
    num_clients: int,
    aggregate: Callable[[Any], Any] | None = None,
    **params: Any,
) -> Delta:
    """The one update all ``num_colluders`` colluders send in the papers' collusion model.

    ``honest_deltas`` are the honest updates only (never a colluder's own crafted vector).
    Attacks whose formula depends on the number of attackers get it by default: ALIE's
    ``z_max`` uses ``num_byzantine = num_colluders`` and ``num_clients`` (the round's total,
    colluders included) unless ``params`` fixes ``z`` or those numbers. Raises
    :class:`ConfigError` for a non-omniscient attack or bad parameters.
    """
    spec = CLIENT_ATTACKS.get(name)
    if spec is None or spec.kind != "omniscient":
        raise ConfigError(f"client attack {name!r} is not an omniscient (colluding) attack")
    accepted = inspect.signature(spec.fn).parameters
    call = dict(params)
    if "num_byzantine" in accepted and "z" not in call:
        call.setdefault("num_byzantine", int(num_colluders))
        call.setdefault("num_clients", int(num_clients))
    if "aggregate" in accepted and aggregate is not None and "aggregate" not in call:
        call["aggregate"] = aggregate  # the deployed rule, for attacks that search against it
    result = apply_attack(name, honest_deltas=honest_deltas, **call)
    assert isinstance(result, dict)
    return result
