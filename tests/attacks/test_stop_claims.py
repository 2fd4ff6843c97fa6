"""Issue 23: the verifiable stopping rule against the real contract and committee.

A task with ``stop_norm`` ends once the global model's update norm stays below it for
``stop_patience`` rounds. The decision is re-executed by every aggregator and submitted
next to the digest (``submitAggregate(round, digest, stop)``), so:

* an honest run stops early on the embedded chain: the task is completed and every stake
  can be released, exactly as after the last round; every verifier reached the same
  decision;
* a Byzantine aggregator that claims "stop" when the rule says go on (``false_stop``,
  with the honest aggregate's bytes: only the claim is wrong) is challenged, loses the
  dispute and is slashed; the task runs every round, ending on the honest twin's model;
* one that omits the stop when the rule says stop (``omit_stop``) is challenged and loses
  too; the next aggregator submits the stop and the task ends in that same round.

With verifiers comparing the digest only (``Verification.agrees`` without the claim), both
Byzantine tests fail: neither wrong claim is challenged (rejected 0) and it finalizes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedchain.sim.runner import Demo
from fedchain.sim.scenario import outcome_of, scenario_from_dict

#: the digits MLP's round deltas have L2 norm 0.47-1.9 (measured, rounds 2-8 of the default
#: demo): 100 is always quiet, 1e-4 never
ALWAYS_QUIET = 100.0
NEVER_QUIET = 1e-4


def _run(
    tmp_path: Path, stop_norm: float, aggregator: dict[str, Any] | None, rounds: int = 3
) -> tuple[Demo, dict[str, Any]]:
    data: dict[str, Any] = {
        "run": {
            "clients": 4,
            "aggregators": 4,
            "rounds": rounds,
            "epochs": 1,
            "challenge_window": 3,
            "submit_timeout": 3,
            "attest_window": 0,
            "stop_norm": stop_norm,
            "stop_patience": 2,
            "seed": 0,
            "out": str(tmp_path),
            "name": "stop" if aggregator is None else aggregator["publish"],
        }
    }
    if aggregator is not None:
        data["aggregator"] = [aggregator]
    scenario = scenario_from_dict(data, "stop.toml")
    demo = Demo(scenario.config, scenario=scenario)
    return demo, demo.run().summary


def test_an_honest_run_stops_early_and_stakes_are_released(tmp_path: Path) -> None:
    demo, summary = _run(tmp_path, ALWAYS_QUIET, None, rounds=4)
    assert summary["stopped_at"] == 2 and summary["rounds_finalized"] == 2
    assert outcome_of(summary) == "safe" and not summary["liveness_lost"]
    assert demo.task.task_completed()
    # every verifier re-executed round 2 to the same decision as the submitter
    verifications = [v for node in demo.aggregators for k, v in node.verifications.items()]
    stops = [v for v in verifications if v.round == 2]
    assert len(stops) == 3 and all(v.expected_stop and v.submitted_stop and v.agrees for v in stops)
    for node in demo.aggregators:
        before = demo.task.credits(node.address)
        demo.task.release_stake(node.account)
        assert demo.task.credits(node.address) > before


def test_a_false_stop_is_challenged_and_loses(tmp_path: Path) -> None:
    bad = {"index": 0, "publish": "false_stop", "rounds": [1]}
    demo, summary = _run(tmp_path, NEVER_QUIET, bad)
    faults = summary["faults"]
    assert faults["faulty_aggregates"] == 1 and faults["rejected"] == 1
    assert faults["faulty_finalized"] == 0 and outcome_of(summary) == "safe"
    assert summary["stopped_at"] is None and summary["rounds_finalized"] == 3
    assert demo.task.aggregator_info(demo.aggregators[0].address).slashed
    twin = Demo(demo.scenario.honest_twin().config, scenario=demo.scenario.honest_twin())
    assert twin.run().summary["final_model_digest"] == summary["final_model_digest"]


def test_an_omitted_stop_is_challenged_and_the_task_still_ends(tmp_path: Path) -> None:
    # aggregator 1 is the contract's choice in round 2, the round the rule says stop
    bad = {"index": 1, "publish": "omit_stop"}
    demo, summary = _run(tmp_path, ALWAYS_QUIET, bad, rounds=4)
    faults = summary["faults"]
    assert faults["faulty_aggregates"] == 1 and faults["rejected"] == 1
    assert faults["faulty_finalized"] == 0 and outcome_of(summary) == "safe"
    assert summary["stopped_at"] == 2 and summary["rounds_finalized"] == 2
    assert demo.task.task_completed()
    assert demo.task.aggregator_info(demo.aggregators[1].address).slashed
