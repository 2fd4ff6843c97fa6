#!/usr/bin/env python3
"""Take the README's dashboard screenshots in headless chromium (Playwright).

usage: .venv/bin/python scripts/dashboard_screenshots.py [--out docs]

1. ``dashboard-dispute.png``: the live view of a testnet (anvil, one process per node,
   ``scenarios/agg-noise.toml``: aggregator-0 submits a noisy aggregate in round 1),
   taken while the round is disputed: the committee's PBFT instance is running, its votes
   arriving, the challenge on the timeline.
2. ``dashboard-control.png``: the control panel with a demo started from its form, running,
   and ``fedchain experiment clients --quick`` started from the Experiment tab.
3. ``dashboard-experiment.png``: that experiment's view while it runs (units done of the
   total, the unit running now, the cells finished so far).

Needs anvil (scripts/install_tools.sh) and chromium (scripts/install_browser.sh). Everything
runs in a temporary directory and is stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.dashboard_support import DashboardProcess, browser_context  # noqa: E402


def dispute_view(dash: DashboardProcess, browser: object, runs: Path, out: Path) -> None:
    from fedchain.sim.scenario import load_scenario
    from fedchain.testnet import cluster as testnet

    scenario = load_scenario(ROOT / "scenarios" / "agg-noise.toml")
    cfg = replace(scenario.config, rounds=2, out=str(runs / "scratch"))
    directory = runs / "testnet"
    try:
        testnet.up(cfg, directory, use_ipfs=False, block_time=1.0, scenario=scenario,
                   max_seconds=600)  # fmt: skip
        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(dash.url + "view/testnet")
        page.wait_for_selector("#conn.live")
        # the moment PBFT votes are in but the verdict is not on-chain yet
        page.wait_for_selector("#current-phase[data-phase=disputed]", timeout=300_000)
        page.wait_for_selector(".dispute table.votes", timeout=30_000)
        page.wait_for_function(  # the chain's own view agrees: the round is disputed
            "document.querySelector('#chain-status').textContent.includes('PBFT dispute')",
            timeout=30_000,
        )
        page.screenshot(path=str(out / "dashboard-dispute.png"), full_page=True)
        print(f"wrote {out / 'dashboard-dispute.png'}")
        page.close()
    finally:
        testnet.down(directory)


def control_panel(dash: DashboardProcess, browser: object, out: Path) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(dash.url + "control")
    form = page.locator("#form-demo")
    form.locator("input[name=clients]").fill("6")
    form.locator("input[name=rounds]").fill("8")
    form.locator("legend", has_text="aggregation").click()
    form.locator("input[name=rule]").fill("median")
    form.locator("button[type=submit]").click()
    page.wait_for_selector("#form-demo .form-ok:not(:empty)")
    page.locator("#jobs-table a.run-link").first.wait_for(timeout=120_000)
    page.click("[data-tab=experiment]")
    ex = page.locator("#form-experiment")
    ex.locator("input[name=experiment]").fill("clients")
    ex.locator("input[name=quick]").check()
    ex.locator("input[name=seeds]").fill("3")
    ex.locator("button[type=submit]").click()
    page.wait_for_selector("#form-experiment .form-ok:not(:empty)")
    link = page.locator("#jobs-table a.run-link", has_text="experiments/").first
    link.wait_for(timeout=120_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(out / "dashboard-control.png"), full_page=True)
    print(f"wrote {out / 'dashboard-control.png'}")
    link.click()
    page.wait_for_selector("#conn.live")
    page.wait_for_function(  # a few units finished, the experiment still running
        "(() => { const p = document.querySelector('#experiment-progress');"
        " return p && p.dataset.status === 'running' && +p.dataset.done >= 2; })()",
        timeout=300_000,
    )
    page.screenshot(path=str(out / "dashboard-experiment.png"), full_page=True)
    print(f"wrote {out / 'dashboard-experiment.png'}")
    page.goto(dash.url + "control")
    stop = page.locator("#jobs-table button", has_text="stop")
    while stop.count():  # the jobs table is re-rendered after each stop
        stop.first.click()
        page.wait_for_timeout(1000)
    page.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs"), help="directory (%(default)s)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="fedchain-shots-", ignore_cleanup_errors=True) as tmp,
        browser_context(width=1360, height=900) as browser,
    ):
        runs = Path(tmp)
        dash = DashboardProcess(runs, max_seconds=1200)
        try:
            dispute_view(dash, browser, runs, out)
            control_panel(dash, browser, out)
        finally:
            dash.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
