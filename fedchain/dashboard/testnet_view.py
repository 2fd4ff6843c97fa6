"""A testnet followed live: its nodes' JSON logs and its chain, folded like a run's events.

A testnet writes no ``events.jsonl``. :class:`NodeLogMapper` (pure) turns each line a node
process logs (``DIR/logs/NODE.log``, see :mod:`fedchain.testnet.node`) into the event kinds of
:mod:`fedchain.sim.driver.events`: refused registrations, attestations, submissions (with the
node's own "faulty" flag), timeouts, challenges, dispute expiry, and the PBFT members' own
verdicts, decisions and view changes. :class:`ChainWatcher` reads the chain once per new
block: the round's phase and attempt, the contract's chosen aggregator, stakes and credits,
and the contract's own event logs for what only the chain settles (``UpdatesRegistered``:
every registered update, in a relayed batch or alone, whoever sent it; ``RoundFinalized``,
``DisputeResolved``, ``Slashed``, ``EquivocationSlashed``, ``TaskCompleted``); a finalized
global model is evaluated on the task's test set as the in-process driver does.
:class:`TestnetSource` puts both into one :class:`~fedchain.dashboard.model.RunView` and
reports which node processes are alive.
"""

from __future__ import annotations

import json
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fedchain.dashboard.model import PHASE_ORDER, RunView
from fedchain.dashboard.sources import LineTail, read_json

#: Seconds between two looks at a testnet's chain (a new block triggers the reads).
CHAIN_POLL_SECONDS = 0.1
#: Contract events after which stakes, flags or credits may differ (they are read again).
MONEY_EVENTS = frozenset(
    {
        "AggregateSubmitted",
        "AttemptAdvanced",
        "Challenged",
        "DisputeResolved",
        "DisputeExpired",
        "Slashed",
        "EquivocationSlashed",
        "RoundFinalized",
        "StakeToppedUp",
        "StakeReleased",
        "Withdrawal",
    }
)
#: Node log actions that map field for field: action -> (event kind, the field naming the
#: node, {event field: log field}).
SIMPLE_ACTIONS: dict[str, tuple[str, str, dict[str, str]]] = {
    "attest": ("attested", "aggregator", {"held": "held", "updates": "updates"}),
    "challenge": ("challenge", "challenger", {"attempt": "attempt", "block": "block"}),
    "expireDispute": ("dispute_expired", "by", {"attempt": "attempt", "block": "block"}),
    "pbft-decided": (
        "pbft_decided",
        "member",
        {"attempt": "attempt", "verdict": "verdict", "view": "view"},
    ),
}
#: Node log actions that only tell about the process (shown in the nodes table and feed).
PROCESS_ACTIONS = frozenset({"start", "done", "error", "timeout", "retry", "interrupted"})


class NodeLogMapper:
    """Node log lines to dashboard events (remembers node names by address)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.names = {str(n["address"]): str(n["name"]) for n in spec.get("nodes", [])}
        self.behaviours = {
            str(n["name"]): dict(n.get("behaviour") or {})
            for n in spec.get("nodes", [])
            if n.get("role") == "aggregator"
        }

    def name(self, address: Any) -> str | None:
        return None if address is None else self.names.get(str(address), str(address))

    def events(self, line: dict[str, Any]) -> list[dict[str, Any]]:
        """The events one log line stands for (often none), plus its gas if it sent one."""
        out = self._events(line)
        gas = line.get("gas")
        if isinstance(gas, int) and not isinstance(gas, bool):
            op = str(line.get("action"))
            out.append({"t": line.get("t"), "kind": "gas", "operation": op, "gas": gas})
        return out

    def _events(self, line: dict[str, Any]) -> list[dict[str, Any]]:
        node = str(line.get("node", "?"))
        action = str(line.get("action", ""))
        base = {"t": line.get("t"), "round": line.get("round")}
        attempt = line.get("attempt")
        if action in PROCESS_ACTIONS:
            return [{**base, "kind": "node", "node": node, "action": action}]
        if action == "submitUpdate-refused":
            return [{**base, "kind": "client_refused", "client": node}]
        if action in SIMPLE_ACTIONS:
            kind, node_field, fields = SIMPLE_ACTIONS[action]
            event = {**base, "kind": kind, node_field: node}
            event.update({name: line.get(key) for name, key in fields.items()})
            return [event]
        if action.startswith("game-") and action != "game-open":
            # a fault-proof move of this aggregator process (issue 22)
            return [
                {
                    **base,
                    "kind": "game_move",
                    "attempt": attempt,
                    "player": node,
                    "move": action.removeprefix("game-"),
                    "role": line.get("role"),
                    "id": line.get("id"),
                    "gas": line.get("gas"),
                }
            ]
        if action == "submitAggregate":
            honest = line.get("honest")
            faulty = None if honest is None else not honest
            publish = self.behaviours.get(node, {}).get("publish", "honest")
            return [
                {
                    **base,
                    "kind": "aggregate_submitted",
                    "attempt": attempt,
                    "aggregator": node,
                    "digest": line.get("digest"),
                    "faulty": faulty,
                    "behaviour": publish if faulty else "honest",
                    "block": line.get("block"),
                    "gas": line.get("gas"),
                }
            ]
        if action == "advanceAttempt":
            return [
                {
                    **base,
                    "kind": "timeout",
                    "attempt": attempt,
                    "aggregator": self.name(line.get("laggard")),
                    "block": line.get("block"),
                }
            ]
        if action == "pbft-start":
            return [
                {
                    **base,
                    "kind": "pbft_vote",
                    "attempt": attempt,
                    "member": node,
                    "verdict": line.get("my_verdict"),
                    "pbft": self.behaviours.get(node, {}).get("pbft", "honest"),
                }
            ]
        if action == "pbft-view":
            return [
                {
                    "t": line.get("t"),
                    "kind": "pbft_view",
                    "member": node,
                    "view": line.get("view"),
                    "view_changes": line.get("view_changes"),
                }
            ]
        return []


def run_started(spec: dict[str, Any], name: str) -> dict[str, Any]:
    """The ``run_started`` event of a testnet, from its ``testnet.json``."""
    cfg = spec.get("config") or {}
    aggs = [n for n in spec.get("nodes", []) if n.get("role") == "aggregator"]
    return {
        "t": spec.get("started"),
        "kind": "run_started",
        "name": name,
        "run_kind": "testnet",
        "task": spec.get("task"),
        "chain_id": spec.get("chain_id"),
        "rounds": cfg.get("rounds"),
        "clients": sum(1 for n in spec.get("nodes", []) if n.get("role") == "client"),
        "rule": cfg.get("rule"),
        "aggregators": [{"name": n["name"], "address": n["address"]} for n in aggs],
        "byzantine": [int(n["index"]) for n in aggs if n.get("behaviour")],
    }


class ChainWatcher:
    """Reads a testnet task's chain once per new block and reports what changed as events."""

    def __init__(self, spec: dict[str, Any], mapper: NodeLogMapper, chain: Any = None) -> None:
        """Watch the task of ``spec`` on ``chain`` (default: its ``rpc_url`` over HTTP)."""
        from adapters.chain import Chain
        from adapters.contract import TaskContract

        self.spec = spec
        self.mapper = mapper
        if chain is None:
            from web3 import Web3

            w3 = Web3(Web3.HTTPProvider(spec["rpc_url"], request_kwargs={"timeout": 5}))
            chain = Chain(w3, [])
        self.chain: Chain = chain
        self.task = TaskContract.at(self.chain, spec["task"])
        self.members = [
            str(n["address"])
            for n in sorted(
                (n for n in spec["nodes"] if n.get("role") == "aggregator"),
                key=lambda n: int(n["index"]),
            )
        ]
        self.last_block = -1
        self.status: dict[str, Any] = {}
        self.logs_from = 0
        self.phase_key: tuple[int, int, int] = (0, 0, -1)
        self.chosen: set[tuple[int, int]] = set()
        self.stakes: tuple[dict[str, Any], int] | None = None
        self.money_moved = False  # a contract event since the last read of the stakes
        self._block_senders: tuple[int, dict[bytes, str]] = (-1, {})
        # Finalized models are evaluated in a worker process (torch and the test set load
        # there, off this process's GIL), reported later as ``round_evaluated`` events.
        self.pool = ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")
        )
        self.pending: dict[int, Future[tuple[float | None, float | None]]] = {}

    def config(self) -> dict[str, Any]:
        """Bonds and windows of the task (the testnet's ``run_started`` extras)."""
        tc = self.task.config()
        return {
            "bonds": {
                "stake": tc.aggregator_stake,
                "aggregate_bond": tc.aggregate_bond,
                "challenge_bond": tc.challenge_bond,
                "timeout_penalty": tc.timeout_penalty,
            },
            "windows": {
                "collect": tc.collect_window,
                "attest": tc.attest_window,
                "submit_timeout": tc.submit_timeout,
                "challenge": tc.challenge_window,
                "dispute_timeout": tc.dispute_timeout,
            },
        }

    def poll(
        self, emit: Callable[[list[dict[str, Any]]], None] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Events since the last poll, and the chain's status line (block, round, phase).

        ``emit`` receives the contract's own events as soon as they are read, before the
        slower view calls (the page shows them without waiting for those).
        """
        from adapters.contract import Phase

        now = time.time()
        block = self.chain.block_number()
        if block == self.last_block:
            return self._evaluated(), self.status
        self.last_block = block
        events = self._logs(block, now)  # chain order first: they carry phase changes too
        if emit is not None and events:
            emit(events)
            events = []
        r = self.task.current_round()
        status: dict[str, Any] = {
            "block": block,
            "round": r,
            "completed": self.task.task_completed(),
        }
        self.status = status
        if r > 0:
            info = self.task.round_info(r)
            phase = info.phase.name.lower()
            attempt = (
                info.submission_attempt
                if info.phase in (Phase.SUBMITTED, Phase.DISPUTED)
                else info.attempt
            )
            status["phase"] = phase
            events += self._phase(r, attempt, phase, now)
            if info.phase == Phase.AGGREGATING:
                chosen = self.task.current_aggregator()
                if chosen.address is not None and (r, chosen.attempt) not in self.chosen:
                    self.chosen.add((r, chosen.attempt))
                    events.append(
                        {
                            "t": now,
                            "kind": "chosen",
                            "round": r,
                            "attempt": chosen.attempt,
                            "aggregator": self.mapper.name(chosen.address),
                            "deadline_block": chosen.deadline_block,
                        }
                    )
        events += self._evaluated()
        if self.stakes is None or self.money_moved:
            events += self._stakes(now)
        return events, status

    def _stakes(self, t: float) -> list[dict[str, Any]]:
        """A ``stakes`` event if a stake, flag or credit changed."""
        self.money_moved = False
        stakes = {}
        for address in self.members:
            ai = self.task.aggregator_info(address)
            stakes[self.mapper.name(address) or address] = {
                "stake": ai.stake,
                "active": ai.active,
                "slashed": ai.slashed,
                "credits": self.task.credits(address),
            }
        treasury = self.task.credits(self.task.owner())
        if (stakes, treasury) == self.stakes:
            return []
        self.stakes = (stakes, treasury)
        return [{"t": t, "kind": "stakes", "aggregators": stakes, "treasury": treasury}]

    def _phase(self, round_: int, attempt: int, phase: str, t: float) -> list[dict[str, Any]]:
        """A ``phase`` event if (round, attempt, phase) moves forward, else none: the phase
        history stays in protocol order when logs and views report the same change."""
        if phase not in PHASE_ORDER or phase == "finalized":
            return []
        key = (round_, attempt, PHASE_ORDER.index(phase))
        if key <= self.phase_key:
            return []
        self.phase_key = key
        return [{"t": t, "kind": "phase", "round": round_, "attempt": attempt, "phase": phase}]

    def _logs(self, block: int, now: float) -> list[dict[str, Any]]:
        """The contract's settled events in blocks [logs_from, block].

        Events of the first poll (a dashboard opened on a running or finished testnet)
        carry their block's timestamp; later ones the time they were seen.
        """
        catching_up = self.logs_from == 0
        logs = self.chain.w3.eth.get_logs(
            {"address": self.task.address, "fromBlock": self.logs_from, "toBlock": block}  # type: ignore[typeddict-item]
        )
        self.logs_from = block + 1
        out: list[dict[str, Any]] = []
        last_round: int | None = None
        for log in logs:
            t = self._block_time(int(log["blockNumber"])) if catching_up else now
            for ev in self.task.events({"logs": [log]}):
                self.money_moved |= ev.name in MONEY_EVENTS
                if ev.name == "UpdatesRegistered":
                    out += self._registered(ev.args, log, t)
                    continue
                for event in self._chain_event(ev.name, ev.args, t, last_round):
                    last_round = event.get("round") or last_round
                    out.append(event)
        return out

    def _registered(self, a: Any, log: Any, t: float) -> list[dict[str, Any]]:
        """``update_registered`` events of one ``UpdatesRegistered`` event: its updates, in
        a relayer's ``submitUpdates`` batch or the client's own ``submitUpdate`` (a lone
        update is relayed when someone else sent its transaction)."""
        from adapters.records import decode_update_entries

        round_ = int(a["round"])
        entries = decode_update_entries(int(a["firstIndex"]), bytes(a["entries"]))
        if not entries:
            return []
        relayed = len(entries) > 1
        if not relayed:
            sender = self._senders(int(log["blockNumber"])).get(bytes(log["transactionHash"]))
            relayed = str(sender).lower() != entries[0].client.lower()
        return [
            {
                "t": t,
                "kind": "update_registered",
                "round": round_,
                "client": self.mapper.name(u.client),
                "digest": u.digest.hex(),
                "num_samples": u.num_samples,
                "relayed": relayed,
                "index": u.index,
                "batch": entries[0].index,
                "batch_size": len(entries),
                "block": int(log["blockNumber"]),
            }
            for u in entries
        ]

    def _senders(self, number: int) -> dict[bytes, str]:
        """Transaction hash -> sender of block ``number`` (one JSON-RPC call per block, kept
        for the block's other registrations)."""
        if self._block_senders[0] != number:
            block = self.chain.w3.eth.get_block(number, full_transactions=True)
            senders = {
                bytes(tx["hash"]): str(tx["from"])
                for tx in block["transactions"]
                if not isinstance(tx, bytes)  # full transactions, not bare hashes
            }
            self._block_senders = (number, senders)
        return self._block_senders[1]

    def _block_time(self, number: int) -> float:
        return float(self.chain.w3.eth.get_block(number)["timestamp"])

    def _chain_event(
        self, name: str, a: Any, t: float, last_round: int | None
    ) -> list[dict[str, Any]]:
        """The dashboard events of one decoded contract event (phase changes included)."""
        if name == "RoundOpened":
            return self._phase(int(a["round"]), 0, "collecting", t)
        if name == "UpdatesAttested":
            return self._phase(int(a["round"]), 0, "attesting", t)
        if name == "AggregateSubmitted":
            return self._phase(int(a["round"]), int(a["attempt"]), "submitted", t)
        if name == "Challenged":
            return self._phase(int(a["round"]), int(a["attempt"]), "disputed", t)
        if name == "AttemptAdvanced":
            return self._phase(int(a["round"]), int(a["newAttempt"]), "aggregating", t)
        if name == "DisputeExpired":
            return self._phase(int(a["round"]), int(a["attempt"]) + 1, "aggregating", t)
        if name == "RoundFinalized":
            round_ = int(a["round"])
            self.pending[round_] = self.pool.submit(
                evaluate_in_worker, json.dumps(self.spec), bytes(a["digest"])
            )
            final = {
                "t": t,
                "kind": "round_finalized",
                "round": round_,
                "aggregator": self.mapper.name(a["aggregator"]),
                "digest": bytes(a["digest"]).hex(),
                "accuracy": None,
                "loss": None,
            }
            return [final]
        if name == "DisputeResolved":
            round_, attempt = int(a["round"]), int(a["attempt"])
            resolved = {
                "t": t,
                "kind": "dispute_resolved",
                "round": round_,
                "attempt": attempt,
                "verdict": "faulty" if a["faulty"] else "upheld",
                "view": int(a["viewNumber"]),
                "challenger": self.mapper.name(a["challenger"]),
            }
            # a rejected aggregate re-opens the round for the next attempt
            after = self._phase(round_, attempt + 1, "aggregating", t) if a["faulty"] else []
            return [resolved, *after]
        if name == "Slashed":  # emitted inside resolveDispute / slashEquivocation
            slashed = {
                "t": t,
                "kind": "slashed",
                "round": last_round,
                "aggregator": self.mapper.name(a["aggregator"]),
                "amount": int(a["amount"]),
            }
            return [slashed]
        if name == "EquivocationSlashed":
            kind = ("pre-prepare", "prepare", "commit")[min(int(a["kind"]), 2)]
            equivocation = {
                "t": t,
                "kind": "equivocation_slashed",
                "offender": self.mapper.name(a["aggregator"]),
                "reporter": self.mapper.name(a["reporter"]),
                "message": kind,
                "gas": None,
            }
            return [equivocation]
        if name == "TaskCompleted":
            return [{"t": t, "kind": "run_finished", "rounds_finalized": int(a["numRounds"])}]
        return []

    def _evaluated(self) -> list[dict[str, Any]]:
        """``round_evaluated`` events of the evaluations finished since the last call."""
        out = []
        for round_, future in list(self.pending.items()):
            if future.done():
                del self.pending[round_]
                accuracy, loss = future.result()
                out.append(
                    {
                        "t": time.time(),
                        "kind": "round_evaluated",
                        "round": round_,
                        "accuracy": accuracy,
                        "loss": loss,
                    }
                )
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


_EVALUATORS: dict[str, ModelEvaluator] = {}


def evaluate_in_worker(spec_json: str, digest: bytes) -> tuple[float | None, float | None]:
    """Accuracy and loss of a finalized global model (runs in the evaluation process; None
    if the model cannot be read)."""
    from protocol.errors import FedchainError

    try:
        if spec_json not in _EVALUATORS:
            _EVALUATORS[spec_json] = ModelEvaluator(json.loads(spec_json))
        accuracy, loss = _EVALUATORS[spec_json](digest)
    except FedchainError:
        return None, None
    return float(accuracy), float(loss)


class ModelEvaluator:
    """Evaluates a testnet's global models on its test set, as the in-process driver does."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from adapters.storage import open_store
        from clients.models import build_model, param_spec
        from fedchain.config import DemoConfig
        from fedchain.sim.driver.deployment import federated_data
        from protocol.payloads import ModelLayout

        self.cfg = DemoConfig(**spec["config"])
        _, self.test, _ = federated_data(self.cfg)
        self.model = build_model(
            self.cfg.model, self.test.input_shape, self.test.num_classes, seed=self.cfg.seed
        )
        self.layout = ModelLayout.from_spec(param_spec(self.model))
        self.store = open_store(
            "ipfs:" + spec["ipfs_api"] if spec.get("ipfs_api") else spec["store_dir"]
        )

    def __call__(self, digest: bytes) -> tuple[float, float]:
        from fedchain.sim.driver.records import evaluate_global_state

        return evaluate_global_state(
            self.store, digest, self.layout, self.cfg.frac_bits, self.model, self.test
        )


class TestnetSource:
    """A testnet directory followed into a :class:`RunView` (node logs + chain).

    The chain is read by a background thread (:class:`ChainWatcher`, every
    ``CHAIN_POLL_SECONDS``); :meth:`refresh` only reads new log lines, takes what the
    thread found, and checks the PID files, so a node's log line reaches the page without
    waiting for JSON-RPC calls.
    """

    def __init__(self, path: Path, *, watch: bool = True) -> None:
        self.path = path
        #: May :meth:`refresh` start the chain thread (and with it the evaluation worker)?
        self.may_watch = watch
        self.spec = read_json(path / "testnet.json") or {}
        self.mapper = NodeLogMapper(self.spec)
        self.view = RunView()
        self.view.apply(run_started(self.spec, path.name))
        self.tails = {
            str(n["name"]): LineTail(path / "logs" / f"{n['name']}.log")
            for n in self.spec.get("nodes", [])
        }
        self.chain_status: dict[str, Any] = {}
        self.chain_error: str | None = None
        self.processes: dict[str, dict[str, Any]] = {}
        self.version = 0
        self._found: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.settled = threading.Event()

    def node_processes(self) -> dict[str, dict[str, Any]]:
        """Every node and service: role, pid, running (from the PID files)."""
        from adapters.services import is_running
        from fedchain.testnet import cluster as testnet

        out: dict[str, dict[str, Any]] = {}
        for name, svc in (self.spec.get("services") or {}).items():
            pid = svc.get("pid")
            out[name] = {"role": "service", "pid": pid, "running": bool(pid) and is_running(pid)}
        for n in self.spec.get("nodes", []):
            pid = testnet.node_pid(self.path, n["name"])
            out[n["name"]] = {
                "role": n.get("role"),
                "pid": pid,
                "running": pid is not None and is_running(pid),
                "behaviour": n.get("behaviour") or {},
            }
        return out

    def _watch_chain(self) -> None:
        """The chain thread: poll, hand over what changed, back off while anvil is down."""
        from web3.exceptions import Web3Exception

        from protocol.errors import FedchainError

        watcher: ChainWatcher | None = None
        try:
            while not self._stop.is_set():
                try:
                    if watcher is None:
                        watcher = ChainWatcher(self.spec, self.mapper)
                        self._found.put(("config", watcher.config()))
                    events, status = watcher.poll(
                        lambda found: self._found.put(("chain", (found, None)))
                    )
                    self._found.put(("chain", (events, status)))
                    if not events and not watcher.pending:
                        self.settled.set()  # caught up, nothing being evaluated
                except (FedchainError, OSError, ValueError, Web3Exception) as exc:
                    # anvil stopped or restarting (requests' errors are OSErrors): say so
                    self._found.put(("error", f"chain unreachable: {type(exc).__name__}: {exc}"))
                self._stop.wait(CHAIN_POLL_SECONDS)
        finally:
            if watcher is not None:
                watcher.close()

    def refresh(self) -> bool:
        """Read new log lines and what the chain thread found; True if the page changed."""
        if self._thread is None and self.may_watch and self.spec.get("task"):
            self._thread = threading.Thread(
                target=self._watch_chain, name="fedchain-chain-watch", daemon=True
            )
            self._thread.start()
        events: list[dict[str, Any]] = []
        for tail in self.tails.values():
            for line in tail.read():
                events += self.mapper.events(line)
        changed = False
        while True:
            try:
                what, found = self._found.get_nowait()
            except queue.Empty:
                break
            if what == "config":
                self.view.info.update(found)
            elif what == "error":
                changed |= self.chain_error != found[:200]
                self.chain_error = found[:200]
                continue
            else:
                chain_events, status = found
                events += chain_events
                if status is not None:
                    changed |= status != self.chain_status
                    self.chain_status = status
            changed |= self.chain_error is not None
            self.chain_error = None
        processes = self.node_processes()
        changed |= bool(events) or processes != self.processes
        self.processes = processes
        events.sort(key=lambda e: e.get("t") or 0.0)
        self.view.apply_all(events)
        if changed:
            self.version += 1
        return changed

    def settle(self, timeout: float = 60.0) -> None:
        """Refresh until the chain thread has caught up and evaluated every finalized
        model (a snapshot for the HTML report), or ``timeout`` seconds passed."""
        self.refresh()
        self.settled.wait(timeout)
        self.refresh()

    def close(self) -> None:
        self._stop.set()
