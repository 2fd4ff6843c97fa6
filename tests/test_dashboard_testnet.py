"""A testnet watched and driven from the dashboard in a real browser: kill -9 an aggregator
from the page, restart it from the page, and watch the task complete with the faulty
aggregator slashed (anvil + one OS process per node; a shared store directory instead of
an IPFS daemon keeps it quick: the dashboard is under test here, not IPFS). One-second
blocks leave the nodes time to act inside the 3-block windows on a loaded machine."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from fedchain.sim.scenario import load_scenario
from fedchain.testnet import cluster as testnet
from tests.dashboard_support import (
    SCENARIOS,
    DashboardProcess,
    browser_context,
    pid_alive,
    require_chromium,
    screenshot,
)

pytestmark = [pytest.mark.realnet, pytest.mark.slow]


def _require_anvil() -> None:
    from adapters.services import find_anvil
    from protocol.errors import FedchainError

    try:
        find_anvil()
    except FedchainError:
        message = "anvil not installed: run scripts/install_tools.sh (make setup)"
        if os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1":
            pytest.fail(message)
        pytest.skip(message)


def test_kill_and_restart_a_testnet_node_from_the_page(tmp_path: Path) -> None:
    _require_anvil()
    require_chromium()
    scenario = load_scenario(SCENARIOS / "agg-noise.toml")
    cfg = replace(scenario.config, rounds=3, out=str(tmp_path / "scratch"))
    runs = tmp_path / "runs"
    directory = runs / "tn"
    dash = None
    try:
        spec = testnet.up(
            cfg, directory, use_ipfs=False, block_time=1.0, scenario=scenario, max_seconds=900
        )
        dash = DashboardProcess(runs)
        with browser_context() as browser:
            page = browser.new_page()
            page.goto(dash.url + "view/tn")
            page.wait_for_selector("#conn.live")
            node = "aggregator-2"
            row = page.locator(f"#nodes-table tr[data-node='{node}']")
            row.locator("button", has_text="kill").wait_for()
            old_pid = testnet.node_pid(directory, node)
            assert old_pid is not None and pid_alive(old_pid)
            row.locator("button", has_text="kill").click()
            page.wait_for_selector(f"#nodes-table tr[data-node='{node}'][data-running='no']")
            assert "killed" in page.inner_text("#action-result")
            assert not testnet.status(directory)["nodes"][node]["running"]
            screenshot(page, "testnet-node-killed")
            row.locator("button", has_text="start").click()
            page.wait_for_selector(f"#nodes-table tr[data-node='{node}'][data-running='yes']")
            new_pid = testnet.node_pid(directory, node)
            assert new_pid != old_pid and new_pid is not None and pid_alive(new_pid)
            assert testnet.status(directory)["nodes"][node]["running"]
            # the restarted node resumes from chain state; the task completes
            page.wait_for_function(
                "document.querySelector('#run-status').textContent === 'finished'",
                timeout=400_000,
            )
            final = testnet.status(directory)["chain"]
            assert final["completed"] and final["round"] == cfg.rounds
            assert int(page.inner_text("#rounds-finalized")) == cfg.rounds
            # the noisy aggregator was slashed on-chain, and the page says so
            from web3 import Web3

            from adapters.chain import Chain
            from adapters.contract import TaskContract

            task = TaskContract.at(
                Chain(Web3(Web3.HTTPProvider(spec["rpc_url"])), []), spec["task"]
            )
            agg0 = spec["nodes"][0]
            assert agg0["name"] == "aggregator-0" and task.aggregator_info(agg0["address"]).slashed
            assert page.inner_text("#slashed-aggregators") == "aggregator-0"
            stakes = page.locator("#stakes-table tr[data-aggregator='aggregator-0']")
            assert "slashed" in (stakes.get_attribute("class") or "")
            assert page.locator(".dispute[data-round='1']").count() >= 1
            # registrations come from the chain's UpdatesRegistered events: every testnet
            # client sends its own submitUpdate, so each update is shown as "alone"
            for r in range(1, cfg.rounds + 1):
                row = page.locator(f"#rounds-table tr[data-round='{r}']").first
                on_chain = len(task.updates(r))
                assert on_chain > 0
                assert int(row.locator(".registered").inner_text()) == on_chain
                how = row.locator(".registration")
                assert how.get_attribute("data-alone") == str(on_chain)
                assert how.get_attribute("data-batches") == "0"
            screenshot(page, "testnet-finished")
            page.close()
    finally:
        if dash is not None:
            dash.stop()
        testnet.down(directory)
    status = testnet.status(directory)
    assert not any(s["running"] for s in status["nodes"].values())
