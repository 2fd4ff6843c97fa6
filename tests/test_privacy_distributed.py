"""Distributed DP core: the integer map's sensitivity, the noise shares under dropouts, the
ring check, decoding back to model units, the spec and the deterministic clip update."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from privacy.adaptive_clip import next_clip_norm_from_count, truth_probability
from privacy.distributed import (
    RING_LIMIT,
    DdpParams,
    check_ring,
    decode_mean,
    effective_scale,
    encode_client,
    survivor_threshold,
)
from privacy.spec import PrivacySpec
from protocol.errors import ConfigError


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=3000),
    st.floats(min_value=1e-6, max_value=1e6),
    st.integers(min_value=0, max_value=2**31),
)
def test_the_rounded_update_never_exceeds_the_scale(dim: int, magnitude: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    update = rng.standard_cauchy(dim) * magnitude  # heavy tails, any norm
    params = DdpParams(256, 1e-9, 0.3, 10)  # (almost) no noise: the rounding alone
    if math.sqrt(dim) / 2 >= 256:
        with pytest.raises(ConfigError, match="must exceed sqrt"):
            encode_client(update, 1.0, params, rng)
        return
    vector, _ = encode_client(update, 1.0, params, rng)
    assert float(np.linalg.norm(vector)) <= 256


def test_the_survivors_noise_has_the_accounted_variance() -> None:
    params = DdpParams(1 << 10, 1.5, 0.3, 10)  # t = 7
    assert params.threshold == 7
    rng = np.random.default_rng(5)
    zero = np.zeros(20_000)
    shares = [encode_client(zero, 1.0, params, rng)[0] for _ in range(10)]
    survivors = np.sum(shares[:7], axis=0)  # the least noise any unmaskable round carries
    everybody = np.sum(shares, axis=0)
    mu = params.variance
    assert mu == pytest.approx((1.5 * 2 * 1024) ** 2)
    assert np.var(survivors) == pytest.approx(mu, rel=0.03)
    assert np.var(everybody) == pytest.approx(mu * 10 / 7, rel=0.03)
    assert abs(np.mean(survivors)) < 5 * math.sqrt(mu / 20_000)
    assert stats.normaltest(survivors).pvalue > 1e-4  # Skellam of large variance ~ Gaussian


@pytest.mark.parametrize(
    ("k", "rho", "t"), [(10, 0.3, 7), (10, 0.0, 10), (3, 0.99, 1), (100, 0.3, 70), (7, 0.5, 4)]
)
def test_survivor_threshold(k: int, rho: float, t: int) -> None:
    assert survivor_threshold(k, rho) == t


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((1, 1.0, 0.3, 10), "ddp_scale 1"),
        ((True, 1.0, 0.3, 10), "ddp_scale True"),
        ((256, 0.0, 0.3, 10), "noise_multiplier 0.0"),
        ((256, 1.0, 1.0, 10), "dropout_fraction 1.0"),
        ((256, 1.0, -0.1, 10), "dropout_fraction -0.1"),
        ((256, 1.0, 0.3, 0), "num_clients 0"),
    ],
)
def test_invalid_parameters_are_refused(args: tuple, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DdpParams(*args)


def test_the_ring_check_refuses_sums_that_could_wrap() -> None:
    ok = DdpParams(1 << 16, 2.0, 0.3, 1000)
    worst = check_ring(ok, 10_000)
    assert 1000 * 2**16 < worst < RING_LIMIT
    with pytest.raises(ConfigError, match="wrap around the 32-bit ring"):
        check_ring(DdpParams(1 << 21, 2.0, 0.3, 1000), 10_000)
    with pytest.raises(ConfigError, match="wrap around"):  # the noise alone can do it
        check_ring(DdpParams(1 << 16, 3000.0, 0.3, 10), 10)


def test_decode_mean_recovers_the_clipped_mean() -> None:
    rng = np.random.default_rng(3)
    params = DdpParams(1 << 16, 1e-9, 0.3, 5)
    updates = [rng.normal(0, 0.1, 400) for _ in range(5)]
    total = sum(encode_client(u, 2.0, params, rng)[0] for u in updates)
    mean = decode_mean(total, 5, 2.0, params.scale, 16, 4 << 16)
    clipped = [u * min(1.0, 2.0 / np.linalg.norm(u)) for u in updates]
    resolution = 2.0 / effective_scale(params.scale, 400) * math.sqrt(5) / 5  # rounding
    assert np.abs(mean / 2**16 - np.mean(clipped, axis=0)).max() < resolution + 2**-16
    saturated = decode_mean(np.full(4, 2**40), 1, 1.0, 1 << 10, 16, 100)
    assert (saturated == 100).all()


def test_the_ddp_spec_round_trips_and_charges_the_clip_bit() -> None:
    spec, _ = PrivacySpec(
        mode="ddp+secagg", mechanism="skellam", target_epsilon=4.0, num_clients=20
    ).resolve(5)
    again = PrivacySpec.from_manifest(spec.to_manifest())
    assert again == spec
    assert spec.sensitivity == 2 * spec.ddp_scale and spec.threshold == 14
    assert spec.accountant().epsilon(5) <= 4.0 < spec.accountant().epsilon(6)
    assert "RDP" in spec.accountant().name
    bits, _ = PrivacySpec(
        mode="ddp+secagg",
        mechanism="skellam",
        target_epsilon=4.0,
        num_clients=20,
        adaptive_clip=True,
        clip_bit_epsilon=0.2,
    ).resolve(5)
    assert bits.noise_multiplier > spec.noise_multiplier  # the bits cost budget: more noise
    assert bits.accountant().epsilon(5) <= 4.0


def test_the_next_clip_norm_is_exact_and_the_same_in_another_process() -> None:
    value = next_clip_norm_from_count(0.7, 13, 20, 1.0, 0.5, 0.2)
    p = truth_probability(1.0)
    frac = (13 / 20 - (1 - p)) / (2 * p - 1)
    assert value == pytest.approx(0.7 * math.exp(-0.2 * (frac - 0.5)), rel=1e-15)
    code = (
        "from privacy.adaptive_clip import next_clip_norm_from_count as f; "
        "print(f(0.7, 13, 20, 1.0, 0.5, 0.2).hex())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == value.hex()
    # an out-of-range count (a client that masked something other than a bit) is clamped
    assert next_clip_norm_from_count(1.0, 10**9, 20, 1.0) == next_clip_norm_from_count(
        1.0, 20, 20, 1.0
    )
    assert next_clip_norm_from_count(1.0, -5, 20, 1.0) == next_clip_norm_from_count(1.0, 0, 20, 1.0)
