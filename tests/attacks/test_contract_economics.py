"""Issue 20: adversaries around the aggregator, against the real FedChainTask on the
embedded eth-tester chain. Each test names its attack in its docstring's first line; the
table in docs/attacks.md ("Issue 20") lists them with their outcome."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.contract import (
    AlreadyChallenged,
    CollectionNotTimedOut,
    CommitteeTooSmall,
    InvalidMaxSamples,
    InvalidTimeouts,
    NotAggregator,
    OwnerCannotServe,
    Phase,
    QuorumNotReached,
    SamplesOutOfRange,
    TaskAlreadyCompleted,
    TaskConfig,
    TaskContract,
    TaskNotStalled,
)
from consensus.evidence import proof_of
from tests.conftest import DEFAULT_TASK_CONFIG, TaskSetup
from tests.test_contract import BURN, assert_accounting, chosen, dg, exec_at, fill
from tests.test_contract_dispute import by_address, certificate, submit_and_challenge
from tests.test_contract_liveness import _pair

ETHER = 10**18


def release_and_withdraw_all(s: TaskSetup) -> None:
    """Every member releases its stake and withdraws every credit; nothing stays locked."""
    task = s.task
    for acct in s.aggregators:
        if task.aggregator_info(acct.address).stake:
            task.release_stake(acct)
        if task.credits(acct.address):
            task.withdraw(acct)
        assert task.credits(acct.address) == 0
    # only burned value (credited to address(0), which nobody can withdraw) may remain
    assert task.balance() == task.credits(BURN)


# -- item 1: bounded client weight -------------------------------------------------------


def test_weight_inflation_is_refused_at_registration(task_factory: Any) -> None:
    """Weight inflation: a client registers numSamples = 2**63 or 2**40 to own the aggregate."""
    s = task_factory(max_samples=10**6)
    task, (c0, c1, c2, _) = s.task, s.clients
    for claim in (2**63, 2**40, 10**6 + 1):
        with pytest.raises(SamplesOutOfRange) as info:
            task.submit_update(c0, 1, dg(("u", claim)), claim)
        assert info.value.error_args == {"numSamples": claim, "maxSamples": 10**6}
    task.submit_update(c1, 1, dg("ok"), 10**6)  # the bound itself is allowed
    # a relayed batch carrying an inflated record is refused whole, like a zero weight
    from adapters.records import sign_update

    index = task.client_index(c2.address)
    assert index is not None
    bad = sign_update(c2, task.domain_separator, index, 1, dg("bad"), 2**63)
    with pytest.raises(SamplesOutOfRange):
        task.submit_updates(s.owner, 1, [bad])
    assert task.update_count(1) == 1


def test_max_samples_bounds_the_int64_sum(chain: Any) -> None:
    """Weight overflow: maxSamples * maxUpdates beyond int64 would let the weights' sum overflow."""
    owner = chain.accounts[0]
    for max_samples, max_updates in ((0, 4), (2**62, 2), (2**63 - 1, 4)):
        cfg = TaskConfig(
            **{**DEFAULT_TASK_CONFIG, "max_samples": max_samples, "max_updates": max_updates}
        )
        with pytest.raises(InvalidMaxSamples):
            TaskContract.deploy(chain, owner, cfg)
    ok = TaskConfig(**{**DEFAULT_TASK_CONFIG, "max_samples": (2**63 - 1) // 4, "max_updates": 4})
    assert TaskContract.deploy(chain, owner, ok).config().max_samples == (2**63 - 1) // 4
    for timeouts in ({"collect_timeout": 0}, {"abort_timeout": 0}):
        with pytest.raises(InvalidTimeouts):
            TaskContract.deploy(chain, owner, TaskConfig(**{**DEFAULT_TASK_CONFIG, **timeouts}))


# -- item 2: liveness with an exit -------------------------------------------------------


def test_stalled_collection_skips_rounds_and_returns_every_stake(task_factory: Any) -> None:
    """Collection stall: a round never reaches minUpdates, so stakes would be locked forever."""
    s = task_factory(num_rounds=2, min_updates=3, collect_timeout=4)
    task, chain, cfg = s.task, s.chain, s.task.config()
    fill(s, 1, n=2)  # 2 of the 3 updates needed
    timeout = task.round_info(1).open_block + cfg.collect_window + cfg.collect_timeout
    exec_at(chain, timeout)
    with pytest.raises(CollectionNotTimedOut) as early:
        task.skip_round(s.clients[3], 1)
    assert early.value.error_args == {"round": 1, "timeoutBlock": timeout}
    chain.mine(1)  # the refused call was a dry run: the next one executes one block later
    receipt = task.skip_round(s.clients[3], 1)  # anyone may
    events = [(e.name, e.args) for e in task.events(receipt)]
    assert events[0] == ("RoundSkipped", {"round": 1, "updateCount": 2, "digest": b"\x11" * 32})
    assert events[1][0] == "RoundOpened"
    assert task.phase(1) == Phase.FINALIZED and task.round_digest(1) == b"\x11" * 32
    assert task.global_model_digest() == b"\x11" * 32  # the model is carried forward
    # round 2 receives nothing at all
    exec_at(chain, task.round_info(2).open_block + cfg.collect_window + cfg.collect_timeout + 1)
    task.skip_round(s.owner, 2)
    assert task.task_completed()
    assert_accounting(s)
    release_and_withdraw_all(s)
    assert task.balance() == 0


def test_skip_refused_once_collection_closed(task_factory: Any) -> None:
    """Round skipping: nobody may skip a round that reached minUpdates (its aggregate counts)."""
    s = task_factory(collect_timeout=1)
    task, chain, cfg = s.task, s.chain, s.task.config()
    fill(s, 1)  # maxUpdates: collection closed
    exec_at(chain, task.round_info(1).open_block + cfg.collect_window + 5)
    with pytest.raises(CollectionNotTimedOut):
        task.skip_round(s.owner, 1)


def test_never_started_task_can_be_aborted_and_left(task_factory: Any) -> None:
    """Stake lock: the owner never calls start; members leave or anyone aborts after the timeout."""
    s = task_factory(start=False, abort_timeout=20)
    task, chain, (a0, a1, a2, a3) = s.task, s.chain, s.aggregators
    receipt = task.leave_committee(a1)
    assert [(e.name, e.args) for e in task.events(receipt)] == [
        ("AggregatorLeft", {"aggregator": a1.address, "amount": ETHER})
    ]
    assert task.aggregators() == [a0.address, a3.address, a2.address]  # last takes the seat
    assert task.aggregator_info(a3.address).index == 1
    assert not task.aggregator_info(a1.address).registered
    task.withdraw(a1)
    with pytest.raises(NotAggregator):
        task.leave_committee(a1)
    with pytest.raises(CommitteeTooSmall):
        task.start(s.owner)  # 3 members left
    deployed = s.task.deploy_receipt["blockNumber"]
    exec_at(chain, deployed + 20)
    with pytest.raises(TaskNotStalled):
        task.abort_task(a0)
    chain.mine(1)
    receipt = task.abort_task(a0)
    assert task.events(receipt)[0].name == "TaskAborted"
    assert task.task_completed()
    with pytest.raises(TaskAlreadyCompleted):
        task.abort_task(a0)
    release_and_withdraw_all(s)
    assert task.balance() == 0


def test_abort_mid_dispute_refunds_both_bonds(task_factory: Any) -> None:
    """Stake lock: the committee stalls in a dispute round after round; anyone ends the task."""
    s = task_factory(abort_timeout=30, dispute_timeout=100)
    task, chain, cfg = s.task, s.chain, s.task.config()
    submitter, challenger, _ = submit_and_challenge(s)
    exec_at(chain, task.round_info(1).open_block + 31)
    receipt = task.abort_task(s.clients[0])
    assert task.events(receipt)[0].args["refunded"] == cfg.aggregate_bond + cfg.challenge_bond
    assert task.credits(submitter.address) == cfg.aggregate_bond
    assert task.credits(challenger.address) == cfg.challenge_bond
    with pytest.raises(TaskAlreadyCompleted):
        task.abort_task(s.clients[0])
    with pytest.raises(TaskAlreadyCompleted):
        task.finalize(s.owner, 1)
    release_and_withdraw_all(s)
    assert task.balance() == 0


# -- item 3: committee size --------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_small_committee_refused(task_factory: Any, n: int) -> None:
    """Small committee: with n < 4 the n - f quorum needs the accused's own signature."""
    s = task_factory(n_aggregators=n, start=False)
    with pytest.raises(CommitteeTooSmall) as info:
        s.task.start(s.owner)
    assert info.value.error_args == {"members": n, "minimum": 4}


# -- item 4: no profit from griefing -----------------------------------------------------


def test_owner_cannot_join_the_committee(task_factory: Any) -> None:
    """Owner griefing: the owner joins the committee to earn from disputes it provokes."""
    s = task_factory(n_aggregators=0, start=False)
    with pytest.raises(OwnerCannotServe) as info:
        s.task.register_aggregator(s.owner)
    assert info.value.error_args == {"account": s.owner.address}


def test_frivolous_challenger_pays_the_submitter_and_only_once(task_factory: Any) -> None:
    """Frivolous challenges: one member challenges a good aggregate again and again."""
    s = task_factory(challenge_window=20)
    task, cfg = s.task, s.task.config()
    submitter, challenger, _ = submit_and_challenge(s)
    honest = by_address([a for a in s.aggregators if a != challenger])
    task.resolve_certificate(s.owner, certificate(s, honest, False))
    assert task.phase(1) == Phase.SUBMITTED
    # the forfeited bond is burned: neither the owner nor a colluding submitter gets it
    assert task.credits(BURN) == cfg.challenge_bond
    assert task.credits(s.owner.address) == 0 and task.credits(submitter.address) == 0
    with pytest.raises(AlreadyChallenged) as info:
        task.challenge(challenger, 1)
    assert info.value.error_args == {"round": 1, "account": challenger.address}
    assert_accounting(s)


def test_expired_dispute_refunds_the_submitter(task_factory: Any) -> None:
    """Dispute stall: a challenger lets the dispute expire to cost the submitter its bond."""
    s = task_factory()
    task, chain, cfg = s.task, s.chain, s.task.config()
    submitter, challenger, _ = submit_and_challenge(s)
    exec_at(chain, task.round_info(1).dispute_deadline + 1)
    receipt = task.expire_dispute(s.owner, 1)
    assert task.events(receipt)[0].args["treasuryAmount"] == cfg.challenge_bond  # burned
    assert task.credits(submitter.address) == cfg.aggregate_bond
    assert task.credits(challenger.address) == 0 and task.credits(s.owner.address) == 0
    assert task.credits(BURN) == cfg.challenge_bond
    assert_accounting(s)


def test_timeout_penalty_and_slash_remainder_are_burned(task_factory: Any) -> None:
    """Owner profit: penalties and slash remainders credited to the owner reward griefing."""
    s = task_factory()
    task, chain, cfg = s.task, s.chain, s.task.config()
    fill(s, 1)
    exec_at(chain, task.current_aggregator().deadline_block + 1)
    task.advance_attempt(s.owner, 1)
    assert task.credits(s.owner.address) == 0 and task.credits(BURN) == cfg.timeout_penalty
    assert_accounting(s)


# -- item 6: the smaller ones ------------------------------------------------------------


def test_slashed_signer_does_not_void_a_certificate(task_factory: Any) -> None:
    """Certificate voiding: a signer gets itself slashed after signing to sink the quorum."""
    s = task_factory()
    task = s.task
    submitter, challenger, _ = submit_and_challenge(s)
    liar = next(a for a in s.aggregators if a not in (submitter, challenger))
    proof = proof_of(_pair(s, liar, "commit"))
    assert proof is not None
    task.slash_equivocation(challenger, *proof.contract_args())
    # liar + two others: only two valid votes once the liar is out, below the quorum of 3
    short = by_address([liar, challenger, submitter])
    with pytest.raises(QuorumNotReached) as info:
        task.resolve_certificate(s.owner, certificate(s, short, True))
    assert info.value.error_args == {"signers": 2, "quorum": 3}
    # every member signed: the liar's vote is ignored, the other three carry the verdict
    task.resolve_certificate(s.owner, certificate(s, by_address(s.aggregators), True))
    assert task.aggregator_info(submitter.address).slashed
    assert_accounting(s)


def test_chosen_member_slashed_mid_attempt_hands_over_a_fresh_deadline(task_factory: Any) -> None:
    """Inherited deadline: the chosen member is slashed late in its slot; the next is penalised."""
    s = task_factory(submit_timeout=6)
    task, chain = s.task, s.chain
    fill(s, 1)
    first = task.current_aggregator()
    exec_at(chain, first.deadline_block - 1)
    proof = proof_of(_pair(s, s.account(first.address), "commit"))
    assert proof is not None
    reporter = next(a for a in s.aggregators if a.address != first.address)
    receipt = task.slash_equivocation(reporter, *proof.contract_args())
    advanced = [e for e in task.events(receipt) if e.name == "AttemptAdvanced"]
    assert advanced and advanced[0].args["penalty"] == 0
    nxt = task.current_aggregator()
    assert nxt.address != first.address and nxt.attempt == first.attempt + 1
    assert nxt.deadline_block == receipt["blockNumber"] + task.config().submit_timeout
    task.submit_aggregate(chosen(s), 1, dg("agg"))  # in time, no penalty
    assert_accounting(s)


# -- item 5: admission -------------------------------------------------------------------


def _sybil_batch(s: TaskSetup, sybils: list[Any], round_: int) -> list[Any]:
    from adapters.records import sign_update

    records = []
    for i, acct in enumerate(sybils):
        index = s.task.client_index(acct.address)
        assert index is not None
        records.append(
            sign_update(acct, s.task.domain_separator, index, round_, dg(("sybil", i)), 10**6)
        )
    return records


def test_sybil_batch_at_round_open_no_longer_takes_every_slot(task_factory: Any) -> None:
    """Sybil round filling: one relayed batch at round open takes every slot (permissionless);
    with minCollectionBlocks the slots open progressively and honest late clients get in,
    and with clientDeposit every sybil identity locks a deposit."""
    from adapters.contract import SlotsNotOpen, WrongValue

    deposit = ETHER // 100
    s = task_factory(
        n_clients=8,
        min_updates=2,
        max_updates=4,
        collect_window=10,
        min_collection_blocks=8,
        client_deposit=deposit,
    )
    task, chain = s.task, s.chain
    # 8 registered identities locked 8 deposits (a sybil pays deposit x identities)
    stakes = sum(task.aggregator_info(a.address).stake for a in s.aggregators)
    assert task.balance() == stakes + 8 * deposit
    with pytest.raises(WrongValue):
        task.register_client(s.spare[0], value=0)
    sybils, honest = s.clients[:4], s.clients[4:]
    open_block = task.round_info(1).open_block
    # slots open: ceil(4 * blocks open / 8): 1 in the round's second block, 2 in its third
    # and fourth, 3 in its fifth and sixth, all 4 from its seventh
    exec_at(chain, open_block + 1)  # the batch lands at round open
    task.submit_updates(s.owner, 1, _sybil_batch(s, sybils, 1))
    assert task.update_count(1) == 1  # not every slot
    task.submit_updates(s.owner, 1, _sybil_batch(s, sybils[1:], 1))  # next block: one more
    with pytest.raises(SlotsNotOpen) as info:
        task.submit_update(sybils[2], 1, dg("sybil-2"), 10)
    assert info.value.error_args == {"round": 1, "open": 2}
    # honest clients that come later get the slots opened later
    exec_at(chain, open_block + 4)
    task.submit_update(honest[0], 1, dg("honest-0"), 10)
    exec_at(chain, open_block + 6)
    task.submit_update(honest[1], 1, dg("honest-1"), 10)
    assert [u.client for u in task.updates(1)][2:] == [honest[0].address, honest[1].address]
    assert task.round_info(1).collection_closed  # maxUpdates reached, round open 7 blocks


def test_client_deposit_is_refunded_after_the_task_ends(task_factory: Any) -> None:
    """Locked deposits: client deposits come back (pull payment) once the task is aborted."""
    from adapters.contract import NothingToWithdraw, TaskNotCompleted

    deposit = ETHER // 100
    s = task_factory(n_clients=3, client_deposit=deposit, abort_timeout=3)
    task, chain = s.task, s.chain
    client = s.clients[0]
    with pytest.raises(TaskNotCompleted):
        task.release_deposit(client)
    exec_at(chain, task.round_info(1).open_block + 4)
    task.abort_task(s.owner)
    for c in s.clients:
        receipt = task.release_deposit(c)
        assert task.events(receipt)[0].args == {"client": c.address, "amount": deposit}
        assert task.credits(c.address) == deposit
        task.withdraw(c)
    with pytest.raises(NothingToWithdraw):
        task.release_deposit(client)
    release_and_withdraw_all(s)  # nothing but burned value stays in the contract


def test_client_allowlist_keeps_sybils_out(task_factory: Any) -> None:
    """Sybil round filling: with the task's client allowlist, unknown accounts cannot register."""
    from adapters.contract import ClientNotAllowed, OwnableUnauthorizedAccount

    s = task_factory(n_clients=0, client_allowlist=True, min_updates=2, max_updates=4)
    task, honest, sybil = s.task, s.spare[:2], s.spare[2]
    with pytest.raises(ClientNotAllowed) as info:
        task.register_client(honest[0])
    assert info.value.error_args == {"account": honest[0].address}
    with pytest.raises(OwnableUnauthorizedAccount):
        task.allow_clients(sybil, [sybil.address])
    receipt = task.allow_clients(s.owner, [a.address for a in honest])
    assert task.events(receipt)[0].args == {"accounts": [a.address for a in honest]}
    for acct in honest:
        task.register_client(acct)
    with pytest.raises(ClientNotAllowed):
        task.register_client(sybil)
    assert task.config().client_allowlist is True
    for i, acct in enumerate(honest):
        task.submit_update(acct, 1, dg(("honest", i)), 10)
    assert task.update_count(1) == 2


# -- item 7: the equivocation reward is bound to a prior commitment ----------------------


def test_copied_equivocation_evidence_pays_the_copier_nothing(task_factory: Any) -> None:
    """Mempool copying: a watcher copies a reporter's slashEquivocation evidence and sends it
    from its own account first, to take the reporter's reward."""
    from adapters.contract import EvidenceNotCommitted

    s = task_factory(n_aggregators=5)
    task = s.task
    liar, reporter, copier = s.aggregators[1], s.aggregators[2], s.spare[0]
    proof = proof_of(_pair(s, liar, "commit"))
    assert proof is not None
    args = proof.contract_args()
    # the reporter commits keccak(evidence, reporter) first: copying that transaction (from
    # any account) binds the reward to the reporter again, and reveals nothing to copy
    task.commit_equivocation(copier, proof.sealed(task.address, reporter.address))
    # the copier front-runs the reveal with the same evidence from its own account: refused,
    # it never committed; the liar keeps its stake until the reporter reveals
    with pytest.raises(EvidenceNotCommitted) as info:
        task.slash_equivocation(copier, *args, commit=False)
    assert info.value.error_args == {"reporter": copier.address}
    assert task.credits(copier.address) == 0
    assert not task.aggregator_info(liar.address).slashed
    # (a commitment of its own made after seeing the evidence must be at least one block
    # older than its reveal: contracts/test/FedChainTaskExits.t.sol checks the same block)
    stake = task.aggregator_info(liar.address).stake
    receipt = task.slash_equivocation(reporter, *args, commit=False)
    assert [e.name for e in task.events(receipt)] == ["Slashed", "EquivocationSlashed"]
    assert task.credits(reporter.address) == stake // 2
    assert task.credits(copier.address) == 0
    assert_accounting(s)
