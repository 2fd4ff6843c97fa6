"""The verifiable stopping rule (issue 23 item 7): the pure integer decision, its place in
the re-executed global state, and the task options that turn it on."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from aggregators.execution import execute_round, stop_rule_of
from aggregators.stopping import (
    StopRule,
    delta_norm_sq,
    next_stop_count,
    stop_decision,
    threshold_units,
)
from fedchain.config import DemoConfig
from protocol.errors import CodecError, ConfigError
from protocol.fixedpoint import NumericFormat
from protocol.manifest import TaskManifest
from protocol.payloads import (
    GlobalState,
    ModelLayout,
    decode_global_state,
    encode_global_state,
    encode_update,
)

LAYOUT = ModelLayout.from_spec([("w", (3, 2)), ("b", (2,))])
FMT = NumericFormat(16, 4 << 16)


def manifest(stop_norm: float | None = None, patience: int = 2) -> TaskManifest:
    return TaskManifest(
        rule="fedavg",
        rule_params={},
        numeric=FMT,
        model="logreg",
        input_shape=(3,),
        num_classes=2,
        layout=LAYOUT,
        stop_norm=stop_norm,
        stop_patience=patience,
    )


# -- the pure functions -------------------------------------------------------------------


def test_threshold_units_scales_exactly_and_rounds_half_to_even() -> None:
    assert threshold_units(1.0, 16) == 65536
    assert threshold_units(0.5, 0) == 0  # half to even
    assert threshold_units(1.5, 0) == 2
    assert threshold_units(2.5, 0) == 2
    assert threshold_units(3 / 65536, 16) == 3
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="stop_norm"):
            threshold_units(bad, 16)


def _reference_norm_sq(a: np.ndarray, b: np.ndarray) -> int:
    return sum((int(y) - int(x)) ** 2 for x, y in zip(a.tolist(), b.tolist(), strict=True))


@pytest.mark.parametrize("scale", [1, 1 << 10, 1 << 20, (1 << 20) + 1, (1 << 31) - 1])
def test_delta_norm_sq_is_exact_on_both_paths(scale: int) -> None:
    rng = np.random.default_rng(scale)
    for size in (0, 1, 7, 1000):
        a = rng.integers(-scale, scale, size=size, endpoint=True, dtype=np.int64)
        b = rng.integers(-scale, scale, size=size, endpoint=True, dtype=np.int64)
        assert delta_norm_sq(a, b) == _reference_norm_sq(a, b)
    # the largest int32 deltas: each square needs 64 bits, the sum more
    top = np.full(5, 2**31 - 1, dtype=np.int64)
    assert delta_norm_sq(-top - 1, top) == 5 * (2**32 - 1) ** 2
    with pytest.raises(ValueError, match="shapes"):
        delta_norm_sq(np.zeros(2, np.int64), np.zeros(3, np.int64))


def test_next_stop_count_exhaustively() -> None:
    for count, norm_sq, threshold, carried in itertools.product(
        range(4), range(30), range(6), (False, True)
    ):
        got = next_stop_count(count, norm_sq, threshold, carried)
        if carried:
            want = count
        elif norm_sq < threshold * threshold:  # strictly below: equal is not quiet
            want = count + 1
        else:
            want = 0
        assert got == want, (count, norm_sq, threshold, carried)
    with pytest.raises(ValueError):
        next_stop_count(-1, 0, 1)


def test_stop_decision_and_rule_step() -> None:
    assert [stop_decision(c, 3) for c in range(5)] == [False, False, False, True, True]
    rule = StopRule(threshold=5, patience=2)
    prev = np.zeros(4, np.int64)
    quiet = np.array([3, 0, 0, 3], np.int64)  # 18 < 25
    edge = np.array([3, 4, 0, 0], np.int64)  # 25 == 25: not quiet
    assert rule.step(0, prev, quiet) == (1, False)
    assert rule.step(1, prev, quiet) == (2, True)
    assert rule.step(1, prev, edge) == (0, False)
    assert rule.step(1, prev, prev, carried=True) == (1, False)  # no update is not convergence
    with pytest.raises(ConfigError):
        StopRule(threshold=0, patience=1)
    with pytest.raises(ConfigError):
        StopRule(threshold=1, patience=0)
    assert StopRule.of(1.0, 3, 16) == StopRule(65536, 3)


# -- the global state and the manifest ------------------------------------------------------


def test_stop_count_round_trips_and_is_absent_by_default() -> None:
    params = np.arange(8, dtype=np.int64)
    plain = encode_global_state(LAYOUT, GlobalState(1, params))
    assert decode_global_state(LAYOUT, plain).stop_count is None
    counted = encode_global_state(LAYOUT, GlobalState(1, params, stop_count=2))
    assert counted != plain
    assert decode_global_state(LAYOUT, counted).stop_count == 2
    with pytest.raises(CodecError):
        encode_global_state(LAYOUT, GlobalState(1, params, stop_count=-1))


def test_manifest_without_stop_hashes_as_before_and_with_it_round_trips() -> None:
    off = manifest()
    assert "stop" not in off.to_json()
    on = manifest(0.25, 3)
    assert on.to_json()["stop"] == {"norm": 0.25, "patience": 3}
    back = TaskManifest.from_bytes(on.to_bytes())
    assert (back.stop_norm, back.stop_patience) == (0.25, 3)
    assert back.digest == on.digest != off.digest
    assert stop_rule_of(off) is None
    assert stop_rule_of(on) == StopRule(16384, 3)


def _round(m: TaskManifest, round_: int, prev: bytes, delta: float) -> tuple[bytes, bool, int]:
    up = encode_update(LAYOUT, round_, np.full(LAYOUT.size, round(delta * 2**16), np.int64))
    res = execute_round(m, round_, prev, [up, up], [1, 1])
    state = decode_global_state(LAYOUT, res.payload)
    return res.payload, res.stop, int(state.stop_count or 0)


def test_execution_counts_quiet_rounds_in_the_state_and_decides_identically() -> None:
    # delta 0.05 on 8 coordinates: norm 0.141 < 0.2 (quiet); 0.1: norm 0.283 (not quiet)
    m = manifest(0.2, 2)
    g0 = encode_global_state(LAYOUT, GlobalState(0, np.zeros(LAYOUT.size, np.int64)))
    p1, s1, c1 = _round(m, 1, g0, 0.05)
    p2, s2, c2 = _round(m, 2, p1, 0.1)
    p3, s3, c3 = _round(m, 3, p2, 0.05)
    p4, s4, c4 = _round(m, 4, p3, 0.05)
    assert (c1, c2, c3, c4) == (1, 0, 1, 2)
    assert (s1, s2, s3, s4) == (False, False, False, True)
    # a second, independent re-execution (another aggregator) reaches the same bytes and
    # decision: the counter is part of the state the digest binds
    again = _round(m, 4, p3, 0.05)
    assert again == (p4, s4, c4)
    # the task without the rule: same parameters, no counter, never a stop
    off = manifest()
    q1, t1, _ = _round(off, 1, g0, 0.05)
    assert not t1 and decode_global_state(LAYOUT, q1).stop_count is None
    assert np.array_equal(
        decode_global_state(LAYOUT, q1).params, decode_global_state(LAYOUT, p1).params
    )


def test_a_carried_round_leaves_the_counter_unchanged() -> None:
    m = manifest(0.2, 2)
    g0 = encode_global_state(LAYOUT, GlobalState(0, np.zeros(LAYOUT.size, np.int64)))
    p1, _, c1 = _round(m, 1, g0, 0.05)
    res = execute_round(m, 2, p1, [None, None], [1, 1])  # nothing to aggregate
    assert res.carried_forward and not res.stop
    assert decode_global_state(LAYOUT, res.payload).stop_count == c1 == 1


def test_config_refuses_bad_stop_options() -> None:
    DemoConfig(stop_norm=0.5, stop_patience=2).validate()
    with pytest.raises(ConfigError, match="stop-norm"):
        DemoConfig(stop_norm=1e-9).validate()
    with pytest.raises(ConfigError, match="stop-patience"):
        DemoConfig(stop_norm=0.5, stop_patience=0).validate()
