"""An empirical privacy audit in one run (Steinke, Nasr & Jagielski, NeurIPS 2023).

``m`` canaries are each included or not by an independent fair coin; after the run the
auditor scores every canary, guesses "included" for the ``k₊`` highest scores and "not
included" for the ``k₋`` lowest, and abstains on the rest. If the mechanism is (ε, δ)-DP
with respect to each canary, the number of correct guesses among the ``r = k₊ + k₋`` is
stochastically dominated as in the paper's Theorem (Appendix D: a Binomial(r, e^ε/(1+e^ε))
tail plus a δ term). :func:`epsilon_lower_bound` inverts that tail: the largest ε the
observed guesses refute at the given confidence. A correct accountant must never be below
it (beyond the stated failure probability); an accountant that is, is wrong.

:func:`audit_local_mechanism` runs the audit against the local-DP release of
:mod:`privacy.local` (each canary is one client releasing ``±C·e`` for ``rounds`` rounds, the
worst-case neighbouring pair at distance ``2C``), so the test suite can compare the
empirical lower bound with the accountant's ε for the same spec.
:func:`audit_distributed_mechanism` does the same for distributed DP: each canary is one
client's integer release (:func:`privacy.distributed.encode_client`) inside a securely
aggregated sum whose other members the auditor knows exactly (the strongest adversary), with
exactly the threshold number of noise shares (the least noise the accountant assumes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from privacy.distributed import encode_client
from privacy.local import privatize
from privacy.mechanisms import check_delta, skellam_noise
from privacy.spec import PrivacySpec
from protocol.errors import ConfigError

__all__ = [
    "AuditResult",
    "audit_distributed_mechanism",
    "audit_local_mechanism",
    "epsilon_lower_bound",
    "one_run_audit",
    "p_value",
]


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[≥ v correct of r guesses] for an (ε, δ)-DP mechanism over m canaries (the bound)."""
    if not 0 <= v <= r <= m:
        raise ConfigError(f"need 0 <= correct ({v}) <= guesses ({r}) <= canaries ({m})")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))
    if delta == 0:
        return min(tail, 1.0)
    worst, running = 0.0, 0.0  # max over i of P[v > Bin(r, q) >= v - i] / i
    for i in range(1, v + 1):
        running += float(stats.binom.pmf(v - i, r, q))
        worst = max(worst, running / i)
    return min(tail + 2.0 * m * delta * worst, 1.0)


def epsilon_lower_bound(
    m: int, r: int, v: int, delta: float, confidence: float = 0.95, tolerance: float = 1e-4
) -> float:
    """The largest ε refuted at ``confidence`` by ``v`` correct of ``r`` guesses (0 if none)."""
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence {confidence!r}: must lie in (0, 1)")
    if delta != 0:
        check_delta(delta)
    alpha = 1.0 - confidence
    if p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < alpha:
        lo, hi = hi, hi * 2
        if hi > 1e3:
            return lo
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        if p_value(m, r, v, mid, delta) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class AuditResult:
    """An audit's outcome: canaries, guesses made, correct guesses, the ε lower bound."""

    canaries: int
    guesses: int
    correct: int
    epsilon_lower_bound: float
    delta: float
    confidence: float


def one_run_audit(
    scores: ArrayLike,
    included: ArrayLike,
    k_pos: int,
    k_neg: int,
    delta: float,
    confidence: float = 0.95,
) -> AuditResult:
    """Guess the top ``k_pos`` scores included and the bottom ``k_neg`` excluded; bound ε."""
    s = np.asarray(scores, dtype=np.float64)
    inc = np.asarray(included, dtype=bool)
    m = s.size
    if inc.shape != s.shape or s.ndim != 1:
        raise ConfigError("scores and included must be flat and of equal length")
    if k_pos < 0 or k_neg < 0 or k_pos + k_neg > m:
        raise ConfigError(f"k_pos + k_neg must be within 0..{m}")
    order = np.argsort(s, kind="stable")
    correct = int(inc[order[m - k_pos :]].sum()) if k_pos else 0
    correct += int((~inc[order[:k_neg]]).sum()) if k_neg else 0
    r = k_pos + k_neg
    eps = epsilon_lower_bound(m, r, correct, delta, confidence)
    return AuditResult(m, r, correct, eps, delta, confidence)


def audit_local_mechanism(
    spec: PrivacySpec,
    canaries: int,
    rounds: int,
    rng: np.random.Generator,
    *,
    dim: int = 16,
    guess_fraction: float = 0.1,
    confidence: float = 0.95,
) -> AuditResult:
    """Audit ``spec``'s local-DP release: canary ``i`` releases ``S_i·C·e`` (``S_i = ±1`` by a
    fair coin) through :func:`privacy.local.privatize` once per round; the score is
    ``Σ_t ⟨y_t, e⟩``; the ``guess_fraction`` most extreme scores on each side are guessed."""

    def release(x: np.ndarray) -> float:
        y, _ = privatize(x, spec, rng)
        return float(y[0])

    return _canary_audit(spec, canaries, rounds, rng, release, dim, guess_fraction, confidence)


def audit_distributed_mechanism(
    spec: PrivacySpec,
    canaries: int,
    rounds: int,
    rng: np.random.Generator,
    *,
    dim: int = 16,
    guess_fraction: float = 0.1,
    confidence: float = 0.95,
) -> AuditResult:
    """Audit ``spec``'s distributed-DP release: canary ``i`` is one client releasing
    ``encode_client(S_i·C·e)`` (``S_i = ±1``) into a sum with the noise shares of ``t − 1``
    other survivors (their updates known to the auditor, so subtracted); the score is the
    first coordinate of the sum, over ``rounds`` rounds."""
    params = spec.ddp()
    others = (params.threshold - 1) * params.client_variance

    def release(x: np.ndarray) -> float:
        own, _ = encode_client(x, spec.clip_norm, params, rng)
        noise = skellam_noise(1, others, rng)[0] if others > 0 else 0
        return float(own[0] + noise)

    return _canary_audit(spec, canaries, rounds, rng, release, dim, guess_fraction, confidence)


def _canary_audit(
    spec: PrivacySpec,
    canaries: int,
    rounds: int,
    rng: np.random.Generator,
    release: Callable[[np.ndarray], float],
    dim: int,
    guess_fraction: float,
    confidence: float,
) -> AuditResult:
    """Canary ``i`` holds ``S_i·C·e`` with ``e`` the first basis vector of R^dim; its score
    is the sum over ``rounds`` of ``release``'s first coordinate; then the one-run audit."""
    if canaries < 2 or rounds < 1:
        raise ConfigError("need at least 2 canaries and 1 round")
    direction = np.zeros(dim)
    direction[0] = 1.0
    signs = rng.random(canaries) < 0.5
    scores = np.zeros(canaries)
    for i in range(canaries):
        x = (1.0 if signs[i] else -1.0) * spec.clip_norm * direction
        for _ in range(rounds):
            scores[i] += release(x)
    k = max(1, int(guess_fraction * canaries))
    return one_run_audit(scores, signs, k, k, spec.target_delta, confidence)
