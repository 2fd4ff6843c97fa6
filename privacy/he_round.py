"""Homomorphic aggregation as a fedchain round: payloads, combination, verified decryption.

* **Client.** The vector (fixed-point delta, or a distributed-DP integer release) is first
  embedded in Z_2^32 as int32 two's complement — exactly secure aggregation's ring — then
  packed and encrypted under the task key holder's Paillier public key, which is in the
  task manifest (:func:`encrypt_payload`). Slots are wide enough for ``K`` summands of
  ``±2^31``, so the encrypted sum never carries between slots.
* **Aggregators.** Every aggregator multiplies the included ciphertexts (deterministic:
  :func:`combine_round`), so the combination has the same bytes everywhere.
* **Key holder.** It recomputes the same combination from the included payloads, decrypts it
  and publishes a :class:`Decryption`: the combination's SHA-256, the packed plaintexts and
  the Paillier randomness of every ciphertext. It refuses to decrypt a combination of fewer
  than the task's threshold of updates (the sum of one update is that update).
* **Verification.** :func:`verified_sum` checks ``(1 + n)^m · rⁿ ≡ c (mod n²)`` for every
  ciphertext with the public key alone and returns the sum reduced to Z_2^32, i.e. the
  same int32 reading secure aggregation produces; a decryption of anything else, or a wrong
  one, is an :class:`~protocol.errors.HEError` attributed to the key holder.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from phe import paillier

from privacy import he, paillier_pok, threshold_paillier
from protocol.codec import decode_tensors, encode_tensors
from protocol.errors import CodecError, HEError

__all__ = [
    "DECRYPTION_MAGIC",
    "Decryption",
    "combine_round",
    "decode_payload",
    "decrypt_round",
    "encrypt_payload",
    "packing",
    "ring_embed",
    "ring_reduce",
    "threshold_shares",
    "threshold_sum",
    "verified_sum",
]

DECRYPTION_MAGIC = b"FCHD1"
SHARES_MAGIC = b"FCHS1"
ROUND_KEY = "meta/round"
CIPHERTEXT_KEY = "he/ciphertexts"
PROOFS_KEY = "he/proofs"
_RING = 1 << 32
_HALF = 1 << 31


def packing(num_clients: int) -> he.PackingSpec:
    """Slots hold the sum of ``num_clients`` int32 values exactly."""
    return he.PackingSpec(value_bound=_HALF, max_summands=num_clients)


def ring_embed(vector: NDArray[np.integer]) -> NDArray[np.int64]:
    """``v mod 2^32`` read as int32 two's complement (the secure-aggregation ring)."""
    v = np.asarray(vector, dtype=np.int64)
    return ((v + _HALF) % _RING) - _HALF


def ring_reduce(total: NDArray[np.int64]) -> NDArray[np.int64]:
    """An exact sum of ring values, reduced to Z_2^32 as int32 (what secagg yields)."""
    return ring_embed(total)


def encrypt_payload(
    round_: int,
    vector: NDArray[np.integer],
    public_key: paillier.PaillierPublicKey,
    num_clients: int,
    random_below: Callable[[int], int] = secrets.randbelow,
    *,
    task: str,
    client: int,
) -> bytes:
    """A client's round payload: ``meta/round``, the packed ciphertexts and, per ciphertext,
    a proof of plaintext knowledge bound to (``task``, round, ``client``, slot)."""
    blob, openings = he.encrypt_update_opening(
        ring_embed(vector), public_key, packing(num_clients), random_below
    )
    n = int(public_key.n)
    proofs = b"".join(
        paillier_pok.prove(
            n, c, m, r, paillier_pok.proof_context(task, round_, client, slot), random_below
        ).to_bytes(n)
        for slot, (c, m, r) in enumerate(openings)
    )
    return encode_tensors(
        {
            ROUND_KEY: np.array([round_], dtype=np.int64),
            CIPHERTEXT_KEY: np.frombuffer(blob, dtype=np.uint8),
            PROOFS_KEY: np.frombuffer(proofs, dtype=np.uint8),
        }
    )


def decode_payload(
    data: bytes,
    round_: int,
    dim: int,
    public_key: paillier.PaillierPublicKey,
    num_clients: int,
    max_bytes: int,
    *,
    task: str,
    client: int,
) -> bytes:
    """The ciphertext blob of ``client``'s payload for ``round_`` of ``dim`` values, checked,
    every ciphertext's proof of plaintext knowledge verified in its context
    (:class:`CodecError` / :class:`HEError` if malformed or a proof fails)."""
    tensors = decode_tensors(data, max_bytes=max_bytes)
    if set(tensors) != {ROUND_KEY, CIPHERTEXT_KEY, PROOFS_KEY}:
        raise CodecError(f"HE update has tensors {sorted(tensors)}")
    rnd, blob = tensors[ROUND_KEY], tensors[CIPHERTEXT_KEY]
    if rnd.dtype != np.int64 or rnd.shape != (1,) or int(rnd[0]) != round_:
        raise CodecError(f"HE update is not for round {round_}")
    if blob.dtype != np.uint8 or blob.ndim != 1:
        raise CodecError(f"tensor {CIPHERTEXT_KEY!r} must be a uint8 vector")
    raw = blob.tobytes()
    got_dim, summands = he.payload_shape(raw, public_key, packing(num_clients))
    if got_dim != dim or summands != 1:
        raise HEError(f"HE update encrypts {got_dim} values of {summands} summands, expected {dim}")
    proofs = tensors[PROOFS_KEY]
    n = int(public_key.n)
    size = paillier_pok.proof_bytes(n)
    cts = he.ciphertexts(raw, public_key, packing(num_clients))
    if proofs.dtype != np.uint8 or proofs.ndim != 1 or proofs.size != size * len(cts):
        raise CodecError(f"tensor {PROOFS_KEY!r} must hold {len(cts)} proofs of {size} bytes")
    body = proofs.tobytes()
    for slot, c in enumerate(cts):
        proof = paillier_pok.PlaintextProof.from_bytes(body[slot * size : (slot + 1) * size], n)
        context = paillier_pok.proof_context(task, round_, client, slot)
        if not paillier_pok.verify(n, c, proof, context):
            raise HEError(
                f"ciphertext {slot} of client {client}'s update has no valid proof of "
                "plaintext knowledge (a mauled or copied ciphertext)"
            )
    return raw


def combine_round(
    ciphertexts: Sequence[bytes], public_key: paillier.PaillierPublicKey, num_clients: int
) -> bytes:
    """The packed encryption of the sum (product of ciphertexts mod n², deterministic)."""
    return he.combine(ciphertexts, public_key, packing(num_clients))


@dataclass(frozen=True)
class Decryption:
    """The key holder's published decryption of a round's combination."""

    round: int
    combined_digest: bytes
    proof: he.DecryptionProof

    def to_bytes(self, modulus_bytes: int) -> bytes:
        """Canonical bytes: magic, round, digest, count, then fixed-width m and r per ciphertext."""
        body = b"".join(
            int(m).to_bytes(modulus_bytes, "big") + int(r).to_bytes(modulus_bytes, "big")
            for m, r in zip(self.proof.plaintexts, self.proof.randomness, strict=True)
        )
        head = struct.pack("<III", self.round, len(self.proof.plaintexts), modulus_bytes)
        return DECRYPTION_MAGIC + head + self.combined_digest + body

    @classmethod
    def from_bytes(cls, data: bytes) -> Decryption:
        """Parse :meth:`to_bytes` strictly (:class:`HEError` if malformed)."""
        head = len(DECRYPTION_MAGIC) + 12 + 32
        if len(data) < head or bytes(data[: len(DECRYPTION_MAGIC)]) != DECRYPTION_MAGIC:
            raise HEError("not a fedchain HE decryption (bad magic)")
        round_, count, width = struct.unpack_from("<III", data, len(DECRYPTION_MAGIC))
        digest = bytes(data[head - 32 : head])
        if width == 0 or len(data) != head + count * 2 * width:
            raise HEError("HE decryption length does not match its header")
        ms, rs = [], []
        for i in range(count):
            at = head + i * 2 * width
            ms.append(int.from_bytes(data[at : at + width], "big"))
            rs.append(int.from_bytes(data[at + width : at + 2 * width], "big"))
        return cls(round_, digest, he.DecryptionProof(tuple(ms), tuple(rs)))


def _modulus_bytes(public_key: paillier.PaillierPublicKey) -> int:
    return (int(public_key.n).bit_length() + 7) // 8


def decrypt_round(
    round_: int,
    combined: bytes,
    private_key: paillier.PaillierPrivateKey,
    num_clients: int,
    summands_at_least: int,
) -> bytes:
    """The key holder's :class:`Decryption` bytes of ``combined`` (refusing a combination of
    fewer than ``summands_at_least`` updates: it would reveal individual updates)."""
    spec = packing(num_clients)
    _, summands = he.payload_shape(combined, private_key.public_key, spec)
    if summands < summands_at_least:
        raise HEError(
            f"round {round_}: the combination sums {summands} updates, fewer than the "
            f"threshold {summands_at_least}: the key holder does not decrypt it"
        )
    _, proof = he.decrypt_sum(combined, private_key, spec)
    digest = hashlib.sha256(combined).digest()
    return Decryption(round_, digest, proof).to_bytes(_modulus_bytes(private_key.public_key))


def verified_sum(
    round_: int,
    combined: bytes,
    decryption: bytes,
    public_key: paillier.PaillierPublicKey,
    num_clients: int,
) -> NDArray[np.int64]:
    """The sum the key holder's decryption opens ``combined`` to, reduced to Z_2^32, or
    :class:`HEError` if the decryption is malformed, for another round or combination, or
    does not verify."""
    dec = Decryption.from_bytes(decryption)
    if dec.round != round_:
        raise HEError(f"the decryption is for round {dec.round}, not {round_}")
    if dec.combined_digest != hashlib.sha256(combined).digest():
        raise HEError("the decryption is of another combination than the included updates'")
    total = he.decrypted_total(combined, public_key, packing(num_clients), dec.proof)
    if total is None:
        raise HEError(f"round {round_}: the key holder's decryption does not verify")
    return ring_reduce(total)


def _share_context(task: str, round_: int, slot: int) -> bytes:
    return f"fedchain-he-decryption|{task.lower()}|{round_}|{slot}".encode()


def _share_widths(key: threshold_paillier.ThresholdKey) -> tuple[int, int]:
    w2 = (key.nsquare.bit_length() + 7) // 8
    return w2, w2 + 64  # value, response (|n²| + |l!| + 256 bits < |n²| + 64 bytes)


def threshold_shares(
    round_: int,
    combined: bytes,
    key: threshold_paillier.ThresholdKey,
    share: threshold_paillier.KeyShare,
    num_clients: int,
    task: str,
    summands_at_least: int,
) -> bytes:
    """Committee member ``share.index``'s decryption shares of every ciphertext of
    ``combined`` (each with its proof), as a record: magic, round, member, count, the
    combination's SHA-256, then per ciphertext value ‖ challenge (16) ‖ response. Refuses a
    combination of fewer than ``summands_at_least`` updates."""
    pk = paillier.PaillierPublicKey(key.n)
    spec = packing(num_clients)
    _, summands = he.payload_shape(combined, pk, spec)
    if summands < summands_at_least:
        raise HEError(
            f"round {round_}: the combination sums {summands} updates, fewer than the "
            f"threshold {summands_at_least}: no decryption share"
        )
    cts = he.ciphertexts(combined, pk, spec)
    w_value, w_response = _share_widths(key)
    body = b""
    for slot, c in enumerate(cts):
        ds = threshold_paillier.decryption_share(key, share, c, _share_context(task, round_, slot))
        body += (
            ds.value.to_bytes(w_value, "big")
            + ds.challenge.to_bytes(16, "big")
            + ds.response.to_bytes(w_response, "big")
        )
    head = struct.pack("<III", round_, share.index, len(cts))
    return SHARES_MAGIC + head + hashlib.sha256(combined).digest() + body


def _parse_shares(
    data: bytes, key: threshold_paillier.ThresholdKey, round_: int, digest: bytes, count: int
) -> list[threshold_paillier.DecryptionShare]:
    head = len(SHARES_MAGIC) + 12 + 32
    if len(data) < head or bytes(data[: len(SHARES_MAGIC)]) != SHARES_MAGIC:
        raise HEError("not a fedchain HE decryption-share record (bad magic)")
    rnd, member, got = struct.unpack_from("<III", data, len(SHARES_MAGIC))
    if rnd != round_ or got != count or bytes(data[head - 32 : head]) != digest:
        raise HEError("decryption shares of another round or combination")
    w_value, w_response = _share_widths(key)
    step = w_value + 16 + w_response
    if len(data) != head + count * step:
        raise HEError("decryption-share record length does not match its header")
    out = []
    for i in range(count):
        at = head + i * step
        value = int.from_bytes(data[at : at + w_value], "big")
        challenge = int.from_bytes(data[at + w_value : at + w_value + 16], "big")
        response = int.from_bytes(data[at + w_value + 16 : at + step], "big")
        out.append(threshold_paillier.DecryptionShare(member, value, challenge, response))
    return out


def threshold_sum(
    round_: int,
    combined: bytes,
    records: Sequence[tuple[int, bytes]],
    key: threshold_paillier.ThresholdKey,
    num_clients: int,
    task: str,
) -> tuple[NDArray[np.int64], tuple[int, ...]]:
    """The sum ``combined`` decrypts to from the committee's share records
    (``(member index, record)``; a record must come from the member it names), reduced to
    Z_2^32, and the members whose record or shares were bad. :class:`HEError` when some
    ciphertext has fewer than ``t`` valid shares: no single party, and no ``t − 1``, can
    decrypt. Pure: the first ``t`` valid shares by member index are combined."""
    pk = paillier.PaillierPublicKey(key.n)
    spec = packing(num_clients)
    dim, summands = he.payload_shape(combined, pk, spec)
    cts = he.ciphertexts(combined, pk, spec)
    digest = hashlib.sha256(combined).digest()
    per_member: dict[int, list[threshold_paillier.DecryptionShare]] = {}
    bad: set[int] = set()
    for member, data in records:
        if member in per_member:
            continue
        try:
            shares = _parse_shares(data, key, round_, digest, len(cts))
        except HEError:
            bad.add(member)
            continue
        if any(s.index != member for s in shares):
            bad.add(member)
            continue
        per_member[member] = shares
    plaintexts = []
    for slot, c in enumerate(cts):
        given = [shares[slot] for _, shares in sorted(per_member.items())]
        plain, wrong = threshold_paillier.combine_shares(
            key, c, given, _share_context(task, round_, slot)
        )
        bad.update(wrong)
        plaintexts.append(plain)
    total = he._unpack(plaintexts, dim, summands, spec, spec.slots(pk))
    return ring_reduce(total), tuple(sorted(bad))
