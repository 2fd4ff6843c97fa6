"""Scenario files and fault-tolerance runs through the real contract and PBFT committee."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedchain.cli import main
from fedchain.report.detection import collect, markdown_table
from fedchain.sim.driver.events import read_events
from fedchain.sim.runner import run_scenario
from fedchain.sim.scenario import load_scenario, outcome_of, scenario_from_dict
from protocol.errors import FedchainError

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def test_every_shipped_scenario_parses() -> None:
    files = sorted(SCENARIOS.glob("*.toml"))
    assert len(files) >= 25
    for f in files:
        scenario = load_scenario(f)
        assert scenario.expect.get("outcome") in {"safe", "liveness-lost", "safety-violated"}


@pytest.mark.parametrize(
    "data,match",
    [
        ({"run": {"clients": 4}, "aggregatr": []}, "unknown key"),
        ({"run": {"clientz": 4}}, "unknown key"),
        ({"run": {"aggregators": 4}, "aggregator": [{"index": 9}]}, "index"),
        ({"run": {}, "aggregator": [{"index": 0, "publish": "teleport"}]}, "unknown aggregator"),
        ({"run": {}, "aggregator": [{"index": 0}, {"index": 0}]}, "twice"),
        ({"run": {}, "client": [{"index": 0, "attack": "bribe"}]}, "unknown client attack"),
        ({"run": {}, "expect": {"outcome": "fine"}}, "outcome"),
        ({"run": {"rule": "krum", "rule_params": {"f": 99}}}, "krum"),
    ],
)
def test_invalid_scenarios_are_refused(data: dict, match: str) -> None:
    with pytest.raises(FedchainError, match=match):  # ConfigError or RuleParameterError
        scenario_from_dict(data, "test.toml")


def run(name: str, tmp_path: Path, **overrides):
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    for key, value in overrides.items():
        setattr(scenario.config, key, value)
    scenario.config.out = str(tmp_path)
    return scenario, run_scenario(scenario).summary


def test_faulty_aggregate_is_rejected_and_the_model_equals_the_honest_run(tmp_path) -> None:
    scenario, summary = run("agg-noise", tmp_path)
    honest = run_scenario(scenario.honest_twin()).summary
    faults = summary["faults"]
    assert faults["faulty_aggregates"] == 1 and faults["rejected"] == 1
    assert faults["false_rejections"] == 0 and faults["faulty_finalized"] == 0
    assert outcome_of(summary) == "safe"
    assert summary["final_model_digest"] == honest["final_model_digest"]
    # The event log shows the dispute as it happened: challenge, verdict, slashing.
    run_dir = Path(scenario.config.out)
    (log,) = [p for p in run_dir.glob("*agg-noise/events.jsonl")]
    events = read_events(log)
    kinds = [e["kind"] for e in events]
    faulty = next(e for e in events if e["kind"] == "aggregate_submitted" and e["faulty"])
    assert kinds.index("challenge") < kinds.index("dispute") < kinds.index("dispute_resolved")
    assert next(e for e in events if e["kind"] == "dispute_resolved")["verdict"] == "faulty"
    (slash,) = [e for e in events if e["kind"] == "slashed"]
    assert slash["aggregator"] == faulty["aggregator"] and slash["amount"] > 0
    stakes = [e for e in events if e["kind"] == "stakes"][-1]["aggregators"]
    assert stakes[faulty["aggregator"]]["slashed"] is True
    assert faults["dispute_gas_total"] > 0
    run_dir = Path(summary["config"]["out"])
    rows = collect([run_dir])
    assert any(r["scenario"] == "agg-noise" and r["rejected"] == 1 for r in rows)
    assert "agg-noise" in markdown_table(rows)


def test_withholding_aggregator_times_out_and_the_next_one_serves(tmp_path) -> None:
    _, summary = run("agg-withhold", tmp_path)
    assert summary["faults"]["withheld"] == 1 and summary["faults"]["timeouts"] == 1
    assert summary["all_rounds_finalized"] and summary["all_chosen_by_contract"]


def test_frivolous_challenger_loses_and_nothing_honest_is_rejected(tmp_path) -> None:
    _, summary = run("agg-frivolous-challenger", tmp_path)
    faults = summary["faults"]
    assert faults["challenges"] >= 1 and faults["disputes"] >= 1
    assert faults["rejected"] == 0 and faults["false_rejections"] == 0
    assert summary["all_rounds_finalized"]


def test_beyond_f_colluders_the_run_shows_where_it_breaks(tmp_path) -> None:
    # 2 of 4 colluders: no side reaches n - f, every colluder's dispute times out, the
    # aggregate is discarded and the next aggregator serves: the run completes safely.
    _, timed_out = run("collusion-n4-f2", tmp_path)
    faults = timed_out["faults"]
    assert outcome_of(timed_out) == "safe" and timed_out["all_rounds_finalized"]
    assert faults["dispute_timeouts"] >= 2 and faults["honest_expired"] == 0
    assert faults["faulty_finalized"] == 0 and faults["false_rejections"] == 0
    # 3 of 4: the colluders alone are a quorum and certify their own faulty aggregate.
    _, broken = run("collusion-n4-f3", tmp_path)
    assert outcome_of(broken) == "safety-violated"
    assert broken["faults"]["faulty_finalized"] >= 1


def test_cli_run_checks_expectations(tmp_path, capsys) -> None:
    code = main(
        [
            "run",
            str(SCENARIOS / "clients-malformed.toml"),
            "--out",
            str(tmp_path),
            "--quiet",
            "--json",
        ]
    )
    assert code == 0
    verdicts = json.loads(capsys.readouterr().out)
    assert verdicts[0]["outcome"] == "safe" and verdicts[0]["problems"] == []
    rounds = [
        json.loads(line)
        for line in (Path(verdicts[0]["run_dir"]) / "rounds.jsonl").read_text().splitlines()
    ]
    assert all(sorted(r["excluded"]) == ["1", "2", "3"] for r in rounds)
    assert all(r["included"] == [0] for r in rounds)
    # A scenario whose expectation is wrong makes the command fail.
    bad = tmp_path / "wrong.toml"
    bad.write_text(
        (SCENARIOS / "agg-noise.toml")
        .read_text()
        .replace('outcome = "safe"', 'outcome = "liveness-lost"')
    )
    assert main(["run", str(bad), "--out", str(tmp_path), "--quiet"]) == 1


def test_omniscient_client_registers_last_and_sends_minus_epsilon_mean(tmp_path) -> None:
    import numpy as np

    from adapters.storage import get_by_digest
    from fedchain.sim.runner import Demo
    from protocol.fixedpoint import dequantise
    from protocol.payloads import decode_update

    scenario = load_scenario(SCENARIOS / "clients-ipm-krum.toml")
    scenario.config.out = str(tmp_path)
    scenario.config.rounds = 1
    demo = Demo(scenario.config, scenario=scenario)
    summary = demo.run().summary
    assert summary["all_rounds_finalized"]
    updates = demo.task.updates(1)
    attacker = demo.client_accounts[4].address
    assert updates[-1].client == attacker  # it waited for the honest updates
    fmt, layout = demo.manifest.numeric, demo.layout
    deltas = [
        dequantise(decode_update(layout, fmt, 1, get_by_digest(demo.store, u.digest)), 16)
        for u in updates
    ]
    expected = -2.0 * np.mean(deltas[:-1], axis=0)
    assert np.abs(deltas[-1] - np.clip(expected, -fmt.clip, fmt.clip)).max() <= 2.0**-15


def test_certificates_carry_only_eligible_signers(tmp_path) -> None:
    """n = 10, three mixed Byzantine members on a lossy network: a member slashed for
    equivocation mid-dispute had signed the decided verdict; its certificate is refused
    (SignerSlashed), logged, and rebuilt from eligible members; the run completes."""
    scenario, summary = run("mixed-n10-f3-s0", tmp_path)
    assert summary["all_rounds_finalized"] and outcome_of(summary) == "safe"
    faults = summary["faults"]
    assert faults["equivocations_slashed"] == 1 and faults["false_rejections"] == 0
    (log,) = list(Path(scenario.config.out).glob("*mixed-n10-f3-s0/events.jsonl"))
    events = read_events(log)
    kinds = [e["kind"] for e in events]
    refused = kinds.index("resolve_refused")
    assert "SignerSlashed" in events[refused]["error"]
    assert kinds.index("equivocation_slashed") < refused < kinds.index("dispute_resolved")


def test_partially_published_updates_are_agreed_on(tmp_path) -> None:
    """Updates handed to one aggregator or to none are excluded by everyone, one handed to
    f + 1 = 2 aggregators is included and fetched from them: no challenge at all."""
    _, summary = run("clients-publish-partial", tmp_path)
    assert summary["all_rounds_finalized"] and summary["faults"]["challenges"] == 0
    run_dir = next(Path(summary["config"]["out"]).glob("*clients-publish-partial"))
    rounds = [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]
    for r in rounds:
        assert sorted(r["excluded"]) == ["0", "2"] and r["included"] == [1, 3, 4]
        assert r["availability"]["included"] == 3
