"""The two payload kinds of a round, on top of the canonical codec.

* a **client update**: ``meta/round`` (int64[1]) and one ``delta/<param>`` int32 tensor per
  model parameter, each coordinate a fixed-point delta with ``|q| <= value_bound``;
* a **global state**: ``meta/round`` (the round that produced it, 0 for the initial model),
  one ``model/<param>`` int32 tensor per parameter, and any server-optimiser state under
  ``opt/<key>``. The on-chain digest of a round is the SHA-256 of these bytes, so the
  optimiser state is bound into it and survives aggregator rotation. A task with adaptive
  clipping also carries the clip norm of the next round as ``dp/clip_norm`` (float64[1]);
  its clients' plaintext updates then carry their privatised clip bit as ``meta/clip_bit``
  (int32[1], 0 or 1). A task with a stopping rule (``aggregators.stopping``) carries its
  counter of consecutive quiet rounds as ``meta/stop_count`` (int64[1]).

Rules see flat vectors; :class:`ModelLayout` maps between named tensors and the flat order
(the model's ``state_dict`` order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from protocol.codec import TensorSpec, check_spec, decode_tensors, encode_tensors
from protocol.errors import CodecError
from protocol.fixedpoint import INT32_MAX, NumericFormat

ROUND_KEY = "meta/round"
CLIP_BIT_KEY = "meta/clip_bit"
CLIP_NORM_KEY = "dp/clip_norm"
STOP_COUNT_KEY = "meta/stop_count"
MODEL_PREFIX = "model/"
DELTA_PREFIX = "delta/"
OPT_PREFIX = "opt/"


@dataclass(frozen=True)
class ModelLayout:
    """Parameter names and shapes, in the flat order rules use."""

    params: tuple[tuple[str, tuple[int, ...]], ...]

    @classmethod
    def from_spec(cls, spec: Sequence[tuple[str, Sequence[int]]]) -> ModelLayout:
        return cls(tuple((str(n), tuple(int(d) for d in s)) for n, s in spec))

    @property
    def size(self) -> int:
        return sum(int(np.prod(shape, dtype=np.int64)) for _, shape in self.params)

    def flatten(self, named: Mapping[str, NDArray[Any]], prefix: str = "") -> NDArray[Any]:
        """Concatenate ``named[prefix + name]`` in layout order into one flat vector."""
        return np.concatenate([np.asarray(named[prefix + n]).reshape(-1) for n, _ in self.params])

    def unflatten(self, flat: NDArray[Any], prefix: str = "") -> dict[str, NDArray[Any]]:
        """Split a flat vector back into named tensors of the layout's shapes."""
        if flat.shape != (self.size,):
            raise CodecError(f"flat vector has shape {flat.shape}, expected ({self.size},)")
        out: dict[str, NDArray[Any]] = {}
        offset = 0
        for name, shape in self.params:
            n = int(np.prod(shape, dtype=np.int64))
            out[prefix + name] = flat[offset : offset + n].reshape(shape)
            offset += n
        return out

    def to_json(self) -> list[list[Any]]:
        return [[n, list(s)] for n, s in self.params]


@dataclass(frozen=True)
class GlobalState:
    """A published global model: fixed-point params (flat int64) plus optimiser state, and
    (adaptive clipping only) the clip norm clients use in the next round."""

    round: int
    params: NDArray[np.int64]
    opt_state: dict[str, NDArray[Any]] = field(default_factory=dict)
    clip_norm: float | None = None
    #: stopping rule only: consecutive rounds whose model delta stayed below the threshold
    stop_count: int | None = None


def encode_global_state(layout: ModelLayout, state: GlobalState) -> bytes:
    """Canonical bytes of a global state (params must fit int32)."""
    params = np.asarray(state.params, dtype=np.int64)
    if params.size and int(np.abs(params).max()) > INT32_MAX:
        raise CodecError("global parameters overflow the int32 fixed-point range")
    tensors: dict[str, NDArray[Any]] = {ROUND_KEY: np.array([state.round], dtype=np.int64)}
    for name, arr in layout.unflatten(params.astype(np.int32), MODEL_PREFIX).items():
        tensors[name] = arr
    for key, arr in state.opt_state.items():
        tensors[OPT_PREFIX + key] = np.asarray(arr)
    if state.clip_norm is not None:
        tensors[CLIP_NORM_KEY] = np.array([_positive(state.clip_norm)], dtype=np.float64)
    if state.stop_count is not None:
        if state.stop_count < 0:
            raise CodecError(f"stop count {state.stop_count} must be >= 0")
        tensors[STOP_COUNT_KEY] = np.array([state.stop_count], dtype=np.int64)
    return encode_tensors(tensors)


def _positive(value: float) -> float:
    out = float(value)
    if not (np.isfinite(out) and out > 0):
        raise CodecError(f"clip norm {value!r} must be a finite number > 0")
    return out


def decode_global_state(layout: ModelLayout, data: bytes) -> GlobalState:
    """Decode and check a global state against the model layout."""
    tensors = decode_tensors(data)
    model = {k: v for k, v in tensors.items() if k.startswith(MODEL_PREFIX)}
    spec = [TensorSpec(MODEL_PREFIX + n, "int32", s) for n, s in layout.params]
    check_spec(model, spec)
    round_arr = tensors.get(ROUND_KEY)
    if round_arr is None or round_arr.dtype != np.int64 or round_arr.shape != (1,):
        raise CodecError(f"global state lacks an int64[1] {ROUND_KEY!r}")
    unknown = set(tensors) - set(model) - {ROUND_KEY, CLIP_NORM_KEY, STOP_COUNT_KEY}
    unknown = {k for k in unknown if not k.startswith(OPT_PREFIX)}
    if unknown:
        raise CodecError(f"global state has unexpected tensors {sorted(unknown)}")
    opt = {k[len(OPT_PREFIX) :]: v for k, v in tensors.items() if k.startswith(OPT_PREFIX)}
    params = layout.flatten(model, MODEL_PREFIX).astype(np.int64)
    clip = tensors.get(CLIP_NORM_KEY)
    clip_norm = None
    if clip is not None:
        if clip.dtype != np.float64 or clip.shape != (1,):
            raise CodecError(f"{CLIP_NORM_KEY!r} must be float64[1]")
        clip_norm = _positive(float(clip[0]))
    stop = tensors.get(STOP_COUNT_KEY)
    stop_count = None
    if stop is not None:
        if stop.dtype != np.int64 or stop.shape != (1,) or int(stop[0]) < 0:
            raise CodecError(f"{STOP_COUNT_KEY!r} must be int64[1], >= 0")
        stop_count = int(stop[0])
    return GlobalState(
        round=int(round_arr[0]),
        params=params,
        opt_state=opt,
        clip_norm=clip_norm,
        stop_count=stop_count,
    )


def update_spec(
    layout: ModelLayout, fmt: NumericFormat, clip_bit: bool = False
) -> list[TensorSpec]:
    """The exact tensors a client update must contain (``meta/clip_bit`` with adaptive
    clipping)."""
    spec = [TensorSpec(ROUND_KEY, "int64", (1,))]
    if clip_bit:
        spec.append(TensorSpec(CLIP_BIT_KEY, "int32", (1,), 1))
    spec += [TensorSpec(DELTA_PREFIX + n, "int32", s, fmt.value_bound) for n, s in layout.params]
    return spec


def encode_update(
    layout: ModelLayout,
    round_: int,
    delta_q: NDArray[np.integer[Any]],
    clip_bit: int | None = None,
) -> bytes:
    """Canonical bytes of a client update (flat fixed-point delta, optional clip bit)."""
    tensors: dict[str, NDArray[Any]] = {ROUND_KEY: np.array([round_], dtype=np.int64)}
    if clip_bit is not None:
        tensors[CLIP_BIT_KEY] = np.array([int(clip_bit)], dtype=np.int32)
    tensors.update(layout.unflatten(np.asarray(delta_q).astype(np.int32), DELTA_PREFIX))
    return encode_tensors(tensors)


def update_max_bytes(layout: ModelLayout) -> int:
    """The largest plaintext update payload a layout allows (decoders refuse more)."""
    return 4096 + 8 * len(layout.params) * 16 + 4 * layout.size + 512 * len(layout.params)


def decode_update(
    layout: ModelLayout, fmt: NumericFormat, round_: int, data: bytes
) -> NDArray[np.int32]:
    """Decode a client update for ``round_``; refuse anything not exactly valid."""
    return decode_update_bit(layout, fmt, round_, data, clip_bit=False)[0]


def decode_update_bit(
    layout: ModelLayout, fmt: NumericFormat, round_: int, data: bytes, clip_bit: bool
) -> tuple[NDArray[np.int32], int | None]:
    """Decode a client update and its clip bit (None without ``clip_bit``); refuse anything
    not exactly valid, including a clip bit other than 0 or 1."""
    tensors = decode_tensors(
        data, update_spec(layout, fmt, clip_bit), max_bytes=update_max_bytes(layout)
    )
    got_round = int(tensors[ROUND_KEY][0])
    if got_round != round_:
        raise CodecError(f"update is for round {got_round}, expected round {round_}")
    bit = None
    if clip_bit:
        bit = int(tensors[CLIP_BIT_KEY][0])
        if bit not in (0, 1):
            raise CodecError(f"clip bit {bit}: must be 0 or 1")
    return layout.flatten(tensors, DELTA_PREFIX).astype(np.int32, copy=False), bit
