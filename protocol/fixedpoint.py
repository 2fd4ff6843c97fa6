"""Fixed-point numbers: the canonical arithmetic every honest aggregator shares.

A real value ``x`` is carried as the integer ``q = round_half_even(x * 2**frac_bits)``,
saturated to ``[-bound, bound]``. Aggregation rules then work on integers only, so any
order, any machine and any vectorisation give the same bytes (DESIGN.md, "Determinism is
the protocol"). Quantising happens on the clients; it is the only lossy step, and its error
is at most ``2**-(frac_bits+1)`` per coordinate for values inside the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from protocol.errors import ConfigError

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class NumericFormat:
    """``frac_bits`` fractional bits; client updates must satisfy ``|q| <= value_bound``."""

    frac_bits: int = 16
    value_bound: int = 4 << 16  # updates are clipped to +-4.0 by default

    def __post_init__(self) -> None:
        if not 0 <= self.frac_bits <= 30:
            raise ConfigError(f"frac_bits must be in 0..30, got {self.frac_bits}")
        if not 1 <= self.value_bound <= 2**30:
            raise ConfigError(f"value_bound must be in 1..2**30, got {self.value_bound}")

    @property
    def scale(self) -> int:
        return 1 << self.frac_bits

    @property
    def resolution(self) -> float:
        """The real value of one unit in the last place."""
        return 1.0 / self.scale

    @property
    def clip(self) -> float:
        """The largest real magnitude an update coordinate may carry."""
        return self.value_bound / self.scale


def quantise(values: ArrayLike, frac_bits: int, bound: int = INT32_MAX) -> NDArray[np.int64]:
    """Round ``values * 2**frac_bits`` half-to-even and saturate to ``[-bound, bound]``.

    NaN is refused (an honest client never produces one); infinities saturate.
    """
    x = np.asarray(values, dtype=np.float64)
    if np.isnan(x).any():
        raise ValueError("cannot quantise NaN")
    scaled = np.clip(np.rint(x * float(1 << frac_bits)), -float(bound), float(bound))
    return scaled.astype(np.int64)


def dequantise(q: ArrayLike, frac_bits: int) -> NDArray[np.float64]:
    """Return the real values of fixed-point integers (exact in float64 for |q| < 2**53)."""
    return np.asarray(q, dtype=np.float64) / float(1 << frac_bits)
