"""The chain node restarts: anvil stopped and started again from its saved state (``--state``)
in the middle of a testnet run; every node process reconnects and the task completes with
nothing lost and nothing counted twice."""

from __future__ import annotations

import os
import time
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
