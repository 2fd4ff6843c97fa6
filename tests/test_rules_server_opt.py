"""Server optimisers (FedAvgM, FedAdagrad, FedAdam, FedYogi): float64 reference, state
hand-over between aggregators, state validation, range errors."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregators.base import AggregationInput, AggregationInputError, AggregationRangeError
from aggregators.registry import get_rule_class, make_rule

RULES = ["fedavgm", "fedadagrad", "fedadam", "fedyogi"]
FB = 16


def _inp(
    u: np.ndarray, n: np.ndarray, g: np.ndarray, state: dict, vb: int = 2**20
) -> AggregationInput:
    return AggregationInput(
        g.astype(np.int64), u.astype(np.int32), n.astype(np.int64), state, FB, vb
    )


def _fedavg_delta(u: np.ndarray, n: np.ndarray) -> list[int]:
    tot = int(n.sum())
    return [
        round(Fraction(sum(int(n[k]) * int(u[k, j]) for k in range(len(u))), tot))
        for j in range(u.shape[1])
    ]


def _reference(
    rule: str, p: dict, rounds: list[tuple[np.ndarray, np.ndarray]], g0: np.ndarray
) -> tuple[list[int], dict]:
    """Per-coordinate Python-float implementation of Reddi et al. 2021 Alg. 2 / Hsu et al."""
    d = len(g0)
    g = [int(x) for x in g0]
    m = [0.0] * d
    v = [p.get("tau", 0.0) ** 2] * d
    mom = [0.0] * d
    for u, n in rounds:
        dq = _fedavg_delta(u, n)
        for j in range(d):
            delta = dq[j] / 2.0**FB
            if rule == "fedavgm":
                mom[j] = mom[j] * p["momentum"] + delta
                step = mom[j] * p["server_lr"]
            else:
                m[j] = m[j] * p["beta1"] + delta * (1.0 - p["beta1"])
                d2 = delta * delta
                if rule == "fedadagrad":
                    v[j] = v[j] + d2
                elif rule == "fedadam":
                    v[j] = v[j] * p["beta2"] + d2 * (1.0 - p["beta2"])
                else:
                    sign = (v[j] > d2) - (v[j] < d2)
                    v[j] = v[j] - (d2 * (1.0 - p["beta2"])) * sign
                step = (m[j] * p["eta"]) / (math.sqrt(v[j]) + p["tau"])
            g[j] += round(step * 2.0**FB)  # Python round(): half to even
    state = {"momentum": mom} if rule == "fedavgm" else {"m": m, "v": v}
    return g, state


def _rounds(seed: int, r: int, k: int, d: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.integers(-(2**16), 2**16, size=(k, d)), rng.integers(1, 500, size=k)) for _ in range(r)
    ]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rule=st.sampled_from(RULES), nrounds=st.integers(1, 4))
def test_matches_float_reference(seed: int, rule: str, nrounds: int) -> None:
    rounds = _rounds(seed, nrounds, 5, 12)
    g0 = np.random.default_rng(seed + 1).integers(-(2**20), 2**20, size=12)
    r = make_rule(rule)
    g, state = g0.astype(np.int64), {}
    for u, n in rounds:
        out = r.aggregate(_inp(u, n, g, state))
        g, state = out.params, out.state
    ref_g, ref_state = _reference(rule, r.params, rounds, g0)
    # same IEEE operations in the same order: identical results expected; allow one unit
    assert np.abs(g - np.array(ref_g)).max() <= 1
    for key, val in ref_state.items():
        np.testing.assert_allclose(state[key], np.array(val), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("rule", RULES)
def test_state_survives_aggregator_rotation(rule: str) -> None:
    """Rounds split across rule instances (two aggregators, state through bytes) == one."""
    rounds = _rounds(7, 4, 6, 257)
    g0 = np.zeros(257, np.int64)
    params = {"fedavgm": {"momentum": "0.8"}, "fedadam": {"beta2": "0.95"}}.get(rule, {})
    one = make_rule(rule, params)
    g1, s1 = g0, {}
    for u, n in rounds:
        out = one.aggregate(_inp(u, n, g1, s1))
        g1, s1 = out.params, out.state
    g2, s2 = g0, {}
    for u, n in rounds:
        agg = make_rule(rule, params)  # a fresh aggregator each round
        out = agg.aggregate(_inp(u, n, g2, s2))
        # publish/fetch: canonical bytes and back (as the global-state codec does)
        blob = {k: v.astype("<f8").tobytes() for k, v in out.state.items()}
        s2 = {k: np.frombuffer(b, dtype="<f8").astype(np.float64) for k, b in blob.items()}
        g2 = np.frombuffer(out.params.astype("<i4").tobytes(), dtype="<i4").astype(np.int64)
    assert np.array_equal(g1, g2)
    assert set(s1) == set(s2) == set(get_rule_class(rule).state_keys)  # type: ignore[attr-defined]
    for k in s1:
        assert s1[k].tobytes() == s2[k].tobytes()


@pytest.mark.parametrize("rule", RULES)
def test_does_not_mutate_input_state(rule: str) -> None:
    ((u, n),) = _rounds(3, 1, 4, 9)
    r = make_rule(rule)
    out = r.aggregate(_inp(u, n, np.zeros(9), {}))
    frozen = {k: v.copy() for k, v in out.state.items()}
    r.aggregate(_inp(u, n, out.params, out.state))
    for k in frozen:
        assert np.array_equal(out.state[k], frozen[k])


def test_first_round_state_initialisation() -> None:
    ((u, n),) = _rounds(4, 1, 4, 5)
    out = make_rule("fedadam", {"tau": "0.01"}).aggregate(_inp(u, n, np.zeros(5), {}))
    assert set(out.state) == {"m", "v"}
    assert all(a.dtype == np.float64 and a.shape == (5,) for a in out.state.values())
    out = make_rule("fedavgm").aggregate(_inp(u, n, np.zeros(5), {}))
    delta = np.array(_fedavg_delta(u, n))
    assert np.array_equal(out.params, delta)  # server_lr 1, zero momentum: plain FedAvg
    assert np.array_equal(out.state["momentum"], delta / 2.0**FB)


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({"m": np.zeros(5)}, "lacks 'v'"),
        ({"m": np.zeros(5), "v": np.zeros(5), "x": np.zeros(5)}, "unexpected"),
        ({"m": np.zeros(4), "v": np.zeros(5)}, "shape"),
        ({"m": np.zeros(5, np.float32), "v": np.zeros(5)}, "float64"),
        ({"m": np.full(5, np.nan), "v": np.zeros(5)}, "not finite"),
    ],
)
def test_bad_state_rejected(state: dict, match: str) -> None:
    ((u, n),) = _rounds(5, 1, 3, 5)
    with pytest.raises(AggregationInputError, match=match):
        make_rule("fedadam").aggregate(_inp(u, n, np.zeros(5), state))


def test_step_out_of_range_is_a_clear_error() -> None:
    ((u, n),) = _rounds(6, 1, 3, 5)
    with pytest.raises(AggregationRangeError, match="int32"):
        make_rule("fedavgm", {"server_lr": "1e6"}).aggregate(_inp(u, n, np.zeros(5), {}))
    with pytest.raises(AggregationRangeError):
        make_rule("fedadam", {"eta": "1e300"}).aggregate(_inp(u, n, np.zeros(5), {}))


def test_subnormal_state_is_flushed_to_zero() -> None:
    u = np.zeros((2, 3), np.int64)
    n = np.ones(2, np.int64)
    tiny = np.array([1e-300, -1e-300, 1.0])
    out = make_rule("fedavgm", {"momentum": "1e-10"}).aggregate(
        _inp(u, n, np.zeros(3), {"momentum": tiny})
    )
    # 1e-310 would be subnormal: stored as an exact zero (FTZ/DAZ-independent bytes)
    assert out.state["momentum"].tolist() == [0.0, 0.0, 1e-10]


@pytest.mark.parametrize(
    ("rule", "params", "match"),
    [
        ("fedadam", {"eta": 0}, "> 0"),
        ("fedadam", {"beta1": 1.0}, r"\[0, 1\)"),
        ("fedyogi", {"beta2": -0.1}, r"\[0, 1\)"),
        ("fedadagrad", {"tau": 0}, "> 0"),
        ("fedadagrad", {"beta2": 0.9}, "unknown parameter"),
        ("fedavgm", {"momentum": 1}, r"\[0, 1\)"),
        ("fedavgm", {"server_lr": -1}, "> 0"),
    ],
)
def test_invalid_optimiser_parameters(rule: str, params: dict, match: str) -> None:
    from protocol.errors import RuleParameterError

    with pytest.raises(RuleParameterError, match=match):
        make_rule(rule, params)


def test_defaults_are_documented_values() -> None:
    assert make_rule("fedadam").params == {"eta": 0.01, "beta1": 0.9, "beta2": 0.99, "tau": 0.001}
    assert make_rule("fedyogi").params == {"eta": 0.01, "beta1": 0.9, "beta2": 0.99, "tau": 0.001}
    assert make_rule("fedadagrad").params == {"eta": 0.1, "beta1": 0.9, "tau": 0.001}
    assert make_rule("fedavgm").params == {"server_lr": 1.0, "momentum": 0.9}
    assert all(get_rule_class(r).stateful for r in RULES)
