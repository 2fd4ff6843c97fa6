"""Threshold Paillier (privacy/threshold_paillier.py): t of l committee members decrypt,
fewer cannot, a wrong decryption share is caught by its proof, combination is pure."""

from __future__ import annotations

import random
from functools import lru_cache
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from phe import paillier

from privacy import he
from privacy import threshold_paillier as tp
from protocol.errors import ConfigError, HEError

T, L = 3, 5


@lru_cache(maxsize=1)
def committee() -> tuple[tp.ThresholdKey, list[tp.KeyShare]]:
    rng = random.Random(21)
    p = tp.generate_safe_prime(160, rng.randrange)
    q = tp.generate_safe_prime(160, rng.randrange)
    return tp.deal(p, q, T, L, rng.randrange)


def encrypt(key: tp.ThresholdKey, m: int, r: int) -> int:
    return int(paillier.PaillierPublicKey(key.n).raw_encrypt(m, r_value=r))


CTX = b"task|round 1|ciphertext 0"


@settings(max_examples=15, deadline=None)
@given(
    st.integers(0, 2**300), st.integers(2, 2**300), st.sampled_from(list(combinations(range(L), T)))
)
def test_any_t_members_decrypt_exactly(m: int, r: int, members: tuple[int, ...]) -> None:
    key, shares = committee()
    m %= key.n
    c = encrypt(key, m, r % (key.n - 2) + 2)
    ds = [tp.decryption_share(key, shares[i], c, CTX) for i in members]
    assert all(tp.verify_share(key, c, s, CTX) for s in ds)
    assert tp.combine_shares(key, c, ds, CTX) == (m, ())


def test_fewer_than_t_shares_cannot_decrypt() -> None:
    key, shares = committee()
    c = encrypt(key, 12345, 777)
    ds = [tp.decryption_share(key, shares[i], c, CTX) for i in range(T - 1)]
    with pytest.raises(HEError, match="fewer than the threshold 3"):
        tp.combine_shares(key, c, ds, CTX)


def test_a_wrong_share_is_caught_and_skipped() -> None:
    key, shares = committee()
    c = encrypt(key, 424242, 99)
    ds = [tp.decryption_share(key, s, c, CTX) for s in shares]
    forged = tp.KeyShare(2, shares[1].secret + 1)  # member 2 uses a wrong exponent
    bad = tp.decryption_share(key, forged, c, CTX)
    tampered = tp.DecryptionShare(3, ds[2].value * 4 % key.nsquare, ds[2].challenge, ds[2].response)
    mix = [ds[0], bad, tampered, ds[3], ds[4]]
    assert not tp.verify_share(key, c, bad, CTX) and not tp.verify_share(key, c, tampered, CTX)
    assert tp.combine_shares(key, c, mix, CTX) == (424242, (2, 3))
    # a share proven for another ciphertext position does not verify here
    assert not tp.verify_share(key, c, ds[0], b"task|round 1|ciphertext 1")
    with pytest.raises(HEError):
        tp.combine_shares(key, c, [ds[0], bad, tampered], CTX)


def test_combination_is_deterministic_across_share_sets() -> None:
    key, shares = committee()
    c = encrypt(key, 5, 3)
    a = [tp.decryption_share(key, s, c, CTX) for s in shares]
    b = [tp.decryption_share(key, s, c, CTX) for s in reversed(shares)]  # fresh proofs
    assert tp.combine_shares(key, c, a, CTX) == tp.combine_shares(key, c, b, CTX) == (5, ())


def test_a_packed_he_sum_decrypts_only_with_t_of_l_members() -> None:
    key, shares = committee()
    pk = paillier.PaillierPublicKey(key.n)
    spec = he.PackingSpec(1 << 31, 4)
    rng = np.random.default_rng(0)
    xs = [rng.integers(-(2**31), 2**31, 9) for _ in range(3)]
    combined = he.combine([he.encrypt_update(x, pk, spec) for x in xs], pk, spec)
    cts = he.ciphertexts(combined, pk, spec)
    plains = []
    for j, c in enumerate(cts):
        ctx = f"task|1|{j}".encode()
        ds = [tp.decryption_share(key, shares[i], c, ctx) for i in (4, 0, 2)]
        plains.append(tp.combine_shares(key, c, ds, ctx)[0])
        with pytest.raises(HEError):
            tp.combine_shares(key, c, ds[:2], ctx)
    total = he._unpack(plains, 9, 3, spec, spec.slots(pk))
    assert np.array_equal(total, sum(x.astype(np.int64) for x in xs))


def test_dealer_refusals() -> None:
    key, _ = committee()
    with pytest.raises(ConfigError):
        tp.deal(23, 23, 2, 3)
    with pytest.raises(ConfigError):
        tp.deal(23, 47, 4, 3)
    with pytest.raises(ConfigError):
        tp.deal(29, 47, 2, 3)  # 29 is not a safe prime
    assert key.n.bit_length() >= 319
