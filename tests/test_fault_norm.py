"""The stopping rule's one-step check (prototype, docs/fault-proof.md): the norm tree over the
prefix sums S_j of a round's squared update norm, and ``OneStep.normStep`` recomputing leaf j
from chunk j of the previous and of the claimed state and S_{j-1}, against the Python spec
(``aggregators.faultproof.norm_sums`` / ``norm_tree``, ``aggregators.stopping``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from web3.logs import DISCARD

from adapters.chain import Chain
from adapters.faultproof import OneStepContract
from adapters.reverts import error_class
from aggregators.faultproof import (
    DESCENT_STRIDE,
    StepRule,
    descent_nodes,
    descent_pick,
    norm_step_args,
    norm_sums,
    norm_tree,
)
from aggregators.stopping import delta_norm_sq
from protocol.merkle import CHUNK, ChunkTree, chunk_bytes, norm_leaf, verify_chunk
from tests import fault_support
from tests.fault_support import BOND, CLOCK, Setup, make_round, open_game, post

s = fault_support.s  # the deployed OneStep + FaultGames fixture

I32 = (-(2**31), 2**31 - 1)


@pytest.fixture
def one_step(chain: Chain) -> OneStepContract:
    return OneStepContract.deploy(chain, chain.accounts[0])


def _states(seed: int, d: int, scale: int) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    if scale == 0:  # the int32 edges: |delta| up to 2**32 - 1
        prev = rng.choice(I32, size=d)
        new = rng.choice(I32, size=d)
    else:
        prev = rng.integers(-scale, scale + 1, size=d)
        new = prev + rng.integers(-scale, scale + 1, size=d)
    return prev.astype(np.int64), np.clip(new, *I32).astype(np.int64)


def _args(j: int, prev: Any, new: Any, sums: list[int], tree: ChunkTree) -> tuple[Any, ...]:
    """The norm step with S_{j-1} and its proof taken from ``tree`` (the claim's)."""
    if j == 0:
        return norm_step_args(0, prev, new, 0, tree.root, [])
    return norm_step_args(j, prev, new, sums[j - 1], tree.root, tree.proof(j - 1))


def test_prefix_sums_end_at_the_stopping_rules_norm() -> None:
    for seed, d, scale in [(1, 3 * CHUNK + 7, 1000), (2, CHUNK, 0), (3, 1, 5)]:
        prev, new = _states(seed, d, scale)
        sums = norm_sums(prev, new)
        assert len(sums) == -(-d // CHUNK)
        assert sums[-1] == delta_norm_sq(prev, new)
        assert sums == sorted(sums)
        t = norm_tree(prev, new)
        for j, v in enumerate(sums):
            assert verify_chunk(t.root, d, j, norm_leaf(v), t.proof(j))


@pytest.mark.parametrize("scale", [0, 1, 2**16, 2**30])
def test_solidity_chunk_norm_equals_python(one_step: OneStepContract, scale: int) -> None:
    rng = np.random.default_rng(scale)
    for _ in range(4):
        valid = CHUNK if rng.random() < 0.5 else int(rng.integers(0, CHUNK))
        prev, new = _states(int(rng.integers(1 << 30)), CHUNK, scale)
        prev[valid:] = 0
        new[valid:] = 0
        want = sum(int(x) ** 2 for x in (new - prev)[:valid])
        got = one_step.chunk_norm_sq(chunk_bytes(prev), chunk_bytes(new), valid)
        assert got == want


def test_norm_step_recomputes_every_leaf(one_step: OneStepContract) -> None:
    d = 4 * CHUNK + 77  # five chunks, the last partial: depth 3
    prev, new = _states(7, d, 2**20)
    sums = norm_sums(prev, new)
    tree = norm_tree(prev, new)
    for j in range(len(sums)):
        total, leaf = one_step.norm_step(_args(j, prev, new, sums, tree))
        assert (total, leaf) == (sums[j], tree.leaves[j])


def test_a_wrong_prefix_sum_is_caught_at_the_leftmost_differing_leaf(
    one_step: OneStepContract,
) -> None:
    """A claim whose norm tree says the round was quieter than it was (S from chunk 2 on
    lowered): at the leftmost differing leaf S_{j-1} is honest and the step's leaf differs."""
    d = 4 * CHUNK
    prev, new = _states(8, d, 2**10)
    honest = norm_sums(prev, new)
    lied = [v if j < 2 else v - (honest[2] - honest[1]) for j, v in enumerate(honest)]
    lied_tree = norm_tree(prev, new).of_leaves(d, [norm_leaf(v) for v in lied])
    j = next(i for i, (a, b) in enumerate(zip(honest, lied, strict=True)) if a != b)
    assert j == 2
    _, leaf = one_step.norm_step(_args(j, prev, new, lied, lied_tree))
    assert leaf != lied_tree.leaves[j] and leaf == norm_leaf(honest[j])


def test_forged_norm_step_inputs_revert(one_step: OneStepContract) -> None:
    d = 2 * CHUNK + 5
    prev, new = _states(9, d, 100)
    sums = norm_sums(prev, new)
    args = _args(2, prev, new, sums, norm_tree(prev, new))
    one_step.norm_step(args)

    def forged(i: int, value: object, base: tuple[Any, ...] = args) -> tuple[Any, ...]:
        a = list(base)
        a[i] = value
        return tuple(a)

    first = _args(0, prev, new, sums, norm_tree(prev, new))
    cases = [
        (forged(2, bytes(32)), "BadPrevProof"),  # another previous root
        (forged(6, chunk_bytes(new[:CHUNK])), "BadNewProof"),  # another chunk of the claim
        (forged(5, bytes(32)), "BadNewProof"),  # another new root
        (forged(9, sums[1] - 1), "BadNormProof"),  # S_{j-1} not the claim's
        (forged(8, bytes(32)), "BadNormProof"),  # another norm root
        (forged(9, 1, first), "BadNormProof"),  # S_{-1} is 0
    ]
    for bad, name in cases:
        with pytest.raises(error_class(name)):
            one_step.norm_step(bad)


# -- the norm games in FaultGames (prototype): one honest challenger against a lying total --


def _norm_claim(
    g: Setup, prev: Any, new: Any, sums: list[int], total: int
) -> tuple[int, ChunkTree]:
    """Post a claim of ``new`` (FedAvg over 3 updates of ``make_round``'s shape) and commit
    the norm tree over ``sums`` with total ``total``."""
    r = make_round(StepRule.of("fedavg"), k=3, d=prev.size)
    r.prev = prev
    cid = post(g, r, new)
    tree = ChunkTree.of_leaves(prev.size, [norm_leaf(v) for v in sums])
    g.games.tx(g.submitter, "commitNorm", cid, tree.root, total)
    return cid, tree


def _reveal(g: Setup, gid: int, tree: ChunkTree, j: int) -> list[bytes]:
    """The submitter reveals norm leaves j and j - 1; returns S_{j-1}'s proof as the
    challenger reads it from NormLeavesRevealed."""
    prev_leaf, prev_proof = (tree.leaves[j - 1], tree.proof(j - 1)) if j else (bytes(32), [])
    receipt = g.games.tx(
        g.submitter, "revealNormLeaf", gid, tree.leaves[j], tree.proof(j), prev_leaf, prev_proof
    )
    ev = g.games.contract.events.NormLeavesRevealed().process_receipt(receipt, errors=DISCARD)
    return [bytes(x) for x in ev[0]["args"]["prevProof"]]


def _prove(g: Setup, who: Any, gid: int, cid: int, prev: Any, new: Any, proof: list[bytes]) -> None:
    """The challenger's norm step from what it knows: the honest S_{j-1} (the leftmost
    differing leaf's predecessor agrees), the claim's norm root and the revealed proof."""
    j = int(g.games.view("game", gid)[8])
    honest = norm_sums(prev, new)
    root = bytes(g.games.view("norm", cid)[0])
    g.games.tx(
        who, "proveNorm", gid, norm_step_args(j, prev, new, honest[j - 1] if j else 0, root, proof)
    )


def test_a_false_quiet_total_is_refuted_at_the_last_leaf(s: Setup) -> None:
    """The submitter's norm tree is honest but its committed total is not (a false "quiet"):
    revealing leaf n - 1 refutes the claim at once."""
    prev, new = _states(11, 3 * CHUNK + 9, 2**12)
    sums = norm_sums(prev, new)
    cid, tree = _norm_claim(s, prev, new, sums, sums[-1] // 2)
    gid = open_game(s, s.challengers[0], "openNormLeaf", cid, len(sums) - 1)
    _reveal(s, gid, tree, len(sums) - 1)
    assert s.games.view("refuted", cid)


@pytest.mark.parametrize("lie", ["lower", "higher"])
def test_a_wrong_prefix_sum_is_refuted_by_the_norm_step(s: Setup, lie: str) -> None:
    """A consistent lie (every S_j from chunk 1 on shifted, total included: a false stop or
    an omitted one) survives the last-leaf check; the norm step at the first shifted leaf
    refutes it (S_{j-1} is still the honest one there)."""
    prev, new = _states(12, 3 * CHUNK + 9, 2**12)
    honest = norm_sums(prev, new)
    shift = -(honest[1] - honest[0]) if lie == "lower" else 10**6
    sums = [v if j < 1 else v + shift for j, v in enumerate(honest)]
    cid, tree = _norm_claim(s, prev, new, sums, sums[-1])
    last = open_game(s, s.challengers[0], "openNormLeaf", cid, len(sums) - 1)
    _reveal(s, last, tree, len(sums) - 1)
    assert not s.games.view("refuted", cid)  # the total matches the tree's last leaf
    gid = open_game(s, s.challengers[1], "openNormLeaf", cid, 1)
    _prove(s, s.challengers[1], gid, cid, prev, new, _reveal(s, gid, tree, 1))
    assert s.games.view("refuted", cid)


def test_an_honest_norm_commitment_wins_its_games(s: Setup) -> None:
    """A challenger of an honest norm leaf cannot prove it wrong (ChunkCorrect) and loses on
    its clock; games need the commitment, and it is made once, by the submitter."""
    prev, new = _states(13, 2 * CHUNK + 9, 2**12)
    sums = norm_sums(prev, new)
    cid, tree = _norm_claim(s, prev, new, sums, sums[-1])
    with pytest.raises(error_class("NormCommitment")):
        s.games.tx(s.submitter, "commitNorm", cid, tree.root, 0)
    with pytest.raises(error_class("NotYourMove")):
        s.games.tx(s.challengers[0], "commitNorm", cid, tree.root, 0)
    gid = open_game(s, s.challengers[0], "openNormLeaf", cid, 2)
    proof = _reveal(s, gid, tree, 2)
    with pytest.raises(error_class("ChunkCorrect")):
        _prove(s, s.challengers[0], gid, cid, prev, new, proof)
    s.chain.mine(CLOCK + 1)
    s.games.tx(s.challengers[0], "timeout", gid)
    assert not s.games.view("refuted", cid)
    other = post(s, make_round(StepRule.of("fedavg"), k=3, d=prev.size), new)
    with pytest.raises(error_class("NormCommitment")):
        s.games.tx(s.challengers[1], "openNormLeaf", other, 0, value=BOND)


def test_a_norm_descent_finds_the_leftmost_wrong_prefix_sum(s: Setup) -> None:
    """Without naming the leaf: the 16-ary descent over the norm tree, picking the first
    node that differs from the honest norm tree, ends on the leftmost wrong S_j, where the
    norm step refutes."""
    d = 40 * CHUNK  # 40 leaves: depth 6, two descent rounds
    prev, new = _states(14, d, 2**8)
    honest = norm_sums(prev, new)
    sums = [v if j < 23 else v - 1 for j, v in enumerate(honest)]
    cid, tree = _norm_claim(s, prev, new, sums, sums[-1])
    mine = norm_tree(prev, new)
    gid = open_game(s, s.challengers[0], "openNormDescent", cid)
    level, index = tree.depth, 0
    while level:
        nodes = descent_nodes(tree, level, index)
        s.games.tx(s.submitter, "revealNodes", gid, nodes)
        pick = descent_pick(mine, level, index, nodes)
        assert pick is not None
        s.games.tx(s.challengers[0], "pickNode", gid, nodes, pick)
        m = min(DESCENT_STRIDE, level)
        level, index = level - m, (index << m) | pick
    assert index == 23
    _prove(s, s.challengers[0], gid, cid, prev, new, _reveal(s, gid, tree, 23))
    assert s.games.view("refuted", cid)
