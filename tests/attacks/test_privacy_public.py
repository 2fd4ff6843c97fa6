"""Issue 21: what a private task makes public anyway (numSamples on-chain in every mode), and
the mode that buckets or hides it under secure aggregation."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.contract import TaskContract
from fedchain.sim.runner import Demo, DemoConfig
from privacy.spec import PrivacySpec
from protocol.errors import ConfigError


def test_sample_counts_bucket_and_hide() -> None:
    exact = PrivacySpec(mode="secagg", num_clients=4)
    bucket = PrivacySpec(mode="secagg", num_clients=4, sample_counts="bucket")
    hidden = PrivacySpec(mode="secagg", num_clients=4, sample_counts="hidden")
    assert [exact.registered_samples(n) for n in (1, 5, 300)] == [1, 5, 300]
    assert [bucket.registered_samples(n) for n in (1, 5, 300, 512)] == [1, 8, 512, 512]
    assert {hidden.registered_samples(n) for n in (1, 5, 300)} == {1}
    assert "sample_counts" not in exact.to_manifest()["aggregation"]  # hashes unchanged
    again = PrivacySpec.from_manifest(hidden.to_manifest())
    assert again.sample_counts == "hidden"
    with pytest.raises(ConfigError, match="only a sum mode"):
        PrivacySpec(mode="ldp", target_epsilon=1.0, sample_counts="hidden").validate()
    with pytest.raises(ConfigError, match="sample_counts 'some'"):
        PrivacySpec(mode="secagg", num_clients=4, sample_counts="some").validate()


@pytest.mark.slow
def test_secure_aggregation_can_hide_the_sample_counts(tmp_path: Path) -> None:
    """numSamples public: each client's local dataset size is on-chain in every mode."""
    cfg = DemoConfig(
        clients=4,
        aggregators=4,
        rounds=1,
        epochs=1,
        out=str(tmp_path),
        challenge_window=2,
        privacy="secagg",
        sample_counts="hidden",
    )
    demo = Demo(cfg)
    summary = demo.run().summary
    assert summary["rounds_finalized"] == 1
    dep = demo.deployment
    task = TaskContract.at(dep.chain, dep.task.address)
    assert [u.num_samples for u in task.updates(1)] == [1, 1, 1, 1]
