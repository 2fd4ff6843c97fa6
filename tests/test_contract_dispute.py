"""The dispute path of FedChainTask: challenge, commit certificates, slashing and re-opening.

Certificates are signed with the Python PBFT side (``consensus.messages`` / ``consensus.
certificate``), so these tests also pin that the contract's EIP-712 digest and signature rules
match ``consensus.certificate.CommitCertificate.verify`` byte for byte.

Block arithmetic as in tests/test_contract.py: a transaction sent while the latest block is
``b`` executes in block ``b + 1``.
"""

from __future__ import annotations

from typing import Any

import pytest
from eth_account.messages import _hash_eip191_message, encode_typed_data
from eth_account.signers.local import LocalAccount

from adapters.contract import (
    AggregateAlreadySubmitted,
    AggregatorIsSlashed,
    AlreadyChallenged,
    AttemptMismatch,
    ChallengerIsSubmitter,
    ChallengeWindowClosed,
    ChallengeWindowOpen,
    DisputeOpen,
    DuplicateSigner,
    EmptyCommittee,
    InvalidSignature,
    NoAggregateSubmitted,
    NoOpenDispute,
    NotAggregator,
    NotChosenAggregator,
    Phase,
    QuorumNotReached,
    RoundAlreadyFinalized,
    RoundNotOpen,
    SignatureFault,
    SignerNotMember,
    SignersNotSorted,
    TaskRevert,
    WrongValue,
)
from consensus.certificate import CommitCertificate, verdict_digest, verdict_struct_hash
from consensus.messages import (
    SECP256K1_N,
    TYPE_HASHES,
    Commit,
    Domain,
    sign,
    sign_struct,
    typed_data,
)
from consensus.quorums import commit_quorum, max_faulty
from tests.test_contract import BURN, assert_accounting, chosen, dg, exec_at, fill

ETHER = 10**18
TaskSetup = Any  # tests/conftest.py:TaskSetup


# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------


def domain(s: TaskSetup) -> Domain:
    return Domain(s.chain.chain_id, s.task.address)


def sig_of(
    s: TaskSetup,
    acct: LocalAccount,
    round_: int,
    attempt: int,
    digest: bytes,
    faulty: bool,
    view: int = 0,
) -> bytes:
    """``acct``'s 65-byte signature over DisputeVerdict(round, attempt, digest, faulty, view)."""
    return sign_struct(acct, domain(s), verdict_struct_hash(round_, attempt, digest, faulty, view))


def by_address(accounts: list[LocalAccount]) -> list[LocalAccount]:
    return sorted(accounts, key=lambda a: int(a.address, 16))


def certificate(
    s: TaskSetup,
    signers: list[LocalAccount],
    faulty: bool,
    view: int = 0,
    round_: int | None = None,
) -> CommitCertificate:
    """A certificate built the way replicas build it: signed Commit messages -> from_commits."""
    task = s.task
    r = task.current_round() if round_ is None else round_
    info = task.round_info(r)
    committee = task.aggregators()
    commits = [
        sign(
            Commit(
                r,
                info.submission_attempt,
                info.aggregate_digest,
                faulty,
                view,
                committee.index(a.address),
            ),
            a,
            domain(s),
        )
        for a in signers
    ]
    return CommitCertificate.from_commits(commits, committee, limit=len(signers))


def submit_and_challenge(
    s: TaskSetup, round_: int = 1, challenger: LocalAccount | None = None, fill_first: bool = True
) -> tuple[LocalAccount, LocalAccount, Any]:
    """Fill the round, let the chosen aggregator submit, challenge it. Returns (submitter,
    challenger, challenge receipt)."""
    if fill_first:
        fill(s, round_)
    submitter = chosen(s)
    s.task.submit_aggregate(submitter, round_, dg(("agg", round_, submitter.address)))
    if challenger is None:
        challenger = next(a for a in s.aggregators if a != submitter)
    receipt = s.task.challenge(challenger, round_)
    return submitter, challenger, receipt


def others(s: TaskSetup, *excluded: LocalAccount) -> list[LocalAccount]:
    return [a for a in s.aggregators if a not in excluded]


# ----------------------------------------------------------------------------------------
# EIP-712 and quorum maths: the contract and the Python PBFT side agree
# ----------------------------------------------------------------------------------------


def test_verdict_digest_matches_python(task_factory: Any) -> None:
    s = task_factory(n_aggregators=1, n_clients=0, start=False)
    task, dom = s.task, domain(s)
    assert bytes(task._call("DISPUTE_VERDICT_TYPEHASH")) == TYPE_HASHES["DisputeVerdict"]
    assert (
        task.eip712_domain()
        == {
            "name": "FedChainTask",
            "version": "1",
            "chainId": s.chain.chain_id,
            "verifyingContract": task.address,
        }
        == dom.typed_data_domain()
    )
    cases = [
        (1, 0, dg("a"), True, 0),
        (7, 3, dg("b"), False, 2),
        (2**64, 2**32 - 1, b"\xff" * 32, True, 2**255 + 12345),
    ]
    for round_, attempt, digest, faulty, view in cases:
        ours = verdict_digest(dom, round_, attempt, digest, faulty, view)
        assert task.verdict_digest(round_, attempt, digest, faulty, view) == ours
        # and the generic EIP-712 encoder (eth_account) agrees with both
        commit = Commit(round_, attempt, digest, faulty, view, 0)
        generic = _hash_eip191_message(encode_typed_data(full_message=typed_data(commit, dom)))
        assert generic == ours
    # every field is bound: changing any one changes the digest
    base = task.verdict_digest(1, 0, dg("a"), True, 0)
    for variant in (
        (2, 0, dg("a"), True, 0),
        (1, 1, dg("a"), True, 0),
        (1, 0, dg("b"), True, 0),
        (1, 0, dg("a"), False, 0),
        (1, 0, dg("a"), True, 1),
    ):
        assert task.verdict_digest(*variant) != base
    # another deployment (verifyingContract) signs a different digest
    other = task_factory(n_aggregators=0, n_clients=0, start=False).task
    assert other.verdict_digest(1, 0, dg("a"), True, 0) != base


def test_quorum_library_mirrors_python(task_factory: Any) -> None:
    s = task_factory(n_aggregators=0, n_clients=0, start=False)
    task = s.task
    with pytest.raises(EmptyCommittee):
        task.commit_quorum()
    assert task.committee_size() == 0
    for n, acct in enumerate(s.spare, start=1):  # 1 .. 15 members
        task.register_aggregator(acct)
        assert task.committee_size() == n
        assert task.commit_quorum() == commit_quorum(n) == n - max_faulty(n)
    # spot values: n = 3f + 1 gives 2f + 1; n = 5 needs 4 (not 2f + 1 = 3)
    assert [commit_quorum(n) for n in (1, 2, 3, 4, 5, 6, 7, 10)] == [1, 2, 3, 3, 4, 5, 5, 7]


# ----------------------------------------------------------------------------------------
# challenge
# ----------------------------------------------------------------------------------------


def test_challenge_opens_dispute(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task, cfg = s.task, s.task.config()
    submitter, challenger, receipt = submit_and_challenge(s)
    info = task.round_info(1)
    assert [(e.name, e.args) for e in task.events(receipt)] == [
        (
            "Challenged",
            {
                "round": 1,
                "attempt": 0,
                "challenger": challenger.address,
                "aggregateDigest": info.aggregate_digest,
            },
        )
    ]
    assert info.phase == Phase.DISPUTED == task.phase(1)
    assert (info.challenger, info.challenge_block) == (challenger.address, receipt["blockNumber"])
    assert info.aggregator == submitter.address and info.submission_attempt == 0
    assert task.balance() == 4 * cfg.aggregator_stake + cfg.aggregate_bond + cfg.challenge_bond
    assert_accounting(s)
    # one open dispute per submission; nothing else moves the round meanwhile
    with pytest.raises(DisputeOpen) as again:
        task.challenge(others(s, submitter, challenger)[0], 1)
    assert again.value.error_args == {"round": 1, "challenger": challenger.address}
    with pytest.raises(DisputeOpen):
        task.challenge(challenger, 1)
    s.chain.mine(cfg.challenge_window + 1)  # even after the window: no finalize while disputed
    with pytest.raises(DisputeOpen) as fin:
        task.finalize(s.owner, 1)
    assert fin.value.error_args == {"round": 1, "challenger": challenger.address}
    with pytest.raises(AggregateAlreadySubmitted):
        task.advance_attempt(s.owner, 1)
    with pytest.raises(AggregateAlreadySubmitted):
        task.submit_aggregate(submitter, 1, dg("again"))


@pytest.mark.parametrize(("offset", "allowed"), [(-1, True), (0, True), (1, False)])
def test_challenge_window_edges(task_factory: Any, offset: int, allowed: bool) -> None:
    s = task_factory(challenge_window=3)
    task = s.task
    fill(s, 1)
    submitter = chosen(s)
    receipt = task.submit_aggregate(submitter, 1, dg("m"))
    deadline = receipt["blockNumber"] + 3
    assert task.round_info(1).challenge_deadline == deadline
    exec_at(s.chain, deadline + offset)
    challenger = s.aggregators[1]
    if allowed:
        assert task.challenge(challenger, 1)["blockNumber"] == deadline + offset
        assert task.phase(1) == Phase.DISPUTED
    else:
        with pytest.raises(ChallengeWindowClosed) as info:
            task.challenge(challenger, 1)
        assert info.value.error_args == {"round": 1, "challengeDeadline": deadline}
        assert task.finalize(s.owner, 1)["blockNumber"] == deadline + 1  # same block: finalize


def test_challenge_refusals(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task, cfg = s.task, s.task.config()
    with pytest.raises(NoAggregateSubmitted):  # collecting
        task.challenge(s.aggregators[1], 1)
    fill(s, 1)
    with pytest.raises(NoAggregateSubmitted) as none:  # aggregating, nothing submitted yet
        task.challenge(s.aggregators[1], 1)
    assert none.value.error_args == {"round": 1}
    submitter = chosen(s)
    task.submit_aggregate(submitter, 1, dg("m"))
    for outsider in (s.clients[0], s.owner, s.spare[0]):
        with pytest.raises(NotAggregator) as info:
            task.challenge(outsider, 1)
        assert info.value.error_args == {"account": outsider.address}
    with pytest.raises(ChallengerIsSubmitter) as own:
        task.challenge(submitter, 1)
    assert own.value.error_args == {"account": submitter.address}
    for value in (0, cfg.challenge_bond - 1, cfg.challenge_bond + 1):
        with pytest.raises(WrongValue) as wrong:
            task.challenge(s.aggregators[1], 1, value=value)
        assert wrong.value.error_args == {"expected": cfg.challenge_bond, "actual": value}
    with pytest.raises(RoundNotOpen):
        task.challenge(s.aggregators[1], 2)
    assert task.phase(1) == Phase.SUBMITTED
    assert_accounting(s)


def test_slashed_member_cannot_challenge_or_rejoin(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task, cfg = s.task, s.task.config()
    submitter, _, _ = submit_and_challenge(s)
    task.resolve_certificate(s.owner, certificate(s, others(s, submitter), faulty=True))
    # a[1] serves attempt 1; the slashed a[0] may neither challenge nor top up nor submit
    task.submit_aggregate(chosen(s), 1, dg("honest"))
    with pytest.raises(AggregatorIsSlashed) as slashed:
        task.challenge(submitter, 1)
    assert slashed.value.error_args == {"account": submitter.address}
    with pytest.raises(AggregatorIsSlashed):
        task.top_up_stake(submitter, cfg.aggregator_stake)
    info = task.aggregator_info(submitter.address)
    assert info.slashed and not info.active and info.stake == 0


# ----------------------------------------------------------------------------------------
# resolveDispute: valid certificates
# ----------------------------------------------------------------------------------------


def test_faulty_verdict_slashes_splits_and_reopens(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task, chain, cfg = s.task, s.chain, s.task.config()
    a = s.aggregators
    submitter, challenger, _ = submit_and_challenge(s)
    assert (submitter, challenger) == (a[0], a[1])
    cert = certificate(s, others(s, submitter), faulty=True, view=1)
    cert.verify(task.aggregators(), domain(s))  # the Python verifier accepts it too
    assert len(cert.signatures) == task.commit_quorum() == 3
    resolver = s.clients[0]  # anyone may carry the certificate
    receipt = task.resolve_certificate(resolver, cert)
    block = receipt["blockNumber"]

    slashed = cfg.aggregator_stake + cfg.aggregate_bond
    reward = slashed // 2
    treasury = slashed - reward
    assert [(e.name, e.args) for e in task.events(receipt)] == [
        ("Slashed", {"aggregator": submitter.address, "amount": slashed}),
        (
            "DisputeResolved",
            {
                "round": 1,
                "attempt": 0,
                "faulty": True,
                "viewNumber": 1,
                "challenger": challenger.address,
                "slashedAmount": slashed,
                "challengerReward": reward,
                "treasuryAmount": treasury,
            },
        ),
    ]
    assert task.credits(challenger.address) == cfg.challenge_bond + reward
    assert task.credits(BURN) == treasury and task.credits(s.owner.address) == 0
    info = task.aggregator_info(submitter.address)
    assert (info.slashed, info.active, info.stake) == (True, False, 0)
    assert_accounting(s)

    # the round re-opened: attempt 1 starts at this block, nothing submitted
    r = task.round_info(1)
    assert r.phase == Phase.AGGREGATING
    assert (r.attempt, r.attempt_start, r.deadline_block) == (1, block, block + cfg.submit_timeout)
    assert r.aggregator is None and r.aggregate_digest == bytes(32) and r.submit_block == 0
    assert r.challenger is None and r.challenge_block == 0
    assert task.round_digest(1) == bytes(32)
    assert task.global_model_digest() == cfg.initial_model_digest
    # round-robin round 1 attempt 1 starts at index 1: the next aggregator serves attempt 1
    current = task.current_aggregator()
    assert (current.address, current.attempt) == (a[1].address, 1)
    with pytest.raises(NotChosenAggregator):
        task.submit_aggregate(submitter, 1, dg("again"))
    task.submit_aggregate(a[1], 1, dg("honest"))
    assert task.round_info(1).submission_attempt == 1
    chain.mine(cfg.challenge_window)
    task.finalize(s.owner, 1)
    assert task.round_digest(1) == dg("honest")
    assert_accounting(s)

    # pull payments: the challenger withdraws exactly its share (the rest stays burned)
    for acct, owed in ((challenger, cfg.challenge_bond + reward + cfg.aggregate_bond),):
        assert task.credits(acct.address) == owed
        before = chain.balance(acct.address)
        w = task.withdraw(acct)
        assert chain.balance(acct.address) == before + owed - w["gasUsed"] * w["effectiveGasPrice"]
    assert_accounting(s)
    # the slashed aggregator skips in every later rotation: round 4 would start at index 0
    assert task.aggregator_info(submitter.address).slashed


def test_self_challenge_through_second_identity_loses_half(task_factory: Any) -> None:
    """A submitter that challenges its own faulty aggregate via a second seat ends up with
    less than it staked: the treasury keeps half of the slashed amount."""
    s = task_factory(n_aggregators=4)
    task, cfg = s.task, s.task.config()
    submitter, accomplice, _ = submit_and_challenge(s)
    task.resolve_certificate(s.owner, certificate(s, others(s, submitter), faulty=True))
    coalition_in = cfg.aggregator_stake + cfg.aggregate_bond + cfg.challenge_bond
    coalition_out = task.credits(accomplice.address) + task.credits(submitter.address)
    assert coalition_out == cfg.challenge_bond + (cfg.aggregator_stake + cfg.aggregate_bond) // 2
    assert coalition_in - coalition_out >= (cfg.aggregator_stake + cfg.aggregate_bond) // 2


def test_upheld_verdict_forfeits_bond_then_finalizes(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4, challenge_window=6)
    task, chain, cfg = s.task, s.chain, s.task.config()
    submitter, challenger, _ = submit_and_challenge(s)
    deadline = task.round_info(1).challenge_deadline
    cert = certificate(s, s.aggregators[1:], faulty=False, view=0)
    receipt = task.resolve_certificate(s.aggregators[3], cert)
    assert [(e.name, e.args) for e in task.events(receipt)] == [
        (
            "DisputeResolved",
            {
                "round": 1,
                "attempt": 0,
                "faulty": False,
                "viewNumber": 0,
                "challenger": challenger.address,
                "slashedAmount": 0,
                "challengerReward": 0,
                "treasuryAmount": cfg.challenge_bond,
            },
        )
    ]
    # the forfeited bond is burned: not to the (possibly colluding) submitter, not to the owner
    assert task.credits(BURN) == cfg.challenge_bond and task.credits(s.owner.address) == 0
    assert task.credits(challenger.address) == 0 and task.credits(submitter.address) == 0
    info = task.round_info(1)
    assert info.phase == Phase.SUBMITTED and info.challenger is None
    assert (info.aggregator, info.challenge_deadline) == (submitter.address, deadline)
    assert not task.aggregator_info(submitter.address).slashed
    assert_accounting(s)
    # still inside the window: finalize waits, another (bonded) challenge is allowed
    with pytest.raises(ChallengeWindowOpen):
        task.finalize(s.owner, 1)
    with pytest.raises(AlreadyChallenged):  # one challenge per member per submission
        task.challenge(challenger, 1)
    task.challenge(s.aggregators[2], 1)
    # the committee already decided this submission; the same certificate settles it again
    task.resolve_certificate(s.owner, cert)
    assert task.credits(BURN) == 2 * cfg.challenge_bond
    exec_at(chain, deadline + 1)
    task.finalize(s.owner, 1)
    assert task.round_digest(1) == info.aggregate_digest
    assert task.credits(submitter.address) == cfg.aggregate_bond
    assert_accounting(s)


def test_upheld_after_window_is_finalizable_at_once(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4, challenge_window=2)
    task, chain = s.task, s.chain
    _, _, _ = submit_and_challenge(s)
    chain.mine(5)  # the committee takes longer than the window
    assert chain.block_number() > task.round_info(1).challenge_deadline
    task.resolve_certificate(s.owner, certificate(s, s.aggregators[1:], faulty=False))
    with pytest.raises(ChallengeWindowClosed):
        task.challenge(s.aggregators[2], 1)
    task.finalize(s.owner, 1)
    assert task.phase(1) == Phase.FINALIZED
    with pytest.raises(RoundAlreadyFinalized):
        task.challenge(s.aggregators[2], 1)


def test_more_than_quorum_and_submitter_signature_count(task_factory: Any) -> None:
    """Any n - f or more distinct members may sign, including the submitter itself."""
    s = task_factory(n_aggregators=4)
    task = s.task
    submit_and_challenge(s)
    cert = certificate(s, s.aggregators, faulty=False)  # all 4, submitter included
    assert len(cert.signatures) == 4
    task.resolve_certificate(s.owner, cert)
    assert task.phase(1) == Phase.SUBMITTED


# ----------------------------------------------------------------------------------------
# resolveDispute: refused certificates
# ----------------------------------------------------------------------------------------


def test_resolve_needs_open_dispute_and_matching_attempt(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task = s.task
    fill(s, 1)
    submitter = chosen(s)
    task.submit_aggregate(submitter, 1, dg("m"))
    sigs = [sig_of(s, a, 1, 0, dg("m"), True) for a in by_address(others(s, submitter))]
    with pytest.raises(NoOpenDispute) as none:
        task.resolve_dispute(s.owner, 1, 0, True, 0, sigs)
    assert none.value.error_args == {"round": 1}
    task.challenge(s.aggregators[1], 1)
    with pytest.raises(AttemptMismatch) as mismatch:
        task.resolve_dispute(s.owner, 1, 1, True, 0, sigs)
    assert mismatch.value.error_args == {"round": 1, "disputedAttempt": 0, "attempt": 1}
    with pytest.raises(RoundNotOpen):
        task.resolve_dispute(s.owner, 2, 0, True, 0, sigs)


def test_certificate_signer_rules(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task = s.task
    submitter, _, _ = submit_and_challenge(s)
    digest = task.round_info(1).aggregate_digest
    members = by_address(s.aggregators)

    def sigs(accts: list[LocalAccount], **kw: Any) -> list[bytes]:
        f = {"round_": 1, "attempt": 0, "digest": digest, "faulty": True, "view": 0, **kw}
        return [
            sig_of(s, a, f["round_"], f["attempt"], f["digest"], f["faulty"], f["view"])
            for a in accts
        ]

    def refused(signatures: list[bytes], error: type[TaskRevert], faulty: bool = True) -> Any:
        with pytest.raises(error) as info:
            task.resolve_dispute(s.owner, 1, 0, faulty, 0, signatures)
        return info.value.error_args

    # too few signers
    assert refused(sigs(members[:2]), QuorumNotReached) == {"signers": 2, "quorum": 3}
    assert refused([], QuorumNotReached) == {"signers": 0, "quorum": 3}
    # a duplicate signer (padding a 2-member certificate to 3 entries)
    dup = sigs([members[0], members[1], members[1]])
    assert refused(dup, DuplicateSigner) == {"index": 2, "signer": members[1].address}
    # unsorted signers
    unsorted = sigs([members[1], members[0], members[2]])
    assert refused(unsorted, SignersNotSorted) == {
        "index": 1,
        "previous": members[1].address,
        "signer": members[0].address,
    }
    # a non-member signer (valid signature, wrong key)
    outsider = s.spare[0]
    mixed = sigs(members[:2]) + sigs([outsider])
    assert refused(mixed, SignerNotMember) == {"index": 2, "signer": outsider.address}
    # signatures over different data recover strangers: wrong view, round, attempt, digest,
    # verdict (the contract cannot tell which field differs; the first entry already fails)
    for kw in (
        {"view": 1},
        {"round_": 2},
        {"attempt": 1},
        {"digest": dg("other")},
        {"faulty": False},
    ):
        args = refused(sigs(members[:3], **kw), SignerNotMember)
        assert args["index"] == 0 and args["signer"] not in [a.address for a in s.aggregators]
    # ... and a not-faulty claim does not match faulty signatures either
    refused(sigs(members[:3]), SignerNotMember, faulty=False)
    assert task.phase(1) == Phase.DISPUTED
    assert not task.aggregator_info(submitter.address).slashed
    assert_accounting(s)


def test_certificate_signature_encoding_rules(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task = s.task
    submit_and_challenge(s)
    digest = task.round_info(1).aggregate_digest
    members = by_address(s.aggregators)
    good = [sig_of(s, a, 1, 0, digest, True) for a in members[:3]]

    def fault(index: int, bad: bytes) -> SignatureFault:
        sigs = list(good)
        sigs[index] = bad
        with pytest.raises(InvalidSignature) as info:
            task.resolve_dispute(s.owner, 1, 0, True, 0, sigs)
        assert info.value.error_args["index"] == index
        return info.value.fault

    # malleable twin (s -> N - s, v flipped) recovers the same key: refused as high-s
    r, s_val, v = good[1][:32], int.from_bytes(good[1][32:64], "big"), good[1][64]
    twin = r + (SECP256K1_N - s_val).to_bytes(32, "big") + bytes([55 - v])
    assert fault(1, twin) == SignatureFault.MALLEABLE_S
    assert fault(0, good[0][:64]) == SignatureFault.INVALID_LENGTH
    assert fault(2, good[2] + b"\x00") == SignatureFault.INVALID_LENGTH
    assert fault(0, good[0][:64] + b"\x1d") == SignatureFault.INVALID_SIGNATURE  # v = 29
    assert fault(0, good[0][:64] + b"\x00") == SignatureFault.INVALID_SIGNATURE  # v = 0
    assert fault(0, bytes(65)) == SignatureFault.INVALID_SIGNATURE
    task.resolve_dispute(s.owner, 1, 0, True, 0, good)  # the honest form is accepted
    assert task.phase(1) == Phase.AGGREGATING


def test_slashed_and_stale_signers_are_refused(task_factory: Any) -> None:
    s = task_factory(n_aggregators=4)
    task = s.task
    a = s.aggregators
    submitter, _, _ = submit_and_challenge(s)
    old = certificate(s, others(s, submitter), faulty=True)
    task.resolve_certificate(s.owner, old)  # a[0] slashed; a[1] serves attempt 1
    task.submit_aggregate(a[1], 1, dg("attempt-1"))
    task.challenge(a[2], 1)
    # the attempt-0 certificate is stale: refused by attempt, and its signatures do not
    # cover attempt 1
    with pytest.raises(AttemptMismatch):
        task.resolve_certificate(s.owner, old)
    _, _, _, _, old_sigs = old.to_contract_args()
    with pytest.raises(SignerNotMember):
        task.resolve_dispute(s.owner, 1, 1, True, 0, old_sigs)
    # a fresh certificate that counts the slashed a[0]
    signers = by_address([a[0], a[2], a[3]])
    sigs = [sig_of(s, x, 1, 1, dg("attempt-1"), False) for x in signers]
    # (issue 20: the slashed vote is not counted, it no longer voids the certificate)
    with pytest.raises(QuorumNotReached) as info:
        task.resolve_dispute(s.owner, 1, 1, False, 0, sigs)
    assert info.value.error_args == {"signers": 2, "quorum": 3}
    # the three unslashed members still form a quorum (n - f = 3 of the frozen n = 4)
    assert task.commit_quorum() == 3
    task.resolve_certificate(s.owner, certificate(s, a[1:], faulty=False))
    assert task.phase(1) == Phase.SUBMITTED
    assert_accounting(s)


# ----------------------------------------------------------------------------------------
# Gas (numbers also go into the project's report)
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "signers"), [(4, 3), (7, 5), (7, 7)])
def test_dispute_gas(task_factory: Any, n: int, signers: int) -> None:
    s = task_factory(n_aggregators=n, n_clients=4, num_rounds=2)
    task, gas = s.task, s.chain.gas
    assert task.commit_quorum() == commit_quorum(n)

    def signing(submitter: LocalAccount) -> list[LocalAccount]:
        return [*others(s, submitter), submitter][:signers]  # the submitter signs last, if at all

    submitter, _, _ = submit_and_challenge(s)
    task.resolve_certificate(s.owner, certificate(s, signing(submitter), faulty=False))
    s.chain.mine(task.config().challenge_window)
    task.finalize(s.owner, 1)
    submitter, _, _ = submit_and_challenge(s, round_=2)
    task.resolve_certificate(s.owner, certificate(s, signing(submitter), faulty=True))
    upheld, faulty = gas.values("resolveDispute")
    [challenge, _] = gas.values("challenge")
    # 21k base + new storage slots (challenger, challengeBlock: 22.1k; the round's challenger
    # mask, issue 20: 22.1k) + cold reads
    assert challenge < 95_000
    # ~21k tx + ~17k cold round/config reads + a first-time credit slot (22.1k), plus ~8k per
    # signature (ecrecover 3k, a cold member read 2.1k, ~100 bytes of calldata)
    assert upheld < 75_000 + 9_000 * signers
    assert faulty < 75_000 + 9_000 * signers
    print(
        f"\ngas n={n} signatures={signers}: challenge={challenge} "
        f"resolve(upheld)={upheld} resolve(faulty)={faulty}"
    )


# ----------------------------------------------------------------------------------------
# The TaskDisputes module (the dispute path's code, run by DELEGATECALL)
# ----------------------------------------------------------------------------------------


def _created_address(creator: str, nonce: int) -> str:
    """CREATE address of a contract's ``nonce``-th creation (nonce < 128)."""
    from eth_utils.address import to_checksum_address
    from eth_utils.crypto import keccak

    assert 0 < nonce < 0x80
    rlp = b"\xd6\x94" + bytes.fromhex(creator[2:]) + bytes([nonce])
    return to_checksum_address(keccak(rlp)[12:])


def test_disputes_module_refuses_direct_calls(task_factory: Any) -> None:
    """The task's constructor creates TaskDisputes (nonce 1; EquivocationEvidence is deployed
    before the task by its own transaction, EIP-3860). Called directly rather than by the
    task's DELEGATECALL, every state-changing function of the module reverts NotDelegated, so
    its own storage is never written and no ether can reach it; through the task the same
    call works (the dispute tests above)."""
    from eth_utils.crypto import keccak

    from adapters.compile import artifact_path
    from adapters.contract.artifact import load_artifact

    s = task_factory(n_aggregators=4)
    module_address = _created_address(s.task.address, 1)
    artifact = load_artifact(artifact_path("TaskDisputes"))
    # the module's runtime code (immutables filled in place, so of the artifact's length)
    assert len(s.chain.w3.eth.get_code(module_address)) == artifact["deployedSize"]
    module = s.chain.w3.eth.contract(address=module_address, abi=artifact["abi"])
    selector = keccak(text="NotDelegated()")[:4]
    attacker = s.aggregators[0]
    calls = [
        (module.functions.challenge(1), s.task.config().challenge_bond),
        (module.functions.expireDispute(1), 0),
        (module.functions.resolveDispute(1, 0, True, 0, []), 0),
    ]
    for fn, value in calls:
        with pytest.raises(Exception) as info:
            fn.call({"from": attacker.address, "value": value})
        assert repr(selector) in str(info.value)
    assert s.chain.balance(module_address) == 0
