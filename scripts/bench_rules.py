#!/usr/bin/env python3
"""Benchmark fedchain's aggregation rules against Flower's reference functions.

For each (K, d) and rule, one subprocess per implementation measures

* **time**: best of N runs of everything the aggregator does from decoded payloads to the
  encoded result - ours: ``int32 (K, d)`` matrix -> ``rule.aggregate`` -> canonical int32
  little-endian bytes (+ float64 optimiser state) -> SHA-256; Flower: its native input (a
  list of ``([float64 ndarray], num_examples)`` holding the *dequantised* values, exact in
  float64) -> ``flwr.server.strategy.aggregate.*``;
* **peak memory**: tracemalloc peak during one extra run (allocations beyond the inputs);

and prints a markdown table with Flower's time / ours, plus FedAvg against a streaming
floor (one read pass over the int32 matrix, ``Q.max()``). Results also go to JSON.

Flower is a benchmark-only dependency, never a runtime one. Install it in a separate venv::

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install numpy==2.4.6 flwr
    python scripts/bench_rules.py --flower-python .venv-bench/bin/python

(run from the project venv so our side uses the project's dependencies). Without flwr the
Flower columns are skipped and the script says so.

Slow Flower cases (its Krum computes K^2 norms; its Bulyan re-runs that Krum theta times)
are cut at ``--flower-timeout`` seconds and reported as a lower bound (``>``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ALL_RULES = [
    "fedavg",
    "median",
    "trimmed_mean",
    "krum",
    "multikrum",
    "bulyan",
    "fedavgm",
    "fedadam",
    "fedyogi",
    "fedadagrad",
]
FLOWER_RULES = {"fedavg", "median", "trimmed_mean", "krum", "multikrum", "bulyan"}
TARGETS = {"fedavg": 1.0, "median": 3.0, "trimmed_mean": 3.0, "krum": 5.0, "bulyan": 20.0}
FRAC_BITS = 16


def _f_for(k: int) -> int:
    """Byzantine count used for the Krum family: 10% of K (Bulyan needs K >= 4f + 3)."""
    return max(1, min(k // 10, (k - 3) // 4))


def _rule_params(rule: str, k: int) -> dict[str, Any]:
    f = _f_for(k)
    if rule in ("krum", "bulyan"):
        return {"f": f}
    if rule == "multikrum":
        return {"f": f, "m": k - f}
    if rule == "trimmed_mean":
        return {"beta": 0.1}
    return {}


def _make_data(k: int, d: int, value_bound: int, seed: int) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    q = np.empty((k, d), dtype=np.int32)
    for i in range(k):  # row by row: no K x d float temporaries
        row = rng.normal(0.0, value_bound / 8.0, size=d)
        np.clip(np.rint(row), -value_bound, value_bound, out=row)
        q[i] = row
    n = rng.integers(100, 5000, size=k).astype(np.int64)
    return q, n


# ----------------------------------------------------------------------------- case runner


def _time_best(fn: Any, repeat: int, budget: float) -> tuple[float, int, Any]:
    best = math.inf
    runs = 0
    out = None
    start = time.perf_counter()
    while runs < repeat:
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed + best > budget or elapsed > 30.0:  # slow cases: fewer repeats
            break
    return best, runs, out


def _peak_mem(fn: Any) -> int:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return max(0, peak - base)


def run_case(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one (impl, rule, K, d) case in this process and return its measurements."""
    import numpy as np

    k, d, rule, impl = spec["k"], spec["d"], spec["rule"], spec["impl"]
    vb, repeat, budget = spec["value_bound"], spec["repeat"], spec["budget"]
    q, n = _make_data(k, d, vb, spec["seed"])
    params = _rule_params(rule, k)
    res: dict[str, Any] = {"impl": impl, "rule": rule, "k": k, "d": d, "params": params}
    if impl == "ours":
        sys.path.insert(0, str(ROOT))
        from aggregators.base import AggregationInput
        from aggregators.registry import make_rule

        r = make_rule(rule, params)
        g = np.zeros(d, dtype=np.int64)

        def go() -> str:
            inp = AggregationInput(g, q, n, {}, FRAC_BITS, vb)
            out = r.aggregate(inp)
            h = hashlib.sha256(out.params.astype("<i4").tobytes())
            for key in sorted(out.state):
                h.update(np.ascontiguousarray(out.state[key]).astype("<f8").tobytes())
            return h.hexdigest()

        res["time"], res["runs"], res["sha256"] = _time_best(go, repeat, budget)
        if rule == "fedavg":
            res["floor"], _, _ = _time_best(lambda: q.max(), max(repeat, 5), budget)
        res["peak_bytes"] = _peak_mem(go)
        return res
    # Flower
    from flwr.server.strategy import aggregate as fl

    scale = float(1 << FRAC_BITS)
    results = [([q[i].astype(np.float64) / scale], int(n[i])) for i in range(k)]
    f = params.get("f", 0)
    fns = {
        "fedavg": lambda: fl.aggregate(results),
        "median": lambda: fl.aggregate_median(results),
        "trimmed_mean": lambda: fl.aggregate_trimmed_avg(results, 0.1),
        "krum": lambda: fl.aggregate_krum(results, f, 0),
        "multikrum": lambda: fl.aggregate_krum(results, f, k - f),
        # aggregate_bulyan pops from the list it is given: pass a copy
        "bulyan": lambda: fl.aggregate_bulyan(list(results), f, fl.aggregate_krum, to_keep=0),
    }
    fn = fns[rule]
    res["time"], res["runs"], _ = _time_best(fn, repeat, budget)
    if res["time"] < budget / 4:
        res["peak_bytes"] = _peak_mem(fn)
    return res


def _spawn(python: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [python, str(Path(__file__).resolve()), "--case", json.dumps(spec)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:]}
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def _has_flwr(python: str) -> bool:
    p = subprocess.run(
        [python, "-c", "import flwr.server.strategy.aggregate"], capture_output=True, text=True
    )
    return p.returncode == 0


def _find_flower_python(arg: str | None) -> str | None:
    cands = [arg] if arg else []
    cands += [os.environ.get("FEDCHAIN_FLOWER_PYTHON", ""), sys.executable]
    cands += [str(ROOT / ".venv-bench" / "bin" / "python")]
    for c in cands:
        if c and Path(c).exists() and _has_flwr(c):
            return c
    return None


# ----------------------------------------------------------------------------- reporting


def _fmt_t(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.1f} ms" if x < 10 else f"{x:.1f} s"


def _fmt_m(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--k", default="10,100", help="client counts (default 10,100)")
    ap.add_argument("--d", default="100000,1000000", help="dimensions (default 1e5,1e6)")
    ap.add_argument("--rules", default=",".join(ALL_RULES))
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per case (best is kept)")
    ap.add_argument("--value-bound", type=int, default=1 << 20, help="|q| bound (2**20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flower-python", help="interpreter with flwr installed")
    ap.add_argument(
        "--flower-timeout",
        type=float,
        default=180.0,
        help="seconds before a Flower case is cut and reported as a lower bound",
    )
    ap.add_argument("--no-flower", action="store_true")
    ap.add_argument("--json", default=str(ROOT / "runs" / "bench_rules.json"))
    args = ap.parse_args(argv)

    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return 0

    ks = [int(float(x)) for x in args.k.split(",")]
    ds = [int(float(x)) for x in args.d.split(",")]
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    flower_py = None if args.no_flower else _find_flower_python(args.flower_python)
    if flower_py is None and not args.no_flower:
        print(
            "NOTE: flwr not found - Flower columns skipped. Install it in a separate venv:\n"
            "  python3 -m venv .venv-bench && .venv-bench/bin/pip install numpy==2.4.6 flwr\n"
            "  then pass --flower-python .venv-bench/bin/python\n",
            flush=True,
        )
    rows: list[dict[str, Any]] = []
    for k in ks:
        for d in ds:
            for rule in rules:
                base = {
                    "k": k,
                    "d": d,
                    "rule": rule,
                    "value_bound": args.value_bound,
                    "repeat": args.repeat,
                    "seed": args.seed,
                }
                ours = _spawn(sys.executable, {**base, "impl": "ours", "budget": 60.0}, 600)
                flower: dict[str, Any] = {}
                if flower_py and rule in FLOWER_RULES:
                    budget = args.flower_timeout
                    flower = _spawn(
                        flower_py, {**base, "impl": "flower", "budget": budget}, budget + 60
                    )
                row = {"k": k, "d": d, "rule": rule, "ours": ours, "flower": flower}
                rows.append(row)
                print(_line(row), flush=True)
    print()
    print(_table(rows))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "value_bound": args.value_bound,
        "frac_bits": FRAC_BITS,
        "flower_python": flower_py,
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nJSON written to {out}")
    return 0


def _ratio(row: dict[str, Any]) -> tuple[str, float | None]:
    o, f = row["ours"], row["flower"]
    if "time" not in o or not f:
        return "-", None
    if "timeout" in f:
        r = f["timeout"] / o["time"]
        return f">{r:.0f}x", r
    if "time" not in f:
        return "err", None
    r = f["time"] / o["time"]
    return f"{r:.1f}x", r


def _line(row: dict[str, Any]) -> str:
    o, f = row["ours"], row["flower"]
    ft = f">{f['timeout']:.0f} s" if "timeout" in f else _fmt_t(f.get("time"))
    return (
        f"K={row['k']:>4} d={row['d']:>8} {row['rule']:<13} ours {_fmt_t(o.get('time')):>9}"
        f"  flower {ft:>9}  ratio {_ratio(row)[0]}"
        + (f"  ERROR {o['error']}" if "error" in o else "")
    )


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| K | d | rule | ours time | ours peak mem | Flower time | Flower peak mem "
        "| Flower/ours | target |\n|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for row in rows:
        o, f = row["ours"], row["flower"]
        ratio, _ = _ratio(row)
        ft = f">{f['timeout']:.0f} s" if "timeout" in f else _fmt_t(f.get("time"))
        tgt = TARGETS.get(row["rule"])
        lines.append(
            f"| {row['k']} | {row['d']:,} | {row['rule']} | {_fmt_t(o.get('time'))} | "
            f"{_fmt_m(o.get('peak_bytes'))} | {ft} | {_fmt_m(f.get('peak_bytes'))} | {ratio} | "
            f"{'>= ' + str(tgt) + 'x' if tgt and row['k'] == 100 and row['d'] >= 10**6 else ''} |"
        )
    floors = [r for r in rows if r["rule"] == "fedavg" and "floor" in r["ours"]]
    if floors:
        lines.append("")
        lines.append("| K | d | FedAvg (ours) | streaming floor (Q.max()) | FedAvg / floor |")
        lines.append("|---|---|---|---|---|")
        for r in floors:
            o = r["ours"]
            lines.append(
                f"| {r['k']} | {r['d']:,} | {_fmt_t(o['time'])} | {_fmt_t(o['floor'])} | "
                f"{o['time'] / o['floor']:.1f}x |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
