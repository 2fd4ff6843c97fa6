"""Local DP end to end: demo, records, budget stop, manifest binding, faulty aggregators."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from adapters.storage import LocalStore, get_by_digest, has_digest
from fedchain.cli import main
from fedchain.sim.driver.deployment import task_manifest
from fedchain.sim.runner import Demo, DemoConfig, federated_data
from fedchain.sim.scenario import load_scenario
from privacy.adaptive_clip import next_clip_norm_from_count
from privacy.spec import PrivacySpec
from protocol.payloads import ModelLayout, decode_global_state

SCENARIOS = Path(__file__).parent.parent / "scenarios"


def small(tmp_path: Path, **kw: object) -> DemoConfig:
    base: dict[str, object] = dict(
        clients=4, aggregators=4, rounds=2, epochs=1, out=str(tmp_path), challenge_window=2
    )
    base.update(kw)
    return DemoConfig(**base)  # type: ignore[arg-type]


def _layout(cfg: DemoConfig) -> ModelLayout:
    from clients.models import build_model, param_spec

    train, _, _ = federated_data(cfg)
    return ModelLayout.from_spec(
        param_spec(build_model(cfg.model, train.input_shape, train.num_classes, seed=cfg.seed))
    )


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
        (["--privacy", "ddp"], "needs secure aggregation or HE"),
        (["--privacy", "secagg+he"], "pick one"),
        (["--privacy", "ldp+secagg"], "combine nothing"),
        (["--privacy", "ddp+secagg"], "give a target"),
        (["--privacy", "secagg", "--rule", "median"], "--rule 'median': needs each update"),
        (["--privacy", "he", "--rule", "trimmed_mean"], "rules that work on the sum"),
        (
            ["--privacy", "secagg", "--rule", "krum", "--rule-param", "f=1"],
            "--rule 'krum': needs each update",
        ),
        (["--privacy", "he", "--rule", "bulyan", "--rule-param", "f=1"], "needs each update"),
        (["--privacy", "ddp+secagg", "--target-epsilon", "4", "--rule", "median"], "median"),
        (
            ["--privacy", "secagg", "--reveal-window", "9"],
            "--reveal-window 9: must leave the aggregator time to submit",
        ),
        (["--privacy", "secagg", "--clients", "1"], "needs at least 2 clients"),
        (["--privacy", "secagg", "--min-updates", "2"], "below the secure-aggregation threshold"),
        (["--privacy", "secagg", "--clip", "4000"], "wrap around the 32-bit ring"),
        (["--privacy", "secagg", "--dropout-fraction", "1"], "--dropout-fraction 1.0"),
        (["--privacy", "secagg", "--sample-rate", "0.5"], "--sample-rate 0.5: needs --privacy ldp"),
        (["--privacy", "secagg", "--adaptive-clip"], "--adaptive-clip True: needs --privacy ldp"),
        (
            ["--privacy", "ddp+secagg", "--target-epsilon", "1", "--ddp-scale", "1"],
            "--ddp-scale 1: must be an integer >= 2",
        ),
        (
            ["--privacy", "ddp+secagg", "--target-epsilon", "1", "--dp-mechanism", "laplace"],
            "uses ['skellam']",
        ),
        (
            ["--privacy", "ldp", "--target-epsilon", "1", "--clip-quantile", "0.9"],
            "needs --adaptive-clip",
        ),
        (
            ["--privacy", "ldp", "--target-epsilon", "1", "--dropout-fraction", "0.1"],
            "needs --privacy secagg",
        ),
        (["--privacy", "he", "--he-key-bits", "512"], "--he-key-bits 512: must be at least 1024"),
        (["--privacy", "secagg", "--he-key-bits", "4096"], "needs --privacy he"),
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


@pytest.mark.slow
def test_adaptive_clipping_sets_each_rounds_clip_norm(tmp_path: Path) -> None:
    cfg = small(
        tmp_path,
        rounds=3,
        privacy="ldp",
        target_epsilon=20.0,
        adaptive_clip=True,
        clip_norm=0.3,
        clip_bit_epsilon=1.0,
    )
    result = Demo(cfg).run()
    assert result.summary["all_rounds_finalized"]
    records = [r["privacy"] for r in _records(result.run_dir)]
    assert records[0]["clip_norm"] == 0.3
    for prev, nxt in itertools.pairwise(records):
        assert nxt["clip_norm"] == prev["next_clip_norm"]  # set by the previous aggregation
    for rec in records:  # every node recomputes it from the published count of 1-bits
        assert rec["next_clip_norm"] == next_clip_norm_from_count(
            rec["clip_norm"], rec["clip_bits"], 4, 1.0, 0.5, 0.2
        )
    # the clip norm is part of the finalized global state, hence of its on-chain digest
    final = bytes.fromhex(_records(result.run_dir)[-1]["digest"])
    payload = next(
        get_by_digest(LocalStore(d), final)
        for d in (result.run_dir / "store").iterdir()
        if has_digest(LocalStore(d), final)
    )
    train, _, _ = federated_data(cfg)
    layout = task_manifest(cfg, train, _layout(cfg)).layout
    assert decode_global_state(layout, payload).clip_norm == records[-1]["next_clip_norm"]
    p = result.summary["privacy"]
    assert p["adaptive_clip"] == {"target_quantile": 0.5, "learning_rate": 0.2, "bit_epsilon": 1.0}
    assert p["epsilon_spent"] <= 20.0
