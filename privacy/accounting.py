"""Client-level privacy accounting with Google's dp-accounting: ε after every round.

A task releases, per round and per participating client, one noisy vector (plus, with
adaptive clipping, one privatised bit: :mod:`privacy.adaptive_clip`). :class:`RoundRelease`
describes that release in the accountant's units; :class:`Accountant` composes it over
rounds with dp-accounting and reports the cumulative ε at the task's δ after each round.
Nothing here adds up epsilons by hand: composition, subsampling and the (ε, δ) conversion
are the library's.

* **Gaussian and Laplace** (local DP): privacy-loss distributions (PLD, connect-the-dots,
  pessimistic) — ``from_gaussian_mechanism`` / ``from_laplace_mechanism`` with the
  sensitivity of the release, composed with ``from_privacy_parameters(ε_bit)`` for the
  clip bit, then self-composed.
* **Skellam** (distributed DP): Rényi DP with dp-accounting's ``ZCDpEvent``: the Skellam
  mechanism with integer L1/L2 sensitivities Δ₁, Δ₂ and variance μ is (α, ε(α))-RDP with
  ``ε(α) ≤ αΔ₂²/2μ + min(((2α−1)Δ₂² + 6Δ₁)/4μ², 3Δ₁/2μ)`` for integer α > 1 (Agarwal,
  Kairouz & Liu 2021). Each branch of the min is an (ξ, ρ)-zCDP bound; each is composed by
  the RDP accountant (integer orders only, replace-one neighbours) and the smaller
  resulting ε is reported. The clip bit is composed as binary randomised response
  (``RandomizedResponseDpEvent``, exact RDP).

**Sampling is public on fedchain.** Who registered an update in a round is on-chain, so
privacy amplification by subsampling does not hold against anyone who reads the chain.
The accountant therefore uses sampling rate 1 unless the release says participation is
hidden (``sampling_hidden``), and reports both figures where they differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from importlib import metadata
from typing import Any

from privacy.mechanisms import check_delta, check_epsilon, check_positive
from protocol.errors import ConfigError, PrivacyBudgetError

__all__ = [
    "MECHANISMS",
    "Accountant",
    "RoundRelease",
    "SkellamRelease",
    "accountant_name",
    "calibrate_noise_multiplier",
    "require_budget",
]

MECHANISMS = ("gaussian", "laplace")
#: PLD discretisation: pessimistic rounding, so reported epsilons are upper bounds.
PLD_DISCRETIZATION = 1e-3
#: The smallest noise multiplier calibration considers (a budget it affords gets this).
MIN_NOISE_MULTIPLIER = 0.05
#: Integer Rényi orders: the Skellam bound is proven for integer α > 1.
RDP_ORDERS = tuple(range(2, 257))


def _version() -> str:
    try:
        return metadata.version("dp-accounting")
    except metadata.PackageNotFoundError:  # pragma: no cover - installed with the project
        return "unknown"


def accountant_name(mechanism: str, exact_gaussian: bool = False) -> str:
    """The ``accountant`` string of summary.json: library, version and method."""
    if exact_gaussian:
        return (
            f"dp-accounting {_version()} exact Gaussian (gaussian_mechanism.get_epsilon_gaussian;"
            " T rounds compose to one Gaussian of noise z/sqrt(T))"
        )
    if mechanism == "skellam":
        return f"dp-accounting {_version()} RDP (zCDP events, integer orders 2..256)"
    return f"dp-accounting {_version()} PLD (connect-the-dots, pessimistic, interval 1e-3)"


@dataclass(frozen=True)
class SkellamRelease:
    """The aggregate Skellam noise of a distributed-DP round, in integer (scaled) units.

    ``l1_sensitivity`` and ``l2_sensitivity`` bound how much one client's scaled, rounded
    update can move the integer sum; ``variance`` is the variance per coordinate of the
    Skellam noise the sum carries (the sum of the surviving clients' shares).
    """

    l1_sensitivity: float
    l2_sensitivity: float
    variance: float

    def __post_init__(self) -> None:
        check_positive(self.l1_sensitivity, "l1_sensitivity")
        check_positive(self.l2_sensitivity, "l2_sensitivity")
        check_positive(self.variance, "variance")


@dataclass(frozen=True)
class RoundRelease:
    """What one client releases in one round, as the accountant sees it.

    ``mechanism`` is ``gaussian`` (``noise_multiplier`` = σ/Δ₂), ``laplace``
    (``noise_multiplier`` = b/Δ₁) or ``skellam`` (``skellam`` gives the integer parameters;
    ``noise_multiplier`` = √μ/Δ₂ is informative only). ``sample_rate`` is the probability
    that a client takes part in a round; it amplifies privacy only if ``sampling_hidden``.
    ``bit_epsilon`` is the ε of the adaptive-clipping bit released each round (0: none).
    """

    mechanism: str
    noise_multiplier: float
    sample_rate: float = 1.0
    sampling_hidden: bool = False
    bit_epsilon: float = 0.0
    skellam: SkellamRelease | None = None

    def __post_init__(self) -> None:
        if self.mechanism not in (*MECHANISMS, "skellam"):
            raise ConfigError(
                f"mechanism {self.mechanism!r}: must be one of {[*MECHANISMS, 'skellam']}"
            )
        check_positive(self.noise_multiplier, "noise_multiplier")
        rate = float(self.sample_rate)
        if not 0.0 < rate <= 1.0:
            raise ConfigError(f"sample_rate {self.sample_rate!r}: must lie in (0, 1]")
        if not (math.isfinite(self.bit_epsilon) and self.bit_epsilon >= 0):
            raise ConfigError(f"bit_epsilon {self.bit_epsilon!r}: must be a finite number >= 0")
        if (self.mechanism == "skellam") != (self.skellam is not None):
            raise ConfigError("a skellam release needs its SkellamRelease (and only it)")

    @property
    def accounted_sample_rate(self) -> float:
        """The sampling rate the accountant may use: 1 unless participation is hidden."""
        return float(self.sample_rate) if self.sampling_hidden else 1.0


class Accountant:
    """Cumulative (ε, δ) of a task after each round, from dp-accounting.

    ``epsilon(t)`` is the ε after ``t`` rounds at the task's ``delta`` for a client that took
    part in all of them (the worst case). Results are cached per round count.
    """

    def __init__(self, release: RoundRelease, delta: float) -> None:
        self.release = release
        self.delta = check_delta(delta)
        self._cache: dict[int, float] = {}
        self._composed: Any = None
        self._composed_rounds = 0

    @property
    def name(self) -> str:
        return accountant_name(self.release.mechanism, self._exact_gaussian)

    @property
    def _exact_gaussian(self) -> bool:
        r = self.release
        return r.mechanism == "gaussian" and r.accounted_sample_rate == 1 and not r.bit_epsilon

    @cached_property
    def _round_pld(self) -> Any:
        from dp_accounting.pld import common
        from dp_accounting.pld import privacy_loss_distribution as pld

        r = self.release
        q = r.accounted_sample_rate
        if r.mechanism == "gaussian":
            out = pld.from_gaussian_mechanism(
                standard_deviation=r.noise_multiplier,
                sensitivity=1.0,
                value_discretization_interval=PLD_DISCRETIZATION,
                sampling_prob=q,
            )
        else:
            out = pld.from_laplace_mechanism(
                parameter=r.noise_multiplier,
                sensitivity=1.0,
                value_discretization_interval=PLD_DISCRETIZATION,
                sampling_prob=q,
            )
        if r.bit_epsilon > 0:
            bit = pld.from_privacy_parameters(
                common.DifferentialPrivacyParameters(r.bit_epsilon, 0.0),
                value_discretization_interval=PLD_DISCRETIZATION,
            )
            out = out.compose(bit)
        return out

    def _skellam_epsilon(self, rounds: int) -> float:
        from dp_accounting import dp_event
        from dp_accounting.rdp import rdp_privacy_accountant as rdp

        s = self.release.skellam
        assert s is not None
        d1, d2sq, mu = s.l1_sensitivity, s.l2_sensitivity**2, s.variance
        bounds = (
            # ε(α) ≤ αΔ₂²/2μ + 3Δ₁/2μ
            dp_event.ZCDpEvent(rho=d2sq / (2 * mu), xi=3 * d1 / (2 * mu)),
            # ε(α) ≤ αΔ₂²/2μ + ((2α−1)Δ₂² + 6Δ₁)/4μ² = α(Δ₂²/2μ + Δ₂²/2μ²) + (6Δ₁ − Δ₂²)/4μ²
            dp_event.ZCDpEvent(
                rho=d2sq / (2 * mu) + d2sq / (2 * mu**2),
                xi=max(0.0, (6 * d1 - d2sq) / (4 * mu**2)),
            ),
        )
        best = math.inf
        for event in bounds:
            # replace-one neighbours: participation is public on-chain (docs/privacy.md)
            acc = rdp.RdpAccountant(
                orders=list(RDP_ORDERS), neighboring_relation=rdp.NeighborRel.REPLACE_ONE
            )
            if self.release.bit_epsilon > 0:
                acc.compose(_clip_bit_event(self.release.bit_epsilon), rounds)
            acc.compose(event, rounds)
            best = min(best, float(acc.get_epsilon(self.delta)))
        return best

    def epsilon(self, rounds: int) -> float:
        """ε after ``rounds`` rounds (0 rounds: 0)."""
        if rounds < 0:
            raise ConfigError(f"rounds {rounds!r}: must be >= 0")
        if rounds == 0:
            return 0.0
        if rounds not in self._cache:
            r = self.release
            if r.mechanism == "skellam":
                self._cache[rounds] = self._skellam_epsilon(rounds)
            elif self._exact_gaussian:
                # t Gaussian releases of noise multiplier z are one Gaussian release of
                # z/sqrt(t) (dp-accounting's PLD accountant folds them the same way);
                # its exact ε is the analytic Gaussian's (Balle & Wang 2018)
                from dp_accounting import gaussian_mechanism

                self._cache[rounds] = float(
                    gaussian_mechanism.get_epsilon_gaussian(
                        r.noise_multiplier / math.sqrt(rounds), self.delta
                    )
                )
            else:
                self._compose_up_to(rounds)
        return self._cache[rounds]

    def _compose_up_to(self, rounds: int) -> None:
        """Compose the round's PLD one round at a time, caching every prefix's ε."""
        while self._composed_rounds < rounds:
            step = self._round_pld
            self._composed = step if self._composed is None else self._composed.compose(step)
            self._composed_rounds += 1
            self._cache[self._composed_rounds] = float(
                self._composed.get_epsilon_for_delta(self.delta)
            )

    def epsilons(self, rounds: int) -> list[float]:
        """ε after each of the first ``rounds`` rounds (cumulative, non-decreasing)."""
        return [self.epsilon(t) for t in range(1, rounds + 1)]


def _clip_bit_event(epsilon: float) -> Any:
    """The ε-DP clip bit as dp-accounting's binary randomised response: with probability
    ``q = 2/(1 + e^ε)`` a uniform bit, else the truth (so the truth has probability
    ``e^ε/(1 + e^ε)``, :mod:`privacy.adaptive_clip`); its RDP is computed exactly."""
    from dp_accounting import dp_event

    return dp_event.RandomizedResponseDpEvent(
        noise_parameter=2.0 / (1.0 + math.exp(epsilon)), num_buckets=2
    )


def require_budget(
    release: RoundRelease, delta: float, rounds: int, target_epsilon: float
) -> float:
    """ε of ``rounds`` rounds, or :class:`PrivacyBudgetError` if it exceeds the target."""
    target = check_epsilon(target_epsilon, "target_epsilon")
    spent = Accountant(release, delta).epsilon(rounds)
    if spent > target:
        raise PrivacyBudgetError(
            f"{rounds} rounds of {release.mechanism} noise (noise multiplier "
            f"{release.noise_multiplier:.4g}) spend epsilon {spent:.4g} > target {target:g} "
            f"at delta {delta:g}: raise the noise, lower the rounds, or raise the target"
        )
    return spent


def calibrate_noise_multiplier(
    mechanism: str,
    target_epsilon: float,
    delta: float,
    rounds: int,
    *,
    sample_rate: float = 1.0,
    sampling_hidden: bool = False,
    bit_epsilon: float = 0.0,
    relative_tolerance: float = 1e-3,
    release_for: Callable[[float], RoundRelease] | None = None,
) -> float:
    """The smallest noise multiplier (to ``relative_tolerance``) whose ``rounds`` rounds
    stay within ``target_epsilon`` at ``delta`` according to the accountant.

    Bisection in log space over the accountant's ε (monotone in the noise). The result is
    always on the safe side: its ε is at most the target. A budget the clip bit alone
    overspends raises :class:`PrivacyBudgetError`. ``release_for(z)`` builds the release of
    a multiplier when it is not a plain ``RoundRelease(mechanism, z, ...)`` (Skellam: the
    integer sensitivities and variance follow from z and the scale).
    """
    target = check_epsilon(target_epsilon, "target_epsilon")
    check_delta(delta)
    if rounds < 1:
        raise ConfigError(f"rounds {rounds!r}: must be at least 1")

    def eps(z: float) -> float:
        if release_for is not None:
            release = release_for(z)
        else:
            release = RoundRelease(mechanism, z, sample_rate, sampling_hidden, bit_epsilon)
        return Accountant(release, delta).epsilon(rounds)

    hi = 1.0
    while eps(hi) > target:
        hi *= 4
        if hi > 1e7:
            raise PrivacyBudgetError(
                f"target epsilon {target:g} at delta {delta:g} cannot be met over {rounds} "
                f"rounds by any noise (the clip bit alone spends it?)"
            )
    lo = hi / 4
    # walk down only as far as needed: a privacy-loss distribution of a tiny noise
    # multiplier has a huge support (and such a budget is no protection anyway)
    while lo > MIN_NOISE_MULTIPLIER and eps(lo) <= target:
        hi, lo = lo, lo / 4
    if lo <= MIN_NOISE_MULTIPLIER:
        return hi
    while hi / lo > 1 + relative_tolerance:
        mid = math.sqrt(lo * hi)
        if eps(mid) > target:
            lo = mid
        else:
            hi = mid
    return hi
