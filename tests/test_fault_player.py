"""Aggregators play the fault-proof games unattended (aggregators/fault_player.py) on the
embedded chain: three colluding aggregators stand behind a faulty aggregate (collusion-n4-f3:
PBFT alone would certify it) and the one honest aggregator refutes it through a descent and
the one-step check; an honest submitter answers frivolous, exclusion and availability games."""

from __future__ import annotations

import numpy as np

from aggregators.fault_player import FaultPlayer, RoundView
from aggregators.faultproof import DESCENT_STRIDE, StepRule
from protocol.merkle import CHUNK, ChunkTree
from tests.fault_support import BOND, CLAIM_BOND, CLOCK, VB, Setup, open_game, s

__all__ = ["s"]


def _view(rule: StepRule, d: int, k: int, seed: int) -> RoundView:
    rng = np.random.default_rng(seed)
    prev = rng.integers(-(2**20), 2**20, size=d).astype(np.int64)
    ups = [rng.integers(-VB, VB + 1, size=d).astype(np.int32) for _ in range(k)]
    w = [int(v) for v in rng.integers(1, 500, size=k)]
    return RoundView(rule, prev, ups, w, value_bound=VB)


def _run(s: Setup, players: list[FaultPlayer], cid: int, rounds: int = 40) -> None:
    """Every player polls once per block until the claim is settled."""
    for _ in range(rounds):
        for p in players:
            p.play()
        if s.games.view("settled", cid) and not any(p.play() for p in players):
            return
        s.chain.mine(1)
    raise AssertionError("the game did not settle")


def test_collusion_n4_f3_one_honest_aggregator_refutes(s: Setup) -> None:
    """collusion-n4-f3 with the fault proof: 3 of 4 aggregators back a faulty aggregate; the
    honest one, playing unattended without the colluders' tree, gets it refuted."""
    assert int(s.games.view("DESCENT_STRIDE")) == DESCENT_STRIDE
    view = _view(StepRule.of("trimmed_mean", {"beta": 0.2}), 70 * CHUNK + 3, 7, 11)
    faulty = view.honest_state.copy()
    faulty[44 * CHUNK + 17] += 3  # the colluders' aggregate: one coordinate shifted
    colluder = FaultPlayer(s.games, s.submitter, view)
    honest = FaultPlayer(s.games, s.challengers[0], view)
    cid = colluder.post_claim(faulty, window=6, bond=CLAIM_BOND)
    # the other two colluders do not challenge (under PBFT their 3 votes would certify it);
    # the honest aggregator challenges without the claimed state (the tree is not public)
    gid = honest.watch(cid)
    assert gid is not None
    _run(s, [colluder, honest], cid)
    assert s.games.view("refuted", cid)
    assert honest.moves.count("pickNode") == 2 and honest.moves[-1] == "prove"
    assert colluder.moves.count("revealNodes") == 2
    assert honest.withdraw() == BOND + CLAIM_BOND
    # the attempt is rerun without the faulty aggregate: the honest twin's state
    assert ChunkTree(view.honest_state).root == view.honest_tree.root
    assert view.honest_tree.root != ChunkTree(faulty).root


def test_honest_submitter_wins_against_a_frivolous_challenge(s: Setup) -> None:
    """Frivolous challenge against an honest player: it reveals, then claims the bond."""
    view = _view(StepRule.of("median"), 5 * CHUNK, 6, 12)
    sub = FaultPlayer(s.games, s.submitter, view)
    cid = sub.post_claim(view.honest_state, window=8, bond=CLAIM_BOND)
    watcher = FaultPlayer(s.games, s.challengers[1], view)
    assert watcher.watch(cid) is None  # an honest claim is not challenged
    open_game(s, s.challengers[2], "openLeaf", cid, 2)
    s.chain.mine(1)
    assert sub.play() == 1 and sub.moves == ["revealLeaf"]
    s.chain.mine(CLOCK + 1)
    assert sub.play() == 1 and sub.moves[-1] == "timeout"
    s.chain.mine(8)
    s.games.tx(s.submitter, "release", cid)
    assert sub.withdraw() == BOND + CLAIM_BOND


def test_submitter_answers_exclusion_and_availability(s: Setup) -> None:
    """An honest player defends its exclusion and posts requested chunks on its own."""
    view = _view(StepRule.of("fedavg"), 3 * CHUNK + 9, 5, 13)
    view.updates[2] = view.updates[2].copy()
    view.updates[2][CHUNK + 4] = -(VB + 9)
    view.excluded = [2]
    sub = FaultPlayer(s.games, s.submitter, view)
    cid = sub.post_claim(view.honest_state, window=8, bond=CLAIM_BOND)
    open_game(s, s.challengers[0], "openExclusion", cid, 2)
    open_game(s, s.challengers[1], "openAvailability", cid, 4, 3)
    open_game(s, s.challengers[2], "openExclusion", cid, 0)  # an included update
    open_game(s, s.challengers[3], "openAvailability", cid, 2, 1)  # an excluded update
    assert sub.play() == 4
    assert sorted(sub.moves) == ["defendExclusion"] * 2 + ["postChunk"] * 2
    assert not s.games.view("refuted", cid)
    assert int(s.games.view("credits", s.submitter.address)) == 4 * BOND
