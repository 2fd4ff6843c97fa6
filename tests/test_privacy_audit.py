"""The one-run audit: its empirical epsilon stays below the accountant's; a broken
mechanism is caught."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from privacy.audit import (
    audit_distributed_mechanism,
    audit_local_mechanism,
    epsilon_lower_bound,
    p_value,
)
from privacy.spec import PrivacySpec


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
@pytest.mark.parametrize("target", [1.0, 4.0])
@pytest.mark.parametrize("rounds", [1, 3])
def test_empirical_epsilon_is_below_the_accountants(
    mechanism: str, target: float, rounds: int
) -> None:
    spec, _ = PrivacySpec(mode="ldp", mechanism=mechanism, target_epsilon=target).resolve(rounds)
    result = audit_local_mechanism(spec, 1000, rounds, np.random.default_rng(7))
    assert result.epsilon_lower_bound <= spec.accountant().epsilon(rounds)
    assert result.epsilon_lower_bound > 0  # the audit sees something: it is not vacuous


def test_an_under_noised_mechanism_is_caught() -> None:
    spec, _ = PrivacySpec(mode="ldp", target_epsilon=1.0).resolve(1)
    broken = replace(spec, noise_multiplier=spec.noise_multiplier / 10)  # claims epsilon 1
    result = audit_local_mechanism(broken, 1000, 1, np.random.default_rng(7))
    assert result.epsilon_lower_bound > spec.accountant().epsilon(1) * 2


@pytest.mark.parametrize("target", [1.0, 4.0, 8.0])
def test_distributed_dp_empirical_epsilon_is_below_the_accountants(target: float) -> None:
    spec, _ = PrivacySpec(
        mode="ddp+secagg", mechanism="skellam", target_epsilon=target, num_clients=10
    ).resolve(1)
    result = audit_distributed_mechanism(spec, 1000, 1, np.random.default_rng(11))
    assert 0 < result.epsilon_lower_bound <= spec.accountant().epsilon(1)


def test_an_under_noised_distributed_mechanism_is_caught() -> None:
    spec, _ = PrivacySpec(
        mode="ddp+secagg", mechanism="skellam", target_epsilon=1.0, num_clients=10
    ).resolve(1)
    broken = replace(spec, noise_multiplier=(spec.noise_multiplier or 1.0) / 10)
    result = audit_distributed_mechanism(broken, 1000, 1, np.random.default_rng(11))
    assert result.epsilon_lower_bound > spec.accountant().epsilon(1) * 2


def test_bound_behaves() -> None:
    assert epsilon_lower_bound(1000, 100, 50, 1e-5) == 0.0  # chance level refutes nothing
    assert epsilon_lower_bound(1000, 100, 100, 0.0) > epsilon_lower_bound(1000, 100, 90, 0.0)
    assert p_value(100, 10, 10, 0.0, 0.0) == pytest.approx(0.5**10)
