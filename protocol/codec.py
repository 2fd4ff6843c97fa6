"""Canonical tensor codec: one deterministic byte encoding for a named set of tensors.

Payloads come from untrusted peers, so there is no pickle anywhere on this path and the
decoder is strict: every byte is accounted for, and a payload is either exactly valid or
refused with a :class:`~protocol.errors.CodecError` that says why.

Layout (all integers little-endian)::

    magic   b"FCT1"
    u32     number of tensors
    then per tensor, in strictly ascending order of the UTF-8 name bytes:
      u16   name length, then the name (UTF-8, 1..255 bytes)
      u8    dtype code (see DTYPES)
      u8    number of dimensions (0..8)
      u64   each dimension
      ...   the elements, C order, little-endian, no padding

The same mapping therefore always has the same bytes, and the same bytes decode to one
mapping.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from protocol.errors import CodecError

MAGIC = b"FCT1"
MAX_NAME_BYTES = 255
MAX_NDIM = 8
DEFAULT_MAX_BYTES = 256 * 1024 * 1024

#: dtype code -> numpy little-endian dtype. Codes are part of the format: never renumber.
DTYPES: dict[int, np.dtype[np.generic]] = {
    1: np.dtype("<i4"),
    2: np.dtype("<i8"),
    3: np.dtype("<f4"),
    4: np.dtype("<f8"),
    5: np.dtype("u1"),
}
_CODE_OF = {dt.str: code for code, dt in DTYPES.items()}
_DTYPE_NAMES = {"int32": 1, "int64": 2, "float32": 3, "float64": 4, "uint8": 5}


@dataclass(frozen=True)
class TensorSpec:
    """What one tensor of a payload must be: name, dtype name, shape and an optional bound.

    ``bound`` (integers only) requires every element ``x`` to satisfy ``|x| <= bound``.
    Floating tensors must always be finite.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    bound: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPE_NAMES:
            raise CodecError(f"unsupported dtype {self.dtype!r} in spec for {self.name!r}")


def _code_for(array: NDArray[np.generic], name: str) -> int:
    code = _CODE_OF.get(array.dtype.newbyteorder("<").str)
    if code is None:
        raise CodecError(f"tensor {name!r}: dtype {array.dtype} is not encodable")
    return code


def encode_tensors(tensors: Mapping[str, NDArray[np.generic]]) -> bytes:
    """Encode named tensors canonically (sorted by name, little-endian, C order)."""
    names = sorted(tensors, key=lambda n: n.encode("utf-8"))
    parts: list[bytes] = [MAGIC, struct.pack("<I", len(names))]
    for name in names:
        raw_name = name.encode("utf-8")
        if not 1 <= len(raw_name) <= MAX_NAME_BYTES:
            raise CodecError(f"tensor name {name!r} must be 1..{MAX_NAME_BYTES} UTF-8 bytes")
        array = np.asarray(tensors[name])
        if array.ndim > MAX_NDIM:
            raise CodecError(f"tensor {name!r} has {array.ndim} dimensions (max {MAX_NDIM})")
        code = _code_for(array, name)
        if DTYPES[code].kind == "f" and not np.isfinite(array).all():
            raise CodecError(f"tensor {name!r} contains NaN or Inf")
        parts.append(struct.pack("<H", len(raw_name)))
        parts.append(raw_name)
        parts.append(struct.pack("<BB", code, array.ndim))
        parts.append(struct.pack(f"<{array.ndim}Q", *array.shape))
        parts.append(np.ascontiguousarray(array, dtype=DTYPES[code]).tobytes())
    return b"".join(parts)


def decode_tensors(
    data: bytes,
    spec: Sequence[TensorSpec] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> dict[str, NDArray[np.generic]]:
    """Decode a canonical payload; with ``spec``, also check it matches exactly.

    Refuses (with :class:`CodecError`): oversized input, a wrong magic, truncation, trailing
    bytes, names out of canonical order or duplicated, invalid UTF-8, unknown dtype codes,
    too many dimensions, NaN/Inf in floating tensors, and (with ``spec``) missing or extra
    tensors, a wrong dtype or shape, or integers outside the spec's bound.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError(f"payload must be bytes, got {type(data).__name__}")
    view = memoryview(data)
    if len(view) > max_bytes:
        raise CodecError(f"payload of {len(view)} bytes exceeds the limit of {max_bytes}")
    if len(view) < 8 or bytes(view[:4]) != MAGIC:
        raise CodecError("not a fedchain tensor payload (bad magic)")
    (count,) = struct.unpack_from("<I", view, 4)
    offset = 8
    out: dict[str, NDArray[np.generic]] = {}
    previous: bytes | None = None

    def need(n: int, what: str) -> None:
        if offset + n > len(view):
            raise CodecError(f"payload truncated while reading {what}")

    for _ in range(count):
        need(2, "a name length")
        (name_len,) = struct.unpack_from("<H", view, offset)
        offset += 2
        if not 1 <= name_len <= MAX_NAME_BYTES:
            raise CodecError(f"invalid tensor name length {name_len}")
        need(name_len, "a name")
        raw_name = bytes(view[offset : offset + name_len])
        offset += name_len
        try:
            name = raw_name.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodecError("tensor name is not valid UTF-8") from exc
        if previous is not None and raw_name <= previous:
            raise CodecError(f"tensor {name!r} is duplicated or out of canonical order")
        previous = raw_name
        need(2, f"the header of {name!r}")
        code, ndim = struct.unpack_from("<BB", view, offset)
        offset += 2
        if code not in DTYPES:
            raise CodecError(f"tensor {name!r}: unknown dtype code {code}")
        if ndim > MAX_NDIM:
            raise CodecError(f"tensor {name!r}: {ndim} dimensions (max {MAX_NDIM})")
        need(8 * ndim, f"the shape of {name!r}")
        shape = struct.unpack_from(f"<{ndim}Q", view, offset)
        offset += 8 * ndim
        dtype = DTYPES[code]
        count_elems = 1
        for dim in shape:
            count_elems *= dim
        nbytes = count_elems * dtype.itemsize
        if nbytes > len(view) - offset:
            raise CodecError(f"payload truncated in the data of {name!r}")
        array = np.frombuffer(view, dtype=dtype, count=count_elems, offset=offset)
        offset += nbytes
        array = array.reshape(shape).astype(dtype.newbyteorder("="), copy=True)
        if dtype.kind == "f" and not np.isfinite(array).all():
            raise CodecError(f"tensor {name!r} contains NaN or Inf")
        out[name] = array
    if offset != len(view):
        raise CodecError(f"{len(view) - offset} trailing bytes after the last tensor")
    if spec is not None:
        check_spec(out, spec)
    return out


def check_spec(tensors: Mapping[str, NDArray[np.generic]], spec: Sequence[TensorSpec]) -> None:
    """Raise :class:`CodecError` unless ``tensors`` matches ``spec`` exactly."""
    wanted = {s.name: s for s in spec}
    missing = sorted(set(wanted) - set(tensors))
    extra = sorted(set(tensors) - set(wanted))
    if missing or extra:
        raise CodecError(
            f"payload tensors do not match the model: missing {missing}, extra {extra}"
        )
    for name, s in wanted.items():
        array = tensors[name]
        if array.dtype != np.dtype(s.dtype):
            raise CodecError(f"tensor {name!r}: dtype {array.dtype}, expected {s.dtype}")
        if tuple(array.shape) != tuple(s.shape):
            raise CodecError(f"tensor {name!r}: shape {tuple(array.shape)}, expected {s.shape}")
        if s.bound is not None and array.size:
            worst = int(np.abs(array.astype(np.int64)).max())
            if worst > s.bound:
                raise CodecError(
                    f"tensor {name!r}: value magnitude {worst} exceeds bound {s.bound}"
                )
