"""Liveness: faulty primaries are replaced by view changes and, after GST, every correct
replica decides; runs are deterministic in their seed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from eth_utils import keccak

from consensus import messages as M
from consensus.memnet import SIM_DOMAIN, MemNet, NetConfig, Partition, simulation_accounts
from consensus.pbft import (
    DoubleVoter,
    EquivocatingPrimary,
    LyingVoter,
    Node,
    Replica,
    ReplicaConfig,
    SilentReplica,
)

CFG = ReplicaConfig(
    checkpoint_interval=2,
    log_window=4,
    request_timeout=20.0,
    view_change_timeout=20.0,
    retransmit_interval=9.0,
    max_backoff_exponent=4,
    record_trace=True,
)


def inst(r: int) -> M.Instance:
    return M.Instance(
        SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, r, 0, keccak(text=f"agg/{r}")
    )


def truth(i: M.Instance) -> bool:
    return i.round % 3 == 0


def committee(n: int, roles: dict[int, str] | None = None) -> list[Node]:
    accounts = simulation_accounts(n)
    members = [a.address for a in accounts]
    kinds: dict[str, Callable[..., Node]] = {
        "liar": LyingVoter,
        "equivocator": EquivocatingPrimary,
        "double": DoubleVoter,
    }
    nodes: list[Node] = []
    for i in range(n):
        role = (roles or {}).get(i)
        if role == "silent":
            nodes.append(SilentReplica(i))
        else:
            nodes.append(
                kinds.get(role or "", Replica)(i, members, accounts[i], SIM_DOMAIN, truth, CFG)
            )
    return nodes


def decide_all(net: MemNet, honest: list[int], rounds: range, max_ticks: int = 3000) -> None:
    assert net.run_until(lambda n: all(n.decided(inst(r), honest) for r in rounds), max_ticks), {
        i: len(net.decisions[i]) for i in honest
    }
    for r in rounds:
        assert net.verdicts(inst(r).key, honest) == {truth(inst(r))}


def views(nodes: list[Node], honest: list[int]) -> list[int]:
    return [nodes[i].view for i in honest if isinstance(nodes[i], Replica)]


@pytest.mark.parametrize("n", [4, 7])
def test_crashed_primary_is_replaced(n: int) -> None:
    nodes = committee(n)
    net = MemNet(nodes, NetConfig(max_delay=3), seed=1)
    net.crash(0, at=0)
    honest = list(range(1, n))
    for r in (1, 2, 3):
        net.start(inst(r))
    decide_all(net, honest, range(1, 4))
    assert min(views(nodes, honest)) >= 1
    certs = [net.decisions[1][inst(r)].certificate for r in (1, 2, 3)]
    assert all(c.view >= 1 for c in certs)


def test_primary_crashing_mid_run_is_replaced() -> None:
    nodes = committee(4)
    net = MemNet(nodes, NetConfig(max_delay=2), seed=2)
    honest = [1, 2, 3]
    for r in (1, 2):
        net.start(inst(r))
    decide_all(net, [0, 1, 2, 3], range(1, 3))
    assert views(nodes, honest) == [0, 0, 0]
    net.crash(0)
    for r in (3, 4, 5):
        net.start(inst(r))
    decide_all(net, honest, range(3, 6))
    assert min(views(nodes, honest)) == 1


def test_two_consecutive_silent_primaries_at_n7() -> None:
    nodes = committee(7, {0: "silent", 1: "silent"})
    net = MemNet(nodes, NetConfig(max_delay=3), seed=3)
    honest = list(range(2, 7))
    for r in (1, 2):
        net.start(inst(r))
    decide_all(net, honest, range(1, 3))
    assert set(views(nodes, honest)) == {2}


@pytest.mark.parametrize(
    ("n", "roles"),
    [
        (4, {0: "equivocator"}),
        (4, {0: "liar"}),
        (4, {2: "double"}),
        (7, {0: "equivocator", 3: "liar"}),
        (7, {0: "double", 1: "equivocator"}),
    ],
)
def test_byzantine_members_cannot_stop_the_correct_ones(n: int, roles: dict[int, str]) -> None:
    nodes = committee(n, roles)
    net = MemNet(nodes, NetConfig(max_delay=3), seed=4)
    honest = [i for i in range(n) if i not in roles]
    for r in range(1, 5):
        net.start(inst(r))
    decide_all(net, honest, range(1, 5))
    for i in honest:
        node = nodes[i]
        assert isinstance(node, Replica) and node.stats["divergences"] == 0


@pytest.mark.parametrize("n", [4, 7])
@pytest.mark.parametrize("seed", range(6))
def test_all_correct_replicas_decide_after_gst(n: int, seed: int) -> None:
    """Heavy loss, duplication, reordering and a partition until GST, then a quiet network."""
    crashed = seed % (n // 3 + 1)  # up to f members crashed from the start
    nodes = committee(n)
    partition = Partition(frozenset(range(n // 2)), 30, 200)
    cfg = NetConfig(
        drop_prob=0.35, dup_prob=0.2, max_delay=6, partitions=(partition,), gst=300, wire=seed == 0
    )
    net = MemNet(nodes, cfg, seed=100 + seed)
    down = list(range(n - crashed, n))
    for i in down:
        net.crash(i, at=0)
    honest = [i for i in range(n) if i not in down]
    for r in range(1, 4):
        net.start(inst(r), at=5 * r)
    decide_all(net, honest, range(1, 4), max_ticks=6000)
    assert net.stats.dropped > 0 and net.stats.partitioned > 0
    for i in honest:
        node = nodes[i]
        assert isinstance(node, Replica) and node.stats["divergences"] == 0


def test_undecidable_dispute_does_not_block_later_ones() -> None:
    """Correct replicas split 2/2 on dispute 1 (no quorum possible); dispute 2 still decides."""
    accounts = simulation_accounts(4)
    members = [a.address for a in accounts]

    def verdict(i: int) -> Callable[[M.Instance], bool]:
        return lambda x: (i % 2 == 0) if x.round == 1 else truth(x)

    nodes: list[Node] = [
        Replica(i, members, accounts[i], SIM_DOMAIN, verdict(i), CFG) for i in range(4)
    ]
    net = MemNet(nodes, NetConfig(max_delay=2), seed=5)
    net.start(inst(1))
    net.start(inst(2), at=3)
    decide_all(net, [0, 1, 2, 3], range(2, 3), max_ticks=3000)
    assert not any(inst(1) in net.decisions[i] for i in range(4))


def _outcome(seed: int) -> tuple[object, ...]:
    nodes = committee(4, {0: "equivocator"})
    net = MemNet(nodes, NetConfig(drop_prob=0.2, dup_prob=0.1, max_delay=5, gst=150), seed=seed)
    for r in range(1, 4):
        net.start(inst(r), at=r)
    net.run_until(lambda n: all(n.decided(inst(r), [1, 2, 3]) for r in range(1, 4)), 3000)
    decisions = sorted(
        (i, x.round, d.faulty, d.seq, d.certificate.view)
        for i, ds in net.decisions.items()
        for x, d in ds.items()
    )
    return (net.now, tuple(decisions), net.stats, tuple(views(nodes, [1, 2, 3])))


def test_same_seed_same_outcome() -> None:
    assert _outcome(7) == _outcome(7)
    assert _outcome(7) != _outcome(8)
