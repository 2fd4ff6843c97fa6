"""Exact helpers shared by the issue-23 defences (pre-aggregators, centred clipping, RFA).

Everything is integer arithmetic with one rounding rule, round half to even
(:func:`aggregators.intmath.div_round_half_even`), and one square root,
:func:`isqrt_round` (the integer nearest to the real square root; exact ties cannot occur
because ``sqrt(n)`` is never a half-integer for an integer ``n``). Values stay int64 while
the bound argument proves it is safe and fall back to Python ints otherwise, deciding from
the actual values (never from the platform), so both paths give the same integers.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from aggregators.intmath import div_round_half_even

__all__ = [
    "fixed_point",
    "hash_permutation",
    "isqrt_round",
    "row_sq_norms",
    "scale_rows",
]

_INT64_MAX = 2**63 - 1


def isqrt_round(n: int) -> int:
    """The integer nearest to ``sqrt(n)`` for ``n >= 0``: ``floor((isqrt(4n) + 1) / 2)``.

    ``sqrt(n)`` lies in ``[r - 1/2, r + 1/2)`` for that ``r`` (``4n`` and ``(2r - 1)**2``
    compared exactly); ``sqrt(n) = r + 1/2`` is impossible for integer ``n``.
    """
    if n < 0:
        raise ValueError("isqrt_round of a negative number")
    return (math.isqrt(4 * int(n)) + 1) // 2


def row_sq_norms(rows: NDArray[Any]) -> list[int]:
    """Exact ``sum_t rows[i, t]**2`` per row (int64 rows, any magnitude), as Python ints."""
    if rows.size == 0:
        return [0] * int(rows.shape[0])
    mx = int(np.abs(rows).max()) if rows.dtype != object else max(abs(int(v)) for v in rows.flat)
    if rows.dtype != object and mx * mx * rows.shape[1] <= _INT64_MAX:
        r64 = rows.astype(np.int64, copy=False)
        return [int(v) for v in np.einsum("ij,ij->i", r64, r64)]
    return [sum(int(v) * int(v) for v in row) for row in rows]


def scale_rows(rows: NDArray[Any], num: Sequence[int], den: Sequence[int]) -> NDArray[np.int64]:
    """``round_half_even(rows[i] * num[i] / den[i])`` per row (``den[i] > 0``), as int64.

    Rows with ``num[i] == den[i]`` are copied unchanged. The product is formed in int64
    when ``max|row| * num < 2**63`` and in Python ints otherwise.
    """
    out = np.array(rows, dtype=np.int64, copy=True)
    for i, (a, b) in enumerate(zip(num, den, strict=True)):
        a, b = int(a), int(b)
        if a == b:
            continue
        row = np.asarray(rows[i], dtype=np.int64)
        mx = int(np.abs(row).max()) if row.size else 0
        if mx * a <= _INT64_MAX:
            out[i] = div_round_half_even(row * a, b)
        else:
            prod = row.astype(object) * a
            out[i] = np.asarray(div_round_half_even(prod, b), dtype=np.int64)
    return out


def fixed_point(value: float, frac_bits: int) -> int:
    """``value * 2**frac_bits`` rounded half to even, from the decimal ``repr`` of
    ``value`` (the string the on-chain parameter hash commits to), never from float
    arithmetic."""
    return round(Fraction(repr(float(value))) * (1 << int(frac_bits)))


def hash_permutation(seed: bytes, k: int) -> list[int]:
    """A permutation of ``range(k)`` fixed by ``seed``: Fisher-Yates, each swap index drawn
    by rejection sampling from ``SHA-256(seed || counter)`` (8-byte big-endian counter,
    first 8 bytes of the digest as an unsigned integer). No library RNG, so every machine
    and every version draws the same permutation."""
    perm = list(range(k))
    counter = 0

    def draw(bound: int) -> int:  # uniform in [0, bound)
        nonlocal counter
        limit = (1 << 64) - ((1 << 64) % bound)
        while True:
            digest = hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
            counter += 1
            v = int.from_bytes(digest[:8], "big")
            if v < limit:
                return v % bound

    for i in range(k - 1, 0, -1):
        j = draw(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm
