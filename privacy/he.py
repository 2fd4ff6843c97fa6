"""Additive homomorphic aggregation with packed Paillier ciphertexts, as pure functions.

A client's fixed-point update (integers ``|v| ≤ B``) is shifted to ``v + B ∈ [0, 2B]`` and
packed ``slots_per_ciphertext`` values per Paillier plaintext, each slot ``slot_bits`` wide
so that the sum of up to ``max_summands`` clients never carries into the next slot. Paillier
(via ``phe``, with gmpy2) is additively homomorphic: the product of ciphertexts modulo
``n²`` encrypts the sum of plaintexts. Combining is therefore a deterministic product of
integers: every aggregator re-executing it gets the same bytes.

**Canonical bytes, no pickle.** A packed payload is ``b"FCHE1"``, a header (dimension,
slot bits, summand count, ciphertext count, modulus size) and fixed-width big-endian
ciphertexts. The decoder refuses a wrong magic or header, truncation, trailing bytes, and
any ciphertext not in ``Z*_{n²}`` (``c = 0``, ``c ≥ n²``, or sharing a factor with ``n``).

**Verifiable decryption.** The key holder decrypts the combined ciphertexts and publishes,
for each, the plaintext ``m`` and the Paillier randomness ``r`` it recovers with the
private key (``r = (c mod n)^{n⁻¹ mod φ(n)} mod n``); anyone checks
``(1 + n)^m · rⁿ ≡ c (mod n²)`` with the public key alone (:func:`verify_decryption`).
Threshold decryption is not offered: docs/privacy.md says why.
"""

from __future__ import annotations

import math
import secrets
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gmpy2
import numpy as np
from numpy.typing import NDArray
from phe import paillier

from protocol.errors import ConfigError, HEError

__all__ = [
    "DecryptionProof",
    "PackingSpec",
    "ciphertexts",
    "combine",
    "decrypt_sum",
    "decrypted_total",
    "encrypt_update",
    "encrypt_update_opening",
    "generate_keypair",
    "load_public_key",
    "payload_shape",
    "public_key_bytes",
    "verify_decryption",
]

MAGIC = b"FCHE1"
KEY_MAGIC = b"FCHK1"
_HEADER = struct.Struct("<IIIII")  # dim, slot_bits, summands, count, modulus bytes
MIN_KEY_BITS = 1024


@dataclass(frozen=True)
class PackingSpec:
    """How values are packed: ``|v| ≤ value_bound``, sums of at most ``max_summands``."""

    value_bound: int
    max_summands: int

    def __post_init__(self) -> None:
        if self.value_bound < 1 or self.max_summands < 1:
            raise ConfigError("value_bound and max_summands must be at least 1")

    @property
    def slot_bits(self) -> int:
        """Bits per slot: the largest possible slot sum, ``max_summands · 2B``, fits."""
        return (self.max_summands * 2 * self.value_bound).bit_length()

    def slots(self, public_key: paillier.PaillierPublicKey) -> int:
        """Values per ciphertext: slots must stay below ``n`` (one spare bit)."""
        count = (int(public_key.n).bit_length() - 1) // self.slot_bits
        if count < 1:
            raise ConfigError("the Paillier modulus is too small for one slot")
        return count


def generate_keypair(
    bits: int = 2048,
) -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    """A Paillier key pair (``phe``; 2048-bit modulus by default, ≥ 1024 accepted)."""
    if bits < MIN_KEY_BITS:
        raise ConfigError(f"key size {bits}: at least {MIN_KEY_BITS} bits")
    public, private = paillier.generate_paillier_keypair(n_length=bits)
    return public, private


def public_key_bytes(public_key: paillier.PaillierPublicKey) -> bytes:
    """Canonical bytes of a public key: magic, modulus length, modulus big-endian."""
    n = int(public_key.n)
    size = (n.bit_length() + 7) // 8
    return KEY_MAGIC + struct.pack("<I", size) + n.to_bytes(size, "big")


def load_public_key(data: bytes) -> paillier.PaillierPublicKey:
    """Parse :func:`public_key_bytes` (refusing malformed keys with :class:`HEError`)."""
    if len(data) < 9 or data[:5] != KEY_MAGIC:
        raise HEError("not a fedchain Paillier public key (bad magic)")
    (size,) = struct.unpack_from("<I", data, 5)
    if len(data) != 9 + size:
        raise HEError("public key length does not match its header")
    n = int.from_bytes(data[9:], "big")
    if n.bit_length() < MIN_KEY_BITS or n % 2 == 0:
        raise HEError("public key modulus is too small or even")
    return paillier.PaillierPublicKey(n)


def _width(public_key: paillier.PaillierPublicKey) -> int:
    return (int(public_key.nsquare).bit_length() + 7) // 8


def _pack(values: NDArray[np.int64], spec: PackingSpec, slots: int) -> list[int]:
    shifted = [int(v) + spec.value_bound for v in values]
    out = []
    for start in range(0, len(shifted), slots):
        m = 0
        for j, s in enumerate(shifted[start : start + slots]):
            m |= s << (j * spec.slot_bits)
        out.append(m)
    return out


def _encode(
    public_key: paillier.PaillierPublicKey,
    dim: int,
    spec: PackingSpec,
    summands: int,
    cts: Sequence[int],
) -> bytes:
    width = _width(public_key)
    header = _HEADER.pack(dim, spec.slot_bits, summands, len(cts), width)
    return MAGIC + header + b"".join(int(c).to_bytes(width, "big") for c in cts)


def _decode(
    data: bytes, public_key: paillier.PaillierPublicKey, spec: PackingSpec
) -> tuple[int, int, list[int]]:
    """(dim, summands, ciphertexts) of a payload, every field checked."""
    width = _width(public_key)
    if len(data) < len(MAGIC) + _HEADER.size or data[: len(MAGIC)] != MAGIC:
        raise HEError("not a fedchain packed-Paillier payload (bad magic)")
    dim, slot_bits, summands, count, got_width = _HEADER.unpack_from(data, len(MAGIC))
    if got_width != width or slot_bits != spec.slot_bits:
        raise HEError("payload was made for another key or packing")
    if not 1 <= summands <= spec.max_summands:
        raise HEError(f"payload sums {summands} updates; allowed 1..{spec.max_summands}")
    if count != math.ceil(dim / spec.slots(public_key)):
        raise HEError(f"payload has {count} ciphertexts for dimension {dim}")
    body = data[len(MAGIC) + _HEADER.size :]
    if len(body) != count * width:
        raise HEError(f"payload body is {len(body)} bytes, expected {count * width}")
    n, nsq = int(public_key.n), int(public_key.nsquare)
    cts = []
    for i in range(count):
        c = int.from_bytes(body[i * width : (i + 1) * width], "big")
        if not 0 < c < nsq or math.gcd(c, n) != 1:
            raise HEError(f"ciphertext {i} is not in Z*_(n^2)")
        cts.append(c)
    return dim, summands, cts


def encrypt_update(
    values: NDArray[np.integer],
    public_key: paillier.PaillierPublicKey,
    spec: PackingSpec,
    random_below: Callable[[int], int] = secrets.randbelow,
) -> bytes:
    """Packed encryption of one client's integer update (fresh randomness per ciphertext)."""
    return encrypt_update_opening(values, public_key, spec, random_below)[0]


def encrypt_update_opening(
    values: NDArray[np.integer],
    public_key: paillier.PaillierPublicKey,
    spec: PackingSpec,
    random_below: Callable[[int], int] = secrets.randbelow,
) -> tuple[bytes, list[tuple[int, int, int]]]:
    """:func:`encrypt_update` and, per ciphertext, its opening ``(c, m, r)`` (the client's
    witness for a proof of plaintext knowledge; never published)."""
    v = np.asarray(values, dtype=np.int64)
    if v.ndim != 1 or v.size == 0:
        raise ConfigError("the update must be a non-empty flat integer vector")
    if int(np.abs(v).max()) > spec.value_bound:
        raise ConfigError(f"update values exceed the packing bound {spec.value_bound}")
    n = int(public_key.n)
    cts = []
    openings = []
    for m in _pack(v, spec, spec.slots(public_key)):
        while True:
            r = random_below(n)
            if r > 0 and math.gcd(r, n) == 1:
                break
        c = int(public_key.raw_encrypt(m, r_value=r))
        cts.append(c)
        openings.append((c, m, r))
    return _encode(public_key, v.size, spec, 1, cts), openings


def ciphertexts(
    data: bytes, public_key: paillier.PaillierPublicKey, spec: PackingSpec
) -> list[int]:
    """The checked ciphertexts of a packed payload (:class:`HEError` if malformed)."""
    return _decode(data, public_key, spec)[2]


def combine(
    payloads: Sequence[bytes], public_key: paillier.PaillierPublicKey, spec: PackingSpec
) -> bytes:
    """The packed encryption of the sum: ciphertext-wise products mod n² (deterministic)."""
    if not payloads:
        raise HEError("nothing to combine")
    decoded = [_decode(p, public_key, spec) for p in payloads]
    dims = {d for d, _, _ in decoded}
    if len(dims) != 1:
        raise HEError(f"payloads have different dimensions {sorted(dims)}")
    summands = sum(s for _, s, _ in decoded)
    if summands > spec.max_summands:
        raise HEError(f"{summands} summands exceed the packing's {spec.max_summands}")
    nsq = int(public_key.nsquare)
    acc = list(decoded[0][2])
    for _, _, cts in decoded[1:]:
        acc = [a * c % nsq for a, c in zip(acc, cts, strict=True)]
    return _encode(public_key, dims.pop(), spec, summands, acc)


@dataclass(frozen=True)
class DecryptionProof:
    """For each combined ciphertext, its packed plaintext and Paillier randomness."""

    plaintexts: tuple[int, ...]
    randomness: tuple[int, ...]


def _unpack(
    plaintexts: Sequence[int], dim: int, summands: int, spec: PackingSpec, slots: int
) -> NDArray[np.int64]:
    mask = (1 << spec.slot_bits) - 1
    out = np.empty(dim, dtype=np.int64)
    k = 0
    for m in plaintexts:
        for j in range(slots):
            if k == dim:
                break
            out[k] = ((m >> (j * spec.slot_bits)) & mask) - summands * spec.value_bound
            k += 1
    return out


def decrypt_sum(
    combined: bytes, private_key: paillier.PaillierPrivateKey, spec: PackingSpec
) -> tuple[NDArray[np.int64], DecryptionProof]:
    """The key holder's decryption of a combined payload: the integer sum and the proof."""
    pk = private_key.public_key
    dim, summands, cts = _decode(combined, pk, spec)
    n = int(pk.n)
    phi = (int(private_key.p) - 1) * (int(private_key.q) - 1)
    n_inv = pow(n, -1, phi)
    plaintexts = tuple(int(private_key.raw_decrypt(c)) for c in cts)
    randomness = tuple(int(gmpy2.powmod(c % n, n_inv, n)) for c in cts)
    total = _unpack(plaintexts, dim, summands, spec, spec.slots(pk))
    return total, DecryptionProof(plaintexts, randomness)


def payload_shape(
    data: bytes, public_key: paillier.PaillierPublicKey, spec: PackingSpec
) -> tuple[int, int]:
    """``(dimension, summands)`` of a packed payload, every field checked (:class:`HEError`)."""
    dim, summands, _ = _decode(data, public_key, spec)
    return dim, summands


def decrypted_total(
    combined: bytes,
    public_key: paillier.PaillierPublicKey,
    spec: PackingSpec,
    proof: DecryptionProof,
) -> NDArray[np.int64] | None:
    """The sum a verified decryption opens ``combined`` to, or None if the proof fails."""
    dim, summands, cts = _decode(combined, public_key, spec)
    if len(proof.plaintexts) != len(cts) or len(proof.randomness) != len(cts):
        return None
    total = _unpack(proof.plaintexts, dim, summands, spec, spec.slots(public_key))
    return total if verify_decryption(combined, public_key, spec, total, proof) else None


def verify_decryption(
    combined: bytes,
    public_key: paillier.PaillierPublicKey,
    spec: PackingSpec,
    total: NDArray[np.integer],
    proof: DecryptionProof,
) -> bool:
    """True iff ``proof`` opens every combined ciphertext and ``total`` is what it packs."""
    dim, summands, cts = _decode(combined, public_key, spec)
    if len(proof.plaintexts) != len(cts) or len(proof.randomness) != len(cts):
        return False
    n, nsq = int(public_key.n), int(public_key.nsquare)
    for c, m, r in zip(cts, proof.plaintexts, proof.randomness, strict=True):
        if not (0 <= m < n and 0 < r < n):
            return False
        if (1 + n * m) * int(gmpy2.powmod(r, n, nsq)) % nsq != c:
            return False
    expected = _unpack(proof.plaintexts, dim, summands, spec, spec.slots(public_key))
    return bool(np.array_equal(np.asarray(total, dtype=np.int64), expected))
