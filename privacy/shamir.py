"""Shamir secret sharing over the prime field GF(2^256 − 189), as a pure function.

A secret ``s < P`` is the constant term of a random polynomial ``f`` of degree ``t − 1``;
the share of the holder at point ``x ≠ 0`` is ``f(x)``. Any ``t`` shares recover ``s`` by Lagrange
interpolation at 0; ``t − 1`` shares are independent of ``s`` (uniform in the field).
``P = 2^256 − 189`` is the largest prime below 2^256, so a share is 32 bytes and every
32-byte secret sampled below ``P`` fits. Randomness comes from the caller's
``random_bytes(n)`` (``os.urandom`` on a real client).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from protocol.errors import ConfigError

__all__ = ["FIELD_PRIME", "SHARE_BYTES", "combine", "lagrange_at_zero", "random_element", "split"]

#: 2^256 − 189, prime (tests check it).
FIELD_PRIME = (1 << 256) - 189
SHARE_BYTES = 32


def random_element(random_bytes: Callable[[int], bytes]) -> int:
    """A uniform field element (rejection sampling of 32-byte strings)."""
    while True:
        value = int.from_bytes(random_bytes(SHARE_BYTES), "big")
        if value < FIELD_PRIME:
            return value


def split(
    secret: int, xs: Sequence[int], t: int, random_bytes: Callable[[int], bytes]
) -> list[int]:
    """Shares ``f(x)`` for each ``x`` in ``xs`` (distinct, nonzero) of ``secret``, threshold
    ``t`` (1 ≤ t ≤ len(xs))."""
    if not 0 <= secret < FIELD_PRIME:
        raise ConfigError("secret must be a field element (0 <= secret < 2^256 - 189)")
    n = len(xs)
    if not 1 <= t <= n:
        raise ConfigError(f"threshold {t!r}: must satisfy 1 <= t <= n = {n}")
    if len(set(xs)) != n or any(not 0 < x < FIELD_PRIME for x in xs):
        raise ConfigError("share points must be distinct and nonzero")
    coeffs = [secret] + [random_element(random_bytes) for _ in range(t - 1)]
    shares = []
    for x in xs:
        acc = 0
        for c in reversed(coeffs):  # Horner
            acc = (acc * x + c) % FIELD_PRIME
        shares.append(acc)
    return shares


def lagrange_at_zero(xs: Sequence[int]) -> list[int]:
    """Lagrange coefficients ``λ_i`` with ``f(0) = Σ λ_i f(x_i)`` for distinct nonzero ``xs``.

    Cached by the point set: unmasking a round reconstructs every secret from the same first
    ``t`` revealers, so the O(t²) coefficients are computed once per round, not per secret.
    """
    return list(_lagrange(tuple(xs)))


@lru_cache(maxsize=64)
def _lagrange(xs: tuple[int, ...]) -> tuple[int, ...]:
    if len(set(xs)) != len(xs) or any(not 0 < x < FIELD_PRIME for x in xs):
        raise ConfigError("share indices must be distinct and nonzero")
    out = []
    for i, xi in enumerate(xs):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if i != j:
                num = num * xj % FIELD_PRIME
                den = den * (xj - xi) % FIELD_PRIME
        out.append(num * pow(den, -1, FIELD_PRIME) % FIELD_PRIME)
    return tuple(out)


def combine(points: Sequence[tuple[int, int]]) -> int:
    """The secret from ``(x, f(x))`` points (at least the threshold many, all from one f)."""
    if not points:
        raise ConfigError("no shares to combine")
    lambdas = lagrange_at_zero([x for x, _ in points])
    return sum(lam * y for lam, (_, y) in zip(lambdas, points, strict=True)) % FIELD_PRIME
