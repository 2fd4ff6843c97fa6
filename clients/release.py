"""What a client releases in a round under its task's privacy mode (pure, no I/O).

:func:`client_release` turns the client's float delta into the integer vector it publishes
(in plaintext, masked, or encrypted — the caller decides how):

* ``none``, ``secagg``, ``he``: the fixed-point delta, saturated to the task's bound;
* ``ldp``: clipped to this round's clip norm and perturbed (:func:`privacy.local.privatize`),
  then quantised;
* ``ddp+secagg``, ``ddp+he``: clipped, mapped to integers of L2 norm at most the scale and
  given this client's Skellam share of the noise (:func:`privacy.distributed.encode_client`).

With adaptive clipping the client also releases its ε-DP clip bit (norm ≤ clip norm, through
the exponential mechanism): in plaintext as the payload's ``meta/clip_bit``, and in the sum
modes as one extra coordinate of the vector, so only the count of 1-bits is revealed.
Every random draw comes from a generator the caller seeds from the client's own key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privacy.adaptive_clip import clip_bit
from privacy.distributed import encode_client
from privacy.local import privatize
from privacy.spec import PrivacySpec
from protocol.fixedpoint import NumericFormat, quantise

__all__ = ["Release", "client_release"]


@dataclass(frozen=True)
class Release:
    """A client's integer vector for one round (the clip bit appended in the sum modes),
    its clip bit (None without adaptive clipping) and its update's norm before clipping."""

    vector: NDArray[np.int64]
    clip_bit: int | None
    norm: float | None


def client_release(
    spec: PrivacySpec,
    fmt: NumericFormat,
    delta: ArrayLike,
    clip_norm: float,
    noise_rng: np.random.Generator,
    bit_rng: np.random.Generator,
) -> Release:
    """The integer release of ``delta`` (float, flat) under ``spec`` with this round's
    ``clip_norm`` (see the module docstring)."""
    update = np.nan_to_num(np.asarray(delta, dtype=np.float64), nan=0.0)
    norm: float | None = None
    if spec.mode == "ldp":
        noisy, norm = privatize(update, replace(spec, clip_norm=clip_norm), noise_rng)
        vector = quantise(noisy, fmt.frac_bits, fmt.value_bound)
    elif spec.distributed:
        vector, norm = encode_client(update, clip_norm, spec.ddp(), noise_rng)
    else:
        vector = quantise(update, fmt.frac_bits, fmt.value_bound)
    bit = None
    if spec.adaptive_clip:
        assert norm is not None
        bit = clip_bit(norm, clip_norm, spec.clip_bit_epsilon, bit_rng)
        if spec.hides_updates:
            vector = np.append(vector, np.int64(bit))
    return Release(np.asarray(vector, dtype=np.int64), bit, norm)
