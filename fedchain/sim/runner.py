"""The in-process round driver behind ``fedchain demo`` and ``fedchain run``.

:class:`Demo` composes the pieces of :mod:`fedchain.sim.driver`: it deploys the task
(:mod:`~fedchain.sim.driver.deployment`), builds the nodes and the PBFT committee, runs the block
loop (:mod:`~fedchain.sim.driver.loop`) with disputes (:mod:`~fedchain.sim.driver.disputes`) and
fault records (:mod:`~fedchain.sim.driver.faults`), and writes the run directory: ``rounds.jsonl``
and ``summary.json`` (:mod:`~fedchain.sim.driver.records`) and the live ``events.jsonl``
(:mod:`~fedchain.sim.driver.events`).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from adapters.storage import get_by_digest
from aggregators.behaviours import Behaviour
from aggregators.key_holder import KeyHolderNode
from aggregators.node import AggregatorNode
from clients.node import ClientEvent, ClientNode
from consensus.committee import Committee
from consensus.memnet import NetConfig
from consensus.messages import Instance
from fedchain.config import DemoConfig
from fedchain.private_view import SecAggView
from fedchain.sim.driver.deployment import deploy, federated_data, privacy_plan
from fedchain.sim.driver.disputes import DisputeDriver
from fedchain.sim.driver.engine import make_engine
from fedchain.sim.driver.events import EventLog, emit_stakes
from fedchain.sim.driver.faults import FaultLog
from fedchain.sim.driver.fleet import ClientFleet
from fedchain.sim.driver.loop import BlockLoop
from fedchain.sim.driver.private import PrivateDriver
from fedchain.sim.driver.records import RoundRecorder, build_summary
from fedchain.sim.scenario import Collusion, Scenario, rule_simulator
from protocol.errors import ConfigError, FedchainError
from protocol.fixedpoint import dequantise
from protocol.metrics import PhaseClock, Progress
from protocol.payloads import decode_update

__all__ = ["Demo", "DemoConfig", "RunResult", "federated_data", "run_demo", "run_scenario"]


@dataclass
class RunResult:
    """Where a run wrote its outputs, and its summary."""

    run_dir: Path
    summary: dict[str, Any]


def new_run_dir(out: str, name: str) -> Path:
    """A fresh ``OUT/<timestamp>-<name>[-i]`` directory (``ConfigError`` if impossible)."""
    base = Path(out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        candidate = base / (f"{stamp}-{name}" + (f"-{i}" if i else ""))
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(
                f"--out {out!r}: cannot create a run directory there ({exc.strerror})"
            ) from exc
    raise ConfigError(f"--out {out!r}: could not create a fresh run directory")


class Demo:
    """One run: set-up, the round loop, disputes, and the run directory.

    With no behaviours every node is honest (``fedchain demo``); a :class:`Scenario` adds
    faulty aggregators and malicious clients (``fedchain run``). After :meth:`setup` the
    deployment's parts are attributes (``chain``, ``task``, ``store``, ``manifest``,
    ``layout``, ``clients``, ``aggregators``, ``agg_accounts``, ``client_accounts``) and the
    clients are bound to the training ``engine`` (``--engine``) through ``fleet``;
    :meth:`run` closes the engine at the end (call :meth:`close` after a bare ``setup``).
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
        self.run_dir = new_run_dir(cfg.out, cfg.name)
        self.timings: dict[str, float] = {}
        self.stalled: str | None = None
        self.events = EventLog(self.run_dir / "events.jsonl")

    # -- set-up ------------------------------------------------------------------------------

    def setup(self, start: bool = True) -> None:
        """Deploy the task and build every node and the committee; then (``start``) run the
        secure-aggregation key set-up of the in-process clients and start the task."""
        t0 = time.perf_counter()
        cfg = self.cfg
        d = self.deployment = deploy(cfg, self.scenario, self.run_dir)
        self.privacy_rounds = privacy_plan(cfg)[1]
        self.privacy = d.privacy  # as the manifest binds it (with the HE public key)
        self.store, self.chain, self.task = d.store, d.chain, d.task
        self.manifest, self.layout = d.manifest, d.layout
        self.agg_accounts, self.client_accounts = d.agg_accounts, d.client_accounts
        self.aggregators = [d.make_aggregator(i, self.clock) for i in range(cfg.aggregators)]
        self.names = {a.address: a.name for a in self.aggregators}
        self.collusion = Collusion(
            self.scenario.clients,
            [a.address for a in self.client_accounts],
            self._observe,
            cfg.clients,
            rule_simulator(cfg.rule, cfg.rule_params, cfg.frac_bits, cfg.clip),
        )
        self.clients = [
            d.make_client(i, self.clock, collusion=self.collusion, ready=self._others_registered)
            for i in range(cfg.clients)
        ]
        self.faults = FaultLog(
            self.task, self.store, d.make_oracle(), self.names, self.events, self.clock
        )
        self.faults.games = d.games
        net = self.scenario.pbft
        self.committee = Committee(
            self.agg_accounts,
            d.domain,
            [self._verdict_fn(i) for i in range(cfg.aggregators)],
            [d.behaviour(i).pbft for i in range(cfg.aggregators)],
            net=NetConfig(
                drop_prob=net.drop, dup_prob=net.duplicate, max_delay=net.max_delay, gst=net.gst
            ),
            seed=cfg.seed,
            restarts=net.restart,
            store_dir=self._pbft_store_dir() if net.restart else None,
        )
        self.disputes = DisputeDriver(
            self.task,
            self.committee,
            d.domain,
            self.agg_accounts,
            self.names,
            self.faults,
            self.events,
            max_ticks=net.max_ticks,
        )
        self.disputes.games = d.games if cfg.dispute == "both" else None
        self.recorder = RoundRecorder(
            cfg,
            self.chain,
            self.task,
            self.store,
            self.layout,
            d.new_model(),
            d.test_data,
            self.clock,
            self.faults,
            self.names,
            privacy=self.privacy,
        )
        # The training engine starts last: a local Ray instance is not left behind if the
        # deployment fails, and a bad --ray-address fails before the task starts.
        self.engine = make_engine(cfg.engine, ray_address=cfg.ray_address, ray_cpus=cfg.ray_cpus)
        try:
            self.fleet = ClientFleet(
                self.clients,
                self.task,
                self.store,
                self.manifest,
                self.engine,
                d.model_spec,
                self.clock,
                self.progress,
                on_registered=self._registered,
                relayer=d.deployer if cfg.update_batch else None,
                batch=cfg.update_batch or 1,
            )
        except BaseException:
            self.close()
            raise
        self.key_holders = d.make_key_holders(self.clock)
        view = d.private_view()
        self.private_driver = None
        if isinstance(view, SecAggView):
            self.private_driver = PrivateDriver(
                view, self.clients, d.deployer, self.task, self.events, self.clock
            )
        if start and cfg.start_task:
            if self.private_driver is not None:
                self.private_driver.setup()
            self.task.start(d.deployer)
        self.timings["setup"] = time.perf_counter() - t0

    def behaviour(self, index: int) -> Behaviour:
        return self.deployment.behaviour(index)

    def _restart_aggregator(self, index: int, behaviour: Behaviour) -> AggregatorNode:
        return self.deployment.make_aggregator(index, self.clock, behaviour)

    def _verdict_fn(self, index: int) -> Callable[[Instance], bool]:
        def verdict(instance: Instance) -> bool:
            node = self.aggregators[index]
            return node.dispute_verdict(instance.round, instance.attempt, instance.aggregate_digest)

        return verdict

    def _omniscient_count(self) -> int:
        return sum(1 for a in self.scenario.clients.values() if a.omniscient)

    def _others_registered(self, round_: int) -> bool:
        """An omniscient attacker registers once every non-omniscient client has."""
        return self.task.update_count(round_) >= self.cfg.clients - self._omniscient_count()

    def _observe(self, round_: int) -> list[tuple[str, np.ndarray]]:
        """The round's registered updates as (client, real-valued flat delta): public."""
        fmt = self.manifest.numeric
        out = []
        for u in self.task.updates(round_):
            try:
                q = decode_update(self.layout, fmt, round_, get_by_digest(self.store, u.digest))
            except FedchainError:
                continue
            out.append((u.client, dequantise(q, fmt.frac_bits)))
        return out

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Set up, drive every round to the end (or a stall), write the run directory."""
        cfg = self.cfg
        start = time.perf_counter()
        try:
            self.setup()
        except FedchainError:
            self._discard_empty_run_dir()
            raise
        p = self.progress
        bad = self.scenario.byzantine_aggregators
        p.line(
            f"fedchain {'run' if self.scenario.source else 'demo'}: {cfg.clients} clients, "
            f"{cfg.aggregators} aggregators{f' ({len(bad)} Byzantine: {bad})' if bad else ''}, "
            f"{cfg.rounds} rounds, rule {cfg.rule}, model {cfg.model} on {cfg.dataset} "
            f"({cfg.partition}); task {self.task.address}"
        )
        p.line(f"run directory: {self.run_dir}")
        if self.privacy.enabled:
            p.line(self._privacy_line())
        tc = self.task.config()
        self.events.emit(
            "run_started",
            name=cfg.name,
            run_kind="run" if self.scenario.source else "demo",
            task=self.task.address,
            chain_id=int(self.chain.w3.eth.chain_id),
            rounds=cfg.rounds,
            clients=cfg.clients,
            rule=cfg.rule,
            aggregators=[{"name": a.name, "address": a.address} for a in self.aggregators],
            byzantine=bad,
            bonds={
                "stake": tc.aggregator_stake,
                "aggregate_bond": tc.aggregate_bond,
                "challenge_bond": tc.challenge_bond,
                "timeout_penalty": tc.timeout_penalty,
            },
            windows={
                "collect": tc.collect_window,
                "attest": tc.attest_window,
                "submit_timeout": tc.submit_timeout,
                "challenge": tc.challenge_window,
                "dispute_timeout": tc.dispute_timeout,
            },
        )
        self._emit_stakes()
        try:
            with (self.run_dir / "rounds.jsonl").open("w") as rounds_file:
                self._drive(rounds_file)
        finally:
            self.close()
        self.timings["total"] = time.perf_counter() - start
        summary = build_summary(
            cfg,
            self.scenario,
            self.chain,
            self.task,
            self.store,
            self.manifest,
            self.layout,
            self.recorder.records,
            self.faults,
            self.timings,
            self.stalled,
            privacy=self.privacy,
        )
        #: the round ``abortTask`` ended the task in (0: never started), None if it was not
        summary["aborted_in_round"] = self.loop.aborted if hasattr(self, "loop") else None
        #: replica crash-restarts and any dispute two correct replicas decided differently
        summary["pbft_restarts"] = [asdict(r) for r in self.committee.restarts]
        summary["pbft_conflicting_decisions"] = self.committee.conflicting_decisions()
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        self.events.emit(
            "run_finished",
            rounds_finalized=summary["rounds_finalized"],
            final_accuracy=summary["final_accuracy"],
            summary=str(self.run_dir / "summary.json"),
        )
        self.events.close()
        p.line(
            f"done: {summary['rounds_finalized']}/{cfg.rounds} rounds finalized, final accuracy "
            f"{_fmt(summary['final_accuracy'])}, total gas {summary['total_gas']:,}, "
            f"{summary['timings']['total']:.1f}s -> {self.run_dir / 'summary.json'}"
        )
        if summary.get("stopped_at") is not None:
            p.line(
                f"stopping rule: the update norm stayed below {cfg.stop_norm:g} for "
                f"{cfg.stop_patience} rounds; the task completed at round {summary['stopped_at']}"
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

    def _drive(self, rounds_file: IO[str]) -> None:
        """Run the block loop to the end or a stall."""
        cfg = self.cfg
        self.loop = BlockLoop(
            self.chain,
            self.task,
            self.fleet,
            self.aggregators,
            self.behaviour,
            self._restart_aggregator,
            self.disputes,
            self.faults,
            self.events,
            self.progress,
            self.clock,
            rounds=cfg.rounds,
            max_blocks=cfg.max_blocks,
            extra=self._private_steps(),
        )
        if self.privacy_rounds < cfg.rounds:
            self.loop.stop_after = self.privacy_rounds
        self.loop.run(lambda r, wall, fin: self._end_round(rounds_file, r, wall, fin))
        if self.loop.stop_after is not None and self.loop.stalled is None and self.privacy.is_dp:
            spent = self.privacy.accountant().epsilon(self.privacy_rounds)
            self.progress.line(
                f"privacy budget spent: epsilon {spent:.4g} after round {self.privacy_rounds} "
                f"(target {self.privacy.target_epsilon:g}, delta {self.privacy.target_delta:g});"
                f" stopping before round {self.privacy_rounds + 1} of {cfg.rounds}"
            )
            self.events.emit("privacy_budget_exhausted", round=self.privacy_rounds, epsilon=spent)
        self.stalled = self.loop.stalled

    def _private_steps(self) -> list[Callable[[], bool]]:
        """The per-block steps of a private task: the clients' records, the key holder."""
        steps: list[Callable[[], bool]] = []
        if self.private_driver is not None:
            steps.append(self.private_driver.step)
        for holder in self.key_holders:  # the key holder, or each committee member

            def decrypt(holder: KeyHolderNode = holder) -> bool:
                events = holder.step()
                for ev in events:
                    self.events.emit(
                        "key_holder",
                        node=holder.name,
                        round=ev.round,
                        action=ev.action,
                        **ev.detail,
                    )
                    if ev.action != "publishDecryption":
                        self.progress.line(f"  {holder.name}, round {ev.round}: {ev.detail}")
                return bool(events)

            steps.append(decrypt)
        return steps

    def _privacy_line(self) -> str:
        spec = self.privacy
        hiding = ""
        if "secagg" in spec.components:
            hiding = (
                f"secure aggregation of {spec.num_clients} clients (threshold {spec.threshold}: "
                "aggregators unmask only the sum)"
            )
        elif "he" in spec.components:
            hiding = (
                f"Paillier HE for {spec.num_clients} clients (the key holder decrypts only "
                f"sums of at least {spec.threshold})"
            )
        if not spec.is_dp:
            return f"privacy: {hiding}; no DP noise"
        acc = spec.accountant()
        target = f"target epsilon {spec.target_epsilon:g}, " if spec.target_epsilon else ""
        clip = f"clip norm {spec.clip_norm:g}" + (" (adaptive)" if spec.adaptive_clip else "")
        if spec.distributed:
            noise = (
                f"distributed DP, Skellam shares (scale {spec.ddp_scale}, noise multiplier "
                f"{spec.noise_multiplier:.4g}, tolerating {spec.dropout_fraction:g} dropouts) "
                f"with {hiding}"
            )
        else:
            kind = "sigma" if spec.mechanism == "gaussian" else "b"
            noise = (
                f"local DP, {spec.mechanism} noise, noise multiplier "
                f"{spec.noise_multiplier:.4g} ({kind} {spec.noise_scale:.4g}"
                + (" at the initial clip norm)" if spec.adaptive_clip else ")")
            )
        return (
            f"privacy: {noise}, {clip}; {target}epsilon after {self.privacy_rounds} round(s) "
            f"{acc.epsilon(self.privacy_rounds):.4g} at delta {spec.target_delta:g} ({acc.name})"
        )

    def _pbft_store_dir(self) -> str:
        """A temporary directory for the replicas' stable storage (crash-restart scenarios:
        a restarted replica is built from its file there), removed by :meth:`close`."""
        tmp = tempfile.TemporaryDirectory(prefix="fedchain-pbft-")
        self._pbft_tmp: tempfile.TemporaryDirectory[str] | None = tmp
        return tmp.name

    def close(self) -> None:
        """Release the training engine (a local Ray instance is shut down) and the PBFT
        stable-storage directory; idempotent."""
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()
        tmp = getattr(self, "_pbft_tmp", None)
        if tmp is not None:
            tmp.cleanup()
            self._pbft_tmp = None

    def _registered(self, node: ClientNode, ev: ClientEvent) -> None:
        if ev.action != "submitUpdate":
            self.events.emit("client_refused", round=ev.round, client=node.name)
            return
        self.events.emit(
            "update_registered",
            round=ev.round,
            client=node.name,
            digest=ev.detail.get("digest"),
            num_samples=ev.detail.get("num_samples"),
            relayed=bool(ev.detail.get("relayed")),
            **{k: ev.detail[k] for k in ("index", "batch", "batch_size") if k in ev.detail},
        )

    def _discard_empty_run_dir(self) -> None:
        """A run that failed before its first block leaves no directory behind."""
        self.events.close()
        leftovers = {p.name for p in self.run_dir.iterdir()} - {"events.jsonl", "store"}
        if not leftovers:
            import shutil

            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _end_round(self, out: IO[str], round_: int, wall: float, finalized: bool) -> None:
        record = self.recorder.record(round_, wall, self.aggregators, finalized=finalized)
        out.write(json.dumps(record) + "\n")
        out.flush()
        if finalized:
            self.progress.line(self._round_line(record))
            self.events.emit("phase", round=round_, attempt=record["attempt"], phase="finalized")
            self.events.emit(
                "round_finalized",
                round=round_,
                attempt=record["attempt"],
                aggregator=record["aggregator_name"],
                accuracy=record["accuracy"],
                loss=record["loss"],
                gas=record["gas"],
                digest=record["digest"],
                wall_seconds=record["wall_seconds"],
            )
            self._emit_stakes()

    def _emit_stakes(self) -> None:
        emit_stakes(self.events, self.task, {a.address: a.name for a in self.aggregators})

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
            f"  gas {record['gas_total']:,}  {record['wall_seconds']:.1f}s"
            + (f"  eps {pr['epsilon']:.3g}" if (pr := record["privacy"]).get("epsilon") else "")
            + extra
        )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def run_demo(cfg: DemoConfig, progress: Progress | None = None) -> RunResult:
    """Run a demo end to end and return its run directory and summary."""
    return Demo(cfg, progress).run()


def run_scenario(scenario: Scenario, progress: Progress | None = None) -> RunResult:
    """Run a scenario (faulty aggregators, malicious clients) and return its results."""
    return Demo(scenario.config, progress, scenario=scenario).run()
