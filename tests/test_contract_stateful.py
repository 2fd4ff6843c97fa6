"""Stateful (hypothesis) test of FedChainTask: submit / challenge / resolve / expire /
slash equivocation / finalize / withdraw / time travel against a Python model of the money and
the round lifecycle.

Every rule predicts from the chain's views whether the contract must accept the transaction,
checks that it did (refusals must be typed custom errors) and mirrors the effect in the model.
After every step the invariants hold:

* the contract balance equals stakes + bonds held + credits owed (the model's stakes and
  credits every step; the chain's own views at teardown), and the on-chain stake, slashed flag
  and credits of every account a step touched equal the model's (all accounts at teardown), so
  every wei is where the protocol says;
* a finalized round never changes (phase, digest; the global model is the last one);
* only the on-chain chosen aggregator's submission counts (a submission by anyone else is
  refused; the round's recorded submitter is the one chosen at that time);
* a certificate with a duplicate, unregistered, slashed or stale signer (or too few signers) is
  refused and changes nothing;
* a dispute is resolved only while block.number <= disputeDeadline and expired only after
  it: expiry discards the aggregate (never finalized), sends both bonds to the treasury and
  re-opens the round at attempt + 1;
* a pair of conflicting signed PBFT votes slashes its signer once (half of the stake to the
  reporter, the rest to the treasury); the slashed member's signatures no longer count.

The committee is honest-majority from the model's point of view: a valid certificate carries
the true verdict (was the disputed aggregate one the model marked faulty?). Faulty submissions
are drawn freely, so more than f members can end up slashed; then no certificate can reach the
quorum any more and the dispute stays open (the documented liveness limit beyond f).

One deployment is made per test session and every example starts from a snapshot of it.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Any

from eth_account.signers.local import LocalAccount
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from adapters.chain import Chain
from adapters.contract import (
    CollectionClosed,
    DisputeTimedOut,
    DuplicateSigner,
    Phase,
    QuorumNotReached,
    RoundNotOpen,
    SignerNotMember,
    TaskConfig,
    TaskContract,
    TaskRevert,
    WrongSigner,
)
from adapters.records import sign_update
from consensus.certificate import verdict_struct_hash
from consensus.evidence import proof_of
from consensus.messages import Commit, Domain, Prepare, PrePrepare, sign, sign_struct
from consensus.pbft import Evidence
from consensus.quorums import commit_quorum
from tests.conftest import DEFAULT_TASK_CONFIG
from tests.test_contract import BURN

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
        "submit_timeout": 4,
        "challenge_window": 4,
        "aggregator_stake": ETHER,
        "aggregate_bond": ETHER // 10,
        "challenge_bond": ETHER // 20,
        "timeout_penalty": ETHER // 2,
        "dispute_timeout": 6,
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
        self.credits[BURN] = 0  # issue 20: penalties and slash remainders are burned
        self.challenged: set[tuple[int, int, str]] = set()  # (round, attempt, member)
        self.slashed: set[str] = set()
        self.equivocators: set[str] = set()  # slashed for equivocation (may hold a submission)
        self.discarded: set[bytes] = set()  # digests whose dispute expired
        self.faulty_digests: set[bytes] = set()
        self.submitter: dict[tuple[int, int], str] = {}  # (round, attempt) -> chosen submitter
        self.finalized: dict[int, bytes] = {}  # round -> finalized digest
        self.quorum = commit_quorum(N_AGGREGATORS)
        self.touched: set[str] = set()  # accounts whose model stake/credit changed this step
        self.registered: dict[int, list[tuple[str, bytes]]] = {}  # round -> (client, digest)

    # -- helpers ---------------------------------------------------------------------------

    def next_block(self) -> int:
        return self.chain.block_number() + 1

    def current(self) -> tuple[int, Any]:
        r = self.task.current_round()
        return r, self.task.round_info(r)

    def current_settled(self) -> tuple[int, Any]:
        """Like :meth:`current`, but if collection closes exactly at the block the next
        transaction executes in (views see the latest block, transactions the next one), mine
        that block first so the lazily derived phase the view shows is the one the contract
        will see."""
        r, info = self.current()
        if (
            info.phase == Phase.COLLECTING
            and info.close_block
            and (self.next_block() >= info.close_block)
        ):
            self.chain.mine(1)
            r, info = self.current()
        return r, info

    def attempt(self, predicted: bool, fn: Any) -> Any:
        """Run ``fn``; it must succeed iff ``predicted`` (refusals are typed custom errors)."""
        try:
            receipt = fn()
        except TaskRevert as exc:
            assert not predicted, f"unexpected refusal {exc}"
            return None
        assert predicted, "the contract accepted what the model refuses"
        return receipt

    def sigs(
        self,
        signers: list[LocalAccount],
        r: int,
        attempt: int,
        digest: bytes,
        faulty: bool,
        view: int = 0,
    ) -> list[bytes]:
        sh = verdict_struct_hash(r, attempt, digest, faulty, view)
        return [sign_struct(a, self.b.domain, sh) for a in signers]

    def add_credit(self, address: str, amount: int) -> None:
        self.credits[address] += amount
        self.touched.add(address)

    def add_stake(self, address: str, amount: int) -> None:
        self.stakes[address] += amount
        self.touched.add(address)

    def live_members(self) -> list[LocalAccount]:
        live = [a for a in self.b.aggregators if a.address not in self.slashed]
        return sorted(live, key=lambda a: int(a.address, 16))

    def phase_in(self, *phases: Phase) -> bool:
        """Rule precondition: the current round's phase (cheap: views are cached per block).
        Steering rules to the phases where they matter makes disputes reachable in 20 steps;
        refusals outside them are covered by tests/test_contract_dispute.py."""
        if self.task.task_completed():
            return False
        return self.task.phase(self.task.current_round()) in phases

    # -- rules -----------------------------------------------------------------------------

    @rule(k=st.sampled_from([1, 2, 5]))
    def time_travel(self, k: int) -> None:
        self.chain.mine(k)

    @precondition(lambda m: m.phase_in(Phase.COLLECTING))
    @rule(i=st.integers(0, N_CLIENTS - 1))
    def submit_update(self, i: int) -> None:
        if self.task.task_completed():
            return
        r, _ = self.current()
        # collection closed / duplicate: refusals are not what this machine is about
        with contextlib.suppress(TaskRevert):
            receipt = self.task.submit_update(self.b.clients[i], r, dg(("update", r, i)), 1 + i)
            self.note_registered(r, receipt)

    @precondition(lambda m: m.phase_in(Phase.COLLECTING))
    @rule(
        picks=st.lists(st.integers(0, N_CLIENTS), min_size=1, max_size=5),
        relayer=st.integers(0, N_AGGREGATORS),
    )
    def submit_batch(self, picks: list[int], relayer: int) -> None:
        """Anyone relays signed records, with duplicates; index N_CLIENTS is an outsider's
        record claiming the last client's index (a forgery)."""
        r, _ = self.current()
        sep = self.task.domain_separator
        records = [
            sign_update(
                self.b.clients[i] if i < N_CLIENTS else self.b.outsider,
                sep,
                min(i, N_CLIENTS - 1),
                r,
                dg(("batch", r, i, len(self.registered.get(r, [])))),
                1 + i,
            )
            for i in picks
        ]
        acct = [self.owner, *self.b.aggregators][relayer]
        try:
            receipt = self.task.submit_updates(acct, r, records)
        except WrongSigner:
            assert N_CLIENTS in picks  # only the forgery is refused
            return
        except (CollectionClosed, RoundNotOpen):
            return
        accepted = self.note_registered(r, receipt)
        assert self.b.outsider.address not in {c for c, _ in accepted}

    def note_registered(self, r: int, receipt: Any) -> list[tuple[str, bytes]]:
        accepted = [(u.client, u.digest) for u in self.task.accepted_updates(receipt)]
        self.registered.setdefault(r, []).extend(accepted)
        return accepted

    @precondition(lambda m: m.phase_in(Phase.COLLECTING, Phase.AGGREGATING, Phase.SUBMITTED))
    @rule(as_chosen=st.booleans(), i=st.integers(0, N_AGGREGATORS - 1), faulty=st.booleans())
    def submit_aggregate(self, as_chosen: bool, i: int, faulty: bool) -> None:
        """The chosen aggregator submits (honestly or not), or some other member intrudes."""
        if self.task.task_completed():
            return
        r, info = self.current_settled()
        acct = self.b.aggregators[i]
        predicted = False
        if info.phase == Phase.AGGREGATING:
            chosen = self.task.current_aggregator()
            if as_chosen and chosen.address is not None:
                acct = next(a for a in self.b.aggregators if a.address == chosen.address)
            predicted = (
                chosen.address == acct.address and self.next_block() <= chosen.deadline_block
            )
        digest = dg(("bad" if faulty else "good", r, info.attempt))
        if self.attempt(predicted, lambda: self.task.submit_aggregate(acct, r, digest)):
            self.submitter[(r, info.attempt)] = acct.address
            if faulty:
                self.faulty_digests.add(digest)

    @precondition(lambda m: m.phase_in(Phase.AGGREGATING, Phase.SUBMITTED))
    @rule()
    def advance_attempt(self) -> None:
        if self.task.task_completed():
            return
        r, info = self.current_settled()
        predicted, laggard = False, None
        if info.phase == Phase.AGGREGATING:
            chosen = self.task.current_aggregator()
            predicted = self.next_block() > chosen.deadline_block
            laggard = chosen.address
        if self.attempt(predicted, lambda: self.task.advance_attempt(self.owner, r)) and laggard:
            penalty = min(CONFIG.timeout_penalty, self.stakes[laggard])
            self.add_stake(laggard, -penalty)
            self.add_credit(BURN, penalty)

    @precondition(lambda m: m.phase_in(Phase.SUBMITTED, Phase.DISPUTED))
    @rule(
        who=st.sampled_from(["other", "other", "other", "submitter", "outsider"]),
        i=st.integers(0, N_AGGREGATORS - 1),
        bad_value=st.booleans(),
    )
    def challenge(self, who: str, i: int, bad_value: bool) -> None:
        """A member other than the submitter challenges (maybe slashed, maybe with the wrong
        value), or the submitter itself, or a non-member."""
        if self.task.task_completed():
            return
        r, info = self.current()
        if who == "outsider":
            acct = self.b.outsider
        elif who == "submitter" and info.aggregator is not None:
            acct = next(a for a in self.b.aggregators if a.address == info.aggregator)
        else:
            candidates = [a for a in self.b.aggregators if a.address != info.aggregator]
            acct = candidates[i % len(candidates)]
        predicted = (
            info.phase == Phase.SUBMITTED
            and self.next_block() <= info.challenge_deadline
            and acct != self.b.outsider
            and acct.address not in self.slashed
            and acct.address != info.aggregator
            and (r, info.submission_attempt, acct.address) not in self.challenged
            and not bad_value
        )
        value = CONFIG.challenge_bond + (1 if bad_value else 0)
        if self.attempt(predicted, lambda: self.task.challenge(acct, r, value=value)):
            self.challenged.add((r, info.submission_attempt, acct.address))
            event("challenge accepted")

    @precondition(lambda m: m.phase_in(Phase.DISPUTED))
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
        in_time = self.next_block() <= info.dispute_deadline
        predicted = disputed and len(signers) >= self.quorum and in_time
        receipt = self.attempt(
            predicted,
            lambda: self.task.resolve_dispute(
                self.owner, r, info.submission_attempt, faulty, view, sigs
            ),
        )
        if receipt is None:
            if disputed and in_time:  # not enough live members left: beyond f, stuck
                assert len(live) < self.quorum
                event("dispute stuck: more than f slashed")
            return
        event(f"resolved: faulty={faulty}")
        challenger = info.challenger
        assert challenger is not None
        if faulty:
            submitter = info.aggregator
            assert submitter is not None
            slashed = self.stakes[submitter] + CONFIG.aggregate_bond
            self.add_stake(submitter, -self.stakes[submitter])
            self.slashed.add(submitter)
            self.add_credit(challenger, CONFIG.challenge_bond + slashed // 2)
            self.add_credit(BURN, slashed - slashed // 2)
            after = self.task.round_info(r)
            assert after.phase == Phase.AGGREGATING and after.attempt == info.attempt + 1
            assert after.attempt_start == receipt["blockNumber"]
        else:
            self.add_credit(BURN, CONFIG.challenge_bond)
            assert self.task.phase(r) == Phase.SUBMITTED

    @precondition(lambda m: m.phase_in(Phase.DISPUTED))
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
            sigs, error = (
                self.sigs(live[: self.quorum - 1], r, attempt, digest, faulty),
                (QuorumNotReached,),
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
            # the slashed ones do not count (issue 20: nor do they void the rest): one live
            # signer short of the quorum
            slashed = [a for a in members if a.address in self.slashed]
            signers = sorted([*slashed, *live[: self.quorum - 1]], key=lambda a: int(a.address, 16))
            sigs, error = self.sigs(signers, r, attempt, digest, faulty), (QuorumNotReached,)
        else:  # stale: signed for an earlier attempt, or an earlier view's opposite verdict
            stale_attempt = attempt - 1 if attempt > 0 else attempt + 1
            sigs = self.sigs(live[: self.quorum], r, stale_attempt, digest, faulty)
            error = (SignerNotMember, QuorumNotReached)
        if len(live) < self.quorum - 1:
            # more than f slashed: even the live signers plus the bad one fall short, and the
            # contract may say so first
            error = (*error, QuorumNotReached)
        if self.next_block() > info.dispute_deadline:
            error = (*error, DisputeTimedOut)
        before = (self.task.balance(), self.task.round_info(r))
        try:
            self.task.resolve_dispute(self.owner, r, attempt, faulty, 0, sigs)
        except error:
            event(f"refused certificate: {kind}")
        else:
            raise AssertionError(f"{kind} certificate accepted")
        assert (self.task.balance(), self.task.round_info(r)) == before

    @precondition(lambda m: m.phase_in(Phase.SUBMITTED, Phase.DISPUTED))
    @rule()
    def expire(self) -> None:
        """Anyone expires the open dispute; accepted iff its deadline has passed."""
        if self.task.task_completed():
            return
        r, info = self.current()
        disputed = info.phase == Phase.DISPUTED
        predicted = disputed and self.next_block() > info.dispute_deadline
        receipt = self.attempt(predicted, lambda: self.task.expire_dispute(self.owner, r))
        if receipt is None:
            return
        event("dispute expired")
        assert info.aggregator is not None
        self.add_credit(info.aggregator, CONFIG.aggregate_bond)  # nothing proven: refunded
        self.add_credit(BURN, CONFIG.challenge_bond)
        self.discarded.add(info.aggregate_digest)
        after = self.task.round_info(r)
        assert after.phase == Phase.AGGREGATING and after.attempt == info.attempt + 1
        assert after.attempt_start == receipt["blockNumber"] and after.challenger is None

    @rule(
        i=st.integers(0, N_AGGREGATORS - 1),
        kind=st.sampled_from(["pre-prepare", "prepare", "commit", "not-conflicting"]),
        reporter=st.integers(0, N_AGGREGATORS),
    )
    def equivocate(self, i: int, kind: str, reporter: int) -> None:
        """Member ``i`` is caught signing two conflicting votes (or a harmless pair)."""
        liar, by = self.b.aggregators[i], self.accounts[reporter]
        dom = self.b.domain
        a: Any
        if kind in ("commit", "not-conflicting"):
            a = Commit(1, 0, dg("x"), True, 3, i)
            b = a if kind == "not-conflicting" else Commit(1, 0, dg("x"), False, 3, i)
        else:
            cls = PrePrepare if kind == "pre-prepare" else Prepare
            a, b = cls(3, 7, 1, 0, dg("x"), True, i), cls(3, 7, 1, 0, dg("y"), True, i)
        ev = Evidence(kind, i, sign(a, liar, dom), sign(b, liar, dom))
        proof = proof_of(ev)
        if proof is None:  # not slashable: the contract refuses the pair too
            assert kind == "not-conflicting"
            vote = (1, 0, dg("x"), True, ev.first.signature)
            self.attempt(False, lambda: self.task.slash_equivocation(by, 2, 3, 0, vote, vote))
            return
        predicted = liar.address not in self.slashed
        receipt = self.attempt(
            predicted, lambda: self.task.slash_equivocation(by, *proof.contract_args())
        )
        if receipt is None:
            return
        event("equivocation slashed")
        amount = self.stakes[liar.address]
        self.add_stake(liar.address, -amount)
        self.slashed.add(liar.address)
        self.equivocators.add(liar.address)
        self.add_credit(by.address, amount // 2)
        self.add_credit(BURN, amount - amount // 2)

    @precondition(lambda m: m.phase_in(Phase.SUBMITTED, Phase.DISPUTED))
    @rule()
    def finalize(self) -> None:
        if self.task.task_completed():
            return
        r, info = self.current()
        predicted = info.phase == Phase.SUBMITTED and self.next_block() > info.challenge_deadline
        if self.attempt(predicted, lambda: self.task.finalize(self.owner, r)):
            assert info.aggregator is not None
            assert info.aggregate_digest not in self.discarded
            self.add_credit(info.aggregator, CONFIG.aggregate_bond)
            self.finalized[r] = info.aggregate_digest
            event("finalized")

    @rule(i=st.integers(0, N_AGGREGATORS))
    def withdraw(self, i: int) -> None:
        acct = self.accounts[i]
        if self.attempt(self.credits[acct.address] > 0, lambda: self.task.withdraw(acct)):
            self.add_credit(acct.address, -self.credits[acct.address])

    @rule(i=st.integers(0, N_AGGREGATORS - 1))
    def top_up(self, i: int) -> None:
        acct = self.b.aggregators[i]
        amount = CONFIG.timeout_penalty
        predicted = acct.address not in self.slashed
        if self.attempt(predicted, lambda: self.task.top_up_stake(acct, amount)):
            self.add_stake(acct.address, amount)

    @rule(
        faulty=st.booleans(),
        i=st.integers(0, N_AGGREGATORS - 1),
        kind=st.sampled_from(
            [
                "valid",
                "valid",
                "valid",
                "timeout",
                "too_few",
                "duplicate",
                "unregistered",
                "slashed",
                "stale",
            ]
        ),
        view=st.integers(0, 2),
        contest=st.booleans(),
        finish=st.booleans(),
    )
    def dispute_episode(
        self, faulty: bool, i: int, kind: str, view: int, contest: bool, finish: bool
    ) -> None:
        """Drive the current round as far as it goes through collect -> submit (by the chosen
        aggregator) -> challenge (if ``contest``) -> resolve -> finalize after the window (if
        ``finish``), checking every step like the single rules do.

        Hypothesis' swarm testing disables random subsets of rules per example, so without
        this composite a full dispute would rarely fit into 20 steps."""
        if self.task.task_completed():
            return
        _, info = self.current()
        if info.phase == Phase.COLLECTING:
            for c in range(N_CLIENTS):
                self.submit_update(c)
            _, info = self.current()
            if info.close_block:
                self.chain.mine_to(info.close_block)
                _, info = self.current()
        if info.phase == Phase.AGGREGATING:
            self.submit_aggregate(True, 0, faulty)
            _, info = self.current()
        if info.phase == Phase.SUBMITTED and contest:
            self.challenge("other", i, False)
            _, info = self.current()
        if info.phase == Phase.DISPUTED:
            if kind == "valid":
                self.resolve_valid(0, view)
            elif kind == "timeout":
                self.chain.mine_to(info.dispute_deadline)
                self.resolve_valid(0, view)  # one block late: refused
                self.expire()
            else:
                self.resolve_invalid(kind)
            _, info = self.current()
        if info.phase == Phase.SUBMITTED and finish:
            self.chain.mine_to(info.challenge_deadline)
            self.finalize()

    # -- invariants ------------------------------------------------------------------------

    def check_accounts(self, addresses: set[str]) -> None:
        """On-chain stake / slashed flag / credits of ``addresses`` equal the model's."""
        for address in addresses:
            if address in self.stakes:
                agg = self.task.aggregator_info(address)
                assert agg.stake == self.stakes[address]
                assert agg.slashed == (address in self.slashed)
            assert self.task.credits(address) == self.credits[address]

    @invariant()
    def money_is_where_the_model_says(self) -> None:
        """balance == stakes + bonds held + credits, with the model's stakes and credits, and
        every account the last step touched matches the chain (all of them at teardown; a
        view costs ~5 ms on eth-tester, so checking all nine every step would triple the
        runtime)."""
        _, info = self.current()
        held = 0
        if info.phase in (Phase.SUBMITTED, Phase.DISPUTED):
            held += CONFIG.aggregate_bond
        if info.phase == Phase.DISPUTED:
            held += CONFIG.challenge_bond
        self.check_accounts(self.touched)
        self.touched.clear()
        total = sum(self.stakes.values()) + held + sum(self.credits.values())
        assert self.task.balance() == total

    def teardown(self) -> None:
        for r, digest in self.finalized.items():
            assert self.task.round_digest(r) == digest
        self.check_accounts({a.address for a in self.accounts} | {BURN})
        stakes = sum(self.task.aggregator_info(a.address).stake for a in self.b.aggregators)
        credits = sum(self.task.credits(a.address) for a in self.accounts) + self.task.credits(BURN)
        _, info = self.current()
        held = 0
        if info.phase in (Phase.SUBMITTED, Phase.DISPUTED):
            held += CONFIG.aggregate_bond
        if info.phase == Phase.DISPUTED:
            held += CONFIG.challenge_bond
        assert self.task.balance() == stakes + held + credits  # from the chain's own views

    @invariant()
    def update_lists_match_the_model(self) -> None:
        """Every round's list, rebuilt from events and checked against the accumulator, is
        what the receipts registered: at most one update per client, at most maxUpdates."""
        for r, expected in self.registered.items():
            ups = self.task.updates(r)
            assert [(u.client, u.digest) for u in ups] == expected
            assert len({u.client for u in ups}) == len(ups) <= CONFIG.max_updates

    @invariant()
    def finalized_rounds_never_change(self) -> None:
        for r, digest in self.finalized.items():
            info = self.task.round_info(r)
            assert info.phase == Phase.FINALIZED and info.finalized
            assert info.aggregate_digest == digest
        if self.finalized:  # the global model is the last finalized aggregate
            assert self.task.global_model_digest() == self.finalized[max(self.finalized)]

    @invariant()
    def only_the_chosen_submission_counts(self) -> None:
        r, info = self.current()
        if info.phase in (Phase.SUBMITTED, Phase.DISPUTED) or (
            info.phase == Phase.FINALIZED and r in self.finalized
        ):
            assert info.aggregator == self.submitter[(r, info.submission_attempt)]
            assert (
                info.aggregator not in self.slashed
                or info.aggregator in self.equivocators
                or info.phase == Phase.FINALIZED
            )
        if info.phase == Phase.DISPUTED:
            assert info.challenger is not None and info.challenger != info.aggregator
        else:
            assert info.challenger is None


class TestTaskMachine(TaskMachine.TestCase):  # type: ignore[name-defined,misc]
    @classmethod
    def setUpClass(cls) -> None:
        # deploy once, outside hypothesis: importing py-evm raises the recursion limit, which
        # hypothesis would otherwise warn about when it happens inside a test
        base()


# derandomize: CI explores the same 15 programs every run, so a red run is reproducible and
# never the luck of a seed; wider exploration runs by hand with --hypothesis-seed and more
# examples (three seeds of 60 programs each passed when this was set).
TestTaskMachine.settings = settings(
    max_examples=15,
    derandomize=True,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
