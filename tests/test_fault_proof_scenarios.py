"""Issue 22: the nodes play the one-step fault-proof game in full runs (``dispute =
"fault-proof"``): collusion-n4-f3, collusion-n7-f6 and a 3-of-4 mix of behaviours, each with
one honest aggregator against colluders who under PBFT alone are a quorum.

Each run goes through the real task and FaultGames contracts on the embedded chain; the
aggregator nodes post their claims before submitting and play every move unattended."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fedchain.sim.driver.events import read_events
from fedchain.sim.runner import run_scenario
from fedchain.sim.scenario import load_scenario, outcome_of

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


Run = tuple[dict[str, Any], list[dict[str, Any]], Path, dict[str, Any]]


def _run(name: str, out: Path) -> Run:
    """The scenario's run and its honest twin's summary (every aggregator honest)."""
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    scenario.config.out = str(out)
    summary = run_scenario(scenario).summary
    twin = run_scenario(scenario.honest_twin()).summary
    (log,) = list(out.glob(f"*{name}/events.jsonl"))
    return summary, read_events(log), log.parent, twin


@pytest.fixture(scope="module")
def n4_f3(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """collusion-n4-f3-fault-proof, run once for the module."""
    return _run("collusion-n4-f3-fault-proof", tmp_path_factory.mktemp("n4f3"))


@pytest.mark.parametrize(
    "name",
    ["collusion-n4-f3-fault-proof", "collusion-n7-f6-fault-proof", "mixed-n4-f3-fault-proof"],
)
def test_one_honest_aggregator_refutes_every_faulty_claim(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if name == "collusion-n4-f3-fault-proof":
        summary, events, _, twin = request.getfixturevalue("n4_f3")
    else:
        summary, events, _, twin = _run(name, tmp_path)
    faults = summary["faults"]
    # safe: every faulty aggregate rejected on-chain, none finalized, the honest twin's model
    assert outcome_of(summary) == "safe" and summary["all_rounds_finalized"]
    assert faults["rejected"] == faults["faulty_aggregates"] and faults["faulty_finalized"] == 0
    assert faults["false_rejections"] == 0
    assert summary["final_model_digest"] == twin["final_model_digest"]
    # every faulty submitter slashed (by rejectRefuted, sent by the honest member)
    rejected = [e for e in events if e["kind"] == "refuted_rejected"]
    assert len(rejected) == faults["faulty_aggregates"]
    assert {e["by"] for e in rejected} == {f"aggregator-{summary['config']['aggregators'] - 1}"}
    stakes = [e for e in events if e["kind"] == "stakes"][-1]["aggregators"]
    assert all(stakes[e["submitter"]]["slashed"] for e in rejected)
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


def test_the_dashboard_shows_each_games_moves(n4_f3: Run) -> None:
    """The real dashboard server renders every move of every game, in order, with its gas,
    and marks the refuted claims."""
    from tests.dashboard_support import DashboardProcess

    _, events, run_dir, _ = n4_f3
    moves = [e for e in events if e["kind"] == "game_move"]
    dash = DashboardProcess(run_dir.parent)
    try:
        with urllib.request.urlopen(dash.url + "view/" + run_dir.name, timeout=30) as resp:
            html = resp.read().decode()
    finally:
        dash.stop()
    assert "Fault-proof games" in html
    section = html[html.index("Fault-proof games") :]
    refuted = {(e["round"], e["attempt"]) for e in events if e["kind"] == "refuted_rejected"}
    assert refuted
    for r, a in {(m["round"], m["attempt"]) for m in moves}:
        pattern = rf'<div class="game" data-round="{r}" data-attempt="{a}".*?</table>'
        block = re.search(pattern, section, re.S)
        assert block is not None
        shown = re.findall(r'<tr data-move="([^"]+)">', block.group(0))
        mine = [m for m in moves if (m["round"], m["attempt"]) == (r, a)]
        assert shown == [m["move"] for m in mine]
        assert ("refuted by a one-step proof" in block.group(0)) == ((r, a) in refuted)
        for m in mine:
            assert f"{m['gas']:,}" in block.group(0)


def test_a_frivolous_challenger_loses_against_an_honest_node(tmp_path: Path) -> None:
    """agg-frivolous-challenger with the fault proof: the frivolous member opens a leaf game
    on an honest claim; the honest submitter's node reveals the leaf, the challenger has no
    step to prove and the submitter takes its bond by ``timeout``. Nothing honest is refuted
    and every round is finalized."""
    scenario = load_scenario(SCENARIOS / "agg-frivolous-challenger.toml")
    scenario.config.dispute = "fault-proof"
    scenario.config.out = str(tmp_path)
    summary = run_scenario(scenario).summary
    (log,) = list(tmp_path.glob("*agg-frivolous-challenger/events.jsonl"))
    moves = [e for e in read_events(log) if e["kind"] == "game_move"]
    opened = [m for m in moves if m["move"] == "openLeaf"]
    assert opened and {m["player"] for m in opened} == {"aggregator-1"}
    assert not any(m["move"] == "prove" for m in moves)
    for game in opened:  # each frivolous game: revealed, then won by its submitter
        answered = [m for m in moves if m["round"] == game["round"] and m["role"] == "submitter"]
        assert [m["move"] for m in answered][-1] == "revealLeaf"
        timeouts = [m for m in moves if m["round"] == game["round"] and m["move"] == "timeout"]
        assert timeouts and timeouts[0]["player"] != "aggregator-1"
    faults = summary["faults"]
    assert faults["claims_refuted"] == 0 and faults["faulty_aggregates"] == 0
    assert summary["all_rounds_finalized"]


def test_an_honest_aggregate_withheld_by_its_submitter_is_served_by_the_others(
    tmp_path: Path,
) -> None:
    """agg-unavailable with the fault proof: the claim is the honest state (no game can
    refute it) but its submitter never publishes the bytes. Every honest member computed the
    same bytes, so it serves them itself; the round finalizes the honest model. (Before this,
    nobody challenged in fault-proof mode and the next round could not fetch its model.)"""
    scenario = load_scenario(SCENARIOS / "agg-unavailable.toml")
    scenario.config.dispute = "fault-proof"
    scenario.config.out = str(tmp_path)
    summary = run_scenario(scenario).summary
    faults = summary["faults"]
    assert summary["all_rounds_finalized"] and faults["faulty_finalized"] == 0
    assert faults["claims_refuted"] == 0 and faults["challenges"] == 0


def test_both_modes_slash_the_signers_of_a_contradicted_certificate(tmp_path: Path) -> None:
    """collusion-n4-f3 with ``dispute = "both"``: the honest member challenges, the three
    colluders certify their aggregate "not faulty" (an n - f quorum), the one-step proof
    refutes it anyway; the task rejects it and slashRefutedCertificate slashes every signer."""
    scenario = load_scenario(SCENARIOS / "collusion-n4-f3-fault-proof.toml")
    scenario.config.dispute = "both"
    scenario.config.out = str(tmp_path)
    summary = run_scenario(scenario).summary
    (log,) = list(tmp_path.glob("*collusion-n4-f3-fault-proof/events.jsonl"))
    events = read_events(log)
    assert outcome_of(summary) == "safe" and summary["faults"]["faulty_finalized"] == 0
    upheld = [e for e in events if e["kind"] == "dispute_resolved" and e["verdict"] == "upheld"]
    assert upheld, "the colluders' certificate was not carried on-chain"
    (slashed,) = [e for e in events if e["kind"] == "certificate_slashed"]
    assert sorted(slashed["signers"]) == ["aggregator-0", "aggregator-1", "aggregator-2"]
    stakes = [e for e in events if e["kind"] == "stakes"][-1]["aggregators"]
    assert all(stakes[s]["slashed"] for s in slashed["signers"])
    assert not stakes["aggregator-3"]["slashed"]


def test_a_carried_round_is_claimed_and_a_faulty_one_refuted_in_a_full_run(
    tmp_path: Path,
) -> None:
    """Issue 22 item 4 in a full run: every client registers a malformed update, so each round
    is carried forward with K = 0 (the only K below the step rules' minimum); the nodes still
    post claims, the one honest member refutes the 3 colluders' noisy aggregates, and the
    run ends with its honest twin's model (the initial one), every round finalized."""
    text = (SCENARIOS / "collusion-n4-f3-fault-proof.toml").read_text()
    clients = "".join(
        f'\n[[client]]\nindex = {i}\nattack = "{a}"\n'
        for i, a in enumerate(["nan", "wrong_shape", "oversized", "nan"])
    )
    path = tmp_path / "collusion-n4-f3-fault-proof-carried.toml"
    path.write_text(text.replace("\n[expect]", clients + "\n[expect]"))
    scenario = load_scenario(path)
    scenario.config.out = str(tmp_path / "out")
    summary = run_scenario(scenario).summary
    twin = run_scenario(scenario.honest_twin()).summary
    (run_dir,) = list((tmp_path / "out").glob("*carried"))
    faults = summary["faults"]
    assert outcome_of(summary) == "safe" and summary["all_rounds_finalized"]
    assert summary["final_model_digest"] == twin["final_model_digest"]
    assert faults["faulty_aggregates"] >= 1 and faults["faulty_finalized"] == 0
    assert faults["claims_refuted"] == faults["faulty_aggregates"]
    assert faults["honest_claims_refuted"] == 0 and faults["faulty_claims_unrefuted"] == 0
    # the finalized submission was an honest carried-forward claim (K = 0: nothing included)
    assert faults["claims"] == faults["faulty_aggregates"] + summary["config"]["rounds"]
    (record,) = read_events(run_dir / "rounds.jsonl")
    assert record["included"] == [] and record["updates_registered"] == 4
    assert len(record["excluded"]) == 4 and record["finalized"]
