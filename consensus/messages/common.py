"""Shared by every phase: EIP-712 type definitions and struct hashing, the domain and the
dispute instance, limits, and how nested messages are bound (:func:`item_hash`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

from eth_utils.address import is_address, to_checksum_address
from eth_utils.crypto import keccak

from protocol.eip712 import domain_separator
from protocol.errors import ConsensusError

if TYPE_CHECKING:
    from consensus.messages.signing import Message


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


def item_hash(msg: Message) -> bytes:
    """``keccak256(structHash ‖ uint256(sender) ‖ signature)``: how nested messages are bound."""
    return keccak(msg.struct_hash() + _enc_uint(msg.sender) + msg.signature)
