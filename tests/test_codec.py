"""Canonical tensor codec: round trip, canonical order, and every rejection class."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from protocol.codec import MAGIC, TensorSpec, decode_tensors, encode_tensors
from protocol.errors import CodecError

DTYPES = ["int32", "int64", "float32", "float64", "uint8"]


def sample() -> dict[str, np.ndarray]:
    return {
        "w": np.arange(12, dtype=np.int32).reshape(3, 4) - 5,
        "b": np.array([1.5, -2.25], dtype=np.float32),
        "scalar": np.array(7, dtype=np.int64),
    }


def test_round_trip_and_canonical_order() -> None:
    data = sample()
    encoded = encode_tensors(data)
    reordered = dict(reversed(list(data.items())))
    assert encode_tensors(reordered) == encoded
    decoded = decode_tensors(encoded)
    assert list(decoded) == ["b", "scalar", "w"]
    for k, v in data.items():
        assert decoded[k].dtype == v.dtype and np.array_equal(decoded[k], v)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=12),
        st.sampled_from(DTYPES).flatmap(
            lambda dt: hnp.arrays(
                dt,
                hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                elements={"allow_nan": False, "allow_infinity": False}
                if dt.startswith("float")
                else None,
            )
        ),
        max_size=4,
    )
)
def test_round_trip_property(tensors: dict[str, np.ndarray]) -> None:
    encoded = encode_tensors(tensors)
    decoded = decode_tensors(encoded)
    assert set(decoded) == set(tensors)
    for k, v in tensors.items():
        assert decoded[k].dtype == v.dtype
        assert decoded[k].shape == v.shape
        assert decoded[k].tobytes() == np.ascontiguousarray(v).tobytes()
    assert encode_tensors(decoded) == encoded


def test_big_endian_input_encodes_like_little_endian() -> None:
    le = np.arange(5, dtype="<i4")
    assert encode_tensors({"x": le.astype(">i4")}) == encode_tensors({"x": le})


def _header(name: bytes, code: int, shape: tuple[int, ...]) -> bytes:
    return (
        struct.pack("<H", len(name))
        + name
        + struct.pack("<BB", code, len(shape))
        + struct.pack(f"<{len(shape)}Q", *shape)
    )


GOOD = encode_tensors({"a": np.array([1, 2], dtype=np.int32)})

REJECTS = {
    "bad magic": b"XXXX" + GOOD[4:],
    "too short": GOOD[:6],
    "truncated data": GOOD[:-1],
    "trailing bytes": GOOD + b"\x00",
    "unknown dtype": MAGIC + struct.pack("<I", 1) + _header(b"a", 99, (1,)) + b"\x00" * 4,
    "too many dims": MAGIC + struct.pack("<I", 1) + _header(b"a", 1, (1,) * 9) + b"\x00" * 4,
    "zero-length name": MAGIC + struct.pack("<I", 1) + _header(b"", 1, (1,)) + b"\x00" * 4,
    "invalid utf-8": MAGIC + struct.pack("<I", 1) + _header(b"\xff", 1, (1,)) + b"\x00" * 4,
    "out of order": MAGIC
    + struct.pack("<I", 2)
    + _header(b"b", 1, (1,))
    + b"\x00" * 4
    + _header(b"a", 1, (1,))
    + b"\x00" * 4,
    "duplicate": MAGIC
    + struct.pack("<I", 2)
    + _header(b"a", 1, (1,))
    + b"\x00" * 4
    + _header(b"a", 1, (1,))
    + b"\x00" * 4,
    "count larger than content": MAGIC + struct.pack("<I", 2) + GOOD[8:],
    "huge shape": MAGIC + struct.pack("<I", 1) + _header(b"a", 1, (2**40, 2**20)),
    "nan": encode_tensors({"a": np.zeros(2, np.float32)})[:-4]
    + np.array([np.nan], np.float32).tobytes(),
    "inf": encode_tensors({"a": np.zeros(1, np.float64)})[:-8]
    + np.array([np.inf], np.float64).tobytes(),
}


@pytest.mark.parametrize("case", sorted(REJECTS))
def test_malformed_payloads_are_refused(case: str) -> None:
    with pytest.raises(CodecError):
        decode_tensors(REJECTS[case])


def test_oversized_payload_is_refused() -> None:
    with pytest.raises(CodecError, match="exceeds"):
        decode_tensors(GOOD, max_bytes=len(GOOD) - 1)


def test_pickle_is_not_a_payload() -> None:
    import pickle

    with pytest.raises(CodecError):
        decode_tensors(pickle.dumps({"a": [1, 2]}))


SPEC = [TensorSpec("w", "int32", (2, 2), bound=10), TensorSpec("b", "float32", (2,))]


def good_for_spec() -> dict[str, np.ndarray]:
    return {"w": np.array([[1, -10], [3, 4]], np.int32), "b": np.zeros(2, np.float32)}


def test_spec_accepts_exact_match() -> None:
    out = decode_tensors(encode_tensors(good_for_spec()), SPEC)
    assert out["w"][0, 1] == -10


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda t: t.pop("b"), "missing"),
        (lambda t: t.__setitem__("extra", np.zeros(1, np.int32)), "extra"),
        (lambda t: t.__setitem__("w", t["w"].astype(np.int64)), "dtype"),
        (lambda t: t.__setitem__("w", np.zeros((4,), np.int32)), "shape"),
        (lambda t: t.__setitem__("w", np.array([[11, 0], [0, 0]], np.int32)), "bound"),
        (lambda t: t.__setitem__("w", np.array([[0, -11], [0, 0]], np.int32)), "bound"),
    ],
)
def test_spec_rejections(mutate, message: str) -> None:
    tensors = good_for_spec()
    mutate(tensors)
    with pytest.raises(CodecError, match=message):
        decode_tensors(encode_tensors(tensors), SPEC)


def test_encoder_refuses_nan_and_unencodable() -> None:
    with pytest.raises(CodecError):
        encode_tensors({"a": np.array([np.nan])})
    with pytest.raises(CodecError):
        encode_tensors({"a": np.array([1 + 2j])})
    with pytest.raises(CodecError):
        encode_tensors({"": np.zeros(1)})
