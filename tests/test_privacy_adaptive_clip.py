"""Adaptive clipping core: the bit's distribution, unbiasedness, and convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privacy.accounting import Accountant, RoundRelease
from privacy.adaptive_clip import clip_bit, debiased_fraction, next_clip_norm, truth_probability


def test_the_bit_is_randomised_response_with_the_stated_epsilon() -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    truthful = sum(clip_bit(0.5, 1.0, 1.0, rng) for _ in range(n))
    p = truth_probability(1.0)
    assert stats.binomtest(truthful, n, p).pvalue > 0.01
    assert math.log(p / (1 - p)) == pytest.approx(1.0)  # exactly eps-DP
    # and the accountant charges a 1.0-DP bit per round on top of the Gaussian
    with_bit = Accountant(RoundRelease("gaussian", 2.0, bit_epsilon=1.0), 1e-5).epsilon(3)
    without = Accountant(RoundRelease("gaussian", 2.0), 1e-5).epsilon(3)
    assert with_bit > without


def test_debiasing_recovers_the_true_fraction() -> None:
    rng = np.random.default_rng(1)
    norms = rng.exponential(1.0, size=20_000)
    bits = [clip_bit(float(x), 1.0, 2.0, rng) for x in norms]
    assert debiased_fraction(bits, 2.0) == pytest.approx(float(np.mean(norms <= 1.0)), abs=0.02)


def test_the_clip_norm_converges_to_the_target_quantile() -> None:
    rng = np.random.default_rng(2)
    clip = 10.0
    for _ in range(300):
        norms = rng.lognormal(0.0, 0.5, size=200)
        bits = [clip_bit(float(x), clip, 1.0, rng) for x in norms]
        clip = next_clip_norm(clip, bits, 1.0, target_quantile=0.5, learning_rate=0.2)
    assert clip == pytest.approx(1.0, rel=0.25)  # the median of lognormal(0, 0.5)
