#!/usr/bin/env python3
"""Time from a chain event to its appearance on the dashboard page, in a real browser.

usage: .venv/bin/python scripts/bench_dashboard_latency.py [--scenarios A.toml ...]
       [--no-testnet] [--no-in-process] [--rounds N]

Starts ``fedchain dashboard`` (a subprocess, loopback, bounded) and headless chromium
(Playwright, /usr/bin/chromium), then:

1. In-process runs (``fedchain run SCENARIO``): every event of ``events.jsonl`` carries the
   time ``t`` the driver wrote it, right after the transaction's receipt (or the view read)
   that it reports. The page records, for every server-sent update it applies, the browser's
   clock and the number of events folded so far; an event's latency is the first update that
   includes it minus its ``t``. Events written before the page connected are not counted.
2. A testnet (anvil, one process per node): a node logs each transaction right after its
   receipt. A MutationObserver in the page timestamps the first DOM change that shows a
   client's update registered (the round's k-th registration: the count reaches k), an
   aggregate's submitter, a challenge, or a round finalized; the latency is that minus the
   node's log time. Lines logged before the page was live are not counted.

Browser, dashboard and runs share one clock (one machine). Prints one table per part
(median, 95th percentile and maximum in milliseconds).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.dashboard_support import DashboardProcess, browser_context, wait_for  # noqa: E402

OBSERVER = """
() => {
  window.__seen = [];
  const snap = () => {
    const cells = Array.from(document.querySelectorAll('#rounds-table tbody tr[data-round]'));
    return {
      at: Date.now(),
      finalized: parseInt((document.querySelector('#rounds-finalized') || {}).textContent || '0'),
      rows: cells.map(tr => {
        const td = tr.querySelectorAll('td');
        const off = td.length === 13 ? 3 : 0;  // the first row of a round has 3 more cells
        const reg = tr.querySelector('.registered');
        return {round: tr.dataset.round, attempt: tr.dataset.attempt,
                registered: reg ? parseInt(reg.textContent) : null,
                submitter: td[off + 2] ? td[off + 2].textContent.trim() : '-',
                challenges: td[off + 4] ? td[off + 4].textContent.trim() : '-'};
      }),
    };
  };
  new MutationObserver(() => window.__seen.push(snap())).observe(document.body,
    {subtree: true, childList: true, characterData: true});
}
"""


def percentiles(ms: list[float]) -> tuple[float, float, float]:
    """Median, 95th percentile (nearest rank) and maximum."""
    ordered = sorted(ms)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    return statistics.median(ordered), p95, ordered[-1]


def in_process(dash: DashboardProcess, browser: Any, runs: Path, scenario: Path) -> list[float]:
    out = runs / "bench"
    before = set(out.iterdir()) if out.is_dir() else set()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedchain.cli", "run", str(scenario), "--out", str(out), "--quiet"],
        cwd=ROOT,
    )
    run = wait_for(
        lambda: (
            next(
                (p for p in out.iterdir() if p not in before and (p / "events.jsonl").exists()),
                None,
            )
            if out.is_dir()
            else None
        ),
        120,
        "the run directory",
        interval=0.02,
    )
    page = browser.new_page()
    page.goto(dash.url + "view/" + run.relative_to(runs).as_posix())
    page.wait_for_function(
        "document.querySelector('#run-status').textContent === 'finished'", timeout=300_000
    )
    proc.wait(120)
    applied = page.evaluate("window.__fedchain.applied")
    page.close()
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    connected = applied[0]["at"] / 1000
    latencies = []
    for i, event in enumerate(events):
        if event["t"] <= connected:
            continue
        first = next((a for a in applied if (a.get("n_events") or 0) > i), None)
        if first is not None:
            latencies.append(first["at"] - event["t"] * 1000)
    return latencies


def testnet_latencies(dash: DashboardProcess, browser: Any, runs: Path, rounds: int) -> dict:
    from fedchain.sim.scenario import load_scenario
    from fedchain.testnet import cluster as testnet

    scenario = load_scenario(ROOT / "scenarios" / "agg-noise.toml")
    cfg = replace(scenario.config, rounds=rounds, out=str(runs / "scratch"))
    directory = runs / "tn-bench"
    try:
        testnet.up(cfg, directory, use_ipfs=False, block_time=1.0, scenario=scenario,
                   max_seconds=600)  # fmt: skip
        page = browser.new_page()
        page.goto(dash.url + "view/tn-bench")
        page.wait_for_selector("#conn.live")
        page.evaluate(OBSERVER)
        connected = page.evaluate("Date.now()")
        page.wait_for_function(
            "document.querySelector('#run-status').textContent === 'finished'", timeout=600_000
        )
        seen = page.evaluate("window.__seen")
        page.close()
    finally:
        testnet.down(directory)
    logs = []
    for path in (directory / "logs").glob("*.log"):
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                logs.append(json.loads(line))
    out: dict[str, list[float]] = {
        "update registered": [],
        "aggregate submitted": [],
        "challenge": [],
        "finalized": [],
    }
    registrations: dict[int, list[float]] = {}
    # as for in-process runs, only what happened after the page was live counts (earlier
    # lines reach it with the page's first load)
    logs = [e for e in logs if e["t"] * 1000 >= connected]
    for e in sorted(logs, key=lambda e: e["t"]):
        if e["action"] == "submitUpdate":
            registrations.setdefault(int(e["round"]), []).append(e["t"] * 1000)
    for round_, times in registrations.items():
        for k, t in enumerate(times, start=1):  # the page's count reaches k
            hit = next(
                (s for s in seen for r in s["rows"] if r["round"] == str(round_)
                 and (r["registered"] or 0) >= k),
                None,
            )  # fmt: skip
            if hit is not None and hit["at"] >= t:
                out["update registered"].append(hit["at"] - t)
    for e in logs:
        t = e["t"] * 1000
        if e["action"] == "submitAggregate":
            hit = next(
                (s for s in seen for r in s["rows"] if r["round"] == str(e["round"])
                 and r["attempt"] == str(e["attempt"]) and r["submitter"] == e["node"]),
                None,
            )  # fmt: skip
            key = "aggregate submitted"
        elif e["action"] == "challenge":
            hit = next(
                (s for s in seen for r in s["rows"] if r["round"] == str(e["round"])
                 and r["attempt"] == str(e["attempt"]) and e["node"] in r["challenges"]),
                None,
            )  # fmt: skip
            key = "challenge"
        elif e["action"] == "finalize":
            hit = next((s for s in seen if s["finalized"] >= e["round"]), None)
            key = "finalized"
        else:
            continue
        if hit is not None and hit["at"] >= t:
            out[key].append(hit["at"] - t)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=[str(ROOT / "scenarios" / n) for n in ("agg-noise.toml", "agg-scale.toml",
                                                         "collusion-n4-f1.toml")],
    )  # fmt: skip
    parser.add_argument("--no-testnet", action="store_true", help="skip the testnet part")
    parser.add_argument("--no-in-process", action="store_true", help="skip the in-process runs")
    parser.add_argument("--rounds", type=int, default=3, help="testnet rounds (%(default)s)")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="fedchain-latency-", ignore_cleanup_errors=True) as tmp,
        browser_context() as br,
    ):
        runs = Path(tmp)
        dash = DashboardProcess(runs, max_seconds=1800)
        try:
            everything: list[float] = []
            if not args.no_in_process:
                print("in-process runs: events.jsonl line written -> page updated (ms)")
                print("| scenario | events | p50 | p95 | max |\n|---|---|---|---|---|")
            for scenario in [] if args.no_in_process else args.scenarios:
                ms = in_process(dash, br, runs, Path(scenario))
                everything += ms
                med, p90, top = percentiles(ms)
                print(f"| {Path(scenario).stem} | {len(ms)} | {med:.0f} | {p90:.0f} | {top:.0f} |")
            if everything:
                med, p90, top = percentiles(everything)
                print(f"| **all** | {len(everything)} | {med:.0f} | {p90:.0f} | {top:.0f} |")
            if not args.no_testnet:
                print("\ntestnet (anvil, block time 1 s): node's log line after the receipt -> "
                      "the page shows it (ms)")  # fmt: skip
                print("| event | count | p50 | p95 | max |\n|---|---|---|---|---|")
                per_kind = testnet_latencies(dash, br, runs, args.rounds)
                allt: list[float] = []
                for kind, ms in per_kind.items():
                    allt += ms
                    if ms:
                        med, p90, top = percentiles(ms)
                        print(f"| {kind} | {len(ms)} | {med:.0f} | {p90:.0f} | {top:.0f} |")
                if allt:
                    med, p90, top = percentiles(allt)
                    print(f"| **all** | {len(allt)} | {med:.0f} | {p90:.0f} | {top:.0f} |")
        finally:
            dash.stop()
    print(f"\nmachine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    time.tzset()
    sys.exit(main())
