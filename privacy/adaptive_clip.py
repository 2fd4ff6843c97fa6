"""Adaptive clipping (Andrew et al. 2021) with bits privatised by the exponential mechanism.

The clip norm tracks a target quantile γ of the clients' update norms:
``C ← C · exp(−η (b̄ − γ))`` where b̄ is the fraction of clients whose norm was ≤ C. Nobody
may see the norms, so each client releases its bit through the exponential mechanism over
the two answers with utility 1 for the true one (Δu = 1), run at parameter 2ε so that the
bit is exactly ε-DP: it reports the truth with probability ``p = e^ε/(1 + e^ε)`` (this is
randomised response; the general exponential-mechanism bound would charge 2ε for it). The
debiased fraction ``(mean − (1 − p)) / (2p − 1)`` of the published bits and the update are
post-processing that every node can recompute. The accountant charges ε per round through
``RoundRelease.bit_epsilon``.

Phase 1 ships this core and its tests; wiring it into rounds (the bit travels in the update
payload, the manifest declares it) is described in docs/privacy.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from privacy.mechanisms import check_epsilon, check_positive, exponential_mechanism
from protocol.errors import ConfigError

__all__ = ["clip_bit", "debiased_fraction", "next_clip_norm", "truth_probability"]


def truth_probability(epsilon: float) -> float:
    """Probability that an ε-DP clip bit reports the truth: ``e^ε / (1 + e^ε)``."""
    eps = check_epsilon(epsilon)
    return 1.0 / (1.0 + math.exp(-eps))


def clip_bit(norm: float, clip_norm: float, epsilon: float, rng: np.random.Generator) -> int:
    """The client's ε-DP report of ``norm ≤ clip_norm`` (1) or not (0)."""
    truth = int(norm <= check_positive(clip_norm, "clip_norm"))
    utilities = [1.0 if answer == truth else 0.0 for answer in (0, 1)]
    return exponential_mechanism(utilities, 2.0 * check_epsilon(epsilon), 1.0, rng)


def debiased_fraction(bits: Sequence[int], epsilon: float) -> float:
    """Unbiased estimate of the true fraction of 1-bits, clamped to [0, 1]."""
    if not bits:
        raise ConfigError("no clip bits to aggregate")
    p = truth_probability(epsilon)
    mean = sum(int(b) for b in bits) / len(bits)
    return min(1.0, max(0.0, (mean - (1.0 - p)) / (2.0 * p - 1.0)))


def next_clip_norm(
    clip_norm: float,
    bits: Sequence[int],
    epsilon: float,
    target_quantile: float = 0.5,
    learning_rate: float = 0.2,
    bounds: tuple[float, float] = (1e-3, 1e3),
) -> float:
    """The geometric update ``C · exp(−η (b̂ − γ))``, kept within ``bounds``."""
    if not 0.0 < target_quantile < 1.0:
        raise ConfigError(f"target_quantile {target_quantile!r}: must lie in (0, 1)")
    check_positive(learning_rate, "learning_rate")
    frac = debiased_fraction(bits, epsilon)
    updated = check_positive(clip_norm, "clip_norm") * math.exp(
        -learning_rate * (frac - target_quantile)
    )
    return min(bounds[1], max(bounds[0], updated))
