"""FaultGames against the real contracts on the embedded chain: the leaf game refutes a faulty
aggregate with one honest challenger, a false challenger loses its bond on its clock, forged
step inputs revert, windows and chess clocks at -1/0/+1 blocks, two frivolous games and one
honest game on one claim, the exclusion and data-availability games, pull payments."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from web3.logs import DISCARD

from adapters.chain import Chain
from adapters.faultproof import FaultGamesContract, OneStepContract
from adapters.reverts import error_class
from aggregators.base import AggregationInput
from aggregators.faultproof import StepRule, differing_chunks, excluded_words, step_args
from aggregators.registry import make_rule
from protocol.merkle import CHUNK, ChunkTree, chunk_bytes, chunk_values

CLOCK = 4
WINDOW = 6
BOND = 10**17  # challenge bond
CLAIM_BOND = 10**18
VB = 2**16
D = 3 * CHUNK + 10  # four chunks, the last partial: depth 2


@dataclass
class Round:
    """One round's data: previous state, updates, weights, excluded rows, honest new state."""

    rule: StepRule
    prev: Any
    ups: list[Any]
    weights: list[int]
    excluded: list[int] = field(default_factory=list)

    @property
    def included(self) -> list[int]:
        return [i for i in range(len(self.ups)) if i not in self.excluded]

    def honest(self) -> Any:
        inc = self.included
        return (
            make_rule(self.rule.name, self.rule.params)
            .aggregate(
                AggregationInput(
                    self.prev,
                    np.stack([self.ups[i] for i in inc]),
                    np.array([self.weights[i] for i in inc], np.int64),
                    value_bound=2**30,
                )
            )
            .params
        )

    def records(self) -> tuple[list[bytes], list[int], list[int]]:
        roots = [ChunkTree(u).root for u in self.ups]
        return roots, self.weights, excluded_words(self.excluded, len(self.ups))

    def step(self, j: int) -> tuple[Any, ...]:
        inc = self.included
        return step_args(
            self.rule, j, self.prev, [self.ups[i] for i in inc], [self.weights[i] for i in inc]
        )


def make_round(rule: StepRule, seed: int = 1, k: int = 5) -> Round:
    rng = np.random.default_rng(seed)
    prev = rng.integers(-(2**20), 2**20, size=D).astype(np.int64)
    ups = [rng.integers(-VB, VB + 1, size=D).astype(np.int32) for _ in range(k)]
    return Round(rule, prev, ups, [int(v) for v in rng.integers(1, 500, size=k)])


@dataclass
class Setup:
    chain: Chain
    games: FaultGamesContract
    submitter: Any
    challengers: list[Any]


@pytest.fixture
def s(chain: Chain) -> Iterator[Setup]:
    one = OneStepContract.deploy(chain, chain.accounts[0])
    games = FaultGamesContract.deploy(chain, chain.accounts[0], one.address, CLOCK, BOND)
    yield Setup(chain, games, chain.accounts[1], chain.accounts[2:6])


def post(s: Setup, r: Round, state: Any, window: int = WINDOW) -> int:
    """Post a claim of ``state`` for round ``r``; returns its id (claims are numbered)."""
    params = (
        r.rule.rule_id,
        r.rule.beta_num,
        r.rule.beta_den,
        D,
        window,
        VB,
        ChunkTree(r.prev).root,
        ChunkTree(state).root,
    )
    receipt = s.games.tx(s.submitter, "postClaim", params, r.records(), value=CLAIM_BOND)
    ev = s.games.contract.events.ClaimPosted().process_receipt(receipt, errors=DISCARD)
    return int(ev[0]["args"]["claimId"])


def open_game(s: Setup, who: Any, fn: str, *args: Any) -> int:
    receipt = s.games.tx(who, fn, *args, value=BOND)
    return int(
        s.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)[0]["args"][
            "gameId"
        ]
    )


def reveal(s: Setup, game: int, state: Any, j: int) -> None:
    t = ChunkTree(state)
    s.games.tx(s.submitter, "revealLeaf", game, t.leaves[j], t.proof(j))


def faulty(r: Round, j: int = 2, delta: int = 1) -> Any:
    bad = r.honest().copy()
    bad[j * CHUNK + 3] += delta
    return bad


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


def _bad_update(r: Round, i: int, j: int = 1, lane: int = 5) -> None:
    r.ups[i] = r.ups[i].copy()
    r.ups[i][j * CHUNK + lane] = VB + 1


def _opening(u: Any, j: int, lane: int) -> tuple[int, bytes, list[bytes], int]:
    return (j, chunk_bytes(chunk_values(u, j)), ChunkTree(u).proof(j), lane)


def test_exclusion_game(s: Setup) -> None:
    """Exclusion game: a justified exclusion is defended; an unjustified one loses the claim."""
    r = make_round(StepRule.of("fedavg"))
    _bad_update(r, 3)
    r.excluded = [3]
    cid = post(s, r, r.honest())
    gid = open_game(s, s.challengers[0], "openExclusion", cid, 3)
    with pytest.raises(error_class("NotBad")):  # a lane within the bound is no defence
        s.games.tx(s.submitter, "defendExclusion", gid, r.records(), _opening(r.ups[3], 1, 6))
    s.games.tx(s.submitter, "defendExclusion", gid, r.records(), _opening(r.ups[3], 1, 5))
    assert s.games.view("credits", s.submitter.address) == BOND
    # excluding a good update: the submitter cannot defend it and loses on its clock
    r2 = make_round(StepRule.of("fedavg"), seed=5)
    r2.excluded = [1]
    cid2 = post(s, r2, r2.honest())
    gid2 = open_game(s, s.challengers[1], "openExclusion", cid2, 1)
    for lane in (0, 200):
        with pytest.raises(error_class("NotBad")):
            s.games.tx(
                s.submitter, "defendExclusion", gid2, r2.records(), _opening(r2.ups[1], 3, lane)
            )
    s.chain.mine(CLOCK + 1)
    s.games.tx(s.challengers[1], "timeout", gid2)
    assert s.games.view("refuted", cid2)


def test_included_bad_update_refutes_at_once(s: Setup) -> None:
    """Included bad update (beyond the value bound): one transaction refutes the claim."""
    r = make_round(StepRule.of("median"))
    _bad_update(r, 2, j=3, lane=9)
    cid = post(s, r, r.honest())
    who = s.challengers[2]
    with pytest.raises(error_class("NotBad")):  # padding lanes are never bad
        s.games.tx(who, "refuteInclusion", cid, r.records(), 2, _opening(r.ups[2], 3, 20))
    with pytest.raises(error_class("RecordsMismatch")):
        s.games.tx(
            who,
            "refuteInclusion",
            cid,
            (r.records()[0], r.weights[::-1], [0]),
            2,
            _opening(r.ups[2], 3, 9),
        )
    s.games.tx(who, "refuteInclusion", cid, r.records(), 2, _opening(r.ups[2], 3, 9))
    assert s.games.view("refuted", cid)
    assert s.games.view("credits", who.address) == CLAIM_BOND


def test_availability_game(s: Setup) -> None:
    """Data-availability game: the chunk is posted in full, or the claim falls on the clock."""
    r = make_round(StepRule.of("fedavg"))
    cid = post(s, r, r.honest())
    gid = open_game(s, s.challengers[0], "openAvailability", cid, 4, 2)
    with pytest.raises(error_class("BadUpdateProof")):
        s.games.tx(s.submitter, "postChunk", gid, r.records(), _opening(r.ups[3], 2, 0))
    receipt = s.games.tx(s.submitter, "postChunk", gid, r.records(), _opening(r.ups[4], 2, 0))
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
        s.games.tx(s.submitter, "postClaim", params, (roots, weights[:-1], exc))
