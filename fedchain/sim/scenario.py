"""Scenario files: a demo configuration plus who misbehaves, and how.

A scenario is a TOML file::

    [run]                      # any `fedchain demo` option, with underscores
    name = "noise-n4-f1"
    clients = 6
    aggregators = 4
    rounds = 2
    seed = 0

    [[aggregator]]             # one table per misbehaving aggregator (others are honest)
    index = 0                  # position in the committee (registration order)
    publish = "noise"          # honest | withhold | unavailable | partial | noise | scale |
                               # sign_flip | stale | wrong_rule | drop | substitute |
                               # false_stop | omit_stop (wrong stopping-rule claims)
    params = { sigma = 0.5 }   # the behaviour's parameters
    rounds = [1]               # rounds in which it publishes faulty aggregates (default: all)
    challenger = "honest"      # honest | frivolous | never
    pbft = "honest"            # honest | lying | equivocating | double | silent | colluding
    attest = "honest"          # honest | all (attests payloads it never fetched) | none
    crash_at = "before-submit" # optional: crash at that phase (in crash_round, default every)
    restart_after_blocks = 5   # optional: come back (fresh process state) after that many blocks

    [[client]]                 # malicious clients
    index = 2
    attack = "sign_flip"       # see clients/attacks.py, plus "nan", "wrong_shape", "oversized",
                               # "publish_some" (params.to = [aggregator indices]), "publish_none",
                               # "offline" (registers no update: a dropout)
    params = { scale = 5.0 }
    collusion = "paper"        # omniscient attacks (alie, inner_product_manipulation) only:
                               # paper (default: the colluders send one vector computed from
                               # the honest updates only) | sequential (each crafts its own
                               # from every update registered before it, attackers' included)

    [pbft]                     # the in-memory PBFT network of this run (seeded)
    drop = 0.0
    max_delay = 3
    duplicate = 0.0
    restart = [{ aggregator = 1, round = 2, phase = "prepare" }]
                               # crash-restarts of a replica in that round's dispute, right
                               # after it sent its first message of the phase: start |
                               # pre-prepare | prepare | commit | decide; optional downtime
                               # (ticks, default 20); it restarts from its stable storage

    [expect]                   # optional: what the run must show (checked by `fedchain run`)
    outcome = "safe"           # safe | safety-violated | liveness-lost
    identical_to_honest = true # final model byte-identical to the honest-aggregator twin run

Unknown keys are errors, so a typo never silently runs the honest scenario.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from aggregators.behaviours import TAMPERS, Behaviour
from clients.data import Dataset
from clients.node import DeltaHook, PayloadHook
from consensus.committee import ReplicaRestart
from fedchain.config import DemoConfig, check_types, read_toml, value_matches
from protocol.errors import ConfigError
from protocol.payloads import ModelLayout, encode_update

CLIENT_PAYLOAD_ATTACKS = ("nan", "wrong_shape", "oversized", "wrong_round")
#: Availability attacks: the update is registered on-chain but its bytes are handed only to
#: the aggregators ``params.to`` (committee indices), or to nobody; the client's own node
#: does not serve it.
CLIENT_PUBLISH_ATTACKS = ("publish_some", "publish_none")
#: A dropout: the client registers no update in its active rounds (under secure aggregation
#: the others' reveals recover its masks).
CLIENT_OFFLINE = "offline"
#: The update is honest, the registered weight is not (``weight = N`` claims N samples; any
#: other attack may carry ``weight`` too). See clients.attacks.WEIGHT_INFLATION.
CLIENT_WEIGHT = "weight_inflation"


@dataclass(frozen=True)
class ClientBehaviour:
    """A malicious client: an attack from ``clients.attacks`` or a malformed payload."""

    attack: str
    params: Mapping[str, Any] = field(default_factory=dict)
    rounds: frozenset[int] | None = None
    collusion: str = "paper"
    #: the numSamples this client registers in its active rounds instead of its real count
    #: (``weight = N``; the weight_inflation attack defaults it to 2**40)
    weight: int | None = None

    def __post_init__(self) -> None:
        from clients.attacks import CLIENT_ATTACKS, COLLUSION_MODES, DEFAULT_WEIGHT_CLAIM

        if self.attack == CLIENT_WEIGHT and self.weight is None:
            object.__setattr__(self, "weight", DEFAULT_WEIGHT_CLAIM)
        if self.weight is not None and not 0 <= self.weight < 2**64:
            raise ConfigError(f"weight = {self.weight}: must fit a uint64 (the on-chain type)")

        if self.collusion not in COLLUSION_MODES:
            raise ConfigError(
                f"collusion = {self.collusion!r}: must be one of {list(COLLUSION_MODES)}"
            )

        special = (*CLIENT_PAYLOAD_ATTACKS, *CLIENT_PUBLISH_ATTACKS, CLIENT_OFFLINE, CLIENT_WEIGHT)
        if self.attack not in CLIENT_ATTACKS and self.attack not in special:
            known = sorted(CLIENT_ATTACKS) + list(special)
            raise ConfigError(f"unknown client attack {self.attack!r}; known: {known}")
        if self.attack == "publish_some":
            to = self.params.get("to")
            if not isinstance(to, list) or not all(isinstance(i, int) for i in to):
                raise ConfigError("attack 'publish_some' needs params.to, a list of indices")

    def active(self, round_: int) -> bool:
        return self.rounds is None or round_ in self.rounds

    def registered_weight(self, round_: int, num_samples: int) -> int:
        """The numSamples this client registers in ``round_`` (its real count unless it
        inflates its weight in this round)."""
        from clients.attacks import inflated_weight

        if self.weight is None or not self.active(round_):
            return num_samples
        return inflated_weight(num_samples, self.weight)

    @property
    def omniscient(self) -> bool:
        """True for attacks crafted from the round's honest updates (ALIE, IPM)."""
        from clients.attacks import CLIENT_ATTACKS

        spec = CLIENT_ATTACKS.get(self.attack)
        return spec is not None and spec.kind == "omniscient"


@dataclass(frozen=True)
class PbftNetConfig:
    """Fault injection of the in-memory PBFT network (all seeded by the run's seed)."""

    drop: float = 0.0
    duplicate: float = 0.0
    max_delay: int = 3
    gst: int = 0
    max_ticks: int = 5000
    #: crash-restarts of committee replicas (``[pbft] restart``), from stable storage
    restart: tuple[ReplicaRestart, ...] = ()


@dataclass
class Scenario:
    """A run configuration plus the behaviours of misbehaving nodes."""

    config: DemoConfig
    aggregators: dict[int, Behaviour] = field(default_factory=dict)
    clients: dict[int, ClientBehaviour] = field(default_factory=dict)
    pbft: PbftNetConfig = field(default_factory=PbftNetConfig)
    source: str | None = None
    expect: dict[str, Any] = field(default_factory=dict)

    @property
    def byzantine_aggregators(self) -> list[int]:
        return sorted(i for i, b in self.aggregators.items() if not b.is_honest)

    def describe(self) -> dict[str, Any]:
        """JSON-friendly description (for summary.json)."""
        return {
            "source": self.source,
            "aggregators": {
                str(i): {
                    "publish": b.publish,
                    "params": dict(b.params),
                    "rounds": sorted(b.rounds) if b.rounds is not None else None,
                    "challenger": b.challenger,
                    "pbft": b.pbft,
                    "attest": b.attest,
                    "crash_at": b.crash_at,
                    "crash_round": b.crash_round,
                    "restart_after_blocks": b.restart_after_blocks,
                }
                for i, b in sorted(self.aggregators.items())
            },
            "clients": {
                str(i): {
                    "attack": c.attack,
                    "params": dict(c.params),
                    "rounds": sorted(c.rounds) if c.rounds is not None else None,
                    **({"collusion": c.collusion} if c.omniscient else {}),
                    **({"weight": c.weight} if c.weight is not None else {}),
                }
                for i, c in sorted(self.clients.items())
            },
            # lists, not tuples: summary.json reads back equal to what was written
            "pbft": {**asdict(self.pbft), "restart": [asdict(r) for r in self.pbft.restart]},
            "byzantine_aggregators": self.byzantine_aggregators,
        }

    def honest_twin(self) -> Scenario:
        """The same run with every aggregator honest (the reference for byte-identity).

        Clients behave as in the scenario, so the twin isolates what the aggregator
        committee's faults change: nothing, while fewer than n/3 are Byzantine."""
        return Scenario(
            replace(self.config, name=self.config.name + "-honest"),
            {},
            dict(self.clients),
            self.pbft,
            None,
        )


def _rounds(value: Any, where: str) -> frozenset[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value
    ):
        raise ConfigError(f"{where} rounds = {value!r}: must be a list of round numbers >= 1")
    return frozenset(value)


#: The type of every key of the scenario tables (checked before use).
AGGREGATOR_KEY_TYPES: dict[str, Any] = {
    "index": int,
    "publish": str,
    "params": dict,
    "rounds": list,
    "challenger": str,
    "pbft": str,
    "attest": str,
    "crash_at": str,
    "crash_round": int,
    "restart_after_blocks": int,
}
CLIENT_KEY_TYPES: dict[str, Any] = {
    "index": int,
    "attack": str,
    "params": dict,
    "rounds": list,
    "collusion": str,
    "weight": int,
}
EXPECT_KEY_TYPES: dict[str, Any] = {"outcome": str, "identical_to_honest": bool}


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} {key} = {value!r}: expected a table [{key}]")
    return value


def _tables(data: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(t, Mapping) for t in value):
        raise ConfigError(f"{where} {key}: expected an array of tables [[{key}]]")
    return value


def _check_table_types(table: Mapping[str, Any], types: Mapping[str, Any], where: str) -> None:
    for key, value in table.items():
        if key in types and not value_matches(value, types[key]):
            raise ConfigError(f"{where} {key} = {value!r}: expected {_type_word(types[key])}")


def _type_word(hint: Any) -> str:
    return {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true or false",
        dict: "a table",
        list: "a list",
    }.get(hint, str(hint))


def _client_attacks() -> Mapping[str, Any]:
    from clients.attacks import CLIENT_ATTACKS

    return CLIENT_ATTACKS


def _check_params(fn: Callable[..., Any], params: Mapping[str, Any], where: str) -> None:
    """Each given parameter must have the type ``fn`` declares for it."""
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):  # unresolvable annotations: the call itself will check
        return
    for key, value in params.items():
        if key in hints and not value_matches(value, hints[key]):
            raise ConfigError(
                f"{where} params.{key} = {value!r}: expected {_type_word(hints[key])}"
            )


RESTART_KEY_TYPES: dict[str, Any] = {"aggregator": int, "round": int, "phase": str, "downtime": int}


def _restarts(value: Any, cfg: DemoConfig, where: str) -> tuple[ReplicaRestart, ...]:
    """``[pbft] restart``: a list of ``{aggregator, round, phase[, downtime]}`` tables."""
    if not isinstance(value, list) or not all(isinstance(t, Mapping) for t in value):
        raise ConfigError(f"{where} = {value!r}: expected a list of tables")
    out = []
    for i, table in enumerate(value):
        w = f"{where} #{i + 1}"
        _check_keys(table, set(RESTART_KEY_TYPES), w)
        _check_table_types(table, RESTART_KEY_TYPES, w)
        missing = sorted({"aggregator", "round", "phase"} - set(table))
        if missing:
            raise ConfigError(f"{w}: missing key(s) {missing}")
        if not 0 <= table["aggregator"] < cfg.aggregators:
            raise ConfigError(
                f"{w} aggregator = {table['aggregator']!r}: must be in 0..{cfg.aggregators - 1}"
            )
        if not 1 <= table["round"] <= cfg.rounds:
            raise ConfigError(f"{w} round = {table['round']!r}: must be in 1..{cfg.rounds}")
        try:
            out.append(ReplicaRestart(**table))
        except ConfigError as exc:
            raise ConfigError(f"{w}: {exc}") from exc
    return tuple(out)


def _check_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def scenario_from_dict(data: Mapping[str, Any], source: str | None = None) -> Scenario:
    """Build and validate a :class:`Scenario` from parsed TOML."""
    where = source or "scenario"
    _check_keys(data, {"run", "aggregator", "client", "pbft", "expect"}, where)
    run = dict(_table(data, "run", where))
    allowed = {f.name for f in fields(DemoConfig)}
    _check_keys(run, allowed, f"{where} [run]")
    if source and "name" not in run:
        run["name"] = Path(source).stem
    cfg = DemoConfig(**run)
    cfg.validate(where=f"{where} [run]")
    behaviours: dict[int, Behaviour] = {}
    keys = {
        "index",
        "publish",
        "params",
        "rounds",
        "challenger",
        "pbft",
        "attest",
        "crash_at",
        "crash_round",
        "restart_after_blocks",
    }
    for i, table in enumerate(_tables(data, "aggregator", where)):
        w = f"{where} [[aggregator]] #{i + 1}"
        _check_keys(table, keys, w)
        _check_table_types(table, AGGREGATOR_KEY_TYPES, w)
        index = table.get("index")
        if not isinstance(index, int) or not 0 <= index < cfg.aggregators:
            raise ConfigError(f"{w} index = {index!r}: must be in 0..{cfg.aggregators - 1}")
        if index in behaviours:
            raise ConfigError(f"{w}: aggregator {index} is described twice")
        if table.get("publish") in TAMPERS:
            _check_params(TAMPERS[table["publish"]], table.get("params", {}), w)
        try:
            behaviours[index] = Behaviour(
                publish=table.get("publish", "honest"),
                params=dict(table.get("params", {})),
                rounds=_rounds(table.get("rounds"), w),
                challenger=table.get("challenger", "honest"),
                pbft=table.get("pbft", "honest"),
                attest=table.get("attest", "honest"),
                crash_at=table.get("crash_at"),
                crash_round=table.get("crash_round"),
                restart_after_blocks=table.get("restart_after_blocks"),
            )
        except ConfigError as exc:
            raise ConfigError(f"{w}: {exc}") from exc
    clients: dict[int, ClientBehaviour] = {}
    for i, table in enumerate(_tables(data, "client", where)):
        w = f"{where} [[client]] #{i + 1}"
        _check_keys(table, set(CLIENT_KEY_TYPES), w)
        _check_table_types(table, CLIENT_KEY_TYPES, w)
        index = table.get("index")
        if not isinstance(index, int) or not 0 <= index < cfg.clients:
            raise ConfigError(f"{w} index = {index!r}: must be in 0..{cfg.clients - 1}")
        attack_spec = _client_attacks().get(str(table.get("attack")))
        if attack_spec is not None:
            _check_params(attack_spec.fn, table.get("params", {}), w)
        try:
            clients[index] = ClientBehaviour(
                attack=str(table.get("attack")),
                params=dict(table.get("params", {})),
                rounds=_rounds(table.get("rounds"), w),
                collusion=table.get("collusion", "paper"),
                weight=table.get("weight"),
            )
        except ConfigError as exc:
            raise ConfigError(f"{w}: {exc}") from exc
    pbft_table = dict(_table(data, "pbft", where))
    _check_keys(pbft_table, {f.name for f in fields(PbftNetConfig)}, f"{where} [pbft]")
    restarts = _restarts(pbft_table.pop("restart", []), cfg, f"{where} [pbft] restart")
    pbft = PbftNetConfig(**pbft_table)
    check_types(pbft, lambda key, value: f"{where} [pbft] {key} = {value!r}")
    pbft = replace(pbft, restart=restarts)
    for key in ("drop", "duplicate"):
        if not 0 <= getattr(pbft, key) < 1:
            raise ConfigError(f"{where} [pbft] {key} = {getattr(pbft, key)!r}: must be in [0, 1)")
    for key in ("max_delay", "gst", "max_ticks"):
        if getattr(pbft, key) < 0:
            raise ConfigError(f"{where} [pbft] {key} = {getattr(pbft, key)!r}: must be >= 0")
    expect = dict(_table(data, "expect", where))
    _check_keys(expect, set(EXPECT_KEY_TYPES), f"{where} [expect]")
    _check_table_types(expect, EXPECT_KEY_TYPES, f"{where} [expect]")
    if expect.get("outcome", "safe") not in OUTCOMES:
        raise ConfigError(
            f"{where} [expect] outcome = {expect['outcome']!r}: must be one of {OUTCOMES}"
        )
    return Scenario(cfg, behaviours, clients, pbft, source, expect)


OUTCOMES = ("safe", "safety-violated", "liveness-lost")


def outcome_of(summary: Mapping[str, Any]) -> str:
    """Classify a run: a faulty model finalized beats a stall beats a safe run."""
    if summary["safety_violated"]:
        return "safety-violated"
    if summary["liveness_lost"]:
        return "liveness-lost"
    return "safe"


def check_expectations(
    scenario: Scenario, summary: Mapping[str, Any], honest: Mapping[str, Any] | None
) -> list[str]:
    """Return the ways a run missed its scenario's ``[expect]`` (empty: all met)."""
    problems = []
    want = scenario.expect.get("outcome")
    got = outcome_of(summary)
    if want is not None and want != got:
        problems.append(f"expected outcome {want!r}, got {got!r}")
    if (
        scenario.expect.get("identical_to_honest")
        and honest is not None
        and summary["final_model_digest"] != honest["final_model_digest"]
    ):
        problems.append("final model differs from the honest-aggregator twin with the same seeds")
    return problems


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file."""
    data = read_toml(path, "scenario")
    return scenario_from_dict(data, str(path))


#: The round's registered updates as (client address, real-valued flat delta), read from the
#: chain and content storage as any peer could (updates are public).
Observe = Callable[[int], list[tuple[str, np.ndarray]]]


class Collusion:
    """The omniscient attackers of a run (ALIE, inner-product manipulation) and what they send.

    Every omniscient client of a scenario is a colluder: they know each other's addresses.
    In the papers' model (``collusion = "paper"``, Baruch et al. 2019; Xie et al. 2019) the
    colluders compute *one* vector per round from the honest updates only (every registered
    update but the colluders') and all send it; colluders with the same attack and
    parameters form one group, whose size is the ``m`` of ALIE's ``z_max``, and the vector is
    computed once per round and group. With ``collusion = "sequential"`` an attacker crafts
    its own vector from every update registered before it, the other attackers' included
    (fedchain's behaviour before issue 10). The runner makes colluders register after every
    other client, so all of them see the same honest set.
    """

    def __init__(
        self,
        behaviours: Mapping[int, ClientBehaviour],
        addresses: typing.Sequence[str],
        observe: Observe,
        num_clients: int,
        aggregate: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.observe = observe
        self.num_clients = int(num_clients)
        #: the deployed rule as attackers simulate it (adaptive attacks search against it)
        self.aggregate = aggregate
        omniscient = {i: b for i, b in behaviours.items() if b.omniscient}
        self.colluders = frozenset(addresses[i] for i in omniscient)
        self.group_size: dict[str, int] = {}
        for b in omniscient.values():
            key = self._group(b)
            self.group_size[key] = self.group_size.get(key, 0) + 1
        self._cache: dict[tuple[int, str], np.ndarray] = {}

    @staticmethod
    def _group(attack: ClientBehaviour) -> str:
        return json.dumps([attack.attack, dict(attack.params)], sort_keys=True, default=str)

    def update(
        self, attack: ClientBehaviour, round_: int, layout: ModelLayout
    ) -> np.ndarray | None:
        """The flat delta ``attack``'s client sends in ``round_`` (None: nothing to imitate)."""
        from clients.attacks import apply_attack, colluding_update

        seen = self.observe(round_)
        if attack.collusion == "sequential":
            deltas = [d for _, d in seen]
            if not deltas:
                return None
            named = [layout.unflatten(d.astype(np.float32)) for d in deltas]
            out = apply_attack(attack.attack, honest_deltas=named, **dict(attack.params))
            assert isinstance(out, dict)
            return layout.flatten(out).astype(np.float64)
        key = (round_, self._group(attack))
        if key not in self._cache:
            honest = [d for client, d in seen if client not in self.colluders]
            if not honest:
                return None
            named = [layout.unflatten(d.astype(np.float32)) for d in honest]
            vector = colluding_update(
                attack.attack,
                named,
                num_colluders=self.group_size[self._group(attack)],
                num_clients=self.num_clients,
                aggregate=self.aggregate,
                **dict(attack.params),
            )
            self._cache = {k: v for k, v in self._cache.items() if k[0] == round_}
            self._cache[key] = layout.flatten(vector).astype(np.float64)
        return self._cache[key].copy()


def rule_simulator(
    rule: str, rule_params: Mapping[str, Any], frac_bits: int, clip: float
) -> Callable[[np.ndarray], np.ndarray]:
    """The task's rule as an attacker runs it on candidate updates: quantised like a
    client's payload (``clip``, ``frac_bits``), aggregated bit-exactly from a zero global
    model, dequantised. Rules that need more updates than given return the plain mean."""
    from aggregators.base import AggregationInput
    from aggregators.registry import make_rule
    from protocol.errors import FedchainError
    from protocol.fixedpoint import dequantise, quantise

    agg = make_rule(rule, dict(rule_params))
    bound = round(clip * 2**frac_bits)

    def run(vectors: np.ndarray) -> np.ndarray:
        q = quantise(vectors, frac_bits, bound).astype(np.int32)
        try:
            out = agg.aggregate(
                AggregationInput(
                    np.zeros(q.shape[1], np.int64),
                    q,
                    np.ones(q.shape[0], np.int64),
                    frac_bits=frac_bits,
                    value_bound=bound,
                )
            )
        except FedchainError:
            return np.asarray(vectors.mean(axis=0))
        return np.asarray(dequantise(out.params, frac_bits), dtype=np.float64)

    return run


def round_seed(seed: int, round_: int) -> int:
    """A randomised client attack's seed in ``round_``: 63 bits of SHA-256 of the client's
    seed and the round, so every round (and every client) draws new noise."""
    digest = hashlib.sha256(f"fedchain/attack-seed/{int(seed)}/{int(round_)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def client_attack_hooks(
    attack: ClientBehaviour,
    data: Dataset,
    layout: ModelLayout,
    seed: int,
    collusion: Collusion | None = None,
) -> tuple[Dataset, DeltaHook | None, PayloadHook | None]:
    """Turn a client behaviour into (poisoned data, delta hook, payload hook) for a node.

    Omniscient attacks (ALIE, inner-product manipulation) send what ``collusion`` crafts
    from the updates registered for the round (see :class:`Collusion`); the runner makes
    such attackers register last.
    """
    from clients import malformed
    from clients.attacks import CLIENT_ATTACKS, apply_attack

    params = dict(attack.params)
    if attack.attack in (*CLIENT_PUBLISH_ATTACKS, CLIENT_OFFLINE, CLIENT_WEIGHT):
        # the deployment gives the node a publish, offline or weight hook
        return data, None, None
    if attack.attack in CLIENT_PAYLOAD_ATTACKS:
        kind = attack.attack

        def payload_hook(round_: int, delta_q: np.ndarray) -> bytes:
            if not attack.active(round_):
                return encode_update(layout, round_, delta_q)
            if kind == "nan":
                return malformed.nan_payload(layout, round_)
            if kind == "wrong_shape":
                return malformed.wrong_shape_payload(layout, round_)
            if kind == "oversized":
                return malformed.oversized_payload(layout, round_, delta_q)
            return malformed.wrong_round_payload(layout, round_, delta_q)

        return data, None, payload_hook
    spec = CLIENT_ATTACKS[attack.attack]
    if spec.kind == "data":
        poisoned = apply_attack(attack.attack, dataset=data, **params)
        assert isinstance(poisoned, Dataset)
        return poisoned, None, None
    if spec.kind == "omniscient":
        if collusion is None:
            raise ConfigError(f"client attack {attack.attack!r} needs a view of the round")
        group = collusion

        def omniscient_hook(round_: int, delta: np.ndarray) -> np.ndarray:
            crafted = group.update(attack, round_, layout) if attack.active(round_) else None
            return delta if crafted is None else crafted  # nothing to imitate: honest

        return data, omniscient_hook, None
    fresh = "seed" in inspect.signature(spec.fn).parameters and "seed" not in params

    def delta_hook(round_: int, delta: np.ndarray) -> np.ndarray:
        if not attack.active(round_):
            return delta
        named = layout.unflatten(delta.astype(np.float32))
        call = dict(params)
        if fresh:  # a randomised attack draws fresh randomness every round (issue 23)
            call["seed"] = round_seed(seed, round_)
        out = apply_attack(attack.attack, delta=named, **call)
        assert isinstance(out, dict)
        return layout.flatten(out).astype(np.float64)

    return data, delta_hook, None
