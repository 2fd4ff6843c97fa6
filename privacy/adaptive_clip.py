"""Adaptive clipping (Andrew et al. 2021) with bits privatised by the exponential mechanism.

The clip norm tracks a target quantile γ of the clients' update norms:
``C ← C · exp(−η (b̄ − γ))`` where b̄ is the fraction of clients whose norm was ≤ C. Nobody
may see the norms, so each client releases its bit through the exponential mechanism over
the two answers with utility 1 for the true one (Δu = 1), run at parameter 2ε so that the
bit is exactly ε-DP: it reports the truth with probability ``p = e^ε/(1 + e^ε)`` (this is
randomised response; the general exponential-mechanism bound would charge 2ε for it). The
debiased fraction ``(mean − (1 − p)) / (2p − 1)`` of the published bits and the update are
post-processing that every node recomputes. The accountant charges ε per round through
``RoundRelease.bit_epsilon``.

**Re-executable by every aggregator.** The next clip norm is part of the published global
state, so it must be the same bytes on every machine. ``math.exp`` is not correctly rounded
everywhere (libm differs), so :func:`next_clip_norm_from_count` computes the update in
:mod:`decimal` at 40 significant digits (``Decimal.exp`` is correctly rounded by the
standard, in pure software) from the integer count of 1-bits, and converts the result to
the nearest float64 once. Same count, same float, on any platform.

In a round the bit travels with the update: in plaintext (local DP) as the payload's
``meta/clip_bit`` tensor, under secure aggregation or HE as one extra coordinate of the
masked or encrypted vector, so only the count of 1-bits is ever revealed there.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal

import numpy as np

from privacy.mechanisms import check_epsilon, check_positive, exponential_mechanism
from protocol.errors import ConfigError

__all__ = [
    "CLIP_BOUNDS",
    "clip_bit",
    "debiased_fraction",
    "next_clip_norm",
    "next_clip_norm_from_count",
    "truth_probability",
]

#: The clip norm never leaves this range (a stuck or adversarial count cannot drive it to 0).
CLIP_BOUNDS = (1e-3, 1e3)
_CTX = Context(prec=40, rounding=ROUND_HALF_EVEN)


def truth_probability(epsilon: float) -> float:
    """Probability that an ε-DP clip bit reports the truth: ``e^ε / (1 + e^ε)``."""
    return float(_truth(check_epsilon(epsilon)))


def _truth(epsilon: float) -> Decimal:
    return _CTX.divide(Decimal(1), _CTX.add(Decimal(1), _CTX.exp(_CTX.minus(Decimal(epsilon)))))


def clip_bit(norm: float, clip_norm: float, epsilon: float, rng: np.random.Generator) -> int:
    """The client's ε-DP report of ``norm ≤ clip_norm`` (1) or not (0)."""
    truth = int(norm <= check_positive(clip_norm, "clip_norm"))
    utilities = [1.0 if answer == truth else 0.0 for answer in (0, 1)]
    return exponential_mechanism(utilities, 2.0 * check_epsilon(epsilon), 1.0, rng)


def _debiased(ones: int, total: int, epsilon: float) -> Decimal:
    if total < 1:
        raise ConfigError("no clip bits to aggregate")
    count = min(max(int(ones), 0), total)  # a sum of bits lies in [0, total]: clamp
    p = _truth(check_epsilon(epsilon))
    mean = _CTX.divide(Decimal(count), Decimal(total))
    frac = _CTX.divide(
        _CTX.subtract(mean, _CTX.subtract(Decimal(1), p)),
        _CTX.subtract(_CTX.multiply(Decimal(2), p), Decimal(1)),
    )
    return min(Decimal(1), max(Decimal(0), frac))


def debiased_fraction(bits: Sequence[int], epsilon: float) -> float:
    """Unbiased estimate of the true fraction of 1-bits, clamped to [0, 1]."""
    return float(_debiased(sum(int(b) for b in bits), len(bits), epsilon))


def next_clip_norm_from_count(
    clip_norm: float,
    ones: int,
    total: int,
    epsilon: float,
    target_quantile: float = 0.5,
    learning_rate: float = 0.2,
    bounds: tuple[float, float] = CLIP_BOUNDS,
) -> float:
    """``C · exp(−η (b̂ − γ))`` from ``ones`` 1-bits among ``total`` clients, within ``bounds``.

    Deterministic across platforms (see the module docstring); ``ones`` is clamped to
    ``[0, total]`` first, so an out-of-range sum (a client that put something other than a
    bit into a masked vector) cannot push the estimate outside [0, 1].
    """
    if not 0.0 < target_quantile < 1.0:
        raise ConfigError(f"target_quantile {target_quantile!r}: must lie in (0, 1)")
    check_positive(learning_rate, "learning_rate")
    frac = _debiased(ones, total, epsilon)
    step = _CTX.multiply(
        _CTX.minus(Decimal(learning_rate)), _CTX.subtract(frac, Decimal(target_quantile))
    )
    updated = _CTX.multiply(Decimal(check_positive(clip_norm, "clip_norm")), _CTX.exp(step))
    return min(bounds[1], max(bounds[0], float(updated)))


def next_clip_norm(
    clip_norm: float,
    bits: Sequence[int],
    epsilon: float,
    target_quantile: float = 0.5,
    learning_rate: float = 0.2,
    bounds: tuple[float, float] = CLIP_BOUNDS,
) -> float:
    """The geometric update from the published bits (see :func:`next_clip_norm_from_count`)."""
    return next_clip_norm_from_count(
        clip_norm,
        sum(int(b) for b in bits),
        len(bits),
        epsilon,
        target_quantile,
        learning_rate,
        bounds,
    )
