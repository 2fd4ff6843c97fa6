"""The privacy settings of a task: parsed, validated, resolved, and bound into the manifest.

``--privacy`` names one mode or a ``+``-joined combination of components: ``none``, ``ldp``
(local DP), ``secagg`` (secure aggregation: only the sum of the updates is revealed), ``he``
(additive homomorphic encryption: only the key holder's verified decryption of the sum),
and distributed DP on top of either, ``ddp+secagg`` (the mode to recommend) or ``ddp+he``.
:class:`PrivacySpec` holds the resolved parameters: the noise multiplier is either given or
derived from the target (ε, δ) for the planned rounds by the accountant, and a task whose
rounds would overspend its target is refused before it starts (or, with the ``stop``
budget policy, runs only the rounds it can afford). :meth:`PrivacySpec.to_manifest` is the
canonical dict stored in the task manifest, hence bound into ``ruleParamsHash``.

Noise multiplier convention: ``noise_multiplier = σ / Δ`` where Δ is the sensitivity of one
client's contribution. Under local DP any two inputs are neighbours, so for updates clipped
to ``clip_norm`` C the sensitivity is Δ = 2C (L2 for Gaussian noise, L1 for Laplace noise).
Under distributed DP replacing one client's integer vector (L2 norm at most ``ddp_scale``
S) moves the sum by at most Δ = 2S (:mod:`privacy.distributed`), and
``noise_multiplier = √μ / 2S`` for the sum's Skellam variance μ.

With adaptive clipping (ldp and ddp modes) ``clip_norm`` is the initial clip norm; each
round's clip norm is in the published global state (:mod:`privacy.adaptive_clip`), and the
accountant charges each round's ε-DP clip bit on top of the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from privacy.accounting import (
    MECHANISMS,
    Accountant,
    RoundRelease,
    calibrate_noise_multiplier,
)
from privacy.distributed import DEFAULT_SCALE, DdpParams, survivor_threshold
from privacy.mechanisms import check_delta, check_epsilon, check_positive
from privacy.reveal_safety import check_threshold_floor
from protocol.errors import ConfigError, PrivacyBudgetError, PrivacyError

__all__ = [
    "BUDGET_POLICIES",
    "COMPONENTS",
    "IMPLEMENTED_MODES",
    "SUM_MODES",
    "PrivacySpec",
    "parse_mode",
]

#: Every privacy component a mode may combine (docs/privacy.md).
COMPONENTS = ("ldp", "ddp", "secagg", "he")
#: Combinations that make sense; the others are refused with a reason.
VALID_MODES = ("none", "ldp", "secagg", "ddp+secagg", "he", "ddp+he")
#: What this build runs end to end.
IMPLEMENTED_MODES = VALID_MODES
#: Modes in which aggregators only ever see the sum of the included updates.
SUM_MODES = ("secagg", "ddp+secagg", "he", "ddp+he")
BUDGET_POLICIES = ("refuse", "stop")
#: Noise of distributed DP: Skellam, the integer analogue of the Gaussian.
DDP_MECHANISM = "skellam"


@lru_cache(maxsize=64)
def _accountant(release: RoundRelease, delta: float) -> Accountant:
    return Accountant(release, delta)


@lru_cache(maxsize=32)
def _resolved(spec: PrivacySpec, rounds: int) -> tuple[PrivacySpec, int]:
    return spec._resolve(rounds)  # a calibration costs seconds: once per spec and plan


def parse_mode(text: str) -> str:
    """The canonical spelling of a ``--privacy`` value (components sorted: ``ddp+secagg``).

    Refuses unknown components, nonsense combinations (``ldp`` with anything; ``ddp``
    without a way to hide individual updates; ``secagg`` with ``he``) with a reason.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{text!r}: expected one of {list(VALID_MODES)}")
    parts = [p.strip().lower() for p in text.split("+")]
    if parts == ["none"]:
        return "none"
    unknown = [p for p in parts if p not in COMPONENTS]
    if unknown:
        raise ConfigError(f"{text!r}: unknown component(s) {unknown}; known: {list(COMPONENTS)}")
    if len(set(parts)) != len(parts):
        raise ConfigError(f"{text!r}: a component is repeated")
    order = {c: i for i, c in enumerate(COMPONENTS)}
    mode = "+".join(sorted(parts, key=order.__getitem__))
    if mode not in VALID_MODES:
        reasons = {
            "ddp": "distributed DP needs secure aggregation or HE to hide each client's share "
            "(use ddp+secagg)",
            "secagg+he": "secure aggregation and HE both hide individual updates: pick one",
            "ddp+secagg+he": "secure aggregation and HE both hide individual updates: pick one",
        }
        reason = reasons.get(mode, "local DP already perturbs each update; combine nothing")
        raise ConfigError(f"{text!r}: {reason}; valid: {list(VALID_MODES)}")
    return mode


#: The mask graphs of secure aggregation: Bonawitz et al.'s complete graph, or SecAgg+'s
#: random Harary graph (privacy.mask_graph).
MASK_GRAPHS = ("full", "harary")

#: What a client registers as ``numSamples`` in a sum mode (``PrivacySpec.sample_counts``).
SAMPLE_COUNTS = ("exact", "bucket", "hidden")


@dataclass(frozen=True)
class PrivacySpec:
    """A task's privacy parameters (see the module docstring for the conventions).

    ``mode`` is canonical (:func:`parse_mode`). DP modes: ``mechanism`` is ``gaussian`` or
    ``laplace`` (ldp) or ``skellam`` (ddp), ``clip_norm`` the (initial) clip norm,
    ``target_delta`` the δ the accountant reports at, ``target_epsilon`` the budget (None:
    unbounded, ε is still reported), ``noise_multiplier`` (None until :meth:`resolve`
    derives it from the target), ``sample_rate`` the probability a client takes part in a
    round (ldp only). Sum modes (secagg, he): ``num_clients`` K and ``dropout_fraction`` ρ
    (the round survives ``K − ⌈(1 − ρ)K⌉`` dropouts; the DDP noise is sized for them);
    ``ddp_scale`` S is the integer L2 bound of one client's DDP vector. Adaptive clipping:
    ``clip_quantile`` γ, ``clip_learning_rate`` η, ``clip_bit_epsilon`` per round. HE:
    ``he_public_key`` (hex of the canonical bytes) and ``he_key_holder`` (address), or for
    threshold decryption ``he_threshold_key`` (hex of a
    :class:`~privacy.threshold_paillier.ThresholdKey`) and ``he_decryptors`` (the committee
    members' addresses, member i + 1 first). Sum
    modes publish their records on the task's ``records_contract`` (address, fixed before
    deployment), whose reveal window is ``reveal_window`` blocks. ``sample_counts`` is what
    a client registers on-chain as its ``numSamples`` in a sum mode (which weighs every
    included update 1): ``exact``, ``bucket`` (rounded up to a power of two) or ``hidden``
    (always 1).
    """

    mode: str = "none"
    mechanism: str = "gaussian"
    target_epsilon: float | None = None
    target_delta: float = 1e-5
    noise_multiplier: float | None = None
    clip_norm: float = 1.0
    sample_rate: float = 1.0
    budget_policy: str = "refuse"
    num_clients: int | None = None
    dropout_fraction: float = 0.3
    ddp_scale: int = DEFAULT_SCALE
    adaptive_clip: bool = False
    clip_quantile: float = 0.5
    clip_learning_rate: float = 0.2
    clip_bit_epsilon: float = 0.5
    he_public_key: str | None = None
    he_key_holder: str | None = None
    he_threshold_key: str | None = None
    he_decryptors: tuple[str, ...] = ()
    records_contract: str | None = None
    reveal_window: int = 3
    sample_counts: str = "exact"
    mask_graph: str = "full"
    graph_degree: int = 0
    graph_threshold: int = 0
    corrupt_fraction: float = 0.0

    @property
    def secagg_plus(self) -> bool:
        """True when secure aggregation masks along a random Harary graph (SecAgg+)."""
        return self.mask_graph == "harary" and "secagg" in self.components

    @property
    def min_included(self) -> int:
        """``n_min = ⌈(1 − δ)K⌉``: the fewest included updates a round reveals for (and the
        count the distributed-DP noise is calibrated to)."""
        if self.num_clients is None:
            raise ConfigError("the number of clients is not set")
        return survivor_threshold(self.num_clients, self.dropout_fraction)

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    @property
    def components(self) -> frozenset[str]:
        return frozenset() if self.mode == "none" else frozenset(self.mode.split("+"))

    @property
    def is_dp(self) -> bool:
        """True when the task carries a DP guarantee (local or distributed noise)."""
        return bool(self.components & {"ldp", "ddp"})

    @property
    def distributed(self) -> bool:
        return "ddp" in self.components

    @property
    def hides_updates(self) -> bool:
        """True when aggregators only see the sum (secure aggregation or HE)."""
        return self.mode in SUM_MODES

    def registered_samples(self, num_samples: int) -> int:
        """The ``numSamples`` a client registers on-chain for ``num_samples`` local examples
        (public forever; a sum mode does not use it, so it may be bucketed or hidden)."""
        n = max(1, int(num_samples))
        if self.sample_counts == "hidden":
            return 1
        if self.sample_counts == "bucket":
            return 1 << (n - 1).bit_length()
        return n

    @property
    def threshold(self) -> int:
        """Secure aggregation's Shamir threshold: ``t = ⌈(1 − ρ)K⌉`` of all clients in the
        full graph, the task's ``graph_threshold`` of a client's neighbours in SecAgg+."""
        if self.secagg_plus:
            return self.graph_threshold
        return self.min_included

    @property
    def sensitivity(self) -> float:
        """Δ of one client's contribution: 2C (local DP), 2S (distributed DP, integer units)."""
        if self.distributed:
            return 2.0 * self.ddp_scale
        return 2.0 * self.clip_norm

    @property
    def noise_scale(self) -> float:
        """σ (Gaussian), b (Laplace) or √μ (Skellam sum): noise_multiplier × Δ."""
        if self.noise_multiplier is None:
            raise ConfigError("the noise multiplier is not resolved yet")
        return self.noise_multiplier * self.sensitivity

    @property
    def bit_epsilon(self) -> float:
        """ε of the clip bit each client releases per round (0 without adaptive clipping)."""
        return self.clip_bit_epsilon if self.adaptive_clip else 0.0

    def vector_dim(self, model_size: int) -> int:
        """Coordinates of a client's vector in the sum modes: the model, plus the clip bit."""
        return model_size + (1 if self.adaptive_clip else 0)

    def ddp(self) -> DdpParams:
        """The distributed-DP parameters (ddp modes, resolved)."""
        if not self.distributed or self.noise_multiplier is None or self.num_clients is None:
            raise ConfigError("not a resolved distributed-DP spec")
        return DdpParams(
            self.ddp_scale, self.noise_multiplier, self.dropout_fraction, self.num_clients
        )

    def validate(self) -> None:
        """Check every parameter (one :class:`ConfigError` naming the bad one)."""
        mode = parse_mode(self.mode)
        if mode != self.mode:
            raise ConfigError(f"privacy mode {self.mode!r}: not canonical (use {mode!r})")
        if mode not in IMPLEMENTED_MODES:  # pragma: no cover - every valid mode is built
            raise ConfigError(f"privacy {mode!r}: not built; this build runs {IMPLEMENTED_MODES}")
        allowed = (DDP_MECHANISM,) if self.distributed else MECHANISMS
        if self.mechanism not in allowed:
            raise ConfigError(
                f"dp_mechanism {self.mechanism!r}: privacy {mode!r} uses {list(allowed)}"
            )
        check_delta(self.target_delta, "target_delta")
        if self.target_epsilon is not None:
            check_epsilon(self.target_epsilon, "target_epsilon")
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "noise_multiplier")
        check_positive(self.clip_norm, "clip_norm")
        if not 0.0 < float(self.sample_rate) <= 1.0:
            raise ConfigError(f"sample_rate {self.sample_rate!r}: must lie in (0, 1]")
        if self.budget_policy not in BUDGET_POLICIES:
            raise ConfigError(
                f"budget_policy {self.budget_policy!r}: must be one of {list(BUDGET_POLICIES)}"
            )
        if self.is_dp and self.target_epsilon is None and self.noise_multiplier is None:
            raise ConfigError(
                f"privacy {mode!r}: give a target (target_epsilon, target_delta) to derive the "
                "noise, or a noise_multiplier"
            )
        if self.sample_counts != "exact" and not self.hides_updates:
            raise ConfigError(
                f"sample_counts {self.sample_counts!r}: only a sum mode (secagg, he) ignores "
                "numSamples; plaintext aggregation weighs updates by it"
            )
        self._validate_sum_mode()
        self._validate_adaptive_clip()

    def _validate_sum_mode(self) -> None:
        if not self.hides_updates:
            return
        if self.num_clients is None or self.num_clients < 2:
            raise ConfigError(
                f"num_clients {self.num_clients!r}: privacy {self.mode!r} hides an update "
                "among the others, so it needs at least 2 clients"
            )
        if not 0.0 <= float(self.dropout_fraction) < 1.0:
            raise ConfigError(f"dropout_fraction {self.dropout_fraction!r}: must lie in [0, 1)")
        if int(self.reveal_window) < 1:
            raise ConfigError(f"reveal_window {self.reveal_window!r}: must be at least 1 block")
        if self.mask_graph not in MASK_GRAPHS:
            raise ConfigError(f"mask_graph {self.mask_graph!r}: must be one of {list(MASK_GRAPHS)}")
        if self.mask_graph != "full" and "secagg" not in self.components:
            raise ConfigError(f"mask_graph {self.mask_graph!r}: only secure aggregation masks")
        if not 0.0 <= float(self.corrupt_fraction) < 0.5:
            raise ConfigError(f"corrupt_fraction {self.corrupt_fraction!r}: must lie in [0, 0.5)")
        if self.secagg_plus:
            self._validate_graph()
        elif "secagg" in self.components:
            check_threshold_floor(self.num_clients, self.threshold, self.corrupt_fraction)
        if self.sample_counts not in SAMPLE_COUNTS:
            raise ConfigError(
                f"sample_counts {self.sample_counts!r}: must be one of {list(SAMPLE_COUNTS)}"
            )
        if float(self.sample_rate) < 1.0:
            raise ConfigError(
                f"sample_rate {self.sample_rate!r}: privacy {self.mode!r} needs every client "
                "in every round (a client that sits a round out counts as dropped, and "
                "on-chain participation is public, so sampling amplifies nothing)"
            )
        if self.distributed:
            DdpParams(
                self.ddp_scale,
                self.noise_multiplier or 1.0,
                self.dropout_fraction,
                self.num_clients,
            )
        if self.he_threshold_key:
            self._validate_threshold_he()

    def _validate_graph(self) -> None:
        """SecAgg+: ``2 <= k < K − 1`` neighbours, a threshold ``2 <= t <= k + 1``, above the
        corrupt share of a neighbourhood, and a neighbourhood that survives the dropouts."""
        k, t, n = int(self.graph_degree), int(self.graph_threshold), self.num_clients or 0
        if not 2 <= k < n - 1:
            raise ConfigError(
                f"graph_degree {k}: SecAgg+ needs 2 <= k < K - 1 = {n - 1} (use mask_graph "
                "'full' for a complete graph)"
            )
        if not 2 <= t <= k + 1:
            raise ConfigError(
                f"graph_threshold {t}: must lie in 2..k + 1 = {k + 1} (at t = 1 every share is "
                "the secret)"
            )
        if t <= self.corrupt_fraction * (k + 1):
            raise ConfigError(
                f"graph_threshold {t}: the expected {self.corrupt_fraction:g} x {k + 1} corrupt "
                "neighbours could reconstruct a secret alone (raise the threshold)"
            )
        if t > math.floor((1.0 - self.dropout_fraction) * (k + 1)):
            raise ConfigError(
                f"graph_threshold {t}: a neighbourhood of {k + 1} keeps only "
                f"{math.floor((1.0 - self.dropout_fraction) * (k + 1))} members after "
                f"{self.dropout_fraction:g} dropouts (lower the threshold or --dropout-fraction)"
            )

    def _validate_threshold_he(self) -> None:
        from privacy import he
        from privacy.threshold_paillier import ThresholdKey

        try:
            key = ThresholdKey.from_bytes(bytes.fromhex(self.he_threshold_key or ""))
            n = int(he.load_public_key(bytes.fromhex(self.he_public_key or "")).n)
        except (ValueError, PrivacyError) as exc:
            raise ConfigError(f"he_threshold_key: {exc}") from exc
        if "he" not in self.components or key.n != n:
            raise ConfigError("he_threshold_key: not the modulus of the task's HE public key")
        if key.threshold < 2 or len(self.he_decryptors) != key.members:
            raise ConfigError(
                f"he_threshold_key: threshold {key.threshold} of {key.members} members with "
                f"{len(self.he_decryptors)} decryptors (no single party may decrypt: t >= 2)"
            )

    def _validate_adaptive_clip(self) -> None:
        if not self.adaptive_clip:
            return
        if not self.is_dp:
            raise ConfigError(
                f"adaptive_clip: privacy {self.mode!r} clips nothing (adaptive clipping sets "
                "the clip norm of a DP mode: ldp, ddp+secagg or ddp+he)"
            )
        if not 0.0 < float(self.clip_quantile) < 1.0:
            raise ConfigError(f"clip_quantile {self.clip_quantile!r}: must lie in (0, 1)")
        check_positive(self.clip_learning_rate, "clip_learning_rate")
        check_epsilon(self.clip_bit_epsilon, "clip_bit_epsilon")

    def release(self, noise_multiplier: float | None = None) -> RoundRelease:
        """What one client releases per round, for the accountant."""
        z = self.noise_multiplier if noise_multiplier is None else noise_multiplier
        if z is None:
            raise ConfigError("the noise multiplier is not resolved yet")
        if self.distributed:
            skellam = replace(self, noise_multiplier=z).ddp().release()
            return RoundRelease(
                DDP_MECHANISM, z, 1.0, bit_epsilon=self.bit_epsilon, skellam=skellam
            )
        return RoundRelease(self.mechanism, z, self.sample_rate, bit_epsilon=self.bit_epsilon)

    def accountant(self) -> Accountant:
        """The accountant of this spec's release (shared between equal specs: it caches)."""
        return _accountant(self.release(), self.target_delta)

    def resolve(self, rounds: int) -> tuple[PrivacySpec, int]:
        """This spec with its noise multiplier fixed, and the rounds it can afford.

        Without a noise multiplier it is derived from the target for ``rounds`` rounds. With
        both, a plan that overspends the target is refused (:class:`PrivacyBudgetError`)
        unless the budget policy is ``stop``, in which case the affordable number of rounds
        (at least 1) is returned. Modes without DP (secagg, he) have nothing to resolve.
        """
        self.validate()
        if not self.is_dp:
            return self, rounds
        return _resolved(self, rounds)

    def _resolve(self, rounds: int) -> tuple[PrivacySpec, int]:
        spec = self
        if spec.noise_multiplier is None:
            assert spec.target_epsilon is not None
            z = calibrate_noise_multiplier(
                spec.mechanism,
                spec.target_epsilon,
                spec.target_delta,
                rounds,
                bit_epsilon=spec.bit_epsilon,
                release_for=spec.release if spec.distributed else None,
            )
            spec = replace(spec, noise_multiplier=z)
        if spec.target_epsilon is None:
            return spec, rounds
        acc = spec.accountant()
        if acc.epsilon(rounds) <= spec.target_epsilon:
            return spec, rounds
        affordable = spec.affordable_rounds(rounds)
        if spec.budget_policy == "stop" and affordable >= 1:
            return spec, affordable
        raise PrivacyBudgetError(
            f"--rounds {rounds} with noise multiplier {spec.noise_multiplier:g} would spend "
            f"epsilon {acc.epsilon(rounds):.4g} > --target-epsilon {spec.target_epsilon:g} "
            f"(delta {spec.target_delta:g}); the budget affords {affordable} round(s): lower "
            "--rounds, raise the noise, omit --noise-multiplier to derive it, or use "
            "--budget-policy stop"
        )

    def affordable_rounds(self, rounds: int) -> int:
        """The largest t ≤ ``rounds`` whose ε stays within the target (all if no target)."""
        if self.target_epsilon is None or not self.is_dp:
            return rounds
        acc = self.accountant()
        lo, hi = 0, rounds
        while lo < hi:  # ε is non-decreasing in t
            mid = (lo + hi + 1) // 2
            if acc.epsilon(mid) <= self.target_epsilon:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def to_manifest(self) -> dict[str, Any]:
        """The canonical dict bound into the task manifest (resolved values only).

        A local-DP task without adaptive clipping has exactly the keys of phase 1, so its
        manifest hash did not change.
        """
        if not self.enabled:
            return {"mode": "none"}
        out: dict[str, Any] = {"mode": self.mode}
        if self.is_dp:
            out.update(
                mechanism=self.mechanism,
                noise_multiplier=self.noise_multiplier,
                clip_norm=self.clip_norm,
                sensitivity=self.sensitivity,
                target_epsilon=self.target_epsilon,
                target_delta=self.target_delta,
                sample_rate=self.sample_rate,
                accountant=self.accountant().name,
            )
        if self.hides_updates:
            out["aggregation"] = {
                "num_clients": self.num_clients,
                "dropout_fraction": self.dropout_fraction,
                "threshold": self.threshold,
                "records_contract": self.records_contract,
                "reveal_window": self.reveal_window,
            }
            if self.sample_counts != "exact":  # absent by default: manifest hashes unchanged
                out["aggregation"]["sample_counts"] = self.sample_counts
            if self.secagg_plus:  # absent for the full graph: manifest hashes unchanged
                from privacy.mask_graph import GRAPH_VERSION

                out["aggregation"]["graph"] = {
                    "kind": self.mask_graph,
                    "version": GRAPH_VERSION,
                    "degree": self.graph_degree,
                    "threshold": self.graph_threshold,
                    "corrupt_fraction": self.corrupt_fraction,
                    "min_included": self.min_included,
                }
        if self.distributed:
            p = self.ddp()
            out["ddp"] = {
                "scale": p.scale,
                "variance": p.variance,
                "client_variance": p.client_variance,
            }
        if self.adaptive_clip:
            out["adaptive_clip"] = {
                "target_quantile": self.clip_quantile,
                "learning_rate": self.clip_learning_rate,
                "bit_epsilon": self.clip_bit_epsilon,
            }
        if "he" in self.components:
            out["he"] = {"public_key": self.he_public_key, "key_holder": self.he_key_holder}
            if self.he_threshold_key:  # absent otherwise: manifest hashes unchanged
                out["he"]["threshold_key"] = self.he_threshold_key
                out["he"]["decryptors"] = list(self.he_decryptors)
        return out

    @classmethod
    def from_manifest(cls, obj: dict[str, Any]) -> PrivacySpec:
        """Read a manifest's ``privacy`` dict back (validated)."""
        try:
            mode = str(obj.get("mode", "none"))
            if mode == "none":
                return cls()
            kw: dict[str, Any] = {"mode": mode}
            if "noise_multiplier" in obj:
                kw.update(
                    mechanism=str(obj["mechanism"]),
                    target_epsilon=None
                    if obj.get("target_epsilon") is None
                    else float(obj["target_epsilon"]),
                    target_delta=float(obj["target_delta"]),
                    noise_multiplier=float(obj["noise_multiplier"]),
                    clip_norm=float(obj["clip_norm"]),
                    sample_rate=float(obj.get("sample_rate", 1.0)),
                )
            if "aggregation" in obj:
                agg = obj["aggregation"]
                kw.update(
                    num_clients=int(agg["num_clients"]),
                    dropout_fraction=float(agg["dropout_fraction"]),
                    records_contract=agg.get("records_contract"),
                    reveal_window=int(agg.get("reveal_window", 3)),
                    sample_counts=str(agg.get("sample_counts", "exact")),
                )
                if "graph" in agg:
                    from privacy.mask_graph import GRAPH_VERSION

                    graph = agg["graph"]
                    if str(graph["version"]) != GRAPH_VERSION:
                        raise ConfigError(
                            f"mask graph version {graph['version']}: this build derives "
                            f"version {GRAPH_VERSION}"
                        )
                    kw.update(
                        mask_graph=str(graph["kind"]),
                        graph_degree=int(graph["degree"]),
                        graph_threshold=int(graph["threshold"]),
                        corrupt_fraction=float(graph["corrupt_fraction"]),
                    )
            if "ddp" in obj:
                kw["ddp_scale"] = int(obj["ddp"]["scale"])
            if "adaptive_clip" in obj:
                ac = obj["adaptive_clip"]
                kw.update(
                    adaptive_clip=True,
                    clip_quantile=float(ac["target_quantile"]),
                    clip_learning_rate=float(ac["learning_rate"]),
                    clip_bit_epsilon=float(ac["bit_epsilon"]),
                )
            if "he" in obj:
                kw.update(
                    he_public_key=obj["he"].get("public_key"),
                    he_key_holder=obj["he"].get("key_holder"),
                    he_threshold_key=obj["he"].get("threshold_key"),
                    he_decryptors=tuple(obj["he"].get("decryptors", ())),
                )
            spec = cls(**kw)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"invalid privacy section in the task manifest: {exc}") from exc
        spec.validate()
        if spec.hides_updates and spec.to_manifest().get("aggregation") != obj.get("aggregation"):
            raise ConfigError("privacy section of the task manifest: inconsistent threshold")
        return spec
