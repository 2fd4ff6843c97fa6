"""Issue 22 item 5 (prototype): the stopping rule under the fault proof, against the real task
and FaultGames contracts on the embedded chain. A claim commits its round's squared update
norm (``commitNorm``: the norm root over the prefix sums S_j and the total); the task counts
quiet rounds itself (``setStopRule``: T**2 and patience) and a finalized stop completes it.
One honest challenger refutes a false stop and an omitted stop, whatever the other members
sign: the next (honest) claim decides the round, and the task ends exactly where the honest
run ends."""

from __future__ import annotations

from typing import Any

import pytest
from web3.logs import DISCARD

from adapters.chain import Chain
from adapters.contract import ClaimMismatch
from aggregators.faultproof import StepRule, norm_step_args, norm_sums
from protocol.merkle import ChunkTree, norm_leaf
from tests.attacks.test_fault_proof_hooks import (
    GAME_WINDOW,
    Hooked,
    K,
    make_hooked,
    post_claim,
)
from tests.fault_support import BOND, make_round
from tests.test_contract import chosen, dg


def _submit(h: Hooked, sums: list[int], total: int, label: str) -> tuple[Any, int, ChunkTree]:
    """The chosen member claims the honest state, commits a norm tree over ``sums`` with
    total ``total``, and submits with the claim."""
    agg = chosen(h.s)
    cid = post_claim(h, agg, h.r.honest())
    tree = ChunkTree.of_leaves(h.r.prev.size, [norm_leaf(v) for v in sums])
    h.games.tx(agg, "commitNorm", cid, tree.root, total)
    h.task.submit_aggregate_with_claim(agg, 1, dg(label), cid)
    return agg, cid, tree


def _stop_event(h: Hooked, attempt: int) -> dict[str, Any]:
    logs = h.task.contract.events.StopCounted().get_logs(from_block=0)
    (ev,) = [e["args"] for e in logs if e["args"]["attempt"] == attempt]
    return dict(ev)


def _refute_norm(h: Hooked, cid: int, agg: Any, tree: ChunkTree, j: int) -> None:
    honest = h.s.spare[0]
    receipt = h.games.tx(honest, "openNormLeaf", cid, j, value=BOND)
    ev = h.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)
    gid = int(ev[0]["args"]["gameId"])
    receipt = h.games.tx(
        agg,
        "revealNormLeaf",
        gid,
        tree.leaves[j],
        tree.proof(j),
        tree.leaves[j - 1],
        tree.proof(j - 1),
    )
    # the challenger knows the honest norm tree only: S_{j-1}'s proof is the one revealed
    (ev,) = h.games.contract.events.NormLeavesRevealed().process_receipt(receipt, errors=DISCARD)
    proof = [bytes(x) for x in ev["args"]["prevProof"]]
    new = h.r.honest()
    s_prev = norm_sums(h.r.prev, new)[j - 1]
    args = norm_step_args(j, h.r.prev, new, s_prev, tree.root, proof)
    h.games.tx(honest, "proveNorm", gid, args)
    assert h.games.view("refuted", cid)


def _lied(honest: list[int], shift: int) -> list[int]:
    """A consistent lie: S_j from chunk 1 on shifted by ``shift`` (the total too)."""
    return [v if j < 1 else v + shift for j, v in enumerate(honest)]


@pytest.mark.parametrize("attack", ["false_stop", "omit_stop"])
def test_one_honest_member_refutes_a_false_or_omitted_stop(chain: Chain, attack: str) -> None:
    """false_stop: the round is not quiet, the colluding submitter commits a norm below T**2
    (the task would complete); omit_stop: the round is quiet (patience 1: the task should
    complete), the submitter commits one above. Refuted at the first shifted prefix sum; the
    next member's honest claim decides: the task completes iff the honest run does."""
    r = make_round(StepRule.of("fedavg"))  # the round make_hooked registers
    honest = norm_sums(r.prev, r.honest())
    total = honest[-1]
    t_sq = total if attack == "false_stop" else total + 1  # quiet iff normSq < T**2
    h = make_hooked(chain, stop=(t_sq, 1))
    shift = -(honest[1] - honest[0]) if attack == "false_stop" else 10**9
    lied = _lied(honest, shift)
    agg, cid, tree = _submit(h, lied, lied[-1], "lie")
    assert _stop_event(h, 0)["stop"] is (attack == "false_stop")
    _refute_norm(h, cid, agg, tree, 1)
    h.s.chain.mine(GAME_WINDOW)
    h.task.reject_refuted(h.s.spare[1], 1)
    assert h.task.aggregator_info(agg.address).slashed
    _submit(h, honest, total, "honest")
    assert _stop_event(h, 1) == {
        "round": 1,
        "attempt": 1,
        "count": 0 if attack == "false_stop" else 1,
        "stop": attack == "omit_stop",
    }
    h.s.chain.mine(GAME_WINDOW)
    h.task.finalize(h.s.owner, 1)
    assert h.task.task_completed() is (attack == "omit_stop")
    assert h.task.state_root(1) == ChunkTree(h.r.honest()).root


def test_a_false_total_over_an_honest_tree_is_refuted_at_the_last_leaf(chain: Chain) -> None:
    h = make_hooked(chain, stop=(1, 1))
    honest = norm_sums(h.r.prev, h.r.honest())
    agg, cid, tree = _submit(h, honest, 0, "lie")  # 0 < T**2: a false stop
    assert _stop_event(h, 0)["stop"] is True
    last = len(honest) - 1
    receipt = h.games.tx(h.s.spare[0], "openNormLeaf", cid, last, value=BOND)
    gid = int(
        h.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)[0]["args"][
            "gameId"
        ]
    )
    h.games.tx(
        agg,
        "revealNormLeaf",
        gid,
        tree.leaves[last],
        tree.proof(last),
        tree.leaves[last - 1],
        tree.proof(last - 1),
    )
    assert h.games.view("refuted", cid)


def test_a_stop_task_needs_a_norm_commitment_and_counts_a_carried_round_as_nothing(
    chain: Chain,
) -> None:
    """Without commitNorm the claim is refused (ClaimMismatch 9); a carried round (every
    update excluded) leaves the counter where it was and never stops, even when quiet."""
    h = make_hooked(chain, stop=(2**255, 1))  # every round quiet
    agg = chosen(h.s)
    cid = post_claim(h, agg, h.r.honest())
    with pytest.raises(ClaimMismatch) as info:
        h.task.submit_aggregate_with_claim(agg, 1, dg("x"), cid)
    assert info.value.error_args == {"claimId": cid, "reason": 9}
    h.r.excluded = list(range(K))
    carried = h.r.prev
    cid2 = post_claim(h, agg, carried)
    tree = ChunkTree.of_leaves(carried.size, [norm_leaf(0)] * len(norm_sums(carried, carried)))
    h.games.tx(agg, "commitNorm", cid2, tree.root, 0)
    h.task.submit_aggregate_with_claim(agg, 1, dg("carried"), cid2)
    assert _stop_event(h, 0) == {"round": 1, "attempt": 0, "count": 0, "stop": False}
    h.s.chain.mine(GAME_WINDOW)
    h.task.finalize(h.s.owner, 1)
    assert not h.task.task_completed()


# -- full runs: the nodes play it (n = 4, f = 3 colluders, dispute = "fault-proof") ----------

#: the digits MLP's round deltas have L2 norm 0.47-1.9 (tests/attacks/test_stop_claims.py)
ALWAYS_QUIET = 100.0
NEVER_QUIET = 1e-4


def _full_run(tmp_path: Any, stop_norm: float, publish: str, rounds: int) -> tuple[Any, Any, Any]:
    from fedchain.sim.runner import Demo
    from fedchain.sim.scenario import scenario_from_dict

    colluders = [{"index": i, "publish": publish, "pbft": "colluding"} for i in range(3)]
    data: dict[str, Any] = {
        "run": {
            "clients": 4,
            "aggregators": 4,
            "rounds": rounds,
            "epochs": 1,
            "challenge_window": 3,
            "submit_timeout": 3,
            "stop_norm": stop_norm,
            "stop_patience": 1,
            "seed": 0,
            "dispute": "fault-proof",
            "out": str(tmp_path),
            "name": publish,
        },
        "aggregator": colluders,
    }
    scenario = scenario_from_dict(data, "stop-fault-proof.toml")
    demo = Demo(scenario.config, scenario=scenario)
    summary = demo.run().summary
    twin = scenario.honest_twin()
    return demo, summary, Demo(twin.config, scenario=twin).run().summary


@pytest.mark.parametrize(
    ("publish", "stop_norm", "stopped_at", "rounds"),
    # one round for false_stop: with 3 of 4 members slashed in round 1, round 2's updates
    # cannot reach f + 1 = 2 attestations (a limit of the availability rule, not of the stop)
    [("false_stop", NEVER_QUIET, None, 1), ("omit_stop", ALWAYS_QUIET, 1, 3)],
)
def test_colluders_false_or_omitted_stop_is_refuted_in_a_full_run(
    tmp_path: Any, publish: str, stop_norm: float, stopped_at: int | None, rounds: int
) -> None:
    """3 of 4 aggregators collude (they never challenge each other and would certify each
    other under PBFT) and commit a wrong norm whenever their stop claim differs from the
    rule's; the one honest member refutes each by a norm game, and the task ends exactly
    where its honest twin ends, with the same model."""
    from fedchain.sim.scenario import outcome_of

    demo, summary, twin = _full_run(tmp_path, stop_norm, publish, rounds)
    faults = summary["faults"]
    assert outcome_of(summary) == "safe" and faults["faulty_finalized"] == 0
    assert faults["faulty_aggregates"] >= 1
    assert faults["claims_refuted"] == faults["faulty_aggregates"]
    assert faults["honest_claims_refuted"] == 0 and faults["faulty_claims_unrefuted"] == 0
    assert summary["stopped_at"] == twin["stopped_at"] == stopped_at
    assert summary["rounds_finalized"] == twin["rounds_finalized"]
    assert summary["final_model_digest"] == twin["final_model_digest"]
    assert demo.task.round_info(1).stop is (stopped_at == 1)


def test_the_stop_rule_is_fixed_before_anyone_stakes(chain: Chain, task_factory: Any) -> None:
    """setStopRule: owner only, on a fault-proof task, non-zero, once, before staking."""
    from adapters.contract import BadStopRule, NoFaultGames, OwnableUnauthorizedAccount

    h = make_hooked(chain, stop=(4, 2))  # aggregators already registered
    with pytest.raises(BadStopRule):
        h.task.set_stop_rule(h.s.owner, 4, 2)
    s = task_factory(start=False, n_aggregators=0, attest_window=2)
    with pytest.raises(NoFaultGames):
        s.task.set_stop_rule(s.owner, 4, 2)
    s.task.set_fault_games(s.owner, h.games.address, bytes(31) + b"\x01", bytes(32))
    with pytest.raises(OwnableUnauthorizedAccount):
        s.task.set_stop_rule(s.spare[0], 4, 2)
    for bad in [(0, 2), (4, 0)]:
        with pytest.raises(BadStopRule):
            s.task.set_stop_rule(s.owner, *bad)
    s.task.set_stop_rule(s.owner, 4, 2)
    with pytest.raises(BadStopRule):
        s.task.set_stop_rule(s.owner, 4, 2)
