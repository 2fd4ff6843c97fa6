"""Issue 20, item 2, end to end in the in-process driver: a round that never reaches
minUpdates no longer waits forever; the aggregator nodes skip it after the collection
timeout and the run finishes, every round finalized (the model carried forward)."""

from __future__ import annotations

import json
from pathlib import Path

from fedchain.sim.runner import run_scenario
from fedchain.sim.scenario import scenario_from_dict


def test_stalled_collection_is_skipped_by_the_nodes(tmp_path: Path) -> None:
    """Collection stall: a client that never registers keeps round 1 collecting forever."""
    data = {
        "run": {
            "clients": 3,
            "aggregators": 4,
            "rounds": 2,
            "epochs": 1,
            "model": "logreg",
            "min_updates": 3,
            "collect_window": 3,
            "collect_timeout": 4,
            "challenge_window": 1,
            "attest_window": 0,
            "seed": 1,
        },
        "client": [{"index": 2, "attack": "offline", "rounds": [1]}],
    }
    scenario = scenario_from_dict(data, "stall.toml")
    scenario.config.out = str(tmp_path)
    summary = run_scenario(scenario).summary
    assert summary["all_rounds_finalized"] and not summary["stalled"]
    (run_dir,) = list(tmp_path.iterdir())
    rounds = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    # round 1 had 2 of the 3 updates it needs: skipped, the initial model carried forward;
    # round 2 (everybody online) aggregates normally
    assert [r["finalized"] for r in rounds] == [True, True]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any("skipRound" in json.dumps(e) for e in events), "no node called skipRound"
