"""PBFT messages for dispute votes: EIP-712 signing and a canonical wire encoding.

Every message is a frozen dataclass whose signed content is an EIP-712 struct under the task's
domain ``{name: "FedChainTask", version: "1", chainId, verifyingContract: task}``. The COMMIT
message signs exactly ``DisputeVerdict(uint256 round,uint256 attempt,bytes32 aggregateDigest,
bool faulty,uint256 view)`` so that a quorum of commits is a certificate the task contract can
check with ``ecrecover``. Composite messages (view-change, new-view, commit proofs) sign a
fixed-size struct holding a hash of their nested, individually signed messages; the exact
byte layout is in ``docs/pbft.md``.

Signing goes through ``eth_account``: the ``SignableMessage`` we build is byte-for-byte what
``eth_account.messages.encode_typed_data`` returns for :func:`typed_data` (the tests check it),
only computed without the generic JSON-schema walk, and it is signed with
``LocalAccount.sign_message`` and checked with ``Account.recover_message``. Both are memoised
(signing is deterministic, RFC 6979; recovery is a pure function), because the pure-Python
secp256k1 backend costs milliseconds per operation.

The wire format is canonical JSON (sorted keys, no whitespace, lowercase ``0x`` hex for byte
strings, integers as JSON numbers). :func:`decode` accepts only input that re-encodes to the
same bytes, so there is exactly one encoding of each message. Pickle is never used.
"""

from __future__ import annotations

import functools
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final, TypeAlias, TypeVar

from eth_account import Account
from eth_account.messages import SignableMessage
from eth_account.signers.local import LocalAccount
from eth_utils.address import is_address, to_checksum_address
from eth_utils.crypto import keccak

from protocol.eip712 import domain_separator
from protocol.errors import ConsensusError

__all__ = [
    "DOMAIN_NAME",
    "DOMAIN_VERSION",
    "EIP712_TYPES",
    "GENESIS_STATE_DIGEST",
    "MAX_MESSAGE_BYTES",
    "Checkpoint",
    "Commit",
    "CommitProof",
    "Domain",
    "Fetch",
    "Instance",
    "InstanceKey",
    "Message",
    "NewView",
    "PrePrepare",
    "Prepare",
    "PreparedCert",
    "ViewChange",
    "check_signature_format",
    "checksum_address",
    "decode",
    "encode",
    "item_hash",
    "recover_signer",
    "sign",
    "signable",
    "signing_digest",
    "struct_hash",
    "typed_data",
    "verify_signer",
]

DOMAIN_NAME: Final = "FedChainTask"
DOMAIN_VERSION: Final = "1"
UINT256_MAX: Final = (1 << 256) - 1
SECP256K1_N: Final = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024
MAX_LIST: Final = 1024
MAX_SENDER: Final = 1 << 16
GENESIS_STATE_DIGEST: Final = b"\x00" * 32

# --------------------------------------------------------------------------------------------
# EIP-712 type definitions (the single source of truth; docs/pbft.md repeats them)
# --------------------------------------------------------------------------------------------

EIP712_TYPES: Final[dict[str, list[tuple[str, str]]]] = {
    "EIP712Domain": [
        ("name", "string"),
        ("version", "string"),
        ("chainId", "uint256"),
        ("verifyingContract", "address"),
    ],
    "DisputeVerdict": [
        ("round", "uint256"),
        ("attempt", "uint256"),
        ("aggregateDigest", "bytes32"),
        ("faulty", "bool"),
        ("view", "uint256"),
    ],
    "PrePrepare": [
        ("view", "uint256"),
        ("seq", "uint256"),
        ("round", "uint256"),
        ("attempt", "uint256"),
        ("aggregateDigest", "bytes32"),
        ("faulty", "bool"),
    ],
    "Prepare": [
        ("view", "uint256"),
        ("seq", "uint256"),
        ("round", "uint256"),
        ("attempt", "uint256"),
        ("aggregateDigest", "bytes32"),
        ("faulty", "bool"),
    ],
    "Checkpoint": [("seq", "uint256"), ("stateDigest", "bytes32")],
    "ViewChange": [
        ("newView", "uint256"),
        ("stableSeq", "uint256"),
        ("stateDigest", "bytes32"),
        ("proofHash", "bytes32"),
    ],
    "NewView": [
        ("view", "uint256"),
        ("viewChangesHash", "bytes32"),
        ("prePreparesHash", "bytes32"),
    ],
    "CommitProof": [("seq", "uint256"), ("view", "uint256"), ("proofHash", "bytes32")],
    "Fetch": [("fromSeq", "uint256"), ("toSeq", "uint256")],
}


def _type_string(name: str) -> str:
    fields = ",".join(f"{typ} {fname}" for fname, typ in EIP712_TYPES[name])
    return f"{name}({fields})"


TYPE_STRINGS: Final[dict[str, str]] = {name: _type_string(name) for name in EIP712_TYPES}
TYPE_HASHES: Final[dict[str, bytes]] = {name: keccak(text=s) for name, s in TYPE_STRINGS.items()}


def _enc_uint(x: int) -> bytes:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= UINT256_MAX:
        raise ConsensusError(f"not a uint256: {x!r}")
    return x.to_bytes(32, "big")


def _enc_field(typ: str, value: object) -> bytes:
    if typ == "uint256":
        return _enc_uint(value)  # type: ignore[arg-type]
    if typ == "bytes32":
        if not isinstance(value, bytes) or len(value) != 32:
            raise ConsensusError(f"not a bytes32: {value!r}")
        return value
    if typ == "bool":
        if not isinstance(value, bool):
            raise ConsensusError(f"not a bool: {value!r}")
        return _enc_uint(int(value))
    if typ == "address":
        return b"\x00" * 12 + bytes.fromhex(str(value)[2:])
    if typ == "string":
        return keccak(text=str(value))
    raise ConsensusError(f"unsupported EIP-712 field type {typ}")  # pragma: no cover


def struct_hash(type_name: str, values: Sequence[object]) -> bytes:
    """``keccak256(abi.encode(TYPEHASH, v1, v2, ...))`` for one of :data:`EIP712_TYPES`."""
    spec = EIP712_TYPES[type_name]
    if len(values) != len(spec):
        raise ConsensusError(f"{type_name} takes {len(spec)} fields, got {len(values)}")
    body = b"".join(_enc_field(typ, v) for (_, typ), v in zip(spec, values, strict=True))
    return keccak(TYPE_HASHES[type_name] + body)


# --------------------------------------------------------------------------------------------
# Domain and dispute instance
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _checksum_str(address: str) -> str | None:
    if not is_address(address) or len(address) != 42:
        return None
    return str(to_checksum_address(address))


def _checksum(address: object, what: str) -> str:
    """EIP-55 form of a 20-byte hex address (memoised: committees repeat constantly)."""
    out = _checksum_str(address) if isinstance(address, str) else None
    if out is None:
        raise ConsensusError(f"{what} is not a 20-byte hex address: {address!r}")
    return out


def checksum_address(address: object) -> str:
    return _checksum(address, "address")


@dataclass(frozen=True)
class Domain:
    """The EIP-712 domain of one FL task: its chain id and the task contract's address."""

    chain_id: int
    verifying_contract: str
    name: str = DOMAIN_NAME
    version: str = DOMAIN_VERSION
    separator: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _enc_uint(self.chain_id)
        object.__setattr__(
            self, "verifying_contract", _checksum(self.verifying_contract, "verifyingContract")
        )
        sep = domain_separator(self.chain_id, self.verifying_contract, self.name, self.version)
        object.__setattr__(self, "separator", sep)

    def typed_data_domain(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "chainId": self.chain_id,
            "verifyingContract": self.verifying_contract,
        }


InstanceKey: TypeAlias = tuple[int, int, bytes]
"""(round, attempt, aggregateDigest): identifies a dispute within one task's domain."""


@dataclass(frozen=True)
class Instance:
    """A dispute instance: task address, chain id, round, attempt and disputed aggregate digest."""

    task: str
    chain_id: int
    round: int
    attempt: int
    aggregate_digest: bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", _checksum(self.task, "task"))
        _enc_uint(self.chain_id)
        _enc_uint(self.round)
        _enc_uint(self.attempt)
        _enc_field("bytes32", self.aggregate_digest)

    @property
    def key(self) -> InstanceKey:
        return (self.round, self.attempt, self.aggregate_digest)

    @classmethod
    def in_domain(cls, domain: Domain, key: InstanceKey) -> Instance:
        return cls(domain.verifying_contract, domain.chain_id, key[0], key[1], key[2])

    def matches(self, domain: Domain) -> bool:
        return self.task == domain.verifying_contract and self.chain_id == domain.chain_id


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------

_R = TypeVar("_R")


def _memo(method: Callable[[Any], _R]) -> Callable[[Any], _R]:
    """Cache a pure method's result on a frozen dataclass instance (written past __setattr__)."""
    slot = "_memo_" + method.__name__

    def wrapper(self: Any) -> _R:
        d = self.__dict__
        if slot not in d:
            d[slot] = method(self)
        return d[slot]  # type: ignore[no-any-return]

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


@dataclass(frozen=True)
class _SlotVote:
    """Fields and hashing shared by the two per-slot messages (pre-prepare and prepare)."""

    view: int
    seq: int
    round: int
    attempt: int
    aggregate_digest: bytes
    faulty: bool
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = ""

    @property
    def key(self) -> InstanceKey:
        return (self.round, self.attempt, self.aggregate_digest)

    @property
    def content(self) -> tuple[int, int, InstanceKey, bool]:
        return (self.view, self.seq, self.key, self.faulty)

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash(
            self.TYPE,
            (self.view, self.seq, self.round, self.attempt, self.aggregate_digest, self.faulty),
        )


@dataclass(frozen=True)
class PrePrepare(_SlotVote):
    """Primary of ``view`` proposes verdict ``faulty`` for the dispute at sequence ``seq``."""

    TYPE: ClassVar[str] = "PrePrepare"


@dataclass(frozen=True)
class Prepare(_SlotVote):
    """A replica accepts the pre-prepare for ``(view, seq)`` with this verdict."""

    TYPE: ClassVar[str] = "Prepare"


@dataclass(frozen=True)
class Commit:
    """A replica saw a prepared certificate in ``view``; signs the on-chain ``DisputeVerdict``.

    The sequence number is deliberately not signed (the contract's struct has none): within a
    view a correct replica binds an instance to a single sequence number, so the commit is
    matched to its slot by ``(view, instance)``.
    """

    round: int
    attempt: int
    aggregate_digest: bytes
    faulty: bool
    view: int
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "DisputeVerdict"

    @property
    def key(self) -> InstanceKey:
        return (self.round, self.attempt, self.aggregate_digest)

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash(
            "DisputeVerdict",
            (self.round, self.attempt, self.aggregate_digest, self.faulty, self.view),
        )


@dataclass(frozen=True)
class Checkpoint:
    """The replica's state digest after executing sequence number ``seq``."""

    seq: int
    state_digest: bytes
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "Checkpoint"

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash("Checkpoint", (self.seq, self.state_digest))


@dataclass(frozen=True)
class PreparedCert:
    """A pre-prepare plus ``n - f`` matching prepares from distinct replicas (not a message)."""

    pre_prepare: PrePrepare
    prepares: tuple[Prepare, ...]

    @property
    def view(self) -> int:
        return self.pre_prepare.view

    @property
    def seq(self) -> int:
        return self.pre_prepare.seq

    def cert_hash(self) -> bytes:
        return keccak(item_hash(self.pre_prepare) + b"".join(item_hash(p) for p in self.prepares))


@dataclass(frozen=True)
class ViewChange:
    """Replica ``sender`` moves to ``new_view``, with its stable checkpoint and prepared certs."""

    new_view: int
    stable_seq: int
    state_digest: bytes
    checkpoint_proof: tuple[Checkpoint, ...]
    prepared: tuple[PreparedCert, ...]
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "ViewChange"

    def proof_hash(self) -> bytes:
        checkpoints = keccak(b"".join(item_hash(c) for c in self.checkpoint_proof))
        prepared = keccak(b"".join(c.cert_hash() for c in self.prepared))
        return keccak(checkpoints + prepared)

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash(
            "ViewChange", (self.new_view, self.stable_seq, self.state_digest, self.proof_hash())
        )


@dataclass(frozen=True)
class NewView:
    """The primary of ``view`` installs it: ``n - f`` view-changes and the re-issued proposals."""

    view: int
    view_changes: tuple[ViewChange, ...]
    pre_prepares: tuple[PrePrepare, ...]
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "NewView"

    @_memo
    def struct_hash(self) -> bytes:
        vcs = keccak(b"".join(item_hash(v) for v in self.view_changes))
        pps = keccak(b"".join(item_hash(p) for p in self.pre_prepares))
        return struct_hash("NewView", (self.view, vcs, pps))


@dataclass(frozen=True)
class CommitProof:
    """Self-contained proof that ``pre_prepare`` committed: its prepares and ``n - f`` commits.

    Sent to a lagging replica so it can execute a sequence number it missed (state transfer
    for entries above the stable checkpoint) and learn the decision with its certificate.
    """

    pre_prepare: PrePrepare
    prepares: tuple[Prepare, ...]
    commits: tuple[Commit, ...]
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "CommitProof"

    @property
    def seq(self) -> int:
        return self.pre_prepare.seq

    @property
    def view(self) -> int:
        return self.pre_prepare.view

    def proof_hash(self) -> bytes:
        prepares = keccak(b"".join(item_hash(p) for p in self.prepares))
        commits = keccak(b"".join(item_hash(c) for c in self.commits))
        return keccak(item_hash(self.pre_prepare) + prepares + commits)

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash("CommitProof", (self.seq, self.view, self.proof_hash()))


@dataclass(frozen=True)
class Fetch:
    """A replica that fast-forwarded over ``[from_seq, to_seq]`` asks for those commit proofs."""

    from_seq: int
    to_seq: int
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "Fetch"

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash("Fetch", (self.from_seq, self.to_seq))


Message: TypeAlias = (
    PrePrepare | Prepare | Commit | Checkpoint | ViewChange | NewView | CommitProof | Fetch
)
SignedT = TypeVar("SignedT", bound=Message)


def item_hash(msg: Message) -> bytes:
    """``keccak256(structHash ‖ uint256(sender) ‖ signature)``: how nested messages are bound."""
    return keccak(msg.struct_hash() + _enc_uint(msg.sender) + msg.signature)


# --------------------------------------------------------------------------------------------
# Signing and recovery
# --------------------------------------------------------------------------------------------

_CACHE_SIZE: Final = 1 << 16
_RECOVER_CACHE: OrderedDict[tuple[bytes, bytes, bytes], str] = OrderedDict()
_SIGN_CACHE: OrderedDict[tuple[str, bytes, bytes], bytes] = OrderedDict()


def _cache_put(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    cache[key] = value
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)


def signable(domain: Domain, structhash: bytes) -> SignableMessage:
    """The EIP-712 ``SignableMessage`` (``0x19 0x01 ‖ domainSeparator ‖ structHash``)."""
    return SignableMessage(version=b"\x01", header=domain.separator, body=structhash)


def signing_digest(msg: Message, domain: Domain) -> bytes:
    """``keccak256(0x1901 ‖ domainSeparator ‖ structHash(msg))``: the hash ecrecover checks."""
    return keccak(b"\x19\x01" + domain.separator + msg.struct_hash())


def typed_data(msg: Message, domain: Domain) -> dict[str, Any]:
    """The full EIP-712 typed-data document of ``msg`` (for ``encode_typed_data``, wallets)."""
    primary = msg.TYPE
    values: dict[str, Any]
    if isinstance(msg, (PrePrepare, Prepare)):
        values = {
            "view": msg.view,
            "seq": msg.seq,
            "round": msg.round,
            "attempt": msg.attempt,
            "aggregateDigest": msg.aggregate_digest,
            "faulty": msg.faulty,
        }
    elif isinstance(msg, Commit):
        values = {
            "round": msg.round,
            "attempt": msg.attempt,
            "aggregateDigest": msg.aggregate_digest,
            "faulty": msg.faulty,
            "view": msg.view,
        }
    elif isinstance(msg, Checkpoint):
        values = {"seq": msg.seq, "stateDigest": msg.state_digest}
    elif isinstance(msg, ViewChange):
        values = {
            "newView": msg.new_view,
            "stableSeq": msg.stable_seq,
            "stateDigest": msg.state_digest,
            "proofHash": msg.proof_hash(),
        }
    elif isinstance(msg, Fetch):
        values = {"fromSeq": msg.from_seq, "toSeq": msg.to_seq}
    elif isinstance(msg, NewView):
        values = {
            "view": msg.view,
            "viewChangesHash": keccak(b"".join(item_hash(v) for v in msg.view_changes)),
            "prePreparesHash": keccak(b"".join(item_hash(p) for p in msg.pre_prepares)),
        }
    else:
        values = {"seq": msg.seq, "view": msg.view, "proofHash": msg.proof_hash()}
    return {
        "types": {
            "EIP712Domain": [{"name": n, "type": t} for n, t in EIP712_TYPES["EIP712Domain"]],
            primary: [{"name": n, "type": t} for n, t in EIP712_TYPES[primary]],
        },
        "primaryType": primary,
        "domain": domain.typed_data_domain(),
        "message": values,
    }


def check_signature_format(sig: bytes) -> None:
    """Reject anything the contract's ecrecover path would (length, v, r/s range, high s)."""
    if not isinstance(sig, bytes) or len(sig) != 65:
        raise ConsensusError("signature must be 65 bytes r ‖ s ‖ v")
    r = int.from_bytes(sig[0:32], "big")
    s = int.from_bytes(sig[32:64], "big")
    v = sig[64]
    if v not in (27, 28):
        raise ConsensusError(f"signature v must be 27 or 28, got {v}")
    if not (0 < r < SECP256K1_N and 0 < s <= SECP256K1_N // 2):
        raise ConsensusError("signature r/s out of range or s not in the lower half order")


def recover_signer(domain: Domain, structhash: bytes, sig: bytes) -> str:
    """Checksummed address that signed ``structhash`` under ``domain`` (memoised)."""
    check_signature_format(sig)
    key = (domain.separator, structhash, sig)
    hit = _RECOVER_CACHE.get(key)
    if hit is not None:
        _RECOVER_CACHE.move_to_end(key)
        return hit
    try:
        addr = str(Account.recover_message(signable(domain, structhash), signature=sig))
    except Exception as exc:  # eth_keys raises several types for invalid points
        raise ConsensusError(f"signature does not recover: {exc}") from exc
    _cache_put(_RECOVER_CACHE, key, addr)
    return addr


def sign_struct(account: LocalAccount, domain: Domain, structhash: bytes) -> bytes:
    """65-byte signature of ``structhash`` under ``domain`` (deterministic, memoised)."""
    key = (account.address, domain.separator, structhash)
    hit = _SIGN_CACHE.get(key)
    if hit is None:
        hit = bytes(account.sign_message(signable(domain, structhash)).signature)
        _cache_put(_SIGN_CACHE, key, hit)
    return hit


def sign(msg: SignedT, account: LocalAccount, domain: Domain) -> SignedT:
    """Return ``msg`` with its ``signature`` set by ``account``."""
    sh = msg.struct_hash()
    signed = replace(msg, signature=sign_struct(account, domain, sh))
    signed.__dict__["_memo_struct_hash"] = sh  # the signature is not part of the struct
    return signed


def verify_signer(msg: Message, committee: Sequence[str], domain: Domain) -> None:
    """The recovered signer must be ``committee[msg.sender]`` (raises ConsensusError)."""
    if not 0 <= msg.sender < len(committee):
        raise ConsensusError(f"sender index {msg.sender} outside the committee")
    signer = recover_signer(domain, msg.struct_hash(), msg.signature)
    if signer != committee[msg.sender]:
        raise ConsensusError(f"{type(msg).__name__} signed by {signer}, not by its sender")


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
