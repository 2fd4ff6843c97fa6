"""Attacks on the fault proof (issue 22), against the real contracts on the embedded chain:
a faulty aggregate signed by any number of colluders is refuted by one honest challenger;
false challenges, silent submitters, forged step inputs and included bad updates fail."""

from __future__ import annotations

import pytest

from adapters.reverts import error_class
from aggregators.faultproof import StepRule, differing_chunks, step_args
from protocol.merkle import ChunkTree
from tests.fault_support import (
    BOND,
    CLAIM_BOND,
    CLOCK,
    WINDOW,
    Setup,
    bad_update,
    faulty,
    make_round,
    open_game,
    opening,
    post,
    reveal,
    s,
)

__all__ = ["s"]


@pytest.mark.parametrize(
    "rule", [StepRule.of("fedavg"), StepRule.of("median"), StepRule.of("trimmed_mean")]
)
def test_one_honest_challenger_refutes_a_faulty_aggregate(s: Setup, rule: StepRule) -> None:
    """Faulty aggregate (one coordinate off by one) refuted by one honest challenger."""
    r = make_round(rule)
    claimed = faulty(r, j=3)  # the partial last chunk
    assert differing_chunks(r.honest(), claimed) == [3]
    cid = post(s, r, claimed)
    honest = s.challengers[0]
    gid = open_game(s, honest, "openLeaf", cid, 3)
    assert not s.games.view("settled", cid)  # finalize would be blocked: a game is open
    reveal(s, gid, claimed, 3)
    s.games.tx(honest, "prove", gid, r.step(3))
    assert s.games.view("refuted", cid) and s.games.view("settled", cid)
    assert s.games.view("credits", honest.address) == BOND + CLAIM_BOND
    before = s.chain.balance(honest.address)
    receipt = s.games.tx(honest, "withdraw")
    fee = int(receipt["gasUsed"]) * int(receipt["effectiveGasPrice"])
    assert s.chain.balance(honest.address) == before + BOND + CLAIM_BOND - fee
    with pytest.raises(error_class("NothingToWithdraw")):
        s.games.tx(honest, "withdraw")


def test_false_challenge_loses_its_bond_on_its_clock(s: Setup) -> None:
    """False challenge of a correct chunk: the step reverts, the challenger's clock runs out."""
    r = make_round(StepRule.of("fedavg"))
    cid = post(s, r, r.honest())
    liar = s.challengers[1]
    gid = open_game(s, liar, "openLeaf", cid, 1)
    with pytest.raises(error_class("NotReleasable")):
        s.games.tx(s.submitter, "release", cid)  # a game is open
    reveal(s, gid, r.honest(), 1)
    with pytest.raises(error_class("ChunkCorrect")):
        s.games.tx(liar, "prove", gid, r.step(1))
    with pytest.raises(error_class("ClockRunning")):
        s.games.tx(s.submitter, "timeout", gid)
    s.chain.mine(CLOCK)
    s.games.tx(s.submitter, "timeout", gid)
    assert s.games.view("credits", s.submitter.address) == BOND
    assert not s.games.view("refuted", cid)
    s.chain.mine(WINDOW)
    assert s.games.view("settled", cid)
    s.games.tx(s.submitter, "release", cid)
    assert s.games.view("credits", s.submitter.address) == BOND + CLAIM_BOND


def test_silent_submitter_loses_the_leaf_game(s: Setup) -> None:
    """Submitter that never reveals its leaf loses on its clock (even if its chunk is right)."""
    r = make_round(StepRule.of("fedavg"))
    cid = post(s, r, r.honest())
    gid = open_game(s, s.challengers[0], "openLeaf", cid, 0)
    s.chain.mine(CLOCK)
    s.games.tx(s.challengers[0], "timeout", gid)
    assert s.games.view("refuted", cid)


def test_forged_inputs_to_the_game_revert(s: Setup) -> None:
    """Forged game inputs: bad leaf path, wrong U_i, wrong previous root, bad path, bad witness."""
    r = make_round(StepRule.of("median"))
    claimed = faulty(r, j=1)
    cid = post(s, r, claimed)
    ch = s.challengers[0]
    gid = open_game(s, ch, "openLeaf", cid, 1)
    t = ChunkTree(claimed)
    with pytest.raises(error_class("BadLeafProof")):
        s.games.tx(s.submitter, "revealLeaf", gid, t.leaves[0], t.proof(1))
    with pytest.raises(error_class("NotYourMove")):
        s.games.tx(ch, "prove", gid, r.step(1))  # the submitter moves first
    reveal(s, gid, claimed, 1)
    args = list(r.step(1))
    other = make_round(StepRule.of("median"), seed=99)
    wrong_u = step_args(r.rule, 1, r.prev, [other.ups[0], *r.ups[1:]], r.weights)
    wrong_prev = step_args(r.rule, 1, other.prev, r.ups, r.weights)
    bad_path = list(args)
    bad_path[11] = [list(p) for p in args[11]]
    bad_path[11][2][0] = b"\x05" * 32
    bad_wit = list(args)
    w = bytearray(args[12])
    w[0:2], w[-2:] = w[-2:], w[0:2]
    bad_wit[12] = bytes(w)
    cases = [
        (wrong_u, "StepMismatch"),  # U_i not among the claim's records
        (wrong_prev, "StepMismatch"),  # not the claim's previous root
        (tuple(bad_path), "BadInputProof"),
        (tuple(bad_wit), "BadWitness"),
    ]
    for bad, name in cases:
        with pytest.raises(error_class(name)):
            s.games.tx(ch, "prove", gid, bad)
    with pytest.raises(error_class("NotYourMove")):
        s.games.tx(s.challengers[1], "prove", gid, tuple(args))  # not the challenger
    s.games.tx(ch, "prove", gid, tuple(args))
    assert s.games.view("refuted", cid)


def test_two_frivolous_games_and_one_honest_game(s: Setup) -> None:
    """Two frivolous games and one honest game on one faulty claim: the honest one wins the
    claim bond, the frivolous ones are refunded once the claim is refuted."""
    r = make_round(StepRule.of("trimmed_mean", {"beta": 0.2}))
    claimed = faulty(r, j=2, delta=-7)
    cid = post(s, r, claimed)
    f1, f2, honest = s.challengers[:3]
    g1 = open_game(s, f1, "openLeaf", cid, 0)
    g2 = open_game(s, f2, "openLeaf", cid, 1)
    g3 = open_game(s, honest, "openLeaf", cid, 2)
    for g, j in ((g1, 0), (g2, 1), (g3, 2)):
        reveal(s, g, claimed, j)
    with pytest.raises(error_class("ChunkCorrect")):
        s.games.tx(f1, "prove", g1, r.step(0))
    s.games.tx(honest, "prove", g3, r.step(2))
    assert s.games.view("refuted", cid)
    for g in (g1, g2):
        s.games.tx(s.submitter, "timeout", g)  # refunds on a refuted claim
    assert s.games.view("credits", honest.address) == BOND + CLAIM_BOND
    assert s.games.view("credits", f1.address) == BOND
    assert s.games.view("credits", f2.address) == BOND
    assert s.games.view("credits", s.submitter.address) == 0
    with pytest.raises(error_class("ClaimClosed")):
        open_game(s, s.challengers[3], "openLeaf", cid, 3)


def test_included_bad_update_refutes_at_once(s: Setup) -> None:
    """Included bad update (beyond the value bound): one transaction refutes the claim."""
    r = make_round(StepRule.of("median"))
    bad_update(r, 2, j=3, lane=9)
    cid = post(s, r, r.honest())
    who = s.challengers[2]
    with pytest.raises(error_class("NotBad")):  # padding lanes are never bad
        s.games.tx(who, "refuteInclusion", cid, r.records(), 2, opening(r.ups[2], 3, 20))
    with pytest.raises(error_class("RecordsMismatch")):
        s.games.tx(
            who,
            "refuteInclusion",
            cid,
            (r.records()[0], r.weights[::-1], [0]),
            2,
            opening(r.ups[2], 3, 9),
        )
    s.games.tx(who, "refuteInclusion", cid, r.records(), 2, opening(r.ups[2], 3, 9))
    assert s.games.view("refuted", cid)
    assert s.games.view("credits", who.address) == CLAIM_BOND


def test_unprovable_claims_are_refused(s: Setup) -> None:
    """Unprovable claim (unknown rule, bad beta, weight >= 2**64) that no step could refute."""
    r = make_round(StepRule.of("fedavg"))
    roots, weights, exc = r.records()
    root = ChunkTree(r.prev).root
    bad_params = [
        ((4, 0, 1, len(r.prev), WINDOW, 2**16, root, root), weights, 0),
        ((3, 1, 2, len(r.prev), WINDOW, 2**16, root, root), weights, 1),  # beta = 1/2
        ((3, 1, 0, len(r.prev), WINDOW, 2**16, root, root), weights, 1),  # beta = 1/0
        ((0, 0, 1, len(r.prev), WINDOW, 2**16, root, root), [2**64, *weights[1:]], 3),
    ]
    for params, w, why in bad_params:
        with pytest.raises(error_class("UnprovableClaim")) as exc_info:
            s.games.tx(
                s.submitter,
                "postClaim",
                params,
                (roots, w, exc),
                r.signers(),
                r.unincluded(),
                value=CLAIM_BOND,
            )
        assert exc_info.value.error_args["why"] == why
    ok = (0, 0, 1, len(r.prev), WINDOW, 2**16, root, root)
    ok_records = (roots, [2**64 - 1, *weights[1:]], exc)
    # a claim's bond must pay its refuter at least one challenge bond
    with pytest.raises(error_class("WrongBond")):
        s.games.tx(
            s.submitter, "postClaim", ok, ok_records, r.signers(), r.unincluded(), value=BOND - 1
        )
    s.games.tx(s.submitter, "postClaim", ok, ok_records, r.signers(), r.unincluded(), value=BOND)


def test_unanswerable_challenges_cannot_refute_an_honest_claim(s: Setup) -> None:
    """Unanswerable challenge: a chunk past the end, an update index out of range or excluded,
    an exclusion game on an included update - the honest submitter must not lose on its clock."""
    r = make_round(StepRule.of("fedavg"))
    bad_update(r, 3)
    r.excluded = [3]
    cid = post(s, r, r.honest())
    n_chunks = 4
    with pytest.raises(error_class("BadChallenge")):
        open_game(s, s.challengers[0], "openLeaf", cid, n_chunks)
    with pytest.raises(error_class("BadChallenge")):
        open_game(s, s.challengers[0], "openAvailability", cid, 0, n_chunks)
    with pytest.raises(error_class("BadChallenge")):
        open_game(s, s.challengers[0], "openAvailability", cid, 5, 0)
    with pytest.raises(error_class("BadChallenge")):
        open_game(s, s.challengers[0], "openExclusion", cid, 5)
    g_exc = open_game(s, s.challengers[1], "openAvailability", cid, 3, 1)  # an excluded update
    g_inc = open_game(s, s.challengers[2], "openExclusion", cid, 1)  # an included update
    s.games.tx(s.submitter, "postChunk", g_exc, r.records(), opening(r.ups[3], 1, 0))
    s.games.tx(s.submitter, "defendExclusion", g_inc, r.records(), opening(r.ups[1], 0, 0))
    assert not s.games.view("refuted", cid)
    assert s.games.view("credits", s.submitter.address) == 2 * BOND
