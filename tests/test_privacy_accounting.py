"""The accountant (dp-accounting) against reference settings; calibration and budgets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special, stats

from privacy.accounting import (
    Accountant,
    RoundRelease,
    SkellamRelease,
    calibrate_noise_multiplier,
    require_budget,
)
from privacy.spec import PrivacySpec, parse_mode
from protocol.errors import ConfigError, PrivacyBudgetError


def _gdp_delta(mu: float, eps: float) -> float:
    """Dong, Roth & Su 2019: delta(eps) of mu-GDP (T Gaussian rounds of multiplier z: mu =
    sqrt(T)/z)."""
    return float(
        stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
    )


@pytest.mark.parametrize(("z", "rounds"), [(1.0, 1), (1.3, 5), (4.0, 50)])
def test_gaussian_composition_matches_gaussian_dp(z: float, rounds: int) -> None:
    eps = Accountant(RoundRelease("gaussian", z), 1e-5).epsilon(rounds)
    assert _gdp_delta(math.sqrt(rounds) / z, eps) == pytest.approx(1e-5, rel=1e-3)


def _kov_delta(eps0: float, k: int, i: int) -> float:
    """Kairouz, Oh & Viswanath 2015, Thm 3.3: the optimal delta of k-fold eps0-DP at
    eps = (k - 2i) eps0."""
    total = sum(
        special.comb(k, ell) * (math.exp((k - ell) * eps0) - math.exp((k - 2 * i + ell) * eps0))
        for ell in range(i)
    )
    return total / (1 + math.exp(eps0)) ** k


def test_pure_dp_bit_composition_matches_optimal_composition() -> None:
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    eps0, k = 0.5, 10
    bit = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(eps0, 0.0), 1e-4)
    composed = bit.self_compose(k)
    for i in (1, 2, 3):
        eps = (k - 2 * i) * eps0
        assert composed.get_delta_for_epsilon(eps) == pytest.approx(
            _kov_delta(eps0, k, i), rel=1e-2
        )


def test_laplace_single_release_is_its_pure_epsilon() -> None:
    assert Accountant(RoundRelease("laplace", 0.5), 1e-9).epsilon(1) == pytest.approx(2.0, abs=2e-3)
    acc = Accountant(RoundRelease("laplace", 1.0), 1e-5)
    eps = acc.epsilons(10)
    assert all(a <= b for a, b in itertools.pairwise(eps))
    assert eps[-1] < 10.0  # tighter than basic composition


def test_sampling_amplifies_only_when_hidden() -> None:
    public = Accountant(RoundRelease("gaussian", 1.0, sample_rate=0.1), 1e-5).epsilon(10)
    hidden = Accountant(RoundRelease("gaussian", 1.0, 0.1, sampling_hidden=True), 1e-5).epsilon(10)
    full = Accountant(RoundRelease("gaussian", 1.0), 1e-5).epsilon(10)
    assert public == full and hidden < full / 3


def test_skellam_approaches_the_gaussian_for_large_variance() -> None:
    scale = 1000.0  # a big variance makes the discretisation surcharge vanish
    sk = SkellamRelease(l1_sensitivity=scale * 10, l2_sensitivity=scale, variance=(2 * scale) ** 2)
    skellam = Accountant(RoundRelease("skellam", 2.0, skellam=sk), 1e-5).epsilon(5)
    gaussian = Accountant(RoundRelease("gaussian", 2.0), 1e-5).epsilon(5)
    assert gaussian < skellam < gaussian * 1.25


def test_calibration_meets_the_target_from_the_safe_side() -> None:
    for mech in ("gaussian", "laplace"):
        z = calibrate_noise_multiplier(mech, 4.0, 1e-5, 5)
        eps = Accountant(RoundRelease(mech, z), 1e-5).epsilon(5)
        assert 3.98 <= eps <= 4.0
    with pytest.raises(PrivacyBudgetError, match="spend epsilon"):
        require_budget(RoundRelease("gaussian", 0.5), 1e-5, 5, 4.0)


def test_spec_refuses_overspending_or_stops_at_the_budget() -> None:
    spec = PrivacySpec(mode="ldp", target_epsilon=4.0, noise_multiplier=2.0)
    acc = spec.accountant()
    fits = max(t for t in range(1, 11) if acc.epsilon(t) <= 4.0)
    assert 1 <= fits < 10
    with pytest.raises(PrivacyBudgetError, match=f"affords {fits} round"):
        spec.resolve(10)
    stop = PrivacySpec(mode="ldp", target_epsilon=4.0, noise_multiplier=2.0, budget_policy="stop")
    resolved, rounds = stop.resolve(10)
    assert rounds == fits and resolved.accountant().epsilon(rounds + 1) > 4.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target_epsilon": 0.0}, "target_epsilon 0.0"),
        ({"target_epsilon": -1.0}, "target_epsilon -1.0"),
        ({"target_epsilon": 1.0, "target_delta": 0.0}, "target_delta 0.0"),
        ({"target_epsilon": 1.0, "target_delta": 1.5}, "target_delta 1.5"),
        ({"target_epsilon": 1.0, "clip_norm": 0.0}, "clip_norm 0.0"),
        ({"target_epsilon": 1.0, "mechanism": "cauchy"}, "dp_mechanism 'cauchy'"),
        ({}, "give a target"),
    ],
)
def test_spec_refuses_invalid_parameters(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        PrivacySpec(mode="ldp", **kwargs).validate()  # type: ignore[arg-type]


def test_modes_parse_canonically_and_refuse_nonsense() -> None:
    assert parse_mode("secagg+ddp") == "ddp+secagg"
    assert parse_mode("none") == "none"
    for bad, match in [("ddp", "secure aggregation"), ("ldp+he", "local DP"), ("tee", "unknown")]:
        with pytest.raises(ConfigError, match=match):
            parse_mode(bad)
    with pytest.raises(ConfigError, match="dp_mechanism 'gaussian'"):
        PrivacySpec(mode="ddp+secagg", target_epsilon=1.0, num_clients=5).validate()
    with pytest.raises(ConfigError, match="at least 2 clients"):
        PrivacySpec(mode="ddp+secagg", mechanism="skellam", target_epsilon=1.0).validate()


def test_manifest_round_trip() -> None:
    spec, _ = PrivacySpec(mode="ldp", target_epsilon=2.0).resolve(3)
    again = PrivacySpec.from_manifest(spec.to_manifest())
    assert again.noise_multiplier == spec.noise_multiplier and again.mode == "ldp"
    assert np.isclose(again.accountant().epsilon(3), spec.accountant().epsilon(3))
