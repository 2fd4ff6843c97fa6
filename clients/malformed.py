"""Malformed client payloads: what a Byzantine client may register instead of an update.

Each function takes the honest payload's ingredients and returns bytes that every honest
aggregator must refuse identically (the codec and the update spec see to it), so the update
is excluded from aggregation on every node and re-execution still agrees.
"""

from __future__ import annotations

import struct

import numpy as np

from protocol.codec import MAGIC, encode_tensors
from protocol.payloads import DELTA_PREFIX, ROUND_KEY, ModelLayout, encode_update


def nan_payload(layout: ModelLayout, round_: int) -> bytes:
    """Every delta tensor as float32 NaN (the decoder refuses NaN and the wrong dtype)."""
    parts = [MAGIC, struct.pack("<I", 1 + len(layout.params))]
    tensors: list[tuple[bytes, int, tuple[int, ...], bytes]] = [
        (ROUND_KEY.encode(), 2, (1,), np.array([round_], "<i8").tobytes())
    ]
    for name, shape in layout.params:
        data = np.full(shape, np.nan, dtype="<f4").tobytes()
        tensors.append(((DELTA_PREFIX + name).encode(), 3, shape, data))
    for raw_name, code, shape, data in sorted(tensors):
        parts += [struct.pack("<H", len(raw_name)), raw_name, struct.pack("<BB", code, len(shape))]
        parts += [struct.pack(f"<{len(shape)}Q", *shape), data]
    return b"".join(parts)


def wrong_shape_payload(layout: ModelLayout, round_: int) -> bytes:
    """Delta tensors flattened to one dimension (right size, wrong shape)."""
    tensors: dict[str, np.ndarray] = {ROUND_KEY: np.array([round_], np.int64)}
    for name, shape in layout.params:
        tensors[DELTA_PREFIX + name] = np.zeros(int(np.prod(shape)) + 1, np.int32)
    return encode_tensors(tensors)


def oversized_payload(layout: ModelLayout, round_: int, delta_q: np.ndarray) -> bytes:
    """A valid update padded with an extra 4 MiB tensor."""
    tensors: dict[str, np.ndarray] = {
        ROUND_KEY: np.array([round_], np.int64),
        "padding": np.zeros(1 << 22, np.uint8),
    }
    tensors.update(layout.unflatten(delta_q.astype(np.int32), DELTA_PREFIX))
    return encode_tensors(tensors)


def wrong_round_payload(layout: ModelLayout, round_: int, delta_q: np.ndarray) -> bytes:
    """A replay: the same delta labelled with the previous round."""
    return encode_update(layout, max(0, round_ - 1), delta_q)
