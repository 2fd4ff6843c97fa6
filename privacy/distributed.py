"""Distributed DP in the fixed-point ring: each client adds a Skellam share of the noise.

Every client clips its update (L2, ``C``), maps it to integers whose L2 norm is at most the
scale ``S`` and adds its Skellam share; the shares of the survivors sum to Skellam noise of
variance at least ``μ`` in the securely aggregated sum (Agarwal, Kairouz & Liu 2021). The
sum is the only thing anybody sees, so one client's update is protected by the noise of
all of them, and the accountant charges the Skellam release of the sum.

* **Integer map with a deterministic sensitivity.** The clipped vector is scaled to L2 norm
  ``S − √d/2`` and rounded to the nearest integer coordinate-wise; rounding moves it by at
  most ``√d/2`` in L2, so the integer vector's norm is at most ``S`` for every input.
  (Kairouz et al.'s conditional randomised rounding gives a slightly smaller bound for
  ``S ≈ √d``; with the default ``S = 2^16`` the difference is below 0.1 %.)
* **Neighbouring sums.** Who took part in a round is public on-chain, so the unit of
  privacy is *replacing* one client's update (not adding or removing it, which anybody can
  see): the sum moves by ``x' − x``, so ``Δ₂ = 2S`` and ``Δ₁ ≤ ‖x‖₁ + ‖x'‖₁ ≤ 2S²`` (an
  integer's absolute value is at most its square), independent of the model size ``d``.
  The noise multiplier is ``z = √μ / Δ₂``, the convention of local DP (σ over Δ = 2C).
* **Dropouts.** Each of the task's ``K`` clients adds variance ``μ / t`` with
  ``t = ⌈(1 − ρ) K⌉`` (ρ = the tolerated dropout fraction, the secure-aggregation
  threshold): any set of at least ``t`` survivors carries variance ``≥ μ`` (Skellam is closed
  under sums), so the guarantee holds for every dropout pattern the unmasking survives. A
  client that skips its noise counts as dropped for this purpose (it only hurts its own
  guarantee and the slack ρ).
* **No wrap-around.** Sums live in Z_2^32 (int32 two's complement). :func:`check_ring`
  refuses parameters under which ``K`` clients could overflow it: ``K·S`` plus a Bernstein
  tail bound of the total noise that fails with probability below ``10⁻²⁰`` per round.
* **Back to model units.** :func:`decode_mean` turns the integer sum of ``n`` included
  clients into the fixed-point mean delta with element-wise IEEE-754 operations only
  (correctly rounded everywhere): every aggregator gets the same bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privacy.accounting import SkellamRelease
from privacy.mechanisms import check_positive, clip_l2, skellam_noise
from protocol.errors import ConfigError

__all__ = [
    "DEFAULT_SCALE",
    "OVERFLOW_PROBABILITY",
    "RING_LIMIT",
    "DdpParams",
    "check_ring",
    "decode_mean",
    "effective_scale",
    "encode_client",
    "noise_tail",
    "survivor_threshold",
]

#: Integer units per clip norm: the L2 bound of one client's integer vector.
DEFAULT_SCALE = 1 << 16
#: |sum| must stay below this for the int32 two's-complement reading of Z_2^32 to be exact.
RING_LIMIT = 1 << 31
#: Per round, the probability that the noise alone pushes some coordinate past the bound.
OVERFLOW_PROBABILITY = 1e-20


def survivor_threshold(num_clients: int, dropout_fraction: float) -> int:
    """``t = ⌈(1 − ρ) K⌉``, at least 1: the fewest survivors a round tolerates."""
    if num_clients < 1:
        raise ConfigError(f"num_clients {num_clients!r}: must be at least 1")
    if not 0.0 <= dropout_fraction < 1.0:
        raise ConfigError(f"dropout_fraction {dropout_fraction!r}: must lie in [0, 1)")
    # the product is rounded to 9 decimals first so that 0.7 * 10 counts as 7, not 7.0000001
    return max(1, math.ceil(round((1.0 - dropout_fraction) * num_clients, 9)))


@dataclass(frozen=True)
class DdpParams:
    """The distributed-DP parameters of a task: scale ``S``, noise multiplier ``z = √μ/2S``,
    tolerated dropout fraction ``ρ`` and number of clients ``K``."""

    scale: int
    noise_multiplier: float
    dropout_fraction: float
    num_clients: int

    def __post_init__(self) -> None:
        if isinstance(self.scale, bool) or not isinstance(self.scale, int) or self.scale < 2:
            raise ConfigError(f"ddp_scale {self.scale!r}: must be an integer >= 2")
        check_positive(self.noise_multiplier, "noise_multiplier")
        survivor_threshold(self.num_clients, self.dropout_fraction)

    @property
    def threshold(self) -> int:
        return survivor_threshold(self.num_clients, self.dropout_fraction)

    @property
    def l2_sensitivity(self) -> float:
        """Δ₂ = 2S: replacing one client's vector moves the sum by at most this."""
        return 2.0 * self.scale

    @property
    def variance(self) -> float:
        """μ = (z·Δ₂)²: the variance per coordinate the sum of any ``t`` survivors reaches."""
        return (self.noise_multiplier * self.l2_sensitivity) ** 2

    @property
    def client_variance(self) -> float:
        """The variance of one client's share, ``μ / t``."""
        return self.variance / self.threshold

    def release(self) -> SkellamRelease:
        """The accountant's view: ``Δ₁ = 2S²``, ``Δ₂ = 2S``, variance ``μ``."""
        return SkellamRelease(2.0 * float(self.scale) ** 2, self.l2_sensitivity, self.variance)


def effective_scale(scale: int, dim: int) -> float:
    """``S − √d/2``: the L2 norm a clipped update is scaled to before rounding."""
    value = float(scale) - math.sqrt(float(dim)) / 2.0
    if value <= 0:
        raise ConfigError(
            f"ddp_scale {scale}: must exceed sqrt(d)/2 = {math.sqrt(dim) / 2:.1f} for a model "
            f"of {dim} parameters"
        )
    return value


def encode_client(
    update: ArrayLike, clip_norm: float, params: DdpParams, rng: np.random.Generator
) -> tuple[NDArray[np.int64], float]:
    """One client's integer release and its update's norm before clipping.

    ``round((S − √d/2) · clip_l2(u, C) / C) + Skellam(μ / t)``: the rounded part has L2 norm
    at most ``S`` for every input (checked), the noise is this client's share.
    """
    clipped, norm = clip_l2(update, clip_norm)
    dim = clipped.size
    target = effective_scale(params.scale, dim)
    rounded = np.rint(clipped * (target / float(clip_norm)))
    if float(np.linalg.norm(rounded)) > params.scale:  # impossible by the triangle inequality
        raise ConfigError("rounded update exceeds the DDP scale (numerical error)")
    noise = skellam_noise(dim, params.client_variance, rng)
    return rounded.astype(np.int64) + noise, norm


def noise_tail(total_variance: float, dim: int, failure: float = OVERFLOW_PROBABILITY) -> float:
    """``s`` with ``P(some coordinate's noise exceeds s) ≤ failure``.

    Bernstein's inequality for a sum of independent centred Poisson variables of total
    variance ``V`` (Skellam shares): ``P(|X| ≥ s) ≤ 2 exp(−s² / 2(V + s/3))``; solved for the
    union over ``d`` coordinates.
    """
    log_term = math.log(2.0 * dim / failure)
    return log_term / 3.0 + math.sqrt(log_term**2 / 9.0 + 2.0 * log_term * total_variance)


def check_ring(params: DdpParams, dim: int) -> float:
    """Refuse parameters whose sums could wrap around Z_2^32; return the worst-case |sum|.

    The signal of ``K`` clients is at most ``K·S`` per coordinate (a coordinate is at most the
    vector's L2 norm); with all ``K`` clients present the noise has variance ``K·μ/t``.
    """
    effective_scale(params.scale, dim)
    signal = params.num_clients * params.scale
    noise = noise_tail(params.num_clients * params.client_variance, dim)
    worst = signal + noise
    if worst >= RING_LIMIT:
        raise ConfigError(
            f"ddp_scale {params.scale} with {params.num_clients} clients and noise multiplier "
            f"{params.noise_multiplier:.4g}: sums could reach {worst:.3g} >= 2^31 and wrap "
            f"around the 32-bit ring; lower --ddp-scale (at most about "
            f"{int(RING_LIMIT / (params.num_clients * (1 + params.noise_multiplier)))})"
        )
    return worst


def decode_mean(
    total: NDArray[np.int64],
    count: int,
    clip_norm: float,
    scale: int,
    frac_bits: int,
    value_bound: int,
) -> NDArray[np.int64]:
    """The fixed-point mean delta of ``count`` clients from their integer sum.

    ``rint(total · (C·2^f) / ((S − √d/2)·count))`` saturated to ``±value_bound``, computed
    element-wise in float64 (each operation correctly rounded; ``|total| < 2^53``), so the
    result is the same on every machine. Saturation is post-processing of the noisy sum.
    """
    if count < 1:
        raise ConfigError("no update to average")
    t = np.asarray(total, dtype=np.int64)
    if t.size and int(np.abs(t).max()) >= 1 << 53:
        raise ConfigError("DDP sum exceeds 2^53: not exact in float64")
    numerator = float(clip_norm) * float(1 << frac_bits)  # exact: a power-of-two scaling
    denominator = effective_scale(scale, t.size) * float(count)
    mean = np.rint((t.astype(np.float64) * numerator) / denominator)
    return np.clip(mean, -value_bound, value_bound).astype(np.int64)
