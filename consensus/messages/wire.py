"""Canonical wire encoding: sorted-key JSON that :func:`decode` accepts only if it
re-encodes to the same bytes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

from consensus.messages.checkpoint import Checkpoint
from consensus.messages.common import MAX_LIST, MAX_MESSAGE_BYTES, MAX_SENDER, UINT256_MAX
from consensus.messages.ordering import Commit, CommitProof, Fetch, Prepare, PrePrepare
from consensus.messages.signing import Message
from consensus.messages.view_change import NewView, PreparedCert, ViewChange
from protocol.errors import ConsensusError

# --------------------------------------------------------------------------------------------
# Canonical wire encoding
# --------------------------------------------------------------------------------------------

WIRE_VERSION: Final = 1
_TAGS: Final[dict[type, str]] = {
    PrePrepare: "pre_prepare",
    Prepare: "prepare",
    Commit: "commit",
    Checkpoint: "checkpoint",
    ViewChange: "view_change",
    NewView: "new_view",
    CommitProof: "commit_proof",
    Fetch: "fetch",
}


def _hex(b: bytes) -> str:
    return "0x" + b.hex()


def _to_obj(msg: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"type": _TAGS[type(msg)], "sender": msg.sender, "sig": _hex(msg.signature)}
    if isinstance(msg, (PrePrepare, Prepare)):
        d.update(
            view=msg.view,
            seq=msg.seq,
            round=msg.round,
            attempt=msg.attempt,
            digest=_hex(msg.aggregate_digest),
            faulty=msg.faulty,
        )
    elif isinstance(msg, Commit):
        d.update(
            view=msg.view,
            round=msg.round,
            attempt=msg.attempt,
            digest=_hex(msg.aggregate_digest),
            faulty=msg.faulty,
        )
    elif isinstance(msg, Checkpoint):
        d.update(seq=msg.seq, stateDigest=_hex(msg.state_digest))
    elif isinstance(msg, ViewChange):
        d.update(
            newView=msg.new_view,
            stableSeq=msg.stable_seq,
            stateDigest=_hex(msg.state_digest),
            checkpoints=[_to_obj(c) for c in msg.checkpoint_proof],
            prepared=[
                {"prePrepare": _to_obj(c.pre_prepare), "prepares": [_to_obj(p) for p in c.prepares]}
                for c in msg.prepared
            ],
        )
    elif isinstance(msg, Fetch):
        d.update(fromSeq=msg.from_seq, toSeq=msg.to_seq)
    elif isinstance(msg, NewView):
        d.update(
            view=msg.view,
            viewChanges=[_to_obj(v) for v in msg.view_changes],
            prePrepares=[_to_obj(p) for p in msg.pre_prepares],
        )
    else:
        d.update(
            prePrepare=_to_obj(msg.pre_prepare),
            prepares=[_to_obj(p) for p in msg.prepares],
            commits=[_to_obj(c) for c in msg.commits],
        )
    return d


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode(msg: Message) -> bytes:
    """Canonical bytes of ``msg`` (compact sorted JSON, hex byte strings)."""
    obj = _to_obj(msg)
    obj["v"] = WIRE_VERSION
    return _dumps(obj)


class _Reader:
    """Strict field access over one decoded JSON object."""

    def __init__(self, obj: object, expected_type: str | None, keys: set[str]) -> None:
        if not isinstance(obj, dict):
            raise ConsensusError("message must be a JSON object")
        if expected_type is not None and obj.get("type") != expected_type:
            raise ConsensusError(f"expected a {expected_type} message, got {obj.get('type')!r}")
        if set(obj) != keys:
            raise ConsensusError(f"fields {sorted(obj)} differ from expected {sorted(keys)}")
        self.obj: dict[str, Any] = obj

    def uint(self, name: str, limit: int = UINT256_MAX) -> int:
        v = self.obj[name]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= limit:
            raise ConsensusError(f"{name} must be an integer in [0, {limit}]")
        return v

    def boolean(self, name: str) -> bool:
        v = self.obj[name]
        if not isinstance(v, bool):
            raise ConsensusError(f"{name} must be a boolean")
        return v

    def hexbytes(self, name: str, size: int) -> bytes:
        v = self.obj[name]
        if not isinstance(v, str) or len(v) != 2 + 2 * size or not v.startswith("0x"):
            raise ConsensusError(f"{name} must be 0x-prefixed hex of {size} bytes")
        body = v[2:]
        if body != body.lower():
            raise ConsensusError(f"{name} must be lowercase hex")
        try:
            return bytes.fromhex(body)
        except ValueError as exc:
            raise ConsensusError(f"{name} is not hex") from exc

    def items(self, name: str) -> list[Any]:
        v = self.obj[name]
        if not isinstance(v, list) or len(v) > MAX_LIST:
            raise ConsensusError(f"{name} must be a list of at most {MAX_LIST} items")
        return v


_COMMON = {"type", "sender", "sig"}
_SLOT_KEYS = _COMMON | {"view", "seq", "round", "attempt", "digest", "faulty"}

T = TypeVar("T")


def _slot(obj: object, tag: str, cls: Callable[..., T]) -> T:
    r = _Reader(obj, tag, _SLOT_KEYS)
    return cls(
        r.uint("view"),
        r.uint("seq"),
        r.uint("round"),
        r.uint("attempt"),
        r.hexbytes("digest", 32),
        r.boolean("faulty"),
        r.uint("sender", MAX_SENDER),
        r.hexbytes("sig", 65),
    )


def _pre_prepare(obj: object) -> PrePrepare:
    return _slot(obj, "pre_prepare", PrePrepare)


def _prepare(obj: object) -> Prepare:
    return _slot(obj, "prepare", Prepare)


def _commit(obj: object) -> Commit:
    r = _Reader(obj, "commit", _COMMON | {"view", "round", "attempt", "digest", "faulty"})
    return Commit(
        r.uint("round"),
        r.uint("attempt"),
        r.hexbytes("digest", 32),
        r.boolean("faulty"),
        r.uint("view"),
        r.uint("sender", MAX_SENDER),
        r.hexbytes("sig", 65),
    )


def _checkpoint(obj: object) -> Checkpoint:
    r = _Reader(obj, "checkpoint", _COMMON | {"seq", "stateDigest"})
    return Checkpoint(
        r.uint("seq"),
        r.hexbytes("stateDigest", 32),
        r.uint("sender", MAX_SENDER),
        r.hexbytes("sig", 65),
    )


def _prepared_cert(obj: object) -> PreparedCert:
    r = _Reader(obj, None, {"prePrepare", "prepares"})
    return PreparedCert(
        _pre_prepare(r.obj["prePrepare"]), tuple(map(_prepare, r.items("prepares")))
    )


def _view_change(obj: object) -> ViewChange:
    keys = _COMMON | {"newView", "stableSeq", "stateDigest", "checkpoints", "prepared"}
    r = _Reader(obj, "view_change", keys)
    return ViewChange(
        r.uint("newView"),
        r.uint("stableSeq"),
        r.hexbytes("stateDigest", 32),
        tuple(map(_checkpoint, r.items("checkpoints"))),
        tuple(map(_prepared_cert, r.items("prepared"))),
        r.uint("sender", MAX_SENDER),
        r.hexbytes("sig", 65),
    )


def _new_view(obj: object) -> NewView:
    r = _Reader(obj, "new_view", _COMMON | {"view", "viewChanges", "prePrepares"})
    return NewView(
        r.uint("view"),
        tuple(map(_view_change, r.items("viewChanges"))),
        tuple(map(_pre_prepare, r.items("prePrepares"))),
        r.uint("sender", MAX_SENDER),
        r.hexbytes("sig", 65),
    )


def _commit_proof(obj: object) -> CommitProof:
    r = _Reader(obj, "commit_proof", _COMMON | {"prePrepare", "prepares", "commits"})
    return CommitProof(
        _pre_prepare(r.obj["prePrepare"]),
        tuple(map(_prepare, r.items("prepares"))),
        tuple(map(_commit, r.items("commits"))),
        r.uint("sender", MAX_SENDER),
        r.hexbytes("sig", 65),
    )


def _fetch(obj: object) -> Fetch:
    r = _Reader(obj, "fetch", _COMMON | {"fromSeq", "toSeq"})
    return Fetch(
        r.uint("fromSeq"), r.uint("toSeq"), r.uint("sender", MAX_SENDER), r.hexbytes("sig", 65)
    )


_DECODERS: Final[dict[str, Callable[[object], Message]]] = {
    "pre_prepare": _pre_prepare,
    "prepare": _prepare,
    "commit": _commit,
    "checkpoint": _checkpoint,
    "view_change": _view_change,
    "new_view": _new_view,
    "commit_proof": _commit_proof,
    "fetch": _fetch,
}


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ConsensusError(f"duplicate JSON key {k!r}")
        out[k] = v
    return out


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")
MAX_DEPTH: Final = 16


def _check_depth(data: bytes) -> None:
    """Refuse deep nesting before json sees it (some CPython builds crash on it)."""
    depth = 0
    for b in _BRACKET.findall(_STRING.sub(b"", data)):
        depth += 1 if b in (b"[", b"{") else -1
        if depth > MAX_DEPTH:
            raise ConsensusError(f"JSON nested deeper than {MAX_DEPTH}")


def decode(data: bytes) -> Message:
    """Parse canonical bytes back into a message; anything else raises ConsensusError.

    Signatures are not checked here (that needs the committee): see :func:`verify_signer`.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise ConsensusError("encoded message must be bytes")
    if len(data) > MAX_MESSAGE_BYTES:
        raise ConsensusError(f"message larger than {MAX_MESSAGE_BYTES} bytes")
    _check_depth(bytes(data))
    try:
        # floats, NaN and Infinity parse but fail the integer checks below
        obj = json.loads(bytes(data).decode("ascii"), object_pairs_hook=_no_duplicate_keys)
    except ConsensusError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ConsensusError(f"not canonical JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ConsensusError("message must be a JSON object")
    if obj.get("v") != WIRE_VERSION or isinstance(obj.get("v"), bool):
        raise ConsensusError(f"unsupported wire version {obj.get('v')!r}")
    body = dict(obj)
    del body["v"]
    tag = body.get("type")
    decoder = _DECODERS.get(tag) if isinstance(tag, str) else None
    if decoder is None:
        raise ConsensusError(f"unknown message type {tag!r}")
    msg = decoder(body)
    if encode(msg) != bytes(data):
        raise ConsensusError("message is not in canonical form")
    return msg
