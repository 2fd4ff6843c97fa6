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
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from adapters.chain import Chain
from adapters.contract import Phase, TaskConfig, TaskContract
from adapters.storage import ContentStore, LocalStore, get_by_digest, open_store
from aggregators.behaviours import HONEST, Behaviour
from aggregators.node import AggregatorEvent, AggregatorNode, NodeCrashed
from aggregators.registry import make_rule, rule_id
from clients.data import Dataset, load_dataset, partition
from clients.models import build_model, get_params, param_spec, set_params
from clients.node import ClientNode
from clients.training import TrainConfig, evaluate
from consensus.committee import Committee
from consensus.memnet import NetConfig
from consensus.messages import Domain, Instance
from consensus.quorums import commit_quorum, max_faulty
from fedchain.config import ROTATIONS, WEI_PER_ETH, DemoConfig
from fedchain.scenario import Scenario, client_attack_hooks
from protocol.cid import cid_from_digest, sha256_digest
from protocol.errors import ConfigError, FedchainError
from protocol.fixedpoint import INT32_MAX, NumericFormat, dequantise, quantise
from protocol.manifest import TaskManifest
from protocol.metrics import PhaseClock, Progress
from protocol.payloads import (
    GlobalState,
    ModelLayout,
    decode_global_state,
    decode_update,
    encode_global_state,
)

__all__ = ["Demo", "DemoConfig", "RunResult", "run_demo", "run_scenario"]


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


def federated_data(cfg: DemoConfig) -> tuple[Dataset, Dataset, list[np.ndarray]]:
    """The run's train and test sets and each client's index set (a pure function of cfg).

    Every process of a testnet calls this with the same configuration and gets the same
    split, so a client process needs nothing but the configuration and its index.
    """
    train, test = load_dataset(cfg.dataset, seed=cfg.seed)
    options: dict[str, Any] = {"alpha": cfg.alpha} if cfg.partition == "dirichlet" else {}
    parts = partition(
        cfg.partition, labels=train.y, num_clients=cfg.clients, seed=cfg.seed, **options
    )
    return train, test, parts


class Demo:
    """One run: set-up, the round loop, disputes, and the run directory.

    With no behaviours every node is honest (``fedchain demo``); a :class:`Scenario` adds
    faulty aggregators and malicious clients (``fedchain run``).
    """

    def __init__(
        self,
        cfg: DemoConfig,
        progress: Progress | None = None,
        *,
        scenario: Scenario | None = None,
    ) -> None:
        cfg.validate()
        self.cfg = cfg
        self.scenario = scenario or Scenario(cfg)
        self.progress = progress or Progress()
        self.clock = PhaseClock()
        self.run_dir = _new_run_dir(cfg.out, cfg.name)
        self.records: list[dict[str, Any]] = []
        self.chosen: dict[tuple[int, int], str] = {}
        self.attempts: dict[tuple[int, int], dict[str, Any]] = {}
        self.honest_digests: dict[int, bytes] = {}
        self.crashes: list[dict[str, Any]] = []
        self.down: dict[int, int] = {}
        self.timings: dict[str, float] = {}
        self.stalled: str | None = None

    # -- set-up ------------------------------------------------------------------------------

    def setup(self) -> None:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.store: ContentStore = (
            open_store(cfg.store) if cfg.store else LocalStore(self.run_dir / "store")
        )
        self.train_data, self.test_data, self.parts = federated_data(cfg)
        self.model = build_model(
            cfg.model, self.train_data.input_shape, self.train_data.num_classes, seed=cfg.seed
        )
        self.layout = ModelLayout.from_spec(param_spec(self.model))
        fmt = NumericFormat(cfg.frac_bits, round(cfg.clip * 2**cfg.frac_bits))
        # Canonical parameters (typed, defaults included).
        rule_params = make_rule(cfg.rule, cfg.rule_params).params
        # FedProx: the proximal coefficient is a task parameter the clients read from the rule.
        prox_mu = float(rule_params["mu"]) if cfg.rule == "fedprox" else cfg.prox_mu
        self.train_config = TrainConfig(
            epochs=cfg.epochs,
            batch_size=cfg.batch_size,
            lr=cfg.lr,
            momentum=cfg.momentum,
            prox_mu=prox_mu,
            seed=cfg.seed,
        )
        self.manifest = TaskManifest(
            rule=cfg.rule,
            rule_params=dict(rule_params),
            numeric=fmt,
            model=cfg.model,
            input_shape=tuple(self.train_data.input_shape),
            num_classes=self.train_data.num_classes,
            layout=self.layout,
            client_training=asdict(self.train_config),
        )
        initial = quantise(self.layout.flatten(get_params(self.model)), cfg.frac_bits, INT32_MAX)
        initial_payload = encode_global_state(self.layout, GlobalState(0, initial, {}))
        self.store.put(initial_payload)
        self.store.put(self.manifest.to_bytes())
        num_accounts = 1 + cfg.aggregators + cfg.clients
        if cfg.rpc_url:
            from adapters.services import ANVIL_FUNDING_KEY

            self.chain = Chain.connect(
                cfg.rpc_url,
                funding_key=cfg.funding_key or ANVIL_FUNDING_KEY,
                num_accounts=num_accounts,
                seed=cfg.seed,
            )
        else:
            self.chain = Chain.embedded(num_accounts=num_accounts, seed=cfg.seed)
        self.deployer = self.chain.accounts[0]
        self.agg_accounts = self.chain.accounts[1 : 1 + cfg.aggregators]
        self.client_accounts = self.chain.accounts[1 + cfg.aggregators :]
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
        self.task = TaskContract.deploy(self.chain, self.deployer, self.task_config)
        for acct in self.agg_accounts:
            self.task.register_aggregator(acct)
        for acct in self.client_accounts:
            self.task.register_client(acct)
        self.colluders = frozenset(
            self.agg_accounts[i].address
            for i, b in self.scenario.aggregators.items()
            if b.pbft == "colluding"
        )
        self.aggregators = [self._make_aggregator(i) for i in range(cfg.aggregators)]
        self.names = {a.address: a.name for a in self.aggregators}
        # The oracle computes the honest result of every round, for fault accounting only.
        self.oracle = AggregatorNode(
            "oracle", self.agg_accounts[0], self.chain, self.task, self.store, self.manifest
        )
        self.clients = [self._make_client(i) for i in range(cfg.clients)]
        self.domain = Domain(int(self.chain.w3.eth.chain_id), self.task.address)
        net = self.scenario.pbft
        self.committee = Committee(
            self.agg_accounts,
            self.domain,
            [self._verdict_fn(i) for i in range(cfg.aggregators)],
            [self.behaviour(i).pbft for i in range(cfg.aggregators)],
            net=NetConfig(
                drop_prob=net.drop, dup_prob=net.duplicate, max_delay=net.max_delay, gst=net.gst
            ),
            seed=cfg.seed,
        )
        self.task.start(self.deployer)
        self.timings["setup"] = time.perf_counter() - t0

    def behaviour(self, index: int) -> Behaviour:
        return self.scenario.aggregators.get(index, HONEST)

    def _make_aggregator(self, index: int, behaviour: Behaviour | None = None) -> AggregatorNode:
        return AggregatorNode(
            f"aggregator-{index}",
            self.agg_accounts[index],
            self.chain,
            self.task,
            self.store,
            self.manifest,
            clock=self.clock,
            behaviour=behaviour or self.behaviour(index),
            colluders=self.colluders,
        )

    def _verdict_fn(self, index: int) -> Callable[[Instance], bool]:
        def verdict(instance: Instance) -> bool:
            node = self.aggregators[index]
            return node.dispute_verdict(instance.round, instance.attempt, instance.aggregate_digest)

        return verdict

    def _make_client(self, index: int) -> ClientNode:
        cfg = self.cfg
        data = self.train_data.subset(self.parts[index])
        delta_hook = payload_hook = None
        attack = self.scenario.clients.get(index)
        ready = None
        if attack is not None:
            data, delta_hook, payload_hook = client_attack_hooks(
                attack, data, self.layout, seed=cfg.seed * 1000 + index, observe=self._observe
            )
            if attack.omniscient:
                ready = self._others_registered
        return ClientNode(
            f"client-{index}",
            self.client_accounts[index],
            self.task,
            self.store,
            self.manifest,
            data,
            build_model(
                cfg.model, self.train_data.input_shape, self.train_data.num_classes, seed=cfg.seed
            ),
            self.train_config,
            index=index,
            clock=self.clock,
            delta_hook=delta_hook,
            payload_hook=payload_hook,
            ready=ready,
        )

    def _omniscient_count(self) -> int:
        return sum(1 for a in self.scenario.clients.values() if a.omniscient)

    def _others_registered(self, round_: int) -> bool:
        """An omniscient attacker registers once every non-omniscient client has."""
        return self.task.update_count(round_) >= self.cfg.clients - self._omniscient_count()

    def _observe(self, round_: int) -> list[np.ndarray]:
        """The round's registered updates as real-valued flat deltas (public information)."""
        fmt = self.manifest.numeric
        out = []
        for u in self.task.updates(round_):
            try:
                q = decode_update(self.layout, fmt, round_, get_by_digest(self.store, u.digest))
            except FedchainError:
                continue
            out.append(dequantise(q, fmt.frac_bits))
        return out

    # -- the round loop ----------------------------------------------------------------------

    def run(self) -> RunResult:
        cfg = self.cfg
        start = time.perf_counter()
        self.setup()
        p = self.progress
        bad = self.scenario.byzantine_aggregators
        p.line(
            f"fedchain {'run' if self.scenario.source else 'demo'}: {cfg.clients} clients, "
            f"{cfg.aggregators} aggregators{f' ({len(bad)} Byzantine: {bad})' if bad else ''}, "
            f"{cfg.rounds} rounds, rule {cfg.rule}, model {cfg.model} on {cfg.dataset} "
            f"({cfg.partition}); task {self.task.address}"
        )
        p.line(f"run directory: {self.run_dir}")
        with (self.run_dir / "rounds.jsonl").open("w") as rounds_file:
            idle_blocks = 0
            round_started = time.perf_counter()
            round_ = self.task.current_round()
            while not self.task.task_completed() and self.stalled is None:
                acted = False
                for node in self.clients:
                    p.status(f"round {round_}/{cfg.rounds}: {node.name} training")
                    acted |= bool(node.step())
                acted |= self._step_aggregators(round_)
                acted |= self._handle_dispute(round_)
                acted |= self._restart_crashed()
                if not acted:
                    self.chain.mine(1)
                    idle_blocks += 1
                    if idle_blocks > cfg.max_blocks:
                        self.stalled = f"no progress after {cfg.max_blocks} idle blocks"
                else:
                    idle_blocks = 0
                current = self.task.current_round()
                if current != round_ or self.task.task_completed():
                    record = self._record_round(round_, time.perf_counter() - round_started)
                    rounds_file.write(json.dumps(record) + "\n")
                    rounds_file.flush()
                    p.line(self._round_line(record))
                    round_, round_started = current, time.perf_counter()
            if self.stalled is not None:
                p.line(f"STALLED in round {round_}: {self.stalled}")
                record = self._record_round(
                    round_, time.perf_counter() - round_started, finalized=False
                )
                rounds_file.write(json.dumps(record) + "\n")
        self.timings["total"] = time.perf_counter() - start
        summary = self._summary()
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        p.line(
            f"done: {summary['rounds_finalized']}/{cfg.rounds} rounds finalized, final accuracy "
            f"{_fmt(summary['final_accuracy'])}, total gas {summary['total_gas']:,}, "
            f"{summary['timings']['total']:.1f}s -> {self.run_dir / 'summary.json'}"
        )
        faults = summary["faults"]
        if faults["faulty_aggregates"] or faults["challenges"]:
            p.line(
                f"faults: {faults['faulty_aggregates']} faulty aggregates, "
                f"{faults['rejected']} rejected, {faults['false_rejections']} false rejections, "
                f"{faults['faulty_finalized']} faulty finalized, {faults['withheld']} withheld"
                + (" — SAFETY VIOLATED" if summary["safety_violated"] else "")
                + (" — LIVENESS LOST" if summary["liveness_lost"] else "")
            )
        return RunResult(self.run_dir, summary)

    def _round_line(self, record: dict[str, Any]) -> str:
        faults = [a for a in record["attempts"] if a.get("faulty") or a.get("challenges")]
        extra = ""
        for a in faults:
            verdicts = [d.get("verdict") for d in a.get("disputes", [])]
            extra += (
                f"  [attempt {a['attempt']}: {a.get('aggregator_name')} "
                f"{a.get('behaviour', 'honest')}"
                + (" withheld" if a.get("withheld") else "")
                + (f", challenged, verdict {verdicts}" if verdicts else "")
                + "]"
            )
        return (
            f"round {record['round']}/{self.cfg.rounds}  aggregator {record['aggregator_name']}"
            f" (chosen by contract: {'yes' if record['chosen_by_contract'] else 'NO'})"
            f"  updates {len(record['included'])}/{record['updates_registered']}"
            f"  acc {_fmt(record['accuracy'])}  loss {_fmt(record['loss'])}"
            f"  gas {record['gas_total']:,}  {record['wall_seconds']:.1f}s{extra}"
        )

    def _step_aggregators(self, round_: int) -> bool:
        acted = False
        for index, agg in enumerate(self.aggregators):
            if index in self.down:
                continue
            self._note_chosen(round_)  # the contract's choice, read independently of the node
            try:
                events = agg.step()
            except NodeCrashed as exc:
                block = self.chain.block_number()
                self.down[index] = block
                self.crashes.append(
                    {"aggregator": agg.name, "round": round_, "block": block, "what": str(exc)}
                )
                self.progress.line(f"  {exc} (block {block})")
                acted = True
                continue
            for ev in events:
                self._absorb(index, ev)
            acted |= bool(events)
        return acted

    def _restart_crashed(self) -> bool:
        acted = False
        block = self.chain.block_number()
        for index, crashed_at in list(self.down.items()):
            after = self.behaviour(index).restart_after_blocks
            if after is not None and block >= crashed_at + after:
                # A fresh process: no memory but its key; it resumes from chain + storage.
                self.aggregators[index] = self._make_aggregator(
                    index, replace(self.behaviour(index), crash_at=None)
                )
                del self.down[index]
                self.crashes[-1]["restarted_block"] = block
                self.progress.line(f"  aggregator-{index} restarted (block {block})")
                acted = True
        return acted

    def _attempt(self, round_: int, attempt: int) -> dict[str, Any]:
        return self.attempts.setdefault(
            (round_, attempt),
            {"round": round_, "attempt": attempt, "challenges": [], "disputes": []},
        )

    def _absorb(self, index: int, ev: AggregatorEvent) -> None:
        name = self.aggregators[index].name
        if ev.action == "submitAggregate":
            rec = self._attempt(ev.round, ev.detail["attempt"])
            # The oracle re-executes while the round's inputs are current (before finalize).
            honest_digest = self.oracle.compute(ev.round)[0].digest
            self.honest_digests[ev.round] = honest_digest
            available = self.store.has(cid_from_digest(bytes.fromhex(ev.detail["digest"])))
            rec.update(
                aggregator=self.aggregators[index].address,
                aggregator_name=name,
                behaviour=self.behaviour(index).publish
                if self.behaviour(index).faulty_in(ev.round)
                else "honest",
                digest=ev.detail["digest"],
                honest_digest=honest_digest.hex(),
                available=available,
                faulty=ev.detail["digest"] != honest_digest.hex() or not available,
                submit_block=ev.detail["block"],
                submit_time=time.perf_counter(),
                included=ev.detail["included"],
                excluded=ev.detail["excluded"],
                gas_submit=ev.detail["gas"],
            )
        elif ev.action == "withhold":
            rec = self._attempt(ev.round, ev.detail["attempt"])
            rec.update(
                aggregator=self.aggregators[index].address,
                aggregator_name=name,
                behaviour="withhold",
                withheld=True,
                faulty=True,
            )
        elif ev.action == "advanceAttempt":
            rec = self._attempt(ev.round, ev.detail["attempt"])
            rec.setdefault("aggregator", ev.detail["laggard"])
            rec.setdefault("aggregator_name", self.names.get(ev.detail["laggard"] or "", "-"))
            rec.update(
                timed_out=True, advanced_block=ev.detail["block"], gas_advance=ev.detail["gas"]
            )
        elif ev.action == "challenge":
            rec = self._attempt(ev.round, ev.detail["attempt"])
            rec["challenges"].append(
                {
                    "challenger": name,
                    "block": ev.detail["block"],
                    "gas": ev.detail["gas"],
                    "time": time.perf_counter(),
                }
            )

    def _handle_dispute(self, round_: int) -> bool:
        if self.task.phase(round_) != Phase.DISPUTED:
            return False
        info = self.task.round_info(round_)
        attempt, digest = info.submission_attempt, info.aggregate_digest
        instance = Instance(self.task.address, self.domain.chain_id, round_, attempt, digest)
        outcome = self.committee.dispute(instance, max_ticks=self.scenario.pbft.max_ticks)
        rec = self._attempt(round_, attempt)
        dispute: dict[str, Any] = {
            "decided": outcome.decided,
            "verdict": None
            if outcome.faulty is None
            else ("faulty" if outcome.faulty else "upheld"),
            "view": outcome.view,
            "view_changes": outcome.view_changes,
            "pbft_ticks": outcome.ticks,
        }
        rec["disputes"].append(dispute)
        if not outcome.decided or outcome.certificate is None:
            self.stalled = (
                f"the dispute over round {round_} attempt {attempt} gathered no quorum of "
                f"{commit_quorum(len(self.aggregators))} PBFT votes within "
                f"{outcome.ticks} ticks (more than f = {max_faulty(len(self.aggregators))} "
                f"Byzantine aggregators?)"
            )
            return False
        sender = self.agg_accounts[outcome.decided_by or 0]
        receipt = self.task.resolve_dispute(sender, *outcome.certificate.to_contract_args())
        dispute.update(
            resolve_block=int(receipt["blockNumber"]),
            gas_resolve=int(receipt["gasUsed"]),
            signers=len(outcome.certificate.signatures),
            resolve_time=time.perf_counter(),
        )
        return True

    def _note_chosen(self, round_: int) -> None:
        if self.task.phase(round_) == Phase.AGGREGATING:
            chosen = self.task.current_aggregator()
            if chosen.address is not None:
                self.chosen.setdefault((round_, chosen.attempt), chosen.address)

    def _gas_totals(self) -> dict[str, int]:
        return {op: int(s["total"]) for op, s in self.chain.gas.summary().items()}

    def _attempt_records(self, round_: int) -> list[dict[str, Any]]:
        out = []
        for (r, _), rec in sorted(self.attempts.items()):
            if r != round_:
                continue
            rec = dict(rec)
            submit_time = rec.pop("submit_time", None)
            challenge_time = None
            if rec["challenges"]:
                first = rec["challenges"][0]
                challenge_time = first.pop("time", None)
                if "submit_block" in rec:
                    rec["blocks_to_challenge"] = first["block"] - rec["submit_block"]
            for d in rec["disputes"]:
                t = d.pop("resolve_time", None)
                if t is not None and submit_time is not None:
                    d["seconds_from_submission"] = round(t - submit_time, 3)
                if "resolve_block" in d and "submit_block" in rec:
                    d["blocks_from_submission"] = d["resolve_block"] - rec["submit_block"]
            if challenge_time is not None and submit_time is not None:
                rec["seconds_to_challenge"] = round(challenge_time - submit_time, 3)
            rec["dispute_gas"] = sum(c.get("gas") or 0 for c in rec["challenges"]) + sum(
                d.get("gas_resolve", 0) for d in rec["disputes"]
            )
            rec["rejected"] = any(d.get("verdict") == "faulty" for d in rec["disputes"])
            out.append(rec)
        return out

    def _record_round(self, round_: int, wall: float, finalized: bool = True) -> dict[str, Any]:
        info = self.task.round_info(round_)
        digest = self.task.round_digest(round_) if finalized else info.aggregate_digest
        accuracy = loss = None
        if finalized:
            with self.clock.phase(round_, "evaluate"):
                state = decode_global_state(self.layout, get_by_digest(self.store, digest))
                params = self.layout.unflatten(dequantise(state.params, self.cfg.frac_bits))
                set_params(self.model, {k: v.astype(np.float32) for k, v in params.items()})
                ev = evaluate(self.model, get_params(self.model), self.test_data)
            accuracy, loss = ev.accuracy, ev.loss
        gas_now = self._gas_totals()
        previous = self.records[-1]["gas_cumulative"] if self.records else {}
        gas_round = {op: v - previous.get(op, 0) for op, v in gas_now.items()}
        gas_round = {op: v for op, v in gas_round.items() if v}
        attempts = self._attempt_records(round_)
        final = next((a for a in attempts if a.get("digest") == digest.hex()), {})
        submitter = info.aggregator or ""
        chosen = self.chosen.get((round_, info.submission_attempt))
        honest_digest = self.honest_digests.get(round_) if finalized else None
        record = {
            "round": round_,
            "finalized": finalized,
            "attempt": info.submission_attempt,
            "aggregator": submitter,
            "aggregator_name": self.names.get(submitter, submitter),
            "chosen_by_contract": chosen == submitter,
            "contract_choice": chosen,
            "digest": digest.hex(),
            "cid": cid_from_digest(digest),
            "honest_digest": honest_digest.hex() if honest_digest else None,
            "faulty_finalized": finalized and honest_digest is not None and digest != honest_digest,
            "updates_registered": len(self.task.updates(round_)),
            "included": final.get("included", []),
            "excluded": final.get("excluded", {}),
            "verifiers_agreeing": sum(
                1
                for agg in self.aggregators
                if (v := agg.verifications.get((round_, info.submission_attempt))) is not None
                and v.agrees
            ),
            "attempts": attempts,
            "accuracy": accuracy,
            "loss": loss,
            "gas": gas_round,
            "gas_total": sum(gas_round.values()),
            "gas_cumulative": gas_now,
            "seconds": self.clock.for_round(round_),
            "wall_seconds": round(wall, 3),
        }
        self.records.append(record)
        return record

    def _summary(self) -> dict[str, Any]:
        finalized = [r for r in self.records if r["finalized"]]
        last = finalized[-1] if finalized else {}
        phase_totals: dict[str, float] = {}
        for rec in self.records:
            for ph, sec in rec["seconds"].items():
                phase_totals[ph] = round(phase_totals.get(ph, 0.0) + sec, 4)
        gas = self.chain.gas.summary()
        attempts = [a for r in self.records for a in r["attempts"]]
        faulty = [a for a in attempts if a.get("faulty")]
        submitted_faulty = [a for a in faulty if not a.get("withheld")]
        detect_blocks = [
            d["blocks_from_submission"]
            for a in submitted_faulty
            for d in a["disputes"]
            if d.get("verdict") == "faulty" and "blocks_from_submission" in d
        ]
        detect_seconds = [
            d["seconds_from_submission"]
            for a in submitted_faulty
            for d in a["disputes"]
            if d.get("verdict") == "faulty" and "seconds_from_submission" in d
        ]
        faults = {
            "faulty_aggregates": len(submitted_faulty),
            "withheld": sum(1 for a in faulty if a.get("withheld")),
            "timeouts": sum(1 for a in attempts if a.get("timed_out")),
            "challenges": sum(len(a["challenges"]) for a in attempts),
            "disputes": sum(len(a["disputes"]) for a in attempts),
            "rejected": sum(1 for a in submitted_faulty if a["rejected"]),
            "false_rejections": sum(1 for a in attempts if a["rejected"] and not a.get("faulty")),
            "faulty_finalized": sum(1 for r in finalized if r["faulty_finalized"]),
            "view_changes": sum(d["view_changes"] for a in attempts for d in a["disputes"]),
            "detection_blocks_mean": _mean(detect_blocks),
            "detection_seconds_mean": _mean(detect_seconds),
            "dispute_gas_total": sum(a["dispute_gas"] for a in attempts),
            "crashes": self.crashes,
        }
        return {
            "fedchain_version": "0.1.0",
            "config": {
                **asdict(self.cfg),
                "funding_key": "<redacted>" if self.cfg.funding_key else None,
            },
            "scenario": self.scenario.describe(),
            "task_address": self.task.address,
            "chain_id": int(self.chain.w3.eth.chain_id),
            "backend": {
                "chain": self.cfg.rpc_url or "embedded eth-tester (py-evm)",
                "store": repr(self.store),
            },
            "manifest_digest": self.manifest.digest.hex(),
            "num_parameters": self.layout.size,
            "rounds_requested": self.cfg.rounds,
            "rounds_finalized": len(finalized),
            "all_rounds_finalized": len(finalized) == self.cfg.rounds,
            "all_chosen_by_contract": all(r["chosen_by_contract"] for r in finalized),
            "safety_violated": faults["faulty_finalized"] > 0,
            "liveness_lost": self.stalled is not None,
            "stalled": self.stalled,
            "faults": faults,
            "final_accuracy": last.get("accuracy"),
            "final_loss": last.get("loss"),
            "accuracy_per_round": [r["accuracy"] for r in finalized],
            "final_model_digest": last.get("digest"),
            "final_model_cid": last.get("cid"),
            "total_gas": sum(int(s["total"]) for s in gas.values()),
            "gas_by_operation": gas,
            "timings": {
                "total": round(self.timings.get("total", 0.0), 3),
                "setup": round(self.timings.get("setup", 0.0), 3),
                "phases": phase_totals,
            },
            "machine": {"python": platform.python_version(), "platform": platform.platform()},
        }


def _mean(values: list[float] | list[int]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def run_demo(cfg: DemoConfig, progress: Progress | None = None) -> RunResult:
    """Run a demo end to end and return its run directory and summary."""
    return Demo(cfg, progress).run()


def run_scenario(scenario: Scenario, progress: Progress | None = None) -> RunResult:
    """Run a scenario (faulty aggregators, malicious clients) and return its results."""
    return Demo(scenario.config, progress, scenario=scenario).run()
