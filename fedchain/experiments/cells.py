"""Cell kinds: what one (cell, seed) unit runs, which parameters it takes, what it measures.

* ``fedchain``: a complete fedchain run (:class:`fedchain.sim.runner.Demo`: chain, storage,
  aggregators) whose run directory is the unit's directory. Parameters: every ``fedchain
  demo`` option (``DemoConfig`` field) plus ``attack`` (a client attack, ``"none"``, or
  ``name(key=value, ...)``), ``byzantine`` (a count, or a fraction of the clients, rounded;
  the attackers are the last clients), ``collusion`` (``paper`` | ``sequential``) and
  ``privacy`` (a mode, or a mode with its settings: ``ldp(dp_mechanism="laplace")``;
  ``target_epsilon = inf`` runs the cell without privacy, see :func:`privacy_settings`). Unless
  ``rule_params`` is given, robust rules get the true number of Byzantine clients: ``f``
  for Krum, Multi-Krum and Bulyan, ``beta = f / clients`` for the trimmed mean.
  Metrics: final accuracy and loss, accuracy per round, rounds finalized, seconds per round
  and gas per round (both from ``summary.json``).
* ``centralized``: the same architecture and optimiser trained on the union of the
  clients' data for ``rounds * epochs`` epochs (the same passes over the data as a
  client makes); accuracy per epoch.
* ``recovery``: gradient inversion by an aggregator (see :mod:`.inversion`).
"""

from __future__ import annotations

import math
import shutil
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from fedchain.config import DemoConfig, value_matches
from fedchain.experiments.grid import ExperimentSpec, parse_call
from protocol.errors import ConfigError, FedchainError

__all__ = [
    "CELL_KINDS",
    "SETUP_OPERATIONS",
    "CellKind",
    "byzantine_count",
    "demo_config",
    "effective_fedchain",
    "run_unit",
    "scenario_for",
    "validate_spec",
]

#: Contract operations that set a task up rather than run a round; gas per round is the
#: rest of ``summary.json``'s ``gas_by_operation`` divided by the rounds finalized.
SETUP_OPERATIONS = frozenset(
    {"deploy", "registerAggregator", "registerClient", "registerClients", "start"}
)

#: Parameters a ``fedchain`` cell takes besides the ``DemoConfig`` fields, with their types.
FEDCHAIN_EXTRA: dict[str, Any] = {
    "attack": str,
    "byzantine": int | float,
    "collusion": str,
    # what the rules are told f is (count or fraction; "true": the real byzantine count)
    "assumed_byzantine": int | float | str,
    # a faulty-aggregator behaviour (aggregators.behaviours: ``honest``, ``withhold``, a
    # tamper, in call syntax ``noise(sigma=0.1)``) and how many committee members have it
    # (the first ones; a count, or ``"max"``: f = (n - 1) // 3)
    "aggregator_behaviour": str,
    "byzantine_aggregators": int | str,
}
FEDCHAIN_DEFAULTS: dict[str, Any] = {
    "attack": "none",
    "byzantine": 0,
    "collusion": "paper",
    "privacy": "none",
    "aggregator_behaviour": "honest",
    "byzantine_aggregators": 0,
}
#: Keys of a cell that only label it (the experiment's own bookkeeping): ignored by runs.
LABEL_KEYS = frozenset({"kind"})


def _demo_fields() -> dict[str, Any]:
    return typing.get_type_hints(DemoConfig)


def byzantine_count(value: Any, clients: int) -> int:
    """``byzantine`` as a number of clients: an int as is, a fraction of ``clients``."""
    if isinstance(value, float):
        return round(value * clients)
    return int(value)


def _rule_params(params: Mapping[str, Any], clients: int) -> dict[str, Any]:
    given = params.get("rule_params")
    if given:
        return dict(given)
    from aggregators.registry import get_rule_class

    rule = str(params.get("rule", "fedavg"))
    assumed = params.get("assumed_byzantine", "true")
    if isinstance(assumed, str):
        if assumed != "true":
            raise ConfigError(f"assumed_byzantine = {assumed!r}: a count, a fraction or 'true'")
        assumed = params.get("byzantine", 0)
    f = byzantine_count(assumed, clients)
    try:
        names = {s.name for s in get_rule_class(rule).param_specs}
    except FedchainError:
        return {}  # an unknown rule: the configuration's check names it
    out: dict[str, Any] = {}
    if "f" in names:  # Krum, Multi-Krum, Bulyan, and the NNM/ARC pre-aggregators
        out["f"] = f
    if "beta" in names and f:  # the trimmed mean (alone or after a pre-aggregator)
        out["beta"] = f / clients
    return out


def _privacy_fields() -> tuple[str, ...]:
    """``DemoConfig`` fields that configure privacy: those that are parameters of the run's
    :class:`privacy.spec.PrivacySpec` (``dp_mechanism`` is its ``mechanism``), whatever
    this build's spec holds. A ``privacy`` value may set them in its call syntax
    (``ldp(dp_mechanism="laplace")``), and a non-private cell drops them."""
    from privacy.spec import PrivacySpec

    spec = {f.name for f in fields(PrivacySpec)} | {"dp_mechanism"}
    return tuple(f.name for f in fields(DemoConfig) if f.name in spec)


PRIVACY_FIELDS = _privacy_fields()


def privacy_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """The privacy ``DemoConfig`` settings of a cell, resolved.

    ``privacy`` is a mode (``ldp``, ``ddp+secagg``, ...) or a mode with settings in call
    syntax, ``ldp(dp_mechanism="laplace", clip_norm=10)``, so one grid axis can hold
    combinations a cross product cannot (Laplace and Gaussian local DP next to distributed
    DP). ``target_epsilon = inf`` makes the cell non-private: mode ``none`` and every
    privacy setting dropped (no clipping, no noise), the ε = ∞ end of a privacy curve.
    A setting given both in the call and elsewhere in the cell is refused.
    """
    hints = _demo_fields()
    text = str(params.get("privacy", "none"))
    mode, inner = parse_call(text)
    allowed = [k for k in PRIVACY_FIELDS if k in hints]
    unknown = sorted(set(inner) - set(allowed))
    if unknown:
        raise ConfigError(f"does not take {unknown}; accepted: {allowed}")
    twice = sorted(set(inner) & set(params))
    if twice:
        raise ConfigError(f"sets {twice}, which the cell also sets; keep one")
    settings = {k: params[k] for k in allowed if k in params}
    settings.update(inner)
    for key, value in inner.items():
        if not value_matches(value, hints[key]):
            raise ConfigError(f"parameter {key} = {value!r}: expected {_type_word(hints[key])}")
    epsilon = settings.get("target_epsilon")
    if isinstance(epsilon, int | float) and math.isinf(epsilon) and epsilon > 0:
        return {"privacy": "none"}
    return {"privacy": mode, **settings}


def demo_config(params: Mapping[str, Any], seed: int, out: str, name: str) -> DemoConfig:
    """The ``DemoConfig`` of a fedchain cell (extra keys and labels left out; the privacy
    settings resolved by :func:`privacy_settings`)."""
    demo_keys = set(_demo_fields()) - {"privacy", *PRIVACY_FIELDS}
    settings = {k: v for k, v in params.items() if k in demo_keys}
    settings.update(privacy_settings(params))
    clients = int(settings.get("clients", DemoConfig.clients))
    settings["rule_params"] = _rule_params(params, clients)
    return DemoConfig(**{**settings, "seed": seed, "out": out, "name": name})


def byzantine_aggregator_count(value: Any, committee: int) -> int:
    """``byzantine_aggregators`` as a count: an int as is, ``"max"`` the most a committee
    of ``committee`` members tolerates, f = (n - 1) // 3."""
    if value == "max":
        return (committee - 1) // 3
    if isinstance(value, str):
        raise ConfigError(f"byzantine_aggregators = {value!r}: a count or 'max'")
    return int(value)


def aggregator_behaviours(params: Mapping[str, Any], cfg: DemoConfig) -> dict[int, Any]:
    """The faulty aggregators of a cell: the first ``byzantine_aggregators`` committee
    members publish as ``aggregator_behaviour`` says. ``wrong_rule`` without a ``rule``
    aggregates with the median, or with FedAvg when the task's rule is the median."""
    from aggregators.behaviours import Behaviour

    text = str(params.get("aggregator_behaviour", "honest"))
    name, call = parse_call(text)
    k = byzantine_aggregator_count(params.get("byzantine_aggregators", 0), cfg.aggregators)
    if name == "honest" or k == 0:
        return {}
    call = dict(call)
    if name == "wrong_rule" and "rule" not in call:
        call["rule"] = "fedavg" if cfg.rule == "median" else "median"
    return {i: Behaviour(publish=name, params=call) for i in range(k)}


def scenario_for(params: Mapping[str, Any], cfg: DemoConfig) -> Any:
    """The fedchain ``Scenario`` of a cell: its Byzantine clients (the last ones) and its
    faulty aggregators (the first ones)."""
    from fedchain.sim.scenario import ClientBehaviour, Scenario

    attack = str(params.get("attack", "none"))
    m = byzantine_count(params.get("byzantine", 0), cfg.clients)
    clients: dict[int, ClientBehaviour] = {}
    if attack != "none" and m > 0:
        name, attack_params = parse_call(attack)
        collusion = str(params.get("collusion", "paper"))
        for i in range(cfg.clients - m, cfg.clients):
            clients[i] = ClientBehaviour(name, attack_params, collusion=collusion)
    return Scenario(cfg, aggregators=aggregator_behaviours(params, cfg), clients=clients)


def _check_fedchain(params: Mapping[str, Any], label: Callable[[str, Any], str]) -> None:
    hints = _demo_fields()
    extra = {**FEDCHAIN_EXTRA}
    for key, value in params.items():
        if key in LABEL_KEYS:
            continue
        hint = hints.get(key, extra.get(key))
        if hint is None:
            allowed = sorted(set(hints) | set(extra) - {"out", "name", "seed"})
            raise ConfigError(f"{label(key, value)}: unknown setting; allowed: {allowed}")
        if key in ("seed", "out", "name"):
            raise ConfigError(
                f"{label(key, value)}: set by the experiment (--seeds, --out), not by a cell"
            )
        if not value_matches(value, hint):
            raise ConfigError(f"{label(key, value)}: expected {_type_word(hint)}")
    attack = str(params.get("attack", "none"))
    if attack != "none":
        try:
            name, attack_params = parse_call(attack)
            from fedchain.sim.scenario import ClientBehaviour

            ClientBehaviour(name, attack_params, collusion=str(params.get("collusion", "paper")))
            from clients.attacks import CLIENT_ATTACKS

            spec = CLIENT_ATTACKS.get(name)
            if spec is not None:
                _check_call_params(spec.fn, attack_params)
        except ConfigError as exc:
            raise ConfigError(f"{label('attack', attack)}: {exc}") from exc
    collusion = params.get("collusion", "paper")
    if collusion not in ("paper", "sequential"):
        raise ConfigError(f"{label('collusion', collusion)}: expected 'paper' or 'sequential'")
    privacy = params.get("privacy", "none")
    try:
        privacy_settings(params)
    except ConfigError as exc:
        raise ConfigError(f"{label('privacy', privacy)}: {exc}") from exc
    byz = params.get("byzantine", 0)
    clients = int(params.get("clients", DemoConfig.clients))
    if isinstance(byz, float) and not 0 <= byz < 1:
        raise ConfigError(f"{label('byzantine', byz)}: a fraction must lie in [0, 1)")
    m = byzantine_count(byz, clients)
    if not 0 <= m < clients:
        raise ConfigError(f"{label('byzantine', byz)}: must leave at least one honest client")
    if attack != "none" and m == 0:
        raise ConfigError(f"{label('attack', attack)}: needs byzantine > 0 clients")
    cfg = demo_config(params, 0, "runs", "check")
    try:
        cfg.validate()
    except ConfigError as exc:
        raise ConfigError(f"cell {_describe(params)}: {exc}") from exc
    behaviour = params.get("aggregator_behaviour", "honest")
    try:
        k = byzantine_aggregator_count(params.get("byzantine_aggregators", 0), cfg.aggregators)
        if not 0 <= k <= (cfg.aggregators - 1) // 3:
            raise ConfigError(f"{k} faulty of {cfg.aggregators}: at most (n - 1) // 3")
        aggregator_behaviours(params, cfg)
    except ConfigError as exc:
        raise ConfigError(f"{label('aggregator_behaviour', behaviour)}: {exc}") from exc


def _check_call_params(fn: Callable[..., Any], call: Mapping[str, Any]) -> None:
    import inspect

    accepted = list(inspect.signature(fn).parameters)[1:]
    unknown = sorted(set(call) - set(accepted))
    if unknown:
        raise ConfigError(f"does not take {unknown}; accepted: {accepted}")
    hints = typing.get_type_hints(fn)
    for key, value in call.items():
        if key in hints and not value_matches(value, hints[key]):
            raise ConfigError(f"parameter {key} = {value!r}: expected {_type_word(hints[key])}")


def _type_word(hint: Any) -> str:
    from fedchain.config import _describe as describe_hint

    return describe_hint(hint)


def _describe(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


# ---------------------------------------------------------------------------------------
# centralized


def _check_keys(
    params: Mapping[str, Any], keys: Mapping[str, Any], label: Callable[[str, Any], str]
) -> None:
    for key, value in params.items():
        if key in LABEL_KEYS:
            continue
        if key not in keys:
            raise ConfigError(f"{label(key, value)}: unknown setting; allowed: {sorted(keys)}")
        if not value_matches(value, keys[key]):
            raise ConfigError(f"{label(key, value)}: expected {_type_word(keys[key])}")


def _check_centralized(params: Mapping[str, Any], label: Callable[[str, Any], str]) -> None:
    # every run setting is accepted (a grid may mix federated and centralized cells);
    # the protocol's settings simply do not apply to centralized training
    hints = {k: v for k, v in _demo_fields().items() if k not in ("seed", "out", "name")}
    _check_keys(params, hints, label)
    cfg = demo_config(params, 0, "runs", "check")
    try:
        cfg.validate()
    except ConfigError as exc:
        raise ConfigError(f"cell {_describe(params)}: {exc}") from exc


def run_centralized(params: Mapping[str, Any], seed: int, unit_dir: Path) -> dict[str, Any]:
    """Train on the union of the clients' data; accuracy after every epoch."""
    from clients.models import build_model, get_params
    from clients.training import evaluate, train_local
    from fedchain.sim.driver.deployment import federated_data, train_config

    cfg = demo_config(params, seed, str(unit_dir), "centralized")
    train, test, parts = federated_data(cfg)
    import numpy as np

    union = train.subset(np.sort(np.concatenate(parts)))
    model = build_model(cfg.model, train.input_shape, train.num_classes, seed=seed)
    tc = train_config(cfg)
    epochs = cfg.rounds * tc.epochs
    current = get_params(model)
    accuracy: list[float] = []
    loss = float("nan")
    for epoch in range(epochs):
        res = train_local(model, current, union, replace(tc, epochs=1, seed=tc.seed + epoch))
        current = res.params
        ev = evaluate(model, current, test)
        accuracy.append(ev.accuracy)
        loss = ev.loss
    return {
        "final_accuracy": accuracy[-1],
        "final_loss": loss,
        "epochs_trained": epochs,
        "train_samples": len(union),
        "accuracy_per_epoch": accuracy,
    }


# ---------------------------------------------------------------------------------------
# fedchain


def effective_fedchain(params: Mapping[str, Any]) -> dict[str, Any]:
    """A fedchain cell's parameters as its run sees them: the privacy settings resolved
    (:func:`privacy_settings`), so every ``target_epsilon = inf`` cell of a grid that
    differs only in its privacy settings is one and the same non-private run."""
    out = {k: v for k, v in params.items() if k not in ("privacy", *PRIVACY_FIELDS)}
    out.update(privacy_settings(params))
    return out


def run_fedchain(params: Mapping[str, Any], seed: int, unit_dir: Path) -> dict[str, Any]:
    """One complete fedchain run; its run directory becomes ``unit_dir``."""
    from fedchain.sim.runner import Demo
    from protocol.metrics import Progress

    staging = unit_dir.parent / f".{unit_dir.name}-staging"
    shutil.rmtree(staging, ignore_errors=True)
    cfg = demo_config(params, seed, str(staging), unit_dir.name)
    demo = Demo(cfg, Progress(quiet=True), scenario=scenario_for(params, cfg))
    result = demo.run()
    shutil.rmtree(result.run_dir / "store", ignore_errors=True)  # payloads: MBs per run
    shutil.rmtree(unit_dir, ignore_errors=True)
    result.run_dir.rename(unit_dir)
    shutil.rmtree(staging, ignore_errors=True)
    return fedchain_metrics(result.summary)


#: Rounds of every accuracy curve that count as warm-up (``min_after_warmup`` skips them).
WARMUP_ROUNDS = 3
#: The tail ``last_k_accuracy`` averages (issue 23: a single final round swings).
LAST_K = 5


def curve_metrics(series: list[float | None]) -> dict[str, float | None]:
    """Per-curve statistics: the mean of the last :data:`LAST_K` values, the minimum after
    :data:`WARMUP_ROUNDS` and the final value (None for an empty curve)."""
    values = [float(v) for v in series if v is not None]
    if not values:
        return {"last5_accuracy": None, "min_after_warmup": None}
    tail = values[-LAST_K:]
    after = values[WARMUP_ROUNDS:] or values[-1:]
    return {"last5_accuracy": sum(tail) / len(tail), "min_after_warmup": min(after)}


#: ``summary.json`` fault counters a cell reports (faulty aggregators' detection).
FAULT_METRICS = (
    "faulty_aggregates",
    "withheld",
    "timeouts",
    "challenges",
    "disputes",
    "rejected",
    "faulty_finalized",
    "false_rejections",
    "detection_blocks_mean",
    "dispute_gas_total",
)


def fedchain_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's metrics, read from a run's ``summary.json`` only."""
    rounds = int(summary["rounds_finalized"])
    faults = summary.get("faults") or {}
    gas = summary["gas_by_operation"]
    round_gas = sum(int(v["total"]) for op, v in gas.items() if op not in SETUP_OPERATIONS)
    timings = summary["timings"]
    run_seconds = float(timings["total"]) - float(timings["setup"])
    return {
        "final_accuracy": summary["final_accuracy"],
        "final_loss": summary["final_loss"],
        "rounds_finalized": rounds,
        "seconds_per_round": run_seconds / rounds if rounds else None,
        "gas_per_round": round_gas / rounds if rounds else None,
        "total_gas": int(summary["total_gas"]),
        "accuracy_per_round": list(summary["accuracy_per_round"]),
        **curve_metrics(list(summary["accuracy_per_round"])),
        # rounds that never finalized (a stalled run); a stopping rule's early end is not a loss
        "rounds_lost": int(summary.get("stopped_at") or summary["rounds_requested"]) - rounds,
        "stopped_at": summary.get("stopped_at"),
        "final_model_digest": summary.get("final_model_digest"),
        "safety_violated": bool(summary.get("safety_violated")),
        "liveness_lost": bool(summary.get("liveness_lost")),
        **{k: faults.get(k) for k in FAULT_METRICS},
    }


# ---------------------------------------------------------------------------------------
# the registry


@dataclass(frozen=True)
class CellKind:
    """A kind of cell: how its parameters are checked, how a unit runs, what it measures."""

    name: str
    check: Callable[[Mapping[str, Any], Callable[[str, Any], str]], None]
    run: Callable[[Mapping[str, Any], int, Path], dict[str, Any]]
    metrics: tuple[str, ...]
    #: the per-round (or per-epoch) accuracy series a ``rounds`` figure draws
    series: str | None = None
    #: the parameters that determine a unit's run (two cells with equal ones share it)
    effective: Callable[[Mapping[str, Any]], Mapping[str, Any]] = dict


def _recovery_kind() -> CellKind:
    from fedchain.experiments import inversion

    return CellKind(
        "recovery",
        inversion.check_params,
        inversion.run_recovery,
        ("psnr", "ssim", "label_accuracy"),
    )


def _recovery_real_kind() -> CellKind:
    from fedchain.experiments import inversion_real

    return CellKind(
        "recovery-real",
        inversion_real.check_params,
        inversion_real.run_recovery_real,
        ("psnr", "ssim", "prior_psnr", "psnr_over_prior", "label_accuracy", "matching_loss"),
    )


CELL_KINDS: dict[str, Callable[[], CellKind]] = {
    "fedchain": lambda: CellKind(
        "fedchain",
        _check_fedchain,
        run_fedchain,
        (
            "final_accuracy",
            "last5_accuracy",
            "min_after_warmup",
            "final_loss",
            "seconds_per_round",
            "gas_per_round",
        ),
        "accuracy_per_round",
        effective_fedchain,
    ),
    "centralized": lambda: CellKind(
        "centralized",
        _check_centralized,
        run_centralized,
        ("final_accuracy", "final_loss"),
        "accuracy_per_epoch",
    ),
    "recovery": _recovery_kind,
    "recovery-real": _recovery_real_kind,
}


def cell_kind(params: Mapping[str, Any], default: str) -> CellKind:
    """The kind of a cell: its ``kind`` parameter (an axis may vary it) or the grid's."""
    name = str(params.get("kind", default))
    if name not in CELL_KINDS:
        raise ConfigError(f"unknown cell kind {name!r}; known: {sorted(CELL_KINDS)}")
    return CELL_KINDS[name]()


def validate_spec(spec: ExperimentSpec) -> None:
    """Check every value of every cell before anything runs (one-line ``ConfigError``)."""
    where = spec.source or f"experiment {spec.name!r}"

    def label_for(key: str, value: Any) -> str:
        table = "[grid]" if key in spec.axes else "[fixed]"
        return f"{where} {table} {key} = {value!r}"

    if spec.kind not in CELL_KINDS:
        raise ConfigError(
            f"{where} [experiment] kind = {spec.kind!r}: expected one of {sorted(CELL_KINDS)}"
        )
    kinds = spec.axes.get("kind", (spec.kind,))
    for k in kinds:
        if k not in CELL_KINDS:
            raise ConfigError(f"{label_for('kind', k)}: expected one of {sorted(CELL_KINDS)}")
    # each axis value alone first, so the message names that value
    for cell in spec.cells():
        kind = cell_kind(cell.params, spec.kind)
        kind.check(cell.params, label_for)
    known = {"final_accuracy"}
    for k in kinds:
        kind = CELL_KINDS[str(k)]()
        known |= set(kind.metrics)
    for i, plot in enumerate(spec.plots):
        w = f"{where} [[plot]] #{i + 1}"
        for key in ("x", "y", "series"):
            axis = getattr(plot, key)
            if axis is not None and axis not in spec.axes and axis not in spec.fixed:
                raise ConfigError(f"{w} {key} = {axis!r}: not an axis of [grid]")
        for metric in plot.metrics:
            if metric not in known:
                raise ConfigError(f"{w} metric = {metric!r}: expected one of {sorted(known)}")
        for key in plot.select:
            if key not in spec.axes:
                raise ConfigError(f"{w} select.{key}: not an axis of [grid]")
    if spec.metric not in known:
        raise ConfigError(
            f"{where} [experiment] metric = {spec.metric!r}: expected one of {sorted(known)}"
        )


def run_unit(kind_name: str, params: Mapping[str, Any], seed: int, unit_dir: str) -> dict[str, Any]:
    """Run one (cell, seed) unit and return its metrics (a process-pool entry point)."""
    kind = cell_kind(params, kind_name)
    path = Path(unit_dir)
    path.mkdir(parents=True, exist_ok=True)
    try:
        return kind.run(params, seed, path)
    except FedchainError as exc:
        raise FedchainError(f"cell {_describe(params)} seed {seed}: {exc}") from exc


def demo_fields() -> list[str]:
    """Every ``DemoConfig`` field (for help texts)."""
    return [f.name for f in fields(DemoConfig)]
