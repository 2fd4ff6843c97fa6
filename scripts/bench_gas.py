"""Exact gas of update registration (single and batched), aggregation and finalization
against issue 12's targets, and of the availability, dispute-timeout and equivocation
operations.

Gas is deterministic, so this prints exact figures (embedded eth-tester chain), one line per
operation, with the target where there is one:

    .venv/bin/python scripts/bench_gas.py
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.chain import Chain
from adapters.contract import TaskConfig, TaskContract
from adapters.records import sign_update
from consensus.certificate import verdict_struct_hash
from consensus.evidence import proof_of
from consensus.messages import Commit, Domain, Prepare, PrePrepare, sign, sign_struct
from consensus.pbft import Evidence
from consensus.quorums import commit_quorum

BASE: dict[str, Any] = {
    "initial_model_digest": b"\x11" * 32,
    "num_rounds": 3,
    "collect_window": 5,
    "submit_timeout": 5,
    "challenge_window": 2,
    "aggregator_stake": 10**18,
    "aggregate_bond": 10**17,
    "challenge_bond": 10**17,
    "timeout_penalty": 10**17,
}


def dg(label: object) -> bytes:
    return hashlib.sha256(repr(label).encode()).digest()


def ur(label: object) -> bytes:
    """A stand-in chunk root (U_i) of the update labelled ``label``: 32 nonzero-looking bytes,
    calldata priced like a real root."""
    return dg(("U_i", label))


def deploy(n: int, k: int, **kw: Any) -> tuple[Chain, TaskContract, Any, list[Any], list[Any]]:
    """A started task with ``n`` aggregators and ``k`` registered clients (min = max = k)."""
    chain = Chain.embedded(num_accounts=1 + n + k)
    owner, rest = chain.accounts[0], chain.accounts[1:]
    aggs, clients = rest[:n], rest[n : n + k]
    cfg = TaskConfig(**{**BASE, "min_updates": k, "max_updates": k, **kw})
    task = TaskContract.deploy(chain, owner, cfg)
    for a in aggs:
        task.register_aggregator(a)
    for c in clients:
        task.register_client(c)
    task.start(owner)
    return chain, task, owner, aggs, clients


def setup(n: int, k: int, **kw: Any) -> tuple[Chain, TaskContract, Any, list[Any]]:
    """:func:`deploy`, and every client registers its round-1 update."""
    chain, task, owner, aggs, clients = deploy(n, k, **kw)
    for i, c in enumerate(clients):
        task.submit_update(c, 1, dg((1, i)), 10, ur((1, i)))
    return chain, task, owner, aggs


def gas(receipt: Any) -> int:
    return int(receipt["gasUsed"])


def registration_rows() -> list[tuple[str, int, int | None]]:
    """A 300-client task over two rounds. Round 1 opens with two batches of 100 signed
    records (the first creates the round's accumulator slot), then 100 clients register
    alone; round 2 opens with the 100 single registrations, then the two batches. A batch's
    per-update figure is its transaction's gas divided by its 100 records."""
    chain, task, owner, aggs, clients = deploy(4, 300)
    cfg = task.config()
    sep = task.domain_separator

    def singles(r: int) -> list[int]:
        return [
            gas(task.submit_update(c, r, dg((r, i)), 10, ur((r, i))))
            for i, c in enumerate(clients[:100])
        ]

    def batches(r: int) -> list[int]:
        out = []
        for start in (100, 200):
            recs = [
                sign_update(c, sep, start + i, r, dg((r, start + i)), 10, ur((r, start + i)))
                for i, c in enumerate(clients[start : start + 100])
            ]
            out.append(gas(task.submit_updates(owner, r, recs)) // 100)
        return out

    rows: list[tuple[str, int, int | None]] = []
    for r in (1, 2):
        if r == 1:
            first_batch, next_batch = batches(r)
            alone = singles(r)
            rows += [
                ("submitUpdates, the round's first batch of 100, per update", first_batch, 10_000),
                ("submitUpdates, a later batch of 100, per update", next_batch, 10_000),
                ("submitUpdate, alone, not the round's first", alone[0], 50_000),
            ]
        else:
            alone = singles(r)
            later = batches(r)
            rows += [
                (
                    "submitUpdate, alone, the round's first",
                    alone[0],
                    50_000,
                ),
                ("submitUpdate, alone, every later one", alone[1], 50_000),
                (
                    "submitUpdate, alone, mean of the round's first 100",
                    round(sum(alone) / 100),
                    50_000,
                ),
                ("submitUpdates, a batch of 100 after singles, per update", later[0], 10_000),
            ]
        agg = next(a for a in aggs if a.address == task.current_aggregator().address)
        submit = gas(task.submit_aggregate(agg, r, dg(("agg", r))))
        chain.mine(cfg.challenge_window)
        fin = gas(task.finalize(owner, r))
        rows += [
            (f"round {r}: submitAggregate", submit, None),
            (f"round {r}: finalize (opens the next round)", fin, None),
            (f"round {r}: submitAggregate + finalize", submit + fin, 150_000),
        ]
    return rows


def issue20_rows() -> list[tuple[str, int]]:
    """Functions issue 20 changed or added (deploy, registration, start, challenge, the
    verdicts, advanceAttempt; leaveCommittee, skipRound, abortTask). The new functions are
    skipped on a checkout that lacks them, so the same script measures "before"."""
    rows: list[tuple[str, int]] = []
    chain = Chain.embedded(num_accounts=12)
    owner, aggs = chain.accounts[0], chain.accounts[1:6]
    cfg = TaskConfig(**{**BASE, "min_updates": 2, "max_updates": 2})
    task = TaskContract.deploy(chain, owner, cfg)
    rows.append(("deploy", gas(task.deploy_receipt)))
    regs = [gas(task.register_aggregator(a)) for a in aggs]
    rows.append(("registerAggregator, first", regs[0]))
    rows.append(("registerAggregator, later", regs[1]))
    if hasattr(task, "leave_committee"):
        rows.append(("leaveCommittee (not the last member)", gas(task.leave_committee(aggs[0]))))
    rows.append(("start (n=4)", gas(task.start(owner))))
    clients = chain.accounts[6:12]
    rows.append(("registerClient, first", gas(task.register_client(clients[0]))))
    rows.append(("registerClient, later", gas(task.register_client(clients[1]))))
    if hasattr(task, "allow_clients"):
        chain = Chain.embedded(num_accounts=6)
        owner, spare = chain.accounts[0], chain.accounts[1:5]
        cfg = TaskConfig(**{**BASE, "min_updates": 2, "max_updates": 2, "client_allowlist": True})
        task = TaskContract.deploy(chain, owner, cfg)
        receipt = task.allow_clients(owner, [a.address for a in spare[:4]])
        rows.append(("allowClients (4 accounts)", gas(receipt)))
        rows.append(("registerClient, allowlist task", gas(task.register_client(spare[0]))))
    if hasattr(task, "release_deposit"):
        chain = Chain.embedded(num_accounts=6)
        owner, spare = chain.accounts[0], chain.accounts[1:6]
        cfg = TaskConfig(
            **{
                **BASE,
                "min_updates": 2,
                "max_updates": 2,
                "client_deposit": 10**16,
                "min_collection_blocks": 2,
                "abort_timeout": 3,
            }
        )
        task = TaskContract.deploy(chain, owner, cfg)
        rows.append(("registerClient, deposit task, first", gas(task.register_client(spare[0]))))
        rows.append(("registerClient, deposit task, later", gas(task.register_client(spare[1]))))
        chain.mine(4)
        task.abort_task(owner)
        rows.append(("releaseDeposit after abortTask", gas(task.release_deposit(spare[0]))))
    for n in (4,):
        chain, task, owner, members = setup(n, 4, dispute_timeout=5, challenge_window=5)
        sub = next(a for a in members if a.address == task.current_aggregator().address)
        task.submit_aggregate(sub, 1, dg("agg"))
        challenger = next(a for a in members if a != sub)
        rows.append(("challenge", gas(task.challenge(challenger, 1))))
        dom = Domain(chain.chain_id, task.address)
        signers = sorted((a for a in members if a != challenger), key=lambda a: int(a.address, 16))
        sh = verdict_struct_hash(1, 0, dg("agg"), False, 0)
        sigs = [sign_struct(a, dom, sh) for a in signers[: commit_quorum(n)]]
        rows.append(
            (
                "resolveDispute, upheld, 3 signatures (n=4)",
                gas(task.resolve_dispute(owner, 1, 0, False, 0, sigs)),
            )
        )
    chain, task, owner, members = setup(4, 4)
    chain.mine(int(task.config().submit_timeout) + 1)
    rows.append(("advanceAttempt (penalty)", gas(task.advance_attempt(owner, 1))))
    if hasattr(task, "skip_round"):
        chain, task, owner, members, clients = deploy(4, 4, collect_timeout=3)
        task.submit_update(clients[0], 1, dg("one"), 10, ur("one"))
        chain.mine(int(task.config().collect_window) + 4)
        rows.append(("skipRound (opens the next round)", gas(task.skip_round(owner, 1))))
        chain, task, owner, members, clients = deploy(4, 4, abort_timeout=3)
        chain.mine(4)
        rows.append(("abortTask (collecting, no bonds held)", gas(task.abort_task(owner))))
        rows.append(("releaseStake after abortTask", gas(task.release_stake(members[0]))))
    return rows


def issue22_hook_rows() -> list[tuple[str, int]]:
    """Issue 22's hooks on a task bound to FaultGames (K = 5 updates, d = 778, FedAvg,
    attestation window 4, three members attest every update, n = 4): the claimed submission,
    finalize with a settled claim, rejectRefuted and slashRefutedCertificate (3 signers).
    Round data and claims as in the fault-proof
    tests (tests/fault_support.py). Skipped on a checkout without the hooks."""
    if not hasattr(TaskContract, "set_fault_games"):
        return []
    from web3.logs import DISCARD

    from adapters.faultproof import FaultGamesContract, OneStepContract
    from aggregators.faultproof import StepRule, fault_params_hash
    from aggregators.registry import rule_id
    from protocol.merkle import ChunkTree
    from tests.fault_support import BOND, CLAIM_BOND, CLOCK, VB, faulty, make_round

    rows: list[tuple[str, int]] = []
    r = make_round(StepRule.of("fedavg"))
    k = len(r.ups)

    def setup_hooked() -> tuple[Chain, TaskContract, Any, list[Any], FaultGamesContract]:
        chain = Chain.embedded(num_accounts=1 + 4 + k + 2)
        owner, rest = chain.accounts[0], chain.accounts[1:]
        aggs, clients = rest[:4], rest[4 : 4 + k]
        cfg = TaskConfig(
            **{
                **BASE,
                "rule_id": rule_id("fedavg"),  # as deployments name it: the claim's rule is checked
                "min_updates": k,
                "max_updates": k,
                "submit_timeout": 10,
                "attest_window": 4,  # a fault-proof task needs the committee's included set
            }
        )
        task = TaskContract.deploy(chain, owner, cfg)
        one = OneStepContract.deploy(chain, owner)
        games = FaultGamesContract.deploy(chain, owner, one.address, CLOCK, BOND)
        params_hash = fault_params_hash(r.rule, len(r.prev), VB)
        task.set_fault_games(owner, games.address, ChunkTree(r.prev).root, params_hash)
        for a in aggs:
            task.register_aggregator(a)
        for c in clients:
            task.register_client(c)
        task.start(owner)
        for i, c in enumerate(clients):
            task.submit_update(c, 1, dg(("u", i)), r.weights[i], ChunkTree(r.ups[i]).root)
        r.clients = [c.address for c in clients]
        r.digests = [dg(("u", i)) for i in range(k)]
        for a in aggs[:3]:  # n - f attestations fix the included set (every update)
            task.attest(a, 1, [True] * k)
        return chain, task, owner, aggs, games

    def claim(games: FaultGamesContract, who: Any, state: Any) -> int:
        rule = (r.rule.rule_id, r.rule.beta_num, r.rule.beta_den)
        params = (*rule, len(r.prev), 8, VB, ChunkTree(r.prev).root, ChunkTree(state).root)
        receipt = games.tx(
            who, "postClaim", params, r.records(), r.signers(), r.unincluded(), value=CLAIM_BOND
        )
        ev = games.contract.events.ClaimPosted().process_receipt(receipt, errors=DISCARD)
        return int(ev[0]["args"]["claimId"])

    chain, task, owner, aggs, games = setup_hooked()
    sub = next(a for a in aggs if a.address == task.current_aggregator().address)
    cid = claim(games, sub, r.honest())
    rows.append(
        (
            "submitAggregateWithClaim (fault-proof task)",
            gas(task.submit_aggregate_with_claim(sub, 1, dg("agg"), cid)),
        )
    )
    chain.mine(9)
    rows.append(("finalize, settled claim (opens the next round)", gas(task.finalize(owner, 1))))

    chain, task, owner, aggs, games = setup_hooked()
    sub = next(a for a in aggs if a.address == task.current_aggregator().address)
    claimed = faulty(r, j=3)
    cid = claim(games, sub, claimed)
    task.submit_aggregate_with_claim(sub, 1, dg("agg"), cid)
    honest = next(a for a in aggs if a != sub)
    colluders = sorted((a for a in aggs if a != honest), key=lambda a: int(a.address, 16))
    task.challenge(honest, 1)
    dom = Domain(chain.chain_id, task.address)
    sh = verdict_struct_hash(1, 0, dg("agg"), False, 0)
    sigs = [sign_struct(a, dom, sh) for a in colluders]
    task.resolve_dispute(owner, 1, 0, False, 0, sigs)
    challenger = chain.accounts[-1]
    receipt = games.tx(challenger, "openLeaf", cid, 3, value=BOND)
    gid = int(
        games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)[0]["args"][
            "gameId"
        ]
    )
    tree = ChunkTree(claimed)
    games.tx(sub, "revealLeaf", gid, tree.leaves[3], tree.proof(3))
    games.tx(challenger, "prove", gid, r.step(3))
    rows.append(
        ("rejectRefuted (submitter slashed, attempt + 1)", gas(task.reject_refuted(owner, 1)))
    )
    rows.append(
        (
            "slashRefutedCertificate, 3 signatures, 2 slashed (n=4)",
            gas(task.slash_refuted_certificate(owner, 1, 0, dg("agg"), 0, sigs)),
        )
    )
    return rows


def main() -> None:
    rows: list[tuple[str, int]] = issue20_rows()
    for n in (4, 10):
        _, task, _, aggs = setup(n, 4, attest_window=20)
        g = [gas(task.attest(a, 1, [True] * 4)) for a in aggs[: commit_quorum(n)]]
        rows += [
            (f"attest, first of the round (n={n})", g[0]),
            (f"attest, later (n={n})", g[1]),
            (f"attest, the (n-f)-th, fixes the set (n={n})", g[-1]),
        ]
    for n in (4, 10):
        chain, task, owner, aggs = setup(n, 4, dispute_timeout=5)
        sub = next(a for a in aggs if a.address == task.current_aggregator().address)
        task.submit_aggregate(sub, 1, dg("agg"))
        task.challenge(next(a for a in aggs if a != sub), 1)
        dom = Domain(chain.chain_id, task.address)
        signers = sorted((a for a in aggs if a != sub), key=lambda a: int(a.address, 16))
        sh = verdict_struct_hash(1, 0, dg("agg"), True, 0)
        sigs = [sign_struct(a, dom, sh) for a in signers[: commit_quorum(n)]]
        rows.append(
            (
                f"resolveDispute, faulty, {commit_quorum(n)} signatures (n={n})",
                gas(task.resolve_dispute(owner, 1, 0, True, 0, sigs)),
            )
        )
    chain, task, owner, aggs = setup(4, 4, dispute_timeout=5)
    sub = next(a for a in aggs if a.address == task.current_aggregator().address)
    task.submit_aggregate(sub, 1, dg("agg"))
    task.challenge(next(a for a in aggs if a != sub), 1)
    chain.mine(5)
    rows.append(("expireDispute", gas(task.expire_dispute(owner, 1))))
    for kind in ("pre-prepare", "prepare", "commit"):
        chain, task, _, aggs = setup(4, 2)
        dom = Domain(chain.chain_id, task.address)
        liar = aggs[1]
        a: Any
        if kind == "commit":
            a = Commit(1, 0, dg("x"), True, 2, 1)
            b = replace(a, faulty=False)
        elif kind == "prepare":
            a = Prepare(2, 5, 1, 0, dg("x"), True, 1)
            b = replace(a, faulty=False)
        else:
            a = PrePrepare(2, 5, 1, 0, dg("x"), True, 1)
            b = replace(a, aggregate_digest=dg("y"))
        proof = proof_of(Evidence(kind, 1, sign(a, liar, dom), sign(b, liar, dom)))
        assert proof is not None
        sealed = proof.sealed(task.address, aggs[2].address)
        rows.append(
            (f"commitEquivocation ({kind})", gas(task.commit_equivocation(aggs[2], sealed)))
        )
        rows.append(
            (
                f"slashEquivocation ({kind}), after the commitment",
                gas(task.slash_equivocation(aggs[2], *proof.contract_args(), commit=False)),
            )
        )
    rows += issue22_hook_rows()
    targeted = registration_rows()
    print("| operation | gas | target | met |")
    print("|---|---|---|---|")
    for name, value, target in targeted:
        met = "-" if target is None else ("yes" if value <= target else "NO")
        print(f"| {name} | {value:,} | {'-' if target is None else f'≤ {target:,}'} | {met} |")
    for name, value in rows:
        print(f"| {name} | {value:,} | - | - |")


if __name__ == "__main__":
    main()
