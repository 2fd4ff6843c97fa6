#!/usr/bin/env python3
"""PBFT time to decision under emulated WAN latency, between separate processes.

For each one-way latency (default 50, 150 and 300 ms; jitter a fifth of it; 5 % of messages
lost) the script starts ``--runs`` fresh committees. Each committee is ``--n`` replica
processes (this script with ``--replica``; keys are the simulation keys, never real) whose
PBFT links all go through one ``fedchain.testnet.netem`` proxy process (one proxy per
directed link).
After a warm-up that lets the transports measure round-trip times, it runs ``--disputes``
disputes one after the other (all replicas observe each at the same moment), then crashes
the current primary and runs one more dispute, which needs a view change.

Printed per latency: the quorum RTO the replicas measured and the request timeout derived
from it; time to decision (the first replica holding a commit certificate, which is what goes
on-chain) and until every live replica decided, as median and p90 over all disputes; view
changes; and the proxy's frame counts. Times are wall-clock on this machine (2 shared cores):
compare columns, not absolute figures.

    .venv/bin/python scripts/bench_pbft_wan.py                 # the table (about 5 minutes)
    .venv/bin/python scripts/bench_pbft_wan.py --latencies 150 --runs 1 --disputes 3 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from eth_utils import keccak

from consensus.memnet import SIM_DOMAIN, simulation_accounts
from consensus.messages import Instance
from consensus.pbft import Decide, Replica
from consensus.quorums import max_faulty
from consensus.tcp import TcpNode
from fedchain.testnet.netem import LinkProfile, mesh_links, spawn_netem, stop_netem

# ---- one replica process -----------------------------------------------------------------


def _instance(r: int) -> Instance:
    return Instance(
        SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, r, 0, keccak(text=f"bench/{r}")
    )


def _verdict(instance: Instance) -> bool:
    return instance.round % 3 == 0


def _emit(**record: Any) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


async def _replica_main(index: int, n: int, max_seconds: float) -> None:
    accounts = simulation_accounts(n)
    members = [a.address for a in accounts]
    replica = Replica(index, members, accounts[index], SIM_DOMAIN, _verdict)
    loop = asyncio.get_running_loop()

    def decided(d: Decide) -> None:
        _emit(decided=d.instance.round, t=time.monotonic(), view=d.certificate.view)

    node = TcpNode(replica, ping_interval=0.5, on_decide=decided)
    _emit(listen=list(await node.start()))
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    deadline = loop.time() + max_seconds
    try:
        while loop.time() < deadline:
            try:
                line = await asyncio.wait_for(reader.readline(), deadline - loop.time())
            except TimeoutError:
                break
            if not line:
                break
            cmd = json.loads(line)
            if "peers" in cmd:
                node.set_peers({int(j): (str(a[0]), int(a[1])) for j, a in cmd["peers"].items()})
            elif "start" in cmd:
                node.submit(_instance(int(cmd["start"])))
            elif "report" in cmd:
                _emit(report={"stats": replica.stats, "view": replica.view, **node.timing()})
            elif "crash" in cmd:
                await node.stop()  # a crashed member: its port closes, it says nothing more
            elif "stop" in cmd:
                break
    finally:
        await node.stop()


# ---- the orchestrator --------------------------------------------------------------------


class Committee:
    """``n`` replica processes behind one netem process; commands over stdin, events back."""

    def __init__(self, n: int, profile: LinkProfile, seed: int, workdir: Path, budget: float):
        self.n = n
        self.events: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()
        self.procs: list[subprocess.Popen[str]] = []
        self.pid_file: Path | None = None
        for i in range(n):
            proc = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--replica",
                    str(i),
                    "--n",
                    str(n),
                    "--max-seconds",
                    str(budget),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.procs.append(proc)
            threading.Thread(target=self._pump, args=(i, proc), daemon=True).start()
        listen = {i: tuple(self.expect(i, "listen", 60)["listen"]) for i in range(n)}
        links = mesh_links({i: (str(a[0]), int(a[1])) for i, a in listen.items()}, profile, seed)
        _, self.pid_file, addresses = spawn_netem(links, workdir, max_seconds=budget)
        self.netem_log = workdir / "netem.log"
        for i in range(n):
            routes = {str(j): list(addresses[f"{i}->{j}"]) for j in range(n) if j != i}
            self.send(i, peers=routes)

    def _pump(self, i: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                self.events.put((i, json.loads(line)))

    def send(self, i: int, **cmd: Any) -> None:
        proc = self.procs[i]
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(json.dumps(cmd) + "\n")
            proc.stdin.flush()

    def expect(self, i: int, key: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        held = []
        try:
            while True:
                j, ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
                if j == i and key in ev:
                    return ev
                held.append((j, ev))
        finally:
            for item in held:
                self.events.put(item)

    def dispute(self, r: int, live: list[int], timeout: float) -> dict[str, Any]:
        """Start dispute ``r`` at every live replica; wait until all of them decided."""
        t0 = time.monotonic()
        for i in live:
            self.send(i, start=r)
        times: dict[int, float] = {}
        views: set[int] = set()
        while len(times) < len(live) and time.monotonic() - t0 < timeout:
            try:
                i, ev = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            if ev.get("decided") == r:
                times[i] = ev["t"] - t0
                views.add(int(ev["view"]))
        return {
            "first": min(times.values()) if times else None,
            "all": max(times.values()) if len(times) == len(live) else None,
            "view": max(views) if views else None,
        }

    def reports(self, live: list[int]) -> list[dict[str, Any]]:
        for i in live:
            self.send(i, report=True)
        return [self.expect(i, "report", 30)["report"] for i in live]

    def close(self) -> dict[str, Any]:
        for i in range(self.n):
            self.send(i, stop=True)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()  # ours, by its Popen handle
                proc.wait(timeout=5)
        if self.pid_file is not None:
            stop_netem(self.pid_file)
            lines = self.netem_log.read_text().strip().splitlines()
            stats: dict[str, Any] = json.loads(lines[-1])["netem_stats"]
            return stats
        return {}


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_latency(latency: float, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    profile = LinkProfile(latency, latency * args.jitter_frac, args.loss, args.loss_mode)
    normal: list[dict[str, Any]] = []
    crashed: list[dict[str, Any]] = []
    rtos: list[float] = []
    units: list[float] = []
    vc_normal = vc_crash = 0
    frames = dropped = 0
    budget = 120.0 + 60.0 * (args.disputes + 2) * max(1.0, latency / 0.1)
    for run in range(args.runs):
        committee = Committee(
            args.n, profile, args.seed + run, workdir / f"{int(latency * 1e3)}ms-{run}", budget
        )
        live = list(range(args.n))
        try:
            time.sleep(args.warmup)
            for k in range(args.disputes):
                normal.append(committee.dispute(100 * run + k + 1, live, args.timeout))
            reps = committee.reports(live)
            vc_normal += sum(r["stats"]["view_changes"] for r in reps)
            rtos += [r["quorum_rto"] for r in reps if r["quorum_rto"] is not None]
            units += [r["unit"] for r in reps]
            view = max(r["view"] for r in reps)
            primary = view % args.n
            committee.send(primary, crash=True)
            live.remove(primary)
            time.sleep(0.2)
            crashed.append(committee.dispute(100 * run + 99, live, args.timeout))
            after = dict(zip(live, committee.reports(live), strict=True))
            vc_crash += sum(
                after[i]["stats"]["view_changes"] - reps[i]["stats"]["view_changes"] for i in live
            )
        finally:
            stats = committee.close()
        frames += sum(s["frames"] for s in stats.values())
        dropped += sum(s["dropped"] for s in stats.values())
    first = [d["first"] for d in normal if d["first"] is not None]
    every = [d["all"] for d in normal if d["all"] is not None]
    cfirst = [d["first"] for d in crashed if d["first"] is not None]
    call = [d["all"] for d in crashed if d["all"] is not None]
    rto = statistics.median(rtos) if rtos else None
    unit = statistics.median(units) if units else None
    return {
        "latency_ms": latency * 1e3,
        "jitter_ms": profile.jitter * 1e3,
        "loss": args.loss,
        "loss_mode": args.loss_mode,
        "n": args.n,
        "quorum_rto_s": rto,
        "request_timeout_s": 40 * unit if unit is not None else None,
        "disputes": len(normal),
        "undecided": sum(d["all"] is None for d in normal),
        "decide_p50_s": _pct(first, 0.5),
        "decide_p90_s": _pct(first, 0.9),
        "all_p50_s": _pct(every, 0.5),
        "all_p90_s": _pct(every, 0.9),
        "view_changes": vc_normal,
        "crash_disputes": len(crashed),
        "crash_undecided": sum(d["all"] is None for d in crashed),
        "crash_decide_p50_s": _pct(cfirst, 0.5),
        "crash_decide_p90_s": _pct(cfirst, 0.9),
        "crash_all_p50_s": _pct(call, 0.5),
        "crash_view_changes": vc_crash,
        "frames": frames,
        "dropped": dropped,
    }


def _fmt(v: Any, scale: float = 1.0, digits: int = 2) -> str:
    return "—" if v is None else f"{v * scale:.{digits}f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\nPBFT over TCP between {rows[0]['n']} processes through netem proxies "
        f"(jitter = latency/5, loss {rows[0]['loss']:.0%} {rows[0]['loss_mode']}); seconds\n"
    )
    head = ["", *(f"{r['latency_ms']:.0f} ms" for r in rows)]
    lines = [
        ("jitter (ms)", [_fmt(r["jitter_ms"], digits=0) for r in rows]),
        ("measured quorum RTO", [_fmt(r["quorum_rto_s"], digits=3) for r in rows]),
        ("request timeout (40 units)", [_fmt(r["request_timeout_s"]) for r in rows]),
        ("disputes (undecided)", [f"{r['disputes']} ({r['undecided']})" for r in rows]),
        ("time to decision p50", [_fmt(r["decide_p50_s"]) for r in rows]),
        ("time to decision p90", [_fmt(r["decide_p90_s"]) for r in rows]),
        ("all replicas decided p50", [_fmt(r["all_p50_s"]) for r in rows]),
        ("all replicas decided p90", [_fmt(r["all_p90_s"]) for r in rows]),
        ("view changes (replica events)", [str(r["view_changes"]) for r in rows]),
        (
            "primary crashed: disputes",
            [f"{r['crash_disputes']} ({r['crash_undecided']})" for r in rows],
        ),
        ("primary crashed: decision p50", [_fmt(r["crash_decide_p50_s"]) for r in rows]),
        ("primary crashed: decision p90", [_fmt(r["crash_decide_p90_s"]) for r in rows]),
        ("primary crashed: view changes", [str(r["crash_view_changes"]) for r in rows]),
        (
            "frames through proxies (dropped)",
            [
                f"{r['frames']} ({r['dropped']}, {r['dropped'] / max(1, r['frames']):.1%})"
                for r in rows
            ],
        ),
    ]
    width = max(len(k) for k, _ in lines)
    cols = [max(len(h), *(len(v[i]) for _, v in lines)) for i, h in enumerate(head[1:])]
    print(
        f"| {'':{width}} | "
        + " | ".join(f"{h:>{c}}" for h, c in zip(head[1:], cols, strict=True))
        + " |"
    )
    print(f"|{'-' * (width + 2)}|" + "|".join("-" * (c + 2) for c in cols) + "|")
    for key, values in lines:
        print(
            f"| {key:{width}} | "
            + " | ".join(f"{v:>{c}}" for v, c in zip(values, cols, strict=True))
            + " |"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latencies", default="50,150,300", help="one-way ms, comma-separated")
    p.add_argument("--jitter-frac", type=float, default=0.2, help="jitter = latency × this")
    p.add_argument("--loss", type=float, default=0.05, help="fraction of frames lost")
    p.add_argument("--loss-mode", default="drop", choices=["drop", "reset", "retransmit"])
    p.add_argument("--n", type=int, default=4, help="committee size (f = (n-1)//3)")
    p.add_argument("--runs", type=int, default=3, help="fresh committees per latency")
    p.add_argument("--disputes", type=int, default=4, help="disputes per committee")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of pings first")
    p.add_argument("--timeout", type=float, default=120.0, help="per dispute, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="also print the rows as JSON")
    p.add_argument("--replica", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--max-seconds", type=float, default=600.0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.replica is not None:
        asyncio.run(_replica_main(args.replica, args.n, args.max_seconds))
        return 0
    if max_faulty(args.n) < 1:
        p.error("--n must be at least 4 (a crashed primary must be tolerable)")
    latencies = [float(x) / 1e3 for x in args.latencies.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-pbft-wan-") as tmp:
        for latency in latencies:
            print(f"latency {latency * 1e3:.0f} ms ...", file=sys.stderr, flush=True)
            rows.append(run_latency(latency, args, Path(tmp)))
    print_table(rows)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
