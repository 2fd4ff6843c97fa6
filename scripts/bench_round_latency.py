#!/usr/bin/env python3
"""One round's latency, phase by phase, on both backends, side by side in one run.

    .venv/bin/python scripts/bench_round_latency.py [--clients 25] [--aggregators 10]
                                                    [--rounds 1] [--json OUT.json]

Backends: (1) embedded — in-process eth-tester (py-evm) chain + on-disk content store;
(2) real — a local anvil (automine) + a js-ipfs daemon, both started by this script. The
same in-process runner drives both, so the numbers compare the backends, not the code.
Phases are summed over all nodes of the round (nodes run one after another in-process):
train, upload, register (submitUpdate), fetch, aggregate, publish, submit (submitAggregate),
verify (re-execution by every other aggregator), finalize. Gas per operation is reported.
Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fedchain.config import DemoConfig
from fedchain.sim.runner import run_demo
from protocol.metrics import PHASES as ALL_PHASES
from protocol.metrics import Progress

PHASES = [p for p in ALL_PHASES if p != "evaluate"]  # evaluation is the runner's, not the round's
OPS = ["submitUpdate", "submitUpdates", "submitAggregate", "finalize"]


def measure(cfg: DemoConfig) -> dict:
    t0 = time.perf_counter()
    result = run_demo(cfg, Progress(quiet=True))
    wall = time.perf_counter() - t0
    rounds = [json.loads(x) for x in (result.run_dir / "rounds.jsonl").read_text().splitlines()]
    phases = {p: sum(r["seconds"].get(p, 0.0) for r in rounds) / len(rounds) for p in PHASES}
    per_round_wall = sum(r["wall_seconds"] for r in rounds) / len(rounds)
    gas = result.summary["gas_by_operation"]
    return {
        "phases": phases,
        "round_wall": per_round_wall,
        "setup": result.summary["timings"]["setup"],
        "total_wall": wall,
        "gas": {op: gas[op]["mean"] for op in OPS if op in gas},
        "accuracy": result.summary["final_accuracy"],
        "final_model_digest": result.summary["final_model_digest"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=25)
    ap.add_argument("--aggregators", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="fedchain-bench-"))
    base = DemoConfig(
        clients=args.clients,
        aggregators=args.aggregators,
        rounds=args.rounds,
        out=str(out),
        challenge_window=3,
    )
    results = {"embedded": measure(replace(base, name="embedded"))}
    from adapters.services import AnvilService, IpfsService

    with AnvilService(out / "anvil") as anvil, IpfsService(out / "ipfs") as ipfs:
        real = replace(
            base,
            name="real",
            rpc_url=anvil.url,
            funding_key=anvil.funding_key,
            store="ipfs:" + ipfs.api_multiaddr,
        )
        results["anvil+ipfs"] = measure(real)
    same = results["embedded"]["final_model_digest"] == results["anvil+ipfs"]["final_model_digest"]
    print(
        f"one round, {args.clients} clients, {args.aggregators} aggregators "
        f"(mean over {args.rounds} round(s)); seconds summed over nodes\n"
    )
    print("| phase | embedded (eth-tester + local store) | anvil + js-ipfs daemon |")
    print("|---|---|---|")
    for p in PHASES:
        print(
            f"| {p} | {results['embedded']['phases'][p]:.3f} | "
            f"{results['anvil+ipfs']['phases'][p]:.3f} |"
        )
    print(
        f"| **round wall time** | {results['embedded']['round_wall']:.2f} | "
        f"{results['anvil+ipfs']['round_wall']:.2f} |"
    )
    print(
        f"| set-up (deploy, register) | {results['embedded']['setup']:.2f} | "
        f"{results['anvil+ipfs']['setup']:.2f} |"
    )
    for op in OPS:
        print(
            f"| gas {op} (mean) | {results['embedded']['gas'].get(op, 0):,.0f} | "
            f"{results['anvil+ipfs']['gas'].get(op, 0):,.0f} |"
        )
    print(f"\nsame final model on both backends: {'yes' if same else 'NO'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
