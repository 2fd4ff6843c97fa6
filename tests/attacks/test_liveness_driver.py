"""Issue 20, items 2 and 3, end to end in the in-process driver: a round that never reaches
minUpdates no longer waits forever; the aggregator nodes skip it after the collection
timeout and the run finishes, every round finalized (the model carried forward). The nodes
use the exits: they leave the committee of a task never started and abort a task that made
no progress for ``abort_timeout`` blocks; every stake is then returned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedchain.sim.runner import Demo, run_scenario
from fedchain.sim.scenario import scenario_from_dict
from tests.test_contract import BURN


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


def _exit_run(tmp_path: Path, **run: Any) -> Demo:
    data = {
        "run": {
            "clients": 3,
            "aggregators": 4,
            "rounds": 2,
            "epochs": 1,
            "model": "logreg",
            "challenge_window": 1,
            "attest_window": 0,
            "max_blocks": 150,
            "seed": 1,
            **run,
        },
        "client": [{"index": 2, "attack": "offline", "rounds": [1]}],
    }
    scenario = scenario_from_dict(data, "exits.toml")
    scenario.config.out = str(tmp_path)
    demo = Demo(scenario.config, scenario=scenario)
    demo.run()
    return demo


def _exits(demo: Demo) -> list[dict[str, Any]]:
    lines = (demo.run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == "exit"]


def _everyone_withdraws(demo: Demo) -> None:
    """After the abort every member gets its whole stake back; nothing is left locked."""
    task = demo.task
    stake = task.config().aggregator_stake
    for acct in demo.agg_accounts:
        if task.aggregator_info(acct.address).stake:
            task.release_stake(acct)
        assert task.credits(acct.address) == stake
        task.withdraw(acct)
    assert task.balance() == task.credits(BURN)


def test_never_started_task_the_nodes_leave_and_abort(tmp_path: Path) -> None:
    """Stakes locked: the owner never calls start; the aggregator nodes leave the committee
    after leave_after_blocks and end the task (abortTask) after abort_timeout."""
    demo = _exit_run(tmp_path, start_task=False, leave_after_blocks=20, abort_timeout=40)
    summary = json.loads((demo.run_dir / "summary.json").read_text())
    assert summary["aborted_in_round"] == 0 and not summary["stalled"]
    exits = _exits(demo)
    left = {e["aggregator"] for e in exits if e["action"] == "leaveCommittee"}
    assert left == {f"aggregator-{i}" for i in range(4)}
    assert [e["action"] for e in exits][-1] == "abortTask"
    assert demo.task.task_completed() and not demo.task.task_started()
    _everyone_withdraws(demo)


def test_stalled_task_is_aborted_by_the_nodes(tmp_path: Path) -> None:
    """Stakes locked: a round makes no progress (a client offline, minUpdates = all, the
    collection timeout longer than the abort timeout); the nodes call abortTask."""
    demo = _exit_run(
        tmp_path, min_updates=3, collect_window=3, collect_timeout=500, abort_timeout=12
    )
    summary = json.loads((demo.run_dir / "summary.json").read_text())
    assert summary["aborted_in_round"] == 1 and not summary["stalled"]
    assert [e["action"] for e in _exits(demo)] == ["abortTask"]
    assert demo.task.task_completed()
    _everyone_withdraws(demo)


def test_admission_options_end_to_end(tmp_path: Path) -> None:
    """Admission (issue 20, item 6) in a whole run: every client locks a deposit, a round
    opens its slots over its first blocks (the relayed batch gets in over several blocks),
    every round still takes every client's update; after the task every deposit comes back."""
    data = {
        "run": {
            "clients": 4,
            "aggregators": 4,
            "rounds": 2,
            "epochs": 1,
            "model": "logreg",
            "collect_window": 5,
            "min_collection_blocks": 4,
            "client_deposit": 10**15,
            "attest_window": 0,
            "challenge_window": 1,
            "max_blocks": 200,
            "seed": 1,
        }
    }
    scenario = scenario_from_dict(data, "admission.toml")
    scenario.config.out = str(tmp_path)
    demo = Demo(scenario.config, scenario=scenario)
    summary = demo.run().summary
    assert summary["all_rounds_finalized"] and not summary["stalled"]
    rounds = [json.loads(x) for x in (demo.run_dir / "rounds.jsonl").read_text().splitlines()]
    assert [r["updates_registered"] for r in rounds] == [4, 4]
    task = demo.task
    for acct in demo.client_accounts:
        task.release_deposit(acct)
        assert task.credits(acct.address) == 10**15
        task.withdraw(acct)
    for acct in demo.agg_accounts:  # stakes and returned bonds
        if task.aggregator_info(acct.address).stake:
            task.release_stake(acct)
        if task.credits(acct.address):
            task.withdraw(acct)
    assert task.balance() == task.credits(BURN)


def test_a_client_node_retries_when_no_slot_is_open_yet(tmp_path: Path) -> None:
    """Admission on the testnet path (``ClientNode.step``, each client alone): an update that
    finds every open slot taken (``SlotsNotOpen``) is not given up; the client keeps its
    training and registers in a later block."""
    data = {
        "run": {
            "clients": 4,
            "aggregators": 4,
            "rounds": 1,
            "epochs": 1,
            "model": "logreg",
            "collect_window": 8,
            "min_collection_blocks": 8,
            "seed": 1,
        }
    }
    scenario = scenario_from_dict(data, "slots.toml")
    scenario.config.out = str(tmp_path)
    demo = Demo(scenario.config, scenario=scenario)
    demo.setup()
    try:
        task, chain = demo.task, demo.chain
        open_block = task.round_info(1).open_block
        # slots open: ceil(4 * blocks open / 8); each registration mines its own block
        chain.mine_to(open_block)
        actions = [e.action for c in demo.clients[:2] for e in c.step()]
        assert actions == ["submitUpdate", "submitUpdate"]  # blocks open 2 and 3: 1, 2 slots
        late = demo.clients[2]
        assert late.step() == []  # block 4: still 2 slots, both taken; nothing mined
        assert task.update_count(1) == 2 and 1 in late._trained
        chain.mine(1)  # block 5 opens a third slot
        assert [e.action for e in late.step()] == ["submitUpdate"]
        assert task.update_count(1) == 3 and not late._trained
    finally:
        demo.close()
