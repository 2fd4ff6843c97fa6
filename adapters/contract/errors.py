"""Typed reverts: one :class:`TaskRevert` subclass per custom error of ``FedChainTask``."""

from __future__ import annotations

from adapters.chain import register_error_class
from adapters.contract.types import SignatureFault
from protocol.errors import ContractRevert

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


class EvidenceNotCommitted(TaskRevert):
    """``slashEquivocation`` by a reporter that did not commit to the evidence at least one
    block before (``commitEquivocation``): a copied reveal is refused."""

    error_name = "EvidenceNotCommitted"
    params = ("reporter",)


class SlotsNotOpen(TaskRevert):
    """Every slot the round opened so far is taken (``min_collection_blocks``): later."""

    error_name = "SlotsNotOpen"
    params = ("round", "open")


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


# -- fault-proof hooks (issue 22) ----------------------------------------------------------


class FaultGamesFixed(TaskRevert):
    """``setFaultGames`` once an aggregator registered, or a second time."""

    error_name = "FaultGamesFixed"


class AttestWindowRequired(TaskRevert):
    """``setFaultGames`` on a task with ``attest_window`` 0: the fault proof needs the
    committee's included set."""

    error_name = "AttestWindowRequired"
    params = ("attestWindow",)


class EvidenceCodeMismatch(TaskRevert):
    """The constructor's EquivocationEvidence address holds other code than the audited
    contract (``codehash`` is not ``EVIDENCE_CODEHASH``; 0 for an empty account,
    keccak256("") for one with balance but no code)."""

    error_name = "EvidenceCodeMismatch"
    params = ("evidence", "codehash")


class NoFaultGames(TaskRevert):
    """A fault-proof call on a PBFT-only task (or a zero FaultGames address)."""

    error_name = "NoFaultGames"


class BadStopRule(TaskRevert):
    """``setStopRule`` with a zero threshold or patience, after staking, or twice."""

    error_name = "BadStopRule"
    params = ("thresholdSq", "patience")


class ClaimRequired(TaskRevert):
    """``submitAggregate`` on a fault-proof task (use ``submitAggregateWithClaim``)."""

    error_name = "ClaimRequired"
    params = ("round",)


class ClaimMismatch(TaskRevert):
    """The claim is not bindable: ``reason`` 1 another submitter's, 2 wrong previous root,
    3 not the round's update count, 4 game window shorter than the challenge window,
    5 already refuted."""

    error_name = "ClaimMismatch"
    params = ("claimId", "reason")


class ClaimUnsettled(TaskRevert):
    """``finalize`` while a game on the submission's claim can still refute it."""

    error_name = "ClaimUnsettled"
    params = ("round", "claimId")


class AggregateRefuted(TaskRevert):
    """``finalize`` of an aggregate whose claim was refuted (``rejectRefuted`` it)."""

    error_name = "AggregateRefuted"
    params = ("round", "claimId")


class ClaimNotRefuted(TaskRevert):
    """The claim bound to the submission was not refuted."""

    error_name = "ClaimNotRefuted"
    params = ("round", "claimId")


class ClaimNotProvenFaulty(TaskRevert):
    """The claim bound to the submission was refuted by its submitter's timeout, not by a
    proof: nothing contradicts a "not faulty" certificate on it."""

    error_name = "ClaimNotProvenFaulty"
    params = ("round", "claimId")


class ClaimNotBound(TaskRevert):
    """No claim is bound to (round, attempt) with that aggregate digest."""

    error_name = "ClaimNotBound"
    params = ("round", "attempt")


class NotIncluded(TaskRevert):
    """An availability challenge on an update outside the included set (or without U_i)."""

    error_name = "NotIncluded"
    params = ("round", "index")


class ChallengerAttested(TaskRevert):
    """An availability challenge by a member that attested the update."""

    error_name = "ChallengerAttested"
    params = ("round", "index", "account")


class EntriesMismatch(TaskRevert):
    """The records sent with an availability challenge are not the round's."""

    error_name = "EntriesMismatch"
    params = ("round",)


class AvailabilityChallengeOpen(TaskRevert):
    """An availability challenge on the round is open (one at a time; finalize waits)."""

    error_name = "AvailabilityChallengeOpen"
    params = ("round", "index")


class NoAvailabilityChallenge(TaskRevert):
    """No availability challenge is open on the round."""

    error_name = "NoAvailabilityChallenge"
    params = ("round",)


class AvailabilityTimedOut(TaskRevert):
    """The availability challenge's answer window closed."""

    error_name = "AvailabilityTimedOut"
    params = ("round", "deadline")


class AvailabilityNotTimedOut(TaskRevert):
    """The availability challenge can still be answered."""

    error_name = "AvailabilityNotTimedOut"
    params = ("round", "deadline")


class BadChunkOpening(TaskRevert):
    """The posted chunk does not open against the update's U_i."""

    error_name = "BadChunkOpening"
    params = ("round", "index")


class CertificateAlreadySlashed(TaskRevert):
    """Every signer of the certificate was already slashed."""

    error_name = "CertificateAlreadySlashed"
    params = ("round", "attempt")


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
        EvidenceNotCommitted,
        SlotsNotOpen,
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
        FaultGamesFixed,
        AttestWindowRequired,
        EvidenceCodeMismatch,
        NoFaultGames,
        BadStopRule,
        ClaimRequired,
        ClaimMismatch,
        ClaimUnsettled,
        AggregateRefuted,
        ClaimNotRefuted,
        ClaimNotProvenFaulty,
        ClaimNotBound,
        CertificateAlreadySlashed,
        NotIncluded,
        ChallengerAttested,
        EntriesMismatch,
        AvailabilityChallengeOpen,
        NoAvailabilityChallenge,
        AvailabilityTimedOut,
        AvailabilityNotTimedOut,
        BadChunkOpening,
    )
}
for _cls in ERROR_CLASSES.values():
    register_error_class(_cls)
del _cls
