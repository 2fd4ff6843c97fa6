"""Differential-privacy mechanisms as pure functions: clipping, Laplace, Gaussian (classic
and analytic), the exponential mechanism and Skellam integer noise.

Each noise sampler takes the caller's ``numpy.random.Generator``: clients draw their noise
from a generator seeded with their own secret (see :mod:`privacy.local`), so a restarted
client re-derives the same noisy update instead of publishing two noisy versions of one
update. Parameters are validated up front; a bad value raises :class:`ConfigError` naming
the parameter and the value.

Calibrations (``b = Δ/ε`` for Laplace; ``σ = Δ·√(2 ln(1.25/δ))/ε`` for the classic Gaussian,
valid only for ε < 1; the analytic Gaussian of Balle & Wang 2018 for any ε > 0) give the
noise of ONE release. Several releases compose; composition is the accountant's job
(:mod:`privacy.accounting`, dp-accounting), never a formula here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from protocol.errors import ConfigError

__all__ = [
    "analytic_gaussian_sigma",
    "check_delta",
    "check_epsilon",
    "check_positive",
    "classic_gaussian_sigma",
    "clip_l1",
    "clip_l2",
    "exponential_mechanism",
    "exponential_mechanism_probabilities",
    "gaussian_noise",
    "laplace_noise",
    "laplace_scale",
    "skellam_noise",
]


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """``epsilon`` as a float if it is a finite number > 0, else :class:`ConfigError`."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise ConfigError(f"{name} {epsilon!r}: expected a number")
    value = float(epsilon)
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} {epsilon!r}: must be a finite number > 0")
    return value


def check_delta(delta: float, name: str = "delta") -> float:
    """``delta`` as a float if it lies strictly between 0 and 1, else :class:`ConfigError`."""
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise ConfigError(f"{name} {delta!r}: expected a number")
    value = float(delta)
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{name} {delta!r}: must lie strictly between 0 and 1")
    return value


def check_positive(value: float, name: str) -> float:
    """``value`` as a float if it is a finite number > 0, else :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} {value!r}: expected a number")
    out = float(value)
    if not (math.isfinite(out) and out > 0):
        raise ConfigError(f"{name} {value!r}: must be a finite number > 0")
    return out


def clip_l2(vector: ArrayLike, clip_norm: float) -> tuple[NDArray[np.float64], float]:
    """Scale ``vector`` down to L2 norm at most ``clip_norm``; return it and its old norm.

    ``v · min(1, C/‖v‖₂)``: vectors inside the ball are returned unchanged (as float64), so
    the L2 distance between any two clipped vectors is at most ``2C``.
    """
    clip = check_positive(clip_norm, "clip_norm")
    v = np.asarray(vector, dtype=np.float64)
    if not np.isfinite(v).all():
        raise ConfigError("clip_l2: the vector has non-finite entries")
    norm = float(np.linalg.norm(v))
    if norm <= clip:
        return v.copy(), norm
    return v * (clip / norm), norm


def clip_l1(vector: ArrayLike, clip_norm: float) -> tuple[NDArray[np.float64], float]:
    """Scale ``vector`` down to L1 norm at most ``clip_norm``; return it and its old norm.

    The Laplace mechanism's sensitivity is an L1 distance, so its inputs are clipped in L1.
    """
    clip = check_positive(clip_norm, "clip_norm")
    v = np.asarray(vector, dtype=np.float64)
    if not np.isfinite(v).all():
        raise ConfigError("clip_l1: the vector has non-finite entries")
    norm = float(np.abs(v).sum())
    if norm <= clip:
        return v.copy(), norm
    return v * (clip / norm), norm


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """The Laplace mechanism's scale ``b = Δ₁/ε`` for ε-DP (pure, δ = 0) of one release."""
    return check_positive(sensitivity, "sensitivity") / check_epsilon(epsilon)


def laplace_noise(
    shape: int | Sequence[int], scale: float, rng: np.random.Generator
) -> NDArray[np.float64]:
    """I.i.d. Laplace(0, ``scale``) noise (density ``exp(-|x|/b) / 2b``)."""
    b = check_positive(scale, "scale")
    return rng.laplace(0.0, b, size=shape)


def classic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The classic Gaussian mechanism's ``σ = Δ₂·√(2 ln(1.25/δ))/ε`` (Dwork & Roth, Thm A.1).

    The theorem proves (ε, δ)-DP only for ε < 1; for ε ≥ 1 this refuses with
    :class:`ConfigError` (use :func:`analytic_gaussian_sigma`, exact for every ε > 0).
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    if eps >= 1.0:
        raise ConfigError(
            f"epsilon {epsilon!r}: the classic Gaussian calibration is proven only for "
            "epsilon < 1; use the analytic Gaussian mechanism (Balle & Wang 2018)"
        )
    return check_positive(sensitivity, "sensitivity") * math.sqrt(2.0 * math.log(1.25 / d)) / eps


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The smallest σ for which N(0, σ²) noise gives (ε, δ)-DP to one release (any ε > 0).

    The analytic Gaussian mechanism of Balle & Wang (ICML 2018): σ solves
    ``Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) = δ`` exactly. Computed by dp-accounting's
    ``gaussian_mechanism.get_sigma_gaussian`` (unit sensitivity, scaled by Δ₂).
    """
    from dp_accounting import gaussian_mechanism

    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    sens = check_positive(sensitivity, "sensitivity")
    return float(gaussian_mechanism.get_sigma_gaussian(eps, d)) * sens


def gaussian_noise(
    shape: int | Sequence[int], sigma: float, rng: np.random.Generator
) -> NDArray[np.float64]:
    """I.i.d. N(0, ``sigma``²) noise."""
    s = check_positive(sigma, "sigma")
    return rng.normal(0.0, s, size=shape)


def exponential_mechanism_probabilities(
    utilities: ArrayLike, epsilon: float, sensitivity: float
) -> NDArray[np.float64]:
    """The exponential mechanism's output distribution: ``P(o) ∝ exp(ε·u(o) / 2Δu)``.

    McSherry & Talwar 2007: for a utility whose value changes by at most ``Δu`` between
    neighbouring inputs, sampling from this distribution is ε-DP. Computed in log space.
    """
    eps = check_epsilon(epsilon)
    sens = check_positive(sensitivity, "sensitivity")
    u = np.asarray(utilities, dtype=np.float64)
    if u.ndim != 1 or u.size == 0:
        raise ConfigError("utilities: expected a non-empty 1-D sequence")
    if not np.isfinite(u).all():
        raise ConfigError("utilities: must be finite")
    logits = eps * u / (2.0 * sens)
    logits -= logits.max()
    weights: NDArray[np.float64] = np.exp(logits)
    return weights / float(weights.sum())


def exponential_mechanism(
    utilities: ArrayLike, epsilon: float, sensitivity: float, rng: np.random.Generator
) -> int:
    """Index of one output drawn by the exponential mechanism (see the probabilities above)."""
    probs = exponential_mechanism_probabilities(utilities, epsilon, sensitivity)
    # inverse CDF with one uniform draw: exact and reproducible for a seeded generator
    cdf = np.cumsum(probs)
    index = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return min(index, probs.size - 1)


def skellam_noise(
    shape: int | Sequence[int], variance: float, rng: np.random.Generator
) -> NDArray[np.int64]:
    """Symmetric Skellam integer noise ``Pois(μ/2) − Pois(μ/2)`` with variance ``μ``.

    The Skellam family is closed under addition: the sum of independent shares with
    variances ``μᵢ`` is Skellam with variance ``Σμᵢ``, exactly. That is why distributed DP
    uses it (Agarwal, Kairouz & Liu 2021): whatever subset of clients survives a round,
    the noise in the securely aggregated sum has a distribution the accountant handles.
    """
    mu = check_positive(variance, "variance")
    return rng.poisson(mu / 2.0, size=shape).astype(np.int64) - rng.poisson(
        mu / 2.0, size=shape
    ).astype(np.int64)
