"""Issue 22: the nodes play the one-step fault-proof game in full runs (``dispute =
"fault-proof"``): collusion-n4-f3, collusion-n7-f6 and a 3-of-4 mix of behaviours, each with
one honest aggregator against colluders who under PBFT alone are a quorum.

Each run goes through the real task and FaultGames contracts on the embedded chain; the
aggregator nodes post their claims before submitting and play every move unattended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedchain.sim.driver.events import read_events
from fedchain.sim.runner import run_scenario
from fedchain.sim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _run(name: str, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    scenario.config.out = str(tmp_path)
    summary = run_scenario(scenario).summary
    (log,) = list(tmp_path.glob(f"*{name}/events.jsonl"))
    return summary, read_events(log)


@pytest.mark.parametrize(
    "name",
    ["collusion-n4-f3-fault-proof", "collusion-n7-f6-fault-proof", "mixed-n4-f3-fault-proof"],
)
def test_one_honest_aggregator_refutes_every_faulty_claim(name: str, tmp_path: Path) -> None:
    summary, events = _run(name, tmp_path)
    faults = summary["faults"]
    byzantine = {f"aggregator-{i}" for i in summary["scenario"]["byzantine_aggregators"]}
    # every submission carried a claim; every faulty one was refuted by a one-step proof,
    # no honest one was
    assert faults["faulty_aggregates"] >= 1
    assert faults["claims"] >= faults["faulty_aggregates"]
    assert faults["claims_refuted"] == faults["faulty_aggregates"]
    assert faults["faulty_claims_unrefuted"] == 0 and faults["honest_claims_refuted"] == 0
    moves = [e for e in events if e["kind"] == "game_move"]
    proofs = [m for m in moves if m["move"] == "prove"]
    assert len(proofs) == faults["faulty_aggregates"]
    # the honest aggregator played them alone: no colluder ever challenged a partner
    assert {m["player"] for m in moves if m["role"] == "challenger"}.isdisjoint(byzantine)
    assert all(m["gas"] > 0 for m in moves)
    assert faults["game_gas_total"] == sum(m["gas"] for m in moves)
