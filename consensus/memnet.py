"""A deterministic in-memory network for PBFT replicas, driven by a seed.

Time is an integer tick. Every message gets a delay drawn from ``[min_delay, max_delay]``
ticks (so messages are reordered), may be dropped or duplicated before the global
stabilisation time ``gst``, and is dropped while a partition separates its endpoints. Timers set
by replicas fire on the simulated clock (``ceil(delay)`` ticks later). All randomness comes
from one ``random.Random(seed)`` consumed in a fixed order and events at the same tick run in
the order they were scheduled, so the same seed, nodes and calls give the same schedule and
the same outcome.

Byzantine members are simply other :class:`~consensus.pbft.Node` implementations;
``crash(node, at)`` silences a node from a given tick on; ``restart(node, at, make, downtime)``
crashes it at ``at`` and, ``downtime`` ticks later, replaces it by ``make(state)`` built from
its stable storage (every node has a :class:`~consensus.stable_store.MemoryStore` that the
driver writes each :class:`~consensus.pbft.Persist` to before sending anything else; the
store outlives the crash, everything else of the node is lost).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils.crypto import keccak

from consensus.evidence import proof_of
from consensus.messages import Commit, Domain, Instance, InstanceKey, Message, decode, encode
from consensus.pbft import (
    Action,
    Broadcast,
    CancelTimer,
    Decide,
    DoubleVoter,
    EquivocatingPrimary,
    LyingVoter,
    Node,
    Persist,
    RandomByzantine,
    Replica,
    ReplicaConfig,
    Send,
    SetTimer,
    SilentReplica,
)
from consensus.quorums import commit_quorum, max_faulty
from consensus.stable_store import MemoryStore, StableStore
from protocol.errors import ConsensusError

__all__ = [
    "MemNet",
    "NetConfig",
    "NetStats",
    "Partition",
    "ScheduleResult",
    "conflicting_certificates",
    "random_schedule",
    "simulation_accounts",
]


@dataclass(frozen=True)
class Partition:
    """While ``start <= tick < end``, nodes in ``group`` and the others cannot talk."""

    group: frozenset[int]
    start: int
    end: int

    def cuts(self, a: int, b: int, tick: int) -> bool:
        return self.start <= tick < self.end and ((a in self.group) != (b in self.group))


@dataclass(frozen=True)
class NetConfig:
    drop_prob: float = 0.0
    dup_prob: float = 0.0
    min_delay: int = 1
    max_delay: int = 3
    partitions: tuple[Partition, ...] = ()
    gst: int = 0  # from this tick on: no random drops or duplicates
    wire: bool = False  # round-trip every message through the canonical codec

    def __post_init__(self) -> None:
        if not (0 <= self.drop_prob <= 1 and 0 <= self.dup_prob <= 1):
            raise ConsensusError("probabilities must be in [0, 1]")
        if not 1 <= self.min_delay <= self.max_delay:
            raise ConsensusError("need 1 <= min_delay <= max_delay")


@dataclass
class NetStats:
    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0
    partitioned: int = 0
    timers_fired: int = 0
    bytes: int = 0


_Event = tuple[int, int, str, int, object]  # (tick, order, kind, node, payload)


class MemNet:
    """Simulated network over ``nodes`` (``nodes[i].index == i``)."""

    def __init__(self, nodes: Sequence[Node], config: NetConfig | None = None, seed: int = 0):
        for i, node in enumerate(nodes):
            if node.index != i:
                raise ConsensusError("nodes must be listed in committee order")
        self.nodes = list(nodes)
        self.config = config or NetConfig()
        self.rng = random.Random(seed)
        self.now = 0
        self.stats = NetStats()
        self._queue: list[_Event] = []
        self._order = 0
        self._timers: dict[tuple[int, str], int] = {}
        self.crashed: dict[int, int] = {}
        self.outages: dict[int, list[tuple[int, int]]] = {}  # node -> [start, end) windows
        self.stores: dict[int, StableStore] = {i: MemoryStore() for i in range(len(nodes))}
        self.retired: dict[int, list[Node]] = {}  # nodes replaced by a restart, oldest first
        self.restarts = 0
        self.started: dict[int, list[Instance]] = {i: [] for i in range(len(nodes))}
        self.decisions: dict[int, dict[Instance, Decide]] = {i: {} for i in range(len(nodes))}
        self.flip_flops: list[tuple[int, InstanceKey]] = []  # a node decided both verdicts
        self.commits_seen: set[Commit] = set()
        self.on_action: Callable[[int, Action], None] | None = None

    # ---- scheduling -----------------------------------------------------------------------

    def _push(self, tick: int, kind: str, node: int, payload: object = None) -> None:
        self._order += 1
        heapq.heappush(self._queue, (tick, self._order, kind, node, payload))

    def start(
        self, instance: Instance, at: int | None = None, nodes: Iterable[int] | None = None
    ) -> None:
        """Tell ``nodes`` (default: all) about a dispute at tick ``at`` (default: now)."""
        tick = self.now if at is None else at
        for i in range(len(self.nodes)) if nodes is None else nodes:
            self._push(tick, "start", i, instance)

    def crash(self, node: int, at: int | None = None) -> None:
        """From tick ``at`` on, ``node`` neither receives nor sends anything."""
        self.crashed[node] = self.now if at is None else at

    def restart(
        self, node: int, at: int, make: Callable[[bytes | None], Node], downtime: int = 0
    ) -> None:
        """Crash ``node`` at tick ``at`` (messages to it are lost while it is down) and, after
        ``downtime`` ticks, replace it by ``make(last persisted state)``; the new node is told
        about every dispute the old one was (as a real node re-reads them from the chain) and,
        if it has ``resume()``, resumes."""
        if downtime > 0:
            self.outages.setdefault(node, []).append((at, at + downtime))
        self._push(at + downtime, "restart", node, make)

    def is_down(self, node: int, tick: int | None = None) -> bool:
        t = self.now if tick is None else tick
        at = self.crashed.get(node)
        if at is not None and t >= at:
            return True
        return any(a <= t < b for a, b in self.outages.get(node, ()))

    # ---- running --------------------------------------------------------------------------

    def step(self) -> None:
        """Run every event of the current tick, then advance the clock by one."""
        while self._queue and self._queue[0][0] <= self.now:
            self._run(*heapq.heappop(self._queue))
        self.now += 1

    def run_until(self, predicate: Callable[[MemNet], bool], max_ticks: int) -> bool:
        """Step until ``predicate(self)`` holds (True) or ``max_ticks`` more ticks pass."""
        deadline = self.now + max_ticks
        while self.now < deadline:
            if predicate(self):
                return True
            self.step()
        return predicate(self)

    def decided(self, instance: Instance, nodes: Iterable[int]) -> bool:
        return all(instance in self.decisions[i] for i in nodes)

    def _run(self, tick: int, order: int, kind: str, dst: int, payload: object) -> None:
        if kind == "start":  # the dispute is on-chain: a restarted node will see it too
            assert isinstance(payload, Instance)
            if payload not in self.started[dst]:
                self.started[dst].append(payload)
        if (self.crashed or self.outages) and self.is_down(dst):
            return
        node = self.nodes[dst]
        if kind == "restart":
            actions = self._restart(dst, cast(Callable[[bytes | None], Node], payload))
        elif kind == "start":
            assert isinstance(payload, Instance)
            actions = node.start(payload)
        elif kind == "timer":
            assert isinstance(payload, str)
            key = (dst, payload)
            if self._timers.get(key) != order:
                return
            del self._timers[key]
            self.stats.timers_fired += 1
            actions = node.on_timer(payload)
        else:
            src, data = cast(tuple[int, Message | bytes], payload)
            if self.config.partitions and any(
                p.cuts(src, dst, self.now) for p in self.config.partitions
            ):
                self.stats.partitioned += 1
                return
            msg = decode(data) if isinstance(data, bytes) else data
            self.stats.delivered += 1
            actions = node.on_message(msg)
        if actions:
            self._apply(dst, actions)

    def _restart(self, dst: int, make: Callable[[bytes | None], Node]) -> list[Action]:
        self.retired.setdefault(dst, []).append(self.nodes[dst])
        self._timers = {k: v for k, v in self._timers.items() if k[0] != dst}
        node = make(self.stores[dst].load())
        if node.index != dst:
            raise ConsensusError("a restarted node must keep its committee index")
        self.nodes[dst] = node
        self.restarts += 1
        actions: list[Action] = []
        resume = getattr(node, "resume", None)
        if resume is not None:
            actions += resume()
        for inst in self.started[dst]:
            actions += node.start(inst)
        return actions

    def _apply(self, src: int, actions: list[Action]) -> None:
        for a in actions:
            if self.on_action is not None:
                self.on_action(src, a)
            if isinstance(a, Persist):
                self.stores[src].save(a.state)
            elif isinstance(a, Broadcast):
                payload = self._payload(a.msg)
                for dst in range(len(self.nodes)):
                    if dst != src:
                        self._route(src, dst, payload)
            elif isinstance(a, Send):
                if 0 <= a.to < len(self.nodes) and a.to != src:
                    self._route(src, a.to, self._payload(a.msg))
            elif isinstance(a, SetTimer):
                ticks = max(1, math.ceil(a.delay))
                self._push(self.now + ticks, "timer", src, a.timer_id)
                self._timers[(src, a.timer_id)] = self._order
            elif isinstance(a, CancelTimer):
                self._timers.pop((src, a.timer_id), None)
            elif isinstance(a, Decide):
                first = self.decisions[src].setdefault(a.instance, a)
                if first.faulty != a.faulty:
                    self.flip_flops.append((src, a.instance.key))

    def _payload(self, msg: Message) -> Message | bytes:
        if isinstance(msg, Commit):
            self.commits_seen.add(msg)
        if self.config.wire:
            data = encode(msg)
            self.stats.bytes += len(data)
            return data
        return msg

    def _route(self, src: int, dst: int, payload: Message | bytes) -> None:
        self.stats.sent += 1
        cfg = self.config
        before_gst = self.now < cfg.gst
        if before_gst and cfg.drop_prob and self.rng.random() < cfg.drop_prob:
            self.stats.dropped += 1
            return
        copies = 1
        if before_gst and cfg.dup_prob and self.rng.random() < cfg.dup_prob:
            copies = 2
            self.stats.duplicated += 1
        for _ in range(copies):
            delay = self.rng.randint(cfg.min_delay, cfg.max_delay)
            self._push(self.now + delay, "deliver", dst, (src, payload))

    # ---- inspection -----------------------------------------------------------------------

    def verdicts(self, key: InstanceKey, nodes: Iterable[int]) -> set[bool]:
        """Verdicts decided for the instance with ``key`` among ``nodes``."""
        return {d.faulty for i in nodes for inst, d in self.decisions[i].items() if inst.key == key}


# --------------------------------------------------------------------------------------------
# Seeded adversarial schedules (safety tests and "where does it break" experiments)
# --------------------------------------------------------------------------------------------

BEHAVIOURS: tuple[str, ...] = ("silent", "liar", "equivocator", "double", "random")
SIM_DOMAIN = Domain(1337, "0x" + "fc" * 20)


def simulation_accounts(n: int, tag: str = "fedchain-pbft-sim") -> list[LocalAccount]:
    """Deterministic keys for simulations and tests. Never use them for anything real."""
    return [Account.from_key(keccak(text=f"{tag}/{i}")) for i in range(n)]


@dataclass
class ScheduleResult:
    """What one adversarial schedule did, and whether safety held."""

    seed: int
    n: int
    byzantine: dict[int, str]
    honest: list[int]
    instances: list[Instance]
    honest_verdicts: dict[InstanceKey, set[bool]]
    all_decided: bool
    decidable_decided: bool
    ticks: int
    max_view: int
    view_changes: int
    state_transfers: int
    divergent_seqs: list[int]
    conflicting_certificates: list[InstanceKey]
    invalid_certificates: int
    evidence: int
    net: NetStats
    restarts: int = 0
    flip_flops: list[InstanceKey] = field(default_factory=list)  # one member, both verdicts
    evidence_against_honest: int = 0  # slashable pairs signed by correct members

    @property
    def safe(self) -> bool:
        return (
            all(len(v) <= 1 for v in self.honest_verdicts.values())
            and not self.flip_flops
            and self.evidence_against_honest == 0
            and not self.divergent_seqs
            and not self.conflicting_certificates
            and self.invalid_certificates == 0
        )

    @property
    def decisions(self) -> int:
        return sum(len(v) == 1 for v in self.honest_verdicts.values())


def conflicting_certificates(
    commits: Iterable[Commit], quorum: int, committee: Sequence[str]
) -> list[InstanceKey]:
    """Instances for which signed commits for *both* verdicts reach ``quorum`` in some view."""
    signers: dict[tuple[InstanceKey, bool, int], set[int]] = {}
    for c in commits:
        signers.setdefault((c.key, c.faulty, c.view), set()).add(c.sender)
    certified: dict[InstanceKey, set[bool]] = {}
    for (key, faulty, _view), who in signers.items():
        if len(who) >= quorum:
            certified.setdefault(key, set()).add(faulty)
    return sorted(k for k, v in certified.items() if len(v) > 1)


#: Replica parameters of the adversarial schedules: short windows, so GC and state transfer run.
SCHEDULE_CONFIG = ReplicaConfig(
    checkpoint_interval=2,
    log_window=4,
    request_timeout=30.0,
    view_change_timeout=30.0,
    retransmit_interval=12.0,
    max_backoff_exponent=4,
    record_trace=True,
)


def random_schedule(
    n: int,
    seed: int,
    *,
    byzantine: int | None = None,
    behaviours: Sequence[str] = BEHAVIOURS,
    instances: int | None = None,
    disagreement: float = 0.3,
    max_ticks: int = 4000,
    settle_ticks: int = 600,
    config: ReplicaConfig | None = None,
    wire: bool = False,
    restarts: int = 0,
) -> ScheduleResult:
    """Run one seeded adversarial schedule and report on it.

    ``byzantine`` members (default ``f``) get behaviours drawn from ``behaviours``; the primary
    of view 0 is among them half of the time (as an equivocator, if that behaviour is
    allowed). Honest members re-execute deterministically, except that with probability
    ``disagreement`` an instance is one whose honest verdicts differ (say, a payload only some
    could fetch), which is what makes the PBFT quorum logic, rather than plain re-execution,
    carry safety. The network drops, duplicates, delays and partitions messages until a
    random GST.

    ``restarts`` crash-restarts of honest members are drawn last (so seeds without restarts
    keep their schedules): a member crashes at a random tick, stays down for 0 to 60 ticks and
    comes back from its stable storage; each time, its re-execution of every dispute it had
    not voted on flips with probability 0.3 (a payload it could not fetch before, say).

    The run stops once every honest member decided every instance, or once the instances
    the honest members alone could decide (``n - f`` of them agree) are decided everywhere and
    ``settle_ticks`` have passed, or after ``max_ticks``.
    """
    rng = random.Random(seed)  # every draw below comes from it, in a fixed order
    roles = _draw_roles(rng, n, max_faulty(n) if byzantine is None else byzantine, behaviours)
    honest = [i for i in range(n) if i not in roles]
    insts, verdicts = _draw_disputes(rng, n, instances, disagreement)
    cfg = config or SCHEDULE_CONFIG
    nodes = _make_nodes(rng, n, roles, verdicts, cfg)
    net = MemNet(nodes, _draw_network(rng, n, wire), seed=rng.randrange(1 << 30))
    for inst in insts:
        base = rng.randint(0, 30)
        for i in range(n):
            net.start(inst, at=base + rng.randint(0, 10), nodes=[i])
    fickle = _draw_restarts(rng, net, honest, insts, verdicts, cfg, restarts)

    q = commit_quorum(n)
    decidable = [
        inst
        for inst in insts
        if max(
            sum(verdicts[(i, inst.key)] == v and (i, inst.key) not in fickle for i in honest)
            for v in (False, True)
        )
        >= q
    ]

    def done(net: MemNet) -> bool:
        if not all(net.decided(inst, honest) for inst in decidable):
            return False
        return net.now >= settle_ticks or all(net.decided(inst, honest) for inst in insts)

    net.run_until(done, max_ticks)
    return _summarise(seed, n, roles, honest, insts, decidable, net)


def _draw_roles(rng: random.Random, n: int, nbyz: int, behaviours: Sequence[str]) -> dict[int, str]:
    """Byzantine members and their behaviours; member 0 (the first primary) half the time."""
    byz_ids: list[int] = []
    if nbyz and rng.random() < 0.5:
        byz_ids.append(0)
    byz_ids += rng.sample([i for i in range(n) if i not in byz_ids], nbyz - len(byz_ids))
    roles: dict[int, str] = {}
    for i in byz_ids:
        roles[i] = (
            "equivocator"
            if i == 0 and "equivocator" in behaviours
            else rng.choice(list(behaviours))
        )
    return roles


def _draw_disputes(
    rng: random.Random, n: int, instances: int | None, disagreement: float
) -> tuple[list[Instance], dict[tuple[int, InstanceKey], bool]]:
    """One to three disputes (unless ``instances``) and every member's own verdict on each."""
    count = instances if instances is not None else rng.randint(1, 3)
    insts = [
        Instance(
            SIM_DOMAIN.verifying_contract,
            SIM_DOMAIN.chain_id,
            r,
            0,
            keccak(text=f"aggregate/{r}"),
        )
        for r in range(1, count + 1)
    ]
    truth = {inst.key: rng.random() < 0.5 for inst in insts}
    verdicts: dict[tuple[int, InstanceKey], bool] = {}
    for inst in insts:
        split = rng.random() < disagreement
        for i in range(n):
            v = truth[inst.key]
            verdicts[(i, inst.key)] = (not v) if split and rng.random() < 0.4 else v
    return insts, verdicts


def _make_nodes(
    rng: random.Random,
    n: int,
    roles: dict[int, str],
    verdicts: dict[tuple[int, InstanceKey], bool],
    cfg: ReplicaConfig,
) -> list[Node]:
    accounts = simulation_accounts(n)
    committee = [a.address for a in accounts]
    nodes: list[Node] = []
    for i in range(n):

        def validate(inst: Instance, i: int = i) -> bool:
            return verdicts[(i, inst.key)]

        role = roles.get(i)
        args = (i, committee, accounts[i], SIM_DOMAIN, validate, cfg)
        if role == "silent":
            nodes.append(SilentReplica(i))
        elif role == "liar":
            nodes.append(LyingVoter(*args))
        elif role == "equivocator":
            nodes.append(EquivocatingPrimary(*args))
        elif role == "double":
            nodes.append(DoubleVoter(*args))
        elif role == "random":
            nodes.append(RandomByzantine(*args, seed=rng.randrange(1 << 30)))
        else:
            nodes.append(Replica(*args))
    return nodes


def _draw_restarts(
    rng: random.Random,
    net: MemNet,
    honest: list[int],
    insts: list[Instance],
    verdicts: dict[tuple[int, InstanceKey], bool],
    cfg: ReplicaConfig,
    restarts: int,
) -> set[tuple[int, InstanceKey]]:
    """Schedule ``restarts`` crash-restarts of honest members; returns the (member, dispute)
    pairs whose re-execution may differ after a restart (they count for neither verdict)."""
    fickle: set[tuple[int, InstanceKey]] = set()
    if not restarts or not honest:
        return fickle
    accounts = simulation_accounts(len(net.nodes))
    committee = [a.address for a in accounts]
    for _ in range(restarts):
        i = rng.choice(honest)
        at = rng.randint(5, 250)
        downtime = rng.choice([0, rng.randint(1, 60)])
        flips = {inst.key for inst in insts if rng.random() < 0.3}
        fickle |= {(i, k) for k in flips}

        def make(state: bytes | None, i: int = i, flips: set[InstanceKey] = flips) -> Node:
            for k in flips:  # only what it has not voted on yet: votes are in its state
                verdicts[(i, k)] = not verdicts[(i, k)]

            def validate(x: Instance, i: int = i) -> bool:
                return verdicts[(i, x.key)]

            return Replica(i, committee, accounts[i], SIM_DOMAIN, validate, cfg, state=state)

        net.restart(i, at, make, downtime)
    return fickle


def _draw_network(rng: random.Random, n: int, wire: bool) -> NetConfig:
    """Loss, duplication, delays and up to two partitions, all before a random GST."""
    gst = rng.choice([0, rng.randint(20, 400)])
    partitions = []
    for _ in range(rng.randint(0, 2)):
        if gst == 0:
            break
        group = frozenset(rng.sample(range(n), rng.randint(1, max(1, n // 2))))
        start = rng.randint(0, gst)
        partitions.append(Partition(group, start, rng.randint(start, gst)))
    return NetConfig(
        drop_prob=rng.choice([0.0, 0.05, 0.15, 0.3]),
        dup_prob=rng.choice([0.0, 0.1, 0.2]),
        min_delay=1,
        max_delay=rng.randint(1, 6),
        partitions=tuple(partitions),
        gst=gst,
        wire=wire,
    )


def _summarise(
    seed: int,
    n: int,
    roles: dict[int, str],
    honest: list[int],
    insts: list[Instance],
    decidable: list[Instance],
    net: MemNet,
) -> ScheduleResult:
    committee = [a.address for a in simulation_accounts(n)]
    honest_verdicts = {inst.key: net.verdicts(inst.key, honest) for inst in insts}
    traces: dict[int, set[tuple[InstanceKey, bool]]] = {}
    replicas = [r for r in (net.nodes[i] for i in honest) if isinstance(r, Replica)]
    retired = [r for i in honest for r in net.retired.get(i, []) if isinstance(r, Replica)]
    for r in replicas + retired:
        for seq, key, faulty in r.trace:
            traces.setdefault(seq, set()).add((key, faulty))
    invalid = 0
    for i in honest:
        for inst, d in net.decisions[i].items():
            if not d.certificate.is_valid(committee, SIM_DOMAIN, instance=inst):
                invalid += 1
    return ScheduleResult(
        seed=seed,
        n=n,
        byzantine=roles,
        honest=honest,
        instances=insts,
        honest_verdicts=honest_verdicts,
        all_decided=all(net.decided(inst, honest) for inst in insts),
        decidable_decided=all(net.decided(inst, honest) for inst in decidable),
        ticks=net.now,
        max_view=max(r.view for r in replicas),
        view_changes=sum(r.stats["view_changes"] for r in replicas),
        state_transfers=sum(r.stats["state_transfers"] for r in replicas),
        divergent_seqs=sorted(s for s, v in traces.items() if len(v) > 1)
        + [-1] * sum(r.stats["divergences"] for r in replicas + retired),
        conflicting_certificates=conflicting_certificates(
            net.commits_seen, commit_quorum(n), committee
        ),
        invalid_certificates=invalid,
        evidence=sum(len(r.evidence) for r in replicas),
        net=net.stats,
        restarts=net.restarts,
        flip_flops=[k for i, k in net.flip_flops if i in honest],
        evidence_against_honest=sum(
            1
            for r in replicas + retired
            for e in r.evidence
            if e.sender in honest and proof_of(e) is not None
        ),
    )
