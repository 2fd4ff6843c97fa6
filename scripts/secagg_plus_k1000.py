"""One ddp+secagg round under SecAgg+ on the embedded chain, at K = 1,000 by default.

Runs the in-process driver (eth-tester chain, per-node stores, 4 aggregators) for one round
of a ``ddp+secagg`` task whose mask graph is a random Harary graph of degree ``k`` with
threshold ``t`` (K = 1,000, 10 % corrupt, 30 % tolerated dropouts: k = 88, t = 36 from the
published parameter finder), with ``--offline`` clients dropping out of the round. Every
record is relayed in batches. It prints:

* whether the round finalized, the survivors, and the wall time of set-up and of the round;
* the round's gas (update registration, graph seed, reveal digests, attestations, aggregate,
  finalization) and that gas per surviving client; the reveal records alone per revealer;
* the aggregate digest re-executed by two independent aggregator views (fresh contract
  handles and views over the chain and content storage), equal to each other and to the
  digest the contract finalized.

    nice -n 10 .venv/bin/python scripts/secagg_plus_k1000.py [--clients 1000] [--offline 50]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from adapters.contract import TaskContract
from adapters.privacy_records import PrivacyRecordsContract
from adapters.round_inputs import fetch_included
from adapters.storage import get_by_digest
from aggregators.execution import execute_round
from fedchain.config import DemoConfig
from fedchain.private_view import SecAggView
from fedchain.sim.runner import Demo
from fedchain.sim.scenario import ClientBehaviour, Scenario
from privacy.spec import PrivacySpec

#: The round's operations (``attest`` also matches ``attestReveals``).
ROUND_OPS = ("submitUpdate", "pinGraphSeed", "attest", "submitAggregate", "finalize")


def reexecute(demo: Demo) -> bytes:
    """Round 1's aggregate digest re-executed from the chain and storage by a fresh view."""
    dep = demo.deployment
    task = TaskContract.at(dep.chain, dep.task.address)
    spec = PrivacySpec.from_manifest(dep.manifest.privacy)
    records = PrivacyRecordsContract(dep.chain, spec.records_contract or "")
    view = SecAggView(task, records, dep.store, dep.manifest)
    updates, payloads = fetch_included(task, dep.store, 1)
    global_payload = get_by_digest(dep.store, task.config().initial_model_digest)
    result = execute_round(
        dep.manifest,
        1,
        global_payload,
        payloads,
        [u.num_samples for u in updates],
        private=view.inputs(1, updates),
    )
    return result.digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--degree", type=int, default=88)
    parser.add_argument("--threshold", type=int, default=36)
    parser.add_argument("--corrupt-fraction", type=float, default=0.1)
    parser.add_argument("--dropout-fraction", type=float, default=0.3)
    parser.add_argument("--offline", type=int, default=50, help="clients that drop out")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--out", default="runs/secagg-plus")
    args = parser.parse_args()
    k = args.clients
    cfg = DemoConfig(
        clients=k,
        aggregators=4,
        rounds=1,
        epochs=1,
        dataset="mixture",
        model=args.model,
        min_updates=k - args.offline,
        collect_window=4,
        challenge_window=1,
        privacy="ddp+secagg",
        target_epsilon=8.0,
        clip_norm=10.0,
        dropout_fraction=args.dropout_fraction,
        corrupt_fraction=args.corrupt_fraction,
        mask_graph="harary",
        graph_degree=args.degree,
        graph_threshold=args.threshold,
        update_batch=100,
        out=args.out,
        name=f"secagg-plus-k{k}",
    )
    offline = {i: ClientBehaviour("offline", rounds=frozenset({1})) for i in range(args.offline)}
    demo = Demo(cfg, scenario=Scenario(cfg, clients=offline))
    t0 = time.perf_counter()
    summary = demo.run().summary
    wall = time.perf_counter() - t0
    events = [json.loads(x) for x in (demo.run_dir / "events.jsonl").read_text().splitlines()]
    gas: dict[str, int] = defaultdict(int)
    for name, op in summary["gas_by_operation"].items():
        gas[name] = int(op["total"])
    reveal_events = [e for e in events if e["kind"] == "records" and e["kinds"] == ["REVEAL"]]
    reveal_gas = sum(int(e["gas"]) for e in reveal_events)
    revealers = sum(int(e["count"]) for e in reveal_events)
    round_gas = reveal_gas + sum(v for n, v in gas.items() if n.startswith(ROUND_OPS))
    survivors = k - args.offline
    first = json.loads((demo.run_dir / "rounds.jsonl").read_text().splitlines()[0])
    digest_a, digest_b = reexecute(demo), reexecute(demo)
    onchain = demo.deployment.task.round_digest(1)
    dim = summary["num_parameters"]
    print(f"SecAgg+ ddp+secagg round on the embedded chain: K = {k}, d = {dim}, ", end="")
    print(f"k = {args.degree}, t = {args.threshold}, gamma = {args.corrupt_fraction}, ", end="")
    print(f"delta = {args.dropout_fraction}, {args.offline} clients offline")
    agg = first["privacy"]["aggregation"]
    print(
        f"finalized: {summary['rounds_finalized'] == 1}  included: {len(first['included'])}  ",
        end="",
    )
    print(f"dropped: {len(agg['dropped'])}  reveals: {agg['reveals']}  ", end="")
    reason = "" if "failure" not in agg else f" ({agg['failure']})"
    print(f"unmasked: {'failure' not in agg}{reason}")
    print(f"wall time: {wall:.0f} s total (set-up {summary['timings'].get('setup', 0):.0f} s)")
    print(f"round gas: {round_gas:,} = {round_gas / survivors:,.0f} per surviving client")
    for name in sorted(gas):
        if name.startswith(ROUND_OPS):
            print(f"  {name}: {gas[name]:,}")
    print(f"  reveal digests (submitReveals): {reveal_gas:,} ({revealers} digests, ", end="")
    print(f"{reveal_gas / max(1, revealers):,.0f} per revealer)")
    print(f"aggregate digest, aggregator A re-execution: {digest_a.hex()}")
    print(f"aggregate digest, aggregator B re-execution: {digest_b.hex()}")
    print(f"finalized on-chain:                          {onchain.hex()}")
    print(f"equal: {digest_a == digest_b == onchain}")
    Path(demo.run_dir / "secagg_plus.json").write_text(
        json.dumps(
            {
                "clients": k,
                "dim": dim,
                "wall_seconds": wall,
                "round_gas": round_gas,
                "gas_per_survivor": round_gas / survivors,
                "reveal_gas_per_revealer": reveal_gas / max(1, revealers),
                "digests_equal": digest_a == digest_b == onchain,
                "unmasked": "failure" not in agg,
                "included": len(first["included"]),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
