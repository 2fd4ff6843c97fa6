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
``AGGREGATING

Layout (one contract area per file): :mod:`~adapters.contract.artifact` (the committed
artifact), :mod:`~adapters.contract.types` (enums, dataclasses, bitmaps),
:mod:`~adapters.contract.errors` (one revert class per custom error),
:mod:`~adapters.contract.intake` (membership, stakes, update intake),
:mod:`~adapters.contract.rounds` (round lifecycle), :mod:`~adapters.contract.disputes`
(challenges, verdicts, equivocation), :mod:`~adapters.contract.views` (read-only views,
events), composed in :mod:`~adapters.contract.task`. Privacy records live in
:mod:`adapters.privacy_records`. Every public name is re-exported here.
"""

from __future__ import annotations

from adapters.contract.artifact import (
    ARTIFACT_PATH,
    load_artifact,
)
from adapters.contract.errors import (
    ERROR_CLASSES,
    AccumulatorForgotten,
    AggregateAlreadySubmitted,
    AggregateRefuted,
    AggregatorAlreadyRegistered,
    AggregatorIsSlashed,
    AlreadyAttested,
    AlreadyChallenged,
    AttemptMismatch,
    AttestationClosed,
    AttestationOpen,
    AttestWindowRequired,
    AvailabilityChallengeOpen,
    AvailabilityNotTimedOut,
    AvailabilityTimedOut,
    BadBatch,
    BadBitmap,
    BadChunkOpening,
    BadStopRule,
    CertificateAlreadySlashed,
    ChallengerAttested,
    ChallengerIsSubmitter,
    ChallengeWindowClosed,
    ChallengeWindowOpen,
    ClaimMismatch,
    ClaimNotBound,
    ClaimNotProvenFaulty,
    ClaimNotRefuted,
    ClaimRequired,
    ClaimUnsettled,
    ClientAlreadyRegistered,
    ClientNotAllowed,
    CollectionClosed,
    CollectionNotClosed,
    CollectionNotTimedOut,
    CommitteeTooSmall,
    DeadlineNotPassed,
    DisputeNotTimedOut,
    DisputeOpen,
    DisputeTimedOut,
    DuplicateSigner,
    EmptyCommittee,
    EntriesMismatch,
    EvidenceCodeMismatch,
    EvidenceNotCommitted,
    FaultGamesFixed,
    InvalidEvidence,
    InvalidMaxSamples,
    InvalidNumRounds,
    InvalidRotationPolicy,
    InvalidShortString,
    InvalidSignature,
    InvalidTimeouts,
    InvalidUpdateBounds,
    InvalidWindow,
    NoAggregateSubmitted,
    NoAvailabilityChallenge,
    NoFaultGames,
    NoOpenDispute,
    NotAggregator,
    NotChosenAggregator,
    NotClient,
    NothingToWithdraw,
    NotIncluded,
    OwnableInvalidOwner,
    OwnableUnauthorizedAccount,
    OwnerCannotServe,
    QuorumNotReached,
    ReentrancyGuardReentrantCall,
    RenounceDisabled,
    RoundAlreadyFinalized,
    RoundNotOpen,
    SafeCastOverflowedUintDowncast,
    SamplesOutOfRange,
    SignerNotMember,
    SignersNotSorted,
    SlotsNotOpen,
    StringTooLong,
    SubmitDeadlinePassed,
    TaskAlreadyCompleted,
    TaskAlreadyStarted,
    TaskNotCompleted,
    TaskNotStalled,
    TaskNotStarted,
    TaskRevert,
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
from adapters.contract.task import (
    TaskContract,
)
from adapters.contract.types import (
    DEFAULT_MAX_SAMPLES,
    ZERO_ADDRESS,
    ZERO_DIGEST,
    AggregatorInfo,
    AvailabilityChallenge,
    ChosenAggregator,
    EventRecord,
    EvidenceFault,
    EvidenceKind,
    Phase,
    RegisteredUpdate,
    RotationPolicy,
    RoundInfo,
    SignatureFault,
    SignedVote,
    TaskConfig,
    bitmap_bits,
    bitmap_words,
    rotation_start_index,
)

__all__ = [
    "ARTIFACT_PATH",
    "DEFAULT_MAX_SAMPLES",
    "ERROR_CLASSES",
    "ZERO_ADDRESS",
    "ZERO_DIGEST",
    "AccumulatorForgotten",
    "AggregateAlreadySubmitted",
    "AggregateRefuted",
    "AggregatorAlreadyRegistered",
    "AggregatorInfo",
    "AggregatorIsSlashed",
    "AlreadyAttested",
    "AlreadyChallenged",
    "AttemptMismatch",
    "AttestWindowRequired",
    "AttestationClosed",
    "AttestationOpen",
    "AvailabilityChallenge",
    "AvailabilityChallengeOpen",
    "AvailabilityNotTimedOut",
    "AvailabilityTimedOut",
    "BadBatch",
    "BadBitmap",
    "BadChunkOpening",
    "BadStopRule",
    "CertificateAlreadySlashed",
    "ChallengeWindowClosed",
    "ChallengeWindowOpen",
    "ChallengerAttested",
    "ChallengerIsSubmitter",
    "ChosenAggregator",
    "ClaimMismatch",
    "ClaimNotBound",
    "ClaimNotProvenFaulty",
    "ClaimNotRefuted",
    "ClaimRequired",
    "ClaimUnsettled",
    "ClientAlreadyRegistered",
    "ClientNotAllowed",
    "CollectionClosed",
    "CollectionNotClosed",
    "CollectionNotTimedOut",
    "CommitteeTooSmall",
    "DeadlineNotPassed",
    "DisputeNotTimedOut",
    "DisputeOpen",
    "DisputeTimedOut",
    "DuplicateSigner",
    "EmptyCommittee",
    "EntriesMismatch",
    "EventRecord",
    "EvidenceCodeMismatch",
    "EvidenceFault",
    "EvidenceKind",
    "EvidenceNotCommitted",
    "FaultGamesFixed",
    "InvalidEvidence",
    "InvalidMaxSamples",
    "InvalidNumRounds",
    "InvalidRotationPolicy",
    "InvalidShortString",
    "InvalidSignature",
    "InvalidTimeouts",
    "InvalidUpdateBounds",
    "InvalidWindow",
    "NoAggregateSubmitted",
    "NoAvailabilityChallenge",
    "NoFaultGames",
    "NoOpenDispute",
    "NotAggregator",
    "NotChosenAggregator",
    "NotClient",
    "NotIncluded",
    "NothingToWithdraw",
    "OwnableInvalidOwner",
    "OwnableUnauthorizedAccount",
    "OwnerCannotServe",
    "Phase",
    "QuorumNotReached",
    "ReentrancyGuardReentrantCall",
    "RegisteredUpdate",
    "RenounceDisabled",
    "RotationPolicy",
    "RoundAlreadyFinalized",
    "RoundInfo",
    "RoundNotOpen",
    "SafeCastOverflowedUintDowncast",
    "SamplesOutOfRange",
    "SignatureFault",
    "SignedVote",
    "SignerNotMember",
    "SignersNotSorted",
    "SlotsNotOpen",
    "StringTooLong",
    "SubmitDeadlinePassed",
    "TaskAlreadyCompleted",
    "TaskAlreadyStarted",
    "TaskConfig",
    "TaskContract",
    "TaskNotCompleted",
    "TaskNotStalled",
    "TaskNotStarted",
    "TaskRevert",
    "TooManyAggregators",
    "TransferFailed",
    "UnknownClient",
    "UpdateAlreadySubmitted",
    "WrongSigner",
    "WrongValue",
    "ZeroDigest",
    "ZeroSamples",
    "ZeroValue",
    "bitmap_bits",
    "bitmap_words",
    "load_artifact",
    "rotation_start_index",
]
