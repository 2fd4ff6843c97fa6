"""Issue 23: data recovery against the update a client really sends, and its baseline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedchain.experiments.inversion_real import run_recovery_real
from protocol.errors import ConfigError


def test_one_image_one_step_is_recovered_far_beyond_the_class_mean_prior(
    tmp_path: Path,
) -> None:
    """Cosine + TV inversion (Adam) of one image after one SGD step: far above the prior."""
    out = run_recovery_real(
        {"samples": 1, "epochs": 1, "batch_size": 1, "iterations": 150, "restarts": 1},
        0,
        tmp_path,
    )
    assert out["label_accuracy"] == 1.0
    assert out["psnr"] > out["prior_psnr"] + 10
    assert out["matching_loss"] < 1e-3
    saved = np.load(tmp_path / "reconstruction.npz")
    assert saved["reconstruction"].shape == saved["original"].shape == (1, 1, 8, 8)


def test_realistic_update_reports_matching_loss_and_prior(tmp_path: Path) -> None:
    """16 images, 10 epochs of batch 16 from a later round: the cell reports the final
    matching loss and the class-mean prior next to the attack's PSNR."""
    out = run_recovery_real(
        {"samples": 16, "epochs": 10, "round": 3, "iterations": 20, "restarts": 1},
        1,
        tmp_path,
    )
    assert out["local_steps"] == 10
    assert 0.0 <= out["matching_loss"] <= 2.0
    assert 5.0 < out["prior_psnr"] < 30.0
    assert out["psnr_over_prior"] == pytest.approx(out["psnr"] - out["prior_psnr"])


def test_recovery_real_cells_are_checked() -> None:
    """A bad key or model is refused with the key named."""
    from fedchain.experiments.inversion_real import check_params

    def label(k: str, v: object) -> str:
        return f"[grid] {k} = {v!r}"

    with pytest.raises(ConfigError, match="colour"):
        check_params({"colour": 1}, label)
    with pytest.raises(ConfigError, match="model"):
        check_params({"model": "cnn"}, label)
    with pytest.raises(ConfigError, match="epochs"):
        check_params({"epochs": 0}, label)


def test_recovery_real_quick_grid_runs_as_an_experiment(tmp_path: Path) -> None:
    """The recovery-real builtin runs through the experiment machinery (rows, summary)."""
    from fedchain.experiments.builtin import builtin
    from fedchain.experiments.execute import run_experiment
    from protocol.metrics import Progress

    spec = builtin("recovery-real", quick=True)
    result = run_experiment(spec, tmp_path / "rr", progress=Progress(quiet=True), quick=True)
    assert result.status == "finished"
    assert {r["epochs"] for r in result.rows} == {1, 10}
    assert all("prior_psnr" in r and "matching_loss" in r for r in result.rows)
    assert (tmp_path / "rr" / "summary.md").is_file()
