"""The proof of plaintext knowledge for Paillier ciphertexts (privacy/paillier_pok.py)."""

from __future__ import annotations

import random

import gmpy2
from hypothesis import given, settings
from hypothesis import strategies as st

from privacy import paillier_pok as pok


def _prime(seed: int, bits: int) -> int:
    return int(gmpy2.next_prime(random.Random(seed).getrandbits(bits) | (1 << (bits - 1))))


P, Q = _prime(1, 256), _prime(2, 256)
N = P * Q
NSQ = N * N


def enc(m: int, r: int) -> int:
    return (1 + m * N) * pow(r, N, NSQ) % NSQ


ms = st.integers(0, N - 1)
# r of order 2 (r**2 = 1 mod N, e.g. N - 1) would make Enc(0; r)'s proof verify under any
# challenge of the same parity: a degenerate nonce an honest prover draws with probability
# 4/N (hypothesis found it: m = 0, r = N - 1 verified under another context)
rs = st.integers(2, N - 1).filter(lambda r: r % P and r % Q and pow(r, 2, N) != 1)


@settings(max_examples=40, deadline=None)
@given(ms, rs, st.integers(0, 2**32), st.integers(0, 99))
def test_an_honest_proof_verifies_only_in_its_context(m: int, r: int, rnd: int, slot: int) -> None:
    c = enc(m, r)
    ctx = pok.proof_context("0xAbC", rnd, 3, slot)
    proof = pok.prove(N, c, m, r, ctx)
    assert pok.verify(N, c, proof, ctx)
    assert pok.verify(N, c, proof, pok.proof_context("0xabc", rnd, 3, slot))  # case-blind
    for other in (
        pok.proof_context("0xabd", rnd, 3, slot),
        pok.proof_context("0xabc", rnd + 1, 3, slot),
        pok.proof_context("0xabc", rnd, 4, slot),
        pok.proof_context("0xabc", rnd, 3, slot + 1),
    ):
        assert not pok.verify(N, c, proof, other)
    assert pok.PlaintextProof.from_bytes(proof.to_bytes(N), N) == proof


@settings(max_examples=40, deadline=None)
@given(ms, rs, st.integers(2, 1000), st.integers(0, N - 1))
def test_a_mauled_ciphertext_cannot_be_proven_without_its_plaintext(
    m: int, r: int, k: int, offset: int
) -> None:
    c = enc(m, r)
    mauled = pow(c, k, NSQ) * (1 + offset * N) % NSQ  # Enc(k·m + offset) under r^k
    ctx = pok.proof_context("0xabc", 1, 7, 0)
    victim = pok.prove(N, c, m, r, ctx)
    assert not pok.verify(N, mauled, victim, ctx)  # the victim's proof does not carry over
    # a proof with a guessed plaintext (the attacker knows neither m nor r)
    guess = pok.prove(N, mauled, offset, r, ctx)
    assert not pok.verify(N, mauled, guess, ctx)
    # knowing the victim's opening is what proving takes (the extractor's witness)
    honest = pok.prove(N, mauled, (k * m + offset) % N, pow(r, k, N), ctx)
    assert pok.verify(N, mauled, honest, ctx)


@settings(max_examples=30, deadline=None)
@given(ms, rs, st.integers(0, 2))
def test_a_tampered_proof_is_refused(m: int, r: int, which: int) -> None:
    c = enc(m, r)
    ctx = pok.proof_context("0xabc", 1, 0, 0)
    p = pok.prove(N, c, m, r, ctx)
    parts = [p.commitment, p.z1, p.z2]
    parts[which] = (parts[which] + 1) % (NSQ if which == 0 else N)
    assert not pok.verify(N, c, pok.PlaintextProof(*parts), ctx)
    assert not pok.verify(N, c, pok.PlaintextProof(0, p.z1, p.z2), ctx)
