"""An aggregator process's PBFT replica on the TCP transport, driven by chain state.

When the node sees its round ``DISPUTED`` on-chain it re-executes the round (in the main
thread), records its verdict, and hands the dispute instance to its replica, which runs on
:class:`consensus.tcp.ThreadedTcpNode` in a background thread. When the replica decides, the
node submits the commit certificate with ``resolveDispute`` (a revert because another
member submitted first is expected and ignored).
"""

from __future__ import annotations

import queue
import socket
from typing import Any

from eth_account.signers.local import LocalAccount

from adapters.contract import Phase, TaskContract
from consensus.certificate import eligible_certificate, endorse
from consensus.committee import REPLICA_KINDS
from consensus.messages import Domain, Instance
from consensus.pbft import Decide, Node, Replica, SilentReplica
from consensus.tcp import ThreadedTcpNode
from fedchain.testnet.netem import pbft_peers
from protocol.errors import ConsensusError, ContractRevert


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assign_ports(spec: dict[str, Any]) -> None:
    """Give every aggregator of a testnet spec a loopback PBFT port."""
    for node in spec["nodes"]:
        if node["role"] == "aggregator" and not node.get("pbft_port"):
            node["pbft_port"] = _free_port()


class PbftService:
    """One aggregator's replica, its TCP transport, and the chain glue."""

    def __init__(
        self,
        index: int,
        committee: list[str],
        peers: dict[int, tuple[str, int]],
        account: LocalAccount,
        domain: Domain,
        node: Any,
        kind: str = "honest",
    ) -> None:
        self.node = node
        self.account = account
        self.domain = domain
        self.verdicts: dict[Instance, bool] = {}
        self.started: set[Instance] = set()
        self.certs: dict[Instance, Decide] = {}
        self._last_try: dict[Instance, int] = {}
        self._decided: queue.Queue[Decide] = queue.Queue()
        cls = REPLICA_KINDS.get(kind, None)
        replica: Node
        if cls is None:
            replica = SilentReplica(index)
        else:
            replica = cls(index, committee, account, domain, self._validate)
        self.replica = replica
        self._view = 0
        self.tcp = ThreadedTcpNode(
            replica,
            listen=peers[index],
            on_decide=self._decided.put,
        )
        self.tcp.start()
        self.tcp.set_peers(peers)

    @classmethod
    def for_node(
        cls, spec: dict[str, Any], entry: dict[str, Any], node: Any, account: LocalAccount
    ) -> PbftService:
        aggs = sorted(
            (n for n in spec["nodes"] if n["role"] == "aggregator"), key=lambda n: n["index"]
        )
        committee = [n["address"] for n in aggs]
        peers = pbft_peers(spec, int(entry["index"]))  # via WAN proxies, if any
        domain = Domain(int(spec["chain_id"]), spec["task"])
        return cls(
            int(entry["index"]), committee, peers, account, domain, node, node.behaviour.pbft
        )

    def _validate(self, instance: Instance) -> bool:
        # Runs on the transport thread: only read what the main thread computed.
        if instance not in self.verdicts:
            raise ConsensusError("verdict not computed yet")
        return self.verdicts[instance]

    def poll(self, task: TaskContract) -> list[dict[str, Any]]:
        """Start PBFT for a newly disputed round; submit certificates of decided ones."""
        lines: list[dict[str, Any]] = []
        r = task.current_round()
        if r and task.phase(r) == Phase.DISPUTED:
            info = task.round_info(r)
            inst = Instance(
                self.domain.verifying_contract,
                self.domain.chain_id,
                r,
                info.submission_attempt,
                info.aggregate_digest,
            )
            if inst not in self.started:
                self.verdicts[inst] = self.node.dispute_verdict(
                    r, info.submission_attempt, info.aggregate_digest
                )
                self.started.add(inst)
                self.tcp.submit(inst)
                lines.append(
                    {
                        "action": "pbft-start",
                        "round": r,
                        "attempt": info.submission_attempt,
                        "my_verdict": "faulty" if self.verdicts[inst] else "upheld",
                    }
                )
            elif inst in self.certs:
                # Challenged again after a decision (e.g. a second frivolous challenge):
                # the same certificate resolves it.
                lines += self._resolve(task, self.certs[inst])
        view = getattr(self.replica, "view", 0)
        if view != self._view:  # the replica moved to a new view (read across threads: an int)
            self._view = view
            stats = getattr(self.replica, "stats", {})
            lines.append(
                {"action": "pbft-view", "view": view, "view_changes": stats.get("view_changes")}
            )
        while True:
            try:
                decision = self._decided.get_nowait()
            except queue.Empty:
                break
            self.certs[decision.instance] = decision
            lines.append(
                {
                    "action": "pbft-decided",
                    "round": decision.instance.round,
                    "attempt": decision.instance.attempt,
                    "verdict": "faulty" if decision.faulty else "upheld",
                    "view": decision.certificate.view,
                }
            )
            if task.phase(decision.instance.round) == Phase.DISPUTED:
                lines += self._resolve(task, decision)
        return lines

    def _resolve(self, task: TaskContract, decision: Decide) -> list[dict[str, Any]]:
        inst = decision.instance
        block = task.chain.block_number()
        if self._last_try.get(inst) == block:  # at most one attempt per block
            return []
        self._last_try[inst] = block
        line: dict[str, Any] = {
            "action": "resolveDispute",
            "round": inst.round,
            "attempt": inst.attempt,
        }
        # Only members eligible on-chain now may sign (a slashed one's vote is refused). The
        # pool: the decision's certificate, every matching commit that reached this replica
        # after it decided (honest members broadcast their commits to all), and this node's
        # own endorsement of the decided verdict. Submit once n - f eligible signers are in;
        # otherwise the next poll looks again (more commits may arrive), and another member's
        # decision or the dispute timeout settles it.
        decided = decision.certificate
        pool = dict(decided.signatures)
        pool.update(self.late_commits(decision))
        address, sig = endorse(decided, self.account, self.domain)
        pool[address] = sig

        def eligible(signer: str) -> bool:
            info = task.aggregator_info(signer)
            return bool(info.registered and not info.slashed)

        need = task.commit_quorum()
        cert = eligible_certificate(decided, pool, eligible, need)
        if cert is None:
            count = sum(1 for a in pool if eligible(a))
            line.update(action="resolveDispute-waiting", eligible=count, quorum=need)
            return [line]
        try:
            receipt = task.resolve_dispute(self.account, *cert.to_contract_args())
            line["gas"] = int(receipt["gasUsed"])
        except ContractRevert as exc:
            line["action"] = "resolveDispute-refused"
            line["error"] = exc.error_name
        return [line]

    def late_commits(self, decision: Decide) -> tuple[tuple[str, bytes], ...]:
        """Signatures over the decided verdict that this replica holds beyond its decision's
        certificate (read on the transport's thread); none from a replica without a log."""
        key, cert = decision.instance.key, decision.certificate

        def read(replica: Node) -> tuple[tuple[str, bytes], ...]:
            if not isinstance(replica, Replica):
                return ()
            return replica.matching_commits(key, cert.faulty, cert.view)

        try:
            return self.tcp.call(read)
        except (TimeoutError, RuntimeError):  # transport stopping: keep the certificate alone
            return ()

    def close(self) -> None:
        self.tcp.stop()
