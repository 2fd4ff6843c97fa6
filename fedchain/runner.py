"""The in-process round driver behind ``fedchain demo`` (and, later, ``fedchain run``).

It builds the task (data, model, manifest, initial global state), deploys the contract,
registers clients and aggregators, then repeatedly lets every node take one chain-driven
step. When no node has anything to do, it mines one block so time passes (windows and
deadlines are counted in blocks). After each finalized round it evaluates the new global
model and appends a record to ``rounds.jsonl``; at the end it writes ``summary.json``.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aggregators.node import AggregatorEvent, AggregatorNode
from aggregators.registry import make_rule, rule_id
from clients.data import load_dataset, partition
from clients.models import build_model, get_params, param_spec, set_params
from clients.node import ClientNode
from clients.training import TrainConfig, evaluate
from fedchain.chain import Chain
from fedchain.cid import cid_from_digest, sha256_digest
from fedchain.contract import Phase, TaskConfig, TaskContract
from fedchain.errors import ConfigError, FedchainError
from fedchain.fixedpoint import INT32_MAX, NumericFormat, dequantise, quantise
from fedchain.metrics import PhaseClock, Progress
from fedchain.payloads import GlobalState, ModelLayout, decode_global_state, encode_global_state
from fedchain.storage import ContentStore, LocalStore, get_by_digest, open_store
from fedchain.task import TaskManifest

ROTATIONS = {"round-robin": 0, "random": 1}
WEI_PER_ETH = 10**18


@dataclass
class DemoConfig:
    """Every knob of a demo run (see ``fedchain demo --help``)."""

    clients: int = 10
    aggregators: int = 4
    rounds: int = 5
    dataset: str = "digits"
    partition: str = "iid"
    alpha: float = 0.5
    model: str = "mlp"
    epochs: int = 10
    batch_size: int = 16
    lr: float = 0.1
    momentum: float = 0.9
    prox_mu: float = 0.0
    rule: str = "fedavg"
    rule_params: dict[str, Any] = field(default_factory=dict)
    frac_bits: int = 16
    clip: float = 4.0
    min_updates: int | None = None
    collect_window: int = 50
    submit_timeout: int = 10
    challenge_window: int = 5
    rotation: str = "round-robin"
    seed: int = 0
    out: str = "runs"
    name: str = "demo"
    rpc_url: str | None = None
    funding_key: str | None = None
    store: str | None = None
    max_blocks: int = 100_000

    def validate(self) -> None:
        """Refuse bad values before any work, with the option's name in the message."""
        positive = ("clients", "aggregators", "rounds", "epochs", "batch_size",
                    "collect_window", "submit_timeout", "challenge_window")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if self.rotation not in ROTATIONS:
            raise ConfigError(f"--rotation must be one of {sorted(ROTATIONS)}")
        if self.min_updates is not None and not 1 <= self.min_updates <= self.clients:
            raise ConfigError("--min-updates must be between 1 and --clients")
        if not self.clip > 0:
            raise ConfigError("--clip must be positive")
        if self.clip * 2**self.frac_bits > 2**30:
            raise ConfigError("--clip * 2**frac_bits must not exceed 2**30")
        make_rule(self.rule, self.rule_params)  # unknown rule or bad parameters: fail now


@dataclass
class RunResult:
    """Where a run wrote its outputs, and its summary."""

    run_dir: Path
    summary: dict[str, Any]


def _new_run_dir(out: str, name: str) -> Path:
    base = Path(out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        candidate = base / (f"{stamp}-{name}" + (f"-{i}" if i else ""))
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            continue
    raise ConfigError(f"could not create a fresh run directory under {base}")


class Demo:
    """One demo run: set-up, the round loop, and the run directory."""

    def __init__(self, cfg: DemoConfig, progress: Progress | None = None) -> None:
        cfg.validate()
        self.cfg = cfg
        self.progress = progress or Progress()
        self.clock = PhaseClock()
        self.run_dir = _new_run_dir(cfg.out, cfg.name)
        self.records: list[dict[str, Any]] = []
        self.chosen: dict[tuple[int, int], str] = {}
        self.submissions: dict[tuple[int, int], dict[str, Any]] = {}
        self.timings: dict[str, float] = {}

    # -- set-up ------------------------------------------------------------------------------

    def setup(self) -> None:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.store: ContentStore = (
            open_store(cfg.store) if cfg.store else LocalStore(self.run_dir / "store")
        )
        self.train_data, self.test_data = load_dataset(cfg.dataset, seed=cfg.seed)
        options: dict[str, Any] = {"alpha": cfg.alpha} if cfg.partition == "dirichlet" else {}
        parts = partition(
            cfg.partition,
            labels=self.train_data.y,
            num_clients=cfg.clients,
            seed=cfg.seed,
            **options,
        )
        self.model = build_model(
            cfg.model, self.train_data.input_shape, self.train_data.num_classes, seed=cfg.seed
        )
        self.layout = ModelLayout.from_spec(param_spec(self.model))
        fmt = NumericFormat(cfg.frac_bits, int(round(cfg.clip * 2**cfg.frac_bits)))
        train_cfg = TrainConfig(
            epochs=cfg.epochs,
            batch_size=cfg.batch_size,
            lr=cfg.lr,
            momentum=cfg.momentum,
            prox_mu=cfg.prox_mu,
            seed=cfg.seed,
        )
        # Canonical parameters (typed, defaults included): invalid ones fail here, before any
        # chain work.
        rule_params = make_rule(cfg.rule, cfg.rule_params).params
        self.manifest = TaskManifest(
            rule=cfg.rule,
            rule_params=dict(rule_params),
            numeric=fmt,
            model=cfg.model,
            input_shape=tuple(self.train_data.input_shape),
            num_classes=self.train_data.num_classes,
            layout=self.layout,
            client_training=asdict(train_cfg),
        )
        initial = quantise(self.layout.flatten(get_params(self.model)), cfg.frac_bits, INT32_MAX)
        initial_payload = encode_global_state(self.layout, GlobalState(0, initial, {}))
        self.store.put(initial_payload)
        self.store.put(self.manifest.to_bytes())
        num_accounts = 1 + cfg.aggregators + cfg.clients
        if cfg.rpc_url:
            self.chain = Chain.connect(
                cfg.rpc_url, funding_key=cfg.funding_key, num_accounts=num_accounts, seed=cfg.seed
            )
        else:
            self.chain = Chain.embedded(num_accounts=num_accounts, seed=cfg.seed)
        deployer = self.chain.accounts[0]
        agg_accounts = self.chain.accounts[1 : 1 + cfg.aggregators]
        client_accounts = self.chain.accounts[1 + cfg.aggregators :]
        self.task_config = TaskConfig(
            initial_model_digest=sha256_digest(initial_payload),
            rule_id=rule_id(cfg.rule),
            rule_params_hash=self.manifest.digest,
            num_rounds=cfg.rounds,
            min_updates=cfg.min_updates or cfg.clients,
            max_updates=cfg.clients,
            collect_window=cfg.collect_window,
            submit_timeout=cfg.submit_timeout,
            challenge_window=cfg.challenge_window,
            rotation_policy=ROTATIONS[cfg.rotation],
            rotation_seed=cfg.seed.to_bytes(32, "big"),
            aggregator_stake=WEI_PER_ETH,
            aggregate_bond=WEI_PER_ETH // 10,
            challenge_bond=WEI_PER_ETH // 10,
            timeout_penalty=WEI_PER_ETH // 10,
        )
        self.task = TaskContract.deploy(self.chain, deployer, self.task_config)
        for acct in agg_accounts:
            self.task.register_aggregator(acct)
        for acct in client_accounts:
            self.task.register_client(acct)
        self.aggregators = [
            AggregatorNode(f"aggregator-{i}", acct, self.chain, self.task, self.store,
                           self.manifest, clock=self.clock)
            for i, acct in enumerate(agg_accounts)
        ]
        self.names = {a.address: a.name for a in self.aggregators}
        self.clients = [
            ClientNode(
                f"client-{i}", acct, self.task, self.store, self.manifest,
                self.train_data.subset(parts[i]),
                build_model(cfg.model, self.train_data.input_shape,
                            self.train_data.num_classes, seed=cfg.seed),
                train_cfg, index=i, clock=self.clock,
            )
            for i, acct in enumerate(client_accounts)
        ]
        self.task.start(deployer)
        self.timings["setup"] = time.perf_counter() - t0

    # -- the round loop ----------------------------------------------------------------------

    def run(self) -> RunResult:
        cfg = self.cfg
        start = time.perf_counter()
        self.setup()
        p = self.progress
        p.line(
            f"fedchain demo: {cfg.clients} clients, {cfg.aggregators} aggregators, "
            f"{cfg.rounds} rounds, rule {cfg.rule}, model {cfg.model} on {cfg.dataset} "
            f"({cfg.partition}); task {self.task.address}"
        )
        p.line(f"run directory: {self.run_dir}")
        rounds_path = self.run_dir / "rounds.jsonl"
        with rounds_path.open("w") as rounds_file:
            blocks_mined = 0
            round_started = time.perf_counter()
            round_ = self.task.current_round()
            while not self.task.task_completed():
                acted = False
                for node in self.clients:
                    p.status(f"round {round_}/{cfg.rounds}: {node.name} training")
                    acted |= bool(node.step())
                self._note_chosen(round_)
                events: list[AggregatorEvent] = []
                for agg in self.aggregators:
                    got = agg.step()
                    events += got
                    acted |= bool(got)
                for ev in events:
                    if ev.action == "submitAggregate":
                        self.submissions[(ev.round, ev.detail["attempt"])] = ev.detail
                        p.status(f"round {round_}: aggregate submitted, challenge window open")
                if not acted:
                    self.chain.mine(1)
                    blocks_mined += 1
                    if blocks_mined > cfg.max_blocks:
                        raise FedchainError(f"no progress after {cfg.max_blocks} idle blocks")
                current = self.task.current_round()
                if current != round_ or self.task.task_completed():
                    record = self._record_round(round_, time.perf_counter() - round_started)
                    rounds_file.write(json.dumps(record) + "\n")
                    rounds_file.flush()
                    p.line(
                        f"round {round_}/{cfg.rounds}  aggregator {record['aggregator_name']}"
                        f" (chosen by contract: {'yes' if record['chosen_by_contract'] else 'NO'})"
                        f"  updates {len(record['included'])}/{record['updates_registered']}"
                        f"  acc {record['accuracy']:.4f}  loss {record['loss']:.4f}"
                        f"  gas {record['gas_total']:,}  {record['wall_seconds']:.1f}s"
                    )
                    round_, round_started = current, time.perf_counter()
        self.timings["total"] = time.perf_counter() - start
        summary = self._summary()
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        p.line(
            f"done: {summary['rounds_finalized']}/{cfg.rounds} rounds finalized, final accuracy "
            f"{summary['final_accuracy']:.4f}, total gas {summary['total_gas']:,}, "
            f"{summary['timings']['total']:.1f}s -> {self.run_dir / 'summary.json'}"
        )
        return RunResult(self.run_dir, summary)

    def _note_chosen(self, round_: int) -> None:
        if self.task.phase(round_) == Phase.AGGREGATING:
            chosen = self.task.current_aggregator()
            self.chosen.setdefault((round_, chosen.attempt), chosen.address)

    def _gas_totals(self) -> dict[str, int]:
        return {op: int(s["total"]) for op, s in self.chain.gas.summary().items()}

    def _record_round(self, round_: int, wall: float) -> dict[str, Any]:
        info = self.task.round_info(round_)
        digest = self.task.round_digest(round_)
        with self.clock.phase(round_, "evaluate"):
            state = decode_global_state(self.layout, get_by_digest(self.store, digest))
            params = self.layout.unflatten(dequantise(state.params, self.cfg.frac_bits))
            set_params(self.model, {k: v.astype(np.float32) for k, v in params.items()})
            ev = evaluate(self.model, get_params(self.model), self.test_data)
        gas_now = self._gas_totals()
        previous = self.records[-1]["gas_cumulative"] if self.records else {}
        gas_round = {op: v - previous.get(op, 0) for op, v in gas_now.items()}
        gas_round = {op: v for op, v in gas_round.items() if v}
        updates = self.task.updates(round_)
        submitter = info.aggregator or ""
        chosen = self.chosen.get((round_, info.attempt))
        submission = self.submissions.get((round_, info.attempt), {})
        included = list(submission.get("included", []))
        record = {
            "round": round_,
            "attempt": info.attempt,
            "aggregator": submitter,
            "aggregator_name": self.names.get(submitter, submitter),
            "chosen_by_contract": chosen == submitter,
            "contract_choice": chosen,
            "digest": digest.hex(),
            "cid": cid_from_digest(digest),
            "updates_registered": len(updates),
            "included": included,
            "excluded": submission.get("excluded", {}),
            "verifiers_agreeing": sum(
                1
                for agg in self.aggregators
                if (v := agg.verifications.get((round_, info.attempt))) is not None and v.agrees
            ),
            "accuracy": ev.accuracy,
            "loss": ev.loss,
            "gas": gas_round,
            "gas_total": sum(gas_round.values()),
            "gas_cumulative": gas_now,
            "seconds": self.clock.for_round(round_),
            "wall_seconds": round(wall, 3),
        }
        self.records.append(record)
        return record

    def _summary(self) -> dict[str, Any]:
        last = self.records[-1] if self.records else {}
        phase_totals: dict[str, float] = {}
        for rec in self.records:
            for ph, s in rec["seconds"].items():
                phase_totals[ph] = round(phase_totals.get(ph, 0.0) + s, 4)
        gas = self.chain.gas.summary()
        return {
            "fedchain_version": "0.1.0",
            "config": asdict(self.cfg),
            "task_address": self.task.address,
            "chain_id": int(self.chain.w3.eth.chain_id),
            "backend": {"chain": self.cfg.rpc_url or "embedded eth-tester (py-evm)",
                        "store": repr(self.store)},
            "manifest_digest": self.manifest.digest.hex(),
            "num_parameters": self.layout.size,
            "rounds_requested": self.cfg.rounds,
            "rounds_finalized": len(self.records),
            "all_rounds_finalized": len(self.records) == self.cfg.rounds,
            "all_chosen_by_contract": all(r["chosen_by_contract"] for r in self.records),
            "final_accuracy": last.get("accuracy"),
            "final_loss": last.get("loss"),
            "accuracy_per_round": [r["accuracy"] for r in self.records],
            "final_model_digest": last.get("digest"),
            "final_model_cid": last.get("cid"),
            "total_gas": sum(int(s["total"]) for s in gas.values()),
            "gas_by_operation": gas,
            "timings": {"total": round(self.timings.get("total", 0.0), 3),
                        "setup": round(self.timings.get("setup", 0.0), 3),
                        "phases": phase_totals},
            "machine": {"python": platform.python_version(), "platform": platform.platform()},
        }


def run_demo(cfg: DemoConfig, progress: Progress | None = None) -> RunResult:
    """Run a demo end to end and return its run directory and summary."""
    return Demo(cfg, progress).run()
