"""Round records (``rounds.jsonl``) and the run summary (``summary.json``).

:class:`RoundRecorder` evaluates each finalized global model on the test set and writes one
JSON-ready record per round: the attempt that won, the contract's choice, digests, included
and excluded updates, verifiers agreeing, accuracy, loss, gas and phase seconds.
:func:`build_summary` folds the records into the run's summary.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from adapters.chain import Chain
from adapters.contract import TaskContract
from adapters.storage import ContentStore, get_by_digest, resolve_cid
from aggregators.node import AggregatorNode
from clients.data import Dataset
from clients.models import get_params, set_params
from clients.training import evaluate
from fedchain.config import DemoConfig
from fedchain.sim.driver.faults import FaultLog, fault_summary
from fedchain.sim.scenario import Scenario
from privacy.spec import PrivacySpec
from protocol.fixedpoint import dequantise
from protocol.manifest import TaskManifest
from protocol.metrics import PhaseClock
from protocol.payloads import ModelLayout, decode_global_state


def evaluate_global_state(
    store: ContentStore,
    digest: bytes,
    layout: ModelLayout,
    frac_bits: int,
    model: Any,
    test_data: Dataset,
) -> tuple[float, float]:
    """Accuracy and loss on ``test_data`` of the global state stored under ``digest``."""
    state = decode_global_state(layout, get_by_digest(store, digest))
    params = layout.unflatten(dequantise(state.params, frac_bits))
    set_params(model, {k: v.astype(np.float32) for k, v in params.items()})
    ev = evaluate(model, get_params(model), test_data)
    return ev.accuracy, ev.loss


class RoundRecorder:
    """Builds the record of each round as it ends."""

    def __init__(
        self,
        cfg: DemoConfig,
        chain: Chain,
        task: TaskContract,
        store: ContentStore,
        layout: ModelLayout,
        model: Any,
        test_data: Dataset,
        clock: PhaseClock,
        faults: FaultLog,
        names: dict[str, str],
        privacy: PrivacySpec | None = None,
    ) -> None:
        self.cfg = cfg
        self.privacy = privacy or PrivacySpec()
        self.chain = chain
        self.task = task
        self.store = store
        self.layout = layout
        self.model = model
        self.test_data = test_data
        self.clock = clock
        self.faults = faults
        self.names = names
        self.records: list[dict[str, Any]] = []

    def evaluate(self, round_: int, digest: bytes) -> tuple[float, float]:
        """Accuracy and loss of the global state ``digest`` on the test set."""
        with self.clock.phase(round_, "evaluate"):
            return evaluate_global_state(
                self.store, digest, self.layout, self.cfg.frac_bits, self.model, self.test_data
            )

    def gas_totals(self) -> dict[str, int]:
        return {op: int(s["total"]) for op, s in self.chain.gas.summary().items()}

    def record(
        self,
        round_: int,
        wall: float,
        aggregators: Sequence[AggregatorNode],
        finalized: bool = True,
    ) -> dict[str, Any]:
        """The record of round ``round_`` (finalized, or stalled when ``finalized`` is False)."""
        info = self.task.round_info(round_)
        digest = self.task.round_digest(round_) if finalized else info.aggregate_digest
        accuracy = loss = None
        if finalized:
            started = time.perf_counter()
            accuracy, loss = self.evaluate(round_, digest)
            wall += time.perf_counter() - started  # the round's wall time includes evaluation
        gas_now = self.gas_totals()
        previous = self.records[-1]["gas_cumulative"] if self.records else {}
        gas_round = {op: v - previous.get(op, 0) for op, v in gas_now.items()}
        gas_round = {op: v for op, v in gas_round.items() if v}
        seconds = self.clock.for_round(round_)
        attempts = self.faults.attempt_records(round_)
        final = next((a for a in attempts if a.get("digest") == digest.hex()), {})
        submitter = info.aggregator or ""
        chosen = self.faults.chosen.get((round_, info.submission_attempt))
        honest_digest = self.faults.honest_digests.get(round_) if finalized else None
        honest_stop = self.faults.honest_stops.get(round_) if finalized else None
        wrong_stop = honest_stop is not None and info.stop != honest_stop
        record = {
            "round": round_,
            "finalized": finalized,
            "attempt": info.submission_attempt,
            "aggregator": submitter,
            "aggregator_name": self.names.get(submitter, submitter),
            "chosen_by_contract": chosen == submitter,
            "contract_choice": chosen,
            "digest": digest.hex(),
            "cid": resolve_cid(self.store, digest),
            "honest_digest": honest_digest.hex() if honest_digest else None,
            "faulty_finalized": finalized
            and honest_digest is not None
            and (digest != honest_digest or wrong_stop),
            # the stopping rule: the finalized claim (true: this round ended the task)
            "stop": bool(info.stop) if finalized else None,
            "updates_registered": self.task.update_count(round_),
            "included": final.get("included", []),
            "excluded": final.get("excluded", {}),
            # the honest re-execution's selection (Krum/Multi-Krum/Bulyan rows kept, NNM
            # neighbourhoods, bucket order, ARC's clipped rows); null for other rules
            "selection": self.faults.selections.get(round_) if finalized else None,
            "verifiers_agreeing": sum(
                1
                for agg in aggregators
                if (v := agg.verifications.get((round_, info.submission_attempt))) is not None
                and v.agrees
            ),
            "attempts": attempts,
            "availability": {
                "included": sum(self.task.included_updates(round_)),
                "attestations": self.faults.attestations.get(round_, {}),
            },
            "accuracy": accuracy,
            "loss": loss,
            "gas": gas_round,
            "gas_total": sum(gas_round.values()),
            "gas_cumulative": gas_now,
            "seconds": seconds,
            "wall_seconds": round(wall, 3),
            # Every phase second is charged once (PhaseClock), so this is what no phase saw.
            "unaccounted_seconds": round(wall - sum(seconds.values()), 3),
            "privacy": privacy_round_field(
                self.privacy, round_, self.faults.privacy_notes.get(round_, {})
            ),
        }
        self.records.append(record)
        return record


def build_summary(
    cfg: DemoConfig,
    scenario: Scenario,
    chain: Chain,
    task: TaskContract,
    store: ContentStore,
    manifest: TaskManifest,
    layout: ModelLayout,
    records: list[dict[str, Any]],
    faults: FaultLog,
    timings: dict[str, float],
    stalled: str | None,
    privacy: PrivacySpec | None = None,
) -> dict[str, Any]:
    """The run's ``summary.json`` (see the README for its fields)."""
    finalized = [r for r in records if r["finalized"]]
    last = finalized[-1] if finalized else {}
    phase_totals: dict[str, float] = {}
    for rec in records:
        for ph, sec in rec["seconds"].items():
            phase_totals[ph] = round(phase_totals.get(ph, 0.0) + sec, 4)
    gas = chain.gas.summary()
    fault_counts = fault_summary(records, faults.crashes, faults.equivocations)
    return {
        "fedchain_version": "0.1.0",
        "config": {**asdict(cfg), "funding_key": "<redacted>" if cfg.funding_key else None},
        "scenario": scenario.describe(),
        "task_address": task.address,
        "chain_id": int(chain.w3.eth.chain_id),
        "backend": {
            "chain": cfg.rpc_url or "embedded eth-tester (py-evm)",
            "store": repr(store),
        },
        "manifest_digest": manifest.digest.hex(),
        # the local training used (config fields left None take the model's defaults)
        "client_training": dict(manifest.client_training),
        "num_parameters": layout.size,
        "rounds_requested": cfg.rounds,
        "rounds_finalized": len(finalized),
        "all_rounds_finalized": len(finalized) == cfg.rounds,
        # the stopping rule ended the task at this round (None: it ran every round)
        "stopped_at": next((r["round"] for r in finalized if r.get("stop")), None),
        "all_chosen_by_contract": all(r["chosen_by_contract"] for r in finalized),
        "safety_violated": fault_counts["faulty_finalized"] > 0,
        "liveness_lost": stalled is not None,
        "stalled": stalled,
        "faults": fault_counts,
        "final_accuracy": last.get("accuracy"),
        "final_loss": last.get("loss"),
        "accuracy_per_round": [r["accuracy"] for r in finalized],
        "final_model_digest": last.get("digest"),
        "final_model_cid": last.get("cid"),
        "total_gas": sum(int(s["total"]) for s in gas.values()),
        "gas_by_operation": gas,
        "timings": {
            "total": round(timings.get("total", 0.0), 3),
            "setup": round(timings.get("setup", 0.0), 3),
            "phases": phase_totals,
        },
        "privacy": privacy_summary(privacy or PrivacySpec(), len(finalized)),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }


def privacy_round_field(
    spec: PrivacySpec, round_: int, notes: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``privacy`` field of a ``rounds.jsonl`` record: ε after this round (cumulative,
    for a client that took part in every round so far) at the task's δ; the round's clip
    norm (adaptive clipping: the one clients used, and the next); under secure aggregation
    or HE the round's ``aggregation`` notes (dropped peers, reveals, why a sum failed)."""
    if not spec.enabled:
        return {"mode": "none"}
    notes = notes or {}
    out: dict[str, Any] = {
        "mode": spec.mode,
        "mechanism": spec.mechanism if spec.is_dp else None,
        "epsilon": spec.accountant().epsilon(round_) if spec.is_dp else None,
        "delta": spec.target_delta if spec.is_dp else None,
        "noise_multiplier": spec.noise_multiplier if spec.is_dp else None,
        "clip_norm": notes.get("clip_norm", spec.clip_norm) if spec.is_dp else None,
    }
    if spec.adaptive_clip and "next_clip_norm" in notes:
        out["next_clip_norm"] = notes["next_clip_norm"]
        out["clip_bits"] = notes["clip_bits"]
    if spec.hides_updates:
        out["aggregation"] = {
            k: v for k, v in notes.items() if k not in ("clip_norm", "next_clip_norm", "clip_bits")
        }
    return out


def privacy_summary(spec: PrivacySpec, rounds_run: int) -> dict[str, Any]:
    """The ``privacy`` field of ``summary.json`` (ε spent, per round, budget state)."""
    if not spec.enabled:
        return {"mode": "none"}
    if not spec.is_dp:
        return {
            "mode": spec.mode,
            "mechanism": None,
            "epsilon_spent": None,
            "delta": None,
            "target_epsilon": None,
            "epsilon_per_round": [],
            "budget_exhausted": False,
            "accountant": None,
            "num_clients": spec.num_clients,
            "threshold": spec.threshold,
        }
    acc = spec.accountant()
    per_round = acc.epsilons(rounds_run)
    exhausted = (
        spec.target_epsilon is not None and acc.epsilon(rounds_run + 1) > spec.target_epsilon
    )
    out: dict[str, Any] = {
        "mode": spec.mode,
        "mechanism": spec.mechanism,
        "epsilon_spent": per_round[-1] if per_round else 0.0,
        "delta": spec.target_delta,
        "target_epsilon": spec.target_epsilon,
        "epsilon_per_round": per_round,
        "budget_exhausted": bool(exhausted),
        "accountant": acc.name,
        "noise_multiplier": spec.noise_multiplier,
        "clip_norm": spec.clip_norm,
        "sensitivity": spec.sensitivity,
        "noise_scale": spec.noise_scale,
        "sample_rate": spec.sample_rate,
    }
    if spec.adaptive_clip:
        out["adaptive_clip"] = spec.to_manifest()["adaptive_clip"]
    if spec.hides_updates:
        out.update(num_clients=spec.num_clients, threshold=spec.threshold)
    if spec.distributed:
        p = spec.ddp()
        out["ddp"] = {
            "scale": p.scale,
            "dropout_fraction": p.dropout_fraction,
            "variance": p.variance,
            "client_variance": p.client_variance,
        }
    if spec.sample_rate < 1 and rounds_run:
        # participation is public on-chain: the amplified figure holds only against someone
        # who cannot see who took part (docs/privacy.md)
        from dataclasses import replace as _replace

        from privacy.accounting import Accountant

        hidden = _replace(spec.release(), sampling_hidden=True)
        out["epsilon_if_sampling_hidden"] = Accountant(hidden, spec.target_delta).epsilon(
            rounds_run
        )
    return out
