"""Packed Paillier: exact sums, determinism across processes, malformed input, proofs."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from functools import lru_cache

import numpy as np
import pytest

from privacy import he
from protocol.errors import HEError

SPEC = he.PackingSpec(value_bound=2**18, max_summands=16)


@lru_cache(maxsize=1)
def _keys() -> tuple:  # 1024-bit for test speed; the benchmark and default use 2048
    return he.generate_keypair(1024)


def _updates(k: int, dim: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-(2**18), 2**18 + 1, size=dim) for _ in range(k)]


def test_packed_sum_is_exact_and_the_decryption_verifies() -> None:
    pk, sk = _keys()
    xs = _updates(16, 100)  # max summands: slots filled to the top
    xs[0][:] = 2**18
    xs[1][:5] = -(2**18)
    combined = he.combine([he.encrypt_update(x, pk, SPEC) for x in xs], pk, SPEC)
    total, proof = he.decrypt_sum(combined, sk, SPEC)
    assert np.array_equal(total, np.sum(xs, axis=0))
    assert he.verify_decryption(combined, pk, SPEC, total, proof)
    wrong = total.copy()
    wrong[3] += 1
    assert not he.verify_decryption(combined, pk, SPEC, wrong, proof)
    forged = he.DecryptionProof((proof.plaintexts[0] + 1, *proof.plaintexts[1:]), proof.randomness)
    assert not he.verify_decryption(combined, pk, SPEC, total, forged)


def test_combining_is_deterministic_across_processes() -> None:
    pk, _ = _keys()
    payloads = [he.encrypt_update(x, pk, SPEC) for x in _updates(3, 50)]
    here = hashlib.sha256(he.combine(payloads, pk, SPEC)).hexdigest()
    code = (
        "import sys, hashlib\n"
        "from privacy import he\n"
        "data = sys.stdin.buffer.read()\n"
        "key = he.load_public_key(data[:data.index(b'|||')])\n"
        "parts = data[data.index(b'|||') + 3:].split(b'###')\n"
        f"spec = he.PackingSpec({SPEC.value_bound}, {SPEC.max_summands})\n"
        "print(hashlib.sha256(he.combine(parts, key, spec)).hexdigest())\n"
    )
    blob = he.public_key_bytes(pk) + b"|||" + b"###".join(payloads)
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True)
    assert out.stdout.decode().strip() == here


def test_malformed_ciphertexts_and_keys_are_refused() -> None:
    pk, _ = _keys()
    good = he.encrypt_update(_updates(1, 10)[0], pk, SPEC)
    width = (int(pk.nsquare).bit_length() + 7) // 8
    head = len(he.MAGIC) + he._HEADER.size
    cases = {
        "bad magic": b"XXXXX" + good[5:],
        "truncated": good[:-1],
        "trailing": good + b"\0",
        "zero": good[:head] + bytes(width),
        "too big": good[:head] + (int(pk.nsquare) + 1).to_bytes(width + 1, "big")[-width:],
        "shares n": good[:head] + int(pk.n).to_bytes(width, "big"),
    }
    for name, data in cases.items():
        with pytest.raises(HEError):
            he.combine([data], pk, SPEC)
        assert name
    with pytest.raises(HEError):
        he.combine([good] * (SPEC.max_summands + 1), pk, SPEC)
    with pytest.raises(HEError):
        he.load_public_key(he.public_key_bytes(pk)[:-1])
    with pytest.raises(Exception, match="packing bound"):
        he.encrypt_update(np.array([2**18 + 1]), pk, SPEC)
