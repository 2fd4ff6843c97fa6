"""Typed Python face of the ``FedChainTask`` Solidity contract (one deployment = one FL task).

Loads the committed artifact ``contracts/build/FedChainTask.json`` (no compiler at run time),
wraps every external function, converts results into frozen dataclasses and maps every Solidity
custom error to a :class:`~protocol.errors.ContractRevert` subclass of the same name, e.g.::

    from adapters.contract import RoundNotOpen, TaskContract
    try:
        task.submit_update(client, round=3, digest=d, num_samples=100)
    except RoundNotOpen as exc:
        print(exc.error_args["currentRound"])

Transaction methods return the receipt; their gas is recorded in ``chain.gas`` under the
Solidity function name (``submitUpdate``, ``submitAggregate``, ``finalize``, ...).

Block timing: views (``phase``, ``current_aggregator``, ...) are evaluated at the latest mined
block ``b``, while a transaction sent now executes in block ``b + 1``. All windows are inclusive
on the contract side as follows: updates are accepted while ``block.number < closeBlock``; the
chosen aggregator may submit while ``block.number <= deadline_block``; ``advanceAttempt`` needs
``block.number > deadline_block``; challenges are allowed while ``block.number <=
challenge_deadline`` and ``finalize`` needs ``block.number > challenge_deadline`` (and no open
dispute).

Dispute path: a committee member other than the submitter calls :meth:`TaskContract.challenge`
(bonding ``challenge_bond``); the round is ``DISPUTED`` until anyone submits the committee's
commit certificate with :meth:`TaskContract.resolve_dispute` (or
:meth:`TaskContract.resolve_certificate` for a ``consensus.certificate.CommitCertificate``).
The signed EIP-712 digest is :meth:`TaskContract.verdict_digest`; it equals
``consensus.certificate.verdict_digest`` for the domain {"FedChainTask", "1", chain id, task}.
A faulty verdict slashes the submitter (stake + aggregate bond; half to the challenger, half to
the owner's treasury, the challenger's bond returned) and re-opens the round at attempt + 1;
an upheld aggregate sends the challenge bond to the treasury. A dispute still open after
``dispute_timeout`` blocks is expired by anyone (:meth:`TaskContract.expire_dispute`): the
aggregate is discarded and both bonds go to the treasury. :meth:`TaskContract.slash_equivocation`
slashes a member that signed two conflicting PBFT votes.

Updates: a client registers its own update with :meth:`TaskContract.submit_update`, or signs
an EIP-712 update record (:mod:`adapters.records`) that anyone relays in a batch with
:meth:`TaskContract.submit_updates`. The contract keeps no update in storage: per round a
224-bit hash-chain accumulator and a count, and a round-tagged bitmap of who submitted.
:meth:`TaskContract.updates` rebuilds a round's ordered list from its ``UpdatesRegistered``
events and raises :class:`~adapters.records.AccumulatorMismatch` unless it hashes to the
on-chain accumulator; :meth:`TaskContract.has_submitted` reads the bitmap (current round).

Availability: after collection closes the round is ``ATTESTING``; each aggregator calls
:meth:`TaskContract.attest` once with the updates it holds; the included set
(:meth:`TaskContract.included_updates`: updates attested by f + 1 members) is fixed once
n - f attested or ``attest_window`` blocks passed, and only then is the round
``AGGREGATING``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import astuple, dataclass, field
from enum import IntEnum
from functools import cache
from pathlib import Path
from typing import Any

from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from adapters.chain import Chain, register_error_class
from adapters.records import (
    AccumulatorMismatch,
    SignedUpdate,
    UpdateEntry,
    decode_update_entries,
    extend_updates,
)
from protocol.eip712 import domain_separator
from protocol.errors import ConfigError, ContractRevert

ARTIFACT_PATH = Path(__file__).resolve().parent.parent / "contracts" / "build" / "FedChainTask.json"
ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"
ZERO_DIGEST = bytes(32)


# ----------------------------------------------------------------------------------------
# Artifact
# ----------------------------------------------------------------------------------------


@cache
def _load_artifact(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"contract artifact {file} is missing; run `make compile` (python -m adapters.compile)"
        )
    artifact: dict[str, Any] = json.loads(file.read_text("utf-8"))
    return artifact


def load_artifact(path: Path | str | None = None) -> dict[str, Any]:
    """The compiled ``FedChainTask`` artifact (abi, bytecode, ...). Cached per path."""
    return _load_artifact(str(path or ARTIFACT_PATH))


# ----------------------------------------------------------------------------------------
# Enums and value types
# ----------------------------------------------------------------------------------------


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
        ):
            _uint(name, getattr(self, name), 32)
        _uint("max_samples", self.max_samples, 64)
        if not isinstance(self.client_allowlist, bool):
            raise ConfigError(f"client_allowlist must be a bool, got {self.client_allowlist!r}")
        _uint("rotation_policy", int(self.rotation_policy), 8)
        object.__setattr__(self, "rotation_policy", int(self.rotation_policy))
        for name in ("aggregator_stake", "aggregate_bond", "challenge_bond", "timeout_penalty"):
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


# ----------------------------------------------------------------------------------------
# Typed reverts: one class per custom error in the ABI (tests/test_contract.py checks this
# list against the artifact). ``params`` lists the Solidity parameter names, which are the
# keys of ``error_args``.
# ----------------------------------------------------------------------------------------


class TaskRevert(ContractRevert):
    """Base class of every ``FedChainTask`` custom error."""

    params: tuple[str, ...] = ()


class AggregateAlreadySubmitted(TaskRevert):
    """The current attempt already has an aggregate."""

    error_name = "AggregateAlreadySubmitted"
    params = ("round", "attempt")


class AggregatorAlreadyRegistered(TaskRevert):
    error_name = "AggregatorAlreadyRegistered"
    params = ("account",)


class AggregatorIsSlashed(TaskRevert):
    error_name = "AggregatorIsSlashed"
    params = ("account",)


class AlreadyAttested(TaskRevert):
    """A member attested twice for one round."""

    error_name = "AlreadyAttested"
    params = ("round", "account")


class AttestationClosed(TaskRevert):
    """``attest`` after the included set was fixed (n - f attestations or the window)."""

    error_name = "AttestationClosed"
    params = ("round", "attestCount", "attestEnd")


class AttestationOpen(TaskRevert):
    """Aggregation-phase call while the committee is still attesting availability."""

    error_name = "AttestationOpen"
    params = ("round", "attestCount", "attestEnd")


class AttemptMismatch(TaskRevert):
    """``resolveDispute`` names another attempt than the disputed submission's."""

    error_name = "AttemptMismatch"
    params = ("round", "disputedAttempt", "attempt")


class BadBitmap(TaskRevert):
    """An attestation bitmap of the wrong length, or with bits past the update count."""

    error_name = "BadBitmap"
    params = ("expectedWords", "words")


class ChallengeWindowClosed(TaskRevert):
    """``challenge`` called while block.number > challengeDeadline."""

    error_name = "ChallengeWindowClosed"
    params = ("round", "challengeDeadline")


class ChallengerIsSubmitter(TaskRevert):
    """The submitter tried to challenge its own aggregate."""

    error_name = "ChallengerIsSubmitter"
    params = ("account",)


class ChallengeWindowOpen(TaskRevert):
    """``finalize`` called while block.number <= challengeDeadline."""

    error_name = "ChallengeWindowOpen"
    params = ("round", "challengeDeadline")


class ClientAlreadyRegistered(TaskRevert):
    error_name = "ClientAlreadyRegistered"
    params = ("account",)


class CollectionClosed(TaskRevert):
    """An update arrived after collection closed."""

    error_name = "CollectionClosed"
    params = ("round", "closeBlock")


class AccumulatorForgotten(TaskRevert):
    """``updateAccumulator`` of a round before the previous one (only its events keep it)."""

    error_name = "AccumulatorForgotten"
    params = ("round", "currentRound")


class CollectionNotClosed(TaskRevert):
    """Aggregation-phase call while the round is still collecting updates."""

    error_name = "CollectionNotClosed"
    params = ("round", "updateCount", "closeBlock")


class BadBatch(TaskRevert):
    """A ``submitUpdates`` batch that is empty or not a whole number of records."""

    error_name = "BadBatch"
    params = ("length",)


class DeadlineNotPassed(TaskRevert):
    """``advanceAttempt`` before the chosen aggregator's deadline has passed."""

    error_name = "DeadlineNotPassed"
    params = ("round", "attempt", "deadlineBlock")


class DisputeOpen(TaskRevert):
    """A second ``challenge`` or a ``finalize`` while the round is DISPUTED."""

    error_name = "DisputeOpen"
    params = ("round", "challenger")


class DisputeNotTimedOut(TaskRevert):
    """``expireDispute`` while block.number <= disputeDeadline."""

    error_name = "DisputeNotTimedOut"
    params = ("round", "disputeDeadline")


class DisputeTimedOut(TaskRevert):
    """``resolveDispute`` after the dispute deadline (it can only be expired now)."""

    error_name = "DisputeTimedOut"
    params = ("round", "disputeDeadline")


class DuplicateSigner(TaskRevert):
    """The same signer appears twice in a certificate (``index`` is the second one)."""

    error_name = "DuplicateSigner"
    params = ("index", "signer")


class EmptyCommittee(TaskRevert):
    """A quorum was asked for an empty committee (``commitQuorum`` before any registration)."""

    error_name = "EmptyCommittee"


class InvalidEvidence(TaskRevert):
    """Equivocation evidence refused; ``reason`` is an :class:`EvidenceFault`."""

    error_name = "InvalidEvidence"
    params = ("reason",)


class InvalidNumRounds(TaskRevert):
    error_name = "InvalidNumRounds"
    params = ("numRounds",)


class InvalidRotationPolicy(TaskRevert):
    error_name = "InvalidRotationPolicy"
    params = ("policy",)


class InvalidShortString(TaskRevert):
    """OpenZeppelin ``ShortStrings`` (EIP-712 name/version); unreachable with fixed names."""

    error_name = "InvalidShortString"


class InvalidSignature(TaskRevert):
    """Certificate entry ``index`` is not a valid signature; ``reason`` is a SignatureFault."""

    error_name = "InvalidSignature"
    params = ("index", "reason")

    @property
    def fault(self) -> SignatureFault:
        return SignatureFault(int(self.error_args["reason"]))  # type: ignore[call-overload]


class InvalidUpdateBounds(TaskRevert):
    error_name = "InvalidUpdateBounds"
    params = ("minUpdates", "maxUpdates")


class InvalidWindow(TaskRevert):
    error_name = "InvalidWindow"
    params = ("collectWindow", "submitTimeout", "challengeWindow", "disputeTimeout")


class NoAggregateSubmitted(TaskRevert):
    error_name = "NoAggregateSubmitted"
    params = ("round",)


class CommitteeTooSmall(TaskRevert):
    """``start`` with fewer than 3f + 1 = 4 members (f >= 1)."""

    error_name = "CommitteeTooSmall"
    params = ("members", "minimum")


class InvalidMaxSamples(TaskRevert):
    """maxSamples is 0, or maxSamples * maxUpdates does not fit an int64."""

    error_name = "InvalidMaxSamples"
    params = ("maxSamples", "maxUpdates")


class InvalidTimeouts(TaskRevert):
    """collectTimeout or abortTimeout is 0."""

    error_name = "InvalidTimeouts"
    params = ("collectTimeout", "abortTimeout")


class SamplesOutOfRange(TaskRevert):
    """An update claims more than ``maxSamples`` samples."""

    error_name = "SamplesOutOfRange"
    params = ("numSamples", "maxSamples")


class OwnerCannotServe(TaskRevert):
    """The task owner tried to join the committee."""

    error_name = "OwnerCannotServe"
    params = ("account",)


class AlreadyChallenged(TaskRevert):
    """A member challenged the same submission a second time."""

    error_name = "AlreadyChallenged"
    params = ("round", "account")


class CollectionNotTimedOut(TaskRevert):
    """``skipRound`` before the round's collection timed out (or after it closed)."""

    error_name = "CollectionNotTimedOut"
    params = ("round", "timeoutBlock")


class ClientNotAllowed(TaskRevert):
    """``registerClient`` on a ``clientAllowlist`` task by an account the owner did not allow."""

    error_name = "ClientNotAllowed"
    params = ("account",)


class TaskNotStalled(TaskRevert):
    """``abortTask`` while the task still makes progress."""

    error_name = "TaskNotStalled"
    params = ("abortBlock",)


class NoOpenDispute(TaskRevert):
    """``resolveDispute`` while the round is not DISPUTED."""

    error_name = "NoOpenDispute"
    params = ("round",)


class NotAggregator(TaskRevert):
    error_name = "NotAggregator"
    params = ("account",)


class NotChosenAggregator(TaskRevert):
    error_name = "NotChosenAggregator"
    params = ("caller", "chosen")


class NotClient(TaskRevert):
    error_name = "NotClient"
    params = ("account",)


class NothingToWithdraw(TaskRevert):
    error_name = "NothingToWithdraw"
    params = ("account",)


class OwnableInvalidOwner(TaskRevert):
    error_name = "OwnableInvalidOwner"
    params = ("owner",)


class OwnableUnauthorizedAccount(TaskRevert):
    """An owner-only function was called by someone else."""

    error_name = "OwnableUnauthorizedAccount"
    params = ("account",)


class QuorumNotReached(TaskRevert):
    """A certificate with fewer than ``commitQuorum()`` signatures."""

    error_name = "QuorumNotReached"
    params = ("signers", "quorum")


class ReentrancyGuardReentrantCall(TaskRevert):
    error_name = "ReentrancyGuardReentrantCall"


class RenounceDisabled(TaskRevert):
    error_name = "RenounceDisabled"


class RoundAlreadyFinalized(TaskRevert):
    error_name = "RoundAlreadyFinalized"
    params = ("round",)


class RoundNotOpen(TaskRevert):
    """The call names a round other than the current one."""

    error_name = "RoundNotOpen"
    params = ("round", "currentRound")


class SignerNotMember(TaskRevert):
    """A signature recovers to a non-member (also what a signature over other data gives)."""

    error_name = "SignerNotMember"
    params = ("index", "signer")


class SignersNotSorted(TaskRevert):
    """Certificate signers must be strictly increasing by address."""

    error_name = "SignersNotSorted"
    params = ("index", "previous", "signer")


class SafeCastOverflowedUintDowncast(TaskRevert):
    """A value does not fit its storage field (a block number past 2**40, a stake past
    2**128, more than 2**32 clients)."""

    error_name = "SafeCastOverflowedUintDowncast"
    params = ("bits", "value")


class StringTooLong(TaskRevert):
    """OpenZeppelin ``ShortStrings`` (EIP-712 name/version); unreachable with fixed names."""

    error_name = "StringTooLong"
    params = ("str",)


class SubmitDeadlinePassed(TaskRevert):
    error_name = "SubmitDeadlinePassed"
    params = ("round", "attempt", "deadlineBlock")


class TaskAlreadyCompleted(TaskRevert):
    error_name = "TaskAlreadyCompleted"


class TaskAlreadyStarted(TaskRevert):
    error_name = "TaskAlreadyStarted"


class TaskNotCompleted(TaskRevert):
    error_name = "TaskNotCompleted"


class TaskNotStarted(TaskRevert):
    error_name = "TaskNotStarted"


class TooManyAggregators(TaskRevert):
    error_name = "TooManyAggregators"
    params = ("max",)


class TransferFailed(TaskRevert):
    error_name = "TransferFailed"
    params = ("to", "amount")


class UnknownClient(TaskRevert):
    """Record ``record`` of a batch names a client index nobody registered."""

    error_name = "UnknownClient"
    params = ("record", "clientIndex")


class WrongSigner(TaskRevert):
    """Record ``record`` was not signed by the client it names (another key, or a record for
    another round, task or chain, which recovers to an unrelated address)."""

    error_name = "WrongSigner"
    params = ("record", "clientIndex", "signer")


class UpdateAlreadySubmitted(TaskRevert):
    error_name = "UpdateAlreadySubmitted"
    params = ("round", "client")


class WrongValue(TaskRevert):
    """``msg.value`` differs from the configured stake / bond."""

    error_name = "WrongValue"
    params = ("expected", "actual")


class ZeroDigest(TaskRevert):
    error_name = "ZeroDigest"


class ZeroSamples(TaskRevert):
    error_name = "ZeroSamples"


class ZeroValue(TaskRevert):
    error_name = "ZeroValue"


#: Solidity error name -> Python class, for every custom error of ``FedChainTask``.
ERROR_CLASSES: dict[str, type[TaskRevert]] = {
    cls.error_name: cls
    for cls in (
        AggregateAlreadySubmitted,
        AggregatorAlreadyRegistered,
        AccumulatorForgotten,
        AggregatorIsSlashed,
        AlreadyAttested,
        AttestationClosed,
        AttestationOpen,
        AttemptMismatch,
        BadBatch,
        BadBitmap,
        ChallengeWindowClosed,
        ChallengeWindowOpen,
        ChallengerIsSubmitter,
        ClientAlreadyRegistered,
        CollectionClosed,
        CollectionNotClosed,
        DeadlineNotPassed,
        DisputeNotTimedOut,
        DisputeOpen,
        DisputeTimedOut,
        DuplicateSigner,
        EmptyCommittee,
        InvalidEvidence,
        InvalidNumRounds,
        InvalidRotationPolicy,
        InvalidShortString,
        InvalidSignature,
        InvalidUpdateBounds,
        InvalidWindow,
        NoAggregateSubmitted,
        CommitteeTooSmall,
        InvalidMaxSamples,
        InvalidTimeouts,
        SamplesOutOfRange,
        OwnerCannotServe,
        AlreadyChallenged,
        CollectionNotTimedOut,
        TaskNotStalled,
        ClientNotAllowed,
        NoOpenDispute,
        NotAggregator,
        NotChosenAggregator,
        NotClient,
        NothingToWithdraw,
        OwnableInvalidOwner,
        OwnableUnauthorizedAccount,
        QuorumNotReached,
        ReentrancyGuardReentrantCall,
        RenounceDisabled,
        RoundAlreadyFinalized,
        RoundNotOpen,
        SafeCastOverflowedUintDowncast,
        SignerNotMember,
        SignersNotSorted,
        StringTooLong,
        SubmitDeadlinePassed,
        TaskAlreadyCompleted,
        TaskAlreadyStarted,
        TaskNotCompleted,
        TaskNotStarted,
        TooManyAggregators,
        TransferFailed,
        UnknownClient,
        UpdateAlreadySubmitted,
        WrongSigner,
        WrongValue,
        ZeroDigest,
        ZeroSamples,
        ZeroValue,
    )
}
for _cls in ERROR_CLASSES.values():
    register_error_class(_cls)
del _cls


# ----------------------------------------------------------------------------------------
# Contract wrapper
# ----------------------------------------------------------------------------------------


class TaskContract:
    """One deployed ``FedChainTask``. Build with :meth:`deploy` or :meth:`at`."""

    def __init__(self, chain: Chain, address: str, artifact: dict[str, Any] | None = None) -> None:
        self.chain = chain
        self.artifact = artifact or load_artifact()
        self.address: str = to_checksum_address(address)
        self.contract: Any = chain.w3.eth.contract(address=self.address, abi=self.artifact["abi"])
        self.deploy_receipt: Any = None
        self._config: TaskConfig | None = None
        self._events_by_topic: dict[bytes, str] | None = None
        self._update_logs: dict[int, _UpdateLog] = {}
        self._client_indices: dict[str, int] = {}
        self._clients_next_block = 0
        self._separator: bytes | None = None

    @classmethod
    def deploy(cls, chain: Chain, deployer: LocalAccount, config: TaskConfig) -> TaskContract:
        """Deploy a new task owned by ``deployer`` (gas recorded as ``deploy``)."""
        artifact = load_artifact()
        address, receipt = chain.deploy(
            deployer, artifact["abi"], artifact["bytecode"], config.as_tuple(), op="deploy"
        )
        task = cls(chain, address, artifact)
        task.deploy_receipt = receipt
        task._config = config
        return task

    @classmethod
    def at(cls, chain: Chain, address: str) -> TaskContract:
        """Attach to an already deployed task."""
        if not chain.w3.eth.get_code(to_checksum_address(address)):
            raise ValueError(f"no contract code at {address}")
        return cls(chain, address)

    def __repr__(self) -> str:
        return f"TaskContract({self.address})"

    # -- transactions ---------------------------------------------------------------------

    def _tx(
        self, acct: LocalAccount, name: str, *args: Any, value: int = 0, gas: int | None = None
    ) -> Any:
        fn = getattr(self.contract.functions, name)(*args)
        return self.chain.transact(acct, fn, name, value, gas=gas)

    def register_aggregator(self, acct: LocalAccount, value: int | None = None) -> Any:
        """Join the committee; sends ``aggregator_stake`` unless ``value`` is given."""
        stake = self.config().aggregator_stake if value is None else value
        return self._tx(acct, "registerAggregator", value=stake)

    def register_client(self, acct: LocalAccount) -> Any:
        return self._tx(acct, "registerClient")

    def start(self, acct: LocalAccount) -> Any:
        return self._tx(acct, "start")

    def submit_update(self, acct: LocalAccount, round: int, digest: bytes, num_samples: int) -> Any:
        """Register ``acct``'s own update (no signature needed: it sends the transaction)."""
        return self._tx(acct, "submitUpdate", round, bytes(digest), num_samples)

    def submit_updates(
        self,
        acct: LocalAccount,
        round: int,
        records: Sequence[SignedUpdate],
        gas: int | None = None,
    ) -> Any:
        """Relay a batch of clients' signed update records (``acct`` pays, anyone may).

        Records of clients that already have an update this round, and those left once
        collection closes, are skipped; :meth:`accepted_updates` reads what the receipt
        registered."""
        packed = b"".join(rec.packed() for rec in records)
        return self._tx(acct, "submitUpdates", round, packed, gas=gas)

    def accepted_updates(self, receipt: Any) -> list[RegisteredUpdate]:
        """The updates a ``submitUpdate``/``submitUpdates`` receipt registered, in order."""
        out: list[RegisteredUpdate] = []
        for ev in self.events(receipt):
            if ev.name == "UpdatesRegistered":
                out += decode_update_entries(int(ev.args["firstIndex"]), bytes(ev.args["entries"]))
        return out

    def submit_aggregate(
        self, acct: LocalAccount, round: int, digest: bytes, value: int | None = None
    ) -> Any:
        """Submit the aggregate; bonds ``aggregate_bond`` unless ``value`` is given."""
        bond = self.config().aggregate_bond if value is None else value
        return self._tx(acct, "submitAggregate", round, bytes(digest), value=bond)

    def advance_attempt(self, acct: LocalAccount, round: int) -> Any:
        return self._tx(acct, "advanceAttempt", round)

    def finalize(self, acct: LocalAccount, round: int) -> Any:
        return self._tx(acct, "finalize", round)

    def withdraw(self, acct: LocalAccount) -> Any:
        return self._tx(acct, "withdraw")

    def challenge(self, acct: LocalAccount, round: int, value: int | None = None) -> Any:
        """Challenge the submitted aggregate of ``round``; bonds ``challenge_bond`` unless
        ``value`` is given. ``acct`` must be a non-slashed committee member, not the submitter,
        and the transaction must execute while ``block.number <= challenge_deadline``."""
        bond = self.config().challenge_bond if value is None else value
        return self._tx(acct, "challenge", round, value=bond)

    def resolve_dispute(
        self,
        acct: LocalAccount,
        round: int,
        attempt: int,
        faulty: bool,
        view: int,
        signatures: Sequence[bytes],
    ) -> Any:
        """Carry the committee's verdict on-chain (anyone may send it).

        ``signatures``: 65-byte ``r || s || v`` signatures over :meth:`verdict_digest`, ordered
        by signer address ascending, at least :meth:`commit_quorum` of them.
        """
        sigs = [bytes(sig) for sig in signatures]
        return self._tx(acct, "resolveDispute", round, attempt, bool(faulty), view, sigs)

    def resolve_certificate(self, acct: LocalAccount, certificate: Any) -> Any:
        """:meth:`resolve_dispute` with a ``consensus.certificate.CommitCertificate`` (or any
        object whose ``to_contract_args()`` returns ``(round, attempt, faulty, view, sigs)``)."""
        round, attempt, faulty, view, sigs = certificate.to_contract_args()
        return self.resolve_dispute(acct, round, attempt, faulty, view, sigs)

    def attest(self, acct: LocalAccount, round: int, held: Sequence[bool]) -> Any:
        """Attest to holding (fetched and pinned) the updates of ``round`` marked in ``held``
        (one flag per registered update, in registration order)."""
        return self._tx(acct, "attest", round, bitmap_words(held))

    def expire_dispute(self, acct: LocalAccount, round: int) -> Any:
        """Discard the disputed aggregate of ``round`` after its dispute timed out."""
        return self._tx(acct, "expireDispute", round)

    def slash_equivocation(
        self,
        acct: LocalAccount,
        kind: int,
        view: int,
        seq: int,
        first: SignedVote | tuple[int, int, bytes, bool, bytes],
        second: SignedVote | tuple[int, int, bytes, bool, bytes],
    ) -> Any:
        """Prove that one member signed two conflicting PBFT messages (see
        :class:`EvidenceKind`); the caller is credited half of its stake. ``first`` and
        ``second`` are :class:`SignedVote` s or ``(round, attempt, digest, faulty, sig)``."""
        a = first if isinstance(first, SignedVote) else SignedVote(*first)
        b = second if isinstance(second, SignedVote) else SignedVote(*second)
        return self._tx(acct, "slashEquivocation", int(kind), view, seq, a.as_tuple(), b.as_tuple())

    def top_up_stake(self, acct: LocalAccount, value: int) -> Any:
        return self._tx(acct, "topUpStake", value=value)

    def release_stake(self, acct: LocalAccount) -> Any:
        return self._tx(acct, "releaseStake")

    def allow_clients(self, acct: LocalAccount, addresses: Sequence[str]) -> Any:
        """Owner: allow ``addresses`` to register as clients (``client_allowlist`` tasks)."""
        return self._tx(acct, "allowClients", [to_checksum_address(a) for a in addresses])

    def leave_committee(self, acct: LocalAccount) -> Any:
        """Leave the committee before ``start`` (the stake goes to the caller's credits)."""
        return self._tx(acct, "leaveCommittee")

    def skip_round(self, acct: LocalAccount, round: int) -> Any:
        """End a round whose collection timed out short of min_updates (model carried)."""
        return self._tx(acct, "skipRound", round)

    def abort_task(self, acct: LocalAccount) -> Any:
        """End a task without progress for abort_timeout blocks (stakes become releasable)."""
        return self._tx(acct, "abortTask")

    # -- views ----------------------------------------------------------------------------

    def _call(self, name: str, *args: Any) -> Any:
        """View call through the chain's per-block cache. The key (address, function name,
        args) determines the calldata (no overloads), so a hit skips ABI encoding."""
        key = ("FedChainTask", self.address, name, args)
        try:
            hash(key)
        except TypeError:  # unhashable argument: fall back to the calldata key
            return self.chain.call(getattr(self.contract.functions, name)(*args))
        return self.chain.cached_call(key, lambda: getattr(self.contract.functions, name)(*args))

    def current_round(self) -> int:
        return int(self._call("currentRound"))

    def task_started(self) -> bool:
        return bool(self._call("taskStarted"))

    def task_completed(self) -> bool:
        """True once the last round is final or the task was aborted (``abortTask``)."""
        return bool(self._call("taskCompleted"))

    def global_model_digest(self) -> bytes:
        return bytes(self._call("globalModelDigest"))

    def round_digest(self, round: int) -> bytes:
        """Finalized digest of ``round`` (32 zero bytes if not finalized)."""
        return bytes(self._call("roundDigest", round))

    def phase(self, round: int) -> Phase:
        return Phase(self._call("phase", round))

    def round_info(self, round: int) -> RoundInfo:
        return RoundInfo.from_tuple(self._call("getRound", round))

    def updates(self, round: int) -> list[RegisteredUpdate]:
        """The updates registered for ``round``, in registration order.

        Rebuilt from the round's ``UpdatesRegistered`` events (read incrementally and kept)
        and checked against the on-chain accumulator and count: a list that does not hash to
        it raises :class:`~adapters.records.AccumulatorMismatch`, never a silent answer. For a
        round older than the previous one the contract keeps only the count: the list must
        have that length and every batch must hash to the accumulator its event carries."""
        acc, count = self.update_accumulator(round)
        log = self._update_logs.get(round)
        for fresh in (False, True):
            if log is None or fresh:
                log = self._update_logs[round] = _UpdateLog()
            if len(log.entries) < count:
                self._scan_updates(round, log)
            if len(log.entries) >= count and acc in (None, log.accs[count]):
                return log.entries[:count]
            # a cached prefix from a reverted chain (snapshot) fails here: rescan once
        have = len(log.entries) if log is not None else 0
        raise AccumulatorMismatch(
            f"round {round}: {have} updates rebuilt from UpdatesRegistered events do not match "
            f"the on-chain accumulator of {count} updates at {self.address}"
        )

    def _scan_updates(self, round: int, log: _UpdateLog) -> None:
        """Append the round's events since the last scan to ``log`` (each batch checked)."""
        to_block = self.chain.block_number()
        from_block = log.next_block or self.round_info(round).open_block
        if from_block > to_block:
            return
        events = self.chain.logs(
            self.address, [_UPDATES_TOPIC, round.to_bytes(32, "big")], from_block, to_block
        )
        for event in events:
            first, acc, entries = abi_decode(["uint256", "uint256", "bytes"], event.data)
            if first < len(log.entries):
                continue  # already read (overlapping scan)
            if first > len(log.entries):
                raise AccumulatorMismatch(
                    f"round {round}: UpdatesRegistered events skip updates "
                    f"{len(log.entries)}..{first - 1}"
                )
            for entry in decode_update_entries(first, entries):
                log.accs.append(
                    extend_updates(log.accs[-1], entry.client, entry.digest, entry.num_samples)
                )
                log.entries.append(entry)
            if log.accs[-1] != acc:
                raise AccumulatorMismatch(
                    f"round {round}: the batch ending at update {len(log.entries) - 1} does "
                    "not hash to the accumulator its event carries"
                )
        log.next_block = to_block + 1

    def update_accumulator(self, round: int) -> tuple[int | None, int]:
        """The on-chain accumulator over ``round``'s update list, and its length. The contract
        keeps the accumulator of the current and the previous round only: for an earlier
        round it is None (its last ``UpdatesRegistered`` event carries it) and the length
        comes from the round's state."""
        try:
            acc, count = self._call("updateAccumulator", round)
        except AccumulatorForgotten:
            return None, self.round_info(round).update_count
        return int(acc), int(count)

    def has_submitted(self, round: int, address: str) -> bool:
        """Whether ``address`` has an update registered for ``round`` (the current round)."""
        return bool(self._call("updateSubmitted", round, to_checksum_address(address)))

    def client_index(self, address: str) -> int | None:
        """The registration index of client ``address`` (None if not registered).

        Read from the ``ClientRegistered`` events (one log query for every client so far, then
        incrementally), falling back to the ``clientInfo`` view for an address they miss."""
        address = to_checksum_address(address)
        if address not in self._client_indices:
            to_block = self.chain.block_number()
            for log in self.chain.logs(
                self.address, [_CLIENT_TOPIC], self._clients_next_block, to_block
            ):
                client = to_checksum_address(log.topics[1][-20:])
                self._client_indices[client] = int.from_bytes(log.data, "big")
            self._clients_next_block = to_block + 1
        if address not in self._client_indices:
            registered, index = self._call("clientInfo", address)
            if not registered:
                return None
            self._client_indices[address] = int(index)
        return self._client_indices[address]

    def client_count(self) -> int:
        return int(self._call("clientCount"))

    @property
    def domain_separator(self) -> bytes:
        """The task's EIP-712 domain separator (what clients' records are signed under)."""
        if self._separator is None:
            self._separator = domain_separator(self.chain.chain_id, self.address)
        return self._separator

    def update_record_digest(self, round: int, digest: bytes, num_samples: int) -> bytes:
        """The EIP-712 digest of an update record, computed on-chain."""
        return bytes(
            self._call("updateRecordDigest", round, _digest("digest", digest), num_samples)
        )

    def included_updates(self, round: int) -> list[bool]:
        """The round's included set, one flag per registered update (final once
        ``round_info(round).availability_fixed``)."""
        return bitmap_bits(self._call("includedUpdates", round), self.update_count(round))

    def attestation(self, round: int, member: int) -> list[bool]:
        """What committee member ``member`` (index) attested for ``round``."""
        return bitmap_bits(self._call("attestation", round, member), self.update_count(round))

    def update_count(self, round: int) -> int:
        return int(self._call("updateCount", round))

    def current_aggregator(self) -> ChosenAggregator:
        """Raises :class:`CollectionNotClosed` while the current round is collecting."""
        address, attempt, deadline = self._call("currentAggregator")
        return ChosenAggregator(_opt_address(address), int(attempt), int(deadline))

    def aggregators(self) -> list[str]:
        return [to_checksum_address(a) for a in self._call("aggregators")]

    def aggregator_info(self, address: str) -> AggregatorInfo:
        registered, active, slashed, stake, index, active_from = self._call(
            "aggregatorInfo", to_checksum_address(address)
        )
        return AggregatorInfo(
            to_checksum_address(address),
            bool(registered),
            bool(active),
            bool(slashed),
            int(stake),
            int(index),
            int(active_from),
        )

    def is_client(self, address: str) -> bool:
        return bool(self._call("clientInfo", to_checksum_address(address))[0])

    def credits(self, address: str) -> int:
        return int(self._call("credits", to_checksum_address(address)))

    def owner(self) -> str:
        return to_checksum_address(self._call("owner"))

    def verdict_digest(
        self, round: int, attempt: int, aggregate_digest: bytes, faulty: bool, view: int
    ) -> bytes:
        """The EIP-712 digest a committee member signs for this verdict (computed on-chain)."""
        return bytes(
            self._call(
                "verdictDigest",
                round,
                attempt,
                _digest("aggregate_digest", aggregate_digest),
                bool(faulty),
                view,
            )
        )

    def committee_size(self) -> int:
        """Registered aggregators (frozen at ``start``): the ``n`` of the quorum maths."""
        return int(self._call("committeeSize"))

    def commit_quorum(self) -> int:
        """Signatures a dispute certificate needs: ``n - (n - 1) // 3``.

        Raises :class:`EmptyCommittee` while nobody is registered."""
        return int(self._call("commitQuorum"))

    def eip712_domain(self) -> dict[str, Any]:
        """The ERC-5267 EIP-712 domain: ``{name, version, chainId, verifyingContract}``."""
        _fields, name, version, chain_id, verifying, _salt, _ext = self._call("eip712Domain")
        return {
            "name": str(name),
            "version": str(version),
            "chainId": int(chain_id),
            "verifyingContract": to_checksum_address(verifying),
        }

    def config(self) -> TaskConfig:
        """The task parameters (read once from the chain, then cached: they are immutable)."""
        if self._config is None:
            self._config = TaskConfig.from_tuple(self._call("config"))
        return self._config

    def balance(self) -> int:
        """Wei held by the contract."""
        return self.chain.balance(self.address)

    # -- events ---------------------------------------------------------------------------

    def events(self, receipt: Any) -> list[EventRecord]:
        """Decode this contract's events from ``receipt``, in log order."""
        if self._events_by_topic is None:
            self._events_by_topic = {}
            for entry in self.artifact["abi"]:
                if entry.get("type") == "event":
                    types = ",".join(i["type"] for i in entry["inputs"])
                    self._events_by_topic[keccak(text=f"{entry['name']}({types})")] = entry["name"]
        records: list[EventRecord] = []
        for log in receipt["logs"]:
            if to_checksum_address(log["address"]) != self.address or not log["topics"]:
                continue
            name = self._events_by_topic.get(bytes(log["topics"][0]))
            if name is None:
                continue
            decoded = getattr(self.contract.events, name)().process_log(log)
            records.append(
                EventRecord(
                    name, dict(decoded["args"]), int(log["blockNumber"]), int(log["logIndex"])
                )
            )
        return records
