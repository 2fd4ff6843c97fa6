"""Stateful (hypothesis) test of FedChainTask: submit / challenge / resolve / finalize /
withdraw / time travel against a Python model of the money and the round lifecycle.

Every rule predicts from the chain's views whether the contract must accept the transaction,
checks that it did (refusals must be typed custom errors) and mirrors the effect in the model.
After every step the invariants hold:

* the contract balance equals stakes + bonds held + credits owed, and stakes and credits equal
  the model's (so every wei is where the protocol says);
* a finalized round never changes (digest, phase, and the global model at that point);
* only the on-chain chosen aggregator's submission counts (a submission by anyone else is
  refused; the round's recorded submitter is the one chosen at that time);
* a certificate with a duplicate, unregistered, slashed or stale signer (or too few signers) is
  refused and changes nothing.

The committee is honest-majority from the model's point of view: a valid certificate carries
the true verdict (was the disputed aggregate one the model marked faulty?). Faulty submissions
are drawn freely, so more than f members can end up slashed; then no certificate can reach the
quorum any more and the dispute stays open (the documented liveness limit beyond f).

One deployment is made per test session and every example starts from a snapshot of it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from eth_account.signers.local import LocalAccount
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from consensus.certificate import verdict_struct_hash
from consensus.messages import Domain, sign_struct
from consensus.quorums import commit_quorum
from fedchain.chain import Chain
from fedchain.contract import (
    DuplicateSigner,
    Phase,
    QuorumNotReached,
    SignerNotMember,
    SignerSlashed,
    TaskConfig,
    TaskContract,
    TaskRevert,
)
from tests.conftest import DEFAULT_TASK_CONFIG

ETHER = 10**18
N_AGGREGATORS = 4
N_CLIENTS = 3
CONFIG = TaskConfig(
    **{
        **DEFAULT_TASK_CONFIG,
        "num_rounds": 3,
        "min_updates": 1,
        "max_updates": 2,
        "collect_window": 2,
        "submit_timeout": 2,
        "challenge_window": 3,
        "aggregator_stake": ETHER,
        "aggregate_bond": ETHER // 10,
        "challenge_bond": ETHER // 20,
        "timeout_penalty": ETHER // 2,
    }
)


def dg(label: object) -> bytes:
    return hashlib.sha256(repr(label).encode()).digest()


@dataclass
class Base:
    """The session's deployment and the snapshot every example starts from."""

    chain: Chain
    task: TaskContract
    owner: LocalAccount
    aggregators: list[LocalAccount]
    clients: list[LocalAccount]
    outsider: LocalAccount
    snapshot: Any = None
    domain: Domain = field(init=False)

    def __post_init__(self) -> None:
        self.domain = Domain(self.chain.chain_id, self.task.address)


_BASE: Base | None = None


def base() -> Base:
    global _BASE
    if _BASE is None:
        chain = Chain.embedded(num_accounts=1 + N_AGGREGATORS + N_CLIENTS + 1)
        owner, *rest = chain.accounts
        aggs, clients = rest[:N_AGGREGATORS], rest[N_AGGREGATORS : N_AGGREGATORS + N_CLIENTS]
        task = TaskContract.deploy(chain, owner, CONFIG)
        for a in aggs:
            task.register_aggregator(a)
        for c in clients:
            task.register_client(c)
        task.start(owner)
        _BASE = Base(chain, task, owner, aggs, clients, rest[-1])
        _BASE.snapshot = chain.snapshot()
    return _BASE


class TaskMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        b = base()
        b.chain.revert(b.snapshot)
        self.b, self.chain, self.task = b, b.chain, b.task
        self.owner = b.owner
        self.accounts = [b.owner, *b.aggregators]  # everyone who can be owed money
        # model
        self.stakes = {a.address: CONFIG.aggregator_stake for a in b.aggregators}
        self.credits = {a.address: 0 for a in self.accounts}
        self.slashed: set[str] = set()
        self.faulty_digests: set[bytes] = set()
        self.submitter: dict[tuple[int, int], str] = {}  # (round, attempt) -> chosen submitter
        self.finalized: dict[int, tuple[bytes, bytes]] = {}  # round -> (digest, global after)
        self.quorum = commit_quorum(N_AGGREGATORS)

    # -- helpers ---------------------------------------------------------------------------

    def next_block(self) -> int:
        return self.chain.block_number() + 1

    def current(self) -> tuple[int, Any]:
        r = self.task.current_round()
        return r, self.task.round_info(r)

    def attempt(self, predicted: bool, fn: Any) -> Any:
        """Run ``fn``; it must succeed iff ``predicted`` (refusals are typed custom errors)."""
        try:
            receipt = fn()
        except TaskRevert as exc:
            assert not predicted, f"unexpected refusal {exc}"
            return None
        assert predicted, "the contract accepted what the model refuses"
        return receipt

    def sigs(self, signers: list[LocalAccount], r: int, attempt: int, digest: bytes,
             faulty: bool, view: int = 0) -> list[bytes]:
        sh = verdict_struct_hash(r, attempt, digest, faulty, view)
        return [sign_struct(a, self.b.domain, sh) for a in signers]

    def live_members(self) -> list[LocalAccount]:
        live = [a for a in self.b.aggregators if a.address not in self.slashed]
        return sorted(live, key=lambda a: int(a.address, 16))

    # -- rules -----------------------------------------------------------------------------

    @rule(k=st.integers(0, 5))
    def time_travel(self, k: int) -> None:
        self.chain.mine(k)

    @rule(i=st.integers(0, N_CLIENTS - 1))
    def submit_update(self, i: int) -> None:
        if self.task.task_completed():
            return
        r, _ = self.current()
        try:
            self.task.submit_update(self.b.clients[i], r, dg(("update", r, i)), 1 + i)
        except TaskRevert:
            pass  # collection closed / duplicate: not what this machine is about

    @rule(i=st.integers(0, N_AGGREGATORS - 1), faulty=st.booleans())
    def submit_aggregate(self, i: int, faulty: bool) -> None:
        if self.task.task_completed():
            return
        r, info = self.current()
        acct = self.b.aggregators[i]
        predicted = False
        if info.phase == Phase.AGGREGATING:
            chosen = self.task.current_aggregator()
            predicted = chosen.address == acct.address and self.next_block() <= chosen.deadline_block
        digest = dg(("bad" if faulty else "good", r, info.attempt))
        if self.attempt(predicted, lambda: self.task.submit_aggregate(acct, r, digest)):
            self.submitter[(r, info.attempt)] = acct.address
            if faulty:
                self.faulty_digests.add(digest)

    @rule()
    def advance_attempt(self) -> None:
        if self.task.task_completed():
            return
        r, info = self.current()
        predicted, laggard = False, None
        if info.phase == Phase.AGGREGATING:
            chosen = self.task.current_aggregator()
            predicted = self.next_block() > chosen.deadline_block
            laggard = chosen.address
        if self.attempt(predicted, lambda: self.task.advance_attempt(self.owner, r)) and laggard:
            penalty = min(CONFIG.timeout_penalty, self.stakes[laggard])
            self.stakes[laggard] -= penalty
            self.credits[self.owner.address] += penalty

    @rule(i=st.integers(0, N_AGGREGATORS), bad_value=st.booleans())
    def challenge(self, i: int, bad_value: bool) -> None:
        if self.task.task_completed():
            return
        r, info = self.current()
        acct = self.b.aggregators[i] if i < N_AGGREGATORS else self.b.outsider
        predicted = (
            info.phase == Phase.SUBMITTED
            and self.next_block() <= info.challenge_deadline
            and i < N_AGGREGATORS
            and acct.address not in self.slashed
            and acct.address != info.aggregator
            and not bad_value
        )
        value = CONFIG.challenge_bond + (1 if bad_value else 0)
        self.attempt(predicted, lambda: self.task.challenge(acct, r, value=value))

    @rule(extra=st.integers(0, 1), view=st.integers(0, 2))
    def resolve_valid(self, extra: int, view: int) -> None:
        """An honest committee's certificate: the true verdict, >= quorum live signers."""
        if self.task.task_completed():
            return
        r, info = self.current()
        live = self.live_members()
        signers = live[: self.quorum + extra]
        disputed = info.phase == Phase.DISPUTED
        faulty = info.aggregate_digest in self.faulty_digests
        sigs = self.sigs(signers, r, info.submission_attempt, info.aggregate_digest, faulty, view)
        predicted = disputed and len(signers) >= self.quorum
        receipt = self.attempt(
            predicted,
            lambda: self.task.resolve_dispute(
                self.owner, r, info.submission_attempt, faulty, view, sigs
            ),
        )
        if receipt is None:
            if disputed:  # not enough live members left: beyond f, the dispute is stuck
                assert len(live) < self.quorum
            return
        challenger = info.challenger
        assert challenger is not None
        if faulty:
            submitter = info.aggregator
            assert submitter is not None
            slashed = self.stakes[submitter] + CONFIG.aggregate_bond
            self.stakes[submitter] = 0
            self.slashed.add(submitter)
            self.credits[challenger] += CONFIG.challenge_bond + slashed // 2
            self.credits[self.owner.address] += slashed - slashed // 2
            after = self.task.round_info(r)
            assert after.phase == Phase.AGGREGATING and after.attempt == info.attempt + 1
            assert after.attempt_start == receipt["blockNumber"]
        else:
            self.credits[self.owner.address] += CONFIG.challenge_bond
            assert self.task.phase(r) == Phase.SUBMITTED

    @rule(kind=st.sampled_from(["too_few", "duplicate", "unregistered", "slashed", "stale"]))
    def resolve_invalid(self, kind: str) -> None:
        """Certificates with a bad signer set are refused and change nothing."""
        r, info = self.current()
        if info.phase != Phase.DISPUTED:
            return
        attempt, digest = info.submission_attempt, info.aggregate_digest
        faulty = digest in self.faulty_digests
        live = self.live_members()
        members = sorted(self.b.aggregators, key=lambda a: int(a.address, 16))
        if kind == "too_few":
            sigs, error = self.sigs(live[: self.quorum - 1], r, attempt, digest, faulty), (
                QuorumNotReached,
            )
        elif kind == "duplicate":
            signers = live[: self.quorum - 1]
            if not signers:
                return
            signers = [*signers, signers[-1]]
            sigs, error = self.sigs(signers, r, attempt, digest, faulty), (DuplicateSigner,)
        elif kind == "unregistered":
            signers = [*live[: self.quorum - 1], self.b.outsider]
            sigs, error = self.sigs(signers, r, attempt, digest, faulty), (SignerNotMember,)
        elif kind == "slashed":
            if not self.slashed:
                return
            signers = members[: max(self.quorum, len(members))]  # includes the slashed ones
            sigs, error = self.sigs(signers, r, attempt, digest, faulty), (SignerSlashed,)
        else:  # stale: signed for an earlier attempt, or an earlier view's opposite verdict
            stale_attempt = attempt - 1 if attempt > 0 else attempt + 1
            sigs = self.sigs(live[: self.quorum], r, stale_attempt, digest, faulty)
            error = (SignerNotMember, QuorumNotReached)
        before = (self.task.balance(), self.task.round_info(r))
        try:
            self.task.resolve_dispute(self.owner, r, attempt, faulty, 0, sigs)
        except error:
            pass
        else:
            raise AssertionError(f"{kind} certificate accepted")
        assert (self.task.balance(), self.task.round_info(r)) == before

    @rule()
    def finalize(self) -> None:
        if self.task.task_completed():
            return
        r, info = self.current()
        predicted = info.phase == Phase.SUBMITTED and self.next_block() > info.challenge_deadline
        if self.attempt(predicted, lambda: self.task.finalize(self.owner, r)):
            assert info.aggregator is not None
            self.credits[info.aggregator] += CONFIG.aggregate_bond
            self.finalized[r] = (info.aggregate_digest, info.aggregate_digest)

    @rule(i=st.integers(0, N_AGGREGATORS))
    def withdraw(self, i: int) -> None:
        acct = self.accounts[i]
        if self.attempt(self.credits[acct.address] > 0, lambda: self.task.withdraw(acct)):
            self.credits[acct.address] = 0

    @rule(i=st.integers(0, N_AGGREGATORS - 1))
    def top_up(self, i: int) -> None:
        acct = self.b.aggregators[i]
        amount = CONFIG.timeout_penalty
        predicted = acct.address not in self.slashed
        if self.attempt(predicted, lambda: self.task.top_up_stake(acct, amount)):
            self.stakes[acct.address] += amount

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def money_is_where_the_model_says(self) -> None:
        task = self.task
        r, info = self.current()
        held = 0
        if info.phase in (Phase.SUBMITTED, Phase.DISPUTED):
            held += CONFIG.aggregate_bond
        if info.phase == Phase.DISPUTED:
            held += CONFIG.challenge_bond
        for a in self.b.aggregators:
            agg = task.aggregator_info(a.address)
            assert agg.stake == self.stakes[a.address]
            assert agg.slashed == (a.address in self.slashed)
        for a in self.accounts:
            assert task.credits(a.address) == self.credits[a.address]
        assert task.balance() == sum(self.stakes.values()) + held + sum(self.credits.values())

    @invariant()
    def finalized_rounds_never_change(self) -> None:
        for r, (digest, _) in self.finalized.items():
            assert self.task.round_digest(r) == digest
            assert self.task.phase(r) == Phase.FINALIZED
        if self.finalized:
            last = max(self.finalized)
            if self.task.task_completed() or self.task.current_round() == last + 1:
                assert self.task.global_model_digest() == self.finalized[last][0]

    @invariant()
    def only_the_chosen_submission_counts(self) -> None:
        r, info = self.current()
        if info.phase in (Phase.SUBMITTED, Phase.DISPUTED) or (
            info.phase == Phase.FINALIZED and r in self.finalized
        ):
            assert info.aggregator == self.submitter[(r, info.submission_attempt)]
            assert info.aggregator not in self.slashed or info.phase == Phase.FINALIZED
        if info.phase == Phase.DISPUTED:
            assert info.challenger is not None and info.challenger != info.aggregator
        else:
            assert info.challenger is None


TestTaskMachine = TaskMachine.TestCase
TestTaskMachine.settings = settings(
    max_examples=12,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
