"""Local DP end to end: demo, records, budget stop, manifest binding, faulty aggregators."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fedchain.cli import main
from fedchain.driver.deployment import task_manifest
from fedchain.runner import Demo, DemoConfig, federated_data
from fedchain.scenario import load_scenario
from privacy.spec import PrivacySpec
from protocol.payloads import ModelLayout

SCENARIOS = Path(__file__).parent.parent / "scenarios"


def small(tmp_path: Path, **kw: object) -> DemoConfig:
    base: dict[str, object] = dict(
        clients=4, aggregators=4, rounds=2, epochs=1, out=str(tmp_path), challenge_window=2
    )
    base.update(kw)
    return DemoConfig(**base)  # type: ignore[arg-type]


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_ldp_demo_records_epsilon_per_round(tmp_path: Path) -> None:
    result = Demo(small(tmp_path, privacy="ldp", target_epsilon=4.0)).run()
    s = result.summary
    assert s["all_rounds_finalized"]
    records = _records(result.run_dir)
    spec, _ = PrivacySpec(mode="ldp", target_epsilon=4.0).resolve(2)
    eps = [r["privacy"]["epsilon"] for r in records]
    assert eps == spec.accountant().epsilons(2) and eps[0] < eps[1] <= 4.0
    for r in records:
        assert set(r["privacy"]) == {
            "mode",
            "mechanism",
            "epsilon",
            "delta",
            "noise_multiplier",
            "clip_norm",
        }
        assert r["privacy"]["mode"] == "ldp" and r["privacy"]["delta"] == 1e-5
    p = s["privacy"]
    assert p["epsilon_spent"] == eps[-1] and p["epsilon_per_round"] == eps
    assert p["target_epsilon"] == 4.0 and p["budget_exhausted"] is True
    assert p["accountant"].startswith("dp-accounting")


@pytest.mark.slow
def test_budget_policy_stop_runs_the_affordable_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["demo", "--clients", "3", "--aggregators", "4", "--rounds", "4", "--epochs", "1"]
    args += ["--privacy", "ldp", "--target-epsilon", "6", "--noise-multiplier", "1.0"]
    args += ["--budget-policy", "stop", "--out", str(tmp_path), "--json", "--quiet"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    spec = PrivacySpec(mode="ldp", target_epsilon=6.0, noise_multiplier=1.0)
    fits = spec.affordable_rounds(4)
    assert 1 <= fits < 4
    assert summary["rounds_finalized"] == fits and not summary["all_rounds_finalized"]
    assert summary["privacy"]["budget_exhausted"] is True
    assert summary["privacy"]["epsilon_spent"] <= 6.0


def test_none_records_mode_none(tmp_path: Path) -> None:
    result = Demo(small(tmp_path, rounds=1)).run()
    assert result.summary["privacy"] == {"mode": "none"}
    assert _records(result.run_dir)[0]["privacy"] == {"mode": "none"}


def test_manifest_hash_binds_the_privacy_parameters() -> None:
    cfg = DemoConfig(clients=2, rounds=2)
    train, _, _ = federated_data(cfg)
    layout = ModelLayout.from_spec([("w", (3,))])
    digests = {
        task_manifest(c, train, layout).digest
        for c in (
            cfg,
            replace(cfg, privacy="ldp", target_epsilon=4.0),
            replace(cfg, privacy="ldp", target_epsilon=8.0),
            replace(cfg, privacy="ldp", target_epsilon=4.0, clip_norm=0.5),
            replace(cfg, privacy="ldp", target_epsilon=4.0, dp_mechanism="laplace"),
        )
    }
    assert len(digests) == 5
    plain = task_manifest(cfg, train, layout).to_json()
    assert "privacy" not in plain  # tasks without privacy keep their old manifest hash


@pytest.mark.slow
def test_faulty_aggregate_under_ldp_is_rejected_as_in_plaintext(tmp_path: Path) -> None:
    verdicts = {}
    for name in ("agg-noise.toml", "ldp-agg-noise.toml"):
        out = tmp_path / name
        assert main(["run", str(SCENARIOS / name), "--out", str(out), "--quiet", "--json"]) == 0
        run_dir = next(p for p in out.iterdir() if not p.name.endswith("-honest"))
        verdicts[name] = json.loads((run_dir / "verdict.json").read_text())
    plain, ldp = verdicts["agg-noise.toml"], verdicts["ldp-agg-noise.toml"]
    same = ("faulty_aggregates", "rejected", "false_rejections", "faulty_finalized", "withheld")
    assert {k: ldp["faults"][k] for k in same} == {k: plain["faults"][k] for k in same}
    assert ldp["faults"]["rejected"] == 1
    assert ldp["faults"]["detection_blocks_mean"] == plain["faults"]["detection_blocks_mean"]
    assert ldp["identical_to_honest"] is True and ldp["outcome"] == "safe"
    assert load_scenario(SCENARIOS / "ldp-agg-noise.toml").config.privacy == "ldp"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--privacy", "ldp"], "give a target"),
        (["--privacy", "ldp", "--target-epsilon", "0"], "--target-epsilon 0.0"),
        (
            ["--privacy", "ldp", "--target-epsilon", "1", "--target-delta", "1"],
            "--target-delta 1.0",
        ),
        (["--privacy", "ldp", "--target-epsilon", "1", "--clip-norm", "-1"], "--clip-norm -1.0"),
        (["--privacy", "tee"], "--privacy 'tee'"),
        (["--privacy", "ddp+secagg", "--target-epsilon", "1"], "not built yet"),
        (["--target-epsilon", "1"], "needs --privacy ldp"),
        (["--privacy", "ldp", "--target-epsilon", "1", "--noise-multiplier", "0.1"], "affords 0"),
    ],
)
def test_bad_privacy_options_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["demo", "--out", str(tmp_path / "runs"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_scenario_privacy_keys_are_type_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\nprivacy = "ldp"\ntarget_epsilon = "lots"\n')
    assert main(["run", str(bad), "--out", str(tmp_path)]) == 2
    assert "target_epsilon = 'lots': expected a number" in capsys.readouterr().err


@pytest.mark.slow
def test_client_sampling_is_reported_without_amplification(tmp_path: Path) -> None:
    cfg = small(
        tmp_path,
        clients=6,
        rounds=2,
        privacy="ldp",
        target_epsilon=4.0,
        sample_rate=0.5,
        min_updates=1,
        collect_window=3,
    )
    result = Demo(cfg).run()
    s = result.summary
    assert s["all_rounds_finalized"]
    registered = [r["updates_registered"] for r in _records(result.run_dir)]
    assert all(1 <= n <= 6 for n in registered) and sum(registered) < 12  # some sat out
    p = s["privacy"]
    assert p["sample_rate"] == 0.5
    assert p["epsilon_if_sampling_hidden"] < p["epsilon_spent"] <= 4.0
