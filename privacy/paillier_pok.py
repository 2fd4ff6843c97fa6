"""Non-interactive proof of plaintext knowledge for Paillier ciphertexts (pure functions).

A client proves, with each ciphertext ``c = g^m · rⁿ mod n²`` (``g = 1 + n``), that it knows
``(m, r)``: the Σ-protocol for n-th residues shifted by ``g^m`` (Damgård & Jurik 2001,
Baudron et al. 2001), made non-interactive by Fiat–Shamir. With random ``a ∈ Z_n`` and
``s ∈ Z*_n`` it publishes

    A = g^a · sⁿ  (mod n²),   e = H(context, n, c, A)  (128 bits),
    z₁ = a + e·m  (mod n),    z₂ = s · r^e  (mod n),

and anyone checks ``g^{z₁} · z₂ⁿ ≡ A · c^e (mod n²)`` (``g^{kn} ≡ 1 mod n²``, so reducing
``z₁`` mod ``n`` is exact). Two accepting transcripts with different challenges extract
``(m, r)`` (special soundness), so a client that cannot decrypt cannot prove a ciphertext
derived from someone else's — e.g. the mauled ``Enc(B + c·(m − B)) = cᶜ · g^{B(1−c)}`` of a
victim's ciphertext, which would otherwise put ``c + 1`` copies of the victim's update into
the decrypted sum. ``context`` binds a proof to its task, round, client and slot, so a copied
proof does not verify for another client, round or position. The transcript is statistically
zero-knowledge (``z₁`` is uniform mod ``n``; ``z₂`` uniform in ``Z*_n``).
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import gmpy2

from protocol.errors import HEError

__all__ = ["CHALLENGE_BITS", "PlaintextProof", "proof_bytes", "proof_context", "prove", "verify"]

CHALLENGE_BITS = 128
_DOMAIN = b"fedchain-paillier-pok-v1"


@dataclass(frozen=True)
class PlaintextProof:
    """``(A, z₁, z₂)`` of one ciphertext (see the module docstring)."""

    commitment: int
    z1: int
    z2: int

    def to_bytes(self, n: int) -> bytes:
        """Fixed width: ``A`` in ``|n²|`` bytes, ``z₁`` and ``z₂`` in ``|n|`` bytes each."""
        wn, wn2 = _widths(n)
        return (
            self.commitment.to_bytes(wn2, "big")
            + self.z1.to_bytes(wn, "big")
            + self.z2.to_bytes(wn, "big")
        )

    @classmethod
    def from_bytes(cls, data: bytes, n: int) -> PlaintextProof:
        wn, wn2 = _widths(n)
        if len(data) != wn2 + 2 * wn:
            raise HEError(f"a plaintext proof is {wn2 + 2 * wn} bytes, got {len(data)}")
        return cls(
            int.from_bytes(data[:wn2], "big"),
            int.from_bytes(data[wn2 : wn2 + wn], "big"),
            int.from_bytes(data[wn2 + wn :], "big"),
        )


def proof_bytes(n: int) -> int:
    """Bytes of one serialised proof under modulus ``n``."""
    wn, wn2 = _widths(n)
    return wn2 + 2 * wn


def _widths(n: int) -> tuple[int, int]:
    return (n.bit_length() + 7) // 8, ((n * n).bit_length() + 7) // 8


def proof_context(task: str, round_: int, client: int, slot: int) -> bytes:
    """What a proof is bound to: the task address, round, client index and ciphertext slot."""
    return b"|".join(
        [
            _DOMAIN,
            task.lower().encode(),
            str(round_).encode(),
            str(client).encode(),
            str(slot).encode(),
        ]
    )


def _challenge(context: bytes, n: int, c: int, commitment: int) -> int:
    h = hashlib.sha256()
    for part in (context, n.to_bytes(_widths(n)[0], "big"), c.to_bytes(_widths(n)[1], "big")):
        h.update(len(part).to_bytes(4, "big") + part)
    h.update(commitment.to_bytes(_widths(n)[1], "big"))
    return int.from_bytes(h.digest(), "big") >> (256 - CHALLENGE_BITS)


def prove(
    n: int,
    c: int,
    m: int,
    r: int,
    context: bytes,
    random_below: Callable[[int], int] = secrets.randbelow,
) -> PlaintextProof:
    """A proof that ``c = (1 + n)^m · rⁿ mod n²`` for the prover's ``(m, r)``."""
    nsq = n * n
    a = random_below(n)
    while True:
        s = random_below(n)
        if s > 0 and math.gcd(s, n) == 1:
            break
    commitment = (1 + a * n) * int(gmpy2.powmod(s, n, nsq)) % nsq
    e = _challenge(context, n, c, commitment)
    return PlaintextProof(commitment, (a + e * m) % n, s * int(gmpy2.powmod(r, e, n)) % n)


def verify(n: int, c: int, proof: PlaintextProof, context: bytes) -> bool:
    """Whether ``proof`` shows knowledge of ``c``'s plaintext and randomness in ``context``."""
    nsq = n * n
    A, z1, z2 = proof.commitment, proof.z1, proof.z2
    if not (0 < A < nsq and 0 <= z1 < n and 0 < z2 < n) or math.gcd(A, n) != 1:
        return False
    if math.gcd(z2, n) != 1:
        return False
    e = _challenge(context, n, c, A)
    left = (1 + z1 * n) * int(gmpy2.powmod(z2, n, nsq)) % nsq
    return left == A * int(gmpy2.powmod(c, e, nsq)) % nsq
