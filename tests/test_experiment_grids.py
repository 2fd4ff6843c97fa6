"""The quick grid of every builtin experiment, run for real: structure and monotone facts.

Each grid writes the documented run directory (experiment.json, cells.csv, summary.md,
figures/*.png, cells/<cell-id>/seed-<s>/result.json), and its numbers must show what has
to hold whatever the seed: FedAvg collapses under strong sign flipping and IPM (eps = 10)
while Median and Krum do not; DLG recovers a digit from one client's update far better
than from the sum of K updates (secure aggregation) or from a locally private update;
accuracy without privacy is at least that under local DP at epsilon 0.5; more clients
(more data) do not lower accuracy; gas per round grows with the number of clients.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from fedchain.experiments.builtin import IPM_LARGE, builtin
from fedchain.experiments.execute import run_experiment
from fedchain.experiments.stats import describe
from protocol.metrics import Progress

pytestmark = pytest.mark.slow


def _run(name: str, tmp_path: Path) -> tuple[list[dict], Path]:
    spec = builtin(name, quick=True)
    out = tmp_path / name
    result = run_experiment(spec, out, progress=Progress(quiet=True), quick=True)
    assert result.status == "finished"
    _check_layout(out, spec, result.rows)
    return result.rows, out


def _check_layout(out: Path, spec, rows: list[dict]) -> None:
    meta = json.loads((out / "experiment.json").read_text())
    assert meta["status"] == "finished"
    assert meta["name"] == spec.name
    assert meta["grid"]["axes"] == {k: list(v) for k, v in spec.axes.items()}
    assert meta["seeds"] == list(spec.seeds)
    assert meta["started"] and meta["finished"]
    assert meta["fedchain"]["version"]
    units = len(spec.cells()) * len(spec.seeds)
    assert meta["units_total"] == meta["units_done"] == units == len(rows)
    with (out / "cells.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == units
    for column in ("cell_id", "seed", *spec.axes, spec.metric):
        assert column in table[0]
    for cell in spec.cells():
        for seed in spec.seeds:
            assert (out / "cells" / cell.id / f"seed-{seed}" / "result.json").is_file()
    figures = sorted((out / "figures").glob("*.png"))
    assert figures and all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in figures)
    summary = (out / "summary.md").read_text()
    assert "## Key findings" in summary and "95 % CI" in summary
    for f in figures:
        assert f"figures/{f.name}" in summary


def _mean(rows: list[dict], metric: str, **where) -> float:
    chosen = [r for r in rows if all(r[k] == v for k, v in where.items())]
    assert chosen, where
    return describe(r[metric] for r in chosen).mean


def test_robustness_quick(tmp_path):
    rows, out = _run("robustness", tmp_path)
    for attack in ("sign_flip(scale=4.0)", IPM_LARGE):
        fedavg = _mean(rows, "final_accuracy", attack=attack, rule="fedavg")
        for robust in ("median", "krum"):
            assert fedavg < _mean(rows, "final_accuracy", attack=attack, rule=robust) - 0.3
    # each fedchain cell is a complete run directory
    unit = out / rows[0]["unit_dir"]
    summary = json.loads((unit / "summary.json").read_text())
    assert summary["all_rounds_finalized"] and (unit / "rounds.jsonl").is_file()
    assert rows[0]["accuracy_per_round"] == summary["accuracy_per_round"]


def test_privacy_quick(tmp_path):
    rows, out = _run("privacy", tmp_path)
    spec = builtin("privacy", quick=True)
    (mode,) = spec.axes["privacy"]
    free = _mean(rows, "final_accuracy", privacy=mode, target_epsilon=math.inf)
    weak = _mean(rows, "final_accuracy", privacy=mode, target_epsilon=8.0)
    strong = _mean(rows, "final_accuracy", privacy=mode, target_epsilon=0.5)
    assert free >= strong and free > 0.4  # no noise learns; local DP at 0.5 costs accuracy
    assert free >= weak
    for r in rows:  # each run spent what it was given: epsilon = inf ran without privacy
        summary = json.loads((out / r["unit_dir"] / "summary.json").read_text())
        if math.isinf(r["target_epsilon"]):
            assert summary["privacy"]["mode"] == "none"
        else:
            assert summary["privacy"]["mode"] == "ldp"
            assert summary["privacy"]["epsilon_spent"] <= r["target_epsilon"] + 1e-9
    assert (out / "figures" / "01-lines-target_epsilon-privacy.png").stat().st_size > 10_000


def test_recovery_quick(tmp_path):
    rows, out = _run("recovery", tmp_path)
    for metric in ("psnr", "ssim"):
        plain = _mean(rows, metric, defence="none")
        summed = _mean(rows, metric, defence="secagg(k=10)")
        assert plain > summed
        assert plain > _mean(rows, metric, defence="ldp(epsilon=1.0)")
    assert all(r["update_norm"] > 0 for r in rows)
    assert _mean(rows, "psnr", defence="none") > 40  # a near-exact digit
    assert _mean(rows, "label_accuracy", defence="none") == 1.0  # iDLG's sign rule
    assert (out / "figures" / "01-images-defence.png").stat().st_size > 10_000


def test_clients_quick(tmp_path):
    rows, _ = _run("clients", tmp_path)
    assert _mean(rows, "final_accuracy", clients=16) >= _mean(rows, "final_accuracy", clients=4)
    assert _mean(rows, "gas_per_round", clients=16) > _mean(rows, "gas_per_round", clients=4)
    assert all(r["seconds_per_round"] > 0 for r in rows)


def test_models_quick(tmp_path):
    rows, _ = _run("models", tmp_path)
    central = [r for r in rows if r["kind"] == "centralized"]
    federated = [r for r in rows if r["kind"] == "fedchain"]
    assert len(central) == len(federated) == 2
    for r in central:
        assert len(r["accuracy_per_epoch"]) == r["rounds"] * r["epochs"]
        assert r["final_accuracy"] > 0.8
    for r in federated:
        assert len(r["accuracy_per_round"]) == r["rounds"]
