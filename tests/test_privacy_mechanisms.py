"""DP mechanisms against their specifications (seeded KS / moment tests) and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privacy import mechanisms as m
from protocol.errors import ConfigError

N = 20_000


def test_laplace_matches_its_distribution() -> None:
    b = m.laplace_scale(2.0, 0.5)
    assert b == pytest.approx(4.0)
    x = m.laplace_noise(N, b, np.random.default_rng(1))
    assert stats.kstest(x, "laplace", args=(0, b)).pvalue > 0.01
    assert np.var(x) == pytest.approx(2 * b * b, rel=0.05)


def test_gaussian_matches_its_distribution() -> None:
    x = m.gaussian_noise(N, 3.0, np.random.default_rng(2))
    assert stats.kstest(x, "norm", args=(0, 3.0)).pvalue > 0.01


def test_ks_detects_a_wrong_scale() -> None:
    """The distribution tests can fail: a sample of the wrong scale is rejected."""
    x = m.gaussian_noise(N, 3.3, np.random.default_rng(2))
    assert stats.kstest(x, "norm", args=(0, 3.0)).pvalue < 0.01


def test_classic_gaussian_formula_and_refusal_above_one() -> None:
    sigma = m.classic_gaussian_sigma(1.0, 0.5, 1e-5)
    assert sigma == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    with pytest.raises(ConfigError, match="epsilon < 1"):
        m.classic_gaussian_sigma(1.0, 1.0, 1e-5)


def _balle_wang_delta(sigma: float, eps: float, sens: float = 1.0) -> float:
    """Balle & Wang 2018, Theorem 8: the exact delta of the Gaussian mechanism."""
    a, b = sens / (2 * sigma), eps * sigma / sens
    return float(stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b))


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0, 10.0])
def test_analytic_gaussian_solves_the_exact_condition(eps: float) -> None:
    sigma = m.analytic_gaussian_sigma(2.0, eps, 1e-5)
    assert _balle_wang_delta(sigma, eps, 2.0) == pytest.approx(1e-5, rel=1e-3)
    assert _balle_wang_delta(sigma * 0.99, eps, 2.0) > 1e-5  # the smallest such sigma


def test_analytic_gaussian_published_value_and_gain_over_classic() -> None:
    # Balle & Wang 2018: eps = 1, delta = 1e-5, unit sensitivity -> sigma ~ 3.73 (classic 4.84)
    assert m.analytic_gaussian_sigma(1.0, 1.0, 1e-5) == pytest.approx(3.7306, abs=1e-3)
    assert m.analytic_gaussian_sigma(1.0, 0.5, 1e-5) < m.classic_gaussian_sigma(1.0, 0.5, 1e-5)


def test_clipping_bounds_the_norm_and_keeps_small_vectors() -> None:
    v = np.array([3.0, 4.0])
    clipped, norm = m.clip_l2(v, 1.0)
    assert norm == 5.0 and np.linalg.norm(clipped) == pytest.approx(1.0)
    same, _ = m.clip_l2(v, 10.0)
    assert np.array_equal(same, v)
    l1, n1 = m.clip_l1(v, 1.0)
    assert n1 == 7.0 and np.abs(l1).sum() == pytest.approx(1.0)


def test_exponential_mechanism_frequencies_match_its_probabilities() -> None:
    utilities = np.array([0.0, 1.0, 2.0, 5.0])
    probs = m.exponential_mechanism_probabilities(utilities, 1.0, 1.0)
    expected = np.exp(utilities / 2) / np.exp(utilities / 2).sum()
    assert np.allclose(probs, expected)
    rng = np.random.default_rng(3)
    draws = [m.exponential_mechanism(utilities, 1.0, 1.0, rng) for _ in range(N)]
    counts = np.bincount(draws, minlength=4)
    assert stats.chisquare(counts, probs * N).pvalue > 0.01


def test_skellam_is_integer_with_its_moments_and_closed_under_sums() -> None:
    rng = np.random.default_rng(4)
    x = m.skellam_noise(N, 50.0, rng)
    assert x.dtype == np.int64
    assert np.mean(x) == pytest.approx(0.0, abs=0.2) and np.var(x) == pytest.approx(50.0, rel=0.05)
    summed = sum(m.skellam_noise(N, 10.0, rng) for _ in range(5))
    # the sum of five Skellam(10) shares is Skellam(50): compare with the scipy pmf
    values, counts = np.unique(summed, return_counts=True)
    pmf = stats.skellam.pmf(values, 25.0, 25.0)
    keep = pmf * N > 5
    assert (
        stats.chisquare(counts[keep], pmf[keep] / pmf[keep].sum() * counts[keep].sum()).pvalue
        > 0.01
    )


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: m.laplace_scale(1.0, 0.0), "epsilon 0.0: must be a finite number > 0"),
        (lambda: m.laplace_scale(1.0, -1.0), "epsilon"),
        (lambda: m.analytic_gaussian_sigma(1.0, 1.0, 0.0), "delta 0.0: must lie strictly"),
        (lambda: m.analytic_gaussian_sigma(1.0, 1.0, 1.0), "delta 1.0"),
        (lambda: m.clip_l2([1.0], 0.0), "clip_norm 0.0"),
        (lambda: m.clip_l2([1.0], -2.0), "clip_norm -2.0"),
        (lambda: m.gaussian_noise(3, float("nan"), np.random.default_rng()), "sigma"),
        (lambda: m.skellam_noise(3, 0.0, np.random.default_rng()), "variance"),
    ],
)
def test_invalid_parameters_are_refused_with_a_clear_error(call: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        call()  # type: ignore[operator]
