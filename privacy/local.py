"""Local differential privacy on a client: clip, then perturb, before quantisation.

:func:`privatize` is what an LDP client does to its flat float update before the
fixed-point quantisation: clip it (L2 for Gaussian noise, L1 for Laplace) to ``clip_norm``
and add noise of scale ``noise_multiplier × 2·clip_norm``. Aggregation is unchanged, so
every aggregator still re-executes the round bit for bit on the (noisy) quantised updates.
Quantising and saturating after the noise are post-processing: they cost no privacy.

:func:`noise_generator` derives the client's noise generator from its own secret key, the
task and the round (HKDF-SHA256): nobody else can predict the noise, and a client that
restarts mid-round re-creates the same noisy update instead of publishing a second,
independently noised copy of the same data (which would weaken the guarantee).
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import ArrayLike, NDArray

from privacy.mechanisms import clip_l1, clip_l2, gaussian_noise, laplace_noise
from privacy.spec import PrivacySpec

__all__ = ["noise_generator", "privatize"]


def noise_generator(
    secret: bytes, task: str, round_: int, purpose: str = "ldp-noise"
) -> np.random.Generator:
    """A generator seeded by HKDF(secret; task, round, purpose): private and restart-stable."""
    if len(secret) < 16:
        raise ValueError("the client secret must have at least 128 bits")
    info = f"fedchain/{purpose}/{task.lower()}/{int(round_)}".encode()
    seed = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"fedchain-privacy-v1", info=info
    ).derive(secret)
    return np.random.Generator(np.random.PCG64DXSM(int.from_bytes(seed, "big")))


def privatize(
    update: ArrayLike, spec: PrivacySpec, rng: np.random.Generator
) -> tuple[NDArray[np.float64], float]:
    """The locally private version of a flat update, and the update's norm before clipping.

    Gaussian: ``clip_l2(u, C) + N(0, (z·2C)²)``; Laplace: ``clip_l1(u, C) + Lap(z·2C)``,
    with ``z = spec.noise_multiplier`` and ``C = spec.clip_norm``.
    """
    if spec.mode != "ldp":
        raise ValueError(f"privatize needs an ldp spec, got mode {spec.mode!r}")
    scale = spec.noise_scale
    if spec.mechanism == "gaussian":
        clipped, norm = clip_l2(update, spec.clip_norm)
        return clipped + gaussian_noise(clipped.shape, scale, rng), norm
    clipped, norm = clip_l1(update, spec.clip_norm)
    return clipped + laplace_noise(clipped.shape, scale, rng), norm
