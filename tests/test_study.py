"""Issue 23: Fashion-MNIST's validation split, the study's statistics, and per-round
selections in rounds.jsonl (a real run on the embedded chain)."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from clients.data import (
    FASHION_MNIST_DIR,
    VALIDATION_SIZE,
    load_dataset,
    stratified_subset,
)
from fedchain.config import DemoConfig
from fedchain.experiments.cells import curve_metrics
from fedchain.experiments.study import setting_label, worst_case_table
from fedchain.sim.runner import Demo
from fedchain.sim.scenario import ClientBehaviour, Scenario
from protocol.errors import FedchainError
from protocol.metrics import Progress


def _write_idx(path: Path, arr: np.ndarray, code: int) -> None:
    header = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    path.write_bytes(gzip.compress(header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()))


@pytest.fixture()
def fake_fashion(tmp_path: Path) -> Path:
    """Fashion-MNIST-shaped IDX files: 12,000 training and 50 test images."""
    rng = np.random.default_rng(0)
    n = VALIDATION_SIZE + 2000
    _write_idx(
        tmp_path / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 4, 4), np.uint8), 8
    )
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8), 8)
    _write_idx(
        tmp_path / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (50, 4, 4), np.uint8), 8
    )
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", (np.arange(50) % 10).astype(np.uint8), 8)
    return tmp_path


def _keys(ds) -> set[bytes]:
    return {row.tobytes() + bytes([int(y)]) for row, y in zip(ds.x, ds.y, strict=True)}


def test_validation_split_is_held_out_stratified_and_fixed(fake_fashion: Path) -> None:
    """The validation images are never training images, every class keeps its share, the
    split does not depend on the run's seed, and fashion/fashion-val train on the same set."""
    train, val = load_dataset("fashion-val", path=str(fake_fashion), seed=0)
    train2, test = load_dataset("fashion", path=str(fake_fashion), seed=5)
    _, val5 = load_dataset("fashion-val", path=str(fake_fashion), seed=5)
    assert len(val) == VALIDATION_SIZE and len(train) == 2000 and len(test) == 50
    assert np.array_equal(train.x, train2.x) and np.array_equal(val.x, val5.x)
    assert not _keys(train) & _keys(val)
    assert np.bincount(val.y, minlength=10).tolist() == [VALIDATION_SIZE // 10] * 10


def test_train_samples_subset_is_stratified_and_seed_free() -> None:
    """train_samples keeps each class's share, drawn with the fixed data seed."""
    y = np.arange(1000) % 10
    a = stratified_subset(y, 200, 1)
    assert np.array_equal(a, stratified_subset(y, 200, 1)) and len(a) == 200
    assert np.bincount(y[a]).tolist() == [20] * 10
    assert len(stratified_subset(y, 5000, 1)) == 1000


@pytest.mark.skipif(not Path(FASHION_MNIST_DIR).is_dir(), reason="make data not run")
def test_real_fashion_mnist_from_the_debian_package() -> None:
    """make data's files: 50,000 training, 10,000 validation and 10,000 test images."""
    train, val = load_dataset("fashion-val")
    _, test = load_dataset("fashion")
    assert (len(train), len(val), len(test)) == (50_000, 10_000, 10_000)
    assert train.input_shape == (1, 28, 28)


def test_curve_metrics_and_the_worst_case_over_attacks() -> None:
    """Last-5 mean, minimum after warm-up; the headline names the worst attack."""
    m = curve_metrics([0.1, 0.2, 0.3, 0.9, 0.5, 0.6, 0.7, 0.8])
    assert m["last5_accuracy"] == pytest.approx((0.9 + 0.5 + 0.6 + 0.7 + 0.8) / 5)
    assert m["min_after_warmup"] == 0.5
    rows = [
        {"partition": "iid", "rule": "median", "attack": a, "last5_accuracy": v}
        for a, vals in {"none": [0.8, 0.82], "alie": [0.5, 0.6], "sign_flip": [0.7, 0.7]}.items()
        for v in vals
    ]
    (row,) = worst_case_table(rows)
    assert row["worst_attack"] == "alie" and row["worst_mean"] == pytest.approx(0.55)
    assert row["worst_n"] == 2 and row["clean"] == pytest.approx(0.81)
    assert row["worst_ci95"] > 0


def test_the_worst_case_keeps_dirichlet_alphas_apart() -> None:
    """A grid over several alphas (robustness-fmnist-alpha) gets one row per alpha and
    rule, IID first and the mildest heterogeneity next; a mixed group would hide that
    alpha 0.3's worst case is far below alpha 1's."""
    rows = [
        {"partition": p, "alpha": a, "rule": "median", "attack": at, "last5_accuracy": v}
        for p, a, at, v in [
            ("dirichlet", 0.3, "alie", 0.3),
            ("dirichlet", 0.3, "none", 0.6),
            ("dirichlet", 1.0, "alie", 0.6),
            ("dirichlet", 1.0, "none", 0.7),
            ("iid", 0.1, "alie", 0.65),
        ]
    ]
    table = worst_case_table(rows)
    assert [r["setting"] for r in table] == ["iid", "dirichlet alpha=1", "dirichlet alpha=0.3"]
    assert [r["worst_mean"] for r in table] == [0.65, 0.6, 0.3]
    assert [r["partition"] for r in table] == ["iid", "dirichlet", "dirichlet"]
    assert setting_label({"partition": "dirichlet"}) == "dirichlet"
    told = {"partition": "iid", "byzantine": 0.2, "assumed_byzantine": 0.3}
    assert setting_label(told, ("byzantine", "assumed_byzantine")) == (
        "iid byzantine=0.2 assumed_byzantine=0.3"
    )
    assert setting_label({"partition": "iid"}, ("assumed_byzantine",)) == "iid assumed_byzantine=-"
    by_f = worst_case_table([{**rows[-1], "byzantine": f} for f in (0.1, 0.2)], keys=["byzantine"])
    assert [r["setting"] for r in by_f] == ["iid byzantine=0.1", "iid byzantine=0.2"]


def test_study_table_reads_a_grid_directory(tmp_path: Path) -> None:
    """scripts/study_table.py on a hand-made robustness-fmnist-alpha directory: one row per
    (alpha, rule), the worst attack named; --metric best_accuracy takes each unit's best
    round; a directory that is not a grid is refused with a message."""
    import subprocess
    import sys

    from fedchain.experiments.builtin import builtin

    root = tmp_path / "robustness-fmnist-alpha"
    spec = builtin("robustness-fmnist-alpha")
    picked = [
        c
        for c in spec.cells()
        if c.axes["rule"] == "median" and c.axes["attack"] in ("none", "alie", "min_max")
    ]
    assert len(picked) == 6  # 2 alphas x 3 attacks
    for cell in picked:
        for seed in (0, 1):
            curve = [0.2, 0.9 if cell.axes["attack"] == "alie" else 0.6, 0.5]
            row = {**cell.params, "cell_id": cell.id, "seed": seed, "accuracy_per_round": curve}
            row["last5_accuracy"] = (0.3 if cell.axes["attack"] == "alie" else 0.5) + seed / 10
            if seed == 0:  # one seed of this metric: an undefined interval
                row["min_after_warmup"] = 0.2
            unit = root / "cells" / cell.id / f"seed-{seed}"
            unit.mkdir(parents=True)
            (unit / "result.json").write_text(json.dumps(row))
    table_script = Path(__file__).resolve().parents[1] / "scripts" / "study_table.py"
    script = [sys.executable, str(table_script), str(root), "--json"]
    out = json.loads(subprocess.run(script, capture_output=True, text=True, check=True).stdout)
    assert out["experiment"] == "robustness-fmnist-alpha" and out["finished"] == 12
    table = out["table"]
    assert [r["setting"] for r in table] == ["dirichlet alpha=1", "dirichlet alpha=0.3"]
    assert {r["worst_attack"] for r in table} == {"alie"}
    assert [r["worst_mean"] for r in table] == pytest.approx([0.35, 0.35])
    best = subprocess.run([*script, "--metric", "best_accuracy"], capture_output=True, text=True)
    assert {r["worst_attack"] for r in json.loads(best.stdout)["table"]} == {"min_max"}
    seed_1 = json.loads(subprocess.run([*script, "--seed", "1"], capture_output=True).stdout)
    assert seed_1["finished"] == 6 and seed_1["units"] == len(spec.cells())
    assert [r["worst_mean"] for r in seed_1["table"]] == pytest.approx([0.4, 0.4])
    one_seed = subprocess.run([*script, "--metric", "min_after_warmup"], capture_output=True)
    assert b"NaN" not in one_seed.stdout
    assert json.loads(one_seed.stdout)["table"][0]["worst_ci95"] is None
    rule_rows = subprocess.run([*script[:3], "--by-rule"], capture_output=True, text=True)
    assert "| median | 0.350 ± " in rule_rows.stdout and "2 of 12 attacks" in rule_rows.stdout
    twice = ["--experiment", "robustness-fmnist-alpha"] * 2
    miscount = subprocess.run([*script, *twice], capture_output=True, text=True)
    assert miscount.returncode == 2 and "once per directory" in miscount.stderr
    bad = subprocess.run([*script[:2], str(tmp_path / "nothing")], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a grid's run directory" in bad.stderr


def test_rounds_jsonl_logs_krum_selection_and_nnm_neighbourhoods(tmp_path: Path) -> None:
    """A real run (embedded chain): rounds.jsonl names the update Krum kept and, for
    nnm+krum, every update's NNM neighbourhood (registered-update indices)."""
    for rule in ("krum", "nnm+krum"):
        cfg = DemoConfig(
            clients=7,
            rounds=1,
            epochs=1,
            aggregators=4,
            attest_window=0,
            challenge_window=1,
            rule=rule,
            rule_params={"f": 1},
            out=str(tmp_path),
            name=rule.replace("+", "-"),
        )
        bad = {6: ClientBehaviour("sign_flip", {"scale": 4.0})}
        result = Demo(cfg, Progress(quiet=True), scenario=Scenario(cfg, clients=bad)).run()
        record = json.loads((result.run_dir / "rounds.jsonl").read_text().splitlines()[0])
        selection = record["selection"]
        assert len(selection["selected"]) == 1 and selection["selected"][0] in record["included"]
        if rule == "nnm+krum":
            hoods = selection["nnm_neighbours"]
            assert len(hoods) == 7 and all(len(h) == 6 for h in hoods)


def test_rules_can_be_told_a_larger_f_than_the_real_one() -> None:
    """assumed_byzantine sets what Krum/NNM/trimmed mean are told; 'true' is the real f."""
    from fedchain.experiments.cells import demo_config
    from protocol.errors import ConfigError

    base = {"clients": 20, "byzantine": 0.1, "rule": "nnm+trimmed_mean"}
    assert demo_config(base, 0, "r", "n").rule_params == {"f": 2, "beta": 0.1}
    told = demo_config({**base, "assumed_byzantine": 0.3}, 0, "r", "n").rule_params
    assert told == {"f": 6, "beta": 0.3}
    with pytest.raises(ConfigError, match="assumed_byzantine"):
        demo_config({**base, "assumed_byzantine": "more"}, 0, "r", "n")


@pytest.mark.parametrize(
    ("rule", "params"),
    [("bucketing+geomedian", {"s": 2}), ("arc+centered_clip", {"f": 1, "tau": 0.5})],
)
def test_new_defences_are_re_executed_by_every_other_aggregator(
    tmp_path: Path, rule: str, params: dict
) -> None:
    """On the embedded chain, every other aggregator re-executes the new defences bit for
    bit and agrees with the submitted aggregate; the round finalizes without a dispute."""
    cfg = DemoConfig(
        clients=6,
        rounds=1,
        epochs=1,
        aggregators=4,
        rule=rule,
        rule_params=params,
        out=str(tmp_path),
        name=rule.replace("+", "-"),
    )
    result = Demo(cfg, Progress(quiet=True)).run()
    record = json.loads((result.run_dir / "rounds.jsonl").read_text().splitlines()[0])
    assert record["finalized"] and record["verifiers_agreeing"] == cfg.aggregators - 1
    assert not record["faulty_finalized"]
    if rule.startswith("bucketing"):
        assert sorted(record["selection"]["bucket_order"]) == record["included"]


def test_every_issue_23_grid_is_valid_and_its_figures_have_metrics() -> None:
    """Each study grid passes the experiment checks, and every figure draws a metric."""
    from fedchain.experiments.builtin import builtin
    from fedchain.experiments.cells import validate_spec

    names = [
        "robustness-fmnist",
        "robustness-fmnist-val",
        "robustness-fmnist-tau",
        "robustness-fmnist-clip",
        "robustness-fmnist-sweep",
        "robustness-fmnist-alpha",
        "robustness-fmnist-f10",
        "robustness-fmnist-overf",
        "robustness-fmnist-probe",
        "clients-control",
        "clients-centralized",
        "recovery-real",
        "privacy-controls",
        "privacy-clip-only",
        "aggregators-fmnist",
    ]
    for name in names:
        for quick in (True, False):
            spec = builtin(name, quick)
            validate_spec(spec)
            assert spec.plots and all(p.metrics for p in spec.plots), name


def test_aggregator_cells_make_the_first_members_faulty_and_are_checked() -> None:
    from fedchain.experiments.cells import aggregator_behaviours, demo_config, validate_spec
    from fedchain.experiments.grid import ExperimentSpec

    params = {"aggregators": 7, "byzantine_aggregators": "max", "rule": "median"}
    cfg = demo_config(params, 0, "runs", "x")
    got = aggregator_behaviours({**params, "aggregator_behaviour": "noise(sigma=0.5)"}, cfg)
    assert sorted(got) == [0, 1] and got[0].publish == "noise" and got[0].params["sigma"] == 0.5
    # wrong_rule must differ from the task's rule: the median task gets FedAvg
    wrong = aggregator_behaviours({**params, "aggregator_behaviour": "wrong_rule"}, cfg)
    assert wrong[1].params["rule"] == "fedavg"
    assert aggregator_behaviours({**params, "aggregator_behaviour": "honest"}, cfg) == {}
    for bad, match in (
        ({"aggregator_behaviour": "teleport", "byzantine_aggregators": 1}, "unknown aggregator"),
        ({"aggregator_behaviour": "stale", "byzantine_aggregators": 2}, "at most"),
        ({"aggregator_behaviour": "stale", "byzantine_aggregators": "all"}, "'max'"),
    ):
        spec = ExperimentSpec("x", "fedchain", {"aggregators": 4, **bad}, {"rounds": (1,)}, (0,))
        with pytest.raises(FedchainError, match=match):
            validate_spec(spec)


def test_aggregator_table_compares_each_cell_with_its_honest_twin() -> None:
    from fedchain.experiments.study import aggregator_table

    def row(behaviour: str, seed: int, digest: str, **kw: object) -> dict[str, object]:
        return {
            "rule": "fedavg",
            "aggregators": 4,
            "aggregator_behaviour": behaviour,
            "seed": seed,
            "final_model_digest": digest,
            "final_accuracy": 0.5,
            "last5_accuracy": 0.4,
            "rounds_lost": 0,
            "faulty_aggregates": 1,
            "rejected": 1,
            "faulty_finalized": 0,
            **kw,
        }

    rows = [
        row("honest", 0, "a", faulty_aggregates=0, rejected=0),
        row("honest", 1, "b", faulty_aggregates=0, rejected=0),
        row("sign_flip", 0, "a"),
        row("sign_flip", 1, "c", faulty_finalized=1),  # a faulty model got through
    ]
    table = {t["aggregator_behaviour"]: t for t in aggregator_table(rows)}
    assert table["honest"]["identical"] == 2 and table["honest"]["seeds"] == 2
    assert table["sign_flip"]["identical"] == 1 and table["sign_flip"]["faulty_finalized"] == 0.5


def test_experiment_help_lists_every_builtin() -> None:
    """`fedchain experiment --help` names every builtin grid (a new one must be listed)."""
    from fedchain.experiments.builtin import BUILTINS
    from fedchain.options.parser import EXPERIMENT_EPILOG

    listed = {line.split()[0] for line in EXPERIMENT_EPILOG.splitlines() if line.startswith("  ")}
    assert set(BUILTINS) <= listed, sorted(set(BUILTINS) - listed)


def test_published_grid_files_load_and_the_slice_halves_share_their_builtins_ids() -> None:
    """Every docs/grids/*.toml parses; a file named after a builtin slice ('...-dirichlet')
    holds only cells of that builtin (same ids), which is what lets study_table read it."""
    from fedchain.experiments.builtin import builtin
    from fedchain.experiments.grid import load_grid

    grids = sorted((Path(__file__).resolve().parents[1] / "docs" / "grids").glob("*.toml"))
    assert grids
    halves = 0
    for path in grids:
        spec = load_grid(path)
        assert spec.cells()
        if path.stem.startswith("robustness-fmnist-") and path.stem.endswith("-dirichlet"):
            parent = builtin(path.stem.removesuffix("-dirichlet"))
            assert {c.id for c in spec.cells()} <= {c.id for c in parent.cells()}
            halves += 1
    assert halves == 2
