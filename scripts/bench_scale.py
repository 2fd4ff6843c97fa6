#!/usr/bin/env python3
"""One round with K = 100, 300, 1000 clients: wall time by phase, gas, peak memory, engines.

    .venv/bin/python scripts/bench_scale.py [--ks 100,300,1000] [--engines sequential,ray]
                                            [--anvil-ks 1000] [--ray-cpus 2] [--epochs 1]
                                            [--repeat 1] [--json OUT]

Every configuration runs ``fedchain demo`` for one round (``--dataset mixture``: 100
samples per client, ``--model mlp``, ``--epochs 1``, 4 aggregators) in a fresh child
process, so peak memory is per configuration: ``driver`` is the driver process's peak RSS
(``resource.getrusage``), ``tree`` the peak of the summed RSS of the driver and all its
descendants (Ray's GCS, raylet and workers), sampled every 0.2 s with psutil (an upper
bound: shared library pages count once per process). Phases are the round record's
(every second charged to one phase, see ``protocol.metrics.PhaseClock``); ``rest`` is
the other phases (publish, submit, verify, finalize, evaluate, dispute, mine) plus what no
phase saw. ``setup`` (deployment, K client registrations, engine start) is outside the
round. Gas is exact: the round's total (without the setup's deployment and registrations,
which the first round's record also counts), registration per update (``submitUpdates``
batches of 100 signed records relayed by the fleet, or ``submitUpdate`` with
``--update-batch 0``), and ``submitAggregate + finalize``. The speed-up column compares a
configuration with the sequential engine on the same chain and K. Not a test: it prints
figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHOWN = ("train", "upload", "register", "fetch", "aggregate", "oracle", "drive")
#: Operations of the task's setup, which the first round's record also counts.
SETUP_OPS = ("deploy", "registerAggregator", "registerClient", "start")


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Child process: one demo round, with its peak memory."""
    import psutil

    from fedchain.config import DemoConfig
    from fedchain.sim.runner import run_demo
    from protocol.metrics import Progress

    me = psutil.Process()
    peak = {"tree": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # a process that just exited
                    total += proc.memory_info().rss
            peak["tree"] = max(peak["tree"], total)
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = Path(spec.pop("out"))
    anvil = None
    if spec.pop("anvil", False):
        from adapters.services import AnvilService

        anvil = AnvilService(out / "anvil")
        anvil.start()
        spec.update(rpc_url=anvil.url, funding_key=anvil.funding_key)
    try:
        t0 = time.perf_counter()
        result = run_demo(DemoConfig(out=str(out), **spec), Progress(quiet=True))
        total = time.perf_counter() - t0
    finally:
        stop.set()
        sampler.join()
        if anvil is not None:
            anvil.stop()
    record = json.loads((result.run_dir / "rounds.jsonl").read_text().splitlines()[0])
    gas = result.summary["gas_by_operation"]
    return {
        "seconds": record["seconds"],
        "wall": record["wall_seconds"],
        "unaccounted": record["unaccounted_seconds"],
        "setup": result.summary["timings"]["setup"],
        "total": total,
        "updates": record["updates_registered"],
        "accuracy": record["accuracy"],
        "gas_round": sum(v for op, v in record["gas"].items() if op not in SETUP_OPS),
        "gas_setup": sum(v for op, v in record["gas"].items() if op in SETUP_OPS),
        "gas_per_update": (
            gas.get("submitUpdate", {}).get("total", 0)
            + gas.get("submitUpdates", {}).get("total", 0)
        )
        / max(1, record["updates_registered"]),
        "gas_aggregate_finalize": gas["submitAggregate"]["mean"] + gas["finalize"]["mean"],
        "driver_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tree_mib": peak["tree"] / 2**20,
        "digest": result.summary["final_model_digest"],
        "finalized": result.summary["all_rounds_finalized"],
    }


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"configuration {spec} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| K | chain | engine | registration | round s | "
        + " | ".join(SHOWN)
        + " | rest | setup s | speed-up | gas/round | gas/update | agg+fin gas "
        "| driver MiB | tree MiB | acc |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    base: dict[tuple[int, str], float] = {}
    for r in rows:
        if r["engine"] == "sequential" and r["batch"]:
            base[(r["k"], r["chain"])] = r["wall"]
    for r in rows:
        sec = r["seconds"]
        shown = [sec.get(p, 0.0) for p in SHOWN]
        rest = r["wall"] - sum(shown)
        ref = base.get((r["k"], r["chain"]))
        speed = f"{ref / r['wall']:.2f}x" if ref else "-"
        lines.append(
            f"| {r['k']} | {r['chain']} | {r['engine']} | "
            f"{'batches of ' + str(r['batch']) if r['batch'] else 'alone'} | {r['wall']:.1f} | "
            + " | ".join(f"{v:.2f}" for v in shown)
            + f" | {rest:.2f} | {r['setup']:.1f} | {speed} | {r['gas_round']:,} | "
            f"{r['gas_per_update']:,.0f} | {r['gas_aggregate_finalize']:,.0f} | "
            f"{r['driver_mib']:.0f} | {r['tree_mib']:.0f} | {r['accuracy']:.3f} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="100,300,1000", help="client counts (%(default)s)")
    ap.add_argument("--engines", default="sequential,ray", help="(%(default)s)")
    ap.add_argument(
        "--anvil-ks", default="1000", help="client counts also run on anvil ('' for none)"
    )
    ap.add_argument("--ray-cpus", type=int, default=2, help="local Ray instance CPUs")
    ap.add_argument(
        "--epochs", type=int, default=1, help="local epochs: more makes training dominate"
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per configuration; the one with the shortest round is shown (a shared "
        "machine's load only ever adds time)",
    )
    ap.add_argument(
        "--update-batch", type=int, default=100, help="records per relayed batch, 0: alone"
    )
    ap.add_argument(
        "--alone-ks",
        default="100,300,1000",
        help="client counts also run with every client sending its own submitUpdate "
        "(embedded chain, sequential engine; '' for none)",
    )
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(json.loads(args.one))))
        return 0
    out = Path(tempfile.mkdtemp(prefix="fedchain-bench-scale-"))
    engines = [e for e in args.engines.split(",") if e]
    batch = args.update_batch
    plan = [(int(k), "embedded", e, batch) for k in args.ks.split(",") if k for e in engines]
    plan += [(int(k), "embedded", "sequential", 0) for k in args.alone_ks.split(",") if k]
    plan += [(int(k), "anvil", e, batch) for k in args.anvil_ks.split(",") if k for e in engines]
    rows = []
    for k, chain, engine, batch in plan:
        spec: dict[str, Any] = {
            "clients": k,
            "rounds": 1,
            "epochs": args.epochs,
            "dataset": "mixture",
            "challenge_window": 1,
            "engine": engine,
            "update_batch": batch,
            "name": f"k{k}-{chain}-{engine}-b{batch}",
            "out": str(out),
            "anvil": chain == "anvil",
        }
        if engine == "ray":
            spec["ray_cpus"] = args.ray_cpus
        print(
            f"running K={k} on {chain} with {engine}, batch {batch} ...",
            file=sys.stderr,
            flush=True,
        )
        runs = [measure(dict(spec)) for _ in range(max(1, args.repeat))]
        best = min(runs, key=lambda r: r["wall"])
        row = {"k": k, "chain": chain, "engine": engine, "batch": batch, **best}
        row["repeats"] = len(runs)
        rows.append(row)
        print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
    digests = {(r["k"], r["chain"]): set() for r in rows}
    for r in rows:
        digests[(r["k"], r["chain"])].add(r["digest"])
    print(table(rows))
    same = all(len(d) == 1 for d in digests.values())
    print(
        "\nfinal model byte-identical across engines and registration paths for every "
        f"(K, chain): {same}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
