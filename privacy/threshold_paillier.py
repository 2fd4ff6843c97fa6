"""Threshold Paillier decryption (Shoup 2000 / Damgård–Jurik 2001, s = 1) as pure functions.

No single party can decrypt: the decryption exponent is Shamir-shared among the ``l``
members of the aggregator committee, any ``t`` of whom decrypt together, each publishing a
decryption share with a proof that it used its key share.

**Keys (trusted dealer).** ``n = pq`` with safe primes ``p = 2p' + 1``, ``q = 2q' + 1``,
``m = p'q'``. The dealer picks ``d ≡ 0 (mod m)``, ``d ≡ 1 (mod n)`` and shares it with a
random polynomial ``f`` of degree ``t − 1`` over ``Z_{nm}``: ``sᵢ = f(i)``. It publishes a
random square ``v`` of ``Z*_{n²}`` and the verification keys ``vᵢ = v^{Δ·sᵢ}`` with
``Δ = l!``, sends ``sᵢ`` to member ``i`` and forgets ``p, q, d, f``. **The dealer is trusted
for confidentiality at key generation** (it could keep ``d``); a distributed RSA-modulus
generation among the committee removes it and is future work (docs/privacy.md).

**Decryption share.** ``cᵢ = c^{2Δsᵢ} mod n²`` with a Chaum–Pedersen proof (Fiat–Shamir) that
``log_{c⁴}(cᵢ²) = log_v(vᵢ)``: random ``r`` of ``|n²| + 256`` bits, ``a = c^{4r}``,
``b = v^r``, ``e = H(context, c, cᵢ, a, b)``, ``z = r + e·Δ·sᵢ`` (over the integers).
Anyone verifies ``c^{4z} = a·cᵢ^{2e}`` and ``v^z = b·vᵢ^e`` (mod n²).

**Combination (pure, deterministic).** From the ``t`` valid shares of the smallest member
indices, ``c' = Π cᵢ^{2λᵢ}`` with the integer Lagrange coefficients ``λᵢ = Δ·Π_{j≠i} j/(j−i)``;
``c' = (1 + n)^{4Δ²·M}``, so ``M = L(c')·(4Δ²)⁻¹ mod n`` with ``L(u) = (u − 1)/n``. Every
aggregator that re-executes gets the same plaintext from the same published shares.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gmpy2

from protocol.errors import ConfigError, HEError

__all__ = [
    "DecryptionShare",
    "KeyShare",
    "ThresholdKey",
    "combine_shares",
    "deal",
    "decryption_share",
    "generate_safe_prime",
    "verify_share",
]

RandomBelow = Callable[[int], int]
_DOMAIN = b"fedchain-threshold-paillier-v1"
_CHALLENGE_BITS = 128
_SLACK_BITS = 256  # statistical hiding of Δ·sᵢ in z
_KEY_MAGIC = b"FCTK1"


def _widths(n: int) -> tuple[int, int]:
    return (n.bit_length() + 7) // 8, ((n * n).bit_length() + 7) // 8


@dataclass(frozen=True)
class ThresholdKey:
    """The public part: modulus, threshold ``t`` of ``members`` (``l``), ``v`` and ``vᵢ``."""

    n: int
    threshold: int
    members: int
    v: int
    verification: tuple[int, ...]  # vᵢ for i = 1..l

    @property
    def nsquare(self) -> int:
        return self.n * self.n

    def to_bytes(self) -> bytes:
        """Canonical bytes: magic, t, l, modulus width, then n, v and every vᵢ fixed-width."""
        wn, w2 = _widths(self.n)
        head = _KEY_MAGIC + struct.pack("<III", self.threshold, self.members, wn)
        body = self.n.to_bytes(wn, "big") + self.v.to_bytes(w2, "big")
        return head + body + b"".join(x.to_bytes(w2, "big") for x in self.verification)

    @classmethod
    def from_bytes(cls, data: bytes) -> ThresholdKey:
        """Parse :meth:`to_bytes` strictly (:class:`HEError` if malformed)."""
        head = len(_KEY_MAGIC) + 12
        if len(data) < head or bytes(data[: len(_KEY_MAGIC)]) != _KEY_MAGIC:
            raise HEError("not a fedchain threshold Paillier key (bad magic)")
        t, members, wn = struct.unpack_from("<III", data, len(_KEY_MAGIC))
        n = int.from_bytes(data[head : head + wn], "big")
        w2 = _widths(n)[1] if n else 0
        if not 1 <= t <= members <= 64 or n < 3 or len(data) != head + wn + w2 * (members + 1):
            raise HEError("threshold key length or parameters do not match its header")
        at = head + wn
        values = [
            int.from_bytes(data[at + i * w2 : at + (i + 1) * w2], "big") for i in range(members + 1)
        ]
        return cls(n, t, members, values[0], tuple(values[1:]))

    @property
    def delta(self) -> int:
        return math.factorial(self.members)


@dataclass(frozen=True)
class KeyShare:
    """Member ``index``'s (1-based) secret share ``sᵢ`` of the decryption exponent."""

    index: int
    secret: int


@dataclass(frozen=True)
class DecryptionShare:
    """Member ``index``'s share ``cᵢ`` of one ciphertext's decryption, with its proof."""

    index: int
    value: int
    challenge: int
    response: int


def generate_safe_prime(bits: int, random_below: RandomBelow = secrets.randbelow) -> int:
    """A prime ``p = 2p' + 1`` of ``bits`` bits (top two set) with ``p'`` prime."""
    if bits < 16:
        raise ConfigError(f"safe prime of {bits} bits: too small")
    while True:
        # the two top bits set, so that the product of two such primes has 2·bits bits
        half = random_below(1 << (bits - 2)) | (3 << (bits - 3)) | 1
        if gmpy2.is_prime(half, 30) and gmpy2.is_prime(2 * half + 1, 30):
            return int(2 * half + 1)


def deal(
    p: int, q: int, threshold: int, members: int, random_below: RandomBelow = secrets.randbelow
) -> tuple[ThresholdKey, list[KeyShare]]:
    """The trusted dealer: the public key and one key share per member (module docstring).

    ``p`` and ``q`` must be distinct safe primes; ``1 <= threshold <= members``.
    """
    if not 1 <= threshold <= members:
        raise ConfigError(f"threshold {threshold}: must be in 1..{members}")
    pp, qq = (p - 1) // 2, (q - 1) // 2
    if p == q or not all(gmpy2.is_prime(x, 30) for x in (p, q, pp, qq)):
        raise ConfigError("p and q must be distinct safe primes")
    n, m = p * q, pp * qq
    if math.gcd(n, m) != 1:
        raise ConfigError("gcd(n, m) must be 1")
    d = m * pow(m, -1, n)  # ≡ 0 mod m, ≡ 1 mod n
    nm = n * m
    coefficients = [d] + [random_below(nm) for _ in range(threshold - 1)]
    shares = []
    for i in range(1, members + 1):
        value = 0
        for a in reversed(coefficients):
            value = (value * i + a) % nm
        shares.append(KeyShare(i, value))
    nsq = n * n
    while True:
        r = random_below(nsq)
        if r > 1 and math.gcd(r, n) == 1:
            break
    v = r * r % nsq
    delta = math.factorial(members)
    verification = tuple(int(gmpy2.powmod(v, delta * s.secret, nsq)) for s in shares)
    return ThresholdKey(n, threshold, members, v, verification), shares


def _challenge(context: bytes, key: ThresholdKey, c: int, ci: int, a: int, b: int) -> int:
    h = hashlib.sha256(_DOMAIN)
    width = (key.nsquare.bit_length() + 7) // 8
    h.update(len(context).to_bytes(4, "big") + context)
    for x in (key.n, key.v, c, ci, a, b):
        h.update(x.to_bytes(width, "big"))
    return int.from_bytes(h.digest(), "big") >> (256 - _CHALLENGE_BITS)


def _check_ciphertext(key: ThresholdKey, c: int) -> None:
    if not 0 < c < key.nsquare or math.gcd(c, key.n) != 1:
        raise HEError("the ciphertext is not in Z*_(n^2)")


def decryption_share(
    key: ThresholdKey,
    share: KeyShare,
    c: int,
    context: bytes,
    random_below: RandomBelow = secrets.randbelow,
) -> DecryptionShare:
    """Member ``share.index``'s decryption share of ``c`` with its proof, bound to ``context``
    (e.g. the task, round and ciphertext position)."""
    _check_ciphertext(key, c)
    nsq, exponent = key.nsquare, key.delta * share.secret
    ci = int(gmpy2.powmod(c, 2 * exponent, nsq))
    r = random_below(1 << (nsq.bit_length() + key.delta.bit_length() + _SLACK_BITS))
    a = int(gmpy2.powmod(c, 4 * r, nsq))
    b = int(gmpy2.powmod(key.v, r, nsq))
    e = _challenge(context, key, c, ci, a, b)
    return DecryptionShare(share.index, ci, e, r + e * exponent)


def verify_share(key: ThresholdKey, c: int, share: DecryptionShare, context: bytes) -> bool:
    """Whether ``share`` is member ``share.index``'s correct decryption share of ``c``."""
    if not 1 <= share.index <= key.members or not 0 < share.value < key.nsquare:
        return False
    if share.response < 0 or math.gcd(share.value, key.n) != 1:
        return False
    try:
        _check_ciphertext(key, c)
    except HEError:
        return False
    nsq, e, z = key.nsquare, share.challenge, share.response
    vi = key.verification[share.index - 1]
    # a = c^{4z} · cᵢ^{-2e},  b = v^z · vᵢ^{-e}
    a = int(gmpy2.powmod(c, 4 * z, nsq)) * int(gmpy2.powmod(share.value, -2 * e, nsq)) % nsq
    b = int(gmpy2.powmod(key.v, z, nsq)) * int(gmpy2.powmod(vi, -e, nsq)) % nsq
    return _challenge(context, key, c, share.value, a, b) == e


def _lagrange_at_zero(delta: int, indices: Sequence[int], i: int) -> int:
    num, den = delta, 1
    for j in indices:
        if j != i:
            num *= j
            den *= j - i
    if num % den:
        raise HEError("Lagrange coefficient is not an integer")  # pragma: no cover
    return num // den


def combine_shares(
    key: ThresholdKey, c: int, shares: Sequence[DecryptionShare], context: bytes
) -> tuple[int, tuple[int, ...]]:
    """The plaintext of ``c`` from the first ``t`` valid shares by member index, and the
    members whose shares failed their proof. :class:`HEError` with fewer than ``t`` valid
    shares (never a wrong plaintext)."""
    valid: dict[int, DecryptionShare] = {}
    bad: list[int] = []
    for s in sorted(shares, key=lambda s: s.index):
        if s.index in valid:
            continue
        if verify_share(key, c, s, context):
            valid[s.index] = s
        else:
            bad.append(s.index)
    if len(valid) < key.threshold:
        raise HEError(
            f"{len(valid)} valid decryption shares, fewer than the threshold {key.threshold}"
        )
    chosen = sorted(valid)[: key.threshold]
    nsq = key.nsquare
    acc = 1
    for i in chosen:
        lam = _lagrange_at_zero(key.delta, chosen, i)
        acc = acc * int(gmpy2.powmod(valid[i].value, 2 * lam, nsq)) % nsq
    plain = (acc - 1) // key.n * pow(4 * key.delta * key.delta, -1, key.n) % key.n
    return plain, tuple(sorted(set(bad)))
