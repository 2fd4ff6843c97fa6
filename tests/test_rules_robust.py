"""Krum, Multi-Krum, Median, Trimmed mean, Bulyan: exact brute-force references, float64
references within the quantisation bound, robustness properties, order invariance."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from aggregators.base import AggregationInput, AggregationOutput
from aggregators.registry import make_rule
from aggregators.robust import trim_count
from protocol.errors import RuleParameterError

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _inp(u: np.ndarray, vb: int, n: np.ndarray | None = None) -> AggregationInput:
    k, d = u.shape
    ns = np.ones(k, np.int64) if n is None else n.astype(np.int64)
    return AggregationInput(np.zeros(d, np.int64), u.astype(np.int32), ns, {}, 16, vb)


def _run(rule: str, params: dict[str, object], u: np.ndarray, vb: int) -> AggregationOutput:
    return make_rule(rule, params).aggregate(_inp(u, vb))


# ------------------------------------------------------------------ exact brute force


def _dists(u: np.ndarray) -> list[list[int]]:
    rows = [[int(x) for x in r] for r in u]
    return [[sum((a - b) ** 2 for a, b in zip(ri, rj, strict=True)) for rj in rows] for ri in rows]


def _krum_ref(u: np.ndarray, f: int, m: int) -> list[int]:
    k = len(u)
    dist = _dists(u)
    score = [sum(sorted(dist[i][j] for j in range(k) if j != i)[: k - f - 2]) for i in range(k)]
    return sorted(sorted(range(k), key=lambda i: (score[i], i))[:m])


def _bulyan_ref(u: np.ndarray, f: int) -> tuple[list[int], list[int]]:
    k, d = u.shape
    dist = _dists(u)
    rest, sel = list(range(k)), []
    for _ in range(k - 2 * f):
        if len(rest) == 1:
            sel.append(rest.pop())
            break
        nn = min(len(rest) - 1, max(1, len(rest) - f - 2))
        score = {i: sum(sorted(dist[i][j] for j in rest if j != i)[:nn]) for i in rest}
        best = min(rest, key=lambda i: (score[i], i))
        sel.append(best)
        rest.remove(best)
    theta, beta = k - 2 * f, k - 4 * f
    out = []
    for j in range(d):
        vals = sorted(int(u[i, j]) for i in sel)
        med = Fraction(vals[(theta - 1) // 2] + vals[theta // 2], 2)
        pick = sorted(vals, key=lambda v: (abs(v - med), v))[:beta]
        out.append(round(Fraction(sum(pick), beta)))  # round() on Fraction: half to even
    return sorted(sel), out


@st.composite
def matrices(draw: st.DrawFn, min_k: int = 3, max_k: int = 12, small: bool | None = None):
    k = draw(st.integers(min_k, max_k))
    d = draw(st.integers(1, 8))
    if small is None:
        small = draw(st.booleans())
    vb = 3 if small else 2 ** draw(st.integers(1, 30))
    vals = draw(st.lists(st.integers(-vb, vb), min_size=k * d, max_size=k * d))
    return np.array(vals, dtype=np.int64).reshape(k, d), vb


@SETTINGS
@given(data=matrices(), fdraw=st.data())
def test_krum_and_multikrum_match_bruteforce(
    data: tuple[np.ndarray, int], fdraw: st.DataObject
) -> None:
    u, vb = data
    k = len(u)
    f = fdraw.draw(st.integers(0, (k - 3) // 2))
    out = _run("krum", {"f": f}, u, vb)
    assert list(out.selected or ()) == _krum_ref(u, f, 1)
    assert out.params.tolist() == u[out.selected[0]].tolist()  # type: ignore[index]
    m = fdraw.draw(st.integers(1, k - f))
    out = _run("multikrum", {"f": f, "m": m}, u, vb)
    sel = _krum_ref(u, f, m)
    assert list(out.selected or ()) == sel
    want = [round(Fraction(int(u[sel, j].sum()), m)) for j in range(u.shape[1])]
    assert out.params.tolist() == want


@SETTINGS
@given(data=matrices(min_k=3, max_k=15), fdraw=st.data())
def test_bulyan_matches_bruteforce(data: tuple[np.ndarray, int], fdraw: st.DataObject) -> None:
    u, vb = data
    k = len(u)
    f = fdraw.draw(st.integers(0, (k - 3) // 4))
    out = _run("bulyan", {"f": f}, u, vb)
    sel, want = _bulyan_ref(u, f)
    assert list(out.selected or ()) == sel
    assert out.params.tolist() == want


@SETTINGS
@given(data=matrices(min_k=1, max_k=12))
def test_median_matches_bruteforce(data: tuple[np.ndarray, int]) -> None:
    u, vb = data
    k = len(u)
    s = np.sort(u, axis=0)
    want = [
        round(Fraction(int(s[(k - 1) // 2, j]) + int(s[k // 2, j]), 2)) for j in range(u.shape[1])
    ]
    assert _run("median", {}, u, vb).params.tolist() == want


@SETTINGS
@given(data=matrices(min_k=1, max_k=12), beta=st.sampled_from([0.0, 0.1, 0.2, 0.25, 0.3, 0.49]))
def test_trimmed_mean_matches_bruteforce(data: tuple[np.ndarray, int], beta: float) -> None:
    u, vb = data
    k = len(u)
    b = trim_count(beta, k)
    s = np.sort(u, axis=0)
    want = [round(Fraction(int(s[b : k - b, j].sum()), k - 2 * b)) for j in range(u.shape[1])]
    assert _run("trimmed_mean", {"beta": beta}, u, vb).params.tolist() == want


def test_trim_count_uses_decimal_value() -> None:
    assert trim_count(0.3, 10) == 3  # float 0.3 * 10 would be 2.9999999999999996 exactly
    assert trim_count(0.1, 30) == 3
    assert trim_count(0.0, 7) == 0
    assert trim_count(0.49, 100) == 49
    assert trim_count(0.29, 100) == 29  # float64 0.29 * 100 = 28.999999999999996


# ------------------------------------------------------------------ float64 references


def _float_ref(rule: str, u: np.ndarray, f: int) -> np.ndarray:
    x = u.astype(np.float64)
    k = len(x)
    if rule == "median":
        return np.median(x, axis=0)
    if rule == "trimmed_mean":
        return stats.trim_mean(x, 0.2, axis=0)
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    score = np.sort(d2 + np.diag(np.full(k, np.inf)), axis=1)[:, : k - f - 2].sum(1)
    if rule == "krum":
        return x[int(np.argmin(score))]
    if rule == "multikrum":
        return x[np.argsort(score, kind="stable")[: k - f]].mean(0)
    raise AssertionError(rule)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rule=st.sampled_from(["median", "trimmed_mean", "krum", "multikrum"]),
)
def test_rules_agree_with_float64_reference(seed: int, rule: str) -> None:
    rng = np.random.default_rng(seed)
    k, d, vb = int(rng.integers(5, 14)), int(rng.integers(1, 50)), 2**20
    u = rng.normal(0, vb / 6, size=(k, d))
    u = np.clip(np.rint(u), -vb, vb).astype(np.int64)
    f = (k - 3) // 2
    params: dict[str, object] = {"f": f} if "krum" in rule else {}
    if rule == "trimmed_mean":
        params = {"beta": 0.2}
    got = _run(rule, params, u, vb).params.astype(np.float64)
    ref = _float_ref(rule, u, f)
    # fixed-point units: at most half a unit of rounding (+ float noise of the reference)
    assert np.abs(got - ref).max() <= 0.5 + 1e-6


# ------------------------------------------------------------------ robustness properties


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), rule=st.sampled_from(["median", "trimmed_mean"]))
def test_coordinatewise_rules_stay_in_honest_range(seed: int, rule: str) -> None:
    rng = np.random.default_rng(seed)
    honest = int(rng.integers(3, 12))
    if rule == "median":
        byz = int(rng.integers(0, honest))  # f < n/2
        params: dict[str, object] = {}
    else:
        beta = 0.3
        # b = floor(beta*n) trimmed per side must cover the Byzantine count
        byz = int(rng.integers(0, 4))
        while trim_count(beta, honest + byz) < byz:
            honest += 1
        params = {"beta": beta}
    d, vb = 16, 2**24
    h = rng.integers(-1000, 1000, size=(honest, d))
    b = rng.choice([-vb, vb], size=(byz, d)) * rng.integers(0, 2, size=(byz, d))
    u = rng.permutation(np.vstack([h, b]))
    out = _run(rule, params, u, vb).params
    assert (out >= h.min(0)).all() and (out <= h.max(0)).all()


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), multi=st.booleans())
def test_krum_selects_honest_when_byzantine_far(seed: int, multi: bool) -> None:
    rng = np.random.default_rng(seed)
    f = int(rng.integers(1, 4))
    n = int(rng.integers(2 * f + 3, 2 * f + 8))
    d, vb = 20, 2**24
    honest = rng.integers(-500, 500, size=(n - f, d))
    byz = rng.integers(-vb, vb, size=(f, d))
    byz[:, 0] = vb  # far from the honest cluster
    order = rng.permutation(n)
    u = np.vstack([honest, byz])[order]
    is_byz = order >= n - f
    rule = "multikrum" if multi else "krum"
    out = _run(rule, {"f": f}, u, vb)
    assert out.selected is not None
    assert not any(is_byz[i] for i in out.selected)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_bulyan_resists_far_byzantine(seed: int) -> None:
    rng = np.random.default_rng(seed)
    f = int(rng.integers(1, 3))
    n = 4 * f + 3 + int(rng.integers(0, 3))
    d, vb = 12, 2**24
    honest = rng.integers(-500, 500, size=(n - f, d))
    byz = np.full((f, d), vb)
    u = rng.permutation(np.vstack([honest, byz]))
    out = _run("bulyan", {"f": f}, u, vb).params
    assert (out >= honest.min(0)).all() and (out <= honest.max(0)).all()


# ------------------------------------------------------------------ symmetry and ties


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    rule=st.sampled_from(["fedavg", "median", "trimmed_mean", "krum", "multikrum", "bulyan"]),
)
def test_symmetric_rules_ignore_input_order(seed: int, rule: str) -> None:
    """Without ties, permuting the inputs (with their num_samples) changes nothing.

    Bulyan's late Krum rounds use ``max(1, |R|-f-2)`` neighbours; with one neighbour, mutual
    nearest neighbours tie by construction and the on-chain index decides - so Bulyan is
    checked with f = 3, where every round uses >= 2 neighbours and random data has no ties.
    """
    rng = np.random.default_rng(seed)
    k, d, vb = int(rng.integers(7, 13)), int(rng.integers(1, 30)), 2**20
    f = 1
    if rule == "bulyan":
        f, k = 3, int(rng.integers(15, 18))
    u = rng.integers(-vb, vb + 1, size=(k, d))  # wide range: ties have ~0 probability
    n = rng.integers(1, 100, size=k)
    params: dict[str, object] = {"f": f} if rule in ("krum", "multikrum", "bulyan") else {}
    perm = rng.permutation(k)
    r = make_rule(rule, params)
    a = r.aggregate(_inp(u, vb, n))
    b = r.aggregate(_inp(u[perm], vb, n[perm]))
    assert np.array_equal(a.params, b.params)
    if a.selected is not None:
        assert sorted(int(perm[i]) for i in b.selected or ()) == list(a.selected)


def test_krum_ties_break_by_index() -> None:
    # rows 0 and 1 identical, rows 2..4 symmetric: equal scores -> lowest index wins
    u = np.array([[0, 0], [0, 0], [10, 0], [-10, 0], [0, 10]])
    out = _run("krum", {"f": 0}, u, 100)
    assert out.selected == (0,)
    u2 = np.array([[5], [-5], [5], [-5], [100]])
    assert _run("krum", {"f": 1}, u2, 100).selected == (0,)
    assert _run("multikrum", {"f": 1, "m": 3}, u2, 100).selected == (0, 1, 2)


def test_median_even_count_rounds_half_to_even() -> None:
    u = np.array([[1, 2, -1, -2, 3], [2, 3, -2, -3, 3]])
    # means 1.5 -> 2, 2.5 -> 2, -1.5 -> -2, -2.5 -> -2, 3 -> 3
    assert _run("median", {}, u, 10).params.tolist() == [2, 2, -2, -2, 3]


def test_robust_rules_ignore_num_samples() -> None:
    rng = np.random.default_rng(5)
    u = rng.integers(-100, 100, size=(9, 7))
    for rule, p in [("median", {}), ("trimmed_mean", {}), ("krum", {"f": 1}), ("bulyan", {"f": 1})]:
        a = make_rule(rule, p).aggregate(_inp(u, 100, np.ones(9)))
        b = make_rule(rule, p).aggregate(_inp(u, 100, rng.integers(1, 10**6, size=9)))
        assert np.array_equal(a.params, b.params)


# ------------------------------------------------------------------ parameters and K


@pytest.mark.parametrize(
    ("rule", "params", "k", "match"),
    [
        ("krum", {"f": 2}, 6, "n >= 2f\\+3 = 7"),
        ("multikrum", {"f": 1, "m": 5}, 5, "m=5 must be <= n - f = 4"),
        ("bulyan", {"f": 2}, 10, "n >= 4f\\+3 = 11"),
        ("bulyan", {"f": 0}, 2, "n >= 4f\\+3 = 3"),
    ],
)
def test_too_few_updates_fail_before_work(
    rule: str, params: dict[str, object], k: int, match: str
) -> None:
    r = make_rule(rule, params)
    with pytest.raises(RuleParameterError, match=match):
        r.check_num_updates(k)
    with pytest.raises(RuleParameterError, match=match):
        r.aggregate(_inp(np.zeros((k, 3), np.int64), 10))
    assert r.min_updates() == k + 1 or rule == "multikrum"


@pytest.mark.parametrize(
    ("rule", "params", "match"),
    [
        ("krum", {}, "required"),
        ("krum", {"f": -1}, ">= 0"),
        ("krum", {"f": "1.5"}, "must be int"),
        ("krum", {"f": 1, "m": 0}, ">= 1"),
        ("bulyan", {"f": "x"}, "must be int"),
        ("trimmed_mean", {"beta": 0.5}, r"\[0, 0.5\)"),
        ("trimmed_mean", {"beta": -0.1}, r"\[0, 0.5\)"),
        ("trimmed_mean", {"beta": "inf"}, "finite"),
        ("median", {"beta": 0.1}, "unknown parameter"),
    ],
)
def test_invalid_robust_parameters(rule: str, params: dict[str, object], match: str) -> None:
    with pytest.raises(RuleParameterError, match=match):
        make_rule(rule, params)


def test_min_updates() -> None:
    assert make_rule("krum", {"f": 2}).min_updates() == 7
    assert make_rule("multikrum", {"f": 2, "m": 9}).min_updates() == 11
    assert make_rule("bulyan", {"f": 2}).min_updates() == 11
    assert make_rule("median").min_updates() == 1


def test_large_magnitudes_use_exact_python_int_paths() -> None:
    """vb = 2**30 forces the split-limb Gram and Python-int distances/scores."""
    rng = np.random.default_rng(9)
    vb = 2**30
    u = rng.integers(-vb, vb + 1, size=(9, 40))
    u[0] = vb
    u[1] = -vb
    out = _run("krum", {"f": 2}, u, vb)
    assert list(out.selected or ()) == _krum_ref(u, 2, 1)
    sel, want = _bulyan_ref(u, 1)
    out = _run("bulyan", {"f": 1}, u, vb)
    assert list(out.selected or ()) == sel and out.params.tolist() == want


def test_selected_maps_to_rows_and_is_sorted() -> None:
    u = np.array([[0], [1], [2], [100], [3], [-100], [1]])
    out = _run("multikrum", {"f": 2}, u, 1000)
    assert out.selected == tuple(sorted(out.selected or ()))
    assert 3 not in (out.selected or ()) and 5 not in (out.selected or ())
