"""Issue 22, items 1 and 3, against the real task and FaultGames contracts on the embedded
chain: no honest submitter loses an exclusion game, and a claim's step parameters are the
task's.

An honest submitter excludes three kinds of updates: those the TASK did not include (fewer
than f + 1 members attested them: unavailable), those whose payload is not the vector its
client signed (honest members do not attest them, so they are not included either), and
included ones with a coordinate beyond the value bound. Only the last is the submitter's
judgment, and it is the one ``defendExclusion`` proves. The claim therefore declares which
records the task did not include; ``submitAggregateWithClaim`` requires that declaration to
be exactly the complement of the task's included set, and ``openExclusion`` refuses a game on
a declared not-included record (the task's decision, which no game can overturn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from web3.logs import DISCARD

from adapters.chain import Chain
from adapters.contract import Phase, TaskConfig, TaskContract
from adapters.faultproof import FaultGamesContract, OneStepContract
from adapters.reverts import error_class
from aggregators.faultproof import StepRule, excluded_words, fault_params_hash
from aggregators.registry import rule_id
from protocol.merkle import ChunkTree
from tests.conftest import DEFAULT_TASK_CONFIG, TaskSetup
from tests.fault_support import BOND, CLAIM_BOND, CLOCK, VB, Round, make_round
from tests.test_contract import chosen, dg, exec_at

K = 5
CHALLENGE_WINDOW = 3
GAME_WINDOW = CHALLENGE_WINDOW + 4
ATTEST_WINDOW = 4
EXCLUSION = 2  # FaultGames.Kind.Exclusion


@dataclass
class Excl:
    s: TaskSetup
    games: FaultGamesContract
    r: Round

    @property
    def task(self) -> TaskContract:
        return self.s.task


def make_task(
    chain: Chain, held: list[list[bool]], *, attest_window: int = ATTEST_WINDOW, dim: int = 0
) -> Excl:
    """A started fault-proof task (FedAvg, value bound VB) whose K clients registered round 1
    and whose members attested ``held[m]`` (one row per attesting member, in order)."""
    owner, rest = chain.accounts[0], chain.accounts[1:]
    aggregators, clients = rest[:4], rest[4 : 4 + K]
    config = TaskConfig(
        **{
            **DEFAULT_TASK_CONFIG,
            "rule_id": rule_id("fedavg"),
            "min_updates": K,
            "max_updates": K,
            "submit_timeout": 10,
            "challenge_window": CHALLENGE_WINDOW,
            "attest_window": attest_window,
        }
    )
    task = TaskContract.deploy(chain, owner, config)
    one = OneStepContract.deploy(chain, owner)
    games = FaultGamesContract.deploy(chain, owner, one.address, CLOCK, BOND)
    r = make_round(StepRule.of("fedavg"))
    task.set_fault_games(
        owner,
        games.address,
        ChunkTree(r.prev).root,
        fault_params_hash(r.rule, dim or len(r.prev), VB),
    )
    for a in aggregators:
        task.register_aggregator(a)
    for c in clients:
        task.register_client(c)
    task.start(owner)
    for i, c in enumerate(clients):
        task.submit_update(c, 1, dg(("u", i)), r.weights[i], ChunkTree(r.ups[i]).root)
    r.clients = [c.address for c in clients]
    r.digests = [dg(("u", i)) for i in range(K)]
    for a, bits in zip(aggregators, held, strict=False):
        task.attest(a, 1, bits)
    s = TaskSetup(chain, task, owner, aggregators, clients, rest[4 + K :])
    if not task.round_info(1).availability_fixed:
        exec_at(chain, task.round_info(1).attest_end)
    return Excl(s, games, r)


ALL = [True] * K
NOT_4 = [True] * 4 + [False]


def post_claim(
    e: Excl,
    who: Any,
    state: Any,
    unincluded: list[int],
    *,
    beta: tuple[int, int] | None = None,
    dim: int | None = None,
    value_bound: int = VB,
) -> int:
    r = e.r
    params = (
        r.rule.rule_id,
        r.rule.beta_num if beta is None else beta[0],
        r.rule.beta_den if beta is None else beta[1],
        len(r.prev) if dim is None else dim,
        GAME_WINDOW,
        value_bound,
        ChunkTree(r.prev).root,
        ChunkTree(state).root,
    )
    receipt = e.games.tx(
        who,
        "postClaim",
        params,
        r.records(),
        r.signers(),
        excluded_words(unincluded, len(r.ups)),
        value=CLAIM_BOND,
    )
    ev = e.games.contract.events.ClaimPosted().process_receipt(receipt, errors=DISCARD)
    return int(ev[0]["args"]["claimId"])


def open_exclusion(e: Excl, who: Any, cid: int, index: int) -> int:
    receipt = e.games.tx(who, "openExclusion", cid, index, value=BOND)
    ev = e.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)
    return int(ev[0]["args"]["gameId"])


def test_a_frivolous_exclusion_game_on_a_not_included_update_is_refused(chain: Chain) -> None:
    """(a) Update 4 was attested by one member only (f + 1 = 2 needed): the task did not
    include it, so the honest submitter excludes it. A frivolous challenger opening an
    exclusion game on it used to win by timeout (the submitter cannot show a good update bad);
    now the open reverts, and the honest claim finalizes."""
    e = make_task(chain, [ALL, NOT_4, NOT_4])
    assert e.task.included_updates(1) == NOT_4
    e.r.excluded = [4]
    agg = chosen(e.s)
    cid = post_claim(e, agg, e.r.honest(), [4])
    e.task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
    with pytest.raises(error_class("BadChallenge")) as info:
        open_exclusion(e, e.s.spare[0], cid, 4)
    assert info.value.error_args == {"kind": EXCLUSION, "index": 4, "j": 0}
    e.s.chain.mine(GAME_WINDOW)
    e.task.finalize(e.s.owner, 1)
    assert e.task.phase(1) == Phase.FINALIZED
    assert e.task.state_root(1) == ChunkTree(e.r.honest()).root
