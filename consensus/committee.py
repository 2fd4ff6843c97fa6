"""The aggregator committee's PBFT, driven in-process for scenario runs.

One :class:`Committee` holds a long-lived replica per aggregator (honest, or one of the
Byzantine kinds of :mod:`consensus.pbft`) on a seeded :class:`~consensus.memnet.MemNet`, so a
run's disputes are a sequence of PBFT instances with checkpoints, exactly as separate
processes would run them over :mod:`consensus.tcp`. Each honest replica's ``validate`` is its
aggregator's own re-execution verdict. :meth:`Committee.dispute` runs one instance until some
replica decides (its commit certificate is what goes on-chain) or the tick budget runs out,
which is what happens when no side can gather ``n - f`` votes: the dispute stalls.

Crash-restarts (:class:`ReplicaRestart`, a scenario's ``[pbft] restart``): member ``i``
crashes in round ``r``'s dispute right after it sent its first message of a PBFT phase
(its stable storage, a :class:`~consensus.stable_store.FileStore` in ``store_dir``, holds
everything it signed: the state machine persists before it sends), stays down ``downtime``
ticks (messages to it are lost) and comes back as a new replica built from that storage
only. :attr:`Committee.restarts` records each restart that happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from eth_account.signers.local import LocalAccount

from consensus.certificate import CommitCertificate, eligible_certificate, endorse
from consensus.memnet import MemNet, NetConfig
from consensus.messages import Commit, Domain, Instance, Message, Prepare, PrePrepare, sign
from consensus.pbft import (
    Action,
    Broadcast,
    Decide,
    EquivocatingPrimary,
    LyingVoter,
    Node,
    Replica,
    ReplicaConfig,
    Send,
    SilentReplica,
)
from consensus.quorums import commit_quorum
from consensus.stable_store import FileStore
from protocol.errors import ConfigError


class DoubleSigner(Replica):
    """Runs the honest protocol, but sends every prepare and commit twice to everyone: once
    as signed and once with the opposite verdict. Any replica then holds two conflicting
    signed votes from it (recorded as evidence), which slash it on-chain."""

    def start(self, instance: Instance) -> list[Action]:
        return self._double(super().start(instance))

    def on_message(self, msg: Message) -> list[Action]:
        return self._double(super().on_message(msg))

    def on_timer(self, timer_id: str) -> list[Action]:
        return self._double(super().on_timer(timer_id))

    def _double(self, actions: list[Action]) -> list[Action]:
        out: list[Action] = []
        for a in actions:
            out.append(a)
            if isinstance(a, Broadcast) and isinstance(a.msg, Prepare | Commit):
                flipped = replace(a.msg, faulty=not a.msg.faulty, signature=b"")
                out.append(Broadcast(sign(flipped, self.account, self.domain)))
        return out


#: PBFT behaviour name -> replica class. "colluding" replicas run the honest protocol with a
#: lying ``validate`` (the aggregator node supplies it), so they are plain replicas here.
REPLICA_KINDS: dict[str, type[Replica] | None] = {
    "honest": Replica,
    "colluding": Replica,
    "lying": LyingVoter,
    "equivocating": EquivocatingPrimary,
    "double": DoubleSigner,
    "silent": None,
}


#: When a :class:`ReplicaRestart` crashes its member, in the round's dispute: as it starts
#: the dispute (before signing anything), right after it sent its first pre-prepare (as
#: primary), prepare or commit, or right after it decided.
RESTART_PHASES: dict[str, type | None] = {
    "start": None,
    "pre-prepare": PrePrepare,
    "prepare": Prepare,
    "commit": Commit,
    "decide": Decide,
}


@dataclass(frozen=True)
class ReplicaRestart:
    """Crash member ``aggregator`` at ``phase`` of round ``round``'s dispute (its first one)
    and restart it from stable storage ``downtime`` ticks later."""

    aggregator: int
    round: int
    phase: str
    downtime: int = 20

    def __post_init__(self) -> None:
        if self.phase not in RESTART_PHASES:
            raise ConfigError(
                f"restart phase {self.phase!r}: must be one of {list(RESTART_PHASES)}"
            )
        if self.downtime < 1:
            raise ConfigError(f"restart downtime {self.downtime}: must be at least 1 tick")
        if self.round < 1 or self.aggregator < 0:
            raise ConfigError("restart: round must be >= 1 and aggregator >= 0")


@dataclass
class RestartRecord:
    """One crash-restart that happened (for the run's events and summary)."""

    aggregator: int
    round: int
    phase: str
    crashed_tick: int
    restarted_tick: int
    restored: bool = field(default=False)  # its stable storage held a state to restore


@dataclass(frozen=True)
class DisputeOutcome:
    """How one dispute instance ended."""

    decided: bool
    faulty: bool | None
    certificate: CommitCertificate | None
    decided_by: int | None
    ticks: int
    view: int
    view_changes: int


class Committee:
    """PBFT replicas for every aggregator, on one seeded in-memory network."""

    def __init__(
        self,
        accounts: Sequence[LocalAccount],
        domain: Domain,
        verdicts: Sequence[Callable[[Instance], bool]],
        behaviours: Sequence[str],
        *,
        net: NetConfig | None = None,
        seed: int = 0,
        replica_config: ReplicaConfig | None = None,
        restarts: Sequence[ReplicaRestart] = (),
        store_dir: str | Path | None = None,
    ) -> None:
        if not len(accounts) == len(verdicts) == len(behaviours):
            raise ConfigError("one account, verdict function and behaviour per member")
        committee = [a.address for a in accounts]
        nodes: list[Node] = []
        for i, (account, validate, kind) in enumerate(
            zip(accounts, verdicts, behaviours, strict=True)
        ):
            if kind not in REPLICA_KINDS:
                raise ConfigError(f"unknown PBFT behaviour {kind!r}; known: {list(REPLICA_KINDS)}")
            cls = REPLICA_KINDS[kind]
            if cls is None:
                nodes.append(SilentReplica(i))
            else:
                nodes.append(cls(i, committee, account, domain, validate, replica_config))
        self.domain = domain
        self.accounts = list(accounts)
        self.behaviours = list(behaviours)
        self.verdicts = list(verdicts)
        self.replica_config = replica_config
        self.net = MemNet(nodes, net or NetConfig(), seed=seed)
        for r in restarts:
            if not 0 <= r.aggregator < len(accounts):
                raise ConfigError(f"restart aggregator {r.aggregator}: not a committee member")
        self.pending_restarts = list(restarts)
        self._armed: list[ReplicaRestart] = []
        self.restarts: list[RestartRecord] = []
        if store_dir is not None:
            # durable stable storage, one file per replica (what a process restart reads)
            for i in range(len(nodes)):
                self.net.stores[i] = FileStore(Path(store_dir) / f"replica-{i}.pbft")

    @property
    def nodes(self) -> list[Node]:
        """The current replica of every member (a restart replaces one)."""
        return self.net.nodes

    def _make(self, index: int) -> Callable[[bytes | None], Node]:
        """How member ``index`` is built again from its stable storage after a crash."""

        def make(state: bytes | None) -> Node:
            cls = REPLICA_KINDS[self.behaviours[index]]
            for record in self.restarts:
                if record.aggregator == index and record.restarted_tick < 0:
                    record.restarted_tick = self.net.now
                    record.restored = state is not None
            if cls is None:
                return SilentReplica(index)
            committee = [a.address for a in self.accounts]
            return cls(
                index,
                committee,
                self.accounts[index],
                self.domain,
                self.verdicts[index],
                self.replica_config,
                state=state,
            )

        return make

    def _arm_restarts(self, instance: Instance) -> None:
        """Schedule this dispute's crash-restarts (each happens at most once)."""
        due = [r for r in self.pending_restarts if r.round == instance.round]
        self._armed = due
        if not due:
            self.net.on_action = None
            return
        self.pending_restarts = [r for r in self.pending_restarts if r.round != instance.round]
        watch: dict[int, ReplicaRestart] = {}
        for r in due:
            if RESTART_PHASES[r.phase] is None:
                self._crash_now(r)
            else:
                watch[r.aggregator] = r

        def on_action(src: int, action: Action) -> None:
            r = watch.get(src)
            if r is None or self.net.is_down(src):
                return
            phase = RESTART_PHASES[r.phase]
            assert phase is not None
            if isinstance(action, Decide):
                hit = phase is Decide and action.instance == instance
            elif isinstance(action, Broadcast | Send):
                msg = action.msg
                hit = isinstance(msg, phase) and getattr(msg, "key", None) == instance.key
            else:
                hit = False
            if hit:
                # the message itself still leaves (it was persisted first); then it is down
                del watch[src]
                self._crash_now(r)

        self.net.on_action = on_action

    def _crash_now(self, r: ReplicaRestart) -> None:
        self.restarts.append(RestartRecord(r.aggregator, r.round, r.phase, self.net.now, -1))
        self.net.restart(r.aggregator, self.net.now, self._make(r.aggregator), r.downtime)

    def conflicting_decisions(self) -> list[tuple[int, int, str]]:
        """Disputes ``(round, attempt, digest hex)`` for which two members running the honest
        protocol decided different verdicts (or one decided both): must stay empty."""
        correct = [i for i, b in enumerate(self.behaviours) if b == "honest"]
        keys = {inst.key for i in correct for inst in self.net.decisions[i]}
        out = []
        for key in sorted(keys):
            if len(self.net.verdicts(key, correct)) > 1:
                out.append((key[0], key[1], key[2].hex()))
        for i, key in self.net.flip_flops:
            if i in correct and (key[0], key[1], key[2].hex()) not in out:
                out.append((key[0], key[1], key[2].hex()))
        return out

    def crash(self, index: int) -> None:
        """Silence member ``index`` from now on (a crashed aggregator)."""
        self.net.crash(index)

    def dispute(
        self,
        instance: Instance,
        max_ticks: int = 5000,
        eligible: Callable[[str], bool] | None = None,
    ) -> DisputeOutcome:
        """Run the PBFT instance for a challenged aggregate until a replica decides.

        The outcome's certificate carries only signers for which ``eligible(address)`` holds
        (on-chain: registered and not slashed when ``resolveDispute`` runs): it pools the
        commits of every replica's decision with the endorsements of the honest replicas that
        decided (:func:`consensus.certificate.endorse`), and keeps collecting, while the
        others finish, until ``n - f`` eligible signers are in. Short of that the dispute
        counts as undecided."""
        start = self.net.now

        def decided(net: MemNet) -> bool:
            return any(instance in net.decisions[i] for i in range(len(self.nodes)))

        self._arm_restarts(instance)
        self.net.start(instance)
        done = self.net.run_until(decided, max_ticks)
        view_changes = max(
            (n.stats["view_changes"] for n in self.nodes if isinstance(n, Replica)), default=0
        )
        if not done:
            view = max((n.view for n in self.nodes if isinstance(n, Replica)), default=0)
            return DisputeOutcome(False, None, None, None, self.net.now - start, view, view_changes)
        first = min(i for i in range(len(self.nodes)) if instance in self.net.decisions[i])
        decision = self.net.decisions[first][instance]
        # Let the others finish too, so the committee moves on together (bounded); a member
        # in a crash-restart outage comes back and catches up first.
        self.net.run_until(
            lambda net: (
                all(
                    instance in net.decisions[i]
                    or (i in net.crashed and net.is_down(i))
                    or self.behaviours[i] == "silent"
                    for i in range(len(self.nodes))
                )
                and all(r.restarted_tick >= 0 for r in self.restarts)
            ),
            max_ticks=200 + max((r.downtime for r in self._armed), default=0),
        )
        certificate = self._eligible_certificate(instance, decision.certificate, eligible)
        if certificate is None:
            view = decision.certificate.view
            return DisputeOutcome(False, None, None, None, self.net.now - start, view, view_changes)
        return DisputeOutcome(
            True,
            decision.faulty,
            certificate,
            first,
            self.net.now - start,
            certificate.view,
            view_changes,
        )

    def _eligible_certificate(
        self,
        instance: Instance,
        decided: CommitCertificate,
        eligible: Callable[[str], bool] | None,
    ) -> CommitCertificate | None:
        """``n - f`` eligible signatures over the decided verdict, or None if too few."""
        pool: dict[str, bytes] = {}
        for i, node in enumerate(self.nodes):
            decision = self.net.decisions[i].get(instance)
            if decision is None or not isinstance(node, Replica):
                continue
            cert = decision.certificate
            if (cert.faulty, cert.view) == (decided.faulty, decided.view):
                pool.update(cert.signatures)
            if self.behaviours[i] == "honest" and cert.faulty == decided.faulty:
                address, sig = endorse(decided, node.account, self.domain)
                pool[address] = sig
        return eligible_certificate(decided, pool, eligible, commit_quorum(len(self.accounts)))
