"""Issue 20, item 1: a client's self-reported weight (numSamples) can neither make an honest
aggregator raise nor exceed the task's maxSamples, for every plaintext rule (the contract
refuses it at registration; execution excludes it if a chain ever carries one)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from aggregators.execution import INT64_MAX, execute_round, weight_bound
from aggregators.registry import available_rules
from protocol.manifest import DEFAULT_MAX_SAMPLES, TaskManifest
from tests.test_execution import make_round, manifest

_RULES = sorted(available_rules())
#: parameters the rules require (f Byzantine clients among the 7 valid updates)
_PARAMS = {"krum": {"f": 1}, "multikrum": {"f": 1}, "bulyan": {"f": 1}}


@pytest.mark.parametrize("rule", _RULES)
def test_inflated_weights_are_excluded_not_raised(rule: str) -> None:
    """Weight overflow: numSamples = 2**63 made every rule raise OverflowError (round stalled)."""
    _, _, samples, gp, payloads = make_round(k=9)
    weights = [2**63, 2**40, *samples.tolist()[2:]]
    m = manifest(rule, _PARAMS.get(rule))
    result = execute_round(m, 1, gp, payloads, weights)  # must not raise
    assert set(result.excluded) == {0, 1}
    assert "numSamples" in result.excluded[0] and "numSamples" in result.excluded[1]
    again = execute_round(m, 1, gp, payloads, weights)
    assert again.digest == result.digest  # deterministic: every honest node agrees
    honest = execute_round(m, 1, gp, payloads[2:], samples.tolist()[2:])
    assert honest.included == tuple(range(7))
    assert honest.payload == result.payload  # the bad records cost themselves, nothing else


def test_max_samples_in_manifest_is_bound_and_applied() -> None:
    """Weight inflation: a client claiming 2**40 samples is the FedAvg aggregate unless bounded."""
    _, _, samples, gp, payloads = make_round(k=5)
    base = manifest("fedavg")
    assert "max_samples" not in base.to_json()  # default: the manifest hash is unchanged
    tight: TaskManifest = replace(base, max_samples=1_000)
    assert tight.to_json()["max_samples"] == 1_000 and tight.digest != base.digest
    assert TaskManifest.from_bytes(tight.to_bytes()) == tight
    weights = [1_001, *samples.tolist()[1:]]
    result = execute_round(tight, 1, gp, payloads, weights)
    assert result.excluded == {0: "invalid: numSamples 1001 outside [1, 1000]"}
    # zero and negative weights are excluded too
    result = execute_round(base, 1, gp, payloads, [0, -5, *samples.tolist()[2:]])
    assert set(result.excluded) == {0, 1}


def test_weight_bound_keeps_the_sum_in_int64() -> None:
    """Weight-sum overflow: many maximal weights would overflow the int64 sum of weights."""
    m = replace(manifest(), max_samples=2**62)
    assert weight_bound(m, 4) == INT64_MAX // 4
    assert weight_bound(m, 4) * 4 <= INT64_MAX
    assert weight_bound(manifest(), 10) == DEFAULT_MAX_SAMPLES
