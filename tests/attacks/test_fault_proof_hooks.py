"""Issue 22's hooks in FedChainTask, against the real contracts on the embedded chain: a
fault-proof task binds each aggregate to its submitter's FaultGames claim; ``finalize`` waits
while a game on that claim is open and refuses a refuted one; ``rejectRefuted`` discards it
(attempt + 1, submitter slashed); ``slashRefutedCertificate`` slashes every signer of a
"not faulty" commit certificate the one-step proof contradicted; ``finalize`` stores the state
root the next claim must start from.

Block arithmetic as in tests/test_contract.py: a transaction sent while the latest block is
``b`` executes in block ``b + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from web3.logs import DISCARD

from adapters.chain import Chain
from adapters.contract import (
    AggregateRefuted,
    CertificateAlreadySlashed,
    ClaimMismatch,
    ClaimNotBound,
    ClaimNotProvenFaulty,
    ClaimNotRefuted,
    ClaimRequired,
    ClaimUnsettled,
    FaultGamesFixed,
    NoFaultGames,
    OwnableUnauthorizedAccount,
    Phase,
    TaskContract,
)
from adapters.faultproof import FaultGamesContract
from adapters.records import records_accumulator
from aggregators.faultproof import RULE_IDS, StepRule
from aggregators.registry import rule_id
from protocol.merkle import ChunkTree
from tests.fault_support import (
    BOND,
    CLAIM_BOND,
    CLOCK,
    VB,
    Round,
    faulty,
    started_fault_round,
)
from tests.test_contract import BURN, bonds_held, chosen, dg, exec_at
from tests.test_contract_dispute import by_address, sig_of

K = 5  # updates per round (make_round's default)
CHALLENGE_WINDOW = 3
GAME_WINDOW = CHALLENGE_WINDOW + 4  # the claim's window outlasts the challenge window
ATTEST_WINDOW = 4  # a fault-proof task needs one (setFaultGames)


@dataclass
class Hooked:
    s: Any  # tests/conftest.py:TaskSetup
    games: FaultGamesContract
    r: Round

    @property
    def task(self) -> TaskContract:
        return self.s.task  # type: ignore[no-any-return]


@pytest.fixture
def h(chain: Chain) -> Hooked:
    return make_hooked(chain)


def make_hooked(chain: Chain, rule: str = "fedavg", stop: tuple[int, int] | None = None) -> Hooked:
    """A started fault-proof task whose K clients registered round 1 (rule ``rule``, named
    on-chain as the deployment names it: ``rule_id(rule)``); the round's data is FedAvg's."""
    # the task's step parameters: its rule (trimmed mean with beta 0.2), d, the value bound
    step = StepRule.of(rule, {"beta": 0.2} if rule == "trimmed_mean" else {})
    s, games, r = started_fault_round(
        chain,
        {
            "rule_id": rule_id(rule),
            "challenge_window": CHALLENGE_WINDOW,
            "attest_window": ATTEST_WINDOW,
        },
        step=step,
        stop=stop,
    )
    task, aggregators = s.task, s.aggregators
    for a in aggregators[:3]:  # n - f attestations fix the included set: every update
        task.attest(a, 1, [True] * K)
    return Hooked(s, games, r)


def assert_accounting(s: Any) -> None:
    """Task balance == stakes + bonds held + credits owed (reporters here are spare
    accounts, so their credits count too; tests/test_contract.py's version omits them)."""
    task = s.task
    stakes = sum(task.aggregator_info(a.address).stake for a in s.aggregators)
    owed = sum(task.credits(a.address) for a in [s.owner, *s.aggregators, *s.spare])
    assert task.balance() == stakes + bonds_held(task) + owed + task.credits(BURN)


def post_claim(
    h: Hooked,
    who: Any,
    state: Any,
    *,
    prev: Any = None,
    window: int = GAME_WINDOW,
    records: tuple[Any, ...] | None = None,
    signers: tuple[Any, ...] | None = None,
    rule: StepRule | None = None,
) -> int:
    r = h.r
    step_rule = r.rule if rule is None else rule
    params = (
        step_rule.rule_id,
        step_rule.beta_num,
        step_rule.beta_den,
        len(r.prev),
        window,
        VB,
        ChunkTree(r.prev if prev is None else prev).root,
        ChunkTree(state).root,
    )
    receipt = h.games.tx(
        who,
        "postClaim",
        params,
        records or r.records(),
        signers or r.signers(),
        r.unincluded(),
        value=CLAIM_BOND,
    )
    ev = h.games.contract.events.ClaimPosted().process_receipt(receipt, errors=DISCARD)
    return int(ev[0]["args"]["claimId"])


def submit(h: Hooked, state: Any, label: str = "agg") -> tuple[Any, int, bytes]:
    """The chosen aggregator posts its claim of ``state`` and submits with it."""
    agg = chosen(h.s)
    cid = post_claim(h, agg, state)
    digest = dg(label)
    h.task.submit_aggregate_with_claim(agg, 1, digest, cid)
    return agg, cid, digest


def refute(h: Hooked, cid: int, claimed: Any, submitter: Any, j: int = 3) -> None:
    """One honest challenger refutes claim ``cid`` of ``claimed`` with a leaf game on chunk j."""
    honest = h.s.spare[0]
    receipt = h.games.tx(honest, "openLeaf", cid, j, value=BOND)
    gid = int(
        h.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)[0]["args"][
            "gameId"
        ]
    )
    t = ChunkTree(claimed)
    h.games.tx(submitter, "revealLeaf", gid, t.leaves[j], t.proof(j))
    h.games.tx(honest, "prove", gid, h.r.step(j))
    assert h.games.view("refuted", cid)


def test_honest_claim_finalizes_and_stores_the_state_root(h: Hooked) -> None:
    honest = h.r.honest()
    _, cid, digest = submit(h, honest)
    assert h.task.claim_of(1, 0) == cid and h.task.fault_games() == h.games.address
    assert h.task.state_root(0) == ChunkTree(h.r.prev).root
    h.s.chain.mine(GAME_WINDOW)
    h.task.finalize(h.s.owner, 1)
    assert h.task.state_root(1) == ChunkTree(honest).root
    assert h.task.round_digest(1) == digest
    assert_accounting(h.s)


@pytest.mark.parametrize(("offset", "allowed"), [(-1, False), (0, False), (1, True)])
def test_finalize_waits_for_the_claim_window(h: Hooked, offset: int, allowed: bool) -> None:
    """The claim's game window outlasts the challenge window: finalize is allowed iff
    block.number > windowEnd (the claim is settled), at -1/0/+1 blocks."""
    _, cid, _ = submit(h, h.r.honest())
    window_end = int(h.games.view("claim", cid)[5])
    assert window_end > h.task.round_info(1).challenge_deadline
    exec_at(h.s.chain, window_end + offset)
    if allowed:
        h.task.finalize(h.s.owner, 1)
        assert h.task.phase(1) == Phase.FINALIZED
    else:
        with pytest.raises(ClaimUnsettled) as info:
            h.task.finalize(h.s.owner, 1)
        assert info.value.error_args == {"round": 1, "claimId": cid}


def test_finalize_is_blocked_while_a_game_is_open(h: Hooked) -> None:
    claimed = faulty(h.r, j=3)
    _, cid, _ = submit(h, claimed)
    receipt = h.games.tx(h.s.spare[0], "openLeaf", cid, 3, value=BOND)
    assert receipt["status"] == 1
    h.s.chain.mine(GAME_WINDOW + 1)  # both windows over, the game still open
    with pytest.raises(ClaimUnsettled):
        h.task.finalize(h.s.owner, 1)


def test_refuted_claim_advances_the_attempt_and_slashes_its_submitter(h: Hooked) -> None:
    task, cfg = h.task, h.task.config()
    claimed = faulty(h.r, j=3)
    agg, cid, _ = submit(h, claimed)
    with pytest.raises(ClaimNotRefuted):
        task.reject_refuted(h.s.owner, 1)
    refute(h, cid, claimed, agg)
    h.s.chain.mine(GAME_WINDOW)
    with pytest.raises(AggregateRefuted) as info:
        task.finalize(h.s.owner, 1)
    assert info.value.error_args == {"round": 1, "claimId": cid}
    stake = task.aggregator_info(agg.address).stake
    reporter = h.s.spare[1]
    receipt = task.reject_refuted(reporter, 1)
    slashed = stake + cfg.aggregate_bond
    assert [(e.name, e.args) for e in task.events(receipt)] == [
        ("Slashed", {"aggregator": agg.address, "amount": slashed}),
        (
            "RefutedAggregateRejected",
            {
                "round": 1,
                "attempt": 0,
                "claimId": cid,
                "reporter": reporter.address,
                "slashedAmount": slashed,
                "reward": 0,
                "treasuryAmount": slashed,
            },
        ),
    ]
    info_ = task.aggregator_info(agg.address)
    assert info_.slashed and info_.stake == 0
    assert task.round_info(1).attempt == 1 and task.phase(1) == Phase.AGGREGATING
    assert task.credits(reporter.address) == 0
    assert chosen(h.s) != agg
    # the next aggregator's honest claim finalizes the round
    submit(h, h.r.honest(), "agg2")
    assert task.claim_of(1, 1) is not None
    h.s.chain.mine(GAME_WINDOW)
    task.finalize(h.s.owner, 1)
    assert task.state_root(1) == ChunkTree(h.r.honest()).root


def test_a_round_carried_forward_is_claimed_and_a_faulty_carry_refuted(h: Hooked) -> None:
    """Issue 22 item 4: a round the rule carries forward (every registered update excluded,
    K = 0: for the step's rules the only K below the minimum) still gets a claim: the step
    carries every chunk forward, so a faulty aggregate is refuted by one honest challenger
    and the honest carried state (the previous one) finalizes."""
    h.r.excluded = list(range(K))  # e.g. every U_i is not its payload's
    task, carried = h.task, h.r.prev
    claimed = carried.copy()
    claimed[3 * 256 + 5] += 1  # the submitter moves a coordinate of a carried round
    agg, cid, _ = submit(h, claimed)
    refute(h, cid, claimed, agg)
    h.s.chain.mine(GAME_WINDOW)
    task.reject_refuted(h.s.spare[1], 1)
    assert task.aggregator_info(agg.address).slashed
    submit(h, carried, "agg2")
    h.s.chain.mine(GAME_WINDOW)
    task.finalize(h.s.owner, 1)
    assert task.state_root(1) == ChunkTree(carried).root
    assert_accounting(h.s)


def test_signers_of_a_contradicted_certificate_are_slashed(h: Hooked) -> None:
    """Three colluders (the submitter and two members: n - f of n = 4) challenge-and-uphold
    a faulty aggregate with a "not faulty" commit certificate; one honest challenger refutes
    the claim in FaultGames; every signer of the certificate is slashed."""
    task, s = h.task, h.s
    claimed = faulty(h.r, j=3)
    agg, cid, digest = submit(h, claimed)
    honest_member = next(a for a in s.aggregators if a != agg)
    colluders = [a for a in s.aggregators if a != honest_member]
    task.challenge(honest_member, 1)
    sigs = [sig_of(s, a, 1, 0, digest, False) for a in by_address(colluders)]
    task.resolve_dispute(s.owner, 1, 0, False, 0, sigs)  # "not faulty": upheld
    with pytest.raises(ClaimNotRefuted):
        task.slash_refuted_certificate(s.owner, 1, 0, digest, 0, sigs)
    refute(h, cid, claimed, agg)
    with pytest.raises(ClaimNotBound):
        task.slash_refuted_certificate(s.owner, 1, 0, dg("other"), 0, sigs)
    task.reject_refuted(s.spare[1], 1)  # the submitter is slashed first: still counted below
    stakes = {a.address: task.aggregator_info(a.address).stake for a in colluders}
    reporter = s.spare[2]
    receipt = task.slash_refuted_certificate(reporter, 1, 0, digest, 0, sigs)
    events = task.events(receipt)
    slashed = {e.args["aggregator"] for e in events if e.name == "Slashed"}
    assert slashed == {a.address for a in colluders if a != agg}
    total = sum(stakes[a] for a in slashed)
    last = events[-1]
    assert last.name == "RefutedCertificateSlashed"
    assert last.args["slashedSigners"] == 2 and last.args["reward"] == 0
    assert last.args["treasuryAmount"] == total
    assert task.credits(reporter.address) == 0
    for a in colluders:
        assert task.aggregator_info(a.address).slashed
    assert not task.aggregator_info(honest_member.address).slashed
    with pytest.raises(CertificateAlreadySlashed):
        task.slash_refuted_certificate(reporter, 1, 0, digest, 0, sigs)
    assert task.credits(BURN) > 0
    assert_accounting(s)


def test_signers_of_an_honest_claim_refuted_by_timeout_keep_their_stakes(h: Hooked) -> None:
    """Issue 22 finding 1: an HONEST claim whose submitter misses one move (offline,
    censored) is refuted by ``timeout`` after the three honest members certified its right
    aggregate "not faulty" in a dispute raised by the Byzantine member. A timeout is no
    proof: ``slashRefutedCertificate`` reverts ``ClaimNotProvenFaulty`` and no signer loses
    its stake; ``rejectRefuted`` still slashes the submitter that failed to defend its claim."""
    task, s = h.task, h.s
    agg, cid, digest = submit(h, h.r.honest())
    byzantine = next(a for a in s.aggregators if a != agg)
    signers = [a for a in s.aggregators if a != byzantine]
    task.challenge(byzantine, 1)
    sigs = [sig_of(s, a, 1, 0, digest, False) for a in by_address(signers)]
    task.resolve_dispute(s.owner, 1, 0, False, 0, sigs)  # "not faulty": upheld
    receipt = h.games.tx(s.spare[0], "openLeaf", cid, 0, value=BOND)
    ev = h.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)
    gid = int(ev[0]["args"]["gameId"])
    s.chain.mine(CLOCK + 1)  # the submitter never answers
    h.games.tx(s.spare[0], "timeout", gid)
    assert h.games.view("refuted", cid) and not h.games.view("refutedByProof", cid)
    stakes = {a.address: task.aggregator_info(a.address).stake for a in signers}
    with pytest.raises(ClaimNotProvenFaulty):
        task.slash_refuted_certificate(byzantine, 1, 0, digest, 0, sigs)
    for a in signers:
        assert task.aggregator_info(a.address).stake == stakes[a.address] > 0
    task.reject_refuted(s.spare[1], 1)
    assert task.aggregator_info(agg.address).slashed
    assert all(not task.aggregator_info(a.address).slashed for a in signers if a != agg)
    assert_accounting(s)


def test_claims_not_bound_to_the_round_revert(h: Hooked) -> None:
    task, s = h.task, h.s
    agg = chosen(s)
    other = next(a for a in s.aggregators if a != agg)
    honest = h.r.honest()
    with pytest.raises(ClaimRequired):
        task.submit_aggregate(agg, 1, dg("agg"))
    cases = [
        (post_claim(h, other, honest), 1),  # another member's claim
        (post_claim(h, agg, honest, prev=honest), 2),  # not from the last finalized state
        (
            post_claim(
                h,
                agg,
                honest,
                records=([b"\x01" * 32] * 4, [1] * 4, [0]),
                signers=(h.r.clients[:4], h.r.digests[:4]),
            ),
            3,
        ),  # 4 != 5
        (post_claim(h, agg, honest, window=CHALLENGE_WINDOW - 1), 4),  # window too short
    ]
    for cid, reason in cases:
        with pytest.raises(ClaimMismatch) as info:
            task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
        assert info.value.error_args == {"claimId": cid, "reason": reason}
    assert task.phase(1) == Phase.AGGREGATING


@pytest.mark.parametrize(("slack", "allowed"), [(-1, False), (0, True), (1, True)])
def test_claim_window_must_cover_the_challenge_window(h: Hooked, slack: int, allowed: bool) -> None:
    """windowEnd (claim block + window) >= submit block + challengeWindow, at -1/0/+1."""
    agg = chosen(h.s)
    # posted in block p, submitted in p + 1: windowEnd - (p + 1 + cw) = window - 1 - cw
    cid = post_claim(h, agg, h.r.honest(), window=CHALLENGE_WINDOW + 1 + slack)
    if allowed:
        h.task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
    else:
        with pytest.raises(ClaimMismatch) as info:
            h.task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
        assert info.value.error_args["reason"] == 4


def test_fault_games_are_fixed_before_anyone_stakes(task_factory: Any) -> None:
    s = task_factory(n_aggregators=0, n_clients=0, start=False, attest_window=ATTEST_WINDOW)
    member = s.spare[0]
    ph = b"\x05" * 32
    with pytest.raises(OwnableUnauthorizedAccount):
        s.task.set_fault_games(member, s.owner.address, b"\x01" * 32, ph)
    with pytest.raises(NoFaultGames):
        s.task.set_fault_games(s.owner, "0x" + "00" * 20, b"\x01" * 32, ph)
    assert s.task.fault_params_hash() == bytes(32)
    s.task.set_fault_games(s.owner, s.owner.address, b"\x01" * 32, ph)
    assert s.task.fault_games() == s.owner.address
    assert s.task.state_root(0) == b"\x01" * 32
    assert s.task.fault_params_hash() == ph
    with pytest.raises(FaultGamesFixed):
        s.task.set_fault_games(s.owner, s.owner.address, b"\x02" * 32, ph)
    # once a member staked, the dispute mode is fixed (a PBFT-only task stays one)
    t = task_factory(n_aggregators=1, n_clients=0, start=False, attest_window=ATTEST_WINDOW)
    with pytest.raises(FaultGamesFixed):
        t.task.set_fault_games(t.owner, t.owner.address, b"\x01" * 32, ph)
    u = task_factory(n_aggregators=4, n_clients=2)
    assert u.task.fault_games() == "0x" + "00" * 20
    with pytest.raises(NoFaultGames):
        u.task.submit_aggregate_with_claim(u.aggregators[0], 1, dg("x"), 0)


def test_a_refuted_submitter_recovers_nothing_by_rejecting_itself(h: Hooked) -> None:
    """Attack: the submitter of a refuted claim sends ``rejectRefuted`` itself (or through a
    second identity) to be credited part of its own slashed stake. The task burns all of it;
    the refuter is paid by FaultGames (the claim bond), so no caller of the hook gains."""
    task = h.task
    claimed = faulty(h.r, j=3)
    agg, cid, _ = submit(h, claimed)
    refute(h, cid, claimed, agg)
    before = task.credits(agg.address)
    stake = task.aggregator_info(agg.address).stake
    burned = task.credits(BURN)
    task.reject_refuted(agg, 1)
    assert task.credits(agg.address) == before
    assert task.credits(BURN) - burned == stake + task.config().aggregate_bond
    assert_accounting(h.s)


def test_a_certificate_signer_recovers_nothing_by_reporting_its_own_certificate(
    h: Hooked,
) -> None:
    """Attack: a colluding signer of a "not faulty" certificate on a refuted aggregate reports
    the certificate itself, to be credited part of every signer's slashed stake (its own
    included). The task burns every slashed stake."""
    task, s = h.task, h.s
    claimed = faulty(h.r, j=3)
    agg, cid, digest = submit(h, claimed)
    honest_member = next(a for a in s.aggregators if a != agg)
    colluders = [a for a in s.aggregators if a != honest_member]
    task.challenge(honest_member, 1)
    sigs = [sig_of(s, a, 1, 0, digest, False) for a in by_address(colluders)]
    task.resolve_dispute(s.owner, 1, 0, False, 0, sigs)
    refute(h, cid, claimed, agg)
    task.reject_refuted(s.spare[1], 1)
    signer = next(a for a in colluders if a != agg)
    before = task.credits(signer.address)
    task.slash_refuted_certificate(signer, 1, 0, digest, 0, sigs)
    assert task.credits(signer.address) == before
    assert_accounting(s)


# -- issue 22 hook 1: U_i in the signed records; claims bound to them ------------------------


def _forged(h: Hooked, what: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The claim's records and signers with one record changed from what its client signed."""
    roots, weights, exc = h.r.records()
    clients, digests = list(h.r.clients), list(h.r.digests)
    roots, weights = list(roots), list(weights)
    if what == "U_i":  # the chunk root of another vector than the client's update
        roots[2] = ChunkTree(h.r.ups[2] + 1).root
    elif what == "digest":
        digests[1] = dg("not the payload client 1 signed")
    elif what == "weight":
        weights[0] += 1
    elif what == "client":  # the right update attributed to another client
        clients[3], clients[4] = clients[4], clients[3]
    elif what == "order":  # the right records in another order
        for seq in (roots, weights, clients, digests):
            seq[0], seq[1] = seq[1], seq[0]
    return (roots, weights, exc), (clients, digests)


@pytest.mark.parametrize("what", ["U_i", "digest", "weight", "client", "order"])
def test_claim_listing_records_other_than_signed_is_refused(h: Hooked, what: str) -> None:
    """A claim whose listed (client, digest, weight, U_i) differ from the signed records in
    any field, or in their order, is refused at submitAggregateWithClaim (reason 3): the
    game's one step can only run on the inputs the clients really signed. Before U_i was in
    the records the task compared the record count only, and every one of these bound."""
    agg = chosen(h.s)
    records, signers = _forged(h, what)
    cid = post_claim(h, agg, h.r.honest(), records=records, signers=signers)
    assert int(h.games.view("claim", cid)[7]) == K  # same count as the round's records
    with pytest.raises(ClaimMismatch) as info:
        h.task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
    assert info.value.error_args == {"claimId": cid, "reason": 3}
    # the claim listing the signed records binds
    honest = post_claim(h, agg, h.r.honest())
    h.task.submit_aggregate_with_claim(agg, 1, dg("agg"), honest)
    assert h.task.claim_of(1, 0) == honest


def test_claim_records_hash_like_the_task_accumulator(h: Hooked) -> None:
    """FaultGames keeps (accumulator << 32) | count over the claim's records, computed with
    the same ClientRecords.extendUpdates as the task: equal to the Python mirror and to the
    task's own accumulator of the round."""
    cid = post_claim(h, chosen(h.s), h.r.honest())
    entries = h.task.updates(1)
    assert [e.chunk_root for e in entries] == h.r.roots()
    acc, count = h.task.update_accumulator(1)
    expected = records_accumulator(entries)
    assert expected == (acc << 32) | count
    assert int(h.games.view("claimHook", cid)[3]) == expected


def test_record_whose_u_i_is_not_its_payload_is_excluded_deterministically(h: Hooked) -> None:
    """An update whose signed U_i is not the chunk root of its payload cannot be opened in
    any game: honest aggregators exclude it as invalid (same result on every node, no
    crash), and a fault player's view of the round excludes it too."""
    from aggregators.execution import execute_round
    from aggregators.fault_player import RoundView
    from protocol.payloads import encode_update
    from tests.test_execution import FMT, LAYOUT, make_round, manifest

    _, deltas_q, samples, gp, payloads = make_round(k=5)
    roots = [ChunkTree(row.astype(np.int32)).root for row in deltas_q]
    lying = list(roots)
    lying[2] = ChunkTree(deltas_q[2].astype(np.int32) + 1).root  # signs another vector's root
    lying[4] = bytes(32)  # signs no root at all
    args = (manifest(), 1, gp, payloads, samples.tolist())
    result = execute_round(*args, chunk_roots=lying)
    assert result.included == (0, 1, 3)
    assert "chunk root" in result.excluded[2] and "chunk root" in result.excluded[4]
    assert execute_round(*args, chunk_roots=lying).payload == result.payload
    # same as aggregating the three true records alone; all five when every U_i is true
    alone = execute_round(
        manifest(), 1, gp, [payloads[i] for i in (0, 1, 3)], [samples[i] for i in (0, 1, 3)]
    )
    assert alone.payload == result.payload
    assert execute_round(*args, chunk_roots=roots).included == (0, 1, 2, 3, 4)
    assert encode_update(LAYOUT, 1, deltas_q[0]) == payloads[0] and FMT.frac_bits == 16

    # the fault player reads U_i from the task's records and excludes a mismatching one
    entries = h.task.updates(1)
    ups: list[Any] = list(h.r.ups)
    ups[1] = ups[1] + 1  # what it fetched under record 1 is not what client 1 signed
    view = RoundView.from_records(h.r.rule, h.r.prev, entries, ups, value_bound=VB)
    assert view.excluded == [1]
    assert view.records()[0] == h.r.roots()
    assert view.signers() == (h.r.clients, h.r.digests)


@pytest.mark.parametrize("task_rule", sorted(RULE_IDS))
def test_claim_under_another_rule_than_the_task_is_refused(chain: Chain, task_rule: str) -> None:
    """The claim's rule (OneStepMath id) must be the task's `ruleId` (sha256 of the rule's
    name, as deployments record it): a claim made under any other in-scope rule is refused
    (reason 6), the claim under the task's own rule binds."""
    h = make_hooked(chain, task_rule)
    agg = chosen(h.s)
    params = {"beta": 0.2} if task_rule == "trimmed_mean" else {}
    for other in sorted(RULE_IDS):
        if other == task_rule:
            continue
        p = {"beta": 0.2} if other == "trimmed_mean" else {}
        cid = post_claim(h, agg, h.r.honest(), rule=StepRule.of(other, p))
        with pytest.raises(ClaimMismatch) as info:
            h.task.submit_aggregate_with_claim(agg, 1, dg("agg"), cid)
        assert info.value.error_args == {"claimId": cid, "reason": 6}
    own = post_claim(h, agg, h.r.honest(), rule=StepRule.of(task_rule, params))
    h.task.submit_aggregate_with_claim(agg, 1, dg("agg"), own)
    assert h.task.claim_of(1, 0) == own


def _drive_to_aggregating(demo: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Step the clients and aggregators until round 1's included set is fixed, every
    submission held back (the chosen node's own claim may be posted, never bound); returns
    the chosen aggregator's node."""
    task = demo.task
    with monkeypatch.context() as m:
        m.setattr(task, "submit_aggregate_with_claim", lambda *a, **k: None)
        for _ in range(400):
            if task.phase(1) == Phase.AGGREGATING:
                chosen = task.current_aggregator().address
                return next(a for a in demo.aggregators if a.address == chosen)
            acted = demo.fleet.step()
            for agg in demo.aggregators:
                acted |= bool(agg.step())
            if not acted:
                demo.chain.mine(1)
    raise AssertionError(f"round 1 never reached AGGREGATING ({task.phase(1)!r})")


def test_honest_nodes_vote_faulty_on_a_right_digest_bound_to_a_wrong_root(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22 finding 2 (n = 7, f = 2 in contracts/test/FaultProofFindings.t.sol): a
    Byzantine submitter binds the RIGHT digest to a claim whose new root is wrong. On a
    fault-proof task a "not faulty" verdict vouches for the whole submission (digest and
    claim: a proof refuting the claim slashes every signer), so the honest nodes of a
    ``dispute = "both"`` task vote "faulty" although their re-execution agrees with the
    digest; a claim of their own root (and excluded set) they vouch for. Real nodes, real
    task and FaultGames on the embedded chain."""
    from fedchain.config import DemoConfig
    from fedchain.sim.runner import Demo
    from protocol.metrics import Progress

    cfg = DemoConfig(
        clients=4,
        aggregators=4,
        rounds=1,
        epochs=1,
        submit_timeout=40,
        challenge_window=3,
        dispute="both",
        out=str(tmp_path),
        name="bound-wrong-root",
    )
    demo = Demo(cfg, Progress(quiet=True))
    demo.setup()
    try:
        byz = _drive_to_aggregating(demo, monkeypatch)
        result, inputs = byz.compute(1)
        byz.store.put(result.payload)  # the right bytes, published
        view = byz._fault_view(1, inputs, result)
        assert view is not None
        attempt = demo.task.current_aggregator().attempt
        honest_cid = byz.fault.claim(1, attempt, view, view.honest_state)
        wrong = np.asarray(view.honest_state, np.int64).copy()
        wrong[0] += 1
        wrong_cid = byz.fault.claim(1, attempt, view, wrong)
        demo.task.submit_aggregate_with_claim(byz.account, 1, result.digest, wrong_cid)
        assert demo.task.phase(1) == Phase.SUBMITTED
        others = [a for a in demo.aggregators if a.address != byz.address]
        for node in others:
            verification = node.verify(1, attempt, byz.address, result.digest)
            assert verification.agrees, "the digest is the honest re-execution's"
            assert node.dispute_verdict(1, attempt, result.digest), (
                f"{node.name} vouched for a submission whose claim a proof refutes"
            )
            assert node.fault is not None
            mine, mine_inputs = node.compute(1)
            own = node._fault_view(1, mine_inputs, mine)
            assert own is not None
            assert node.fault.vouches_for(honest_cid, own)
            assert not node.fault.vouches_for(wrong_cid, own)
    finally:
        demo.close()
