"""Issue 20, item 8, in the in-process simulator: a committee replica crashes in the middle
of a dispute at a given PBFT phase and restarts from its stable storage (a file in a
temporary directory, written before anything it signed is sent), via the scenario key
``[pbft] restart``. Aggregator 0 publishes a noisy aggregate in round 1; the committee
disputes it while one (or two) of its members crash and come back. No two correct replicas
may decide different verdicts, no honest member is slashed, and the run still finalizes
every round. The last test is the one a replica without stable storage fails: the honest
primary restarted between two disputes is slashed for equivocation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fedchain.sim.runner import run_scenario
from fedchain.sim.scenario import scenario_from_dict
from protocol.errors import ConfigError


def _scenario(restart: list[dict[str, Any]], pbft: str = "honest") -> dict[str, Any]:
    return {
        "run": {
            "clients": 4,
            "aggregators": 4,
            "rounds": 2,
            "epochs": 1,
            "model": "logreg",
            "challenge_window": 3,
            "submit_timeout": 3,
            "attest_window": 0,
            "seed": 0,
        },
        "aggregator": [
            {"index": 0, "publish": "noise", "params": {"sigma": 0.5}, "rounds": [1], "pbft": pbft}
        ],
        "pbft": {"restart": restart},
    }


RESTARTS = {
    "primary-at-pre-prepare": [{"aggregator": 0, "round": 1, "phase": "pre-prepare"}],
    "backup-at-prepare": [{"aggregator": 1, "round": 1, "phase": "prepare"}],
    "backup-at-commit": [{"aggregator": 1, "round": 1, "phase": "commit", "downtime": 5}],
    "after-deciding": [{"aggregator": 2, "round": 1, "phase": "decide"}],
    "before-signing": [{"aggregator": 3, "round": 1, "phase": "start"}],
    "equivocating-primary": [{"aggregator": 2, "round": 1, "phase": "prepare"}],
    "two-at-once": [
        {"aggregator": 1, "round": 1, "phase": "prepare", "downtime": 40},
        {"aggregator": 2, "round": 1, "phase": "commit", "downtime": 40},
    ],
}


@pytest.mark.parametrize("case", list(RESTARTS))
def test_restart_at_a_phase_never_splits_the_verdict(tmp_path: Path, case: str) -> None:
    """Crash-restart of a correct replica mid-dispute: correct replicas decide one verdict."""
    pbft = (
        "equivocating"
        if case in ("equivocating-primary", "new-primary-at-pre-prepare")
        else "honest"
    )
    scenario = scenario_from_dict(_scenario(RESTARTS[case], pbft), f"restart-{case}.toml")
    scenario.config.out = str(tmp_path)
    summary = run_scenario(scenario).summary
    restarts = summary["pbft_restarts"]
    wanted = [(r["aggregator"], r["phase"]) for r in RESTARTS[case]]
    assert [(r["aggregator"], r["phase"]) for r in restarts] == wanted, "no restart happened"
    for r in restarts:
        assert r["restarted_tick"] > r["crashed_tick"]
        # it had signed something before the crash, except when it crashed at the start
        assert r["restored"] == (r["phase"] != "start")
    assert summary["pbft_conflicting_decisions"] == []
    assert summary["all_rounds_finalized"] and not summary["stalled"]
    assert summary["faults"]["rejected"] >= 1  # the noisy aggregate was judged faulty
    assert summary["faults"]["faulty_finalized"] == 0
    if pbft == "honest":  # nobody equivocated: nobody may be slashed for it
        assert summary["faults"]["equivocations"] == []
    (run_dir,) = list(tmp_path.iterdir())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert sum(e["kind"] == "pbft_restart" for e in events) == len(wanted)


@pytest.mark.parametrize(
    ("restart", "problem"),
    [
        ({"aggregator": 1, "round": 1, "phase": "view-change"}, "must be one of"),
        ({"aggregator": 4, "round": 1, "phase": "prepare"}, "must be in 0..3"),
        ({"aggregator": 1, "round": 3, "phase": "prepare"}, "must be in 1..2"),
        ({"aggregator": 1, "phase": "prepare"}, "missing key(s) ['round']"),
        ({"aggregator": 1, "round": 1, "phase": "prepare", "downtime": 0}, "at least 1"),
        ({"aggregator": 1, "round": 1, "phase": "prepare", "when": 2}, "unknown key"),
    ],
)
def test_bad_restart_is_refused_with_one_line(restart: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(_scenario([restart]), "bad.toml")
    assert problem in str(info.value) and "[pbft] restart #1" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("phase", ["start", "pre-prepare"])
def test_restarted_primary_is_not_slashed_in_a_later_dispute(tmp_path: Path, phase: str) -> None:
    """Crash-restart of the honest primary between two disputes: without its stable storage
    it proposes round 2's dispute at sequence 1 again (round 1's), the others hold two
    pre-prepares it signed for one slot and it is slashed for equivocation on-chain (checked
    by running this schedule with the restarted replica built from no state)."""
    data = _scenario([{"aggregator": 0, "round": 2, "phase": phase}])
    data["aggregator"] = [
        {"index": 2, "challenger": "frivolous", "rounds": [1]},  # round 1: a dispute at seq 1
        {"index": 1, "publish": "noise", "params": {"sigma": 0.5}, "rounds": [2]},
    ]
    scenario = scenario_from_dict(data, f"restart-primary-{phase}.toml")
    scenario.config.out = str(tmp_path)
    summary = run_scenario(scenario).summary
    (restart,) = summary["pbft_restarts"]
    assert restart["restored"] and restart["restarted_tick"] > restart["crashed_tick"]
    faults = summary["faults"]
    assert faults["disputes"] >= 2 and faults["rejected"] == 1
    assert faults["equivocations"] == [], "the honest restarted primary was slashed"
    assert summary["pbft_conflicting_decisions"] == []
    assert summary["all_rounds_finalized"] and faults["faulty_finalized"] == 0
