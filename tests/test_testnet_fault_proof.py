"""Issue 22 across processes: the testnet's aggregator processes play the fault-proof games
(``dispute = "fault-proof"``) against colluders who under PBFT alone are a quorum."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from fedchain.sim.scenario import load_scenario
from fedchain.testnet import cluster as testnet

pytestmark = pytest.mark.realnet

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _logs(directory: Path, name: str) -> list[dict]:
    path = directory / "logs" / f"{name}.log"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]


def test_testnet_processes_refute_and_reject_the_colluders_claims(tmp_path: Path) -> None:
    from adapters.services import find_anvil
    from protocol.errors import FedchainError

    try:
        find_anvil()
    except FedchainError:
        if os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1":
            pytest.fail("anvil not installed: run scripts/install_tools.sh (make setup)")
        pytest.skip("anvil not installed: run scripts/install_tools.sh (make setup)")
    scenario = load_scenario(SCENARIOS / "collusion-n4-f3-fault-proof.toml")
    # a generous slot: a colluder that still misses it (a loaded machine) times out instead of
    # being refuted, which the assertions below accept
    cfg = replace(scenario.config, rounds=1, out=str(tmp_path / "runs"), submit_timeout=40)
    directory = tmp_path / "tn"
    try:
        spec = testnet.up(
            cfg, directory, use_ipfs=False, block_time=0.5, scenario=scenario, max_seconds=600
        )
        assert spec.get("fault_games")
        final = testnet.wait(directory, timeout=400)["chain"]
        from web3 import Web3

        from adapters.chain import Chain
        from adapters.faultproof import FaultGamesContract

        chain = Chain(Web3(Web3.HTTPProvider(spec["rpc_url"])), [])
        games = FaultGamesContract(chain, spec["fault_games"])
        logs = {n["name"]: _logs(directory, n["name"]) for n in spec["nodes"]}
        claims = [e for n in logs.values() for e in n if e["action"] == "game-postClaim"]
        refuted = [c for c in claims if games.view("refuted", int(c["id"]))]
        from adapters.contract import TaskContract

        task = TaskContract.at(chain, spec["task"])
        slashed = {
            n["name"]: task.aggregator_info(n["address"]).slashed
            for n in spec["nodes"]
            if n["role"] == "aggregator"
        }
    finally:
        testnet.down(directory)
    assert claims, "no claim was posted"
    # the task rejected each refuted aggregate and slashed its submitter; the honest
    # process's aggregate was finalized
    assert final["completed"]
    assert slashed["aggregator-3"] is False
    for name in ("aggregator-0", "aggregator-1", "aggregator-2"):
        # each colluder submitted and was slashed, or missed its slot (the process was too
        # slow to post its claim and submit before the deadline: a timeout, not a dispute)
        late = any(
            e["action"] == "submitAggregate-refused" and e.get("error") == "SubmitDeadlinePassed"
            for e in logs[name]
        )
        assert slashed[name] or late, name
    assert sum(slashed.values()) >= 1
    assert any(e["action"] == "rejectRefuted" for e in logs["aggregator-3"])
    # the colluders' claims are refuted by the honest process alone, with a one-step proof
    assert any(e["action"] == "game-prove" for e in logs["aggregator-3"])
    assert refuted and all(c["node"] != "aggregator-3" for c in refuted)
    for name in ("aggregator-0", "aggregator-1", "aggregator-2"):
        assert not any(e["action"] in ("game-openLeaf", "game-openDescent") for e in logs[name])
