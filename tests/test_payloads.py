"""Fixed-point format, update/global-state payloads and the task manifest."""

from __future__ import annotations

import numpy as np
import pytest

from protocol.codec import encode_tensors
from protocol.errors import CodecError, ConfigError
from protocol.fixedpoint import NumericFormat, dequantise, quantise
from protocol.manifest import TaskManifest
from protocol.payloads import (
    GlobalState,
    ModelLayout,
    decode_global_state,
    decode_update,
    decode_update_bit,
    encode_global_state,
    encode_update,
)

LAYOUT = ModelLayout.from_spec([("fc.weight", (3, 2)), ("fc.bias", (3,))])
FMT = NumericFormat(frac_bits=8, value_bound=1000)


def test_quantise_rounds_half_to_even_and_saturates() -> None:
    q = quantise([0.5 / 256, 1.5 / 256, -0.5 / 256, 10.0, -10.0, np.inf], 8, bound=1000)
    assert q.tolist() == [0, 2, 0, 1000, -1000, 1000]
    with pytest.raises(ValueError):
        quantise([np.nan], 8)


def test_quantisation_error_is_half_an_ulp() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 10_000)
    err = np.abs(dequantise(quantise(x, 16), 16) - x)
    assert err.max() <= 2.0**-17


def test_numeric_format_validation() -> None:
    assert NumericFormat(16, 4 << 16).clip == 4.0
    with pytest.raises(ConfigError):
        NumericFormat(frac_bits=31)
    with pytest.raises(ConfigError):
        NumericFormat(value_bound=0)


def test_layout_flatten_round_trip() -> None:
    named = {"fc.weight": np.arange(6).reshape(3, 2), "fc.bias": np.array([7, 8, 9])}
    flat = LAYOUT.flatten(named)
    assert flat.tolist() == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    back = LAYOUT.unflatten(flat)
    assert all(np.array_equal(back[k], v) for k, v in named.items())
    with pytest.raises(CodecError):
        LAYOUT.unflatten(np.zeros(8))


def test_update_round_trip_and_rejections() -> None:
    delta = np.array([1, -2, 3, -4, 5, 1000, -1000, 0, 9])
    data = encode_update(LAYOUT, 3, delta)
    assert decode_update(LAYOUT, FMT, 3, data).tolist() == delta.tolist()
    with pytest.raises(CodecError, match="round"):
        decode_update(LAYOUT, FMT, 4, data)
    with pytest.raises(CodecError, match="bound"):
        decode_update(LAYOUT, FMT, 3, encode_update(LAYOUT, 3, delta * 2))
    wrong_shape = encode_tensors(
        {
            "meta/round": np.array([3], np.int64),
            "delta/fc.weight": np.zeros((2, 3), np.int32),
            "delta/fc.bias": np.zeros(3, np.int32),
        }
    )
    with pytest.raises(CodecError, match="shape"):
        decode_update(LAYOUT, FMT, 3, wrong_shape)
    oversized = encode_tensors(
        {
            "meta/round": np.array([3], np.int64),
            "delta/fc.weight": np.zeros((3, 2), np.int32),
            "delta/fc.bias": np.zeros(3, np.int32),
            "padding": np.zeros(100_000, np.uint8),
        }
    )
    with pytest.raises(CodecError, match="exceeds"):
        decode_update(LAYOUT, FMT, 3, oversized)


def test_global_state_round_trip_with_optimiser_state() -> None:
    state = GlobalState(
        round=2,
        params=np.arange(9, dtype=np.int64) - 4,
        opt_state={"m": np.linspace(-1, 1, 9), "v": np.ones(9)},
    )
    data = encode_global_state(LAYOUT, state)
    back = decode_global_state(LAYOUT, data)
    assert back.round == 2
    assert back.params.tolist() == state.params.tolist()
    assert set(back.opt_state) == {"m", "v"}
    assert encode_global_state(LAYOUT, back) == data
    with pytest.raises(CodecError, match="overflow"):
        encode_global_state(LAYOUT, GlobalState(0, np.full(9, 2**31, dtype=np.int64)))


def test_global_state_rejects_foreign_tensors() -> None:
    data = encode_tensors(
        {
            "meta/round": np.array([1], np.int64),
            "model/fc.weight": np.zeros((3, 2), np.int32),
            "model/fc.bias": np.zeros(3, np.int32),
            "evil": np.zeros(1, np.int32),
        }
    )
    with pytest.raises(CodecError, match="unexpected"):
        decode_global_state(LAYOUT, data)


def test_manifest_round_trip_and_digest_binds_every_field() -> None:
    m = TaskManifest("fedavg", {}, FMT, "mlp", (1, 8, 8), 10, LAYOUT, {"epochs": 1})
    again = TaskManifest.from_bytes(m.to_bytes())
    assert again == m
    assert again.digest == m.digest
    changed = TaskManifest("fedavg", {}, NumericFormat(9, 1000), "mlp", (1, 8, 8), 10, LAYOUT)
    assert changed.digest != m.digest
    with pytest.raises(ConfigError):
        TaskManifest.from_bytes(b'{"version": 1}')


def test_clip_bit_travels_with_the_update_and_only_0_or_1_is_accepted() -> None:
    layout = ModelLayout.from_spec([("w", (2, 3))])
    fmt = NumericFormat(16, 1000)
    delta = np.arange(6) - 3
    data = encode_update(layout, 4, delta, clip_bit=1)
    got, bit = decode_update_bit(layout, fmt, 4, data, clip_bit=True)
    assert bit == 1 and np.array_equal(got, delta)
    with pytest.raises(CodecError, match="missing"):  # a task with adaptive clipping needs it
        decode_update_bit(layout, fmt, 4, encode_update(layout, 4, delta), clip_bit=True)
    with pytest.raises(CodecError, match="extra"):  # and a task without refuses it
        decode_update(layout, fmt, 4, data)
    with pytest.raises(CodecError, match="must be 0 or 1"):
        decode_update_bit(layout, fmt, 4, encode_update(layout, 4, delta, -1), clip_bit=True)


def test_global_state_carries_the_clip_norm() -> None:
    layout = ModelLayout.from_spec([("w", (3,))])
    state = GlobalState(2, np.array([1, 2, 3]), {}, clip_norm=0.625)
    data = encode_global_state(layout, state)
    assert decode_global_state(layout, data).clip_norm == 0.625
    without = encode_global_state(layout, GlobalState(2, np.array([1, 2, 3])))
    assert decode_global_state(layout, without).clip_norm is None
    assert without != data  # the clip norm is bound into the digest
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(CodecError, match="clip norm"):
            encode_global_state(layout, GlobalState(2, np.array([1, 2, 3]), {}, clip_norm=bad))
