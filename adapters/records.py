"""Signed client records: what a client signs so that anyone can register it for it.

A client signs an EIP-712 ``Update(uint256 round, bytes32 digest, uint64 numSamples,
bytes32 chunkRoot)`` record (``chunkRoot`` is U_i, the :mod:`protocol.merkle` chunk root of
its quantised update, what the fault-proof games open its chunks against) under its task's
domain (:mod:`protocol.eip712`); anyone relays records in batches
(``FedChainTask.submitUpdates``), and the contract recovers each signer, checks it is the
registered client the record names (by index), allows one update per client per round and
extends the round's accumulator instead of storing the update. This module is the Python
mirror of ``contracts/lib/ClientRecords.sol``: struct hashes, signing, the accumulator and
the packed entries of the ``UpdatesRegistered`` event, so a node can rebuild a round's
ordered update list from events and check it against the on-chain accumulator.

A second record kind reuses the same pieces: a type hash, a struct hash, a signed form with
the client's index and its compact signature, and an accumulator extension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from eth_abi.abi import encode as abi_encode
from eth_account.signers.local import LocalAccount
from eth_typing import Hash32
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from protocol.eip712 import typed_data_digest
from protocol.errors import ChainError, ConfigError

UPDATE_TYPEHASH: Final = keccak(
    text="Update(uint256 round,bytes32 digest,uint64 numSamples,bytes32 chunkRoot)"
)
#: Bytes per update in ``UpdatesRegistered.entries``: client (20) ‖ digest (32) ‖
#: numSamples (8) ‖ chunkRoot (32).
UPDATE_ENTRY_BYTES: Final = 92
#: The chunk root of a record made without one (tests registering digests of no payload):
#: no vector has it, so honest aggregators exclude such an update like any whose U_i does
#: not match its payload.
NO_CHUNK_ROOT: Final = bytes(32)
ACCUMULATOR_BITS: Final = 224
_ACC_MASK: Final = (1 << ACCUMULATOR_BITS) - 1
_HALF_ORDER: Final = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0


def batch_gas_limit(records: int) -> int:
    """A gas limit no ``submitUpdates`` batch of ``records`` records exceeds: at most 10k per
    record and 100k per transaction are measured (``scripts/bench_gas.py``), so 15k and 150k
    leave room. Sending with it skips ``eth_estimateGas``, which on the embedded chain is a
    second full execution of the batch (a revert is still typed: the failed receipt is
    replayed)."""
    return 150_000 + 15_000 * records


class AccumulatorMismatch(ChainError):
    """A round's update list rebuilt from events does not match the on-chain accumulator."""


@dataclass(frozen=True)
class UpdateEntry:
    """One registered update as the contract committed it (index = registration order)."""

    index: int
    client: str
    digest: bytes
    num_samples: int
    chunk_root: bytes = NO_CHUNK_ROOT


@dataclass(frozen=True)
class SignedUpdate:
    """A client's signed update record: ``client`` is its registration index, ``r`` and
    ``vs`` its EIP-2098 compact signature over :func:`update_record_digest` (the round is
    the batch's argument on-chain)."""

    client: int
    round: int
    digest: bytes
    num_samples: int
    r: bytes
    vs: bytes
    chunk_root: bytes = NO_CHUNK_ROOT

    def packed(self) -> bytes:
        """The record as ``submitUpdates`` takes it (``ClientRecords.UPDATE_RECORD_BYTES``):
        client index (4, big-endian) ‖ numSamples (8, big-endian) ‖ digest ‖ chunkRoot ‖
        r ‖ vs."""
        return (
            self.client.to_bytes(4, "big")
            + self.num_samples.to_bytes(8, "big")
            + self.digest
            + self.chunk_root
            + self.r
            + self.vs
        )


def update_struct_hash(
    round_: int, digest: bytes, num_samples: int, chunk_root: bytes = NO_CHUNK_ROOT
) -> bytes:
    """EIP-712 struct hash of an update record (``ClientRecords.updateStructHash``)."""
    if len(digest) != 32 or len(chunk_root) != 32:
        raise ConfigError(
            f"digest and chunk root must be 32 bytes, got {len(digest)} and {len(chunk_root)}"
        )
    return keccak(
        abi_encode(
            ["bytes32", "uint256", "bytes32", "uint64", "bytes32"],
            [UPDATE_TYPEHASH, round_, bytes(digest), num_samples, bytes(chunk_root)],
        )
    )


def update_record_digest(
    separator: bytes,
    round_: int,
    digest: bytes,
    num_samples: int,
    chunk_root: bytes = NO_CHUNK_ROOT,
) -> bytes:
    """What a client signs for its update of ``round_`` (``updateRecordDigest`` on-chain)."""
    return typed_data_digest(separator, update_struct_hash(round_, digest, num_samples, chunk_root))


def compact_signature(account: LocalAccount, message_digest: bytes) -> tuple[bytes, bytes]:
    """``account``'s EIP-2098 signature ``(r, vs)`` of ``message_digest`` (low s)."""
    signed = account.unsafe_sign_hash(Hash32(message_digest))
    s, v = int(signed.s), int(signed.v)
    if s > _HALF_ORDER:  # eth-keys signs canonical low-s; the contract refuses anything else
        raise ValueError("signer produced a high-s signature")
    vs = s | ((v - 27) << 255)
    return int(signed.r).to_bytes(32, "big"), vs.to_bytes(32, "big")


def sign_update(
    account: LocalAccount,
    separator: bytes,
    client_index: int,
    round_: int,
    digest: bytes,
    num_samples: int,
    chunk_root: bytes = NO_CHUNK_ROOT,
) -> SignedUpdate:
    """The signed update record of ``account`` (registered as client ``client_index``) for
    ``round_`` under the domain ``separator``; ``chunk_root`` is U_i."""
    r, vs = compact_signature(
        account, update_record_digest(separator, round_, digest, num_samples, chunk_root)
    )
    return SignedUpdate(client_index, round_, bytes(digest), num_samples, r, vs, bytes(chunk_root))


def extend_updates(
    acc: int, client: str, digest: bytes, num_samples: int, chunk_root: bytes = NO_CHUNK_ROOT
) -> int:
    """The accumulator after one more update (``ClientRecords.extendUpdates``)."""
    encoded = abi_encode(
        ["uint224", "address", "bytes32", "uint64", "bytes32"],
        [acc, client, bytes(digest), num_samples, bytes(chunk_root)],
    )
    return int.from_bytes(keccak(encoded), "big") & _ACC_MASK


def records_accumulator(entries: list[UpdateEntry]) -> int:
    """The accumulator over a whole ordered update list from 0, shifted left 32 bits and
    ORed with the list's length: what ``FaultGames.claimHook`` returns for a claim listing
    these records, and what ``submitAggregateWithClaim`` compares with the task's own."""
    acc = 0
    for e in entries:
        acc = extend_updates(acc, e.client, e.digest, e.num_samples, e.chunk_root)
    return (acc << 32) | len(entries)


def decode_update_entries(first_index: int, entries: bytes) -> list[UpdateEntry]:
    """The updates packed in one ``UpdatesRegistered`` event."""
    if len(entries) % UPDATE_ENTRY_BYTES:
        raise AccumulatorMismatch(
            f"UpdatesRegistered entries of {len(entries)} bytes: not a multiple of "
            f"{UPDATE_ENTRY_BYTES}"
        )
    out = []
    for k in range(len(entries) // UPDATE_ENTRY_BYTES):
        e = entries[k * UPDATE_ENTRY_BYTES : (k + 1) * UPDATE_ENTRY_BYTES]
        out.append(
            UpdateEntry(
                first_index + k,
                to_checksum_address(e[:20]),
                bytes(e[20:52]),
                int.from_bytes(e[52:60], "big"),
                bytes(e[60:92]),
            )
        )
    return out
