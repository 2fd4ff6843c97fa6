"""Value types of ``FedChainTask``: enums, config/round dataclasses, signed votes and
bitmap helpers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass, field
from enum import IntEnum
from typing import Any

from eth_abi.abi import encode as abi_encode
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from adapters.records import (
    UpdateEntry,
)
from protocol.errors import ConfigError

ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"
ZERO_DIGEST = bytes(32)


class Phase(IntEnum):
    """Round lifecycle (mirrors ``FedChainTask.Phase``)."""

    PENDING = 0  # not opened yet
    COLLECTING = 1  # clients submit updates
    ATTESTING = 2  # collection closed; aggregators attest which payloads they hold
    AGGREGATING = 3  # included set fixed; the chosen aggregator may submit
    SUBMITTED = 4  # aggregate submitted; challenge window running / awaiting finalize
    DISPUTED = 5  # challenged; waits for the certificate (resolve_dispute) or its timeout
    FINALIZED = 6


class RotationPolicy(IntEnum):
    ROUND_ROBIN = 0
    SEEDED_RANDOM = 1


class EvidenceKind(IntEnum):
    """PBFT message kinds ``slashEquivocation`` accepts (``kind`` argument)."""

    PRE_PREPARE = 0
    PREPARE = 1
    COMMIT = 2  # DisputeVerdict


class EvidenceFault(IntEnum):
    """``reason`` of :class:`InvalidEvidence`."""

    UNKNOWN_KIND = 1
    NOT_CONFLICTING = 2
    DIFFERENT_SIGNERS = 3


class SignatureFault(IntEnum):
    """``reason`` of :class:`InvalidSignature` (OpenZeppelin ``ECDSA.RecoverError``)."""

    INVALID_SIGNATURE = 1  # does not recover (includes v not in {27, 28}, r = 0, ...)
    INVALID_LENGTH = 2  # not 65 bytes r || s || v
    MALLEABLE_S = 3  # s in the upper half order


def _digest(name: str, value: bytes) -> bytes:
    if not isinstance(value, bytes | bytearray) or len(value) != 32:
        raise ConfigError(f"{name} must be 32 bytes, got {value!r}")
    return bytes(value)


def _uint(name: str, value: int, bits: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**bits:
        raise ConfigError(f"{name} must be an integer in [0, 2**{bits}), got {value!r}")
    return value


#: Default ``maxSamples``: 10**9 samples per update, so max_samples * max_updates fits an int64
#: for every uint32 max_updates (10**9 * 2**32 < 2**63).
DEFAULT_MAX_SAMPLES = 10**9


@dataclass(frozen=True)
class TaskConfig:
    """Mirror of the Solidity ``TaskConfig`` struct. Windows are in blocks, money in wei.

    Only encoding constraints (32-byte digests, integer ranges) are checked here; the protocol
    rules (rounds > 0, 0 < min <= max, windows > 0, policy <= 1) are enforced by the contract
    constructor and surface as typed reverts (:class:`InvalidWindow`, ...).
    """

    initial_model_digest: bytes
    rule_id: bytes = ZERO_DIGEST
    rule_params_hash: bytes = ZERO_DIGEST
    num_rounds: int = 1
    min_updates: int = 1
    max_updates: int = 1
    collect_window: int = 10
    submit_timeout: int = 10
    challenge_window: int = 10
    attest_window: int = 0  # 0: no attestation phase (every registered update is included)
    dispute_timeout: int = 20
    rotation_policy: int = RotationPolicy.ROUND_ROBIN
    rotation_seed: bytes = ZERO_DIGEST
    aggregator_stake: int = 0
    aggregate_bond: int = 0
    challenge_bond: int = 0
    timeout_penalty: int = 0
    #: largest numSamples an update may claim; max_samples * max_updates must fit an int64
    max_samples: int = DEFAULT_MAX_SAMPLES
    #: blocks after open + collect_window until a round short of min_updates can be skipped
    collect_timeout: int = 50
    #: blocks without a new round (or start, counted from deployment) until anyone may abort
    abort_timeout: int = 10_000
    #: only accounts the owner allowed (``allow_clients``) may register as clients
    client_allowlist: bool = False
    #: wei a client locks at ``register_client`` (returned by ``release_deposit`` once the
    #: task completed or was aborted)
    client_deposit: int = 0
    #: a round opens its max_updates slots progressively over its first this many blocks
    #: (0: all at once), so one batch at round open cannot take every slot
    min_collection_blocks: int = 0

    def __post_init__(self) -> None:
        for name in ("initial_model_digest", "rule_id", "rule_params_hash", "rotation_seed"):
            object.__setattr__(self, name, _digest(name, getattr(self, name)))
        for name in (
            "num_rounds",
            "min_updates",
            "max_updates",
            "collect_window",
            "submit_timeout",
            "challenge_window",
            "attest_window",
            "dispute_timeout",
            "collect_timeout",
            "abort_timeout",
            "min_collection_blocks",
        ):
            _uint(name, getattr(self, name), 32)
        _uint("max_samples", self.max_samples, 64)
        if not isinstance(self.client_allowlist, bool):
            raise ConfigError(f"client_allowlist must be a bool, got {self.client_allowlist!r}")
        _uint("rotation_policy", int(self.rotation_policy), 8)
        object.__setattr__(self, "rotation_policy", int(self.rotation_policy))
        for name in (
            "aggregator_stake",
            "aggregate_bond",
            "challenge_bond",
            "timeout_penalty",
            "client_deposit",
        ):
            _uint(name, getattr(self, name), 256)

    def as_tuple(self) -> tuple[Any, ...]:
        """ABI encoding order of the Solidity struct."""
        return astuple(self)

    @classmethod
    def from_tuple(cls, values: Any) -> TaskConfig:
        return cls(*values)


@dataclass(frozen=True)
class RoundInfo:
    """Mirror of ``FedChainTask.RoundInfo`` (lazily derived fields already resolved)."""

    phase: Phase
    open_block: int
    close_block: int  # 0 until minUpdates is reached; may lie in the future
    collection_closed: bool
    update_count: int
    attempt: int
    attempt_start: int  # close_block for attempt 0; 0 while collecting
    deadline_block: int  # attempt_start + submit_timeout; 0 while collecting
    aggregator: str | None  # submitter of the current aggregate, None if none
    aggregate_digest: bytes
    submit_block: int
    challenge_deadline: int  # submit_block + challenge_window; 0 without a submission
    submission_attempt: int
    submission_update_count: int
    finalized: bool
    challenger: str | None = None  # challenger of the open dispute (None unless DISPUTED)
    challenge_block: int = 0  # block of that challenge (0 unless DISPUTED)
    dispute_deadline: int = 0  # challenge_block + dispute_timeout (0 unless DISPUTED)
    attest_count: int = 0  # members that attested for this round
    attest_end: int = 0  # close_block + attest_window (0 while close_block is 0)
    availability_fixed: bool = False  # the included set can no longer change
    stop: bool = False  # the submission claims the stopping rule ends the task

    @classmethod
    def from_tuple(cls, values: Any) -> RoundInfo:
        v = list(values)
        v[0] = Phase(v[0])
        v[8] = _opt_address(v[8])
        v[9] = bytes(v[9])
        v[15] = _opt_address(v[15])
        return cls(*v)


#: One client update registered on-chain for a round (index = registration order).
RegisteredUpdate = UpdateEntry


@dataclass(frozen=True)
class SignedVote:
    """One signed PBFT vote as equivocation evidence (mirror of ``FedChainTask.SignedVote``)."""

    round: int
    attempt: int
    aggregate_digest: bytes
    faulty: bool
    signature: bytes

    def as_tuple(self) -> tuple[int, int, bytes, bool, bytes]:
        return (
            self.round,
            self.attempt,
            _digest("aggregate_digest", self.aggregate_digest),
            bool(self.faulty),
            bytes(self.signature),
        )


def bitmap_words(bits: Sequence[bool]) -> list[int]:
    """Pack ``bits`` (index i = update i) into the contract's 256-bit words."""
    words = [0] * ((len(bits) + 255) // 256)
    for i, bit in enumerate(bits):
        if bit:
            words[i // 256] |= 1 << (i % 256)
    return words


def bitmap_bits(words: Sequence[int], count: int) -> list[bool]:
    """Unpack the contract's 256-bit words into ``count`` booleans."""
    return [bool((int(words[i // 256]) >> (i % 256)) & 1) for i in range(count)]


@dataclass(frozen=True)
class ChosenAggregator:
    """The aggregator the contract chose for the current attempt of the current round.

    ``address`` is None when no committee member is eligible for this attempt; anyone may then
    call ``advanceAttempt`` once ``deadline_block`` has passed.
    """

    address: str | None
    attempt: int
    deadline_block: int


@dataclass(frozen=True)
class AggregatorInfo:
    address: str
    registered: bool
    active: bool
    slashed: bool
    stake: int
    index: int
    active_from: int  # eligible for attempts starting strictly after this block


@dataclass(frozen=True)
class EventRecord:
    """One decoded contract event from a receipt."""

    name: str
    args: dict[str, Any]
    block_number: int
    log_index: int


@dataclass
class _UpdateLog:
    """A round's update list as read so far from its events, with the accumulator after
    each prefix (``accs[i]``: after ``i`` updates)."""

    entries: list[RegisteredUpdate] = field(default_factory=list)
    accs: list[int] = field(default_factory=lambda: [0])
    next_block: int = 0


_UPDATES_TOPIC = keccak(text="UpdatesRegistered(uint256,uint256,uint256,bytes)")
_CLIENT_TOPIC = keccak(text="ClientRegistered(address,uint256)")


def _opt_address(value: str) -> str | None:
    return None if int(value, 16) == 0 else to_checksum_address(value)


def rotation_start_index(policy: int, seed: bytes, round: int, attempt: int, n: int) -> int:
    """Python mirror of ``Rotation.startIndex``: where the eligibility walk starts."""
    if n <= 0:
        raise ValueError("committee is empty")
    if policy == RotationPolicy.ROUND_ROBIN:
        return (round - 1 + attempt) % n
    if policy == RotationPolicy.SEEDED_RANDOM:
        encoded = abi_encode(["bytes32", "uint256", "uint256"], [seed, round, attempt])
        return int.from_bytes(keccak(encoded), "big") % n
    raise ValueError(f"unknown rotation policy {policy}")


@dataclass(frozen=True)
class AvailabilityChallenge:
    """An open task-level availability challenge (``availabilityChallenge``): ``challenger``
    says included update ``index`` is unavailable; chunk ``j`` of it, opened against U_i
    ``chunk_root``, can be posted until block ``deadline`` (inclusive)."""

    challenger: str
    open_block: int
    index: int
    j: int
    chunk_root: bytes
    deadline: int

    @classmethod
    def unpack(
        cls, packed: int, chunk_root: bytes, dispute_timeout: int
    ) -> AvailabilityChallenge | None:
        """Decode the view's packed word (challenger | openBlock << 160 | index << 200 |
        j << 232); None when no challenge is open."""
        challenger = packed & ((1 << 160) - 1)
        if challenger == 0:
            return None
        open_block = (packed >> 160) & ((1 << 40) - 1)
        return cls(
            challenger=to_checksum_address(challenger.to_bytes(20, "big")),
            open_block=open_block,
            index=(packed >> 200) & 0xFFFFFFFF,
            j=(packed >> 232) & 0xFFFFFF,
            chunk_root=chunk_root,
            deadline=open_block + dispute_timeout,
        )
