"""The aggregator committee's PBFT, driven in-process for scenario runs.

One :class:`Committee` holds a long-lived replica per aggregator (honest, or one of the
Byzantine kinds of :mod:`consensus.pbft`) on a seeded :class:`~consensus.memnet.MemNet`, so a
run's disputes are a sequence of PBFT instances with checkpoints, exactly as separate
processes would run them over :mod:`consensus.tcp`. Each honest replica's ``validate`` is its
aggregator's own re-execution verdict. :meth:`Committee.dispute` runs one instance until some
replica decides (its commit certificate is what goes on-chain) or the tick budget runs out,
which is what happens when no side can gather ``n - f`` votes: the dispute stalls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from eth_account.signers.local import LocalAccount

from consensus.certificate import CommitCertificate, eligible_certificate, endorse
from consensus.memnet import MemNet, NetConfig
from consensus.messages import Commit, Domain, Instance, Message, Prepare, sign
from consensus.pbft import (
    Action,
    Broadcast,
    EquivocatingPrimary,
    LyingVoter,
    Node,
    Replica,
    ReplicaConfig,
    SilentReplica,
)
from consensus.quorums import commit_quorum
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
        self.nodes = nodes
        self.net = MemNet(nodes, net or NetConfig(), seed=seed)

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
        # Let the others finish too, so the committee moves on together (bounded).
        self.net.run_until(
            lambda net: all(
                instance in net.decisions[i] or net.is_down(i) or self.behaviours[i] == "silent"
                for i in range(len(self.nodes))
            ),
            max_ticks=200,
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
