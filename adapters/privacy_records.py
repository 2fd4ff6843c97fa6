"""The task's ``PrivacyRecords`` contract: the on-chain records of private rounds.

A private task (secure aggregation, HE) publishes three kinds of record, each a registered
client's signed ``(kind, round, payload)`` whose payload travels in full in the
``RecordRegistered`` event (docs/privacy.md, "Published material"):

* ``ENC_KEY``: a client's X25519 encryption public key (its first one counts);
* ``MASK_KEY``: a key record (mask key in force from the next round, with its shares);
* ``REVEAL``: a client's revealed shares, or the HE key holder's decryption (only while the
  round is Revealing).

:class:`PrivacyRecordsContract` relays signed records in batches (anyone may) or sends a
client's own, and rebuilds each round's ordered record list from the events, checked
against the on-chain accumulator (:class:`~adapters.records.AccumulatorMismatch` otherwise).
The signing rule mirrors ``contracts/PrivacyRecords.sol``: EIP-712
``Record(uint8 kind,uint256 round,bytes32 payloadHash)`` with ``payloadHash`` the keccak256
of the payload, under the domain {"FedChainPrivacyRecords", "1", chainId, the records
contract}.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final

from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from adapters.chain import Chain, register_error_class
from adapters.contract import ARTIFACT_PATH, TaskRevert
from adapters.records import AccumulatorMismatch, compact_signature
from protocol.eip712 import domain_separator, typed_data_digest
from protocol.errors import ConfigError

__all__ = [
    "ENC_KEY",
    "KINDS",
    "MASK_KEY",
    "REVEAL",
    "DuplicateRecord",
    "GraphSeedNotPinnable",
    "NotAttestingReveals",
    "NotCommitteeMember",
    "PrivacyRecord",
    "PrivacyRecordsContract",
    "SignedRecord",
    "WrongRevealSigner",
    "extend_records",
    "predicted_address",
    "record_digest",
    "sign_record",
]

ENC_KEY: Final = 0
MASK_KEY: Final = 1
REVEAL: Final = 2
KINDS: Final = {ENC_KEY: "ENC_KEY", MASK_KEY: "MASK_KEY", REVEAL: "REVEAL"}
DOMAIN_NAME: Final = "FedChainPrivacyRecords"
RECORD_TYPEHASH: Final = keccak(text="Record(uint8 kind,uint256 round,bytes32 payloadHash)")
_RECORD_TOPIC: Final = keccak(text="RecordRegistered(uint256,uint256,uint8,uint256,uint256,bytes)")
_REVEALS_TOPIC: Final = keccak(text="RevealsRegistered(uint256,uint256,uint256,bytes)")
_ATTEST_TOPIC: Final = keccak(text="RevealsAttested(uint256,uint256,uint256[])")
#: Bytes of one record in the ``RevealsRegistered`` event: client index (4) || payload (32).
_REVEAL_ENTRY_BYTES: Final = 36
RECORDS_ARTIFACT: Final = ARTIFACT_PATH.parent / "PrivacyRecords.json"


@dataclass(frozen=True)
class PrivacyRecord:
    """One published record: its position in the round's list, its client's registration
    index, its kind and its payload."""

    index: int
    client: int
    kind: int
    payload: bytes


@dataclass(frozen=True)
class SignedRecord:
    """A client's signed record (what a relayer batches): ``(r, vs)`` is its EIP-2098
    signature over :func:`record_digest`; the round is the batch's argument."""

    kind: int
    round: int
    payload: bytes
    r: bytes
    vs: bytes

    def packed(self) -> bytes:
        """The record as ``submitRecords`` takes it: kind (1) ‖ payload length (4,
        big-endian) ‖ r ‖ vs ‖ payload."""
        return (
            bytes([self.kind])
            + len(self.payload).to_bytes(4, "big")
            + self.r
            + self.vs
            + self.payload
        )


def record_struct_hash(kind: int, round_: int, payload: bytes) -> bytes:
    """EIP-712 struct hash of a record."""
    if kind not in KINDS:
        raise ConfigError(f"record kind {kind!r}: must be one of {sorted(KINDS)}")
    return keccak(
        abi_encode(
            ["bytes32", "uint8", "uint256", "bytes32"],
            [RECORD_TYPEHASH, kind, round_, keccak(bytes(payload))],
        )
    )


def record_digest(separator: bytes, kind: int, round_: int, payload: bytes) -> bytes:
    """What a client signs for its record (``PrivacyRecords.recordDigest``)."""
    return typed_data_digest(separator, record_struct_hash(kind, round_, payload))


def sign_record(
    account: LocalAccount, separator: bytes, kind: int, round_: int, payload: bytes
) -> SignedRecord:
    """``account``'s signed record of ``kind`` for ``round_`` under ``separator``."""
    r, vs = compact_signature(account, record_digest(separator, kind, round_, payload))
    return SignedRecord(kind, round_, bytes(payload), r, vs)


def extend_records(acc: int, kind: int, client: int, payload: bytes) -> int:
    """The accumulator after one more record (``PrivacyRecords._admit``): the high 224 bits
    of keccak256(abi.encode(acc, kind, client, keccak256(payload)))."""
    encoded = abi_encode(
        ["uint256", "uint8", "uint256", "bytes32"], [acc, kind, client, keccak(bytes(payload))]
    )
    return int.from_bytes(keccak(encoded), "big") >> 32


def predicted_address(deployer: str, nonce: int) -> str:
    """The address of the contract ``deployer`` creates with its transaction ``nonce``
    (``keccak256(rlp([deployer, nonce]))[12:]``): the task manifest names its records
    contract before either is deployed."""
    import rlp

    raw = keccak(rlp.encode([bytes.fromhex(deployer.removeprefix("0x")), nonce]))[12:]
    return to_checksum_address(raw)


class PrivacyRecordRevert(TaskRevert):
    """Base of the PrivacyRecords contract's custom errors."""


class RecordRoundNotOpen(PrivacyRecordRevert):
    """A record for a round that is not the task's current one (or after completion)."""

    error_name = "RecordRoundNotOpen"
    params = ("round", "currentRound")


class BadRecord(PrivacyRecordRevert):
    """A record of an unknown kind or with an empty payload."""

    error_name = "BadRecord"
    params = ("record", "kind", "length")


class BadRecordBatch(PrivacyRecordRevert):
    """A batch that ends inside a record."""

    error_name = "BadRecordBatch"
    params = ("length",)


class NotRevealing(PrivacyRecordRevert):
    """A ``REVEAL`` record while its round was not Revealing."""

    error_name = "NotRevealing"
    params = ("round", "phase")


class NotTaskClient(PrivacyRecordRevert):
    """A record not signed (or not sent) by a registered client of the task."""

    error_name = "NotTaskClient"
    params = ("record", "signer")


class DuplicateRecord(PrivacyRecordRevert):
    """A second record of one client, kind and round (e.g. a replayed signed record)."""

    error_name = "DuplicateRecord"
    params = ("round", "client", "kind")


class GraphSeedNotPinnable(PrivacyRecordRevert):
    """A mask-graph seed pinned outside the round before its own, before every graph
    position is registered, or in a full-graph task."""

    error_name = "GraphSeedNotPinnable"
    params = ("round", "currentRound", "clients")


class NotAttestingReveals(PrivacyRecordRevert):
    """A reveal attestation outside its round's window."""

    error_name = "NotAttestingReveals"
    params = ("round",)


class NotCommitteeMember(PrivacyRecordRevert):
    """A reveal attestation from an account that is not an active aggregator."""

    error_name = "NotCommitteeMember"
    params = ("account",)


class WrongRevealSigner(PrivacyRecordRevert):
    """A ``submitReveals`` record naming a client whose stored key (from its ``ENC_KEY``
    record) is missing or not the signer's."""

    error_name = "WrongRevealSigner"
    params = ("record", "client", "signer")


class BadRecordSignature(PrivacyRecordRevert):
    """A relayed record whose signature is invalid or malleable (high s)."""

    error_name = "BadRecordSignature"
    params = ("record",)


for _cls in (
    RecordRoundNotOpen,
    BadRecord,
    BadRecordBatch,
    NotRevealing,
    NotTaskClient,
    BadRecordSignature,
    DuplicateRecord,
    GraphSeedNotPinnable,
    NotAttestingReveals,
    NotCommitteeMember,
    WrongRevealSigner,
):
    register_error_class(_cls)


@cache
def _artifact() -> dict[str, Any]:
    import json

    if not RECORDS_ARTIFACT.exists():
        raise ConfigError(f"missing contract artifact {RECORDS_ARTIFACT}; run `make compile`")
    data: dict[str, Any] = json.loads(RECORDS_ARTIFACT.read_text())
    return data


@dataclass
class _Scan:
    """Every record read so far, by round, and the next block to read."""

    by_round: dict[int, list[PrivacyRecord]] = field(default_factory=dict)
    accs: dict[int, list[int]] = field(default_factory=dict)
    next_block: int = 0


class PrivacyRecordsContract:
    """A task's deployed PrivacyRecords contract (its address is in the task manifest)."""

    def __init__(self, chain: Chain, address: str, from_block: int = 0) -> None:
        self.chain = chain
        self.address = to_checksum_address(address)
        self.contract: Any = chain.w3.eth.contract(address=self.address, abi=_artifact()["abi"])
        self._scan = _Scan(next_block=from_block)
        self._separator: bytes | None = None

    @classmethod
    def deploy(
        cls,
        chain: Chain,
        deployer: LocalAccount,
        task: str,
        reveal_window: int,
        graph_clients: int = 0,
    ) -> PrivacyRecordsContract:
        """Deploy the records contract of ``task`` (gas recorded as ``deployRecords``);
        ``graph_clients``: the clients a SecAgg+ mask graph spans (0: full graph)."""
        art = _artifact()
        address, _ = chain.deploy(
            deployer,
            art["abi"],
            art["bytecode"],
            task,
            reveal_window,
            graph_clients,
            op="deployRecords",
        )
        return cls(chain, address)

    def attest_reveals(self, acct: LocalAccount, round_: int, held: Sequence[int]) -> Any:
        """``acct`` (a committee member) attests it holds the reveal payloads of ``round_``'s
        records ``held`` (positions in the round's record list)."""
        words = [0] * (max(held, default=-1) // 256 + 1)
        for i in held:
            words[i // 256] |= 1 << (i % 256)
        fn = self.contract.functions.attestReveals(round_, words)
        return self.chain.transact(acct, fn, "attestReveals")

    def reveal_attestations(self, round_: int, from_block: int = 0) -> dict[int, frozenset[int]]:
        """Committee member index -> the record positions of ``round_`` it attested."""
        topics = [_ATTEST_TOPIC, round_.to_bytes(32, "big")]
        out: dict[int, frozenset[int]] = {}
        for log in self.chain.logs(self.address, topics, from_block, self.chain.block_number()):
            member = int.from_bytes(log.topics[2], "big")
            (words,) = abi_decode(["uint256[]"], log.data)
            out.setdefault(
                member,
                frozenset(
                    256 * w + b for w, word in enumerate(words) for b in range(256) if word >> b & 1
                ),
            )
        return out

    def graph_seed(self, round_: int) -> bytes | None:
        """``round_``'s pinned mask-graph randomness (None: not pinned yet)."""
        seed = bytes(self.chain.call(self.contract.functions.graphSeed(round_)))
        return None if seed == bytes(32) else seed

    def pin_graph_seed(self, acct: LocalAccount, round_: int) -> bytes:
        """Pin ``round_``'s mask-graph randomness (anyone may; idempotent) and return it."""
        seed = self.graph_seed(round_)
        if seed is None:
            fn = self.contract.functions.pinGraphSeed(round_)
            self.chain.transact(acct, fn, "pinGraphSeed")
            seed = self.graph_seed(round_)
        if seed is None:  # pragma: no cover - the transaction reverts instead
            raise ConfigError(f"round {round_}'s graph seed was not pinned")
        return seed

    def check_task(self, task: str) -> None:
        """Refuse a records contract that does not belong to ``task``."""
        bound = str(self.chain.call(self.contract.functions.task()))
        if to_checksum_address(bound) != to_checksum_address(task):
            raise ConfigError(
                f"privacy records contract {self.address} belongs to task {bound}, not {task}"
            )

    def revealing(self, round_: int) -> bool:
        """Whether ``round_``'s reveal window is open now (``REVEAL`` records accepted)."""
        return bool(self.chain.call(self.contract.functions.revealing(round_)))

    @property
    def separator(self) -> bytes:
        """The records' EIP-712 domain separator."""
        if self._separator is None:
            self._separator = domain_separator(self.chain.chain_id, self.address, DOMAIN_NAME)
        return self._separator

    # -- transactions ---------------------------------------------------------------------

    def submit_record(self, acct: LocalAccount, round_: int, kind: int, payload: bytes) -> Any:
        """Publish ``acct``'s own record (it must be a registered client of the task)."""
        fn = self.contract.functions.submitRecord(round_, kind, bytes(payload))
        return self.chain.transact(acct, fn, f"submitRecord[{KINDS.get(kind, kind)}]")

    def submit_records(
        self,
        acct: LocalAccount,
        round_: int,
        records: Sequence[SignedRecord],
        gas: int | None = None,
    ) -> Any:
        """Relay a batch of signed records (``acct`` pays; anyone may)."""
        if any(rec.round != round_ for rec in records):
            raise ConfigError("every record of a batch must be for the batch's round")
        packed = b"".join(rec.packed() for rec in records)
        kinds = sorted({KINDS.get(rec.kind, str(rec.kind)) for rec in records})
        fn = self.contract.functions.submitRecords(round_, packed)
        return self.chain.transact(acct, fn, f"submitRecords[{'+'.join(kinds)}]", gas=gas)

    def submit_reveals(
        self,
        acct: LocalAccount,
        round_: int,
        records: Sequence[tuple[int, SignedRecord]],
        gas: int | None = None,
    ) -> Any:
        """Relay a batch of signed 32-byte ``REVEAL`` records (SecAgg+ reveal digests) with
        their signers' client indices, through ``submitReveals`` (cheaper per record than
        :meth:`submit_records`; the same records on the list)."""
        if any(rec.round != round_ for _, rec in records):
            raise ConfigError("every record of a batch must be for the batch's round")
        if any(rec.kind != REVEAL or len(rec.payload) != 32 for _, rec in records):
            raise ConfigError("submitReveals takes 32-byte REVEAL records only")
        packed = b"".join(
            client.to_bytes(4, "big") + rec.payload + rec.r + rec.vs for client, rec in records
        )
        fn = self.contract.functions.submitReveals(round_, packed)
        return self.chain.transact(acct, fn, "submitReveals", gas=gas)

    def sign(self, account: LocalAccount, round_: int, kind: int, payload: bytes) -> SignedRecord:
        """``account``'s signed record under this contract's domain."""
        return sign_record(account, self.separator, kind, round_, payload)

    # -- views ------------------------------------------------------------------------------

    def record_log(self, round_: int) -> tuple[int, int]:
        """The on-chain accumulator over ``round_``'s records, and their count."""
        acc, count = self.chain.call(self.contract.functions.recordLog(round_))
        return int(acc), int(count)

    def records(self, round_: int) -> list[PrivacyRecord]:
        """The records of ``round_`` in order, rebuilt from the events and checked against
        the on-chain accumulator."""
        acc, count = self.record_log(round_)
        for fresh in (False, True):
            if fresh:
                self._scan = _Scan()  # a cached prefix from a reverted chain: read again
            self._read()
            have = self._scan.by_round.get(round_, [])
            accs = self._scan.accs.get(round_, [0])
            if len(have) >= count and accs[count] == acc:
                return have[:count]
        raise AccumulatorMismatch(
            f"round {round_}: {len(have)} records rebuilt from RecordRegistered events do not "
            f"match the on-chain accumulator of {count} records at {self.address}"
        )

    def _read(self) -> None:
        to_block = self.chain.block_number()
        scan = self._scan
        for log in self.chain.logs(self.address, [None], scan.next_block, to_block):
            topic = bytes(log.topics[0])
            round_ = int.from_bytes(log.topics[1], "big") if len(log.topics) > 1 else 0
            if topic == _RECORD_TOPIC:
                client = int.from_bytes(log.topics[2], "big")
                kind = int.from_bytes(log.topics[3], "big")
                index, acc, payload = abi_decode(["uint256", "uint256", "bytes"], log.data)
                self._append(round_, index, [(kind, client, bytes(payload))], acc)
            elif topic == _REVEALS_TOPIC:
                first, acc, entries = abi_decode(["uint256", "uint256", "bytes"], log.data)
                step = _REVEAL_ENTRY_BYTES
                batch = [
                    (
                        REVEAL,
                        int.from_bytes(entries[p : p + 4], "big"),
                        bytes(entries[p + 4 : p + step]),
                    )
                    for p in range(0, len(entries), step)
                ]
                self._append(round_, first, batch, acc)
        scan.next_block = to_block + 1

    def _append(
        self, round_: int, first: int, batch: list[tuple[int, int, bytes]], acc: int
    ) -> None:
        """Append records ``first``.. of ``round_`` (kind, client, payload) read from one event
        whose accumulator after the last is ``acc``."""
        scan = self._scan
        have = scan.by_round.setdefault(round_, [])
        accs = scan.accs.setdefault(round_, [0])
        if first + len(batch) <= len(have):
            return  # already read
        if first != len(have):
            raise AccumulatorMismatch(f"round {round_}: records {len(have)}..{first - 1} missing")
        for offset, (kind, client, payload) in enumerate(batch):
            have.append(PrivacyRecord(first + offset, client, kind, payload))
            accs.append(extend_records(accs[-1], kind, client, payload))
        if accs[-1] != acc:
            raise AccumulatorMismatch(
                f"round {round_}: records {first}..{len(have) - 1} do not hash to their "
                "event's accumulator"
            )

    def first_payloads(self, round_: int, kind: int) -> dict[int, bytes]:
        """Client -> payload of its first record of ``kind`` in ``round_``."""
        out: dict[int, bytes] = {}
        for rec in self.records(round_):
            if rec.kind == kind and rec.client not in out:
                out[rec.client] = rec.payload
        return out

    def enc_keys(self, up_to_round: int) -> dict[int, bytes]:
        """Client -> its registered encryption key: its first 32-byte ``ENC_KEY`` record
        in rounds 0..``up_to_round`` (a malformed one does not count)."""
        out: dict[int, bytes] = {}
        for round_ in range(up_to_round + 1):
            for client, payload in self.first_payloads(round_, ENC_KEY).items():
                if client not in out and len(payload) == 32:
                    out[client] = payload
        return out
