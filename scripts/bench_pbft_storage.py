"""What PBFT stable storage costs: writes, bytes and seconds per persisted state.

    .venv/bin/python scripts/bench_pbft_storage.py [--n 4] [--disputes 40] [--dir /tmp/x]

Runs ``--disputes`` disputes one after another among ``--n`` honest replicas on the memnet,
three times: without stable storage, with the in-memory store (snapshot CPU only) and with
the file store (snapshot + write + fsync + rename + directory fsync, in ``--dir``). Prints
one line per mode: persisted states per decided dispute, bytes per state (mean, max), and
milliseconds per persisted state (CPU of the snapshot; wall time of the file write).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from eth_utils.crypto import keccak

from consensus.memnet import SIM_DOMAIN, MemNet, NetConfig, simulation_accounts
from consensus.messages import Instance
from consensus.pbft import Node, Replica, ReplicaConfig
from consensus.stable_store import FileStore, StableStore

SNAPSHOT = {"calls": 0, "seconds": 0.0}


def _timed_snapshot() -> None:
    """Count the CPU the replicas spend building snapshots (the cost storage adds in-process)."""
    import consensus.pbft.replica as rep

    inner: Callable[[Replica], bytes] = getattr(rep, "snapshot")  # noqa: B009 - replaced below

    def timed(r: Replica) -> bytes:
        t = time.process_time()
        out = inner(r)
        SNAPSHOT["seconds"] += time.process_time() - t
        SNAPSHOT["calls"] += 1
        return out

    setattr(rep, "snapshot", timed)  # noqa: B010


def run(n: int, disputes: int, mode: str, directory: Path) -> dict[str, float]:
    accounts = simulation_accounts(n)
    committee = [a.address for a in accounts]
    cfg = replace(ReplicaConfig(), stable_storage=mode != "off")
    nodes: list[Node] = [
        Replica(i, committee, accounts[i], SIM_DOMAIN, lambda _x: True, cfg) for i in range(n)
    ]
    net = MemNet(nodes, NetConfig(max_delay=2), seed=1)
    if mode == "file":
        stores: dict[int, StableStore] = {
            i: FileStore(directory / f"replica-{i}.state") for i in range(n)
        }
        net.stores = stores
    SNAPSHOT.update(calls=0, seconds=0.0)
    cpu, wall = time.process_time(), time.perf_counter()
    for r in range(1, disputes + 1):
        inst = Instance(
            SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, r, 0, keccak(text=str(r))
        )
        net.start(inst)

        def done(x: MemNet, inst: Instance = inst) -> bool:
            return x.decided(inst, range(n))

        if not net.run_until(done, 2000):
            raise SystemExit(f"dispute {r} not decided")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    writes = sum(s.stats.writes for s in net.stores.values())
    size = sum(s.stats.bytes for s in net.stores.values())
    spent = sum(s.stats.seconds for s in net.stores.values())
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "writes": writes,
        "writes_per_dispute_per_replica": writes / disputes / n,
        "mean_bytes": size / writes if writes else 0.0,
        "max_bytes": max(s.stats.max_size for s in net.stores.values()),
        "write_ms": 1000 * spent / writes if writes else 0.0,
        "messages": net.stats.sent,
        "snapshot_ms": 1000 * SNAPSHOT["seconds"] / max(1, SNAPSHOT["calls"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--disputes", type=int, default=40)
    ap.add_argument("--dir", default=None, help="where the file store writes (default: a tmp dir)")
    args = ap.parse_args()
    _timed_snapshot()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = {m: run(args.n, args.disputes, m, Path(tmp)) for m in ("off", "memory", "file")}
    for mode, r in results.items():
        print(
            f"{mode:6s} n={args.n} disputes={args.disputes}: cpu {r['cpu_s']:.2f} s, "
            f"wall {r['wall_s']:.2f} s, {r['messages']} messages, "
            f"{r['writes']} states persisted ({r['writes_per_dispute_per_replica']:.1f} per "
            f"dispute per replica), {r['mean_bytes']:.0f} B mean / {r['max_bytes']} B max, "
            f"write {r['write_ms']:.3f} ms/state, snapshot CPU {r['snapshot_ms']:.3f} ms/state"
        )


if __name__ == "__main__":
    main()
