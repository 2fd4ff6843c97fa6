"""The privacy settings of a task: parsed, validated, resolved, and bound into the manifest.

``--privacy`` names one mode or a ``+``-joined combination of components, e.g. ``none``,
``ldp``, and (designed, docs/privacy.md, built in phase 2) ``ddp+secagg`` or ``he``.
:class:`PrivacySpec` holds the resolved parameters: the noise multiplier is either given or
derived from the target (ε, δ) for the planned rounds by the accountant, and a task whose
rounds would overspend its target is refused before it starts (or, with the ``stop``
budget policy, runs only the rounds it can afford). :meth:`PrivacySpec.to_manifest` is the
canonical dict stored in the task manifest, hence bound into ``ruleParamsHash``.

Noise multiplier convention: ``noise_multiplier = σ / Δ`` where Δ is the sensitivity of one
client's release. Under local DP any two inputs are neighbours, so for updates clipped to
``clip_norm`` C the sensitivity is Δ = 2C (L2 for Gaussian noise, L1 for Laplace noise).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from privacy.accounting import (
    MECHANISMS,
    Accountant,
    RoundRelease,
    calibrate_noise_multiplier,
)
from privacy.mechanisms import check_delta, check_epsilon, check_positive
from protocol.errors import ConfigError, PrivacyBudgetError

__all__ = [
    "BUDGET_POLICIES",
    "COMPONENTS",
    "IMPLEMENTED_MODES",
    "PrivacySpec",
    "parse_mode",
]

#: Every privacy component a mode may combine (docs/privacy.md).
COMPONENTS = ("ldp", "ddp", "secagg", "he")
#: Combinations that make sense; the others are refused with a reason.
VALID_MODES = ("none", "ldp", "secagg", "ddp+secagg", "he", "ddp+he")
#: What this build runs end to end; the others are designed (docs/privacy.md, phase 2).
IMPLEMENTED_MODES = ("none", "ldp")
BUDGET_POLICIES = ("refuse", "stop")


@lru_cache(maxsize=64)
def _accountant(release: RoundRelease, delta: float) -> Accountant:
    return Accountant(release, delta)


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
        }
        reason = reasons.get(mode, "local DP already perturbs each update; combine nothing")
        raise ConfigError(f"{text!r}: {reason}; valid: {list(VALID_MODES)}")
    return mode


@dataclass(frozen=True)
class PrivacySpec:
    """A task's privacy parameters (see the module docstring for the conventions).

    ``mode`` is canonical (:func:`parse_mode`); for local DP, ``mechanism`` is ``gaussian``
    or ``laplace``, ``clip_norm`` the L2 (Gaussian) or L1 (Laplace) clip, ``target_delta``
    the δ the accountant reports at, ``target_epsilon`` the budget (None: unbounded, ε is
    still reported), ``noise_multiplier`` σ/Δ (None until :meth:`resolve` derives it from
    the target), ``sample_rate`` the probability a client takes part in a round.
    """

    mode: str = "none"
    mechanism: str = "gaussian"
    target_epsilon: float | None = None
    target_delta: float = 1e-5
    noise_multiplier: float | None = None
    clip_norm: float = 1.0
    sample_rate: float = 1.0
    budget_policy: str = "refuse"

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    @property
    def components(self) -> frozenset[str]:
        return frozenset() if self.mode == "none" else frozenset(self.mode.split("+"))

    @property
    def sensitivity(self) -> float:
        """Δ of one local-DP release: any two clipped inputs are at most 2C apart."""
        return 2.0 * self.clip_norm

    @property
    def noise_scale(self) -> float:
        """σ (Gaussian) or b (Laplace) of the local noise: noise_multiplier × Δ."""
        if self.noise_multiplier is None:
            raise ConfigError("the noise multiplier is not resolved yet")
        return self.noise_multiplier * self.sensitivity

    def validate(self) -> None:
        """Check every parameter (one :class:`ConfigError` naming the bad one)."""
        mode = parse_mode(self.mode)
        if mode != self.mode:
            raise ConfigError(f"privacy mode {self.mode!r}: not canonical (use {mode!r})")
        if mode not in IMPLEMENTED_MODES:
            raise ConfigError(
                f"privacy {mode!r}: designed in docs/privacy.md but not built yet; this build "
                f"runs {list(IMPLEMENTED_MODES)}"
            )
        if self.mechanism not in MECHANISMS:
            raise ConfigError(f"dp_mechanism {self.mechanism!r}: must be one of {list(MECHANISMS)}")
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
        if mode == "ldp" and self.target_epsilon is None and self.noise_multiplier is None:
            raise ConfigError(
                "privacy 'ldp': give a target (target_epsilon, target_delta) to derive the "
                "noise, or a noise_multiplier"
            )

    def release(self) -> RoundRelease:
        """What one client releases per round, for the accountant."""
        if self.noise_multiplier is None:
            raise ConfigError("the noise multiplier is not resolved yet")
        return RoundRelease(self.mechanism, self.noise_multiplier, self.sample_rate)

    def accountant(self) -> Accountant:
        """The accountant of this spec's release (shared between equal specs: it caches)."""
        return _accountant(self.release(), self.target_delta)

    def resolve(self, rounds: int) -> tuple[PrivacySpec, int]:
        """This spec with its noise multiplier fixed, and the rounds it can afford.

        Without a noise multiplier it is derived from the target for ``rounds`` rounds. With
        both, a plan that overspends the target is refused (:class:`PrivacyBudgetError`)
        unless the budget policy is ``stop``, in which case the affordable number of rounds
        (at least 1) is returned.
        """
        self.validate()
        if not self.enabled:
            return self, rounds
        spec = self
        if spec.noise_multiplier is None:
            assert spec.target_epsilon is not None
            z = calibrate_noise_multiplier(
                spec.mechanism, spec.target_epsilon, spec.target_delta, rounds
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
        if self.target_epsilon is None:
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
        """The canonical dict bound into the task manifest (resolved values only)."""
        if not self.enabled:
            return {"mode": "none"}
        return {
            "mode": self.mode,
            "mechanism": self.mechanism,
            "noise_multiplier": self.noise_multiplier,
            "clip_norm": self.clip_norm,
            "sensitivity": self.sensitivity,
            "target_epsilon": self.target_epsilon,
            "target_delta": self.target_delta,
            "sample_rate": self.sample_rate,
            "accountant": self.accountant().name,
        }

    @classmethod
    def from_manifest(cls, obj: dict[str, Any]) -> PrivacySpec:
        """Read a manifest's ``privacy`` dict back (validated)."""
        try:
            mode = str(obj.get("mode", "none"))
            if mode == "none":
                return cls()
            spec = cls(
                mode=mode,
                mechanism=str(obj["mechanism"]),
                target_epsilon=None
                if obj.get("target_epsilon") is None
                else float(obj["target_epsilon"]),
                target_delta=float(obj["target_delta"]),
                noise_multiplier=float(obj["noise_multiplier"]),
                clip_norm=float(obj["clip_norm"]),
                sample_rate=float(obj.get("sample_rate", 1.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"invalid privacy section in the task manifest: {exc}") from exc
        spec.validate()
        return spec
