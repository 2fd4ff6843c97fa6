"""Run configuration shared by ``fedchain demo`` and ``fedchain run`` (every knob, validated)."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from aggregators.registry import make_rule
from privacy.spec import SUM_MODES, parse_mode
from protocol.errors import ConfigError, FedchainError
from protocol.manifest import DEFAULT_MAX_SAMPLES

if typing.TYPE_CHECKING:
    from privacy.spec import PrivacySpec

ROTATIONS = {"round-robin": 0, "random": 1}
#: How a challenged aggregate is settled (docs/fault-proof.md): the committee's PBFT vote
#: (n - f certificate), the one-step fault proof (one honest aggregator suffices), or both
#: (a certificate settles fast; a one-step proof overrides it and slashes its signers).
DISPUTE_MODES = ("pbft", "fault-proof", "both")
#: Privacy modes whose updates the fault proof can replay (each update is visible).
FAULT_PROOF_PRIVACY = ("none", "ldp")
ENGINES = ("sequential", "ray")
WEI_PER_ETH = 10**18


#: Signed privacy records per ``submitRecords`` transaction the in-process driver relays
#: (a reveal of K clients is 36·K bytes).
RECORD_BATCH = 25
#: SecAgg+ reveal digests per ``submitReveals`` batch (100 bytes of calldata each; ~1.7 M gas).
REVEAL_BATCH = 200

#: The smallest committee PBFT can run with: n >= 3f + 1 with f >= 1 (docs/pbft.md). With
#: n = 2 or 3 the n - f quorum is n (the accused must sign its own conviction, one member
#: blocks every certificate), with n = 1 nobody can challenge.
MIN_COMMITTEE = 4
COMMITTEE_BOUND = (
    "must be at least 4: PBFT needs n >= 3f + 1 with f >= 1 "
    "(with 2 or 3 the accused must sign its own conviction, with 1 nobody can challenge)"
)


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
    #: local training; None = the model's default (``clients.training.MODEL_TRAINING``)
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    momentum: float | None = None
    prox_mu: float = 0.0
    rule: str = "fedavg"
    rule_params: dict[str, Any] = field(default_factory=dict)
    frac_bits: int = 16
    clip: float = 4.0
    min_updates: int | None = None
    #: largest numSamples one update may claim (the contract's maxSamples, in the manifest)
    max_samples: int = DEFAULT_MAX_SAMPLES
    #: the verifiable stopping rule (aggregators.stopping): end the task once the global
    #: model's delta norm stays below stop_norm for stop_patience rounds (None: off)
    stop_norm: float | None = None
    stop_patience: int = 3
    collect_window: int = 50
    #: blocks after open + collect_window until a round short of min_updates is skipped
    collect_timeout: int = 50
    #: admit only the run's own clients (the contract's clientAllowlist): sybils cannot register
    client_allowlist: bool = False
    #: wei each client locks when it registers (the contract's clientDeposit), refunded
    #: (``releaseDeposit``) once the task completed or was aborted; 0: no deposit
    client_deposit: int = 0
    #: a round opens its maxUpdates slots progressively over its first this many blocks
    #: (the contract's minCollectionBlocks), so one batch at round open cannot take every
    #: slot; 0: all at once
    min_collection_blocks: int = 0
    #: blocks without progress (a new round, or start since deployment) after which the
    #: aggregator nodes end the task (``abortTask``): every stake and bond is then returned
    abort_timeout: int = 10_000
    #: an aggregator node leaves the committee (``leaveCommittee``) when the owner has not
    #: called ``start`` this many blocks after the deployment (0: never leaves)
    leave_after_blocks: int = 1_000
    #: the owner calls ``start`` once everyone registered (false: it never does, a study
    #: of the exits: the nodes leave and abort)
    start_task: bool = True
    submit_timeout: int = 10
    challenge_window: int = 5
    attest_window: int = 5
    dispute_timeout: int = 20
    rotation: str = "round-robin"
    #: pbft | fault-proof | both (DISPUTE_MODES)
    dispute: str = "pbft"
    seed: int = 0
    out: str = "runs"
    name: str = "demo"
    rpc_url: str | None = None
    funding_key: str | None = None
    store: str | None = None
    max_blocks: int = 100_000
    data_path: str | None = None
    #: keep a class-stratified subset of this many training samples (drawn with a fixed
    #: data seed, the same in every run) before partitioning; None: all of them
    train_samples: int | None = None
    engine: str = "sequential"
    ray_address: str | None = None
    ray_cpus: int | None = None
    # privacy (docs/privacy.md): --privacy none|ldp|secagg|ddp+secagg|he|ddp+he
    privacy: str = "none"
    dp_mechanism: str = "gaussian"
    target_epsilon: float | None = None
    target_delta: float = 1e-5
    noise_multiplier: float | None = None
    clip_norm: float = 1.0
    sample_rate: float = 1.0
    budget_policy: str = "refuse"
    dropout_fraction: float = 0.3
    ddp_scale: int = 1 << 16
    adaptive_clip: bool = False
    clip_quantile: float = 0.5
    clip_learning_rate: float = 0.2
    clip_bit_epsilon: float = 0.5
    he_key_bits: int = 2048
    he_threshold: int = 0
    reveal_window: int = 3
    sample_counts: str = "exact"
    # secure aggregation's mask graph (docs/privacy.md, "SecAgg+"): full, harary or auto
    mask_graph: str = "auto"
    graph_degree: int = 0
    graph_threshold: int = 0
    corrupt_fraction: float = 0.1

    def reveal_blocks(self) -> int:
        """Blocks the reveal window lasts: ``--reveal-window``, widened under secure
        aggregation so that the in-process driver's reveal batches fit in it (one block per
        batch of :data:`RECORD_BATCH` records on an auto-mining chain, plus two). Without
        it, 100 clients' reveals (4 batches) missed a 3-block window and the round stalled.
        Under threshold HE each committee member's record takes a block of its own."""
        components = parse_mode(self.privacy).split("+")
        if "he" in components and self.he_threshold:
            # each committee member sends its own share record: one block each, plus two
            return max(self.reveal_window, self.aggregators + 2)
        if "secagg" not in components:
            return self.reveal_window
        return max(self.reveal_window, -(-self.clients // RECORD_BATCH) + 2)

    def submit_blocks(self) -> int:
        """The task's submit timeout: ``--submit-timeout`` plus what :meth:`reveal_blocks`
        added to the reveal window (the aggregator keeps the time it had after it)."""
        extra = self.reveal_blocks() - self.reveal_window
        if self.privacy_spec().secagg_plus:  # the reveal attestations' window after it
            extra += self.reveal_blocks()
        return self.submit_timeout + extra

    def privacy_spec(self) -> PrivacySpec:
        """The run's privacy settings as given (noise multiplier not yet derived). Under
        distributed DP the noise is Skellam, the integer analogue of ``--dp-mechanism
        gaussian``."""
        from privacy.spec import PrivacySpec, parse_mode

        mode = parse_mode(self.privacy)
        mechanism = self.dp_mechanism
        if "ddp" in mode.split("+") and mechanism == "gaussian":
            mechanism = "skellam"
        return PrivacySpec(
            mode=mode,
            mechanism=mechanism,
            target_epsilon=self.target_epsilon,
            target_delta=self.target_delta,
            noise_multiplier=self.noise_multiplier,
            clip_norm=self.clip_norm,
            sample_rate=self.sample_rate,
            budget_policy=self.budget_policy,
            num_clients=self.clients if mode in SUM_MODES else None,
            dropout_fraction=self.dropout_fraction,
            ddp_scale=self.ddp_scale,
            adaptive_clip=self.adaptive_clip,
            clip_quantile=self.clip_quantile,
            clip_learning_rate=self.clip_learning_rate,
            clip_bit_epsilon=self.clip_bit_epsilon,
            reveal_window=self.reveal_blocks(),
            sample_counts=self.sample_counts,
            **self._mask_graph(mode),
        )

    def _mask_graph(self, mode: str) -> dict[str, Any]:
        """The mask graph's spec fields: ``auto`` is SecAgg+ from
        :data:`SECAGG_PLUS_FROM` clients on (the full graph's O(K^2) masks and shares stop
        fitting a round there), the full graph below; SecAgg+ without an explicit degree and
        threshold takes them from the parameter finder (privacy.secagg_graph)."""
        if "secagg" not in mode.split("+"):
            return {}
        kind = self.mask_graph
        if kind == "auto":
            kind = "harary" if self.clients >= SECAGG_PLUS_FROM else "full"
        if kind != "harary":
            return {"mask_graph": kind, "corrupt_fraction": self.corrupt_fraction}
        degree, threshold = self.graph_degree, self.graph_threshold
        if not degree or not threshold:
            degree, threshold = finder_parameters(
                self.clients, self.corrupt_fraction, self.dropout_fraction
            )
        return {
            "mask_graph": kind,
            "graph_degree": degree,
            "graph_threshold": threshold,
            "corrupt_fraction": self.corrupt_fraction,
        }

    # signed update records per submitUpdates batch the in-process fleet relays (0: every
    # client sends its own submitUpdate)
    update_batch: int = 100

    def validate(self, where: str | None = None) -> None:
        """Refuse bad values before any work: one line naming the option and the value.

        ``where`` names the source of the values for messages (e.g. ``"x.toml [run]"``, whose
        keys are then named as TOML keys); by default they are named as CLI options.
        """

        def bad(key: str, problem: str, value: Any = None) -> ConfigError:
            value = getattr(self, key) if value is None else value
            return ConfigError(f"{setting_label(key, value, where)}: {problem}")

        check_types(self, lambda key, value: setting_label(key, value, where))
        positive = (
            "clients",
            "aggregators",
            "rounds",
            "collect_window",
            "submit_timeout",
            "challenge_window",
            "dispute_timeout",
            "max_blocks",
            "abort_timeout",
        )
        for key in positive:
            if getattr(self, key) < 1:
                raise bad(key, "must be at least 1")
        if self.aggregators < MIN_COMMITTEE:
            raise bad("aggregators", COMMITTEE_BOUND)
        for key in ("epochs", "batch_size", "train_samples"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise bad(key, "must be at least 1")
        for key in ("client_deposit", "min_collection_blocks"):
            if getattr(self, key) < 0:
                raise bad(key, "must be at least 0 (0: off)")
        if self.min_collection_blocks > self.collect_window:
            raise bad(
                "min_collection_blocks",
                f"must not exceed collect_window ({self.collect_window}): collection may "
                "close once the window has passed",
            )
        if self.min_collection_blocks and not self.update_batch:
            raise bad(
                "min_collection_blocks",
                "needs update_batch > 0 in-process (the relayer retries what had no slot yet)",
            )
        if self.leave_after_blocks < 0:
            raise bad("leave_after_blocks", "must be at least 0 (0: never leave)")
        if self.attest_window < 0:
            raise bad("attest_window", "must be at least 0 (0 turns attestations off)")
        if self.engine not in ENGINES:
            raise bad("engine", f"must be one of {list(ENGINES)}")
        if self.ray_address is not None and self.engine != "ray":
            raise bad("ray_address", "needs --engine ray")
        if self.ray_cpus is not None and self.ray_cpus < 1:
            raise bad("ray_cpus", "must be at least 1")
        if self.update_batch < 0:
            raise bad("update_batch", "must be at least 0 (0: every client submits alone)")
        if self.rotation not in ROTATIONS:
            raise bad("rotation", f"must be one of {sorted(ROTATIONS)}")
        self._validate_dispute(bad)
        if self.min_updates is not None and not 1 <= self.min_updates <= self.clients:
            raise bad(
                "min_updates", f"must be between 1 and the number of clients ({self.clients})"
            )
        if not self.clip > 0:
            raise bad("clip", "must be positive")
        if not 0 <= self.frac_bits <= 30:
            raise bad("frac_bits", "must be in 0..30")
        if self.clip * 2**self.frac_bits > 2**30:
            raise bad(
                "clip", f"clip * 2**frac_bits (frac_bits {self.frac_bits}) must not exceed 2**30"
            )
        if not self.alpha > 0:
            raise bad("alpha", "must be positive")
        if self.lr is not None and not self.lr > 0:
            raise bad("lr", "must be positive")
        if self.momentum is not None and not 0 <= self.momentum < 1:
            raise bad("momentum", "must be in [0, 1)")
        if self.prox_mu < 0:
            raise bad("prox_mu", "must be >= 0")
        if self.stop_norm is not None and not (
            math.isfinite(self.stop_norm) and round(self.stop_norm * 2**self.frac_bits) >= 1
        ):
            raise bad("stop_norm", "must be finite and at least one fixed-point unit")
        if self.stop_patience < 1:
            raise bad("stop_patience", "must be at least 1")
        if self.seed < 0:
            raise bad("seed", "must be >= 0")
        problem = run_name_problem(self.name)
        if problem is not None:
            raise bad("name", problem)
        if self.data_path is not None:
            import inspect

            from clients.data import DATASETS

            loader = DATASETS.get(self.dataset)
            if loader is not None and "path" not in inspect.signature(loader).parameters:
                raise bad("data_path", f"dataset {self.dataset!r} reads no files")
        # Unknown rule, bad parameters, or too few clients for them: fail now, not mid-run.
        try:
            rule = make_rule(self.rule, self.rule_params)
        except FedchainError as exc:
            key = "rule" if "unknown aggregation rule" in str(exc) else "rule_params"
            raise bad(key, str(exc)) from exc
        try:
            rule.check_num_updates(self.min_updates or self.clients)
        except FedchainError as exc:
            raise bad("min_updates" if self.min_updates else "clients", str(exc)) from exc
        self._validate_privacy(bad)

    def _validate_dispute(self, bad: typing.Callable[..., ConfigError]) -> None:
        """The dispute mode, and what the fault proof can replay: a rule with a one-step
        check (FedAvg, FedProx, Median, Trimmed mean) on updates every member sees
        (plaintext or local DP); secure aggregation and HE hide them and keep PBFT."""
        if self.dispute not in DISPUTE_MODES:
            raise bad("dispute", f"must be one of {list(DISPUTE_MODES)}")
        if self.dispute == "pbft":
            return
        if self.attest_window == 0:
            raise bad(
                "attest_window",
                f"--dispute {self.dispute} needs an attestation window (the fault proof tells "
                "an update the committee did not include from one the submitter excluded); "
                "use --attest-window 1 or more",
            )
        from aggregators.faultproof import RULE_IDS

        if self.rule not in RULE_IDS:
            raise bad(
                "dispute",
                f"rule {self.rule!r} has no one-step fault proof (rules with one: "
                f"{sorted(RULE_IDS)}); use --dispute pbft",
            )
        try:
            mode = parse_mode(self.privacy)
        except ConfigError:
            return  # reported by the privacy checks
        if mode not in FAULT_PROOF_PRIVACY:
            raise bad(
                "dispute",
                f"--privacy {mode} hides each update, so no step can replay it (fault proofs "
                f"need --privacy {' or '.join(FAULT_PROOF_PRIVACY)}); use --dispute pbft",
            )

    def _validate_privacy(self, bad: typing.Callable[..., ConfigError]) -> None:
        """Privacy options: each value, each option against the mode that uses it, the rule
        and the ring against the sum modes, then the budget of the planned rounds (refused
        before any work if it would be overspent, unless --budget-policy stop)."""
        from privacy.spec import parse_mode

        try:
            mode = parse_mode(self.privacy)
        except ConfigError as exc:
            raise bad("privacy", str(exc).split(": ", 1)[-1]) from exc
        for key, modes, needs in PRIVACY_OPTIONS:
            if getattr(self, key) != getattr(DemoConfig, key) and mode not in modes:
                raise bad(key, f"needs --privacy {needs}")
        for key in ("clip_quantile", "clip_learning_rate", "clip_bit_epsilon"):
            if getattr(self, key) != getattr(DemoConfig, key) and not self.adaptive_clip:
                raise bad(key, "needs --adaptive-clip")
        spec = self.privacy_spec()
        try:
            spec.validate()
        except ConfigError as exc:
            text = str(exc)
            key = next((k for k in PRIVACY_KEYS if text.startswith(k + " ")), "privacy")
            key = "clients" if key == "num_clients" else key
            raise bad(key, text.split(": ", 1)[-1]) from exc
        if self.he_key_bits < 1024:
            raise bad("he_key_bits", "must be at least 1024 (2048 recommended)")
        if self.he_threshold and not 2 <= self.he_threshold <= self.aggregators:
            raise bad(
                "he_threshold",
                f"must be in 2..--aggregators ({self.aggregators}): one member per aggregator, "
                "and no single member may decrypt",
            )
        if self.reveal_window < 1:
            raise bad("reveal_window", "must be at least 1 block")
        if not spec.enabled:
            return
        if spec.hides_updates:
            self._validate_sum_mode(bad, spec)
        if self.sample_rate < 1 and self.min_updates is None:
            raise bad(
                "sample_rate",
                "clients then skip rounds at random: set --min-updates (at most the expected "
                f"participants, {self.sample_rate * self.clients:.3g})",
            )
        try:
            spec.resolve(self.rounds)
        except FedchainError as exc:
            raise bad("target_epsilon", str(exc)) from exc

    def _validate_sum_mode(self, bad: typing.Callable[..., ConfigError], spec: PrivacySpec) -> None:
        """Secure aggregation / HE: a rule that works on the sum, enough updates per round
        for the threshold, and (without DP) fixed-point sums that fit the 32-bit ring."""
        rule = make_rule(self.rule, self.rule_params)
        if not rule.sum_based:
            from aggregators.registry import available_rules, get_rule_class

            ok = [r for r in available_rules() if get_rule_class(r).sum_based]
            raise bad(
                "rule",
                f"needs each update, which --privacy {spec.mode} hides (aggregators only see "
                f"the sum); rules that work on the sum: {ok}",
            )
        if self.reveal_window + 2 > self.submit_timeout:
            raise bad(
                "reveal_window",
                f"must leave the aggregator time to submit after it: at most --submit-timeout "
                f"- 2 = {self.submit_timeout - 2}",
            )
        if self.min_updates is not None and self.min_updates < spec.threshold:
            raise bad(
                "min_updates",
                f"below the secure-aggregation threshold {spec.threshold} (= ceil((1 - "
                f"--dropout-fraction) x --clients)): such a round could never be unmasked",
            )
        if not spec.distributed:
            bound = round(self.clip * 2**self.frac_bits)
            if self.clients * bound >= 2**31:
                raise bad(
                    "clients",
                    f"{self.clients} updates of |value| <= {bound} (--clip x 2**--frac-bits) "
                    "can sum past 2**31 and wrap around the 32-bit ring: lower --clip",
                )


#: From this many clients on, ``--mask-graph auto`` is SecAgg+ (docs/privacy.md).
SECAGG_PLUS_FROM = 200


def finder_parameters(clients: int, corrupt: float, dropout: float) -> tuple[int, int]:
    """SecAgg+'s (degree, threshold) for ``clients`` from the published parameter finder
    (Bell et al. 2020; σ = 40, η = 20), refused with one line if infeasible."""
    from privacy.secagg_graph import find_parameters

    try:
        params = find_parameters(clients, corrupt, dropout)
    except ConfigError as exc:
        raise ConfigError(f"mask_graph 'harary': {exc}") from exc
    return int(params.degree), int(params.threshold)


#: Privacy options, the modes that use them, and how an error names those modes.
PRIVACY_OPTIONS = (
    ("dp_mechanism", ("ldp", "ddp+secagg", "ddp+he"), "ldp, ddp+secagg or ddp+he"),
    ("target_epsilon", ("ldp", "ddp+secagg", "ddp+he"), "ldp, ddp+secagg or ddp+he"),
    ("target_delta", ("ldp", "ddp+secagg", "ddp+he"), "ldp, ddp+secagg or ddp+he"),
    ("noise_multiplier", ("ldp", "ddp+secagg", "ddp+he"), "ldp, ddp+secagg or ddp+he"),
    ("clip_norm", ("ldp", "ddp+secagg", "ddp+he"), "ldp, ddp+secagg or ddp+he"),
    ("budget_policy", ("ldp", "ddp+secagg", "ddp+he"), "ldp, ddp+secagg or ddp+he"),
    ("adaptive_clip", ("ldp", "ddp+secagg", "ddp+he"), "ldp, ddp+secagg or ddp+he"),
    ("sample_rate", ("ldp",), "ldp"),
    ("dropout_fraction", SUM_MODES, "secagg, ddp+secagg, he or ddp+he"),
    ("ddp_scale", ("ddp+secagg", "ddp+he"), "ddp+secagg or ddp+he"),
    ("he_key_bits", ("he", "ddp+he"), "he or ddp+he"),
    ("he_threshold", ("he", "ddp+he"), "he or ddp+he"),
    ("reveal_window", SUM_MODES, "secagg, ddp+secagg, he or ddp+he"),
    ("sample_counts", SUM_MODES, "secagg, ddp+secagg, he or ddp+he"),
    ("mask_graph", ("secagg", "ddp+secagg"), "secagg or ddp+secagg"),
    ("graph_degree", ("secagg", "ddp+secagg"), "secagg or ddp+secagg"),
    ("graph_threshold", ("secagg", "ddp+secagg"), "secagg or ddp+secagg"),
    ("corrupt_fraction", ("secagg", "ddp+secagg"), "secagg or ddp+secagg"),
)
PRIVACY_KEYS = (*(k for k, _, _ in PRIVACY_OPTIONS), "clip_quantile", "clip_learning_rate")
PRIVACY_KEYS = (*PRIVACY_KEYS, "clip_bit_epsilon", "num_clients")


#: CLI spelling of the DemoConfig fields whose option name is not ``--field-name``.
OPTION_NAMES = {"rule_params": "--rule-param"}


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a run directory (it is joined to ``--out``), else None.

    A name is one path component: no ``/`` or ``\\``, not ``.`` or ``..`` or containing
    ``..``, no NUL or other control character, not starting with ``-`` (it would read as an
    option), at most 100 characters."""
    if not name:
        return "must not be empty"
    if len(name) > 100:
        return "at most 100 characters"
    if "/" in name or "\\" in name:
        return "one directory name: no '/' or '\\' (it would write outside --out)"
    if ".." in name or name == ".":
        return "must not contain '..' (it would write outside --out)"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "no NUL or control characters"
    if name.startswith("-"):
        return "must not start with '-'"
    return None


def setting_label(key: str, value: Any, where: str | None = None) -> str:
    """How an error names a setting: ``--clients 'ten'`` or ``x.toml [run] clients = 'ten'``."""
    if where:
        return f"{where} {key} = {value!r}"
    option = OPTION_NAMES.get(key, "--" + key.replace("_", "-"))
    return f"{option} {value!r}"


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _describe(hint: Any) -> str:
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    words = [
        _TYPE_WORDS.get(o, "a table") if o is not type(None) else "absent"
        for o in options
        if o is not type(None)
    ]
    return " or ".join(words)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def value_matches(value: Any, hint: Any) -> bool:
    """True if ``value`` has the type ``hint`` promises (ints accepted for floats, never bools)."""
    if _is_union(hint):
        return any(value_matches(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    origin = typing.get_origin(hint) or hint
    if origin in (dict, Mapping, typing.Mapping):
        return isinstance(value, Mapping)
    if origin in (list, tuple, frozenset, set):
        return isinstance(value, list | tuple | frozenset | set)
    return True


def check_types(obj: Any, label: typing.Callable[[str, Any], str]) -> None:
    """Check every dataclass field of ``obj`` against its annotation (``ConfigError``).

    ``label(key, value)`` names the offending setting in the message.
    """
    hints = typing.get_type_hints(type(obj))
    for f in fields(obj):
        value = getattr(obj, f.name)
        if not value_matches(value, hints[f.name]):
            raise ConfigError(f"{label(f.name, value)}: expected {_describe(hints[f.name])}")


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """Parse a TOML file; every way it can fail is one ``ConfigError`` naming ``what`` and
    the path (``scenario 'x.toml': no such file``)."""
    import tomllib

    p = Path(path)
    try:
        return tomllib.loads(p.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} {str(p)!r}: no such file") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"{what} {str(p)!r}: is a directory, not a TOML file") from exc
    except PermissionError as exc:
        raise ConfigError(f"{what} {str(p)!r}: permission denied") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {str(p)!r}: not a UTF-8 text file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {str(p)!r}: invalid TOML: {exc}") from exc


def short_reason(exc: BaseException) -> str:
    """The root cause of a connection failure in a few words (not a nested repr)."""
    text = str(exc)
    for marker, words in (
        ("Connection refused", "connection refused (is the node running?)"),
        ("timed out", "timed out"),
        ("Name or service not known", "unknown host"),
        ("No route to host", "no route to host"),
    ):
        if marker in text:
            return words
    first = text.splitlines()[0] if text else type(exc).__name__
    return first if len(first) <= 160 else first[:157] + "..."
