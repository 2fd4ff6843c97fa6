"""``fedchain experiment``: grid files and their errors, resume after an interruption
(test hook and kill -9), statistics, labels, and the machine-readable output."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedchain.cli import main
from fedchain.experiments.execute import STOP_AFTER_ENV
from fedchain.experiments.grid import cell_id, parse_call, parse_seeds
from fedchain.experiments.plots import value_label
from fedchain.experiments.stats import describe
from protocol.errors import ConfigError

TINY = """\
[experiment]
name = "tiny"
kind = "recovery"
seeds = {seeds}
metric = "psnr"

[fixed]
iterations = {iterations}
restarts = 1

[grid]
defence = ["none", "batch(size=2)"]
"""


def _grid(tmp_path: Path, seeds: int = 3, iterations: int = 20) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(seeds=seeds, iterations=iterations))
    return path


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedchain.cli", "experiment", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def _results(out: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(out)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(out.glob("cells/*/seed-*/result.json"))
    }


@pytest.mark.slow
def test_interrupted_experiment_resumes_without_redoing_finished_units(tmp_path):
    grid, out = _grid(tmp_path), tmp_path / "run"
    first = _cli(str(grid), "--out", str(out), env={STOP_AFTER_ENV: "2"})
    assert first.returncode == 130, first.stderr
    meta = json.loads((out / "experiment.json").read_text())
    assert meta["status"] == "interrupted" and meta["units_done"] == 2
    assert meta["finished"] is None
    before = _results(out)
    assert len(before) == 2
    # figures and a summary of what finished, without running anything
    report = _cli(str(grid), "--out", str(out), "--report-only")
    assert report.returncode == 0, report.stderr
    assert "Partial: 2 of 6 units finished" in (out / "summary.md").read_text()
    assert list((out / "figures").glob("*.png"))
    assert json.loads((out / "experiment.json").read_text())["status"] == "interrupted"
    assert _results(out) == before
    # an interrupted unit: its directory exists, its result.json does not
    cells = sorted(p for p in (out / "cells").iterdir() if p.is_dir())
    partial = cells[-1] / "seed-2"
    partial.mkdir(parents=True)
    (partial / "half-written.npz").write_bytes(b"junk")
    second = _cli(str(grid), "--out", str(out), "--json")
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["status"] == "finished"
    assert (report["units_run"], report["units_reused"]) == (4, 2)
    after = _results(out)
    assert len(after) == 6
    for path, (mtime, data) in before.items():
        assert after[path] == (mtime, data)  # neither rerun nor rewritten
    assert not (partial / "half-written.npz").exists()
    assert (partial / "result.json").is_file()
    meta = json.loads((out / "experiment.json").read_text())
    assert meta["status"] == "finished" and len(meta["runs"]) == 2
    assert "resuming" in second.stderr and "2 already finished" in second.stderr
    rows = (out / "cells.csv").read_text().splitlines()
    assert len(rows) == 7  # header + 6 units


@pytest.mark.slow
def test_killed_experiment_resumes(tmp_path):
    grid, out = _grid(tmp_path, seeds=6, iterations=200), tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedchain.cli", "experiment", str(grid), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob("cells/*/seed-*/result.json")) and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    before = _results(out)
    assert before, "no unit finished before the kill"
    again = _cli(str(grid), "--out", str(out))
    assert again.returncode == 0, again.stderr
    after = _results(out)
    assert len(after) == 12
    for path, value in before.items():
        assert after[path] == value
    assert json.loads((out / "experiment.json").read_text())["status"] == "finished"


BAD_GRIDS = [
    ("[grids]\nx = 1\n", r"tiny\.toml: unknown table\(s\) \['grids'\]"),
    ("[experiment]\nseed = 3\n", r"\[experiment\]: unknown key\(s\) \['seed'\]"),
    ("[experiment]\nseeds = 0\n", r"\[experiment\] seeds = 0: expected a count"),
    ('[grid]\nrule = "fedavg"\n', r"\[grid\] rule = 'fedavg': expected a non-empty list"),
    ('[grid]\nclients = [5, "ten"]\n', r"\[grid\] clients = 'ten': expected an integer"),
    ("[fixed]\ncolour = 1\n", r"\[fixed\] colour = 1: unknown setting"),
    ('[grid]\nattack = ["bogus"]\n', r"\[grid\] attack = 'bogus': unknown client attack"),
    (
        '[fixed]\nbyzantine = 2\n[grid]\nattack = ["inner_product_manipulation(eps=10)"]\n',
        r"attack = 'inner_product_manipulation\(eps=10\)': does not take \['eps'\]",
    ),
    ('[grid]\nrule = ["fedavg", "nope"]\n', r"cell rule=nope: --rule 'nope'"),
    (
        '[fixed]\nclients = 10\nbyzantine = 0.2\n[grid]\nrule = ["bulyan"]\n',
        r"bulyan: f=2 needs n >= 4f\+3 = 11",
    ),
    ('[fixed]\nbyzantine = 1.5\n[grid]\nrule = ["fedavg"]\n', r"byzantine = 1.5: a fraction"),
    ('[fixed]\nseed = 1\n[grid]\nrule = ["fedavg"]\n', r"seed = 1: set by the experiment"),
    (
        '[experiment]\nkind = "recovery"\n[grid]\ndefence = ["batch(size=0)"]\n',
        r"\[grid\] defence = 'batch\(size=0\)': batch\(size=0\): expected an integer >= 1",
    ),
    (
        '[experiment]\nkind = "recovery"\n[grid]\ndefence = ["blur"]\n',
        r"defence = 'blur': unknown defence 'blur'",
    ),
    ('[experiment]\nkind = "quantum"\n', r"\[experiment\] kind = 'quantum': expected one of"),
    ('[grid]\nrule = ["fedavg"]\n[[plot]]\nkind = "pie"\n', r"\[\[plot\]\] #1 kind = 'pie'"),
    ('[grid]\nrule = ["fedavg"]\n[[plot]]\nkind = "lines"\nx = "nope"\n', r"x = 'nope': not an"),
    ('[grid]\nrule = ["fedavg"]\n[[plot]]\nkind = "bars"\ncolor = 1\n', r"unknown key\(s\)"),
    ("[grid]\nrule = [\n", r"invalid TOML"),
]


@pytest.mark.parametrize(("text", "pattern"), BAD_GRIDS)
def test_bad_grid_is_one_line_exit_2(tmp_path, capsys, text, pattern):
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedchain: error: "), err
    assert re.search(pattern, err), err
    assert not out.exists()  # nothing created before the grid is valid


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["nosuch"], r"experiment 'nosuch': neither a builtin"),
        (["missing.toml"], r"grid 'missing.toml': no such file"),
        (["robustness", "--seeds", "a,b"], r"--seeds 'a,b': expected a count"),
        (["robustness", "--seeds", "0"], r"--seeds '0'"),
        (["robustness", "--jobs", "0"], r"--jobs 0: must be at least 1"),
        (["robustness", "--report-only"], r"--report-only: .* holds no experiment"),
    ],
)
def test_bad_options_are_one_line(tmp_path, capsys, args, pattern):
    import re

    assert main(["experiment", *args, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(pattern, err), err


def test_quick_refused_for_grid_files(tmp_path, capsys):
    assert main(["experiment", str(_grid(tmp_path)), "--quick"]) == 2
    assert "--quick: only for the builtin" in capsys.readouterr().err


@pytest.mark.slow
def test_out_holding_another_grid_is_refused(tmp_path, capsys):
    grid, out = _grid(tmp_path, seeds=1, iterations=5), tmp_path / "run"
    assert main(["experiment", str(grid), "--out", str(out), "--quiet"]) == 0
    grid.write_text(TINY.format(seeds=1, iterations=6))
    assert main(["experiment", str(grid), "--out", str(out), "--quiet"]) == 2
    assert "holds experiment 'tiny' with another grid" in capsys.readouterr().err
    # more seeds of the same grid: resumed, the finished seed reused
    grid.write_text(TINY.format(seeds=2, iterations=5))
    before = _results(out)
    assert main(["experiment", str(grid), "--out", str(out), "--quiet"]) == 0
    after = _results(out)
    assert len(after) == 4 and all(after[k] == v for k, v in before.items())


def test_describe_mean_std_and_student_t_interval():
    st = describe([1.0, 2.0, 3.0, None, float("nan")])
    assert (st.mean, st.std, st.n) == (2.0, 1.0, 3)
    assert st.ci95 == pytest.approx(4.302652729911275 / math.sqrt(3))
    assert "n=3" in st.text()
    one = describe([0.5])
    assert one.n == 1 and math.isnan(one.std) and one.text() == "0.500 (n=1)"
    assert describe([]).n == 0


def test_parse_call_seeds_and_labels():
    assert parse_call("inner_product_manipulation(epsilon=10)") == (
        "inner_product_manipulation",
        {"epsilon": 10},
    )
    assert parse_call("gaussian_noise(sigma=1.0, replace=true)") == (
        "gaussian_noise",
        {"sigma": 1.0, "replace": True},
    )
    assert parse_call("alie") == ("alie", {})
    with pytest.raises(ConfigError):
        parse_call("ipm(epsilon=)")
    with pytest.raises(ConfigError):
        parse_call("not a call")
    assert parse_seeds("3") == (0, 1, 2)
    assert parse_seeds("0,5,7") == (0, 5, 7)
    for bad in ("0", "x", "1,1", "-1,2"):
        with pytest.raises(ConfigError):
            parse_seeds(bad)
    assert value_label("attack", "inner_product_manipulation(epsilon=10.0)") == "IPM ε=10"
    assert value_label("rule", "trimmed_mean") == "Trimmed mean"
    assert value_label("defence", "secagg(k=10)") == "sec. agg. K=10"
    a = cell_id({"rule": "krum"}, {"rule": "krum", "clients": 20})
    b = cell_id({"rule": "krum"}, {"rule": "krum", "clients": 21})
    assert a.startswith("rule-krum_") and a != b


def test_privacy_values_and_infinite_epsilon():
    from fedchain.experiments.cells import demo_config, privacy_settings

    laplace = {"privacy": 'ldp(dp_mechanism="laplace", clip_norm=150.0)', "target_epsilon": 2.0}
    assert privacy_settings(laplace) == {
        "privacy": "ldp",
        "dp_mechanism": "laplace",
        "clip_norm": 150.0,
        "target_epsilon": 2.0,
    }
    cfg = demo_config({**laplace, "clients": 5, "target_delta": 1e-6}, 0, "runs", "x")
    assert (cfg.privacy, cfg.dp_mechanism, cfg.clip_norm, cfg.target_delta) == (
        "ldp",
        "laplace",
        150.0,
        1e-6,
    )
    # epsilon = inf: the same cell without privacy (every privacy setting dropped)
    free = demo_config({**laplace, "target_epsilon": math.inf, "target_delta": 1e-6}, 0, "r", "x")
    assert (free.privacy, free.dp_mechanism, free.clip_norm, free.target_epsilon) == (
        "none",
        "gaussian",
        1.0,
        None,
    )
    free.validate()
    with pytest.raises(ConfigError, match=r"does not take \['colour'\]"):
        privacy_settings({"privacy": "ldp(colour=1)"})
    with pytest.raises(ConfigError, match=r"sets \['clip_norm'\], which the cell also sets"):
        privacy_settings({"privacy": "ldp(clip_norm=2.0)", "clip_norm": 3.0})
    with pytest.raises(ConfigError, match="clip_norm = 'big': expected a number"):
        privacy_settings({"privacy": "ldp(clip_norm='big')"})
    assert value_label("privacy", 'ldp(dp_mechanism="laplace", clip_norm=150.0)') == (
        "local DP, Laplace"
    )
    assert value_label("privacy", "ddp+secagg") == "distributed DP + sec. agg."
    assert value_label("target_epsilon", math.inf) == "∞"
    assert value_label("target_epsilon", 0.5) == "0.5"
    assert value_label("defence", "ldp(epsilon=8.0)") == "local DP ε=8"


@pytest.mark.parametrize(
    ("grid", "pattern"),
    [
        ('privacy = ["ldp(dp_mechanism=1)"]', r"\[grid\] privacy = 'ldp\(dp_mechanism=1\)': "),
        ('privacy = ["ldp"]\ntarget_epsilon = [8.0]\nclip_norm = [0.0]', r"clip_norm"),
        ('privacy = ["ldp(sigma=1.0)"]', r"does not take \['sigma'\]"),
        ('privacy = ["none"]\ntarget_epsilon = [8.0]', r"needs --privacy"),
    ],
)
def test_bad_privacy_cells_are_refused(tmp_path, capsys, grid, pattern):
    path = tmp_path / "p.toml"
    path.write_text(f"[fixed]\nclients = 4\n[grid]\n{grid}\n")
    assert main(["experiment", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedchain: error: "), err
    assert re.search(pattern, err), err
    assert not (tmp_path / "out").exists()


def test_a_grid_may_gain_axis_values_and_reuse_its_cells(tmp_path):
    from fedchain.experiments.execute import run_experiment, same_grid_family
    from fedchain.experiments.grid import spec_from_dict
    from protocol.metrics import Progress

    base = {
        "experiment": {"name": "grow", "kind": "recovery", "seeds": 1, "metric": "psnr"},
        "fixed": {"iterations": 5, "restarts": 1},
        "grid": {"defence": ["none"]},
    }
    out = tmp_path / "grow"
    first = run_experiment(spec_from_dict(base, "g.toml"), out, progress=Progress(quiet=True))
    assert (first.ran, first.reused) == (1, 0)
    grown = {**base, "grid": {"defence": ["none", "ldp(epsilon=1.0)"]}}
    second = run_experiment(spec_from_dict(grown, "g.toml"), out, progress=Progress(quiet=True))
    assert (second.ran, second.reused) == (1, 1)
    meta = json.loads((out / "experiment.json").read_text())
    assert meta["grid"]["axes"]["defence"] == ["none", "ldp(epsilon=1.0)"]
    assert len(meta["runs"]) == 2
    # other fixed settings or other axes are another grid: refused
    other = {**base, "fixed": {"iterations": 6, "restarts": 1}}
    with pytest.raises(ConfigError, match="with another grid"):
        run_experiment(spec_from_dict(other, "g.toml"), out, progress=Progress(quiet=True))
    assert not same_grid_family(meta["grid"], {**meta["grid"], "axes": {"model": ["mlp"]}})
    assert not same_grid_family(None, meta["grid"])


@pytest.mark.parametrize("jobs", [1, 2])
def test_cells_with_the_same_run_share_it(tmp_path, jobs):
    """Every epsilon = inf cell is the same non-private run: it runs once per seed (with
    two workers the twin waits for the run in flight) and every such cell reports it."""
    from fedchain.experiments.execute import run_experiment
    from fedchain.experiments.grid import spec_from_dict
    from protocol.metrics import Progress

    grid = {
        "experiment": {"name": "twins", "seeds": 1},
        "fixed": {"clients": 3, "rounds": 1, "epochs": 1, "model": "logreg", "aggregators": 4},
        "grid": {
            "privacy": ['ldp(dp_mechanism="laplace")', 'ldp(dp_mechanism="gaussian")'],
            "target_epsilon": [math.inf],
        },
    }
    lines: list[str] = []

    class Lines(Progress):
        def line(self, text: str) -> None:
            lines.append(text)

    out = tmp_path / "twins"
    run = run_experiment(spec_from_dict(grid, "t.toml"), out, jobs=jobs, progress=Lines(quiet=True))
    assert run.status == "finished" and run.ran == 2
    first, second = sorted(run.rows, key=lambda r: r["privacy"], reverse=True)
    assert "same_run_as" not in first and second["same_run_as"] == first["cell_id"]
    assert second["unit_dir"] == first["unit_dir"]
    assert second["final_accuracy"] == first["final_accuracy"]
    assert second["accuracy_per_round"] == first["accuracy_per_round"]
    assert len(list(out.glob("cells/*/seed-0/summary.json"))) == 1  # one run on disk
    assert any("(the run of privacy=ldp" in line for line in lines)


def test_a_heatmap_draws_only_the_rows_its_select_keeps() -> None:
    """A heatmap with ``select = {partition = [...]}`` averages the selected partition only
    (it averaged every partition together: the Dirichlet figure showed IID's accuracy)."""
    from fedchain.experiments.grid import PlotSpec
    from fedchain.experiments.plots import heatmap_grid

    rows = [
        {"partition": p, "rule": r, "attack": "none", "seed": s, "last5_accuracy": v}
        for p, v in (("iid", 0.9), ("dirichlet", 0.1))
        for r in ("fedavg", "median")
        for s in (0, 1)
    ]
    axes = {"partition": ["iid", "dirichlet"], "rule": ["fedavg", "median"], "attack": ["none"]}
    for part, want in (("iid", 0.9), ("dirichlet", 0.1)):
        plot = PlotSpec(
            "heatmap",
            x="rule",
            y="attack",
            metrics=("last5_accuracy",),
            select={"partition": (part,)},
        )
        xs, ys, mean, _ = heatmap_grid(rows, plot, axes)
        assert xs == ["fedavg", "median"] and ys == ["none"]
        assert mean.tolist() == [[want, want]]
