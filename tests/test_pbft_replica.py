"""The PBFT state machine driven directly: phases, duplicates, equivocation, signatures,
timers and back-off, view change, checkpoints and garbage collection, state transfer."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import replace

import pytest
from eth_account import Account
from eth_utils import keccak

from consensus import messages as M
from consensus.certificate import CommitCertificate
from consensus.memnet import SIM_DOMAIN, MemNet, NetConfig, Partition, simulation_accounts
from consensus.pbft import (
    Action,
    Broadcast,
    CancelTimer,
    Decide,
    Replica,
    ReplicaConfig,
    Send,
    SetTimer,
    SilentReplica,
    compute_new_view,
)
from consensus.quorums import commit_quorum
from protocol.errors import ConsensusError

ACCOUNTS = simulation_accounts(7)
OUTSIDER = Account.from_key(keccak(text="outsider"))
CFG = ReplicaConfig(
    checkpoint_interval=2,
    log_window=4,
    request_timeout=10.0,
    view_change_timeout=10.0,
    retransmit_interval=7.0,
    max_backoff_exponent=3,
    record_trace=True,
)


def inst(r: int, attempt: int = 0) -> M.Instance:
    return M.Instance(
        SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, r, attempt, keccak(text=f"agg{r}")
    )


def faulty_if_odd(i: M.Instance) -> bool:
    return i.round % 2 == 1


def make(
    n: int = 4, validate: Callable[[M.Instance], bool] = faulty_if_odd, cfg: ReplicaConfig = CFG
) -> list[Replica]:
    committee = [a.address for a in ACCOUNTS[:n]]
    return [Replica(i, committee, ACCOUNTS[i], SIM_DOMAIN, validate, cfg) for i in range(n)]


def msgs(actions: list[Action], typ: type | None = None) -> list[M.Message]:
    out = [a.msg for a in actions if isinstance(a, (Broadcast, Send))]
    return [m for m in out if typ is None or isinstance(m, typ)]


def timers(actions: list[Action]) -> dict[str, float]:
    return {a.timer_id.split(":")[0]: a.delay for a in actions if isinstance(a, SetTimer)}


class Router:
    """Synchronous FIFO delivery among replicas (no loss); timers are fired by hand."""

    def __init__(self, nodes: list[Replica], down: set[int] | None = None) -> None:
        self.nodes = nodes
        self.down = down or set()
        self.queue: deque[tuple[int, M.Message]] = deque()
        self.decided: dict[int, dict[M.Instance, Decide]] = {i: {} for i in range(len(nodes))}
        self.timers: dict[int, dict[str, str]] = {i: {} for i in range(len(nodes))}

    def apply(self, src: int, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Broadcast):
                self.queue.extend((d, a.msg) for d in range(len(self.nodes)) if d != src)
            elif isinstance(a, Send):
                self.queue.append((a.to, a.msg))
            elif isinstance(a, SetTimer):
                self.timers[src][a.timer_id.split(":")[0]] = a.timer_id
            elif isinstance(a, CancelTimer):
                purpose = a.timer_id.split(":")[0]
                if self.timers[src].get(purpose) == a.timer_id:
                    del self.timers[src][purpose]
            elif isinstance(a, Decide):
                self.decided[src].setdefault(a.instance, a)

    def start(self, instance: M.Instance) -> None:
        for i, r in enumerate(self.nodes):
            if i not in self.down:
                self.apply(i, r.start(instance))
        self.run()

    def run(self, limit: int = 100_000) -> None:
        while self.queue and limit:
            limit -= 1
            dst, m = self.queue.popleft()
            if dst not in self.down:
                self.apply(dst, self.nodes[dst].on_message(m))

    def fire(self, purpose: str, nodes: list[int] | None = None) -> None:
        for i in nodes if nodes is not None else range(len(self.nodes)):
            tid = self.timers[i].pop(purpose, None)
            if tid is not None and i not in self.down:
                self.apply(i, self.nodes[i].on_timer(tid))
        self.run()


# ---- construction --------------------------------------------------------------------------


def test_constructor_checks() -> None:
    committee = [a.address for a in ACCOUNTS[:4]]
    with pytest.raises(ConsensusError, match="not the committee member"):
        Replica(1, committee, ACCOUNTS[0], SIM_DOMAIN, faulty_if_odd)
    with pytest.raises(ConsensusError, match="duplicates"):
        Replica(0, [*committee, committee[0]], ACCOUNTS[0], SIM_DOMAIN, faulty_if_odd)
    with pytest.raises(ConsensusError, match="outside"):
        Replica(4, committee, ACCOUNTS[0], SIM_DOMAIN, faulty_if_odd)
    with pytest.raises(ConsensusError):
        ReplicaConfig(checkpoint_interval=4, log_window=2)
    r = make()[0]
    with pytest.raises(ConsensusError, match="another task"):
        r.start(M.Instance("0x" + "12" * 20, SIM_DOMAIN.chain_id, 1, 0, b"\x00" * 32))


# ---- normal case ---------------------------------------------------------------------------


def test_normal_case_commits_with_a_valid_certificate() -> None:
    nodes = make()
    primary_actions = nodes[0].start(inst(1))
    pp = msgs(primary_actions, M.PrePrepare)
    assert len(pp) == 1 and pp[0].faulty is True and (pp[0].view, pp[0].seq) == (0, 1)
    assert len(msgs(primary_actions, M.Prepare)) == 1  # the primary prepares its own proposal
    assert {"request", "retransmit"} <= set(timers(primary_actions))
    router = Router(nodes)
    router.apply(0, primary_actions)
    router.start(inst(1))
    for i in range(4):
        d = router.decided[i][inst(1)]
        assert d.faulty is True and d.seq == 1
        d.certificate.verify(nodes[0].committee, SIM_DOMAIN, instance=inst(1))
        assert nodes[i].decision(inst(1).key) == (True, d.certificate)
        assert nodes[i].pending == ()


def test_backup_votes_only_for_its_own_verdict() -> None:
    nodes = make()
    backup = nodes[1]
    pp = M.sign(M.PrePrepare(0, 1, *inst(1).key, False, 0), ACCOUNTS[0], SIM_DOMAIN)
    backup.start(inst(1))  # its own verdict: faulty
    out = backup.on_message(pp)
    assert msgs(out, M.Prepare) == []
    assert backup.stats["disagreements"] == 1
    assert "request" in backup._timers  # it will ask for a view change


def test_preprepare_for_unseen_dispute_waits_for_start() -> None:
    backup = make()[1]
    pp = M.sign(M.PrePrepare(0, 1, *inst(1).key, True, 0), ACCOUNTS[0], SIM_DOMAIN)
    assert msgs(backup.on_message(pp), M.Prepare) == []
    prepares = msgs(backup.start(inst(1)), M.Prepare)
    assert len(prepares) == 1 and prepares[0].content == pp.content


def test_validate_failure_abstains_and_retries() -> None:
    calls = []

    def flaky(i: M.Instance) -> bool:
        calls.append(i)
        if len(calls) == 1:
            raise RuntimeError("payload unavailable")
        return True

    backup = make(validate=flaky)[1]
    pp = M.sign(M.PrePrepare(0, 1, *inst(1).key, True, 0), ACCOUNTS[0], SIM_DOMAIN)
    backup.start(inst(1))
    out = backup.on_message(pp)
    assert len(msgs(out, M.Prepare)) == 1 and len(calls) == 2


def test_one_dispute_in_flight() -> None:
    primary = make()[0]
    out = primary.start(inst(1)) + primary.start(inst(2))
    assert [m.seq for m in msgs(out, M.PrePrepare)] == [1]


# ---- authentication, duplicates, equivocation ----------------------------------------------


def test_bad_signatures_and_non_members_are_dropped() -> None:
    backup = make()[1]
    backup.start(inst(1))
    key = inst(1).key
    forged = M.sign(M.PrePrepare(0, 1, *key, True, 0), ACCOUNTS[2], SIM_DOMAIN)  # claims 0
    outsider = M.sign(M.Prepare(0, 1, *key, True, 2), OUTSIDER, SIM_DOMAIN)
    wrong_domain = M.sign(
        M.PrePrepare(0, 1, *key, True, 0), ACCOUNTS[0], M.Domain(1, SIM_DOMAIN.verifying_contract)
    )
    not_primary = M.sign(M.PrePrepare(0, 1, *key, True, 2), ACCOUNTS[2], SIM_DOMAIN)
    unsigned = M.PrePrepare(0, 1, *key, True, 0)
    for m in (forged, outsider, wrong_domain, not_primary, unsigned, replace(outsider, sender=99)):
        assert backup.on_message(m) == [] or not msgs(backup.on_message(m), M.Prepare)
    assert backup.stats["rejected"] >= 6
    assert backup._slots.get(1) is None or backup._slots[1].pre_prepare is None


def test_exact_duplicates_are_ignored() -> None:
    backup = make()[1]
    backup.start(inst(1))
    pp = M.sign(M.PrePrepare(0, 1, *inst(1).key, True, 0), ACCOUNTS[0], SIM_DOMAIN)
    p2 = M.sign(M.Prepare(0, 1, *inst(1).key, True, 2), ACCOUNTS[2], SIM_DOMAIN)
    first = backup.on_message(pp) + backup.on_message(p2)
    assert len(msgs(first, M.Prepare)) == 1
    assert msgs(backup.on_message(pp)) == [] and msgs(backup.on_message(p2)) == []
    assert backup.stats["duplicates"] == 2
    assert len(backup._slots[1].prepares) == 2


def test_equivocation_is_recorded_and_the_later_message_ignored() -> None:
    backup = make()[1]
    backup.start(inst(1))
    key = inst(1).key
    pp_a = M.sign(M.PrePrepare(0, 1, *key, True, 0), ACCOUNTS[0], SIM_DOMAIN)
    pp_b = M.sign(M.PrePrepare(0, 1, *key, False, 0), ACCOUNTS[0], SIM_DOMAIN)
    backup.on_message(pp_a)
    assert msgs(backup.on_message(pp_b)) == []
    assert backup._slots[1].pre_prepare == pp_a
    p_a = M.sign(M.Prepare(0, 1, *key, True, 2), ACCOUNTS[2], SIM_DOMAIN)
    p_b = M.sign(M.Prepare(0, 1, *key, False, 2), ACCOUNTS[2], SIM_DOMAIN)
    c_a = M.sign(M.Commit(*key, True, 0, 3), ACCOUNTS[3], SIM_DOMAIN)
    c_b = M.sign(M.Commit(*key, False, 0, 3), ACCOUNTS[3], SIM_DOMAIN)
    for m in (p_a, p_b, c_a, c_b):
        backup.on_message(m)
    kinds = {(e.kind, e.sender) for e in backup.evidence}
    assert kinds == {("pre-prepare", 0), ("prepare", 2), ("commit", 3)}
    commit_ev = next(e for e in backup.evidence if e.kind == "commit")
    assert (commit_ev.first, commit_ev.second) == (c_a, c_b)  # both on-chain verifiable
    assert backup._slots[1].prepares[2] == p_a
    assert backup._commits[key][3] == c_a
    # a forged "second message" is not evidence against the claimed sender
    forged = replace(p_b, seq=1, signature=M.sign(p_b, ACCOUNTS[4], SIM_DOMAIN).signature)
    n_before = len(backup.evidence)
    backup.on_message(forged)
    assert len(backup.evidence) == n_before


# ---- view change, timers, back-off ----------------------------------------------------------


def test_silent_primary_is_replaced_and_timers_back_off() -> None:
    nodes = make()
    router = Router(nodes, down={0})
    router.start(inst(1))
    assert not any(router.decided[i] for i in range(4))
    # the request timers fire: everyone asks for view 1, whose primary (1) installs it
    router.fire("request", [1, 2, 3])
    for i in (1, 2, 3):
        assert nodes[i].view == 1 and nodes[i].active
        assert router.decided[i][inst(1)].faulty is True
        assert router.decided[i][inst(1)].certificate.view == 1


def test_view_change_timer_waits_for_a_quorum_and_doubles() -> None:
    r = make()[3]
    r.start(inst(1))
    out = r.on_timer(r._timers["request"])
    assert [m.new_view for m in msgs(out, M.ViewChange)] == [1] and not r.active
    assert "view_change" not in timers(out)  # alone: no timer, wait for the others
    delays = []
    view = 1
    while view % 4 != 3:  # views 1, 2 have absent primaries; r is the primary of view 3
        out = []
        for i in (1, 2):
            vc = M.ViewChange(view, 0, M.GENESIS_STATE_DIGEST, (), (), i)
            out += r.on_message(M.sign(vc, ACCOUNTS[i], SIM_DOMAIN))
        delays.append(timers(out)["view_change"])
        out = r.on_timer(r._timers["view_change"])
        view += 1
        assert [m.new_view for m in msgs(out, M.ViewChange)] == [view]
    assert delays == [10.0, 20.0]  # doubling
    for i in (1, 2):
        r.on_message(
            M.sign(M.ViewChange(3, 0, M.GENESIS_STATE_DIGEST, (), (), i), ACCOUNTS[i], SIM_DOMAIN)
        )
    assert r.view == 3 and r.active and r._new_view is not None
    # the request timer of the new view is backed off as well
    assert r._vc_attempts == 3


def test_backoff_is_capped() -> None:
    r = make()[1]
    r._vc_attempts = 50
    assert r._backoff(10.0) == 10.0 * 2**CFG.max_backoff_exponent


def test_f_plus_one_rule_joins_a_view_change() -> None:
    r = make()[3]
    vcs = [
        M.sign(M.ViewChange(2, 0, M.GENESIS_STATE_DIGEST, (), (), i), ACCOUNTS[i], SIM_DOMAIN)
        for i in (1, 2)
    ]
    assert msgs(r.on_message(vcs[0]), M.ViewChange) == []  # f = 1 alone: not enough
    out = r.on_message(vcs[1])
    assert [m.new_view for m in msgs(out, M.ViewChange)] == [2] and r.view == 2


def test_forged_new_view_is_refused() -> None:
    nodes = make()
    router = Router(nodes, down={0})
    router.start(inst(1))
    # capture view-changes for view 1 that carry a prepared certificate
    vcs = [
        M.sign(M.ViewChange(1, 0, M.GENESIS_STATE_DIGEST, (), (), i), ACCOUNTS[i], SIM_DOMAIN)
        for i in (1, 2, 3)
    ]
    plan = compute_new_view(vcs)
    assert plan.proposals == () and plan.min_seq == 0
    # a new-view whose re-issued set was tampered with (an extra proposal) is refused
    bogus_pp = M.sign(M.PrePrepare(1, 1, *inst(1).key, False, 1), ACCOUNTS[1], SIM_DOMAIN)
    nv = M.sign(M.NewView(1, tuple(vcs), (bogus_pp,), 1), ACCOUNTS[1], SIM_DOMAIN)
    r = nodes[2]
    r.on_message(nv)
    assert r.view == 0 and r.active and "recomputed" in r.last_rejection
    # too few view-changes
    nv2 = M.sign(M.NewView(1, tuple(vcs[:2]), (), 1), ACCOUNTS[1], SIM_DOMAIN)
    r.on_message(nv2)
    assert r.view == 0 and "below quorum" in r.last_rejection
    # not from the new primary
    nv3 = M.sign(M.NewView(1, tuple(vcs), (), 2), ACCOUNTS[2], SIM_DOMAIN)
    r.on_message(nv3)
    assert r.view == 0
    # the genuine one is accepted
    nv4 = M.sign(M.NewView(1, tuple(vcs), (), 1), ACCOUNTS[1], SIM_DOMAIN)
    r.on_message(nv4)
    assert r.view == 1 and r.active


def test_new_view_reissues_prepared_proposals() -> None:
    """A proposal prepared (even by one correct replica) in view 0 is carried into view 1
    with its verdict, and commits there even if the new primary's own verdict differs."""
    verdicts = {0: True, 1: False, 2: True, 3: True}
    committee = [a.address for a in ACCOUNTS[:4]]
    nodes = [
        Replica(i, committee, ACCOUNTS[i], SIM_DOMAIN, lambda _x, i=i: verdicts[i], CFG)
        for i in range(4)
    ]
    router = Router(nodes)
    # deliver only prepares, no commits: everyone but 1 prepares "faulty" in view 0
    for i, r in enumerate(nodes):
        router.apply(i, r.start(inst(1)))
    router.queue = deque((d, m) for d, m in router.queue if not isinstance(m, M.Commit))
    while router.queue:
        d, m = router.queue.popleft()
        router.apply(
            d,
            [
                a
                for a in nodes[d].on_message(m)
                if not (isinstance(a, Broadcast) and isinstance(a.msg, M.Commit))
            ],
        )
    assert all(not router.decided[i] for i in range(4))
    assert nodes[2]._prepared[1].pre_prepare.faulty is True
    router.queue.clear()
    router.fire("request", [0, 2, 3])
    router.fire("view_change", [1])  # node 1 joined via f + 1
    assert nodes[1].view == 1 and nodes[1].active
    nv = nodes[1]._new_view
    assert nv is not None and [(p.seq, p.faulty) for p in nv.pre_prepares] == [(1, True)]
    for i in range(4):
        assert router.decided[i][inst(1)].faulty is True


# ---- checkpoints, GC, state transfer --------------------------------------------------------


def test_checkpoints_garbage_collect_and_logs_stay_bounded() -> None:
    cfg = replace(CFG, history_limit=6)
    nodes = make(cfg=cfg)
    net = MemNet(nodes, NetConfig(min_delay=1, max_delay=2), seed=3)
    sizes = []
    for r in range(1, 25):
        net.start(inst(r))
        assert net.run_until(lambda n, r=r: n.decided(inst(r), range(4)), 500)
        sizes.append(max(x.log_size() for x in nodes))
    for x in nodes:
        assert x.h >= 22 and x.last_executed == 24
        assert x.h % cfg.checkpoint_interval == 0
        assert len(x._decided) == 6  # history bounded too
        assert not any(s <= x.h for s in x._slots)
        assert not any(s <= x.h for s in x._prepared)
        assert len(x.stable_proof) == commit_quorum(4)
        assert x.stats["divergences"] == 0
    bound = (cfg.log_window + 2) * (3 * 4 + 4)
    assert max(sizes) <= bound
    assert max(sizes[-8:]) <= max(sizes[:8]) + 4 * 4  # no growth with the number of instances
    digests = {x.stable_digest for x in nodes}
    assert len(digests) == 1


def test_isolated_replica_catches_up_by_state_transfer() -> None:
    nodes = make()
    net = MemNet(nodes, NetConfig(partitions=(Partition(frozenset({3}), 0, 400),)), seed=5)
    for r in range(1, 8):
        net.start(inst(r))
    assert net.run_until(lambda n: all(n.decided(inst(r), range(3)) for r in range(1, 8)), 800)
    assert not net.decisions[3]
    assert net.run_until(lambda n: all(n.decided(inst(r), [3]) for r in range(1, 8)), 1500)
    lagger = nodes[3]
    assert lagger.stats["state_transfers"] >= 1 or lagger.stats["catchup_executions"] >= 1
    for r in range(1, 8):
        d = net.decisions[3][inst(r)]
        assert d.faulty == faulty_if_odd(inst(r))
        d.certificate.verify(lagger.committee, SIM_DOMAIN, instance=inst(r))
    # and it takes part again afterwards
    net.start(inst(8))
    assert net.run_until(lambda n: n.decided(inst(8), range(4)), 2000)


def test_learn_from_a_certificate() -> None:
    nodes = make()
    router = Router(nodes)
    router.start(inst(1))
    cert = router.decided[0][inst(1)].certificate
    fresh = make()[2]
    fresh.start(inst(1))
    out = fresh.learn(cert)
    assert [a.faulty for a in out if isinstance(a, Decide)] == [True]
    assert fresh.pending == () and fresh.learn(cert) == []
    with pytest.raises(ConsensusError):
        fresh.learn(replace(cert, faulty=False))


def test_silent_replica_node() -> None:
    s = SilentReplica(2)
    assert s.start(inst(1)) == [] and s.on_timer("x") == []
    assert s.on_message(M.Fetch(1, 2, 0)) == []
    assert CommitCertificate is not None
