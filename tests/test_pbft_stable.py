"""Stable storage for PBFT (issue 20, item 8): the snapshot, the stores, and crash-restarts of a
correct replica at every phase, in-process on the memnet, with an equivocating primary.

Whatever the phase, no two correct replicas may decide different verdicts, no correct
replica may decide both, no dispute may get certificates for both verdicts, and no correct
member may sign a slashable pair; the restarted replica comes back in the view it left.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from eth_utils.crypto import keccak

from consensus.evidence import proof_of
from consensus.memnet import (
    SCHEDULE_CONFIG,
    SIM_DOMAIN,
    MemNet,
    NetConfig,
    conflicting_certificates,
    random_schedule,
    simulation_accounts,
)
from consensus.messages import (
    Checkpoint,
    Commit,
    Domain,
    Instance,
    Message,
    NewView,
    Prepare,
    PrePrepare,
    ViewChange,
)
from consensus.pbft import (
    Action,
    Broadcast,
    Decide,
    EquivocatingPrimary,
    LyingVoter,
    Node,
    Persist,
    Replica,
    ReplicaConfig,
    Send,
)
from consensus.pbft.stable import snapshot
from consensus.quorums import commit_quorum
from consensus.stable_store import FileStore, MemoryStore
from protocol.errors import ConsensusError

N = 4
ACCOUNTS = simulation_accounts(N)
COMMITTEE = [a.address for a in ACCOUNTS]
CFG = replace(SCHEDULE_CONFIG, request_timeout=20.0, view_change_timeout=20.0)


def inst(r: int) -> Instance:
    return Instance(SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, r, 0, keccak(text=f"a{r}"))


def honest(i: int, state: bytes | None = None) -> Replica:
    return Replica(i, COMMITTEE, ACCOUNTS[i], SIM_DOMAIN, lambda _x: True, CFG, state=state)


# ---- the snapshot and the stores ----------------------------------------------------------


def _settled_net() -> MemNet:
    nodes: list[Node] = [honest(i) for i in range(N)]
    net = MemNet(nodes, NetConfig(max_delay=2), seed=1)
    for r in range(1, 4):
        net.start(inst(r))
    assert net.run_until(lambda n: all(n.decided(inst(r), range(N)) for r in range(1, 4)), 800)
    return net


def test_snapshot_round_trips_and_is_written_before_sending() -> None:
    net = _settled_net()
    for i in range(N):
        r = net.nodes[i]
        assert isinstance(r, Replica)
        state = net.stores[i].load()
        assert state is not None  # (received votes since are not persisted: nothing signed)
        back = honest(i, state)
        assert snapshot(back) == state
        assert (back.view, back.h, back.last_executed, back.state_digest) == (
            r.view,
            r.h,
            r.last_executed,
            r.state_digest,
        )
        assert back.decision(inst(3).key) == r.decision(inst(3).key)
    # every batch that carries a signed protocol message starts with Persist
    r = honest(0)
    out = r.start(inst(1))  # primary: pre-prepares and prepares
    assert isinstance(out[0], Persist) and any(isinstance(a, Broadcast) for a in out)
    assert not any(isinstance(a, Persist) for a in out[1:])
    quiet = honest(1).start(inst(1))  # a backup that only observed the dispute signs nothing
    assert not any(isinstance(a, Persist) for a in quiet)


def test_snapshot_is_refused_by_another_member_or_when_tampered() -> None:
    net = _settled_net()
    state = net.stores[1].load()
    assert state is not None
    with pytest.raises(ConsensusError, match="another member"):
        honest(2, state)
    other_task = Domain(SIM_DOMAIN.chain_id, "0x" + "ab" * 20)
    with pytest.raises(ConsensusError, match="another task"):
        Replica(1, COMMITTEE, ACCOUNTS[1], other_task, lambda _x: True, CFG, state=state)
    with pytest.raises(ConsensusError):
        honest(1, state.replace(b'"view":0', b'"view":"x"'))
    with pytest.raises(ConsensusError):
        honest(1, b"not json")
    sig = state.index(b'"sig":"0x', state.index(b'"stableProof":[')) + 9
    forged = state[:sig] + (b"0" if state[sig : sig + 1] != b"0" else b"1") + state[sig + 1 :]
    with pytest.raises(ConsensusError):
        honest(1, forged)


def test_file_store_is_atomic_and_durable(tmp_path: Path) -> None:
    path = tmp_path / "pbft" / "aggregator-1.state"
    store = FileStore(path)
    assert store.load() is None
    store.save(b"one")
    store.save(b"two")
    assert FileStore(path).load() == b"two"  # what another process (a restart) reads
    assert sorted(os.listdir(path.parent)) == ["aggregator-1.state"]  # no temporary left
    assert store.stats.writes == 2 and store.stats.bytes == 6 and store.stats.max_size == 3
    mem = MemoryStore()
    mem.save(b"x")
    assert mem.load() == b"x" and mem.stats.writes == 1


# ---- restarts at every phase ----------------------------------------------------------------

Trigger = Callable[[Action], bool]


def _sent(typ: type[Message]) -> Trigger:
    return lambda a: isinstance(a, Broadcast | Send) and isinstance(a.msg, typ)


PHASES: dict[str, Trigger] = {
    "before-pre-prepare": lambda a: False,  # crash at tick 0, before anything arrives
    "after-prepare": _sent(Prepare),
    "after-commit": _sent(Commit),
    "after-decide": lambda a: isinstance(a, Decide),
    "after-checkpoint": _sent(Checkpoint),
    "during-view-change": _sent(ViewChange),
    "after-new-view": _sent(NewView),  # member 1 is the primary of view 1
    "after-own-pre-prepare": _sent(PrePrepare),
}


def _restart_run(phase: str, downtime: int, seed: int, victim: int) -> tuple[MemNet, list[int]]:
    # the primary of view 0 equivocates, or lies (proposes the opposite verdict and votes
    # against everything: every dispute then needs a view change to member 1)
    needs_view_change = phase in ("during-view-change", "after-new-view", "after-own-pre-prepare")
    byz = LyingVoter if needs_view_change or seed % 2 else EquivocatingPrimary
    nodes: list[Node] = [byz(0, COMMITTEE, ACCOUNTS[0], SIM_DOMAIN, lambda _x: True, CFG)]
    nodes += [honest(i) for i in range(1, N)]
    net = MemNet(nodes, NetConfig(max_delay=3), seed=seed)
    disputes = [inst(r) for r in range(1, 5)]
    for k, d in enumerate(disputes):
        net.start(d, at=k * 3)
    trigger = PHASES[phase]
    fired: list[int] = []

    def make(state: bytes | None) -> Node:
        back = honest(victim, state)
        old = net.retired[victim][-1]
        assert isinstance(old, Replica)
        assert state is not None or phase == "before-pre-prepare"
        assert back.view == old.view and back.last_executed == old.last_executed
        return back

    def watch(src: int, a: Action) -> None:
        if src == victim and not fired and trigger(a):
            fired.append(net.now)
            net.restart(victim, net.now, make, downtime)

    net.on_action = watch
    if phase == "before-pre-prepare":
        fired.append(0)
        net.restart(victim, 0, make, downtime)
    correct = list(range(1, N))
    net.run_until(lambda n: all(n.decided(d, correct) for d in disputes), 4000)
    return net, fired


@pytest.mark.parametrize("downtime", [0, 25])
@pytest.mark.parametrize("phase", sorted(PHASES))
def test_restart_at_every_phase_keeps_safety(phase: str, downtime: int) -> None:
    """A correct replica crashes right after the phase's first message (or decision) and comes
    back from stable storage: one verdict per dispute, no conflicting certificates, nothing
    slashable signed by a correct member, and every dispute still decided."""
    restarted = 0
    for seed in range(3):
        victim = 1 if phase in ("after-new-view", "after-own-pre-prepare") else 1 + seed % 3
        net, fired = _restart_run(phase, downtime, seed, victim)
        restarted += bool(fired) and net.restarts == 1
        correct = range(1, N)
        for r in range(1, 5):
            verdicts = net.verdicts(inst(r).key, correct)
            assert verdicts == {True}, (phase, seed, r, verdicts)
        assert not net.flip_flops
        assert not conflicting_certificates(net.commits_seen, commit_quorum(N), COMMITTEE)
        for i in correct:
            for node in [net.nodes[i], *net.retired.get(i, [])]:
                assert isinstance(node, Replica)
                bad = [e for e in node.evidence if e.sender != 0 and proof_of(e) is not None]
                assert not bad, (phase, seed, bad)
    assert restarted >= 1, f"phase {phase} never happened"


def test_random_schedules_with_restarts_stay_safe() -> None:
    """Seeded adversarial schedules (Byzantine members, loss, partitions) with four
    crash-restarts of correct members each, whose re-executions may change after a restart."""
    totals = {"restarts": 0, "decisions": 0, "view_changes": 0}
    for n, seeds in ((4, range(150)), (7, range(40))):
        for seed in seeds:
            r = random_schedule(n, seed, max_ticks=1500, settle_ticks=300, restarts=4)
            detail = f"n={n} seed={seed} byzantine={r.byzantine}"
            assert r.safe, detail
            assert r.decidable_decided, detail
            totals["restarts"] += r.restarts
            totals["decisions"] += r.decisions
            totals["view_changes"] += r.view_changes
    assert totals["restarts"] >= 250 and totals["view_changes"] > 0
    print(f"\nPBFT restarts: {totals}")


def test_random_schedules_without_stable_storage_break() -> None:
    """The same machinery finds the attack when storage is switched off (so the test above can
    fail): some schedule then has a correct member signing a slashable pair or worse."""
    cfg = replace(SCHEDULE_CONFIG, stable_storage=False)
    unsafe = 0
    for seed in range(300):
        r = random_schedule(4, seed, max_ticks=1500, settle_ticks=300, restarts=4, config=cfg)
        unsafe += not r.safe
        if unsafe:
            break
    assert unsafe


def test_replica_config_can_switch_storage_off() -> None:
    cfg = ReplicaConfig(stable_storage=False)
    r = Replica(0, COMMITTEE, ACCOUNTS[0], SIM_DOMAIN, lambda _x: True, cfg)
    assert not any(isinstance(a, Persist) for a in r.start(inst(1)))
