"""Differential fuzzing of the Solidity one-step check against the Python rules, on anvil.

For every rule in scope (FedAvg, FedProx, Median, Trimmed mean at two betas) draw ``--n``
random chunks and compare ``OneStep.stepChunk`` (an ``eth_call`` on a local anvil started by
``adapters.services.AnvilService``) with :func:`aggregators.faultproof.reference_chunk` (the
real Python rule on the chunk's columns). Case mix: odd and even K (1..40, sometimes up to
100), ties (values in -3..3), half-way rounding (equal weights, odd sums), saturation (full
int32 inputs and a previous state at the int32 edges), carry-forward (all-zero updates), K
below the rule's minimum (``below_min``: K in [0, min_updates), the round execute_round carries
forward; K = 0 for every rule in scope) and a partial last chunk (random number of valid lanes).
A mismatch prints the case and exits 1.

Usage::

    nice -n 19 timeout 3600 .venv/bin/python scripts/fuzz_onestep.py --n 10000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import requests
from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode
from eth_utils.crypto import keccak

from adapters.chain import Chain
from adapters.faultproof import OneStepContract
from adapters.services import AnvilService
from aggregators.faultproof import StepRule, order_witness, reference_chunk
from aggregators.registry import make_rule
from protocol.merkle import CHUNK, chunk_bytes

RULES = [
    StepRule.of("fedavg"),
    StepRule.of("fedprox", {"mu": 0.01}),
    StepRule.of("median"),
    StepRule.of("trimmed_mean", {"beta": 0.1}),
    StepRule.of("trimmed_mean", {"beta": 0.3}),
]
KINDS = ("plain", "ties", "halfway", "saturate", "carry", "below_min")
#: cases sent per JSON-RPC batch (one HTTP request)
BATCH = 16
_SIG = "stepChunk(uint8,uint256,uint256,uint256,bytes,bytes[],uint256[],bytes)"
_SELECTOR = keccak(text=_SIG)[:4]
_TYPES = ["uint8", "uint256", "uint256", "uint256", "bytes", "bytes[]", "uint256[]", "bytes"]


def eth_call_batch(session: requests.Session, url: str, to: str, datas: list[bytes]) -> list[bytes]:
    """``eth_call`` every calldata in one JSON-RPC batch; returns the raw results in order."""
    body: Any = [
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "eth_call",
            "params": [{"to": to, "data": "0x" + d.hex(), "gas": hex(10**9)}, "latest"],
        }
        for i, d in enumerate(datas)
    ]
    reply = session.post(url, json=body, timeout=120).json()
    if not isinstance(reply, list):
        raise RuntimeError(f"JSON-RPC batch failed: {reply}")
    replies = sorted(reply, key=lambda r: r["id"])
    out = []
    for r in replies:
        if "error" in r:
            raise RuntimeError(f"eth_call failed: {r['error']}")
        out.append(bytes.fromhex(r["result"][2:]))
    return out


def draw(rng: np.random.Generator, kind: str, kmin: int = 1) -> tuple[Any, Any, list[int], int]:
    """One random case: (prev (256,), inputs (K, 256), weights, valid lanes); ``kmin`` is the
    rule's minimum K (``below_min`` draws K below it)."""
    k = int(rng.integers(1, 101)) if rng.random() < 0.05 else int(rng.integers(1, 41))
    if kind == "below_min":
        k = int(rng.integers(0, kmin))
    valid = CHUNK if rng.random() < 0.7 else int(rng.integers(1, CHUNK + 1))
    prev = rng.integers(-(2**31), 2**31, size=CHUNK)
    w = rng.integers(1, 2**32, size=k)
    if kind == "ties":
        x = rng.integers(-3, 4, size=(k, CHUNK))
        w = rng.integers(1, 4, size=k)
    elif kind == "halfway":
        x = rng.integers(-8, 9, size=(k, CHUNK))
        w = np.full(k, int(rng.integers(1, 5)))
        if k % 2:
            k += 1
            x = np.vstack([x, rng.integers(-8, 9, size=(1, CHUNK))])
            w = np.append(w, w[0])
        prev = rng.integers(-10, 11, size=CHUNK)
    elif kind == "saturate":
        x = rng.integers(-(2**31), 2**31, size=(k, CHUNK))
        prev = rng.choice([2**31 - 1, 2**31 - 2, -(2**31), -(2**31) + 1], size=CHUNK)
    elif kind == "carry":
        x = np.zeros((k, CHUNK), dtype=np.int64)
        x[:, : int(rng.integers(0, CHUNK))] = rng.integers(-5, 6)
    else:
        vb = int(rng.choice([1, 255, 2**16, 2**24, 2**30]))
        x = rng.integers(-vb, vb + 1, size=(k, CHUNK))
    x[:, valid:] = 0
    prev[valid:] = 0
    return prev.astype(np.int64), x.astype(np.int32), [int(v) for v in w], valid


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="chunks per rule")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--out", type=Path, default=None, help="write the counts as JSON here")
    args = ap.parse_args(argv)
    counts: dict[str, dict[str, int]] = {}
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="fuzz-onestep-") as tmp,
        AnvilService(
            Path(tmp) / "anvil", die_with_parent=True, extra_args=("--gas-limit", "1000000000")
        ) as anvil,
    ):
        chain = Chain.connect(anvil.url, funding_key=anvil.funding_key, num_accounts=1)
        one = OneStepContract.deploy(chain, chain.accounts[0])
        session = requests.Session()
        for rule in RULES:
            label = rule.name
            if rule.sorted_rule and rule.name == "trimmed_mean":
                label = f"trimmed_mean({rule.beta_num}/{rule.beta_den})"
            rng = np.random.default_rng([args.seed, rule.rule_id, rule.beta_num])
            kmin = make_rule(rule.name, rule.params).min_updates()
            per_kind = dict.fromkeys(KINDS, 0)
            for b0 in range(0, args.n, BATCH):
                cases, datas, wants = [], [], []
                for n in range(b0, min(args.n, b0 + BATCH)):
                    kind = KINDS[n % len(KINDS)]
                    prev, x, w, valid = draw(rng, kind, kmin)
                    wants.append(chunk_bytes(reference_chunk(rule, prev, x, w, valid)))
                    wit = order_witness(x, valid) if rule.sorted_rule else b""
                    call = [
                        rule.rule_id,
                        rule.beta_num,
                        rule.beta_den,
                        valid,
                        chunk_bytes(prev),
                        [chunk_bytes(r) for r in x],
                        w,
                        wit,
                    ]
                    datas.append(_SELECTOR + abi_encode(_TYPES, call))
                    cases.append((n, kind, prev, x, w, valid))
                results = eth_call_batch(session, anvil.url, one.address, datas)
                for (n, kind, prev, x, w, valid), raw, want in zip(
                    cases, results, wants, strict=True
                ):
                    got = bytes(abi_decode(["bytes"], raw)[0])
                    if got != want:
                        bad = {"rule": label, "case": n, "kind": kind, "k": len(w), "valid": valid}
                        print("MISMATCH", json.dumps(bad), file=sys.stderr)
                        np.savez(
                            Path(tempfile.gettempdir()) / "fuzz_onestep_mismatch.npz",
                            prev=prev,
                            x=x,
                            w=np.array(w, dtype=object),
                        )
                        return 1
                    per_kind[kind] += 1
            counts[label] = per_kind
            print(f"{label:24s} {sum(per_kind.values()):6d} chunks agree  {per_kind}", flush=True)
    total = sum(sum(v.values()) for v in counts.values())
    print(f"total {total} chunks, 0 mismatches, {time.monotonic() - t0:.0f} s")
    if args.out:
        args.out.write_text(json.dumps({"total": total, "per_rule": counts}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
