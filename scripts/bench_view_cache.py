"""Cost of FedChainTask view calls with and without the per-block view cache.

Usage::

    python scripts/bench_view_cache.py                      # embedded eth-tester chain
    python scripts/bench_view_cache.py --rpc http://127.0.0.1:8545 \\
        --funding-key 0xac09...ff80                         # e.g. a local anvil

For each view it reports microseconds per call with the cache off (every call is an
``eth_call``), on a cache miss (first call in a new block: ``eth_blockNumber`` + ``eth_call``)
and on a hit (same block: ``eth_blockNumber`` only, no ABI encoding).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.chain import Chain
from adapters.contract import TaskConfig, TaskContract

ETHER = 10**18


def _dg(label: object) -> bytes:
    return hashlib.sha256(repr(label).encode()).digest()


def _setup(chain: Chain) -> TaskContract:
    cfg = TaskConfig(
        initial_model_digest=_dg("init"),
        num_rounds=3,
        min_updates=2,
        max_updates=4,
        aggregator_stake=ETHER,
        aggregate_bond=ETHER // 10,
        challenge_bond=ETHER // 10,
    )
    owner, *rest = chain.accounts
    task = TaskContract.deploy(chain, owner, cfg)
    for acct in rest[:4]:
        task.register_aggregator(acct)
    for acct in rest[4:8]:
        task.register_client(acct)
    task.start(owner)
    for i, acct in enumerate(rest[4:8]):
        task.submit_update(acct, 1, _dg(i), 10)
    return task


def _time(fn: Callable[[], Any], n: int, before: Callable[[], None] | None = None) -> float:
    total = 0.0
    for _ in range(n):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        total += time.perf_counter() - t0
    return total / n * 1e6


def bench(task: TaskContract, n: int) -> dict[str, dict[str, float]]:
    chain = task.chain
    views: dict[str, Callable[[], Any]] = {
        "getRound": lambda: task.round_info(1),
        "phase": lambda: task.phase(1),
        "currentAggregator": task.current_aggregator,
        "updateAccumulator": lambda: task.update_accumulator(1),
        "credits": lambda: task.credits(task.owner()),
    }
    out: dict[str, dict[str, float]] = {}
    for name, fn in views.items():
        chain.view_cache = False
        off = _time(fn, n)
        chain.view_cache = True
        miss = _time(fn, max(n // 10, 5), before=lambda: chain.mine(1))
        fn()
        hit = _time(fn, n)
        out[name] = {"cache_off_us": off, "miss_us": miss, "hit_us": hit}
    out["block_number"] = {"us": _time(chain.block_number, n)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpc", help="JSON-RPC URL (default: embedded eth-tester)")
    parser.add_argument("--funding-key", help="key that funds the benchmark accounts (RPC)")
    parser.add_argument("-n", type=int, default=200, help="calls per measurement")
    args = parser.parse_args(argv)
    if args.rpc:
        chain = Chain.connect(args.rpc, args.funding_key, num_accounts=9, balance_wei=10 * ETHER)
    else:
        chain = Chain.embedded(num_accounts=9)
    results = bench(_setup(chain), args.n)
    for name, row in results.items():
        print(f"{name:18s} " + "  ".join(f"{k}={v:9.1f}" for k, v in row.items()))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
