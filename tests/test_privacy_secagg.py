"""Secure aggregation core: exact sums under dropouts, failures, attribution, privacy."""

from __future__ import annotations

import hashlib
import itertools
import random
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from privacy import secagg as sa
from privacy import shamir
from protocol.errors import SecAggError, SecAggShareError, SecAggThresholdError

TASK = "0x00000000000000000000000000000000000000aa"
ROUND = 3


def _random(seed: int):  # deterministic key material for tests (a client uses os.urandom)
    rng = random.Random(seed)
    return rng.randbytes


class Federation:
    """K clients with keys and dealt mask-key shares; runs one masked round."""

    def __init__(self, k: int, t: int, dim: int = 40, seed: int = 0) -> None:
        self.rb = _random(seed)
        self.k, self.t, self.dim = k, t, dim
        self.keys = [sa.generate_keys(i, self.rb) for i in range(k)]
        self.bundles = {c.index: c.bundle for c in self.keys}
        peers = list(self.bundles.values())
        self.mask_keys = {
            c.index: sa.deal_shares(c.mask_secret, sa.MASK_KEY, c, peers, t, TASK, 1, self.rb)
            for c in self.keys
        }
        gen = np.random.default_rng(seed)
        self.x = {i: gen.integers(-(2**18), 2**18, size=dim).astype(np.int32) for i in range(k)}

    def submit(
        self, included: list[int]
    ) -> tuple[dict[int, np.ndarray], dict[int, sa.DealtShares]]:
        peers = list(self.bundles.values())
        masked, selfs = {}, {}
        for i in included:
            b = sa.new_self_mask(self.rb)
            selfs[i] = sa.deal_shares(
                b, sa.SELF_MASK, self.keys[i], peers, self.t, TASK, ROUND, self.rb
            )
            masked[i] = sa.mask_update(self.x[i], self.keys[i], peers, b, TASK, ROUND)
        return masked, selfs

    def reveal(
        self, included: list[int], selfs: dict[int, sa.DealtShares], who: list[int]
    ) -> list[sa.Reveal]:
        return [
            sa.make_reveal(self.keys[i], ROUND, included, selfs, self.mask_keys, self.bundles, TASK)
            for i in who
        ]

    def expected(self, included: list[int]) -> np.ndarray:
        return sum(self.x[i].astype(np.int64) for i in included)


def test_field_prime_is_prime() -> None:
    import sympy

    assert sympy.isprime(shamir.FIELD_PRIME)


def test_exact_sum_for_every_dropout_pattern_up_to_the_threshold() -> None:
    fed = Federation(k=6, t=3)
    patterns = 0
    for r in range(0, fed.k - fed.t + 1):
        for dropped in itertools.combinations(range(fed.k), r):
            included = [i for i in range(fed.k) if i not in dropped]
            masked, selfs = fed.submit(included)
            result = sa.unmask_sum(
                ROUND,
                TASK,
                fed.bundles,
                masked,
                selfs,
                fed.mask_keys,
                fed.reveal(included, selfs, included),
            )
            assert np.array_equal(result.total, fed.expected(included)) and not result.bad_shares
            patterns += 1
    assert patterns == sum(1 for r in range(4) for _ in itertools.combinations(range(6), r))


def test_beyond_the_threshold_is_a_typed_failure_not_a_wrong_sum() -> None:
    fed = Federation(k=5, t=3)
    included = [0, 1]  # three dropped: two survivors cannot reach t = 3
    masked, selfs = fed.submit(included)
    with pytest.raises(SecAggThresholdError) as info:
        sa.unmask_sum(
            ROUND,
            TASK,
            fed.bundles,
            masked,
            selfs,
            fed.mask_keys,
            fed.reveal(included, selfs, included),
        )
    assert set(info.value.missing) == {0, 1, 2, 3, 4} and max(info.value.missing.values()) == 2


def test_a_masked_update_alone_is_uniform() -> None:
    fed = Federation(k=4, t=2, dim=20_000, seed=5)
    fed.x[0] = np.zeros(fed.dim, dtype=np.int32)  # the most structured input there is
    masked, _ = fed.submit([0])
    words = masked[0].astype(np.float64) / 2**32
    assert stats.kstest(words, "uniform").pvalue > 0.01
    low_bytes = np.bincount((masked[0] & 0xFF).astype(np.int64), minlength=256)
    assert stats.chisquare(low_bytes).pvalue > 0.01
    # the test can fail: the unmasked input is not uniform
    assert stats.kstest(fed.x[1].astype(np.float64) / 2**32 + 0.5, "uniform").pvalue < 0.01


def test_no_single_party_unmasks_a_client_that_did_not_drop() -> None:
    """Everything public plus all of client 1's secrets (its keys, every share it holds)
    does not remove client 0's masks: what is left is still uniform, not x_0."""
    fed = Federation(k=4, t=2, dim=20_000, seed=6)
    included = [0, 1, 2, 3]
    masked, selfs = fed.submit(included)
    spy = fed.keys[1]
    guess = masked[0].copy()
    # the spy knows its own pairwise mask with 0 and its own share of b_0 (one < t)
    seed = sa.pairwise_seed(spy.mask_secret, fed.bundles[0].mask_pk, TASK, ROUND, 0, 1)
    guess -= sa.expand_mask(seed, fed.dim)
    share = sa.open_share(selfs[0], spy, fed.bundles[0], TASK)
    assert share is not None  # one share reveals nothing of b_0 (threshold 2)
    residual = (guess.view(np.int32).astype(np.int64) - fed.x[0]).astype(np.uint32)
    assert stats.kstest(residual.astype(np.float64) / 2**32, "uniform").pvalue > 0.01


def test_a_tampered_share_is_detected_attributed_and_skipped() -> None:
    fed = Federation(k=5, t=3)
    included = [0, 1, 2, 3, 4]
    masked, selfs = fed.submit(included)
    reveals = fed.reveal(included, selfs, included)
    liar = reveals[2]
    forged = dict(liar.self_mask_shares)
    forged[0] = (forged[0] + 1) % shamir.FIELD_PRIME
    reveals[2] = replace(liar, self_mask_shares=forged)
    result = sa.unmask_sum(ROUND, TASK, fed.bundles, masked, selfs, fed.mask_keys, reveals)
    assert np.array_equal(result.total, fed.expected(included))
    assert result.bad_shares == ((2, 0),)  # revealer 2, dealer 0


def test_missing_shares_name_the_client_that_cannot_be_unmasked() -> None:
    fed = Federation(k=5, t=4)
    included = [0, 1, 2, 3, 4]
    masked, selfs = fed.submit(included)
    reveals = fed.reveal(included, selfs, [0, 1, 2])  # two survivors stay silent
    with pytest.raises(SecAggThresholdError) as info:
        sa.unmask_sum(ROUND, TASK, fed.bundles, masked, selfs, fed.mask_keys, reveals)
    assert info.value.missing == {i: 3 for i in included}


def test_a_dealer_with_inconsistent_shares_is_attributed() -> None:
    fed = Federation(k=5, t=3)
    included = [0, 1, 2, 3, 4]
    masked, selfs = fed.submit(included)
    other = sa.deal_shares(
        sa.new_self_mask(fed.rb),
        sa.SELF_MASK,
        fed.keys[4],
        list(fed.bundles.values()),
        3,
        TASK,
        ROUND,
        fed.rb,
    )
    selfs[4] = replace(other, secret_commitment=selfs[4].secret_commitment)  # shares of another b
    with pytest.raises(SecAggShareError) as info:
        sa.unmask_sum(
            ROUND,
            TASK,
            fed.bundles,
            masked,
            selfs,
            fed.mask_keys,
            fed.reveal(included, selfs, included),
        )
    assert (info.value.culprit, info.value.role) == (4, "dealer")


def test_a_client_never_reveals_both_secrets_of_one_peer() -> None:
    fed = Federation(k=5, t=3)
    included = [0, 2, 4]
    _, selfs = fed.submit(included)
    rev = fed.reveal(included, selfs, [0])[0]
    assert set(rev.self_mask_shares) == {0, 2, 4} and set(rev.mask_key_shares) == {1, 3}


def test_reusing_a_mask_key_after_a_survived_round_exposes_that_round() -> None:
    """Why mask keys rotate (docs/privacy.md): client 0 survives round 3 (its self mask is
    revealed), then drops in a later round that reuses its key, whose shares are revealed.
    All public material then unmasks its round-3 update exactly."""
    fed = Federation(k=4, t=2)
    included = [0, 1, 2, 3]
    masked, selfs = fed.submit(included)
    reveals = fed.reveal(included, selfs, included)
    b0 = shamir.combine([(r.revealer + 1, r.self_mask_shares[0]) for r in reveals[:2]])
    later = fed.reveal([1, 2, 3], {}, [1, 2])  # round 4: client 0 dropped, same key in force
    key0 = shamir.combine([(r.revealer + 1, r.mask_key_shares[0]) for r in later])
    exposed = masked[0] - sa.expand_mask(b0.to_bytes(32, "big"), fed.dim)
    for v in (1, 2, 3):
        exposed -= sa.expand_mask(
            sa.pairwise_seed(key0, fed.bundles[v].mask_pk, TASK, ROUND, 0, v), fed.dim
        )
    assert np.array_equal(exposed.view(np.int32), fed.x[0])


def test_unmasking_is_byte_identical_across_processes() -> None:
    code = f"""
import hashlib, sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent.parent)!r})
from tests.test_privacy_secagg import Federation, ROUND, TASK
from privacy import secagg as sa
fed = Federation(k=5, t=3, seed=9)
inc = [0, 2, 3, 4]
masked, selfs = fed.submit(inc)
reveals = fed.reveal(inc, selfs, inc)
res = sa.unmask_sum(ROUND, TASK, fed.bundles, masked, selfs, fed.mask_keys, reveals)
print(hashlib.sha256(res.to_bytes()).hexdigest())
"""
    fed = Federation(k=5, t=3, seed=9)
    inc = [0, 2, 3, 4]
    masked, selfs = fed.submit(inc)
    here = sa.unmask_sum(
        ROUND, TASK, fed.bundles, masked, selfs, fed.mask_keys, fed.reveal(inc, selfs, inc)
    )
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert there.stdout.strip() == hashlib.sha256(here.to_bytes()).hexdigest()


def test_refusals() -> None:
    fed = Federation(k=3, t=2)
    with pytest.raises(SecAggError, match="no included"):
        sa.unmask_sum(ROUND, TASK, fed.bundles, {}, {}, fed.mask_keys, [])
    with pytest.raises(Exception, match="threshold"):
        sa.deal_shares(1, sa.SELF_MASK, fed.keys[0], list(fed.bundles.values()), 4, TASK, 1, fed.rb)
