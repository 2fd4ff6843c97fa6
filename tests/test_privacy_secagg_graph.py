"""SecAgg+ parameters and graph (privacy/secagg_graph.py) and the reveal-safety rule over a
graph (privacy/reveal_safety.py)."""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privacy.reveal_safety import (
    RevealUnsafe,
    check_reveal_safe_graph,
    check_task_graph,
    full_graph,
    graph_share_holders,
)
from privacy.secagg_graph import (
    FULL_GRAPH,
    HARARY_VERSION,
    SecAggParameterError,
    SecAggPlusParams,
    _find,
    find_parameters,
    full_graph_params,
    graph_seed,
    harary_neighbours,
    harary_permutation,
)
from protocol.errors import ConfigError

SEED = graph_seed(b"\x11" * 32, "0xTask", 3)

# Google federated-compute, fcp/secagg/server/graph_parameter_finder_test.cc: (K, gamma,
# delta, adversary, k, t); the original's test requires k equal and t at most the value.
PUBLISHED = [
    (100, 0.45, 0.45, "curious", 92, 46),
    (100, 0.33, 0.33, "curious", 68, 34),
    (1000, 0.33, 0.33, "curious", 286, 150),
    (10000, 0.33, 0.33, "curious", 422, 221),
    (100, 0.3, 0.3, "semi-malicious", 92, 62),
    (10, 0.05, 0.33, "semi-malicious", 8, 5),
    (100, 0.05, 0.33, "curious", 28, 6),
    (1000, 0.05, 0.33, "curious", 72, 24),
    (10000, 0.05, 0.33, "curious", 86, 29),
    (100000, 0.05, 0.33, "curious", 96, 32),
    (1000, 0.05, 0.33, "semi-malicious", 398, 223),
    (10, 0.33, 0.05, "curious", 4, 4),
    (100, 0.33, 0.05, "curious", 34, 29),
    (1000, 0.33, 0.05, "curious", 78, 60),
    (100000, 0.33, 0.05, "curious", 102, 77),
    (1000, 0.33, 0.05, "semi-malicious", 132, 109),
    (10, 0.05, 0.05, "curious", 2, 2),
    (1000, 0.05, 0.05, "curious", 30, 17),
    (1000000, 0.05, 0.05, "curious", 38, 22),
    (100000, 0.05, 0.05, "semi-malicious", 68, 48),
    (1000, 0.33, 0.0, "curious", 38, 36),
    (1000, 0.33, 0.0, "semi-malicious", 38, 37),
    (1000, 0.0, 0.33, "curious", 38, 2),
]


@pytest.mark.parametrize(("k", "gamma", "delta", "adversary", "degree", "t"), PUBLISHED)
def test_finder_reproduces_the_published_table(
    k: int, gamma: float, delta: float, adversary: str, degree: int, t: int
) -> None:
    p = find_parameters(k, gamma, delta, adversary=adversary)
    assert (p.degree, p.threshold) == (degree, t)


def test_finder_reproduces_the_issue_example() -> None:
    p = find_parameters(1000, 0.1, 0.3)
    assert (p.degree, p.threshold) == (88, 36)
    assert (p.sigma, p.eta, p.version, p.adversary) == (40, 20, HARARY_VERSION, "curious")
    assert p.n_min == 700


def test_finder_rejects_a_threshold_it_cannot_reach() -> None:
    # the original returns (4, 2) here although t2 = 1 < 2 (t1 = 0); this port goes on
    p = find_parameters(10, 0.05, 0.33)
    assert (p.degree, p.threshold) == (6, 2)


@pytest.mark.parametrize(
    ("k", "gamma", "delta", "adversary", "match"),
    [
        (1000, 0.5, 0.45, "curious", r"> 0.9"),
        (1000, 0.3, 0.35, "semi-malicious", r"2 x dropout"),
        (3, 0.0, 0.1, "curious", "at least 4"),
        (10, 0.4, 0.45, "curious", "too small"),
        (0, 0.1, 0.1, "curious", "clients"),
        (100, 1.0, 0.1, "curious", r"\[0, 1\)"),
        (100, 0.1, float("nan"), "curious", r"\[0, 1\)"),
        (100, 0.1, 0.1, "evil", "adversary"),
        (2_000_000, 0.1, 0.1, "curious", "up to"),
    ],
)
def test_finder_refuses_the_infeasible_region_saying_why(
    k: int, gamma: float, delta: float, adversary: str, match: str
) -> None:
    with pytest.raises(SecAggParameterError, match=match):
        find_parameters(k, gamma, delta, adversary=adversary)


def _tail_above(total: int, marked: int, sampled: int, t: int) -> Fraction:
    num = sum(
        math.comb(marked, i) * math.comb(total - marked, sampled - i)
        for i in range(t + 1, sampled + 1)
    )
    return Fraction(num, math.comb(total, sampled))


def _cdf(total: int, marked: int, sampled: int, r: int) -> Fraction:
    num = sum(math.comb(marked, i) * math.comb(total - marked, sampled - i) for i in range(r + 1))
    return Fraction(num, math.comb(total, sampled))


def _disconnect_bound(k: int, bad: int, degree: int) -> Fraction:
    if degree > bad:
        return Fraction(0)
    return Fraction(k * (k - degree - 1) * math.perm(bad, degree), 2 * math.perm(k, degree))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.integers(4, 160),
    st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.15, 0.2, 0.33]),
    st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.3, 0.45]),
)
def test_finder_output_satisfies_the_published_inequalities(
    k: int, gamma: float, delta: float
) -> None:
    """Each condition recomputed from scratch (sums of binomials as fractions): the smallest
    even k that satisfies all three is the one returned; t is the smallest secure t."""
    corrupt, dropped = math.floor(Fraction(repr(gamma)) * k), math.floor(Fraction(repr(delta)) * k)
    q_security, q_correct = Fraction(1, 2**41 * k), Fraction(1, 2**20 * k)

    def ok(degree: int) -> int | None:
        if _disconnect_bound(k, corrupt + dropped, degree) >= Fraction(1, 2**41):
            return None
        denominator = math.comb(k, degree)
        pmf = [
            math.comb(corrupt, i) * math.comb(k - corrupt, degree - i) for i in range(degree + 1)
        ]
        above = [sum(pmf[t + 1 :]) for t in range(degree + 1)]  # Pr[A > t] x denominator
        t1 = next(t for t in range(degree + 1) if Fraction(above[t], denominator) < q_security)
        t = max(t1 + 1, 2)
        # at least t survivors among the neighbours, except with probability < 2^-20 / K
        correct = _cdf(k, k - dropped, degree, t - 1) < q_correct
        return t if correct else None

    try:
        p = find_parameters(k, gamma, delta)
    except SecAggParameterError:
        assert gamma + delta > 0.9 or all(ok(d) is None for d in range(2, k - 1, 2))
        return
    assert p.degree % 2 == 0 and 2 <= p.degree < k - 1
    assert ok(p.degree) == p.threshold
    assert all(ok(d) is None for d in range(2, p.degree, 2))
    # fewer than t corrupt neighbours except with probability < 2^-41 / K
    assert _tail_above(k, corrupt, p.degree, p.threshold - 1) < q_security


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.integers(4, 700),
    st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.2, 0.33, 0.45]),
    st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.45]),
    st.sampled_from(["curious", "semi-malicious"]),
)
def test_the_screen_changes_no_answer(k: int, gamma: float, delta: float, adversary: str) -> None:
    """The log-space screen only skips degrees: with it and without it (every degree decided
    by the exact walks) the finder gives the same (k, t) or the same refusal."""
    args = (k, Fraction(repr(gamma)), Fraction(repr(delta)), 40, 20, adversary)
    outcomes: list[tuple[int, int] | None] = []
    for screen in (True, False):
        try:
            outcomes.append(_find(*args, screen=screen))
        except SecAggParameterError:
            outcomes.append(None)
    assert outcomes[0] == outcomes[1]


def test_finder_at_large_k() -> None:
    # exact big-integer arithmetic, and the degree stays small (no timing here:
    # scripts/secagg_plus_params.py prints the table and its seconds)
    assert (
        find_parameters(100_000, 0.1, 0.3).degree,
        find_parameters(100_000, 0.1, 0.3).threshold,
    ) == (
        122,
        49,
    )


def test_graph_seed_is_domain_separated_and_binds_every_input() -> None:
    base = graph_seed(b"r" * 32, "0xAbC", 7)
    assert len(base) == 32
    assert base == graph_seed(b"r" * 32, "0xabc", 7)  # an address in any case
    others = {
        graph_seed(b"s" * 32, "0xabc", 7),
        graph_seed(b"r" * 32, "0xabd", 7),
        graph_seed(b"r" * 32, "0xabc", 8),
        graph_seed(b"r" * 31, "0xabc", 7),
    }
    assert base not in others and len(others) == 4
    assert base != hashlib.sha256(b"r" * 32).digest()
    with pytest.raises(SecAggParameterError):
        graph_seed(b"", "0xabc", 1)
    with pytest.raises(SecAggParameterError):
        graph_seed(b"r", "0xabc", -1)


def test_the_construction_is_pinned_byte_for_byte() -> None:
    """The documented construction, recomputed independently: any change to the stream,
    the shuffle or the ring breaks every aggregator's agreement, so it must be deliberate."""
    k = 10
    words: list[int] = []
    for counter in range(8):
        block = hashlib.sha256(
            b"fedchain/secagg+/permutation/v1" + SEED + counter.to_bytes(8, "big")
        ).digest()
        words += [int.from_bytes(block[o : o + 8], "big") for o in range(0, 32, 8)]
    perm = list(range(k))
    it = iter(words)
    for j in range(k - 1, 0, -1):
        x = next(it)
        while x >= 2**64 - 2**64 % (j + 1):
            x = next(it)
        r = x % (j + 1)
        perm[j], perm[r] = perm[r], perm[j]
    assert harary_permutation(k, SEED) == tuple(perm)
    graph = harary_neighbours(k, 4, SEED)
    for p, c in enumerate(perm):
        assert set(graph[c]) == {perm[(p + d) % k] for d in (-2, -1, 1, 2)}
    digest = hashlib.sha256(repr(harary_neighbours(1000, 88, SEED)).encode()).hexdigest()
    assert (
        digest
        == hashlib.sha256(repr(harary_neighbours(1000, 88, bytes(SEED))).encode()).hexdigest()
    )


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(2, 120), st.data(), st.binary(min_size=32, max_size=32))
def test_graph_is_regular_symmetric_and_loop_free(k: int, data: st.DataObject, seed: bytes) -> None:
    degree = data.draw(st.integers(0, k - 1))
    if degree % 2 and k % 2:
        with pytest.raises(SecAggParameterError, match="odd"):
            harary_neighbours(k, degree, seed)
        return
    graph = harary_neighbours(k, degree, seed)
    assert len(graph) == k
    for c, nb in enumerate(graph):
        assert len(nb) == degree == len(set(nb))  # k-regular (also odd k with even K)
        assert c not in nb  # no self-loops
        assert list(nb) == sorted(nb)
        assert all(0 <= v < k and c in graph[v] for v in nb)  # symmetric
    assert graph == harary_neighbours(k, degree, bytes(seed))  # deterministic in the seed
    if degree == k - 1:
        assert all(set(nb) == set(range(k)) - {c} for c, nb in enumerate(graph))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.binary(min_size=32, max_size=32), st.binary(min_size=32, max_size=32))
def test_different_seeds_give_different_permutations(a: bytes, b: bytes) -> None:
    k = 64  # 64! permutations: a collision would be a broken stream, not bad luck
    pa, pb = harary_permutation(k, a), harary_permutation(k, b)
    assert sorted(pa) == list(range(k))
    assert (pa == pb) == (a == b)


def test_permutation_is_roughly_uniform() -> None:
    # client 0's position over 600 seeds, K = 6: each position ~100 times (a biased or
    # seed-ignoring shuffle puts it in one place)
    counts = [0] * 6
    for i in range(600):
        counts[harary_permutation(6, graph_seed(i.to_bytes(4, "big"), "t", 1)).index(0)] += 1
    assert min(counts) > 60 and max(counts) < 140


def test_graph_refuses_bad_arguments() -> None:
    with pytest.raises(SecAggParameterError, match="32 bytes"):
        harary_neighbours(10, 4, b"short")
    with pytest.raises(SecAggParameterError, match="at most"):
        harary_neighbours(10, 10, SEED)


def test_params_manifest_round_trip_and_refusals() -> None:
    p = find_parameters(1000, 0.1, 0.3)
    d = p.to_manifest()
    assert d == {
        "graph": "harary-sha256-v1",
        "clients": 1000,
        "degree": 88,
        "threshold": 36,
        "corrupt_fraction": 0.1,
        "dropout_fraction": 0.3,
        "sigma": 40,
        "eta": 20,
        "adversary": "curious",
    }
    assert SecAggPlusParams.from_manifest(d) == p
    with pytest.raises(SecAggParameterError, match="parameter finder gives"):
        SecAggPlusParams.from_manifest({**d, "degree": 40, "threshold": 20})
    with pytest.raises(SecAggParameterError, match="keys"):
        SecAggPlusParams.from_manifest({**d, "extra": 1})
    with pytest.raises(SecAggParameterError, match="integer"):
        SecAggPlusParams.from_manifest({**d, "clients": True})
    with pytest.raises(SecAggParameterError, match="version"):
        SecAggPlusParams.from_manifest({**d, "graph": "harary-v0"})
    full = full_graph_params(10, 7)
    assert full.is_full and full.degree == 9 and full.version == FULL_GRAPH
    assert SecAggPlusParams.from_manifest(full.to_manifest()) == full
    with pytest.raises(SecAggParameterError, match="degree K - 1"):
        SecAggPlusParams(10, 8, 5, 0.0, 0.3, version=FULL_GRAPH)
    with pytest.raises(SecAggParameterError, match="share holders"):
        SecAggPlusParams(10, 4, 6, 0.0, 0.3)


# --- the reveal-safety rule over a graph -------------------------------------------------

PARAMS = SecAggPlusParams(20, 4, 3, 0.05, 0.2)  # a small hand-made graph: t = 3 of 5 holders


def test_share_holders_are_the_neighbours_and_the_dealer() -> None:
    holders = graph_share_holders(PARAMS, SEED)
    graph = harary_neighbours(20, 4, SEED)
    assert all(set(holders(c)) == set(graph[c]) | {c} for c in range(20))
    assert set(graph_share_holders(full_graph_params(5, 3))(2)) == set(full_graph(range(5))(0))
    with pytest.raises(ConfigError, match="seed"):
        graph_share_holders(PARAMS)


def test_graph_rule_refuses_below_n_min() -> None:
    assert PARAMS.n_min == 16
    check_reveal_safe_graph(range(20), range(20), PARAMS, SEED)
    with pytest.raises(RevealUnsafe, match="fewer than n_min = 16"):
        check_reveal_safe_graph(range(15), range(20), PARAMS, SEED)


def test_graph_rule_refuses_a_client_with_fewer_than_t_included_holders() -> None:
    graph = harary_neighbours(20, 4, SEED)
    victim = 0
    # drop two of the victim's four neighbours: it keeps 2 + itself = 3 = t holders (safe)
    two = graph[victim][:2]
    check_reveal_safe_graph(set(range(20)) - set(two), range(20), PARAMS, SEED)
    # a third dropped neighbour leaves it 2 < t: nobody reveals (17 >= n_min = 16 included)
    three = set(graph[victim][:3])
    with pytest.raises(RevealUnsafe, match=rf"fewer than t = 3 included neighbours.*\b{victim}: 2"):
        check_reveal_safe_graph(set(range(20)) - three, range(20), PARAMS, SEED)


def test_graph_rule_refuses_a_disconnected_included_subgraph() -> None:
    # a ring lattice of degree 4 (the identity permutation is not needed: cut the real ring)
    perm = harary_permutation(40, SEED)
    params = SecAggPlusParams(40, 4, 2, 0.0, 0.1)
    # remove two pairs of consecutive ring positions: the ring splits into two arcs
    cut = {perm[0], perm[1], perm[20], perm[21]}
    with pytest.raises(RevealUnsafe, match="not connected"):
        check_reveal_safe_graph(set(range(40)) - cut, range(40), params, SEED)
    # one gap keeps it connected
    check_reveal_safe_graph(set(range(40)) - {perm[0], perm[1], perm[20]}, range(40), params, SEED)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.binary(min_size=32, max_size=32), st.sets(st.integers(0, 29), max_size=8))
def test_graph_rule_agrees_with_its_definition(seed: bytes, dropped: set[int]) -> None:
    params = SecAggPlusParams(30, 6, 3, 0.0, 0.3)  # n_min = 21
    graph = harary_neighbours(30, 6, seed)
    inc = set(range(30)) - dropped
    short = [c for c in inc if len(inc & (set(graph[c]) | {c})) < 3]
    seen, todo = set(), [min(inc)]
    while todo:
        u = todo.pop()
        if u not in seen:
            seen.add(u)
            todo += [v for v in graph[u] if v in inc]
    safe = len(inc) >= 21 and not short and seen == inc
    try:
        check_reveal_safe_graph(inc, range(30), params, seed)
    except RevealUnsafe:
        assert not safe
    else:
        assert safe


def test_task_graph_refusals() -> None:
    full = check_task_graph(10, 0.3)
    assert full.is_full and full.threshold == 7
    with pytest.raises(ConfigError, match="K/2"):
        check_task_graph(10, 0.6)
    with pytest.raises(ConfigError, match="corrupt"):
        check_task_graph(10, 0.3, corrupt_fraction=0.7)
    plus = check_task_graph(1000, 0.3, 0.1, graph=HARARY_VERSION)
    assert (plus.degree, plus.threshold) == (88, 36)
    with pytest.raises(SecAggParameterError, match=r"> 0\.9"):
        check_task_graph(1000, 0.5, 0.45, graph=HARARY_VERSION)
    with pytest.raises(ConfigError, match="known"):
        check_task_graph(1000, 0.3, 0.1, graph="ring")
