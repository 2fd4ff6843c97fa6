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

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from web3.logs import DISCARD

from adapters.chain import Chain
from adapters.contract import (
    AttestWindowRequired,
    ClaimMismatch,
    Phase,
    TaskContract,
)
from adapters.faultproof import FaultGamesContract
from adapters.reverts import error_class
from aggregators.fault_agent import check_fault_params, fault_params_hash_of
from aggregators.faultproof import excluded_words
from aggregators.registry import rule_id
from clients.node import ClientNode
from fedchain.sim.runner import Demo
from fedchain.sim.scenario import scenario_from_dict
from protocol.errors import ConfigError
from protocol.merkle import ChunkTree
from tests.conftest import TaskSetup
from tests.fault_support import BOND, CLAIM_BOND, VB, Round, started_fault_round
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
    s, games, r = started_fault_round(
        chain,
        {
            "rule_id": rule_id("fedavg"),
            "challenge_window": CHALLENGE_WINDOW,
            "attest_window": attest_window,
        },
        dim=dim,
    )
    task, aggregators = s.task, s.aggregators
    for a, bits in zip(aggregators, held, strict=False):
        task.attest(a, 1, bits)
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


def test_b_a_client_signing_a_wrong_u_i_is_not_included_and_the_honest_claim_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(b) A client registers a U_i that is not the chunk root of the payload it publishes
    (a full run: real nodes, real contracts, ``dispute = "fault-proof"``). Honest members
    attest only a payload matching its signed U_i, so the update is not included; the honest
    submitter's claim declares it not included (the task accepts the declaration), nobody
    can open an exclusion game on it, and the round finalizes with no one slashed. Before
    the fix the members attested it (included), the honest submitter excluded it as invalid
    and could not show it bad: a frivolous exclusion game refuted its claim."""
    liar = 0
    signed = ClientNode.chunk_root

    def wrong_root(self: ClientNode, round_: int, payload: bytes) -> bytes:
        root = signed(self, round_, payload)
        if self.name == f"client-{liar}":
            return bytes(b ^ 0xFF for b in root)
        return root

    monkeypatch.setattr(ClientNode, "chunk_root", wrong_root)
    data: dict[str, Any] = {
        "run": {
            "clients": 4,
            "aggregators": 4,
            "rounds": 1,
            "epochs": 1,
            "challenge_window": 3,
            "submit_timeout": 3,
            "attest_window": 5,
            "dispute": "fault-proof",
            "min_updates": 3,
            "seed": 0,
            "out": str(tmp_path),
            "name": "wrong-u-i",
        }
    }
    demo = Demo(scenario_from_dict(data, "wrong-u-i.toml").config)
    summary = demo.run().summary
    task, games = demo.task, demo.deployment.games
    assert games is not None
    records = task.updates(1)
    bad = [i for i, r in enumerate(records) if r.client == demo.client_accounts[liar].address]
    assert len(bad) == 1
    (index,) = bad
    assert task.included_updates(1)[index] is False
    assert sum(task.included_updates(1)) == len(records) - 1
    cid = task.claim_of(1, 0)
    assert cid is not None
    _, _, unincluded = games.view("claimBinding", cid)
    assert unincluded == excluded_words([index], len(records))
    with pytest.raises(error_class("BadChallenge")):
        games.tx(demo.client_accounts[1], "openExclusion", cid, index, value=BOND)
    assert summary["all_rounds_finalized"] and not games.view("refuted", cid)
    assert not any(task.aggregator_info(a.address).slashed for a in demo.agg_accounts)
    # item 3: the deployment bound the manifest's step parameters; a node whose manifest
    # names others (here another rule) refuses to join
    assert task.fault_params_hash() == fault_params_hash_of(demo.manifest)
    check_fault_params(task, demo.manifest)
    with pytest.raises(ConfigError, match="refusing to join"):
        check_fault_params(task, replace(demo.manifest, rule="median"))


def test_c_a_claim_declaring_an_included_update_not_included_is_refused(chain: Chain) -> None:
    """(c) Every update was included (attested by all). A malicious submitter drops honest
    update 2 by excluding it and declaring it not included (so no exclusion game could touch
    it): the task refuses the claim (reason 8). So is a claim that hides a not-included
    update among the included ones' exclusions (declaring nothing), and FaultGames refuses
    a declaration outside the excluded set at once."""
    e = make_task(chain, [ALL, ALL, ALL])
    agg = chosen(e.s)
    e.r.excluded = [2]
    dropped = e.r.honest()
    cid = post_claim(e, agg, dropped, [2])
    with pytest.raises(ClaimMismatch) as info:
        e.task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
    assert info.value.error_args == {"claimId": cid, "reason": 8}
    with pytest.raises(error_class("UnincludedNotExcluded")) as bad:
        post_claim(e, agg, dropped, [3])
    assert bad.value.error_args == {"word": 0, "bits": 1 << 3}
    e.r.excluded = []
    honest = post_claim(e, agg, e.r.honest(), [])
    e.task.submit_aggregate_with_claim(agg, 1, dg("agg"), honest)
    assert e.task.claim_of(1, 0) == honest


def test_c_a_claim_must_declare_every_not_included_update(chain: Chain) -> None:
    """Update 4 was not included: a claim that excludes it but does not declare it (so an
    honest challenger could not tell the task's decision from the submitter's), or that
    declares another one too, is refused (reason 8)."""
    e = make_task(chain, [ALL, NOT_4, NOT_4])
    agg = chosen(e.s)
    e.r.excluded = [3, 4]
    for declared in ([], [3, 4]):
        cid = post_claim(e, agg, e.r.honest(), declared)
        with pytest.raises(ClaimMismatch) as info:
            e.task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
        assert info.value.error_args == {"claimId": cid, "reason": 8}


@pytest.mark.parametrize(
    "change",
    [{"beta": (1, 4)}, {"dim": 3 * 256 + 11}, {"value_bound": 2 * VB}],
    ids=["beta", "dim", "value_bound"],
)
def test_item3_a_claim_under_other_step_parameters_is_refused(
    chain: Chain, change: dict[str, Any]
) -> None:
    """Item 3: the task binds its claims' step parameters (rule, beta, d, value bound:
    ``faultParamsHash``). A claim under another beta, dimension or value bound - one under
    which a wrong aggregate could replay as correct - is refused (reason 7); before, only
    the rule was checked and each of these bound."""
    e = make_task(chain, [ALL, ALL, ALL])
    agg = chosen(e.s)
    cid = post_claim(e, agg, e.r.honest(), [], **change)
    with pytest.raises(ClaimMismatch) as info:
        e.task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
    assert info.value.error_args == {"claimId": cid, "reason": 7}
    own = post_claim(e, agg, e.r.honest(), [])
    e.task.submit_aggregate_with_claim(agg, 1, dg("agg"), own)
    _, params_hash, _ = e.games.view("claimBinding", own)
    assert params_hash == e.task.fault_params_hash()


def test_fault_proof_needs_an_attestation_window(chain: Chain) -> None:
    """Without an attestation phase there is no included set to tell the task's decision
    from the submitter's: ``setFaultGames`` refuses such a task."""
    with pytest.raises(AttestWindowRequired):
        make_task(chain, [], attest_window=0)
