"""Issue 20, item 8: a Byzantine primary plus one crash-restart of a CORRECT replica.

n = 4, f = 1. Member 0 is the Byzantine primary of view 0 (scripted here: it signs whatever
the attack needs); members 1, 2, 3 run the honest state machine. Messages are delivered by
hand, one by one, so each schedule is exactly the one described. Member 1 crashes and restarts
in the middle: a restarted replica must never sign anything that conflicts with what it
signed before it crashed (Castro and Liskov's stable-storage requirement), otherwise

* correct members execute different disputes at one sequence number,
* when the restarted member's re-execution now differs, correct members decide BOTH verdicts
  for one dispute (two valid certificates with opposite verdicts), and
* the Byzantine primary holds two conflicting votes signed by the honest member and gets it
  slashed on-chain for equivocation.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import Any

from eth_account.signers.local import LocalAccount
from eth_utils.crypto import keccak

from consensus.evidence import proof_of
from consensus.memnet import SIM_DOMAIN, simulation_accounts
from consensus.messages import (
    Commit,
    Domain,
    Instance,
    Message,
    Prepare,
    PrePrepare,
    sign,
)
from consensus.pbft import (
    Action,
    Broadcast,
    Decide,
    Evidence,
    Persist,
    Replica,
    ReplicaConfig,
    Send,
)
from consensus.stable_store import MemoryStore

CFG = ReplicaConfig(record_trace=True)


class Hand:
    """Hand-driven delivery among replicas ``1..n-1``; member 0 is a scripted adversary.

    Every message a replica sends waits in ``pending`` until the test delivers it; ``signed``
    keeps everything each member ever signed and sent (what an adversary could collect);
    ``stores`` are the replicas' stable storage (they survive a crash: the store object is
    kept and handed to the restarted replica)."""

    def __init__(
        self, accounts: list[LocalAccount], domain: Domain, verdicts: dict[int, bool]
    ) -> None:
        self.accounts = accounts
        self.domain = domain
        self.committee = [a.address for a in accounts]
        self.verdicts = dict(verdicts)
        self.stores = {i: MemoryStore() for i in range(len(accounts))}
        self.nodes: dict[int, Replica] = {}
        for i in range(1, len(accounts)):
            self.nodes[i] = self._replica(i)
        self.pending: list[tuple[int, int, Message]] = []
        self.signed: dict[int, list[Message]] = {i: [] for i in range(len(accounts))}
        self.decided: dict[int, list[Decide]] = {i: [] for i in range(len(accounts))}

    def _replica(self, i: int) -> Replica:
        def validate(_inst: Instance, i: int = i) -> bool:
            return self.verdicts[i]

        state = self.stores[i].load()
        return Replica(i, self.committee, self.accounts[i], self.domain, validate, CFG, state=state)

    def restart(self, i: int, verdict: bool | None = None) -> None:
        """Crash member ``i`` (its volatile state and undelivered messages are gone) and start
        it again from its stable storage; ``verdict`` is its re-execution from now on."""
        self.pending = [(s, d, m) for s, d, m in self.pending if i not in (s, d)]
        if verdict is not None:
            self.verdicts[i] = verdict
        self.nodes[i] = self._replica(i)

    def apply(self, src: int, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Persist):
                self.stores[src].save(a.state)
            elif isinstance(a, Broadcast):
                self.signed[src].append(a.msg)
                for dst in range(len(self.accounts)):
                    if dst != src:
                        self.pending.append((src, dst, a.msg))
            elif isinstance(a, Send):
                self.signed[src].append(a.msg)
                self.pending.append((src, a.to, a.msg))
            elif isinstance(a, Decide):
                self.decided[src].append(a)

    def start(self, inst: Instance, nodes: list[int]) -> None:
        for i in nodes:
            self.apply(i, self.nodes[i].start(inst))

    def deliver(self, src: int, dst: int, typ: type | None = None) -> None:
        """Deliver every pending message from ``src`` to ``dst`` (of type ``typ``)."""
        keep: list[tuple[int, int, Message]] = []
        todo: list[Message] = []
        for s, d, m in self.pending:
            if s == src and d == dst and (typ is None or isinstance(m, typ)):
                todo.append(m)
            else:
                keep.append((s, d, m))
        self.pending = keep
        for m in todo:
            if dst in self.nodes:
                self.apply(dst, self.nodes[dst].on_message(m))

    def inject(self, dst: int, msg: Message) -> None:
        """The adversary (member 0) sends ``msg`` to ``dst``."""
        self.signed[0].append(msg)
        self.apply(dst, self.nodes[dst].on_message(msg))

    def byz(self, msg: Any) -> Any:
        return sign(msg, self.accounts[0], self.domain)

    def exchange(self, members: list[int], typ: type) -> None:
        for s in members:
            for d in members:
                if s != d:
                    self.deliver(s, d, typ)

    def executed(self, i: int, seq: int) -> tuple[tuple[int, int, bytes], bool] | None:
        for s, key, faulty in self.nodes[i].trace:
            if s == seq:
                return key, faulty
        return None


def dispute(domain: Domain, r: int) -> Instance:
    return Instance(domain.verifying_contract, domain.chain_id, r, 0, keccak(text=f"agg/{r}"))


def vote_for(hand: Hand, members: list[int], inst: Instance, faulty: bool) -> None:
    """The adversary pre-prepares ``(0, 1, inst, faulty)`` to ``members``, then prepares and
    commits the same, and the members' own prepares and commits are exchanged."""
    pp = hand.byz(PrePrepare(0, 1, *inst.key, faulty, 0))
    for m in members:
        hand.inject(m, pp)
    hand.exchange(members, Prepare)
    prep = hand.byz(Prepare(0, 1, *inst.key, faulty, 0))
    for m in members:
        hand.inject(m, prep)
    hand.exchange(members, Commit)
    com = hand.byz(Commit(*inst.key, faulty, 0, 0))
    for m in members:
        hand.inject(m, com)


def slashable_pairs(msgs: list[Message]) -> list[Evidence]:
    """Every pair of messages from one member that the contract slashes as equivocation."""
    out = []
    for a, b in combinations(msgs, 2):
        if isinstance(a, PrePrepare | Prepare | Commit) and type(a) is type(b):
            ev = Evidence("pair", a.sender, a, b)
            if proof_of(ev) is not None:
                out.append(ev)
    return out


def run_two_disputes(
    accounts: list[LocalAccount], domain: Domain
) -> tuple[Hand, Instance, Instance]:
    """The primary proposes D1 at sequence 1 to members 1 and 2, which commit it; member 1
    restarts; then the primary proposes D2 at sequence 1 to members 1 and 3."""
    hand = Hand(accounts, domain, {1: True, 2: True, 3: True})
    d1, d2 = dispute(domain, 1), dispute(domain, 2)
    for inst in (d1, d2):
        hand.start(inst, [1, 2, 3])
    vote_for(hand, [1, 2], d1, True)
    hand.restart(1)
    for inst in (d1, d2):
        hand.start(inst, [1])
    vote_for(hand, [1, 3], d2, True)
    return hand, d1, d2


def test_restarted_replica_never_lets_two_disputes_execute_at_one_sequence() -> None:
    """Byzantine primary + crash-restart of a correct replica: correct replicas must not
    execute different disputes at one sequence number."""
    hand, d1, _d2 = run_two_disputes(simulation_accounts(4), SIM_DOMAIN)
    assert hand.executed(2, 1) == (d1.key, True)  # committed before the crash
    at_one = {hand.executed(i, 1) for i in (1, 2, 3)} - {None}
    assert len(at_one) == 1, f"correct replicas executed different disputes at seq 1: {at_one}"
    assert not slashable_pairs(hand.signed[1])
    # the restarted member remembered seq 1's pre-prepare: the second one is evidence against
    # the primary (and so is its second prepare), never against anyone else
    evidence = {(e.kind, e.sender) for e in hand.nodes[1].evidence}
    assert evidence == {("pre-prepare", 0), ("prepare", 0)}


def test_restarted_replica_never_lets_both_verdicts_be_decided() -> None:
    """Byzantine primary + crash-restart of a correct replica whose re-execution then
    differs: no dispute may get two valid certificates with opposite verdicts."""
    accounts = simulation_accounts(4)
    committee = [a.address for a in accounts]
    hand = Hand(accounts, SIM_DOMAIN, {1: True, 2: True, 3: False})
    d = dispute(SIM_DOMAIN, 1)
    hand.start(d, [1, 2, 3])
    vote_for(hand, [1, 2], d, True)
    assert [x.faulty for x in hand.decided[2]] == [True]
    hand.restart(1, verdict=False)  # e.g. a payload it could not fetch before is there now
    hand.start(d, [1])
    vote_for(hand, [1, 3], d, False)
    decided = {x.faulty for i in (1, 2, 3) for x in hand.decided[i]}
    assert decided == {True}, f"correct replicas decided {decided}"
    # the adversary's view: every commit signed by anyone, any valid certificate for False?
    commits = [m for ms in hand.signed.values() for m in ms if isinstance(m, Commit)]
    against = [c for c in commits if c.key == d.key and not c.faulty and c.view == 0]
    signers = {c.sender for c in against}
    assert len(signers) < 3, "a valid certificate for the opposite verdict exists"
    valid = [
        x.certificate
        for i in (1, 2, 3)
        for x in hand.decided[i]
        if x.certificate.is_valid(committee, SIM_DOMAIN)
    ]
    assert {c.faulty for c in valid} == {True}
    assert not slashable_pairs(hand.signed[1])


def test_byzantine_primary_cannot_get_a_restarted_member_slashed(
    task_factory: Callable[..., Any],
) -> None:
    """Byzantine primary + crash-restart: the primary collects two conflicting votes signed by
    the honest restarted member and slashes it on the real contract (it must find none)."""
    s = task_factory(n_aggregators=4)
    domain = Domain(s.chain.chain_id, s.task.address)
    hand, _d1, _d2 = run_two_disputes(list(s.aggregators), domain)
    honest = s.aggregators[1]
    for ev in slashable_pairs(hand.signed[1]):
        proof = proof_of(ev)
        assert proof is not None
        s.task.slash_equivocation(s.aggregators[0], *proof.contract_args())
    assert not s.task.aggregator_info(honest.address).slashed
