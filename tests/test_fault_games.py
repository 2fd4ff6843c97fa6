"""FaultGames mechanics against the real contracts on the embedded chain: windows and chess
clocks at -1/0/+1 blocks, frivolous games on an honest claim, the exclusion and
data-availability games, bonds, ids and pull payments."""

from __future__ import annotations

import pytest
from web3.logs import DISCARD

from adapters.reverts import error_class
from aggregators.faultproof import DESCENT_STRIDE, StepRule, descent_nodes, descent_pick
from protocol.merkle import CHUNK, ChunkTree, chunk_bytes, chunk_values, node_hash, root_of
from tests.fault_support import (
    BOND,
    CLAIM_BOND,
    CLOCK,
    VB,
    WINDOW,
    D,
    Setup,
    bad_update,
    make_round,
    open_game,
    opening,
    post,
    reveal,
    s,
)

__all__ = ["s"]


@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_challenge_window_edges(s: Setup, offset: int) -> None:
    """Games open up to the window's last block inclusive (-1/0 open, +1 refused)."""
    r = make_round(StepRule.of("fedavg"))
    cid = post(s, r, r.honest())
    end = int(s.games.view("claim", cid)[5])
    s.chain.mine_to(end + offset - 1)  # the next transaction lands in block end + offset
    if offset <= 0:
        open_game(s, s.challengers[0], "openLeaf", cid, 0)
    else:
        with pytest.raises(error_class("WindowClosed")):
            open_game(s, s.challengers[0], "openLeaf", cid, 0)


@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_chess_clock_edges(s: Setup, offset: int) -> None:
    """A move lands while elapsed <= budget; timeout only when elapsed > budget (-1/0/+1)."""
    r = make_round(StepRule.of("fedavg"))
    cid = post(s, r, r.honest())
    gid = open_game(s, s.challengers[0], "openLeaf", cid, 0)
    start = int(s.games.view("game", gid)[4])
    s.chain.mine_to(start + CLOCK + offset - 1)
    snap = s.chain.snapshot()
    if offset <= 0:
        reveal(s, gid, r.honest(), 0)
        assert int(s.games.view("game", gid)[5]) == -offset  # submitter's clock left
        s.chain.revert(snap)
        with pytest.raises(error_class("ClockRunning")):
            s.games.tx(s.challengers[0], "timeout", gid)
    else:
        with pytest.raises(error_class("ClockExpired")):
            reveal(s, gid, r.honest(), 0)
        s.chain.revert(snap)
        s.games.tx(s.challengers[0], "timeout", gid)
        assert s.games.view("refuted", cid)


def test_two_frivolous_games_on_an_honest_claim(s: Setup) -> None:
    """Two frivolous games on an honest claim: both lose their bonds to the submitter."""
    r = make_round(StepRule.of("median"))
    cid = post(s, r, r.honest())
    pairs = list(zip(s.challengers[:2], (0, 3), strict=True))
    gids = [open_game(s, c, "openLeaf", cid, j) for c, j in pairs]
    for g, j in zip(gids, (0, 3), strict=True):
        reveal(s, g, r.honest(), j)
    s.chain.mine(CLOCK + 1)
    for g in gids:
        s.games.tx(s.submitter, "timeout", g)
    s.chain.mine(WINDOW)
    s.games.tx(s.submitter, "release", cid)
    assert s.games.view("credits", s.submitter.address) == 2 * BOND + CLAIM_BOND


def test_exclusion_game(s: Setup) -> None:
    """Exclusion game: a justified exclusion is defended; an unjustified one loses the claim."""
    r = make_round(StepRule.of("fedavg"))
    bad_update(r, 3)
    r.excluded = [3]
    cid = post(s, r, r.honest())
    gid = open_game(s, s.challengers[0], "openExclusion", cid, 3)
    with pytest.raises(error_class("NotBad")):  # a lane within the bound is no defence
        s.games.tx(s.submitter, "defendExclusion", gid, r.records(), opening(r.ups[3], 1, 6))
    s.games.tx(s.submitter, "defendExclusion", gid, r.records(), opening(r.ups[3], 1, 5))
    assert s.games.view("credits", s.submitter.address) == BOND
    # excluding a good update: the submitter cannot defend it and loses on its clock
    r2 = make_round(StepRule.of("fedavg"), seed=5)
    r2.excluded = [1]
    cid2 = post(s, r2, r2.honest())
    gid2 = open_game(s, s.challengers[1], "openExclusion", cid2, 1)
    for lane in (0, 200):
        with pytest.raises(error_class("NotBad")):
            s.games.tx(
                s.submitter, "defendExclusion", gid2, r2.records(), opening(r2.ups[1], 3, lane)
            )
    s.chain.mine(CLOCK + 1)
    s.games.tx(s.challengers[1], "timeout", gid2)
    assert s.games.view("refuted", cid2)


def test_availability_game(s: Setup) -> None:
    """Data-availability game: the chunk is posted in full, or the claim falls on the clock."""
    r = make_round(StepRule.of("fedavg"))
    cid = post(s, r, r.honest())
    gid = open_game(s, s.challengers[0], "openAvailability", cid, 4, 2)
    with pytest.raises(error_class("BadUpdateProof")):
        s.games.tx(s.submitter, "postChunk", gid, r.records(), opening(r.ups[3], 2, 0))
    receipt = s.games.tx(s.submitter, "postChunk", gid, r.records(), opening(r.ups[4], 2, 0))
    ev = s.games.contract.events.ChunkPosted().process_receipt(receipt, errors=DISCARD)[0]["args"]
    assert bytes(ev["chunk"]) == chunk_bytes(chunk_values(r.ups[4], 2))
    assert s.games.view("credits", s.submitter.address) == BOND
    gid2 = open_game(s, s.challengers[1], "openAvailability", cid, 0, 0)
    s.chain.mine(CLOCK + 1)
    s.games.tx(s.challengers[1], "timeout", gid2)
    assert s.games.view("refuted", cid)


def test_wrong_bond_and_unknown_ids(s: Setup) -> None:
    """Challenges with a wrong bond, unknown claims/games and bad claims are refused."""
    r = make_round(StepRule.of("fedavg"))
    cid = post(s, r, r.honest())
    with pytest.raises(error_class("WrongBond")):
        s.games.tx(s.challengers[0], "openLeaf", cid, 0, value=BOND - 1)
    with pytest.raises(error_class("UnknownId")):
        s.games.tx(s.challengers[0], "openLeaf", cid + 1, 0, value=BOND)
    with pytest.raises(error_class("UnknownId")):
        s.games.tx(s.challengers[0], "timeout", 7)
    roots, weights, exc = r.records()
    params = (0, 0, 1, D, WINDOW, VB, bytes(32), bytes(32))
    with pytest.raises(error_class("BadClaim")):
        s.games.tx(s.submitter, "postClaim", params, (roots, weights[:-1], exc), r.signers(), [0])


def test_descent_reaches_the_faulty_leaf_without_a_public_tree(s: Setup) -> None:
    """16-ary descent (the submitter's tree is not public): two reveals reach the faulty
    leaf of a 40-chunk state, then the one-step check refutes; forged reveals and picks fail."""
    d = 40 * CHUNK
    r = make_round(StepRule.of("fedavg"), seed=3, d=d)
    honest = ChunkTree(r.honest())
    claimed = r.honest().copy()
    claimed[33 * CHUNK + 100] -= 1
    theirs = ChunkTree(claimed)
    cid = post(s, r, claimed)
    ch = s.challengers[0]
    gid = open_game(s, ch, "openDescent", cid)
    level, index = theirs.depth, 0
    assert level == 6
    wrong = descent_nodes(theirs, level, index)
    with pytest.raises(error_class("BadNodes")):
        s.games.tx(s.submitter, "revealNodes", gid, [wrong[1], *wrong[1:]])
    moves = 0
    while level > 0:
        nodes = descent_nodes(theirs, level, index)
        s.games.tx(s.submitter, "revealNodes", gid, nodes)
        pick = descent_pick(honest, level, index, nodes)
        assert pick is not None
        with pytest.raises(error_class("BadPick")):
            s.games.tx(ch, "pickNode", gid, nodes, len(nodes))
        s.games.tx(ch, "pickNode", gid, nodes, pick)
        m = min(DESCENT_STRIDE, level)
        level, index = level - m, (index << m) | pick
        moves += 1
    assert (moves, index) == (2, 33)
    g = s.games.view("game", gid)
    assert (g[2], g[8], g[9]) == (1, 33, theirs.leaves[33])  # now a leaf game at chunk 33
    s.games.tx(ch, "prove", gid, r.step(33))
    assert s.games.view("refuted", cid)


def test_descent_into_an_empty_slot_refutes(s: Setup) -> None:
    """A claimed tree with a non-empty node in an empty leaf slot loses the descent at once."""
    d = 3 * CHUNK  # three chunks: slot 3 is empty
    r = make_round(StepRule.of("median"), seed=4, d=d)
    t = ChunkTree(r.honest())
    forged = list(t.levels[0])
    forged[3] = b"\x07" * 32

    top = node_hash(node_hash(forged[0], forged[1]), node_hash(forged[2], forged[3]))
    params = (r.rule.rule_id, 0, 1, d, WINDOW, VB, ChunkTree(r.prev).root, root_of(d, top))
    receipt = s.games.tx(
        s.submitter, "postClaim", params, r.records(), r.signers(), r.unincluded(), value=CLAIM_BOND
    )
    cid = int(
        s.games.contract.events.ClaimPosted().process_receipt(receipt, errors=DISCARD)[0]["args"][
            "claimId"
        ]
    )
    gid = open_game(s, s.challengers[0], "openDescent", cid)
    s.games.tx(s.submitter, "revealNodes", gid, forged)
    assert descent_pick(t, 2, 0, forged) == 3
    s.games.tx(s.challengers[0], "pickNode", gid, forged, 3)
    assert s.games.view("refuted", cid)
