// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {Quorums} from "./lib/Quorums.sol";
import {Rotation} from "./lib/Rotation.sol";
import {EquivocationEvidence} from "./lib/EquivocationEvidence.sol";

/// @notice What FedChainTask's fault-proof hooks read of a `FaultGames` claim (issue 22).
interface IFaultGamesHook {
    /// @notice The claim's submitter, previous and new state chunk roots, its update records
    ///         as `(accumulator << 32) | numRecords` (the `ClientRecords.extendUpdates` chain
    ///         over the (client, digest, weight, U_i) it lists, and their count: comparable
    ///         with the task's own accumulator and update count in one word), last block of
    ///         its game window, and whether it is settled / refuted.
    function claimHook(uint256 claimId)
        external
        view
        returns (
            address submitter,
            bytes32 prevRoot,
            bytes32 newRoot,
            uint256 records,
            uint256 windowEnd,
            bool isSettled,
            bool isRefuted
        );

    /// @notice The claim's `OneStepMath` rule id (0 FedAvg, 1 FedProx, 2 Median, 3 Trimmed
    ///         mean), the hash of its step parameters (keccak256(abi.encode(uint8 rule,
    ///         uint64 betaNum, uint64 betaDen, uint64 dim, uint256 valueBound))) and the
    ///         bitmap of the records it declares the task did not include.
    function claimBinding(uint256 claimId)
        external
        view
        returns (uint8 rule, bytes32 paramsHash, uint256[] memory unincluded);

    /// @notice The claim's stopping-rule commitment: whether it has one, the committed squared
    ///         update norm, and whether the claim includes no update (a carried round).
    function claimNorm(uint256 claimId) external view returns (bool set, uint256 normSq, bool empty);

    /// @notice Whether the claim was refuted BY PROOF (one-step check, bad included update,
    ///         non-empty empty slot), not merely by its submitter's timeout.
    function refutedByProof(uint256 claimId) external view returns (bool);
}

/// @title FedChainTaskStorage
/// @notice The state of one FedChainTask, shared by the task and by `TaskDisputes`, the
///         module the task runs its dispute path in by DELEGATECALL (so that the task stays
///         under the EIP-170 code size limit). Both inherit this contract and nothing else
///         with state, so their storage layouts are the same by construction: OpenZeppelin's
///         Ownable (`_owner`) and EIP712 (its two fallback strings) first, then the task's
///         variables below; ReentrancyGuardTransient keeps its flag in transient storage,
///         which a DELEGATECALL also shares. The types, errors and events are declared here
///         once, so both contracts revert with the same errors and emit the same events
///         (from the task's address, the module's code running in the task's context).
/// @dev    Every parameter of the task is an immutable (a code constant): each of the two
///         contracts is constructed with the same `TaskConfig`, so its copies equal the
///         task's. Only the task validates the config and writes the initial state.
abstract contract FedChainTaskStorage is Ownable, ReentrancyGuardTransient, EIP712 {
    // ------------------------------------------------------------------------------------
    // Types
    // ------------------------------------------------------------------------------------

    /// @notice Immutable parameters of the task, fixed at deployment.
    struct TaskConfig {
        bytes32 initialModelDigest;
        bytes32 ruleId;
        bytes32 ruleParamsHash;
        uint32 numRounds;
        uint32 minUpdates;
        uint32 maxUpdates;
        uint32 collectWindow;
        uint32 submitTimeout;
        uint32 challengeWindow;
        uint32 attestWindow; // 0: no attestation phase, every registered update is included
        uint32 disputeTimeout; // blocks after a challenge until the dispute can be expired
        uint8 rotationPolicy; // 0 round-robin, 1 seeded random
        bytes32 rotationSeed;
        uint256 aggregatorStake;
        uint256 aggregateBond;
        uint256 challengeBond;
        uint256 timeoutPenalty;
        uint64 maxSamples; // largest numSamples an update may claim (bounds every client's weight)
        uint32 collectTimeout; // blocks after openBlock + collectWindow until a round short of
        // minUpdates can be skipped (`skipRound`)
        uint32 abortTimeout; // blocks without a new round (or start) until anyone may `abortTask`
        bool clientAllowlist; // only accounts the owner allowed (`allowClients`) may register as clients
        uint256 clientDeposit; // wei a client locks at `registerClient`, returned once the task ends
        uint32 minCollectionBlocks; // slots open progressively over a round's first blocks (0: all at once)
    }

    /// @notice Lifecycle of a round. `Pending`: not opened yet. `Attesting`: collection closed,
    ///         the committee attests which payloads it holds (`attest`). `Disputed`: a challenge
    ///         of the submitted aggregate waits for the committee's certificate
    ///         (`resolveDispute`) or its timeout (`expireDispute`).
    enum Phase {
        Pending,
        Collecting,
        Attesting,
        Aggregating,
        Submitted,
        Disputed,
        Finalized
    }

    /// @dev Storage layout of a round (4 slots). `status` only ever holds Pending (open,
    ///      lazily Collecting/Attesting/Aggregating), Submitted, Disputed or Finalized.
    ///      Block numbers are 40 bits (checked on write). `aggregatorIndex` is meaningful while
    ///      status != Pending, `challenger` and `challengeBlock` while the round is Disputed.
    ///      The round's update accumulator is not here: it lives in `_liveAccumulators`.
    struct RoundState {
        // slot 0: written when the round opens, on registrations, when collection closes, when
        // n - f members attested, on submission, ...
        uint40 openBlock;
        uint40 closeBlock; // 0 until minUpdates is reached, then the block collection closes
        // start block of the current attempt; for attempt 0 only once n - f members attested
        // (then attempt 0 starts at that block; otherwise at closeBlock + attestWindow)
        uint40 attemptStart;
        uint40 submitBlock;
        uint24 attempt;
        Phase status;
        uint8 aggregatorIndex; // committee index of the current attempt's submitter
        uint16 attestCount; // members that attested (at most 256)
        uint32 updateCount; // updates registered
        bool stop; // the submitted aggregate ends the task (the stopping rule's decision)
        // slot 1
        bytes32 aggregateDigest;
        // slot 2: written by a challenge, cleared when its dispute ends
        address challenger; // bonded challenger of the open dispute
        uint40 challengeBlock;
        // slot 3
        uint256 attestMask; // bit i: committee member i attested
        // slot 4: members that challenged the current submission (cleared when it is discarded)
        uint256 challengerMask; // bit i: committee member i challenged it
    }

    /// @notice Read-only view of a round with every lazily derived field resolved.
    struct RoundInfo {
        Phase phase;
        uint64 openBlock;
        uint64 closeBlock; // 0 until minUpdates is reached; may lie in the future
        bool collectionClosed;
        uint32 updateCount;
        uint32 attempt;
        uint64 attemptStart; // closeBlock for attempt 0
        uint64 deadlineBlock; // attemptStart + submitTimeout (0 while collecting)
        address aggregator; // submitter, 0 if none
        bytes32 aggregateDigest;
        uint64 submitBlock;
        uint64 challengeDeadline; // submitBlock + challengeWindow (0 if no submission)
        uint32 submissionAttempt; // attempt the submission belongs to
        uint32 submissionUpdateCount; // updates the aggregate covers
        bool finalized;
        address challenger; // challenger of the open dispute (0 unless Disputed)
        uint64 challengeBlock; // block of that challenge (0 unless Disputed)
        uint64 disputeDeadline; // challengeBlock + disputeTimeout (0 unless Disputed)
        uint32 attestCount; // members that attested for this round
        uint64 attestEnd; // closeBlock + attestWindow (0 while closeBlock is 0)
        bool availabilityFixed; // the included set can no longer change
        bool stop; // the submission claims the stopping rule ends the task
    }

    /// @dev One slot, so the rotation walk reads one slot per candidate.
    struct AggregatorState {
        uint128 stake;
        uint64 activeFrom; // eligible only for attempts starting strictly after this block
        uint32 index;
        bool registered;
        bool slashed; // set by a faulty verdict: permanently out of rotation and quorums
    }

    /// @dev An open availability challenge (2 slots): who asked, when, for which update and
    ///      chunk, and the update's U_i (checked against the round's records when it opened).
    struct AvailabilityChallenge {
        address challenger;
        uint40 openBlock;
        uint32 index;
        uint24 j; // a challenge names a chunk below 2**24 (models up to 2**32 coordinates)
        bytes32 chunkRoot;
    }

    struct ClientState {
        bool registered;
        uint32 index; // registration order; bit `index` of the round's update bitmap
        bool depositHeld; // its clientDeposit is locked (until `releaseDeposit` after the end)
    }

    // ------------------------------------------------------------------------------------
    // Errors
    // ------------------------------------------------------------------------------------

    error InvalidNumRounds(uint32 numRounds);
    error InvalidUpdateBounds(uint32 minUpdates, uint32 maxUpdates);
    error InvalidWindow(uint32 collectWindow, uint32 submitTimeout, uint32 challengeWindow, uint32 disputeTimeout);
    error InvalidRotationPolicy(uint8 policy);
    error ZeroDigest();
    error ZeroSamples();
    error ZeroValue();
    error WrongValue(uint256 expected, uint256 actual);
    error TaskAlreadyStarted();
    error TaskNotStarted();
    error TaskAlreadyCompleted();
    error TaskNotCompleted();
    /// @notice `start` needs a committee of at least MIN_COMMITTEE = 3f + 1 members with f >= 1:
    ///         below that the n - f quorum makes the accused sign its own conviction.
    error CommitteeTooSmall(uint256 members, uint256 minimum);
    /// @notice maxSamples must be positive and maxSamples * maxUpdates must fit an int64, so no
    ///         sum of registered weights can overflow a node's int64 arithmetic.
    error InvalidMaxSamples(uint64 maxSamples, uint32 maxUpdates);
    /// @notice collectTimeout and abortTimeout must be positive (every wait ends).
    error InvalidTimeouts(uint32 collectTimeout, uint32 abortTimeout);
    /// @notice An update claims more samples than the task's `maxSamples`.
    error SamplesOutOfRange(uint64 numSamples, uint64 maxSamples);
    /// @notice The owner may not sit on the committee (it would profit from disputes).
    error OwnerCannotServe(address account);
    /// @notice `account` already challenged this submission (one challenge per member each).
    error AlreadyChallenged(uint256 round, address account);
    /// @notice `skipRound`: the round's collection has not timed out (or already closed).
    error CollectionNotTimedOut(uint256 round, uint256 timeoutBlock);
    /// @notice `abortTask`: the task made progress within `abortTimeout` blocks.
    error TaskNotStalled(uint256 abortBlock);
    /// @notice The task admits allowed clients only and the owner did not allow `account`.
    error ClientNotAllowed(address account);
    error TooManyAggregators(uint256 max);
    error AggregatorAlreadyRegistered(address account);
    error ClientAlreadyRegistered(address account);
    error NotAggregator(address account);
    error NotClient(address account);
    error AggregatorIsSlashed(address account);
    error RoundNotOpen(uint256 round, uint256 currentRound);
    error CollectionClosed(uint256 round, uint256 closeBlock);
    /// @notice Every slot open so far is taken: `minCollectionBlocks` opens the round's
    ///         `maxUpdates` slots progressively (`open` of them now); try a later block.
    error SlotsNotOpen(uint256 round, uint256 open);
    error CollectionNotClosed(uint256 round, uint256 updateCount, uint256 closeBlock);
    error AccumulatorForgotten(uint256 round, uint256 currentRound);
    error UpdateAlreadySubmitted(uint256 round, address client);
    // signed client records (batches)
    /// @notice A `submitUpdates` batch of `length` bytes is empty or not a whole number of
    ///         records.
    error BadBatch(uint256 length);
    /// @notice Record `record` of a batch names a client index nobody registered.
    error UnknownClient(uint256 record, uint256 clientIndex);
    /// @notice Record `record` was not signed by the client it names (another key, or a record
    ///         for another round, task or chain, which recovers to an unrelated address).
    error WrongSigner(uint256 record, uint256 clientIndex, address signer);
    error NotChosenAggregator(address caller, address chosen);
    error SubmitDeadlinePassed(uint256 round, uint256 attempt, uint256 deadlineBlock);
    error DeadlineNotPassed(uint256 round, uint256 attempt, uint256 deadlineBlock);
    error AggregateAlreadySubmitted(uint256 round, uint256 attempt);
    error NoAggregateSubmitted(uint256 round);
    error ChallengeWindowOpen(uint256 round, uint256 challengeDeadline);
    error RoundAlreadyFinalized(uint256 round);
    error NothingToWithdraw(address account);
    error TransferFailed(address to, uint256 amount);
    error RenounceDisabled();
    // dispute path
    error ChallengeWindowClosed(uint256 round, uint256 challengeDeadline);
    error ChallengerIsSubmitter(address account);
    error DisputeOpen(uint256 round, address challenger);
    error NoOpenDispute(uint256 round);
    error AttemptMismatch(uint256 round, uint256 disputedAttempt, uint256 attempt);
    error QuorumNotReached(uint256 signers, uint256 quorum);
    /// @param reason OpenZeppelin `ECDSA.RecoverError`: 1 invalid signature (includes v not in
    ///        {27, 28}), 2 length is not 65 bytes, 3 malleable s (upper half order).
    error InvalidSignature(uint256 index, uint8 reason);
    error SignerNotMember(uint256 index, address signer);
    error DuplicateSigner(uint256 index, address signer);
    error SignersNotSorted(uint256 index, address previous, address signer);
    error DisputeTimedOut(uint256 round, uint256 disputeDeadline);
    error DisputeNotTimedOut(uint256 round, uint256 disputeDeadline);
    // availability attestations
    error AttestationOpen(uint256 round, uint256 attestCount, uint256 attestEnd);
    error AttestationClosed(uint256 round, uint256 attestCount, uint256 attestEnd);
    error AlreadyAttested(uint256 round, address account);
    error BadBitmap(uint256 expectedWords, uint256 words);
    // equivocation
    /// @param reason 1 unknown message kind, 2 the two messages do not conflict, 3 they were
    ///        signed by different members.
    error InvalidEvidence(uint8 reason);
    // fault-proof hooks (issue 22)
    /// @notice `setFaultGames` once an aggregator registered, or a second time.
    error FaultGamesFixed();
    /// @notice A fault-proof call on a task without FaultGames (or a zero FaultGames address).
    error NoFaultGames();
    /// @notice `setFaultGames` on a task without an attestation phase: the fault proof needs
    ///         the committee's included set (an update attested by f + 1 members is held by a
    ///         correct one), or an honest submitter could not answer every exclusion game.
    error AttestWindowRequired(uint256 attestWindow);
    /// @notice The constructor's `evidence` is not the audited EquivocationEvidence: its code
    ///         hash `codehash` is not `EVIDENCE_CODEHASH` (0 for an empty account,
    ///         keccak256("") for one with balance but no code).
    error EvidenceCodeMismatch(address evidence, bytes32 codehash);
    /// @notice A fault-proof task's aggregate must be submitted with its claim
    ///         (`submitAggregateWithClaim`).
    error ClaimRequired(uint256 round);
    /// @param reason 1 the claim is another account's, 2 its previous root is not the last
    ///        finalized state root, 3 its records are not the round's registered updates
    ///        (client, digest, weight and U_i of each, in order), 4 its
    ///        game window ends before the challenge window, 5 it is already refuted, 6 its
    ///        rule is not the task's `ruleId` (checked when the task names one), 7 its step
    ///        parameters (rule, beta, dimension, value bound) are not the task's
    ///        (`faultParamsHash`), 8 the records it declares not included are not exactly
    ///        those outside the round's included set, 9 the task has a stopping rule
    ///        and the claim no norm commitment.
    error ClaimMismatch(uint256 claimId, uint8 reason);
    /// @notice `setStopRule` with a zero threshold or patience, after staking, or twice.
    error BadStopRule(uint256 thresholdSq, uint256 patience);
    /// @notice `finalize` while a game on the submission's claim can still refute it.
    error ClaimUnsettled(uint256 round, uint256 claimId);
    /// @notice `finalize` of an aggregate whose claim was refuted (`rejectRefuted` discards it).
    error AggregateRefuted(uint256 round, uint256 claimId);
    /// @notice The claim bound to the submission was not refuted.
    error ClaimNotRefuted(uint256 round, uint256 claimId);
    /// @notice The claim bound to the submission was refuted by its submitter's timeout, not
    ///         by a proof: nothing contradicts a "not faulty" certificate on it.
    error ClaimNotProvenFaulty(uint256 round, uint256 claimId);
    /// @notice No claim is bound to (`round`, `attempt`) with the given aggregate digest.
    error ClaimNotBound(uint256 round, uint256 attempt);
    /// @notice Every signer of the certificate was already slashed.
    error CertificateAlreadySlashed(uint256 round, uint256 attempt);
    // task-level data-availability game (issue 22)
    /// @notice `challengeAvailability` on an update that does not exist, is not in the
    ///         round's included set (fewer than f + 1 attesters), or carries no U_i (a hidden
    ///         update: zero chunk root, nothing to open against).
    error NotIncluded(uint256 round, uint256 index);
    /// @notice `account` attested update `index`: it claims to hold it, so it cannot say it
    ///         is unavailable.
    error ChallengerAttested(uint256 round, uint256 index, address account);
    /// @notice The `entries` given are not the round's registered update records (their
    ///         accumulator or count differs from the task's).
    error EntriesMismatch(uint256 round);
    /// @notice An availability challenge on `round` (update `index`) is open: one at a time,
    ///         and `finalize` waits until it is answered or expired.
    error AvailabilityChallengeOpen(uint256 round, uint256 index);
    /// @notice No availability challenge is open on `round`.
    error NoAvailabilityChallenge(uint256 round);
    /// @notice The availability challenge's answer window closed at `deadline`.
    error AvailabilityTimedOut(uint256 round, uint256 deadline);
    /// @notice The availability challenge can still be answered until `deadline`.
    error AvailabilityNotTimedOut(uint256 round, uint256 deadline);
    /// @notice The posted bytes are not the challenged chunk of update `index` opened against
    ///         its U_i.
    error BadChunkOpening(uint256 round, uint256 index);
    /// @notice `slashEquivocation` by a `reporter` that did not commit to the evidence at
    ///         least one block before (raised by EquivocationEvidence, declared for the ABI).
    error EvidenceNotCommitted(address reporter);

    // ------------------------------------------------------------------------------------
    // Events
    // ------------------------------------------------------------------------------------

    event AggregatorRegistered(address indexed aggregator, uint256 index, uint256 stake);
    event ClientRegistered(address indexed client, uint256 index);
    /// @notice The owner allowed `accounts` to register as clients (`clientAllowlist` tasks).
    event ClientsAllowed(address[] accounts);
    event TaskStarted(uint256 committeeSize, uint256 startBlock);
    event RoundOpened(uint256 indexed round, uint256 openBlock);
    /// @notice Updates `firstIndex`, `firstIndex + 1`, ... of `round` were registered (one
    ///         `submitUpdate`, or the accepted records of one `submitUpdates` batch, in order).
    ///         `entries` packs 92 bytes per update: client (20) || digest (32) || numSamples (8,
    ///         big-endian) || chunkRoot (32, U_i); `accumulator` is the round's accumulator
    ///         after the last of them.
    event UpdatesRegistered(uint256 indexed round, uint256 firstIndex, uint256 accumulator, bytes entries);
    event AggregateSubmitted(
        uint256 indexed round,
        uint256 attempt,
        address indexed aggregator,
        bytes32 digest,
        uint256 challengeDeadline
    );
    event AttemptAdvanced(
        uint256 indexed round, uint256 newAttempt, address indexed laggard, uint256 penalty
    );
    event StakeToppedUp(address indexed aggregator, uint256 amount, uint256 newStake, bool active);
    event RoundFinalized(uint256 indexed round, bytes32 digest, address indexed aggregator);
    event TaskCompleted(uint256 numRounds, bytes32 finalDigest);
    event StakeReleased(address indexed aggregator, uint256 amount);
    /// @notice A client's deposit was credited back after the task ended (`releaseDeposit`).
    event DepositReleased(address indexed client, uint256 amount);
    /// @notice `aggregator` left the committee before `start`; its stake is in its credits.
    event AggregatorLeft(address indexed aggregator, uint256 amount);
    /// @notice `round` collected fewer than minUpdates updates (`updateCount`) before its
    ///         collection timed out: it ends carrying the global model `digest` forward.
    event RoundSkipped(uint256 indexed round, uint256 updateCount, bytes32 digest);
    /// @notice The task made no progress for `abortTimeout` blocks and was ended by `caller`:
    ///         held bonds went back to their owners (`refunded` wei), every stake can be
    ///         released (`releaseStake`) and every credit withdrawn.
    event TaskAborted(uint256 round, address indexed caller, uint256 refunded);
    event Withdrawal(address indexed account, uint256 amount);
    /// @notice The aggregate of (`round`, `attempt`) is disputed: the committee runs a PBFT
    ///         instance keyed by (round, attempt, aggregateDigest) and carries the verdict back
    ///         with `resolveDispute`.
    event Challenged(uint256 indexed round, uint256 attempt, address indexed challenger, bytes32 aggregateDigest);
    /// @notice `slashedAmount` (submitter's stake + aggregate bond) is split into
    ///         `challengerReward` (half, rounded down) and the rest, burned (`treasuryAmount`);
    ///         an upheld aggregate instead burns the forfeited challenge bond (`treasuryAmount`
    ///         = challengeBond, the other amounts 0). The owner never gets any of it.
    event DisputeResolved(
        uint256 indexed round,
        uint256 attempt,
        bool faulty,
        uint256 viewNumber,
        address indexed challenger,
        uint256 slashedAmount,
        uint256 challengerReward,
        uint256 treasuryAmount
    );
    /// @notice `aggregator` lost `amount` (its whole remaining stake plus the aggregate bond)
    ///         and is permanently out of the rotation and of certificate quorums.
    event Slashed(address indexed aggregator, uint256 amount);
    /// @notice `aggregator` attested to holding the updates of `round` set in its bitmap (the
    ///         bitmap is in the transaction's calldata and in `attestation`).
    event UpdatesAttested(uint256 indexed round, address indexed aggregator, uint256 attestCount);
    /// @notice The dispute of (`round`, `attempt`) was not resolved within `disputeTimeout`
    ///         blocks: the aggregate is discarded, the submitter's bond is refunded, the
    ///         challenge bond (`treasuryAmount`) is burned, and the round re-opens at attempt + 1.
    event DisputeExpired(
        uint256 indexed round, uint256 attempt, address indexed submitter, address indexed challenger, uint256 treasuryAmount
    );
    /// @notice `aggregator` signed two conflicting PBFT messages of `kind` (0 PrePrepare,
    ///         1 Prepare, 2 DisputeVerdict) in view `viewNumber`; `reporter` proved it and was
    ///         credited `reward` (half the stake); the rest (`treasuryAmount`) is burned.
    /// @notice The task binds its submissions to claims of `faultGames` (fixed before
    ///         start); `initialStateRoot` is the chunk root of the initial state, `paramsHash`
    ///         that of the step parameters every claim must carry (`faultParamsHash`).
    event FaultGamesSet(address indexed faultGames, bytes32 initialStateRoot, bytes32 paramsHash);
    /// @notice The aggregate of (`round`, `attempt`) was submitted with FaultGames claim
    ///         `claimId`; `finalize` waits until that claim is settled.
    event AggregateClaimed(uint256 indexed round, uint256 attempt, uint256 claimId);
    /// @notice A fault-proof task's stopping rule: quiet when the claimed squared update norm
    ///         is below `thresholdSq`, stop after `patience` consecutive quiet rounds.
    event StopRuleSet(uint256 thresholdSq, uint256 patience);
    /// @notice The stop counter after (`round`, `attempt`)'s claim, and its stop decision.
    event StopCounted(uint256 indexed round, uint256 attempt, uint256 count, bool stop);
    /// @notice The claim of (`round`, `attempt`) was refuted: the aggregate is discarded, its
    ///         submitter lost `slashedAmount` (stake + aggregate bond), all burned (`reward` is 0:
    ///         the refuter is paid by FaultGames); the round re-opens at attempt + 1.
    event RefutedAggregateRejected(
        uint256 indexed round,
        uint256 attempt,
        uint256 claimId,
        address indexed reporter,
        uint256 slashedAmount,
        uint256 reward,
        uint256 treasuryAmount
    );
    /// @notice A commit certificate called the aggregate of (`round`, `attempt`) "not faulty"
    ///         while its claim `claimId` was refuted: its `slashedSigners` unslashed signers
    ///         lost their stakes, all burned (`reward` is 0: a signer could report itself).
    event RefutedCertificateSlashed(
        uint256 indexed round,
        uint256 attempt,
        uint256 claimId,
        uint256 viewNumber,
        address indexed reporter,
        uint256 slashedSigners,
        uint256 reward,
        uint256 treasuryAmount
    );
    /// @notice `challenger` says included update `index` of `round` is unavailable: anyone
    ///         holding it must post chunk `j` (mod 2**24, and mod the vector's chunk count),
    ///         opened against its U_i, within `disputeTimeout` blocks (`answerAvailability`),
    ///         or `expireAvailability` drops it (`availabilityChallenge` has the details).
    event AvailabilityChallenged(uint256 indexed round, uint256 index, uint256 j, address indexed challenger);
    /// @notice `poster` made the challenged chunk of update `index` of `round` available:
    ///         `chunk` is its 1,024 bytes in full; the challenge bond was credited to `poster`.
    event ChunkAvailable(uint256 indexed round, uint256 index, address indexed poster, bytes chunk);
    /// @notice Nobody posted the challenged chunk: update `index` left the included set of
    ///         `round`, the members that attested it and were not slashed yet lost
    ///         `slashedAmount` (one `Slashed` event each; half to `challenger` as `reward`, with
    ///         its bond back; the rest burned); a standing submission was discarded (its bond
    ///         refunded unless its submitter attested the update) and the round re-opened at
    ///         attempt + 1.
    event UpdateDropped(
        uint256 indexed round, uint256 index, address indexed challenger, uint256 slashedAmount, uint256 reward
    );
    event EquivocationSlashed(
        address indexed aggregator, uint8 kind, uint256 viewNumber, address indexed reporter, uint256 reward, uint256 treasuryAmount
    );

    // ------------------------------------------------------------------------------------
    // State
    // ------------------------------------------------------------------------------------

    /// @notice Upper bound on the committee size (bounds the rotation walk's gas).
    uint256 public constant MAX_AGGREGATORS = 256;

    /// @notice EIP-712 type hash of the committee's verdict on a disputed aggregate; must equal
    ///         consensus.messages.TYPE_HASHES["DisputeVerdict"].
    bytes32 public constant DISPUTE_VERDICT_TYPEHASH = keccak256(
        "DisputeVerdict(uint256 round,uint256 attempt,bytes32 aggregateDigest,bool faulty,uint256 view)"
    );
    /// @notice EIP-712 type hashes of the PBFT slot votes (consensus.messages.TYPE_HASHES).
    bytes32 public constant PRE_PREPARE_TYPEHASH = keccak256(
        "PrePrepare(uint256 view,uint256 seq,uint256 round,uint256 attempt,bytes32 aggregateDigest,bool faulty)"
    );
    bytes32 public constant PREPARE_TYPEHASH = keccak256(
        "Prepare(uint256 view,uint256 seq,uint256 round,uint256 attempt,bytes32 aggregateDigest,bool faulty)"
    );

    /// @notice One signed PBFT vote, as evidence: the dispute it is about, its verdict, and the
    ///         member's 65-byte signature (r || s || v).
    struct SignedVote {
        uint256 round;
        uint256 attempt;
        bytes32 aggregateDigest;
        bool faulty;
        bytes signature;
    }

    /// @dev The task parameters as given, for `config()` only: the protocol reads the same
    ///      values from the immutables below (code constants, no storage reads).
    ///      Kept as the words of its ABI encoding (a struct of static fields encodes as one
    ///      word per field): `config()` returns them as they are, with far less code than
    ///      re-encoding a stored struct.
    uint256 internal constant _CONFIG_WORDS = 23;
    uint256[_CONFIG_WORDS] internal _configWords;
    bytes32 internal immutable _initialModelDigest;
    bytes32 internal immutable _ruleId;
    bytes32 internal immutable _ruleParamsHash;
    bytes32 internal immutable _rotationSeed;
    uint32 internal immutable _numRounds;
    uint32 internal immutable _minUpdates;
    uint32 internal immutable _maxUpdates;
    uint32 internal immutable _collectWindow;
    uint32 internal immutable _submitTimeout;
    uint32 internal immutable _challengeWindow;
    uint32 internal immutable _attestWindow;
    uint32 internal immutable _disputeTimeout;
    uint8 internal immutable _rotationPolicy;
    uint256 internal immutable _aggregatorStake;
    uint256 internal immutable _aggregateBond;
    uint256 internal immutable _challengeBond;
    uint256 internal immutable _timeoutPenalty;
    uint64 internal immutable _maxSamples;
    uint32 internal immutable _collectTimeout;
    uint32 internal immutable _abortTimeout;
    bool internal immutable _clientAllowlist;
    uint256 internal immutable _clientDeposit;
    uint32 internal immutable _minCollectionBlocks;
    /// @dev Checks equivocation evidence for `slashEquivocation` (created by the constructor).
    EquivocationEvidence internal immutable _evidence;

    /// @notice Smallest committee `start` accepts: 3f + 1 with f = 1.
    uint256 public constant MIN_COMMITTEE = 4;
    /// @dev Where burned value is credited: nobody can withdraw address(0)'s credits, so
    ///      `credits(address(0))` is the total burned.
    address internal constant _BURN = address(0);

    // Slither's uninitialized-state (here and at `_rounds`) analyses TaskDisputes on its own:
    // these variables are written by FedChainTask (`start`, `registerAggregator`, the round
    // functions), and TaskDisputes only ever runs on the task's storage (DELEGATECALL from the
    // task; `onlyDelegated` refuses any other context).
    // slither-disable-start uninitialized-state
    // One slot: what every round transaction reads first.
    uint64 internal _currentRound; // 0 before start; stays at the last round after completion
    bool internal _started;
    bool internal _completed; // also set by abortTask (see the TaskAborted event)
    uint16 internal _committeeSize; // frozen at start
    uint32 internal _clientCount;
    bool internal _faultProof; // `_faultGames` is set (read here: PBFT-only tasks skip its slot)

    address[] internal _aggregators;
    // slither-disable-end uninitialized-state
    // Slither's uninitialized-state does not follow writes through storage references
    // (`AggregatorState storage info = _aggregatorState[a]; info.registered = true;`), which is
    // how these mappings are written.
    // slither-disable-next-line uninitialized-state
    mapping(address account => AggregatorState) internal _aggregatorState;
    // slither-disable-next-line uninitialized-state
    mapping(address account => ClientState) internal _clients;
    /// @dev Accounts the owner allowed to register as clients (`clientAllowlist` tasks).
    mapping(address account => bool) internal _allowedClients;
    /// @dev Low 128 bits of each client's address by index, two per slot (`ClientRecords.
    ///      clientKey`): a batch of consecutive clients reads one slot per two records.
    mapping(uint256 pair => uint256) internal _clientKeys;
    /// @dev Which clients registered an update: word w holds clients 224 * w ... 224 * w + 223
    ///      for the round in its tag (ClientRecords), so the words are reused round after round.
    mapping(uint256 word => uint256) internal _updateWords;

    // slither-disable-next-line uninitialized-state
    mapping(uint256 round => RoundState) internal _rounds;
    /// @dev The update accumulators of the current and the previous round, at index
    ///      round % 2, each XORed with `_ACCUMULATOR_MARK` so that an empty list is not a zero
    ///      word: `start` creates both slots and `finalize` resets the next round's to the mark,
    ///      so no registration ever creates a storage slot (rewriting one costs ~17k less).
    ///      Earlier rounds' accumulators are in their `UpdatesRegistered` events only.
    // Written by FedChainTask (`start`, the intake, `finalize`), read by TaskDisputes too.
    // slither-disable-next-line uninitialized-state
    uint256[2] internal _liveAccumulators;
    uint256 internal constant _ACCUMULATOR_MARK = 1;
    /// @dev Attestation bitmaps: round -> committee index -> word -> bits (bit i of word w is
    ///      update 256 * w + i of the round's registration order).
    // slither-disable-next-line uninitialized-state
    mapping(uint256 round => mapping(uint256 member => mapping(uint256 word => uint256))) internal _attestations;

    /// @dev Wei each account can pull with `withdraw` (see `credits`), stored plus one once
    ///      the account is known (the burn address at deployment, an aggregator at registration,
    ///      anyone at its first credit), so that crediting a round's bond rewrites a slot
    ///      instead of creating one.
    mapping(address account => uint256) internal _creditsPlusOne;

    /// @dev FaultGames whose claims this task's submissions are bound to (issue 22);
    ///      address(0): PBFT only (the default). Set once, before `start` (`setFaultGames`).
    // Slither's uninitialized-state (FedChainTask analysed on its own): TaskDisputes writes
    // this and `_boundClaims` (`setFaultGames`, `submitAggregateWithClaim`) in the task's
    // storage by DELEGATECALL.
    // slither-disable-next-line uninitialized-state
    IFaultGamesHook internal _faultGames;
    /// @dev The claim bound to each submission, by round and attempt: (claimId + 1) << 192 |
    ///      the low 192 bits of the submitted aggregate digest (0: none). Kept after the
    ///      submission is discarded, so a certificate about it can still be judged.
    // slither-disable-next-line uninitialized-state
    mapping(uint256 round => mapping(uint256 attempt => uint256)) internal _boundClaims;
    /// @dev Chunk root of the state each round finalized (round 0: the initial state);
    ///      fault-proof tasks only. A claim's previous root must equal the last one.
    mapping(uint256 round => bytes32) internal _stateRoots;
    /// @dev Client deposits locked now (registered, not released): part of the balance.
    uint256 internal _depositsHeld;
    /// @dev keccak256(abi.encode(uint8 rule, uint64 betaNum, uint64 betaDen, uint64 dim,
    ///      uint256 valueBound)) of the task's one-step parameters: every bound claim's
    ///      `FaultGames.claimBinding` hash (set by `setFaultGames`; fault-proof tasks only).
    // slither-disable-next-line uninitialized-state
    bytes32 internal _faultParamsHash;
    /// @dev Fault-proof stopping rule (`setStopRule`): T**2 in fixed-point units squared and
    ///      the patience (0: no stopping rule); the consecutive quiet rounds after each round,
    ///      written by its latest claimed submission (a round finalizes only its last one).
    // slither-disable-next-line uninitialized-state
    uint256 internal _stopThresholdSq;
    // slither-disable-next-line uninitialized-state
    uint256 internal _stopPatience;
    // slither-disable-next-line uninitialized-state
    mapping(uint256 round => uint256) internal _stopCounts;
    /// @dev The open availability challenge of each round (task-level data-availability
    ///      game, issue 22): at most one at a time; `challenger` is 0 when none is open.
    // Slither's uninitialized-state (FedChainTask analysed on its own): TaskDisputes writes
    // it (`challengeAvailability`, partly in assembly) in the task's storage by DELEGATECALL.
    // slither-disable-next-line uninitialized-state
    mapping(uint256 round => AvailabilityChallenge) internal _availability;

    /// @param cfg Task parameters (validated by the task's constructor).
    /// @param evidence The task's equivocation-evidence checker.
    constructor(TaskConfig memory cfg, EquivocationEvidence evidence) Ownable(msg.sender) EIP712("FedChainTask", "1") {
        _initialModelDigest = cfg.initialModelDigest;
        _ruleId = cfg.ruleId;
        _ruleParamsHash = cfg.ruleParamsHash;
        _rotationSeed = cfg.rotationSeed;
        _numRounds = cfg.numRounds;
        _minUpdates = cfg.minUpdates;
        _maxUpdates = cfg.maxUpdates;
        _collectWindow = cfg.collectWindow;
        _submitTimeout = cfg.submitTimeout;
        _challengeWindow = cfg.challengeWindow;
        _attestWindow = cfg.attestWindow;
        _disputeTimeout = cfg.disputeTimeout;
        _rotationPolicy = cfg.rotationPolicy;
        _aggregatorStake = cfg.aggregatorStake;
        _aggregateBond = cfg.aggregateBond;
        _challengeBond = cfg.challengeBond;
        _timeoutPenalty = cfg.timeoutPenalty;
        _maxSamples = cfg.maxSamples;
        _collectTimeout = cfg.collectTimeout;
        _abortTimeout = cfg.abortTimeout;
        _clientAllowlist = cfg.clientAllowlist;
        _clientDeposit = cfg.clientDeposit;
        _minCollectionBlocks = cfg.minCollectionBlocks;
        _evidence = evidence;
    }

    // ------------------------------------------------------------------------------------
    // Shared internals
    // ------------------------------------------------------------------------------------

    /// @dev Storage of `round`, which must be the current round of a running task.
    function _currentRoundState(uint256 round) internal view returns (RoundState storage) {
        // INVARIANT: nothing happens in rounds before the task starts.
        if (!_started) revert TaskNotStarted();
        // INVARIANT: nothing happens in rounds after the task completes.
        if (_completed) revert TaskAlreadyCompleted();
        // INVARIANT: only the current round is open.
        if (round != _currentRound) revert RoundNotOpen(round, _currentRound);
        return _rounds[round];
    }

    /// @dev Reverts unless `round` is past collection and attestation (aggregation phase).
    function _requireAggregating(uint256 round, RoundState storage rs) internal view {
        if (!_collectionClosed(rs)) revert CollectionNotClosed(round, rs.updateCount, rs.closeBlock);
        if (!_availabilityFixed(rs)) {
            revert AttestationOpen(round, rs.attestCount, uint256(rs.closeBlock) + _attestWindow);
        }
    }

    /// @dev Whether the included set of a round whose collection closed is fixed: n - f
    ///      members attested, or block.number >= closeBlock + attestWindow.
    function _availabilityFixed(RoundState storage rs) internal view returns (bool) {
        return rs.attestCount >= Quorums.commitQuorum(_committeeSize)
            || block.number >= uint256(rs.closeBlock) + _attestWindow;
    }

    /// @dev Start block of the current attempt: attempt 0 starts when the included set was
    ///      fixed (the (n - f)-th attestation, else closeBlock + attestWindow).
    function _attemptStart(RoundState storage rs) internal view returns (uint40) {
        if (rs.attempt != 0 || rs.attestCount >= Quorums.commitQuorum(_committeeSize)) {
            return rs.attemptStart;
        }
        return rs.closeBlock + uint40(_attestWindow);
    }

    /// @dev Discards the current submission and opens attempt + 1 at this block.
    function _reopen(RoundState storage rs) internal {
        rs.status = Phase.Pending;
        rs.aggregatorIndex = 0;
        rs.submitBlock = 0;
        rs.aggregateDigest = bytes32(0);
        rs.attempt += 1;
        rs.attemptStart = _blockNow();
        delete rs.challengerMask;
    }

    function _blockNow() internal view returns (uint40) {
        return SafeCast.toUint40(block.number);
    }

    function _collectionClosed(RoundState storage rs) internal view returns (bool) {
        uint256 closeBlock = rs.closeBlock;
        return closeBlock != 0 && block.number >= closeBlock;
    }

    function _isActive(AggregatorState storage info) internal view returns (bool) {
        return info.registered && !info.slashed && info.stake >= _aggregatorStake;
    }

    /// @dev Chosen aggregator and deadline for the current attempt of `round` (collection must
    ///      be closed). Walks forward cyclically from the rotation start index to the first
    ///      aggregator that is active and was already active when the attempt started, so a
    ///      mid-attempt top-up never changes who is chosen.
    function _chosen(uint256 round, RoundState storage rs)
        internal
        view
        returns (address chosen, uint256 index, uint256 deadline)
    {
        uint256 attempt = rs.attempt;
        uint256 attemptStart = _attemptStart(rs);
        deadline = attemptStart + _submitTimeout;
        uint256 n = _committeeSize;
        uint256 first = Rotation.startIndex(_rotationPolicy, _rotationSeed, round, attempt, n);
        for (uint256 i = 0; i < n; ++i) {
            index = (first + i) % n;
            address candidate = _aggregators[index];
            AggregatorState storage info = _aggregatorState[candidate];
            if (_isActive(info) && info.activeFrom < attemptStart) return (candidate, index, deadline);
        }
        return (address(0), 0, deadline);
    }

    function _creditsOf(address account) internal view returns (uint256) {
        uint256 stored = _creditsPlusOne[account];
        return stored == 0 ? 0 : stored - 1;
    }

    function _credit(address account, uint256 amount) internal {
        uint256 stored = _creditsPlusOne[account];
        _creditsPlusOne[account] = (stored == 0 ? 1 : stored) + amount;
    }

    /// @dev `submitAggregate`'s checks and writes (shared with `submitAggregateWithClaim`).
    // Slither's msg-value-in-nonpayable looks at this abstract base alone: both callers,
    // FedChainTask.submitAggregate and TaskDisputes.submitAggregateWithClaim, are payable.
    // slither-disable-next-line msg-value-in-nonpayable
    function _submitAggregate(uint256 round, bytes32 digest, bool stop) internal returns (RoundState storage rs) {
        rs = _currentRoundState(round);
        // INVARIANT: aggregation starts only once the included set is fixed.
        _requireAggregating(round, rs);
        // INVARIANT: one aggregate per attempt.
        if (rs.status != Phase.Pending) revert AggregateAlreadySubmitted(round, rs.attempt);
        (address chosen, uint256 chosenIndex, uint256 deadline) = _chosen(round, rs);
        // INVARIANT: only the aggregator the contract chose for this attempt may submit.
        if (msg.sender != chosen) revert NotChosenAggregator(msg.sender, chosen);
        // INVARIANT: the chosen aggregator's slot ends at its deadline (inclusive).
        if (block.number > deadline) revert SubmitDeadlinePassed(round, rs.attempt, deadline);
        // INVARIANT: every aggregate is backed by exactly the configured bond.
        if (msg.value != _aggregateBond) revert WrongValue(_aggregateBond, msg.value);
        // INVARIANT: the aggregate is content-addressed.
        if (digest == bytes32(0)) revert ZeroDigest();

        rs.status = Phase.Submitted;
        rs.aggregatorIndex = uint8(chosenIndex);
        rs.submitBlock = _blockNow();
        rs.aggregateDigest = digest;
        rs.stop = stop;
        emit AggregateSubmitted(round, rs.attempt, msg.sender, digest, block.number + _challengeWindow);
    }

    /// @dev EIP-712 digest of a committee verdict (see `FedChainTask.verdictDigest`).
    function _verdictDigest(uint256 round, uint256 attempt, bytes32 aggregateDigest, bool faulty, uint256 viewNumber)
        internal
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(
            keccak256(abi.encode(DISPUTE_VERDICT_TYPEHASH, round, attempt, aggregateDigest, faulty, viewNumber))
        );
    }
}
