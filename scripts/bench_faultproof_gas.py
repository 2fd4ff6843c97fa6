"""Gas of the fault proof, measured as real transactions on a local anvil: the one-step check
for d in {10^4, 10^6} x K in {10, 100} per rule, every game move, and the registration gas
per update of a relayed record carrying U_i.

Every figure is a mined transaction's ``gasUsed`` (intrinsic gas, calldata at the chain's
pricing - anvil's latest hardfork, EIP-7623 floor included - and execution). The one-step
check is measured twice: ``OneStep.step`` called alone and ``FaultGames.prove`` (the game move
that runs it). The Merkle proof depth depends on d (ceil(log2(ceil(d / 256)))), the step on K.

Registration: each signed update record carries its U_i (``Update(..., bytes32 chunkRoot)``,
140 bytes per packed record); measured on a real ``submitUpdates`` batch of 50 at anvil's
calldata pricing (scripts/bench_gas.py gives the embedded chain's figures before / after).

    nice -n 19 timeout 1800 .venv/bin/python scripts/bench_faultproof_gas.py --out gas.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from eth_utils.address import to_checksum_address

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.chain import Chain
from adapters.contract import TaskConfig, TaskContract
from adapters.faultproof import FaultGamesContract, OneStepContract
from adapters.records import sign_update
from adapters.services import AnvilService
from aggregators.faultproof import (
    DESCENT_STRIDE,
    StepRule,
    descent_nodes,
    excluded_words,
    norm_step_args,
    norm_sums,
    norm_tree,
    step_args,
)
from protocol.merkle import CHUNK, ChunkTree, chunk_bytes, chunk_values, tree_depth

TX_CAP = 2**24  # EIP-7825 per-transaction gas cap (16,777,216)
VB = 2**16
CLOCK = 50
BOND = 10**16


def gas(receipt: Any) -> int:
    return int(receipt["gasUsed"])


def data(d: int, k: int, seed: int) -> tuple[Any, list[Any], list[int], list[ChunkTree], ChunkTree]:
    rng = np.random.default_rng(seed)
    prev = rng.integers(-(2**24), 2**24, size=d).astype(np.int64)
    ups = [rng.integers(-VB, VB + 1, size=d).astype(np.int32) for _ in range(k)]
    weights = [int(v) for v in rng.integers(1, 1000, size=k)]
    return prev, ups, weights, [ChunkTree(u) for u in ups], ChunkTree(prev)


def step_rows(
    chain: Chain, one: OneStepContract, games: FaultGamesContract
) -> list[dict[str, Any]]:
    acct, challenger = chain.accounts[0], chain.accounts[1]
    rows = []
    for d in (10**4, 10**6):
        for k in (10, 100):
            prev, ups, weights, trees, ptree = data(d, k, d + k)
            j = 1  # a full chunk
            for name, params in (("fedavg", {}), ("median", {}), ("trimmed_mean", {"beta": 0.1})):
                rule = StepRule.of(name, params)
                args = step_args(rule, j, prev, ups, weights, prev_tree=ptree, trees=trees)
                alone = gas(chain.transact(acct, one.contract.functions.step(args), "step"))
                # the same check as a game move: post a claim whose chunk j is wrong
                honest, _ = one.step(args)
                bad = np.frombuffer(honest, dtype=">i4").astype(np.int64)
                full = np.zeros(d, dtype=np.int64)
                full[j * CHUNK : (j + 1) * CHUNK] = bad + 1
                claimed = ChunkTree(full)
                params_t = (
                    rule.rule_id,
                    rule.beta_num,
                    rule.beta_den,
                    d,
                    1000,
                    VB,
                    ptree.root,
                    claimed.root,
                )
                records = ([t.root for t in trees], weights, excluded_words([], k))
                cid = _event(
                    games,
                    games.tx(
                        acct,
                        "postClaim",
                        params_t,
                        records,
                        _signers(k),
                        excluded_words([], k),
                        value=BOND,
                    ),
                    "ClaimPosted",
                    "claimId",
                )
                gid = _event(
                    games,
                    games.tx(challenger, "openLeaf", cid, j, value=BOND),
                    "GameOpened",
                    "gameId",
                )
                games.tx(acct, "revealLeaf", gid, claimed.leaves[j], claimed.proof(j))
                prove = gas(games.tx(challenger, "prove", gid, args))
                rows.append(
                    {
                        "d": d,
                        "K": k,
                        "depth": tree_depth(d),
                        "rule": name,
                        "calldata_bytes": len(
                            one.contract.functions.step(args)._encode_transaction_data()
                        )
                        // 2,
                        "step_gas": alone,
                        "prove_gas": prove,
                        "under_cap": prove <= TX_CAP,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    return rows


def norm_rows(chain: Chain, one: OneStepContract) -> list[dict[str, Any]]:
    """``OneStep.normStep`` (the stopping rule's one-step check, prototype) for d in
    {10^4, 10^6} on a full chunk: three openings (previous state, claimed state, S_{j-1});
    independent of K."""
    acct = chain.accounts[0]
    rows = []
    for d in (10**4, 10**6):
        rng = np.random.default_rng(d)
        prev = rng.integers(-(2**24), 2**24, size=d).astype(np.int64)
        new = prev + rng.integers(-VB, VB + 1, size=d)
        sums = norm_sums(prev, new)
        tree = norm_tree(prev, new)
        args = norm_step_args(1, prev, new, sums[0], tree.root, tree.proof(0))
        call = one.contract.functions.normStep(args)
        rows.append(
            {
                "d": d,
                "depth": tree_depth(d),
                "calldata_bytes": len(call._encode_transaction_data()) // 2 - 1,
                "norm_step_gas": gas(chain.transact(acct, call, "normStep")),
            }
        )
        print(rows[-1], flush=True)
    return rows


def _event(games: FaultGamesContract, receipt: Any, name: str, field: str) -> int:
    from web3.logs import DISCARD

    ev = getattr(games.contract.events, name)().process_receipt(receipt, errors=DISCARD)
    return int(ev[0]["args"][field])


def move_rows(chain: Chain, games: FaultGamesContract) -> dict[str, int]:
    """Gas of every game move at d = 10^6, K = 10 (and postClaim at K = 100)."""
    sub, ch, other = chain.accounts[0], chain.accounts[1], chain.accounts[2]
    d, k = 10**6, 10
    prev, ups, weights, trees, ptree = data(d, k, 7)
    ups[3] = ups[3].copy()
    ups[3][CHUNK + 5] = VB + 1  # a bad update, excluded
    trees[3] = ChunkTree(ups[3])
    records = ([t.root for t in trees], weights, excluded_words([3], k))
    state = ChunkTree(prev)  # the claimed new state (its content does not matter here)
    params = (0, 0, 1, d, 20, VB, ptree.root, state.root)
    out: dict[str, int] = {}
    r = games.tx(sub, "postClaim", params, records, _signers(k), excluded_words([], k), value=BOND)
    out["postClaim (K = 10)"] = gas(r)
    cid = _event(games, r, "ClaimPosted", "claimId")
    r = games.tx(ch, "openLeaf", cid, 2, value=BOND)
    out["openLeaf"] = gas(r)
    gid = _event(games, r, "GameOpened", "gameId")
    out["revealLeaf (d = 10^6)"] = gas(
        games.tx(sub, "revealLeaf", gid, state.leaves[2], state.proof(2))
    )
    r = games.tx(ch, "openExclusion", cid, 3, value=BOND)
    out["openExclusion"] = gas(r)
    eg = _event(games, r, "GameOpened", "gameId")
    opening = (1, chunk_bytes(chunk_values(ups[3], 1)), trees[3].proof(1), 5)
    out["defendExclusion (K = 10)"] = gas(games.tx(sub, "defendExclusion", eg, records, opening))
    r = games.tx(other, "openAvailability", cid, 4, 7, value=BOND)
    out["openAvailability"] = gas(r)
    ag = _event(games, r, "GameOpened", "gameId")
    op2 = (7, chunk_bytes(chunk_values(ups[4], 7)), trees[4].proof(7), 0)
    out["postChunk (K = 10, 1 KiB emitted)"] = gas(games.tx(sub, "postChunk", ag, records, op2))
    chain.mine(CLOCK + 1)
    out["timeout (challenger's clock spent)"] = gas(games.tx(sub, "timeout", gid))
    chain.mine(25)
    out["release"] = gas(games.tx(sub, "release", cid))
    out["withdraw"] = gas(games.tx(sub, "withdraw"))
    # refuteInclusion: a second claim that includes the bad update
    records2 = ([t.root for t in trees], weights, excluded_words([], k))
    cid2 = _event(
        games,
        games.tx(
            sub, "postClaim", params, records2, _signers(k), excluded_words([], k), value=BOND
        ),
        "ClaimPosted",
        "claimId",
    )
    opening3 = (1, chunk_bytes(chunk_values(ups[3], 1)), trees[3].proof(1), 5)
    out["refuteInclusion (K = 10)"] = gas(
        games.tx(other, "refuteInclusion", cid2, records2, 3, opening3)
    )
    # descent at d = 10^6 (depth 12: three reveals of 16 nodes) on a fresh claim
    cid3 = _event(
        games,
        games.tx(sub, "postClaim", params, records, _signers(k), excluded_words([], k), value=BOND),
        "ClaimPosted",
        "claimId",
    )
    r = games.tx(ch, "openDescent", cid3, value=BOND)
    out["openDescent"] = gas(r)
    dg = _event(games, r, "GameOpened", "gameId")
    level, index, n = state.depth, 0, 0
    while level > 0:
        nodes = descent_nodes(state, level, index)
        out[f"revealNodes (16 nodes, round {n + 1})"] = gas(games.tx(sub, "revealNodes", dg, nodes))
        out[f"pickNode (round {n + 1})"] = gas(games.tx(ch, "pickNode", dg, nodes, 5))
        m = min(DESCENT_STRIDE, level)
        level, index, n = level - m, (index << m) | 5, n + 1
    # postClaim at K = 100
    k2 = 100
    roots = [hashlib.sha256(bytes([i % 256, i // 256])).digest() for i in range(k2)]
    rec100 = (roots, [1] * k2, excluded_words([], k2))
    out["postClaim (K = 100)"] = gas(
        games.tx(sub, "postClaim", params, rec100, _signers(k2), excluded_words([], k2), value=BOND)
    )
    for key, v in out.items():
        print(f"{key:40s} {v:>10,}", flush=True)
    return out


def _signers(k: int) -> tuple[list[str], list[bytes]]:
    """Stand-in ``Signers`` of a claim with ``k`` records (distinct nonzero clients and
    digests, priced like real ones; FaultGames does not look them up)."""
    clients = [str(to_checksum_address(hashlib.sha256(b"c%d" % i).digest()[:20])) for i in range(k)]
    return clients, [hashlib.sha256(b"d%d" % i).digest() for i in range(k)]


def registration_rows(chain: Chain) -> dict[str, int]:
    """submitUpdates batch of 50 records carrying U_i: gas per update."""
    owner, clients = chain.accounts[0], chain.accounts[3:103]
    cfg = TaskConfig(
        initial_model_digest=b"\x11" * 32,
        num_rounds=3,
        min_updates=100,
        max_updates=200,
        collect_window=50,
        submit_timeout=5,
        challenge_window=2,
        aggregator_stake=10**18,
        aggregate_bond=10**17,
        challenge_bond=10**17,
        timeout_penalty=10**17,
    )
    task = TaskContract.deploy(chain, owner, cfg)
    task.register_aggregator(chain.accounts[1])
    for c in clients:
        task.register_client(c)
    task.start(owner)
    sep = task.domain_separator

    def batch(r: int, extra: int, first: int, n: int) -> int:
        recs = [
            sign_update(
                c,
                sep,
                first + i,
                r,
                hashlib.sha256(bytes([r, first + i])).digest(),
                10,
                hashlib.sha256(bytes([r, first + i, 0x55])).digest(),  # a stand-in U_i
            )
            for i, c in enumerate(clients[first : first + n])
        ]
        packed = b"".join(x.packed() for x in recs)
        fn = task.contract.functions.submitUpdates(r, packed)
        tx = chain.tx.build(fn, owner, 0, None)
        tx["data"] = tx["data"] + ("ab" * 32) * (extra * n)  # nonzero bytes the decoder ignores
        tx["gas"] = 30_000_000
        receipt = chain.tx.wait(chain.tx.send(owner, tx, gas=tx["gas"]))
        assert receipt["status"] == 1
        return gas(receipt)

    # a later batch of 50 in the round: the accumulator slot already exists
    batch(1, 0, 0, 1)  # opens the round's accumulator slot
    out = {"submitUpdates per update, records carrying U_i (batch of 50)": batch(1, 0, 1, 50) // 50}
    for key, v in out.items():
        print(f"{key:70s} {v:>8,}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="gas of the fault proof")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--norm-only", action="store_true", help="measure OneStep.normStep only")
    args = ap.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="bench-faultproof-") as tmp,
        AnvilService(
            Path(tmp) / "anvil",
            die_with_parent=True,
            extra_args=("--gas-limit", "300000000", "--code-size-limit", "100000"),
        ) as anvil,
    ):
        chain = Chain.connect(anvil.url, funding_key=anvil.funding_key, num_accounts=110)
        one = OneStepContract.deploy(chain, chain.accounts[0])
        games = FaultGamesContract.deploy(chain, chain.accounts[0], one.address, CLOCK, BOND)
        result: dict[str, Any] = {"norm_step": norm_rows(chain, one)}
        if not args.norm_only:
            result["moves"] = move_rows(chain, games)
            result["registration"] = registration_rows(chain)
            result["step"] = step_rows(chain, one, games)
    print()
    print("| d | K | depth | rule | calldata bytes | OneStep.step gas | FaultGames.prove gas |")
    print("|---|---|---|---|---|---|---|")
    for r in result.get("step", []):
        cap = "" if r["under_cap"] else " (over the 16.7M cap)"
        print(
            f"| {r['d']:,} | {r['K']} | {r['depth']} | {r['rule']} | {r['calldata_bytes']:,} "
            f"| {r['step_gas']:,} | {r['prove_gas']:,}{cap} |"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
