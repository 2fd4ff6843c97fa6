"""One fedchain node as its own OS process.

``python -m fedchain.testnet.node --testnet FILE --name N``.

The process holds only its own key. It reaches the others solely through the chain's
JSON-RPC endpoint, content storage (an IPFS daemon, or a shared store directory) and, for
aggregators, the PBFT network transport. It is driven by chain state (polling narrow views,
never scanning logs), so it can be killed with ``kill -9`` in any phase and restarted: it
resumes from chain + storage state, and never submits anything twice (the node checks the
chain before every submission and the contract refuses duplicates).

Every action is logged as one JSON line on stdout (the testnet redirects it to
``DIR/logs/NAME.log``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eth_account import Account
from web3 import Web3

from adapters.chain import Chain
from adapters.contract import Phase, TaskContract
from adapters.storage import get_by_digest, open_store
from fedchain.config import DemoConfig
from protocol.errors import ChainError, ContractRevert, FedchainError, StorageError
from protocol.manifest import TaskManifest


def log(name: str, action: str, **detail: Any) -> None:
    """Write one JSON event line to stdout (flushed: the process may be killed any time)."""
    record = {"t": round(time.time(), 3), "node": name, "action": action, **detail}
    sys.stdout.write(json.dumps(record, default=str) + "\n")
    sys.stdout.flush()


class NodeProcess:
    """What one node process runs: connection, node object, optional PBFT replica."""

    def __init__(self, spec: dict[str, Any], name: str) -> None:
        entries = {n["name"]: n for n in spec["nodes"]}
        if name not in entries:
            raise FedchainError(f"no node named {name!r} in the testnet file")
        self.spec = spec
        self.entry = entries[name]
        self.name = name
        self.cfg = DemoConfig(**spec["config"])
        account = Account.from_key(self.entry["key"])
        w3 = Web3(Web3.HTTPProvider(spec["rpc_url"], request_kwargs={"timeout": 30}))
        self.chain = Chain(w3, [account], poll_latency=0.02)
        self.account = account
        self.task = TaskContract.at(self.chain, spec["task"])
        self.store = open_store(
            "ipfs:" + spec["ipfs_api"] if spec.get("ipfs_api") else spec["store_dir"]
        )
        digest = self.task.config().rule_params_hash
        self.manifest = TaskManifest.from_bytes(get_by_digest(self.store, digest))
        self.node: Any
        self.replica: Any = None
        from fedchain.private_view import private_views

        # this process's own view of the task's published private material (secagg, HE)
        self.private_view = private_views(self.task, self.store, self.manifest)
        if self.entry["role"] == "client":
            self._make_client()
        elif self.entry["role"] == "key-holder":
            self._make_key_holder()
        else:
            self._make_aggregator()

    def _make_client(self) -> None:
        from clients.models import build_model
        from clients.node import ClientNode
        from clients.training import TrainConfig
        from fedchain.sim.runner import federated_data

        train, _, parts = federated_data(self.cfg)
        index = int(self.entry["index"])
        m = self.manifest
        self.node = ClientNode(
            self.name,
            self.account,
            self.task,
            self.store,
            m,
            train.subset(parts[index]),
            build_model(m.model, m.input_shape, m.num_classes, seed=self.cfg.seed),
            TrainConfig(**m.client_training),
            index=index,
            private=self._client_private(),
        )

    def _client_private(self) -> Any:
        from fedchain.private_view import HePayloads, HeView, SecAggClient, SecAggView
        from privacy.client_keys import ClientSecrets

        view = self.private_view
        if isinstance(view, SecAggView):
            registered = self.task.client_index(self.account.address)
            if registered is None:
                raise FedchainError(f"{self.name} is not a registered client of the task")
            secrets = ClientSecrets(bytes(self.account.key), self.task.address, registered)
            return SecAggClient(view, secrets, self.account)
        if isinstance(view, HeView):
            return HePayloads(self.manifest)
        return None

    def _make_key_holder(self) -> None:
        from phe import paillier

        from aggregators.key_holder import KeyHolderNode
        from fedchain.private_view import task_records

        key = self.entry["he_private_key"]
        public = paillier.PaillierPublicKey(int(key["n"], 16))
        private = paillier.PaillierPrivateKey(public, int(key["p"], 16), int(key["q"], 16))
        self.node = KeyHolderNode(
            self.name,
            self.account,
            self.task,
            task_records(self.task, self.manifest),
            self.store,
            self.manifest,
            private,
        )

    def _make_aggregator(self) -> None:
        from aggregators.behaviours import Behaviour
        from aggregators.node import AggregatorNode

        b = dict(self.entry.get("behaviour") or {})
        if b.get("rounds") is not None:
            b["rounds"] = frozenset(b["rounds"])
        behaviour = Behaviour(**b)
        colluders = frozenset(
            str(n["address"])
            for n in self.spec["nodes"]
            if n["role"] == "aggregator" and (n.get("behaviour") or {}).get("pbft") == "colluding"
        )
        self.node = AggregatorNode(
            self.name,
            self.account,
            self.chain,
            self.task,
            self.store,
            self.manifest,
            behaviour=behaviour,
            colluders=colluders,
            private=self.private_view,
            leave_after_blocks=self.cfg.leave_after_blocks or None,
            fault=self._fault_agent(behaviour),
            dispute=self.cfg.dispute,
        )
        from fedchain.testnet.pbft_service import PbftService

        self.replica = PbftService.for_node(self.spec, self.entry, self.node, self.account)

    def _fault_agent(self, behaviour: Any) -> Any:
        """This aggregator's side of the fault-proof games (``--dispute fault-proof|both``):
        the same player as in-process, against the testnet's FaultGames contract."""
        address = self.spec.get("fault_games")
        if not address:
            return None
        from adapters.faultproof import FaultGamesContract
        from aggregators.fault_agent import FaultAgent
        from fedchain.sim.driver.deployment import CLAIM_BOND, claim_window

        return FaultAgent(
            FaultGamesContract(self.chain, address),
            self.account,
            window=claim_window(self.cfg),
            claim_bond=CLAIM_BOND,
            challenger=behaviour.challenger,
        )

    def run(self, poll: float = 0.1, max_seconds: float | None = None) -> int:
        log(
            self.name,
            "start",
            role=self.entry["role"],
            address=self.account.address,
            round=self._round_if_reachable(),
        )
        restored = getattr(self.replica, "restored", None)
        if restored is not None:
            log(self.name, "pbft-restored", **restored)
        started = time.monotonic()
        try:
            failures = 0
            while True:
                try:
                    for ev in self.node.step():
                        log(self.name, ev.action, round=ev.round, **_detail(ev))
                    if self.replica is not None:
                        for line in self.replica.poll(self.task):
                            log(self.name, **line)
                    if self.task.task_completed() and self._done():
                        log(self.name, "done", round=self.task.current_round())
                        return 0
                    failures = 0
                except (StorageError, ChainError, OSError) as exc:
                    # A daemon or chain node that is slow, restarting or briefly unreachable
                    # (connection refused while anvil restarts from its saved state) is not a
                    # reason to die: back off and retry from chain state.
                    failures += 1
                    log(self.name, "retry", error=str(exc), failures=failures)
                    time.sleep(min(5.0, 0.2 * 2**failures))
                    continue
                if max_seconds is not None and time.monotonic() - started > max_seconds:
                    log(self.name, "timeout", seconds=max_seconds)
                    return 3
                time.sleep(poll)
        except KeyboardInterrupt:
            log(self.name, "interrupted")
            return 130
        finally:
            if self.replica is not None:
                self.replica.close()

    def _round_if_reachable(self) -> int | None:
        """The current round, or None while the chain node is unreachable (a node started
        during an anvil restart must not die before its retry loop)."""
        try:
            return self.task.current_round()
        except (ChainError, OSError):
            return None

    def _done(self) -> bool:
        # The last round is finalized, or the task was aborted (it completed with its
        # current round unfinished, or before start): nothing is left to do for anyone.
        r = self.task.current_round()
        if r == 0 or self.task.phase(r) != Phase.FINALIZED:
            log(self.name, "task-aborted", round=r)
        return True


def _detail(ev: Any) -> dict[str, Any]:
    d = getattr(ev, "detail", {}) or {}
    return {k: v for k, v in d.items() if k not in {"included", "excluded"}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedchain.testnet.node",
        description="Run one testnet node (client or aggregator) as its own process.",
    )
    parser.add_argument("--testnet", required=True, help="the testnet.json written by up")
    parser.add_argument("--name", required=True, help="node name, e.g. aggregator-0, client-3")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between steps")
    parser.add_argument("--max-seconds", type=float, default=None, help="give up after this")
    args = parser.parse_args(argv)
    try:
        spec = json.loads(Path(args.testnet).read_text())
        return NodeProcess(spec, args.name).run(args.poll, args.max_seconds)
    except (FedchainError, ContractRevert) as exc:
        log(args.name, "error", error=str(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main())
