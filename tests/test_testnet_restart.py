"""The chain node restarts: anvil stopped and started again from its saved state (``--state``)
in the middle of a testnet run; every node process reconnects and the task completes with
nothing lost and nothing counted twice."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fedchain.config import DemoConfig
from fedchain.testnet import cluster as testnet
from tests.test_testnet import _events, _wait_for

pytestmark = [pytest.mark.realnet, pytest.mark.slow]


def test_nodes_survive_an_anvil_restart_with_state(tmp_path: Path) -> None:
    from adapters.services import find_anvil
    from protocol.errors import FedchainError

    try:
        find_anvil()
    except FedchainError:
        if os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1":
            pytest.fail("anvil not installed: run scripts/install_tools.sh (make setup)")
        pytest.skip("anvil not installed: run scripts/install_tools.sh (make setup)")
    cfg = DemoConfig(
        clients=3,
        aggregators=4,
        rounds=3,
        epochs=1,
        challenge_window=2,
        submit_timeout=6,
        attest_window=6,
        out=str(tmp_path / "runs"),
    )
    directory = tmp_path / "tn"
    try:
        spec = testnet.up(cfg, directory, use_ipfs=False, block_time=0.5, max_seconds=600)
        _wait_for(
            lambda: any(e["action"] == "submitUpdate" for e in _events(directory, "client-1")),
            120,
            "client-1's first update",
        )
        from web3 import Web3

        from adapters.chain import Chain
        from adapters.contract import TaskContract

        def task() -> TaskContract:
            return TaskContract.at(
                Chain(Web3(Web3.HTTPProvider(spec["rpc_url"])), []), spec["task"]
            )

        before = task().chain.block_number()
        testnet.restart_chain(directory, downtime=2.0)
        after = task().chain.block_number()
        assert after >= before  # the same chain, not a fresh one
        assert task().task_started()
        final = testnet.wait(directory, timeout=500)["chain"]
        assert final["completed"] and final["round"] == 3
        t = task()
        for r in (1, 2, 3):
            clients = [u.client for u in t.updates(r)]
            assert len(clients) == cfg.clients == len(set(clients))
        # the nodes noticed the outage (retried) and carried on
        logs = [e for n in spec["nodes"] for e in _events(directory, n["name"])]
        assert any(e["action"] == "retry" for e in logs)
        assert not any(e["action"] == "error" for e in logs)
    finally:
        testnet.down(directory)
    time.sleep(0.1)
    status = testnet.status(directory)
    assert not any(s["running"] for s in status["services"].values())


def test_aggregator_killed_mid_dispute_restarts_from_its_signed_state(tmp_path: Path) -> None:
    """Issue 20, item 8 on real processes: an honest aggregator is killed (-9) once its PBFT
    replica has signed something for the round-1 dispute and started again. It comes back
    from DIR/pbft/NAME.state in the view and at the sequence number it left, and the dispute
    resolves with one verdict (faulty: the noisy submitter is slashed)."""
    import json

    from adapters.services import find_anvil
    from fedchain.sim.scenario import load_scenario
    from fedchain.testnet.netem import LinkProfile
    from fedchain.testnet.pbft_service import state_path
    from protocol.errors import FedchainError
    from tests.test_testnet import SCENARIOS

    try:
        find_anvil()
    except FedchainError:
        if os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1":
            pytest.fail("anvil not installed: run scripts/install_tools.sh (make setup)")
        pytest.skip("anvil not installed: run scripts/install_tools.sh (make setup)")
    scenario = load_scenario(SCENARIOS / "agg-noise.toml")  # aggregator 0 lies in round 1
    cfg = replace(scenario.config, rounds=2, out=str(tmp_path / "runs"))
    directory = tmp_path / "tn"
    victim = "aggregator-2"
    try:
        # PBFT frames take 0.75 s per hop (netem proxies), so the victim, killed as soon as its
        # first vote is on disk, is most likely killed between its prepare and its commit
        spec = testnet.up(
            cfg,
            directory,
            use_ipfs=False,
            block_time=0.5,
            scenario=scenario,
            max_seconds=600,
            pbft_netem=LinkProfile(latency=0.75),
        )
        path = state_path(spec, victim)
        _wait_for(
            lambda: any(e["action"] == "pbft-start" for e in _events(directory, victim)),
            300,
            f"{victim} starting PBFT on the round-1 dispute",
        )
        _wait_for(path.exists, 60, f"{victim}'s signed state on disk")
        assert testnet.kill_node(directory, victim)
        saved = json.loads(path.read_bytes())
        signed = saved["slots"] or saved["lastExecuted"] or saved["ownViewChange"]
        assert signed, "the replica had signed nothing for the dispute"
        time.sleep(1.0)
        testnet.start_node(directory, victim)
        _wait_for(
            lambda: any(e["action"] == "pbft-restored" for e in _events(directory, victim)),
            60,
            f"{victim} restoring its replica",
        )
        restored = next(e for e in _events(directory, victim) if e["action"] == "pbft-restored")
        print(f"\n{victim} killed with view {saved['view']}, last executed {saved['lastExecuted']}")
        assert restored["view"] == saved["view"]
        assert restored["last_executed"] == saved["lastExecuted"]
        assert restored["low_water"] == saved["h"]
        final = testnet.wait(directory, timeout=500)["chain"]
        assert final["completed"] and final["round"] == 2
        logs = [e for n in spec["nodes"] for e in _events(directory, n["name"])]
        verdicts = {e["verdict"] for e in logs if e["action"] == "pbft-decided" and e["round"] == 1}
        assert verdicts == {"faulty"}, verdicts
        from web3 import Web3

        from adapters.chain import Chain
        from adapters.contract import TaskContract

        task = TaskContract.at(Chain(Web3(Web3.HTTPProvider(spec["rpc_url"])), []), spec["task"])
        assert task.aggregator_info(spec["nodes"][0]["address"]).slashed
        honest = [n for n in spec["nodes"] if n["role"] == "aggregator"][1:]
        assert not any(task.aggregator_info(n["address"]).slashed for n in honest)
        assert not any(e["action"] == "error" for e in logs)
    finally:
        testnet.down(directory)
