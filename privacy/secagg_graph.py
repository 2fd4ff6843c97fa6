"""SecAgg+ (Bell et al. 2020): the parameters of the neighbour graph and the graph itself.

Secure aggregation over the full graph (Bonawitz et al. 2017) makes every client mask with,
and deal Shamir shares to, every other client: O(K²) reveals per round. SecAgg+ replaces the
full graph by a *random Harary graph* ``H(k, K)`` of small degree ``k``: a client masks
pairwise with its ``k`` neighbours only and shares its self-mask seed and its mask key among
them with threshold ``t``. This module is the pure part: which ``(k, t)`` are safe for ``K``
clients of which a fraction ``γ`` may be corrupt and a fraction ``δ`` may drop out
(:func:`find_parameters`), the seed of a round's graph (:func:`graph_seed`), and the graph
(:func:`harary_neighbours`). :mod:`privacy.reveal_safety` checks a round against it.

**The parameter finder** ports Google's ``fcp/secagg/server/graph_parameter_finder.cc``
(federated-compute, Apache-2.0; the ``HararyGraphParameterFinder`` of Bell et al.'s
deployment) with exact integer arithmetic where the original uses ``lgamma`` in doubles:
for the smallest even ``k`` such that

1. the graph stays connected once the ``⌊γK⌋ + ⌊δK⌋`` corrupt or dropped clients are removed,
   except with probability ``< 2^-(σ+1)`` (union bound over the ``K(K − k − 1)/2`` pairs of
   gaps of ``k/2`` consecutive ring positions: ``K(K−k−1)/2 · B!/(B−k)! · (K−k)!/K!``);
2. ``t1 = min{t : Pr[A > t] < 2^-(σ+1)/K}`` where ``A ~ Hypergeometric(K, ⌊γK⌋, k)`` is the
   number of corrupt neighbours of a client (fewer than ``t`` corrupt neighbours: they cannot
   reconstruct an honest client's secrets);
3. ``t2 = min{r : Pr[S ≤ r] ≥ 2^-η/K}`` where ``S ~ Hypergeometric(K, K − ⌊δK⌋, k)`` is the
   number of surviving neighbours (at least ``t2`` of them survive except with probability
   ``< 2^-η/K``, so every secret can be reconstructed);

it returns ``t = max(t1 + 1, 2)`` provided ``t ≤ t2``. Every probability is compared as a
ratio of big integers (binomial coefficients), and γ, δ are read as the decimals they were
written as (``Fraction(repr(γ))``), so every machine finds the same ``(k, t)``. For speed,
the degrees below the first one that passes (1) are skipped by bisection (the bound falls
with ``k``), and a log-space screen skips a degree only when its estimated quantiles miss
by more than the one step a rounding error could move each; every other degree, and the
one returned, is decided exactly (a test checks the screen changes no answer). Milliseconds
of CPU for ``γ ≤ 0.33, δ ≤ 0.45`` up to ``K = 10^6``; seconds to minutes only in the corner
where ``k`` reaches thousands (``γ + δ`` or ``γ + 2δ`` at 0.9). It reproduces
the original's published table (``graph_parameter_finder_test.cc``) and the example of
issue 21: ``K = 1000, γ = 0.1, δ = 0.3 → k = 88, t = 36``. One deliberate difference: the
original returns ``t = 2`` even when ``t2 < 2`` (only when ``t1 = 0``: tiny ``K``, where a
round could then fail to reconstruct more often than ``2^-η``); here that ``k`` is rejected
and the search goes on. ``adversary="curious"`` (the default, Google's ``CURIOUS_SERVER``)
is the model of issue 21: the server does not equivocate about who dropped. On fedchain
the included set is the contract's bitmap (one public view for every client), and a client
reveals the self-mask share of an included peer or the mask-key share of a dropped one, never
both (:mod:`privacy.reveal_safety`), which is what the curious-server analysis assumes.
``adversary="semi-malicious"`` (``SEMI_MALICIOUS_SERVER``: ``t > (k + t1)/2``, much larger
graphs) is available for a deployment that does not rely on that.

**The graph** (version ``harary-sha256-v1``). Put the ``K`` clients on a ring in the order of
a uniformly random permutation ``π`` (``π[p]`` is the client at position ``p``); a client at
position ``p`` is a neighbour of the clients at positions ``p ± 1, …, p ± ⌊k/2⌋ (mod K)``, and
for odd ``k`` (only with even ``K``) also of the client at ``p + K/2``. The permutation is a
Fisher–Yates shuffle (``for j = K−1 … 1: swap π[j], π[r]`` with ``r`` uniform in ``[0, j]``)
driven by the stream ``SHA-256(b"fedchain/secagg+/permutation/v1" ‖ seed ‖ counter)``
(``counter`` 8 bytes big-endian, 0, 1, …), read in 8-byte big-endian words; ``r`` is a word
modulo ``j + 1``, with the words ``≥ 2^64 − (2^64 mod (j + 1))`` rejected (no modulo bias).
The seed is :func:`graph_seed` of public on-chain randomness fixed after the round's keys
(the protocol pins it), the task and the round: every aggregator derives the same graph.
Even ``k``: the graph is ``k``-regular; odd ``k`` needs an even ``K`` (no graph on an odd
number of vertices has odd regular degree: a :class:`SecAggParameterError`). ``k = K − 1``
is the full graph whatever the seed (:func:`full_graph_params`). Share holders of a client
are its neighbours **and itself** (as in the original, whose graph carries a self-edge, and
as in the full graph of :mod:`privacy.secagg`); the finder's ``t`` is counted among the
neighbours, so the dealer's own share only adds margin.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from privacy.distributed import survivor_threshold
from protocol.errors import ConfigError

__all__ = [
    "ADVERSARIES",
    "FULL_GRAPH",
    "HARARY_VERSION",
    "MAX_CLIENTS",
    "SecAggParameterError",
    "SecAggPlusParams",
    "find_parameters",
    "full_graph_params",
    "graph_seed",
    "harary_neighbours",
    "harary_permutation",
]

#: The graph construction of this module (the permutation stream and the ring lattice).
HARARY_VERSION = "harary-sha256-v1"
#: The full graph of Bonawitz et al. (every client is every client's neighbour).
FULL_GRAPH = "full"
VERSIONS = (HARARY_VERSION, FULL_GRAPH)
#: ``curious``: the server does not equivocate about dropouts (the chain's included bitmap
#: is every client's view); ``semi-malicious``: it may (Google's two adversary classes).
ADVERSARIES = ("curious", "semi-malicious")
#: The original's bound (nothing fundamental; the finder is exact and fast well beyond).
MAX_CLIENTS = 1_000_000

_SEED_DOMAIN = b"fedchain/secagg+/graph-seed/v1"
_PERM_DOMAIN = b"fedchain/secagg+/permutation/v1"
_WORD = 1 << 64


class SecAggParameterError(ConfigError):
    """``(K, γ, δ)`` (or a graph's ``(K, k, t)``) is infeasible or invalid; says why."""


def _decimal(value: float, name: str) -> Fraction:
    """``value`` as the decimal it was written as, checked to lie in ``[0, 1)``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SecAggParameterError(f"{name} {value!r}: expected a number in [0, 1)")
    if not 0.0 <= float(value) < 1.0:  # also refuses NaN
        raise SecAggParameterError(f"{name} {value!r}: must lie in [0, 1)")
    return Fraction(repr(float(value)))


def _count(value: object, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SecAggParameterError(f"{name} {value!r}: expected an integer >= {low}")
    return value


@dataclass(frozen=True)
class SecAggPlusParams:
    """The mask graph of a secure-aggregation task, as bound into its manifest.

    ``clients`` K; ``degree`` k (neighbours per client, the Harary graph's degree; ``K − 1``
    for the full graph); ``threshold`` t (Shamir threshold among a client's share holders);
    ``corrupt_fraction`` γ and ``dropout_fraction`` δ the finder was run for; ``sigma`` the
    statistical security parameter (40) and ``eta`` the correctness parameter (20), in bits;
    ``version`` the graph construction (:data:`HARARY_VERSION` or :data:`FULL_GRAPH`);
    ``adversary`` the finder's adversary class (:data:`ADVERSARIES`).
    """

    clients: int
    degree: int
    threshold: int
    corrupt_fraction: float
    dropout_fraction: float
    sigma: int = 40
    eta: int = 20
    version: str = HARARY_VERSION
    adversary: str = "curious"

    def __post_init__(self) -> None:
        k = _count(self.clients, "clients")
        _count(self.degree, "degree", 0)
        _count(self.threshold, "threshold")
        _decimal(self.corrupt_fraction, "corrupt_fraction")
        _decimal(self.dropout_fraction, "dropout_fraction")
        _count(self.sigma, "sigma")
        _count(self.eta, "eta")
        if self.version not in VERSIONS:
            raise SecAggParameterError(f"graph version {self.version!r}: known {list(VERSIONS)}")
        if self.adversary not in ADVERSARIES:
            raise SecAggParameterError(f"adversary {self.adversary!r}: known {list(ADVERSARIES)}")
        if self.degree > k - 1:
            raise SecAggParameterError(f"degree {self.degree}: at most K - 1 = {k - 1}")
        if self.version == FULL_GRAPH and self.degree != k - 1:
            raise SecAggParameterError(f"the full graph has degree K - 1 = {k - 1}")
        if self.degree % 2 and k % 2:
            raise SecAggParameterError(
                f"degree {self.degree} with {k} clients: no graph on an odd number of "
                "clients has odd regular degree"
            )
        if self.threshold > self.degree + 1:
            raise SecAggParameterError(
                f"threshold {self.threshold}: more than the degree + 1 = {self.degree + 1} "
                "share holders of a client (its neighbours and itself)"
            )

    @property
    def is_full(self) -> bool:
        """True for the full graph (every client a neighbour of every client)."""
        return self.degree == self.clients - 1

    @property
    def n_min(self) -> int:
        """``⌈(1 − δ)K⌉``: the fewest included updates a round may reveal for."""
        return survivor_threshold(self.clients, self.dropout_fraction)

    def neighbours(self, seed: bytes) -> tuple[tuple[int, ...], ...]:
        """The round's graph (:func:`harary_neighbours`; the seed is unused by the full one)."""
        return harary_neighbours(self.clients, self.degree, seed)

    def to_manifest(self) -> dict[str, object]:
        """The canonical dict bound into the task manifest."""
        return {
            "graph": self.version,
            "clients": self.clients,
            "degree": self.degree,
            "threshold": self.threshold,
            "corrupt_fraction": self.corrupt_fraction,
            "dropout_fraction": self.dropout_fraction,
            "sigma": self.sigma,
            "eta": self.eta,
            "adversary": self.adversary,
        }

    @classmethod
    def from_manifest(cls, d: Mapping[str, object]) -> SecAggPlusParams:
        """Read :meth:`to_manifest`'s dict back, refusing anything the finder would not give.

        A Harary graph's ``(k, t)`` must be exactly :func:`find_parameters` of its
        ``(K, γ, δ, σ, η, adversary)`` (the finder is exact and deterministic, so a manifest
        cannot smuggle in a weaker graph); a full graph must have degree ``K − 1``.
        """
        if not isinstance(d, Mapping):
            raise SecAggParameterError(f"secagg graph section {d!r}: expected a mapping")
        keys = {"graph", "clients", "degree", "threshold", "corrupt_fraction"}
        keys |= {"dropout_fraction", "sigma", "eta", "adversary"}
        if set(d) != keys:
            raise SecAggParameterError(
                f"secagg graph section: keys {sorted(map(str, d))}, expected {sorted(keys)}"
            )
        fractions = {}
        for name in ("corrupt_fraction", "dropout_fraction"):
            v = d[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SecAggParameterError(f"{name} {v!r}: expected a number in [0, 1)")
            fractions[name] = float(v)
        graph, adversary = d["graph"], d["adversary"]
        if not isinstance(graph, str) or not isinstance(adversary, str):
            raise SecAggParameterError("secagg graph section: graph and adversary are strings")
        params = cls(
            clients=_count(d["clients"], "clients"),
            degree=_count(d["degree"], "degree", 0),
            threshold=_count(d["threshold"], "threshold"),
            corrupt_fraction=fractions["corrupt_fraction"],
            dropout_fraction=fractions["dropout_fraction"],
            sigma=_count(d["sigma"], "sigma"),
            eta=_count(d["eta"], "eta"),
            version=graph,
            adversary=adversary,
        )
        if params.version == HARARY_VERSION:
            found = find_parameters(
                params.clients,
                params.corrupt_fraction,
                params.dropout_fraction,
                params.sigma,
                params.eta,
                adversary=params.adversary,
            )
            if (found.degree, found.threshold) != (params.degree, params.threshold):
                raise SecAggParameterError(
                    f"secagg graph: (k, t) = ({params.degree}, {params.threshold}) but the "
                    f"parameter finder gives ({found.degree}, {found.threshold}) for K = "
                    f"{params.clients}, corrupt {params.corrupt_fraction:g}, dropout "
                    f"{params.dropout_fraction:g}"
                )
        return params


def full_graph_params(
    clients: int,
    threshold: int,
    corrupt_fraction: float = 0.0,
    dropout_fraction: float | None = None,
) -> SecAggPlusParams:
    """The full graph as the special case ``degree = K − 1`` (version :data:`FULL_GRAPH`).

    ``dropout_fraction`` defaults to ``(K − t)/K`` (the dropouts ``t`` tolerates). Only the
    structure is checked here; the full graph's threshold floor (``t > K/2``, ``t > γK``)
    is :func:`privacy.reveal_safety.check_threshold_floor`.
    """
    k = _count(clients, "clients")
    if dropout_fraction is None:
        dropout_fraction = (k - threshold) / k
    return SecAggPlusParams(
        k, k - 1, threshold, corrupt_fraction, dropout_fraction, version=FULL_GRAPH
    )


# --- the parameter finder --------------------------------------------------------------


def _upper_tail_threshold(total: int, marked: int, sampled: int, scale: int) -> int:
    """``min{t ≥ 0 : scale · Pr[X > t] < 1}`` for ``X ~ Hypergeometric(total, marked,
    sampled)``, exactly (the tail is summed from the top as big integers)."""
    denominator = math.comb(total, sampled)
    lowest = max(0, sampled - (total - marked))
    i = min(sampled, marked)
    a = math.comb(marked, i)  # C(marked, i)
    b = math.comb(total - marked, sampled - i)  # C(total − marked, sampled − i)
    tail = 0  # Σ_{j > i} C(marked, j) C(total − marked, sampled − j)
    while i >= lowest:
        if scale * (tail + a * b) >= denominator:
            return i  # Pr[X > i] < 1/scale but Pr[X > i − 1] is not
        tail += a * b
        if i == lowest:
            break
        # step down: C(m, i − 1) = C(m, i)·i/(m − i + 1); C(r, s + 1) = C(r, s)·(r − s)/(s + 1)
        a = a * i // (marked - i + 1)
        s = sampled - i
        b = b * (total - marked - s) // (s + 1)
        i -= 1
    return lowest  # not reached for scale >= 1: Pr[X > lowest − 1] = 1


def _lower_quantile(total: int, marked: int, sampled: int, scale: int) -> int:
    """``min{r : scale · Pr[X ≤ r] ≥ 1}`` for ``X ~ Hypergeometric(total, marked, sampled)``,
    exactly (the cumulative sum runs from the bottom of the support as big integers)."""
    denominator = math.comb(total, sampled)
    i = max(0, sampled - (total - marked))
    top = min(sampled, marked)
    a = math.comb(marked, i)
    b = math.comb(total - marked, sampled - i)
    cumulative = 0
    while True:
        cumulative += a * b
        if scale * cumulative >= denominator or i >= top:
            return i
        # step up: C(m, i + 1) = C(m, i)·(m − i)/(i + 1); C(r, s − 1) = C(r, s)·s/(r − s + 1)
        a = a * (marked - i) // (i + 1)
        s = sampled - i
        b = b * s // (total - marked - s + 1)
        i += 1


def _disconnect_safe(clients: int, bad: int, degree: int, sigma: int) -> bool:
    """The union bound on the Harary graph disconnecting after ``bad`` removals is
    ``< 2^-(σ+1)``: ``K(K−k−1)/2 · bad!/(bad−k)! · (K−k)!/K! < 2^-(σ+1)``."""
    if degree > bad:
        return True
    lhs = clients * (clients - degree - 1) * math.perm(bad, degree) << (sigma + 1)
    return lhs < 2 * math.perm(clients, degree)


def _log_add(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    return a if b == -math.inf else a + math.log1p(math.exp(b - a))


def _lower_quantile_estimate(total: int, marked: int, sampled: int, log_q: float) -> int | None:
    """``min{r : Pr[X ≤ r] ≥ q}`` in log-space doubles, for the screen of :func:`_find`
    (None when the estimate cannot be trusted: then the exact walk decides). It starts at
    Hoeffding's bound ``E[X] − √(n ln(1/q)/2)``, below the quantile, sums the tail below it
    until the terms are ``e^-36`` of the sum, and walks up adding one term at a time."""
    lowest, top = max(0, sampled - (total - marked)), min(sampled, marked)
    if top - lowest < 2:
        return None
    base = math.lgamma(total + 1) - math.lgamma(sampled + 1) - math.lgamma(total - sampled + 1)

    def log_pmf(i: int) -> float:
        return (
            math.lgamma(marked + 1)
            - math.lgamma(i + 1)
            - math.lgamma(marked - i + 1)
            + math.lgamma(total - marked + 1)
            - math.lgamma(sampled - i + 1)
            - math.lgamma(total - marked - sampled + i + 1)
            - base
        )

    def log_cdf(r: int) -> float:
        term = log_pmf(r)
        cdf, i = term, r
        while i > lowest and term > cdf - 36.0:  # below the mode the terms shrink ever faster
            term += math.log(i * (total - marked - sampled + i)) - math.log(
                (marked - i + 1) * (sampled - i + 1)
            )
            i -= 1
            cdf = _log_add(cdf, term)
        return cdf

    mean = sampled * marked / total
    sd = math.sqrt(mean * (1 - marked / total) * (total - sampled) / max(1, total - 1))
    # a start below the quantile: a Gaussian one (√(2 ln 1/q) standard deviations, beyond
    # the Gaussian quantile), else Hoeffding's (always below, but further: more steps)
    r = max(lowest, math.floor(mean - math.sqrt(-2 * log_q) * sd) - 2)
    cdf = log_cdf(r)
    if cdf >= log_q - 1e-6:
        r = max(lowest, math.floor(mean - math.sqrt(sampled * -log_q / 2)) - 1)
        cdf = log_cdf(r)
        if cdf >= log_q - 1e-6:
            return None  # Hoeffding's start should lie below the quantile: do not guess
    term = log_pmf(r)
    while cdf < log_q and r < top:
        term += math.log((marked - r) * (sampled - r)) - math.log(
            (r + 1) * (total - marked - sampled + r + 1)
        )
        r += 1
        cdf = _log_add(cdf, term)
    return r


@lru_cache(maxsize=256)
def _find(
    clients: int,
    corrupt: Fraction,
    dropout: Fraction,
    sigma: int,
    eta: int,
    adversary: str,
    screen: bool = True,
) -> tuple[int, int]:
    corrupt_clients = math.floor(corrupt * clients)
    dropped_clients = math.floor(dropout * clients)
    bad = corrupt_clients + dropped_clients
    surviving = clients - dropped_clients  # ⌈(1 − δ)K⌉
    degrees = range(2, clients - 1, 2)  # the original's search range
    if not degrees:
        raise SecAggParameterError(
            f"{clients} clients: a Harary graph needs at least 4 (use the full graph)"
        )
    # the disconnection bound decreases with k: gallop, then bisect for the first k that
    # passes it (a big k costs big integers: never evaluate one far above the answer)
    lo, hi = 0, 1
    while hi < len(degrees) and not _disconnect_safe(clients, bad, degrees[hi - 1], sigma):
        lo, hi = hi, min(2 * hi, len(degrees))
    while lo < hi:
        mid = (lo + hi) // 2
        if _disconnect_safe(clients, bad, degrees[mid], sigma):
            hi = mid
        else:
            lo = mid + 1
    log_q1 = -(sigma + 1) * math.log(2) - math.log(clients)
    log_q2 = -eta * math.log(2) - math.log(clients)
    for k in degrees[lo:]:
        if screen:
            # t1 = k − (the q1-quantile of the honest neighbours); an estimate is off by at
            # most one step (its error, ~1e-12 relative, flips at most one comparison of a
            # strictly monotone tail), so skip k only if it fails with both estimates moved
            # one step in its favour; every other k is decided exactly below
            h = _lower_quantile_estimate(clients, clients - corrupt_clients, k, log_q1)
            s2 = _lower_quantile_estimate(clients, surviving, k, log_q2)
            if h is not None and s2 is not None:
                e1 = max(0, k - h - 1)
                if adversary == "semi-malicious":
                    e1 = -((-(4 * e1 + 4 * k - 5)) // 8)
                if max(e1 + 1, 2) > s2 + 1:
                    continue
        t1 = _upper_tail_threshold(clients, corrupt_clients, k, clients << (sigma + 1))
        t2 = _lower_quantile(clients, surviving, k, clients << eta)
        if adversary == "semi-malicious":
            t1 = -((-(4 * t1 + 4 * k - 5)) // 8)  # ⌈(t1 + k − 1.25)/2⌉, exactly
        t = max(t1 + 1, 2)
        if t <= t2:
            return k, t
    raise SecAggParameterError(
        f"no Harary graph on {clients} clients is both secure against a corrupt fraction "
        f"{float(corrupt):g} and correct with a dropout fraction {float(dropout):g} (sigma "
        f"{sigma}, eta {eta}): K is too small for these fractions (use the full graph, or "
        "lower the fractions)"
    )


def find_parameters(
    clients: int,
    corrupt_fraction: float,
    dropout_fraction: float,
    sigma: int = 40,
    eta: int = 20,
    *,
    adversary: str = "curious",
) -> SecAggPlusParams:
    """The smallest even degree ``k`` and its threshold ``t`` for ``K`` clients, a fraction
    γ of them corrupt and δ dropping out (module docstring; a port of Google's
    ``fcp/secagg/server/graph_parameter_finder.cc``, federated-compute).

    Raises :class:`SecAggParameterError` saying why outside the feasible region: γ + δ > 0.9
    (curious) or γ + 2δ > 0.9 (semi-malicious) as in the original, or no ``k < K − 1``
    satisfies the three conditions (small ``K`` with large fractions).
    """
    k = _count(clients, "clients")
    if k > MAX_CLIENTS:
        raise SecAggParameterError(f"{k} clients: the finder is checked up to {MAX_CLIENTS}")
    gamma = _decimal(corrupt_fraction, "corrupt_fraction")
    delta = _decimal(dropout_fraction, "dropout_fraction")
    _count(sigma, "sigma")
    _count(eta, "eta")
    if adversary not in ADVERSARIES:
        raise SecAggParameterError(f"adversary {adversary!r}: known {list(ADVERSARIES)}")
    if adversary == "curious" and gamma + delta > Fraction(9, 10):
        raise SecAggParameterError(
            f"corrupt fraction {corrupt_fraction:g} + dropout fraction {dropout_fraction:g} "
            "> 0.9: no graph is both secure and correct (lower either)"
        )
    if adversary == "semi-malicious" and gamma + 2 * delta > Fraction(9, 10):
        raise SecAggParameterError(
            f"corrupt fraction {corrupt_fraction:g} + 2 x dropout fraction "
            f"{dropout_fraction:g} > 0.9: infeasible against a semi-malicious server"
        )
    degree, threshold = _find(k, gamma, delta, sigma, eta, adversary)
    return SecAggPlusParams(
        k,
        degree,
        threshold,
        float(corrupt_fraction),
        float(dropout_fraction),
        sigma,
        eta,
        HARARY_VERSION,
        adversary,
    )


# --- the graph ---------------------------------------------------------------------------


def graph_seed(randomness: bytes, task: str, round_number: int) -> bytes:
    """The 32-byte seed of a round's graph: domain-separated SHA-256 of the public on-chain
    ``randomness`` (length-prefixed), the task (lower-cased, UTF-8, length-prefixed) and
    the round number (8 bytes big-endian)."""
    if not isinstance(randomness, (bytes, bytearray)) or not randomness:
        raise SecAggParameterError("graph_seed: randomness must be non-empty bytes")
    if not isinstance(task, str) or not task:
        raise SecAggParameterError(f"graph_seed: task {task!r}: expected a non-empty string")
    if isinstance(round_number, bool) or not isinstance(round_number, int):
        raise SecAggParameterError(f"graph_seed: round {round_number!r}: expected an integer")
    if not 0 <= round_number < _WORD:
        raise SecAggParameterError(f"graph_seed: round {round_number} out of range")
    label = task.lower().encode()
    h = hashlib.sha256(_SEED_DOMAIN + b"\x00")
    h.update(len(randomness).to_bytes(4, "big") + bytes(randomness))
    h.update(len(label).to_bytes(4, "big") + label)
    h.update(round_number.to_bytes(8, "big"))
    return h.digest()


def _check_seed(seed: bytes) -> bytes:
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
        raise SecAggParameterError("graph seed: expected 32 bytes (graph_seed)")
    return bytes(seed)


@lru_cache(maxsize=16)
def _permutation(clients: int, seed: bytes) -> tuple[int, ...]:
    perm = list(range(clients))
    counter = 0
    words: list[int] = []
    for j in range(clients - 1, 0, -1):
        n = j + 1
        limit = _WORD - _WORD % n
        while True:
            if not words:
                block = hashlib.sha256(_PERM_DOMAIN + seed + counter.to_bytes(8, "big")).digest()
                counter += 1
                words = [int.from_bytes(block[o : o + 8], "big") for o in (24, 16, 8, 0)]
            x = words.pop()  # the block's words in order: bytes 0..7 first
            if x < limit:
                break
        r = x % n
        perm[j], perm[r] = perm[r], perm[j]
    return tuple(perm)


def harary_permutation(clients: int, seed: bytes) -> tuple[int, ...]:
    """``π``: the client at each ring position of the round's graph (module docstring)."""
    return _permutation(_count(clients, "clients"), _check_seed(seed))


@lru_cache(maxsize=8)
def _neighbours(clients: int, degree: int, seed: bytes) -> tuple[tuple[int, ...], ...]:
    if degree == clients - 1:  # the full graph: the permutation does not matter
        everyone = tuple(range(clients))
        return tuple(everyone[:c] + everyone[c + 1 :] for c in range(clients))
    perm = _permutation(clients, seed)
    offsets = [d for h in range(1, degree // 2 + 1) for d in (h, clients - h)]
    if degree % 2:
        offsets.append(clients // 2)
    out: list[tuple[int, ...]] = [()] * clients
    for p, c in enumerate(perm):
        out[c] = tuple(sorted(perm[(p + d) % clients] for d in offsets))
    return tuple(out)


def harary_neighbours(clients: int, degree: int, seed: bytes) -> tuple[tuple[int, ...], ...]:
    """The neighbours of each client ``0..K−1`` (sorted) in the random Harary graph
    ``H(k, K)`` of ``seed`` (module docstring: the ring lattice under the permutation
    :func:`harary_permutation`). Every aggregator derives the same graph byte for byte.
    A client is not its own neighbour (its share holders are its neighbours and itself).
    """
    k = _count(clients, "clients")
    _count(degree, "degree", 0)
    if degree > k - 1:
        raise SecAggParameterError(f"degree {degree}: at most K - 1 = {k - 1}")
    if degree % 2 and k % 2:
        raise SecAggParameterError(
            f"degree {degree} with {k} clients: no graph on an odd number of clients has odd "
            "regular degree"
        )
    return _neighbours(k, degree, _check_seed(seed))
