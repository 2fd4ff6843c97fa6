"""Issue 22: the task-level data-availability game, against the real FedChainTask, its
TaskDisputes module and FaultGames on the embedded chain.

Under the fault proof up to n - 1 members may collude, so f + 1 colluding attesters can get
an update "included" that no honest member holds: the honest member can then neither
recompute the aggregate nor post an honest claim. ``challengeAvailability`` (bonded, by a
member that did not attest the update) makes anyone holding it post one chunk opened
against its U_i within ``disputeTimeout`` blocks; if nobody does, ``expireAvailability``
drops the update from the included set, slashes every member that attested it and re-opens
the round, which then finalizes without it. A frivolous challenge on an available update
pays its bond to the poster.

Block arithmetic as in tests/test_contract.py: a transaction sent while the latest block is
``b`` executes in block ``b + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from web3.logs import DISCARD

from adapters.chain import Chain
from adapters.contract import (
    AvailabilityChallengeOpen,
    AvailabilityNotTimedOut,
    AvailabilityTimedOut,
    BadChunkOpening,
    ChallengerAttested,
    ChallengeWindowClosed,
    EntriesMismatch,
    NoAvailabilityChallenge,
    NoFaultGames,
    NotAggregator,
    NotIncluded,
    Phase,
    TaskContract,
    WrongValue,
)
from adapters.faultproof import FaultGamesContract
from aggregators.registry import rule_id
from fedchain.sim.driver.events import read_events
from fedchain.sim.runner import run_scenario
from fedchain.sim.scenario import load_scenario, outcome_of
from protocol.merkle import ChunkTree, chunk_bytes, chunk_values
from tests.conftest import TaskSetup
from tests.fault_support import CLAIM_BOND, VB, Round, started_fault_round
from tests.test_contract import BURN, chosen, dg, exec_at

K = 5  # updates per round
X = 4  # the withheld update
ATTEST_WINDOW = 8
CHALLENGE_WINDOW = 3
DISPUTE_TIMEOUT = 4  # blocks to answer an availability challenge
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
GAME_WINDOW = CHALLENGE_WINDOW + 4


@dataclass
class Avail:
    s: TaskSetup
    games: FaultGamesContract
    r: Round

    @property
    def task(self) -> TaskContract:
        return self.s.task

    @property
    def colluders(self) -> list[Any]:
        return self.s.aggregators[:2]  # f + 1 = 2 of n = 4

    @property
    def honest(self) -> list[Any]:
        return self.s.aggregators[2:]


def make_avail(chain: Chain, *, fault_proof: bool = True, attest_x: int = 2) -> Avail:
    """A started task (fault-proof unless told otherwise) whose K clients registered round 1
    with their U_i; collection closed; aggregators 0 and 1 (colluders) attest every update,
    2 (honest) every update but X, which nobody holds; 3 (honest) is too late to attest. The
    first ``attest_x`` aggregators attest X."""
    s, games, r = started_fault_round(
        chain,
        {
            "rule_id": rule_id("fedavg"),
            "challenge_window": CHALLENGE_WINDOW,
            "attest_window": ATTEST_WINDOW,
            "dispute_timeout": DISPUTE_TIMEOUT,
        },
        fault_proof=fault_proof,
    )
    chain, task, aggregators = s.chain, s.task, s.aggregators
    close = task.round_info(1).close_block  # maxUpdates reached: collection closed
    if chain.block_number() < close:
        exec_at(chain, close)
    everything = [True] * K
    but_x = [i != X for i in range(K)]
    # n - f = 3 attestations fix the included set: aggregator 3 never attests
    for m, a in enumerate(aggregators[:3]):
        task.attest(a, 1, everything if m < attest_x else but_x)
    return Avail(s, games, r)


@pytest.fixture
def av(chain: Chain) -> Avail:
    return make_avail(chain)


def answer(av: Avail, who: Any, index: int = X, j: int = 1) -> Any:
    u = av.r.ups[index]
    return av.task.answer_availability(
        who, 1, len(u), chunk_bytes(chunk_values(u, j)), ChunkTree(u).proof(j)
    )


def submit_claim(av: Avail, excluded: list[int]) -> tuple[Any, int, bytes]:
    """The chosen aggregator posts the honest claim over the included updates (``excluded``
    left out) and submits it."""
    r = av.r
    r.excluded = excluded
    # the claim declares the records the task did not include (ClaimMismatch 8 otherwise)
    r.not_included = [i for i, inc in enumerate(av.task.included_updates(1)) if not inc]
    agg = chosen(av.s)
    params = (
        r.rule.rule_id,
        r.rule.beta_num,
        r.rule.beta_den,
        len(r.prev),
        GAME_WINDOW,
        VB,
        ChunkTree(r.prev).root,
        ChunkTree(r.honest()).root,
    )
    receipt = av.games.tx(
        agg, "postClaim", params, r.records(), r.signers(), r.unincluded(), value=CLAIM_BOND
    )
    cid = int(
        av.games.contract.events.ClaimPosted().process_receipt(receipt, errors=DISCARD)[0]["args"][
            "claimId"
        ]
    )
    digest = dg(("agg", tuple(excluded)))
    av.task.submit_aggregate_with_claim(agg, 1, digest, cid)
    return agg, cid, digest


def accounting(av: Avail) -> None:
    """Task balance == stakes + bonds held (aggregate, PBFT and availability challenges) +
    credits owed."""
    task, s = av.task, av.s
    cfg = task.config()
    stakes = sum(task.aggregator_info(a.address).stake for a in s.aggregators)
    phase = task.phase(1) if task.current_round() == 1 else Phase.PENDING
    held = cfg.aggregate_bond if phase in (Phase.SUBMITTED, Phase.DISPUTED) else 0
    held += cfg.challenge_bond if phase == Phase.DISPUTED else 0
    if task.current_round() == 1 and task.availability_challenge(1) is not None:
        held += cfg.challenge_bond
    owed = sum(task.credits(a.address) for a in [s.owner, *s.aggregators, *s.spare])
    assert task.balance() == stakes + held + owed + task.credits(BURN)


def events(av: Avail, name: str, receipt: Any) -> list[Any]:
    return [
        e["args"]
        for e in getattr(av.task.contract.events, name)().process_receipt(receipt, errors=DISCARD)
    ]


# ----------------------------------------------------------------------------------------
# The attack: f + 1 colluding attesters include an update nobody honest holds
# ----------------------------------------------------------------------------------------


def test_withheld_update_is_dropped_its_attesters_slashed_and_the_round_finalizes_without_it(
    av: Avail,
) -> None:
    task, cfg = av.task, av.task.config()
    assert task.included_updates(1) == [True] * K  # X has f + 1 = 2 attestations
    challenger = av.honest[0]
    receipt = task.challenge_availability(challenger, 1, X, 2)
    (ev,) = events(av, "AvailabilityChallenged", receipt)
    assert (ev["index"], ev["j"], ev["challenger"]) == (X, 2, challenger.address)
    open_ = task.availability_challenge(1)
    assert open_ is not None and open_.deadline == int(receipt["blockNumber"]) + DISPUTE_TIMEOUT
    assert open_.chunk_root == ChunkTree(av.r.ups[X]).root  # U_i, read from the records
    assert (open_.index, open_.j, open_.challenger) == (X, 2, challenger.address)
    attempt = task.round_info(1).attempt
    accounting(av)

    # nobody holds X: nobody answers; after the deadline anyone expires the challenge
    exec_at(av.s.chain, open_.deadline + 1)
    receipt = task.expire_availability(av.s.spare[0], 1)
    (dropped,) = events(av, "UpdateDropped", receipt)
    stake = cfg.aggregator_stake
    assert dropped["slashedAmount"] == 2 * stake and dropped["index"] == X
    assert dropped["reward"] == stake and dropped["challenger"] == challenger.address
    assert {e["aggregator"] for e in events(av, "Slashed", receipt)} == {
        a.address for a in av.colluders
    }
    for a in av.colluders:
        info = task.aggregator_info(a.address)
        assert info.slashed and info.stake == 0
    for a in av.honest:
        assert not task.aggregator_info(a.address).slashed
    # X left the included set, the round re-opened at attempt + 1
    assert task.included_updates(1) == [i != X for i in range(K)]
    assert task.availability_challenge(1) is None
    assert task.round_info(1).attempt == attempt + 1
    assert task.credits(challenger.address) == cfg.challenge_bond + stake
    accounting(av)

    # the next attempt runs without X: an honest member submits, the round finalizes with
    # the state an honest twin that never had X computes
    agg, _, digest = submit_claim(av, [X])
    assert agg in av.honest
    av.s.chain.mine(GAME_WINDOW)
    task.finalize(av.s.owner, 1)
    twin = Round(av.r.rule, av.r.prev, av.r.ups[:X], av.r.weights[:X])
    assert task.state_root(1) == ChunkTree(twin.honest()).root
    assert np.array_equal(av.r.honest(), twin.honest())
    assert task.round_digest(1) == digest
    accounting(av)


def test_a_standing_submission_over_the_dropped_update_is_discarded(av: Avail) -> None:
    """A submission made before the drop is discarded; its submitter's bond comes back when
    it did not attest X (it may not have known), and is burned when it did."""
    task, cfg = av.task, av.task.config()
    agg, _, _ = submit_claim(av, [])  # over all K, X included
    challenger = next(a for a in av.honest if a != agg)
    task.challenge_availability(challenger, 1, X, 0)
    with pytest.raises(AvailabilityChallengeOpen):
        task.challenge_availability(challenger, 1, X, 1)
    exec_at(av.s.chain, task.availability_challenge(1).deadline + 1)  # type: ignore[union-attr]
    before = task.credits(agg.address)
    burned = task.credits(BURN)
    receipt = task.expire_availability(av.s.spare[0], 1)
    assert task.phase(1) == Phase.AGGREGATING and task.round_info(1).attempt == 1
    attested_x = agg in av.colluders
    refund = 0 if attested_x else cfg.aggregate_bond
    assert task.credits(agg.address) == before + refund
    (dropped,) = events(av, "UpdateDropped", receipt)
    slashed = dropped["slashedAmount"]
    assert task.credits(BURN) == burned + slashed - dropped["reward"] + (
        cfg.aggregate_bond if attested_x else 0
    )
    accounting(av)


# ----------------------------------------------------------------------------------------
# A frivolous challenge on an available update
# ----------------------------------------------------------------------------------------


def test_a_frivolous_challenge_loses_its_bond_to_the_poster(chain: Chain) -> None:
    """Every update is held by the honest members; a colluder that did not attest update 0
    challenges it anyway: an honest attester posts the chunk (emitted in full) and earns the
    bond; nothing changes in the included set, nobody is slashed, and finalize goes on."""
    av = make_avail(chain, attest_x=2)
    task, cfg = av.task, av.task.config()
    # aggregator 1 attested everything; aggregator 2 and 3 hold update 0: challenge update 0
    # by ... nobody who attested it may: every member attested it
    with pytest.raises(ChallengerAttested):
        task.challenge_availability(av.s.aggregators[1], 1, 0, 0)
    # X is held by the colluders here (they attested it): an honest member challenges it and
    # a colluder answers, so the frivolous side is the challenger's
    challenger = av.honest[1]
    task.challenge_availability(challenger, 1, X, 3)
    poster = av.colluders[0]
    u = av.r.ups[X]
    receipt = answer(av, poster, X, 3)
    (ev,) = events(av, "ChunkAvailable", receipt)
    assert ev["chunk"] == chunk_bytes(chunk_values(u, 3)) and len(ev["chunk"]) == 1024
    assert (ev["index"], ev["poster"]) == (X, poster.address)
    assert task.credits(poster.address) == cfg.challenge_bond
    assert task.credits(challenger.address) == 0
    assert task.included_updates(1) == [True] * K
    assert not any(task.aggregator_info(a.address).slashed for a in av.s.aggregators)
    assert task.availability_challenge(1) is None
    accounting(av)
    with pytest.raises(NoAvailabilityChallenge):
        task.expire_availability(av.s.spare[0], 1)


def test_a_chunk_past_the_vector_is_answered_modulo_its_chunk_count(av: Avail) -> None:
    """A j beyond the vector's last chunk cannot trap an honest poster: it answers chunk
    j mod ceil(dim / 256) (the dimension is committed in U_i)."""
    n = ChunkTree(av.r.ups[X]).num_chunks
    av.task.challenge_availability(av.honest[0], 1, X, 3 * n + 1)
    answer(av, av.colluders[1], X, 1)
    assert av.task.availability_challenge(1) is None


def test_a_wrong_chunk_is_refused(av: Avail) -> None:
    task = av.task
    task.challenge_availability(av.honest[0], 1, X, 2)
    u = av.r.ups[X]
    other = av.r.ups[0]
    with pytest.raises(BadChunkOpening) as info:  # another update's chunk
        task.answer_availability(
            av.s.spare[0], 1, len(u), chunk_bytes(chunk_values(other, 2)), ChunkTree(other).proof(2)
        )
    assert info.value.error_args == {"round": 1, "index": X}
    with pytest.raises(BadChunkOpening):  # the right chunk, the wrong dimension
        task.answer_availability(
            av.s.spare[0], 1, len(u) + 1, chunk_bytes(chunk_values(u, 2)), ChunkTree(u).proof(2)
        )
    with pytest.raises(BadChunkOpening):  # not a whole chunk
        task.answer_availability(
            av.s.spare[0], 1, len(u), chunk_bytes(chunk_values(u, 2))[:-4], ChunkTree(u).proof(2)
        )


# ----------------------------------------------------------------------------------------
# Windows: the challenge, the answer and the expiry at -1/0/+1 blocks
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("offset", "allowed"), [(-1, True), (0, True), (1, False)])
def test_challenge_window_of_a_standing_submission(av: Avail, offset: int, allowed: bool) -> None:
    """With a submission standing, a challenge is allowed iff block.number <=
    challengeDeadline (finalize needs block.number > challengeDeadline)."""
    submit_claim(av, [])
    deadline = av.task.round_info(1).challenge_deadline
    exec_at(av.s.chain, deadline + offset)
    if allowed:
        av.task.challenge_availability(av.honest[0], 1, X, 0)
        assert av.task.availability_challenge(1) is not None
    else:
        with pytest.raises(ChallengeWindowClosed) as info:
            av.task.challenge_availability(av.honest[0], 1, X, 0)
        assert info.value.error_args == {"round": 1, "challengeDeadline": deadline}


@pytest.mark.parametrize(("offset", "answerable"), [(-1, True), (0, True), (1, False)])
def test_answer_and_expiry_windows(av: Avail, offset: int, answerable: bool) -> None:
    """An answer is accepted iff block.number <= openBlock + disputeTimeout, an expiry iff
    block.number > it: never both, never neither."""
    av.task.challenge_availability(av.honest[0], 1, X, 1)
    deadline = av.task.availability_challenge(1).deadline  # type: ignore[union-attr]
    exec_at(av.s.chain, deadline + offset)
    if answerable:
        with pytest.raises(AvailabilityNotTimedOut) as info:
            av.task.expire_availability(av.s.spare[0], 1)
        assert info.value.error_args == {"round": 1, "deadline": deadline}
        answer(av, av.colluders[0])  # executes one block later: still <= deadline
        assert av.task.availability_challenge(1) is None
    else:
        with pytest.raises(AvailabilityTimedOut) as info:
            answer(av, av.colluders[0])
        assert info.value.error_args == {"round": 1, "deadline": deadline}
        av.task.expire_availability(av.s.spare[0], 1)
        assert av.task.included_updates(1)[X] is False


def test_finalize_is_blocked_while_a_challenge_is_open(av: Avail) -> None:
    task = av.task
    submit_claim(av, [])
    task.challenge_availability(av.honest[0], 1, X, 1)
    av.s.chain.mine(GAME_WINDOW + 1)  # challenge and claim windows over, the challenge open
    with pytest.raises(AvailabilityChallengeOpen) as info:
        task.finalize(av.s.owner, 1)
    assert info.value.error_args == {"round": 1, "index": X}
    # expired: the submission over X is gone, the round waits for the next attempt
    task.expire_availability(av.s.spare[0], 1)
    assert task.phase(1) == Phase.AGGREGATING


def test_no_timeout_penalty_while_a_challenge_is_open(av: Avail) -> None:
    """The chosen member cannot aggregate an included set under challenge: advanceAttempt
    waits, and the expiry opens a fresh attempt, so no honest member loses stake to it."""
    task, cfg = av.task, av.task.config()
    task.challenge_availability(av.honest[0], 1, X, 1)
    laggard = chosen(av.s)
    deadline = task.current_aggregator().deadline_block
    exec_at(av.s.chain, max(deadline, task.availability_challenge(1).deadline) + 1)  # type: ignore[union-attr]
    with pytest.raises(AvailabilityChallengeOpen):
        task.advance_attempt(av.s.spare[0], 1)
    task.expire_availability(av.s.spare[0], 1)
    if laggard not in av.colluders:
        assert task.aggregator_info(laggard.address).stake == cfg.aggregator_stake
    nxt = task.current_aggregator()
    assert nxt.deadline_block == av.s.chain.block_number() + cfg.submit_timeout
    assert nxt.address in {a.address for a in av.honest}


# ----------------------------------------------------------------------------------------
# Who may challenge what
# ----------------------------------------------------------------------------------------


def test_challenge_refusals(av: Avail) -> None:
    task, cfg = av.task, av.task.config()
    honest = av.honest[0]
    with pytest.raises(ChallengerAttested):  # it claimed to hold X
        task.challenge_availability(av.colluders[0], 1, X, 0)
    with pytest.raises(NotAggregator):
        task.challenge_availability(av.s.spare[0], 1, X, 0)
    with pytest.raises(WrongValue):
        task.challenge_availability(honest, 1, X, 0, value=cfg.challenge_bond - 1)
    with pytest.raises(NotIncluded):  # no such update
        task.challenge_availability(honest, 1, K, 0)
    # a j past 2**24 is kept mod 2**24 (answered mod the chunk count anyway)
    # records that are not the round's: U_i of X swapped for another update's
    ups = task.updates(1)
    entries = b"".join(
        bytes.fromhex(u.client[2:])
        + u.digest
        + u.num_samples.to_bytes(8, "big")
        + (ups[0].chunk_root if u.index == X else u.chunk_root)
        for u in ups
    )
    with pytest.raises(EntriesMismatch):
        task._tx(honest, "challengeAvailability", 1, X, 0, entries, value=cfg.challenge_bond)
    with pytest.raises(EntriesMismatch):  # one record short
        task._tx(honest, "challengeAvailability", 1, X, 0, entries[:-92], value=cfg.challenge_bond)


def test_an_update_below_f_plus_1_attesters_is_not_challengeable(chain: Chain) -> None:
    """With one attester X is not included: nothing to challenge (it is excluded anyway)."""
    av = make_avail(chain, attest_x=1)
    assert av.task.included_updates(1)[X] is False
    with pytest.raises(NotIncluded):
        av.task.challenge_availability(av.honest[0], 1, X, 0)


def test_a_slashed_member_cannot_challenge(av: Avail) -> None:
    task = av.task
    task.challenge_availability(av.honest[0], 1, X, 0)
    exec_at(av.s.chain, task.availability_challenge(1).deadline + 1)  # type: ignore[union-attr]
    task.expire_availability(av.s.spare[0], 1)
    with pytest.raises(NotAggregator):  # a slashed member has no say in what is included
        task.challenge_availability(av.colluders[0], 1, 0, 0)


def test_pbft_only_tasks_have_no_availability_game(chain: Chain) -> None:
    """Under PBFT at most f members are faulty: f + 1 attesters include a correct one."""
    av = make_avail(chain, fault_proof=False)
    with pytest.raises(NoFaultGames):
        av.task.challenge_availability(av.honest[0], 1, X, 0)


def test_abort_refunds_an_open_challenge(av: Avail) -> None:
    task, cfg = av.task, av.task.config()
    task.challenge_availability(av.honest[0], 1, X, 0)
    exec_at(av.s.chain, task.round_info(1).open_block + cfg.abort_timeout + 1)
    task.abort_task(av.s.spare[0])
    assert task.credits(av.honest[0].address) == cfg.challenge_bond


def test_gas_of_each_move(chain: Chain) -> None:
    """The gas of each move (n = 4, K = 5, a 4-chunk update: depth-2 proofs), printed for
    docs/fault-proof.md and asserted within the bounds the docs state."""
    av = make_avail(chain)
    task = av.task
    challenge = task.challenge_availability(av.honest[0], 1, X, 1)
    answered = answer(av, av.colluders[0])
    task.challenge_availability(av.honest[1], 1, X, 2)
    exec_at(chain, task.availability_challenge(1).deadline + 1)  # type: ignore[union-attr]
    expired = task.expire_availability(av.s.spare[0], 1)
    gas = {
        "challengeAvailability": int(challenge["gasUsed"]),
        "answerAvailability": int(answered["gasUsed"]),
        "expireAvailability": int(expired["gasUsed"]),
    }
    print("availability-game gas (n=4, K=5, depth 2):", gas)
    assert 50_000 < gas["challengeAvailability"] < 150_000
    assert 30_000 < gas["answerAvailability"] < 120_000
    assert 50_000 < gas["expireAvailability"] < 200_000


# ----------------------------------------------------------------------------------------
# The nodes play it unattended (scenarios/avail-withheld-fault-proof.toml)
# ----------------------------------------------------------------------------------------


def test_nodes_drop_a_withheld_update_and_finalize_like_the_honest_twin(tmp_path: Path) -> None:
    """Client 0 hands its update to nobody; aggregators 0 and 1 (f + 1, colluding) attest it
    anyway. An honest node that cannot fetch it challenges its availability, nobody can
    answer, a node expires the challenge: both attesters are slashed and the round finalizes
    without the update, byte-identical to the honest twin (on the code before the game the
    honest members can never fetch it and the task stalls until abortTask)."""
    scenario = load_scenario(SCENARIOS / "avail-withheld-fault-proof.toml")
    scenario.config.out = str(tmp_path)
    summary = run_scenario(scenario).summary
    twin = run_scenario(scenario.honest_twin()).summary
    assert outcome_of(summary) == "safe" and summary["all_rounds_finalized"]
    assert summary["final_model_digest"] == twin["final_model_digest"]
    (log,) = list(tmp_path.glob("*avail-withheld-fault-proof/events.jsonl"))
    events = read_events(log)
    (finalized,) = [e for e in events if e["kind"] == "round_finalized"]
    assert finalized["gas"]["challengeAvailability"] > 0
    assert finalized["gas"]["expireAvailability"] > 0
    assert "answerAvailability" not in finalized["gas"]  # nobody held it
    submitted = [e for e in events if e["kind"] == "aggregate_submitted"]
    assert len(submitted) == 1 and not submitted[0]["faulty"]  # one honest aggregate, after
    stakes = [e for e in events if e["kind"] == "stakes"][-1]["aggregators"]
    assert stakes["aggregator-0"]["slashed"] and stakes["aggregator-1"]["slashed"]
    assert not stakes["aggregator-2"]["slashed"] and not stakes["aggregator-3"]["slashed"]
