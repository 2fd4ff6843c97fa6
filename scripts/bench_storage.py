#!/usr/bin/env python3
"""UnixFS storage on the real backend: CID equality with js-ipfs, store throughput and memory,
and one round of a >= 10 M-parameter model, phase by phase.

    .venv/bin/python scripts/bench_storage.py [--sizes-only] [--clients 2] [--aggregators 3]
                                              [--epochs 1] [--embedded] [--json OUT.json]

Starts its own js-ipfs daemon and anvil (project-local binaries) in a temporary directory.
(1) For 0 B, 1 B, 256 KiB - 1, 256 KiB, 256 KiB + 1, 1 MiB + 1 and 50 MiB: the CID of the
embedded store, of ``protocol.cid.content_cid`` and of the daemon's own ``ipfs add``
(``--only-hash --cid-version 1 --raw-leaves --chunker size-262144``), and put/get seconds
and peak Python memory of ``get`` (tracemalloc) for both stores. (2) One round of
``--model mlp-wide`` (10.5 M parameters, 42 MB payloads) on anvil + js-ipfs, phase by
phase (seconds summed over nodes, which run one after another in-process); ``--embedded``
adds the same round on the embedded backends for comparison. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import requests

from adapters.services import AnvilService, IpfsService
from adapters.storage import ContentStore, IpfsStore, LocalStore
from clients.models import build_model, num_parameters, param_spec
from fedchain.config import DemoConfig
from fedchain.sim.runner import run_demo
from protocol.cid import content_cid
from protocol.metrics import PHASES as ALL_PHASES
from protocol.metrics import Progress
from protocol.unixfs import CHUNK_SIZE

MiB = 1 << 20
SIZES = [0, 1, CHUNK_SIZE - 1, CHUNK_SIZE, CHUNK_SIZE + 1, MiB + 1, 50 * MiB]
PHASES = [p for p in ALL_PHASES if p != "evaluate"]


def payload(size: int) -> bytes:
    return hashlib.shake_256(f"bench {size}".encode()).digest(size) if size else b""


def daemon_cid(api_url: str, data: bytes) -> str:
    def body() -> Any:
        yield (
            b'--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n"
        )
        for i in range(0, len(data), MiB):
            yield data[i : i + MiB]
        yield b"\r\n--b--\r\n"

    resp = requests.post(
        f"{api_url}/api/v0/add",
        params={
            "cid-version": "1",
            "raw-leaves": "true",
            "chunker": f"size-{CHUNK_SIZE}",
            "hash": "sha2-256",
            "only-hash": "true",
            "cid-base": "base32",
        },
        headers={"Content-Type": "multipart/form-data; boundary=b"},
        data=body(),
        timeout=600,
    )
    resp.raise_for_status()
    return str(json.loads(resp.text.splitlines()[-1])["Hash"])


def timed_store(store: ContentStore, data: bytes) -> dict[str, Any]:
    t0 = time.perf_counter()
    cid = store.put(data)
    t1 = time.perf_counter()
    tracemalloc.start()
    got = store.get(cid)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    t2 = time.perf_counter()
    assert got == data
    return {"cid": cid, "put": t1 - t0, "get": t2 - t1, "get_peak_mib": peak / MiB}


def cid_table(ipfs: IpfsService, root: Path) -> list[dict[str, Any]]:
    local = LocalStore(root / "local-store")
    node = IpfsStore(ipfs.api_multiaddr)
    rows = []
    for size in SIZES:
        data = payload(size)
        emb = timed_store(local, data)
        real = timed_store(node, data)
        theirs = daemon_cid(ipfs.api_url, data)
        rows.append(
            {
                "size": size,
                "daemon_cid": theirs,
                "embedded_cid": emb["cid"],
                "equal": theirs == emb["cid"] == real["cid"] == content_cid(data),
                "embedded": emb,
                "ipfs": real,
            }
        )
        del data
    return rows


def round_figures(cfg: DemoConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = run_demo(cfg, Progress(quiet=True))
    wall = time.perf_counter() - t0
    rounds = [json.loads(x) for x in (result.run_dir / "rounds.jsonl").read_text().splitlines()]
    r = rounds[0]
    return {
        "phases": {p: r["seconds"].get(p, 0.0) for p in PHASES},
        "evaluate": r["seconds"].get("evaluate", 0.0),
        "round_wall": r["wall_seconds"],
        "setup": result.summary["timings"]["setup"],
        "total_wall": wall,
        "finalized": result.summary["rounds_finalized"],
        "cid": r["cid"],
        "digest": r["digest"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-only", action="store_true", help="skip the model round")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--aggregators", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--embedded", action="store_true", help="also run the round embedded")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="fedchain-bench-storage-"))
    figures: dict[str, Any] = {}
    with IpfsService(out / "ipfs", die_with_parent=True) as ipfs:
        figures["cids"] = cid_table(ipfs, out)
        print("CIDs: embedded store vs the js-ipfs daemon's `ipfs add` (same options)\n")
        print("| size (bytes) | CID | equal | local put / get s | ipfs put / get s | get peak MiB")
        print("|---|---|---|---|---|---|")
        for row in figures["cids"]:
            e, i = row["embedded"], row["ipfs"]
            print(
                f"| {row['size']:,} | `{row['daemon_cid']}` | {'yes' if row['equal'] else 'NO'} "
                f"| {e['put']:.3f} / {e['get']:.3f} | {i['put']:.3f} / {i['get']:.3f} "
                f"| {i['get_peak_mib']:.1f}"
            )
        if not args.sizes_only:
            n_params = num_parameters(param_spec(build_model("mlp-wide", (1, 8, 8), 10)))
            base = DemoConfig(
                model="mlp-wide",
                clients=args.clients,
                aggregators=args.aggregators,
                rounds=1,
                epochs=args.epochs,
                challenge_window=2,
                out=str(out / "runs"),
            )
            runs: dict[str, dict[str, Any]] = {}
            with AnvilService(out / "anvil", die_with_parent=True) as anvil:
                runs["anvil + js-ipfs"] = round_figures(
                    replace(
                        base,
                        name="real",
                        rpc_url=anvil.url,
                        funding_key=anvil.funding_key,
                        store=ipfs.store_spec,
                    )
                )
            if args.embedded:
                runs["embedded"] = round_figures(replace(base, name="embedded"))
            figures["round"] = runs
            print(
                f"\none round of mlp-wide ({n_params:,} parameters), {args.clients} clients, "
                f"{args.aggregators} aggregators, {args.epochs} epoch(s); seconds summed over "
                "nodes\n"
            )
            names = list(runs)
            print("| phase | " + " | ".join(names) + " |")
            print("|---|" + "---|" * len(names))
            for p in PHASES:
                print(f"| {p} | " + " | ".join(f"{runs[n]['phases'][p]:.2f}" for n in names) + " |")
            for key, label in (
                ("round_wall", "**round wall time**"),
                ("evaluate", "evaluate (runner, not the round)"),
                ("setup", "set-up (deploy, register, initial model)"),
            ):
                print(f"| {label} | " + " | ".join(f"{runs[n][key]:.2f}" for n in names) + " |")
            for n in names:
                print(f"\n{n}: finalized {runs[n]['finalized']}/1, global model {runs[n]['cid']}")
            if len(names) == 2:
                same = runs[names[0]]["digest"] == runs[names[1]]["digest"]
                print(f"same global model on both backends: {'yes' if same else 'NO'}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
