"""The local testnet on real parts: anvil (+ an IPFS daemon when installed), one OS process
per node, PBFT over TCP between aggregator processes, kill -9 and restart."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fedchain.sim.runner import Demo
from fedchain.sim.scenario import load_scenario
from fedchain.testnet import cluster as testnet

pytestmark = pytest.mark.realnet

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _tools() -> tuple[bool, bool]:
    from adapters.services import find_anvil, find_jsipfs
    from protocol.errors import FedchainError

    try:
        find_anvil()
    except FedchainError:
        return False, False
    if os.environ.get("FEDCHAIN_TEST_NO_IPFS") == "1":
        return True, False
    try:
        find_jsipfs()
    except FedchainError:
        return True, False
    return True, True


def _events(directory: Path, name: str) -> list[dict]:
    path = directory / "logs" / f"{name}.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def _wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_testnet_faulty_aggregator_and_kill_restart(tmp_path: Path) -> None:
    has_anvil, has_ipfs = _tools()
    if not has_anvil or (not has_ipfs and os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1"):
        message = "anvil / js-ipfs not installed: run scripts/install_tools.sh (make setup)"
        if os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1":
            pytest.fail(message)
        pytest.skip(message)
    scenario = load_scenario(SCENARIOS / "agg-noise.toml")
    cfg = replace(scenario.config, rounds=3, out=str(tmp_path / "runs"))
    directory = tmp_path / "tn"
    try:
        spec = testnet.up(
            cfg, directory, use_ipfs=has_ipfs, block_time=0.5, scenario=scenario, max_seconds=900
        )
        assert len(spec["nodes"]) == cfg.clients + cfg.aggregators
        # kill -9 a client right after its round-1 update, and an honest aggregator.
        _wait_for(
            lambda: any(e["action"] == "submitUpdate" for e in _events(directory, "client-2")),
            120,
            "client-2's first update",
        )
        assert testnet.kill_node(directory, "client-2")
        assert testnet.kill_node(directory, "aggregator-2")
        time.sleep(2.0)
        testnet.start_node(directory, "client-2")
        testnet.start_node(directory, "aggregator-2")
        final = testnet.wait(directory, timeout=600)["chain"]
        assert final["completed"] and final["round"] == 3

        # Nothing lost, nothing counted twice: each client has one update per round.
        from web3 import Web3

        from adapters.chain import Chain
        from adapters.contract import TaskContract

        chain = Chain(Web3(Web3.HTTPProvider(spec["rpc_url"])), [])
        task = TaskContract.at(chain, spec["task"])
        for r in (1, 2, 3):
            clients = [u.client for u in task.updates(r)]
            assert len(clients) == cfg.clients == len(set(clients))
        submitted = [
            e["round"] for e in _events(directory, "client-2") if e["action"] == "submitUpdate"
        ]
        assert sorted(submitted) == [1, 2, 3]
        # The faulty aggregate was challenged and rejected through PBFT over TCP.
        logs = [e for n in spec["nodes"] for e in _events(directory, n["name"])]
        assert any(e["action"] == "challenge" for e in logs)
        assert any(e["action"] == "resolveDispute" for e in logs)
        assert task.aggregator_info(spec["nodes"][0]["address"]).slashed
    finally:
        testnet.down(directory)
    status = testnet.status(directory)
    assert not any(s["running"] for s in status["nodes"].values())
    assert not any(s["running"] for s in status["services"].values())

    # Same code, same bytes: the embedded in-process run ends in the same global model.
    embedded = Demo(replace(cfg, rpc_url=None, store=None, funding_key=None)).run().summary
    assert embedded["final_model_digest"] == final["global_model_digest"]


def test_testnet_runs_ddp_with_secure_aggregation_across_processes(tmp_path: Path) -> None:
    """Six client processes mask Skellam-noised updates, register their keys and reveal
    their shares on-chain themselves; four aggregator processes unmask the sum from that
    published material alone, and a noisy aggregate is rejected through PBFT over TCP."""
    has_anvil, has_ipfs = _tools()
    if not has_anvil:
        message = "anvil not installed: run scripts/install_tools.sh (make setup)"
        if os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1":
            pytest.fail(message)
        pytest.skip(message)
    scenario = load_scenario(SCENARIOS / "secagg-agg-noise.toml")
    cfg = replace(scenario.config, out=str(tmp_path / "runs"))
    directory = tmp_path / "tn"
    try:
        spec = testnet.up(
            cfg, directory, use_ipfs=has_ipfs, block_time=0.5, scenario=scenario, max_seconds=900
        )
        final = testnet.wait(directory, timeout=600)["chain"]
        assert final["completed"] and final["round"] == cfg.rounds
        logs = [e for n in spec["nodes"] for e in _events(directory, n["name"])]
        # every client process published its own key, key record and reveals
        for i in range(cfg.clients):
            actions = {e["action"] for e in _events(directory, f"client-{i}")}
            assert {"record-ENC_KEY", "record-MASK_KEY", "record-REVEAL"} <= actions
        submitted = [e for e in logs if e["action"] == "submitAggregate"]
        assert all("failure" not in e["privacy"] for e in submitted)
        assert any(e["action"] == "challenge" for e in logs)
        assert any(e["action"] == "resolveDispute" for e in logs)
        assert spec["config"]["privacy"] == "ddp+secagg"
    finally:
        testnet.down(directory)
    # Same code, same bytes: the embedded in-process run ends in the same global model.
    run_cfg = replace(cfg, **testnet.reveal_timing(cfg, 0.5))
    embedded = Demo(replace(run_cfg, rpc_url=None, store=None, funding_key=None)).run().summary
    assert embedded["final_model_digest"] == final["global_model_digest"]
