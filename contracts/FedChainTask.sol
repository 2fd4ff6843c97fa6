// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {Quorums} from "./lib/Quorums.sol";
import {Rotation} from "./lib/Rotation.sol";
import {Availability} from "./lib/Availability.sol";
import {ClientRecords} from "./lib/ClientRecords.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {EquivocationEvidence} from "./lib/EquivocationEvidence.sol";

/// @title FedChainTask
/// @notice One deployment is one federated-learning task: a committee of staked aggregators
///         (frozen at `start`), any number of registered clients, and `numRounds` rounds.
///         Each round: clients register update digests (collection), the committee attests
///         which payloads it holds (the round's included set), the contract picks the
///         aggregator for the current attempt, the chosen aggregator submits the aggregate
///         digest with a bond, a challenge window runs, and `finalize` makes the aggregate the
///         new global model. All windows are counted in blocks.
/// @dev    Round state machine (see `Phase`):
///         Pending -> Collecting -> Attesting -> Aggregating -> Submitted -> Finalized.
///         Collecting/Attesting/Aggregating are derived lazily from block numbers and the
///         attestation count (no transaction closes a phase); Submitted/Disputed/Finalized
///         are stored. Attesting ends once n - f members attested or `attestWindow` blocks
///         passed; the included set (updates attested by >= f + 1 members) is fixed from
///         then on. A missed deadline keeps the round in Aggregating with attempt + 1
///         (`advanceAttempt`). Dispute path: Submitted -> Disputed (`challenge`, bonded, only
///         while block.number <= challengeDeadline) -> `resolveDispute` with an EIP-712 commit
///         certificate of n - f eligible committee signatures (see `Quorums`) while
///         block.number <= disputeDeadline -> Aggregating with attempt + 1 (aggregate
///         rejected: submitter slashed) or back to Submitted (aggregate upheld: challenge bond
///         burned); after disputeDeadline `expireDispute` discards the
///         aggregate (submitter's bond refunded, challenge bond burned) -> Aggregating with
///         attempt + 1. `slashEquivocation` slashes a
///         member that signed two conflicting PBFT messages. Money only ever leaves through
///         `withdraw` (pull payments); every other function moves value between stakes, the
///         held bonds and `credits`.
///         Updates: a client registers its update itself (`submitUpdate`) or signs an EIP-712
///         `Update` record that anyone relays in a batch (`submitUpdates`). No update is kept
///         in storage: each round keeps a hash-chain accumulator over its ordered update list
///         and a round-tagged bitmap of the clients that submitted; the list itself is in the
///         `UpdatesRegistered` events, and nodes check what they rebuild from them against the
///         accumulator (`updateAccumulator`).
contract FedChainTask is Ownable, ReentrancyGuardTransient, EIP712 {
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

    struct ClientState {
        bool registered;
        uint32 index; // registration order; bit `index` of the round's update bitmap
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
    ///         `entries` packs 60 bytes per update: client (20) || digest (32) || numSamples (8,
    ///         big-endian); `accumulator` is the round's accumulator after the last of them.
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
    uint256 private constant _CONFIG_WORDS = 21;
    uint256[_CONFIG_WORDS] private _configWords;
    bytes32 private immutable _initialModelDigest;
    bytes32 private immutable _ruleId;
    bytes32 private immutable _ruleParamsHash;
    bytes32 private immutable _rotationSeed;
    uint32 private immutable _numRounds;
    uint32 private immutable _minUpdates;
    uint32 private immutable _maxUpdates;
    uint32 private immutable _collectWindow;
    uint32 private immutable _submitTimeout;
    uint32 private immutable _challengeWindow;
    uint32 private immutable _attestWindow;
    uint32 private immutable _disputeTimeout;
    uint8 private immutable _rotationPolicy;
    uint256 private immutable _aggregatorStake;
    uint256 private immutable _aggregateBond;
    uint256 private immutable _challengeBond;
    uint256 private immutable _timeoutPenalty;
    uint64 private immutable _maxSamples;
    uint32 private immutable _collectTimeout;
    uint32 private immutable _abortTimeout;
    bool private immutable _clientAllowlist;
    /// @dev Checks equivocation evidence for `slashEquivocation` (created by the constructor).
    EquivocationEvidence private immutable _evidence;

    /// @notice Smallest committee `start` accepts: 3f + 1 with f = 1.
    uint256 public constant MIN_COMMITTEE = 4;
    /// @dev Where burned value is credited: nobody can withdraw address(0)'s credits, so
    ///      `credits(address(0))` is the total burned.
    address private constant _BURN = address(0);

    // One slot: what every round transaction reads first.
    uint64 private _currentRound; // 0 before start; stays at the last round after completion
    bool private _started;
    bool private _completed; // also set by abortTask (see the TaskAborted event)
    uint16 private _committeeSize; // frozen at start
    uint32 private _clientCount;

    address[] private _aggregators;
    // Slither's uninitialized-state does not follow writes through storage references
    // (`AggregatorState storage info = _aggregatorState[a]; info.registered = true;`), which is
    // how these mappings are written.
    // slither-disable-next-line uninitialized-state
    mapping(address account => AggregatorState) private _aggregatorState;
    // slither-disable-next-line uninitialized-state
    mapping(address account => ClientState) private _clients;
    /// @dev Accounts the owner allowed to register as clients (`clientAllowlist` tasks).
    mapping(address account => bool) private _allowedClients;
    /// @dev Low 128 bits of each client's address by index, two per slot (`ClientRecords.
    ///      clientKey`): a batch of consecutive clients reads one slot per two records.
    mapping(uint256 pair => uint256) private _clientKeys;
    /// @dev Which clients registered an update: word w holds clients 224 * w ... 224 * w + 223
    ///      for the round in its tag (ClientRecords), so the words are reused round after round.
    mapping(uint256 word => uint256) private _updateWords;

    mapping(uint256 round => RoundState) private _rounds;
    /// @dev The update accumulators of the current and the previous round, at index
    ///      round % 2, each XORed with `_ACCUMULATOR_MARK` so that an empty list is not a zero
    ///      word: `start` creates both slots and `finalize` resets the next round's to the mark,
    ///      so no registration ever creates a storage slot (rewriting one costs ~17k less).
    ///      Earlier rounds' accumulators are in their `UpdatesRegistered` events only.
    uint256[2] private _liveAccumulators;
    uint256 private constant _ACCUMULATOR_MARK = 1;
    /// @dev Attestation bitmaps: round -> committee index -> word -> bits (bit i of word w is
    ///      update 256 * w + i of the round's registration order).
    // slither-disable-next-line uninitialized-state
    mapping(uint256 round => mapping(uint256 member => mapping(uint256 word => uint256))) private _attestations;

    /// @dev Wei each account can pull with `withdraw` (see `credits`), stored plus one once
    ///      the account is known (the burn address at deployment, an aggregator at registration,
    ///      anyone at its first credit), so that crediting a round's bond rewrites a slot
    ///      instead of creating one.
    mapping(address account => uint256) private _creditsPlusOne;

    // ------------------------------------------------------------------------------------
    // Construction and registration
    // ------------------------------------------------------------------------------------

    /// @notice Creates the task; the deployer becomes the owner. The EIP-712 domain of dispute
    ///         certificates is {name "FedChainTask", version "1", chainId, this contract}.
    /// @param cfg Task parameters; windows are in blocks.
    constructor(TaskConfig memory cfg) Ownable(msg.sender) EIP712("FedChainTask", "1") {
        // INVARIANT: a task has at least one round.
        if (cfg.numRounds == 0) revert InvalidNumRounds(cfg.numRounds);
        // INVARIANT: 0 < minUpdates <= maxUpdates, so collection can always close.
        if (cfg.minUpdates == 0 || cfg.minUpdates > cfg.maxUpdates) {
            revert InvalidUpdateBounds(cfg.minUpdates, cfg.maxUpdates);
        }
        // INVARIANT: every window lasts at least one block (attestWindow 0 disables attesting).
        if (cfg.collectWindow == 0 || cfg.submitTimeout == 0 || cfg.challengeWindow == 0 || cfg.disputeTimeout == 0) {
            revert InvalidWindow(cfg.collectWindow, cfg.submitTimeout, cfg.challengeWindow, cfg.disputeTimeout);
        }
        // INVARIANT: the rotation policy is one the contract implements.
        if (cfg.rotationPolicy > Rotation.SEEDED_RANDOM) revert InvalidRotationPolicy(cfg.rotationPolicy);
        // INVARIANT: the global model always has a content digest.
        if (cfg.initialModelDigest == bytes32(0)) revert ZeroDigest();
        // INVARIANT: every weight is positive and the sum of a round's weights fits an int64.
        if (cfg.maxSamples == 0 || uint256(cfg.maxSamples) * cfg.maxUpdates > uint256(uint64(type(int64).max))) {
            revert InvalidMaxSamples(cfg.maxSamples, cfg.maxUpdates);
        }
        // INVARIANT: a stalled collection and a stalled task both end after finitely many blocks.
        if (cfg.collectTimeout == 0 || cfg.abortTimeout == 0) revert InvalidTimeouts(cfg.collectTimeout, cfg.abortTimeout);
        bytes memory encoded = abi.encode(cfg);
        for (uint256 i = 0; i < _CONFIG_WORDS; ++i) {
            uint256 word;
            assembly ("memory-safe") {
                word := mload(add(encoded, mul(add(i, 1), 32)))
            }
            _configWords[i] = word;
        }
        _initialModelDigest = cfg.initialModelDigest;
        _creditsPlusOne[_BURN] = 1; // burns rewrite a slot instead of creating one
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
        _rounds[0].openBlock = _blockNow(); // round 0 (never used otherwise): abortTask's clock before start
        _evidence = new EquivocationEvidence(cfg.attestWindow);
    }

    /// @notice Joins the aggregator committee by depositing exactly `aggregatorStake`.
    /// @dev Only before `start`; the registration order is the committee order.
    function registerAggregator() external payable {
        // INVARIANT: the committee is frozen once the task has started.
        if (_started) revert TaskAlreadyStarted();
        // INVARIANT: the owner never sits on the committee, so it cannot gain from disputes.
        if (msg.sender == owner()) revert OwnerCannotServe(msg.sender);
        AggregatorState storage info = _aggregatorState[msg.sender];
        // INVARIANT: one committee seat per address.
        if (info.registered) revert AggregatorAlreadyRegistered(msg.sender);
        // INVARIANT: every seat is backed by exactly the configured stake.
        if (msg.value != _aggregatorStake) revert WrongValue(_aggregatorStake, msg.value);
        uint256 index = _aggregators.length;
        // INVARIANT: the committee size is bounded.
        if (index >= MAX_AGGREGATORS) revert TooManyAggregators(MAX_AGGREGATORS);

        info.registered = true;
        info.index = uint32(index);
        info.stake = SafeCast.toUint128(msg.value);
        _aggregators.push(msg.sender);
        if (_creditsPlusOne[msg.sender] == 0) _creditsPlusOne[msg.sender] = 1;
        emit AggregatorRegistered(msg.sender, index, msg.value);
    }

    /// @notice Leaves the committee before `start`; the stake is credited back (then
    ///         `withdraw`). The last member takes the leaver's index (indices are only used
    ///         once the committee is frozen).
    function leaveCommittee() external {
        // INVARIANT: the committee is frozen once the task has started.
        if (_started) revert TaskAlreadyStarted();
        AggregatorState storage info = _aggregatorState[msg.sender];
        // INVARIANT: only members leave.
        if (!info.registered) revert NotAggregator(msg.sender);
        uint256 stake = info.stake;
        uint32 index = info.index;
        address last = _aggregators[_aggregators.length - 1];
        _aggregators[index] = last;
        _aggregatorState[last].index = index;
        _aggregators.pop();
        info.registered = false;
        info.stake = 0;
        _credit(msg.sender, stake);
        emit AggregatorLeft(msg.sender, stake);
    }

    /// @notice Allows `accounts` to register as clients of a `clientAllowlist` task (a no-op
    ///         elsewhere: every account may register). Owner only, any time.
    function allowClients(address[] calldata accounts) external onlyOwner {
        for (uint256 i = 0; i < accounts.length; ++i) {
            _allowedClients[accounts[i]] = true;
        }
        emit ClientsAllowed(accounts);
    }

    /// @notice Registers the caller as a client; allowed at any time, once per address (with
    ///         `clientAllowlist`, only if the owner allowed it). Its
    ///         index (registration order) is what its signed records name (`SignedUpdate`).
    function registerClient() external {
        // INVARIANT: a task with an allowlist admits only the clients its owner allowed, so
        // sybils cannot fill its rounds.
        if (_clientAllowlist && !_allowedClients[msg.sender]) revert ClientNotAllowed(msg.sender);
        ClientState storage c = _clients[msg.sender];
        // INVARIANT: one registration per address.
        if (c.registered) revert ClientAlreadyRegistered(msg.sender);
        uint256 index = _clientCount;
        c.registered = true;
        c.index = SafeCast.toUint32(index);
        _clientCount = SafeCast.toUint32(index + 1);
        _clientKeys[index / 2] |= ClientRecords.clientKey(msg.sender) << (128 * (index % 2));
        // The first client of a bitmap word creates it (tagged "no round"), so registering an
        // update later rewrites a slot instead of creating one.
        uint256 word = index / ClientRecords.CLIENTS_PER_WORD;
        if (_updateWords[word] == 0) _updateWords[word] = ClientRecords.tagged(0, ClientRecords.NO_ROUND);
        emit ClientRegistered(msg.sender, index);
    }

    /// @notice Freezes the committee and opens round 1 at the current block.
    function start() external onlyOwner {
        // INVARIANT: the task starts once.
        if (_started) revert TaskAlreadyStarted();
        // INVARIANT: n >= 3f + 1 with f >= 1, so a quorum never needs the accused's signature.
        if (_aggregators.length < MIN_COMMITTEE) revert CommitteeTooSmall(_aggregators.length, MIN_COMMITTEE);
        _started = true;
        _currentRound = 1;
        _committeeSize = uint16(_aggregators.length);
        _rounds[1].openBlock = _blockNow();
        _liveAccumulators[0] = _ACCUMULATOR_MARK;
        _liveAccumulators[1] = _ACCUMULATOR_MARK;
        emit TaskStarted(_aggregators.length, block.number);
        emit RoundOpened(1, block.number);
    }

    // ------------------------------------------------------------------------------------
    // Round protocol
    // ------------------------------------------------------------------------------------

    /// @notice Registers the caller's update for `round`. The payload is stored off-chain
    ///         under `digest`; its index is its position in registration order. A client can
    ///         always register alone this way, whatever relayers do.
    /// @dev Collection closes when maxUpdates is reached, or once minUpdates is reached and
    ///      block.number >= max(openBlock + collectWindow, block of the minUpdates-th update).
    /// @param round Must be the current round.
    /// @param digest SHA-256 of the canonical update bytes (non-zero).
    /// @param numSamples Local training-set size used for weighting (non-zero).
    function submitUpdate(uint256 round, bytes32 digest, uint64 numSamples) external {
        RoundState storage rs = _currentRoundState(round);
        ClientState memory c = _clients[msg.sender];
        // INVARIANT: only registered clients contribute updates.
        if (!c.registered) revert NotClient(msg.sender);
        Intake memory t = _openIntake(round, rs, 1);
        _checkUpdate(digest, numSamples);
        // INVARIANT: at most one update per client per round.
        if (!_admitUpdate(t, c.index, msg.sender, digest, numSamples)) {
            revert UpdateAlreadySubmitted(round, msg.sender);
        }
        _closeIntake(t, rs);
    }

    /// @notice Registers a batch of clients' signed update records for `round`, in order.
    ///         Anyone may relay records (the round's aggregator, a relayer, a client). Each
    ///         record must carry a valid EIP-712 signature (`updateRecordDigest`) of a
    ///         registered client; a bad record reverts the whole batch. A record of a client
    ///         that already has an update this round (sent alone, in an earlier batch, or
    ///         earlier in this one) is skipped, as are the records left once collection
    ///         closes (maxUpdates reached mid-batch): a relayer racing a client that submits
    ///         alone never loses its batch. `UpdatesRegistered` lists what was accepted.
    /// @param round Must be the current round, collecting.
    /// @param records Packed records (`ClientRecords.UPDATE_RECORD_BYTES` each): client index
    ///        (4 bytes) || numSamples (8) || digest || r || vs, (r, vs) the client's EIP-2098
    ///        signature.
    function submitUpdates(uint256 round, bytes calldata records) external {
        RoundState storage rs = _currentRoundState(round);
        uint256 n = records.length / ClientRecords.UPDATE_RECORD_BYTES;
        // INVARIANT: a batch is a positive whole number of records.
        if (n == 0 || records.length % ClientRecords.UPDATE_RECORD_BYTES != 0) revert BadBatch(records.length);
        Intake memory t = _openIntake(round, rs, n);
        bytes32 separator = _domainSeparatorV4();
        uint256 clients = _clientCount;
        for (uint256 i = 0; i < n && t.closed == 0; ++i) {
            (uint256 index, uint64 numSamples, bytes32 digest, bytes32 r, bytes32 vs) =
                ClientRecords.updateRecordAt(records, i);
            _checkUpdate(digest, numSamples);
            bytes32 structHash = ClientRecords.updateStructHash(round, digest, numSamples);
            address client = _recordClient(i, clients, index, separator, structHash, r, vs);
            _admitUpdate(t, index, client, digest, numSamples);
        }
        _closeIntake(t, rs);
    }

    /// @notice EIP-712 digest a client signs for its update record of `round` under this
    ///         task's domain; equals adapters.records.update_record_digest.
    function updateRecordDigest(uint256 round, bytes32 digest, uint64 numSamples) external view returns (bytes32) {
        return _hashTypedDataV4(ClientRecords.updateStructHash(round, digest, numSamples));
    }

    /// @dev Bookkeeping of one registration transaction (one update or a batch), in memory so
    ///      that each slot it touches is read and written once.
    ///      Full-word fields: no masking on every access.
    struct Intake {
        uint256 round;
        uint256 openBlock;
        uint256 closeBlock;
        uint256 closed; // 1 once collection closed
        uint256 wordDirty; // 1 if `word` has bits not written back yet
        uint256 acc;
        uint256 count;
        uint256 firstIndex;
        uint256 wordIndex; // bitmap word held in `word` (type(uint256).max: none yet)
        uint256 word; // its client bits for `round`
        uint256 entryOffset; // where the next accepted update goes in `entries`
        bytes entries; // the accepted updates, packed as in UpdatesRegistered
    }

    /// @dev Starts registering up to `capacity` updates of the current `round`.
    function _openIntake(uint256 round, RoundState storage rs, uint256 capacity) private view returns (Intake memory t) {
        // INVARIANT: updates are accepted only while collection is open.
        if (_collectionClosed(rs)) revert CollectionClosed(round, rs.closeBlock);
        t.round = round;
        t.openBlock = rs.openBlock;
        t.closeBlock = rs.closeBlock;
        t.acc = _liveAccumulators[round % 2] ^ _ACCUMULATOR_MARK;
        t.count = rs.updateCount;
        t.firstIndex = t.count;
        t.wordIndex = type(uint256).max;
        // 32 bytes of slack: writeUpdateEntry writes whole words
        t.entries = new bytes(capacity * ClientRecords.UPDATE_ENTRY_BYTES + 32);
    }

    /// @dev Reverts unless an update record's fields are acceptable.
    function _checkUpdate(bytes32 digest, uint64 numSamples) private view {
        // INVARIANT: an update carries weight.
        if (numSamples == 0) revert ZeroSamples();
        // INVARIANT: no update weighs more than maxSamples (so no sum of weights overflows).
        if (numSamples > _maxSamples) revert SamplesOutOfRange(numSamples, _maxSamples);
        // INVARIANT: an update is content-addressed.
        if (digest == bytes32(0)) revert ZeroDigest();
    }

    /// @dev Appends the update of client `index` unless that client already has one this round
    ///      (returns false). Collection must be open (`t.closed` false).
    function _admitUpdate(Intake memory t, uint256 index, address client, bytes32 digest, uint64 numSamples)
        private
        returns (bool)
    {
        uint256 w = index / ClientRecords.CLIENTS_PER_WORD;
        if (w != t.wordIndex) {
            _flushWord(t);
            t.wordIndex = w;
            t.word = ClientRecords.bitsFor(_updateWords[w], t.round);
        }
        uint256 bit = uint256(1) << (index % ClientRecords.CLIENTS_PER_WORD);
        uint256 word = t.word;
        // INVARIANT: at most one update per client per round (the caller decides whether a
        // second one is refused or skipped).
        if (word & bit != 0) return false;
        t.word = word | bit;
        t.wordDirty = 1;
        uint256 offset = t.entryOffset;
        ClientRecords.writeUpdateEntry(t.entries, offset, client, digest, numSamples);
        t.entryOffset = offset + ClientRecords.UPDATE_ENTRY_BYTES;
        t.acc = ClientRecords.extendUpdates(uint224(t.acc), client, digest, numSamples);
        uint256 count = t.count + 1;
        t.count = count;
        if (count == _minUpdates || count == _maxUpdates) {
            uint256 windowEnd = t.openBlock + _collectWindow;
            t.closeBlock = count == _maxUpdates || windowEnd <= block.number ? block.number : windowEnd;
            if (block.number >= t.closeBlock) t.closed = 1;
        }
        return true;
    }

    function _flushWord(Intake memory t) private {
        if (t.wordDirty != 0) {
            _updateWords[t.wordIndex] = ClientRecords.tagged(t.word, t.round);
            t.wordDirty = 0;
        }
    }

    /// @dev Writes what `t` accepted (bitmap word, accumulator and count, close block) and
    ///      emits it; a transaction that accepted nothing changes nothing.
    function _closeIntake(Intake memory t, RoundState storage rs) private {
        _flushWord(t);
        uint256 accepted = t.count - t.firstIndex;
        if (accepted == 0) return;
        _liveAccumulators[t.round % 2] = t.acc ^ _ACCUMULATOR_MARK;
        rs.updateCount = SafeCast.toUint32(t.count);
        if (t.closeBlock != rs.closeBlock) rs.closeBlock = SafeCast.toUint40(t.closeBlock);
        bytes memory entries = t.entries;
        uint256 length = accepted * ClientRecords.UPDATE_ENTRY_BYTES;
        assembly ("memory-safe") {
            mstore(entries, length) // shrink to the accepted entries
        }
        emit UpdatesRegistered(t.round, t.firstIndex, t.acc, entries);
    }

    /// @dev The client with index `index` (of `clients` registered), if it signed record `i`
    ///      (`structHash` under the domain `separator`); reverts otherwise. Shared by every
    ///      kind of signed client record.
    function _recordClient(
        uint256 i,
        uint256 clients,
        uint256 index,
        bytes32 separator,
        bytes32 structHash,
        bytes32 r,
        bytes32 vs
    ) private view returns (address signer) {
        // INVARIANT: a record names a registered client.
        if (index >= clients) revert UnknownClient(i, index);
        bool malleable;
        (signer, malleable) = ClientRecords.recoverCompact(ClientRecords.typedDataDigest(separator, structHash), r, vs);
        // INVARIANT: only well-formed, non-malleable signatures count.
        if (malleable) revert InvalidSignature(i, uint8(ECDSA.RecoverError.InvalidSignatureS));
        if (signer == address(0)) revert InvalidSignature(i, uint8(ECDSA.RecoverError.InvalidSignature));
        uint256 key = (_clientKeys[index / 2] >> (128 * (index % 2))) & type(uint128).max;
        // INVARIANT: a record counts only if the client it names signed it, for this round,
        // task and chain (anything else recovers an unrelated address).
        if (key != ClientRecords.clientKey(signer)) revert WrongSigner(i, index, signer);
    }

    /// @notice Attests that the caller fetched and pinned the updates of `round` whose bits are
    ///         set in `bitmap` (bit i of word w is update 256 * w + i, registration order), so
    ///         it serves them to its peers. One attestation per member per round. The round's
    ///         included set is fixed once n - f members attested, or at `attestEnd`
    ///         (closeBlock + attestWindow): the updates attested by at least f + 1 members,
    ///         hence held by at least one correct member (`includedUpdates`).
    /// @param round Must be the current round, with collection closed and attestation open.
    /// @param bitmap ceil(updateCount / 256) words; bits past updateCount must be zero.
    function attest(uint256 round, uint256[] calldata bitmap) external {
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: the set of updates to attest is final only once collection has closed.
        if (!_collectionClosed(rs)) revert CollectionNotClosed(round, rs.updateCount, rs.closeBlock);
        uint256 attestEnd = uint256(rs.closeBlock) + _attestWindow;
        // INVARIANT: the included set never changes once fixed (n - f attestations, or the
        // attestation window has passed).
        if (_availabilityFixed(rs)) revert AttestationClosed(round, rs.attestCount, attestEnd);
        AggregatorState storage info = _aggregatorState[msg.sender];
        // INVARIANT: only committee members attest (they serve payloads to each other).
        if (!info.registered) revert NotAggregator(msg.sender);
        // INVARIANT: a slashed member has no say in what is included.
        if (info.slashed) revert AggregatorIsSlashed(msg.sender);
        uint256 bit = 1 << info.index;
        // INVARIANT: one attestation per member per round.
        if (rs.attestMask & bit != 0) revert AlreadyAttested(round, msg.sender);
        uint256 count = rs.updateCount;
        uint256 words = (count + 255) >> 8;
        // INVARIANT: a bitmap covers exactly the registered updates.
        if (bitmap.length != words || (count & 255 != 0 && bitmap[words - 1] >> (count & 255) != 0)) {
            revert BadBitmap(words, bitmap.length);
        }

        mapping(uint256 => uint256) storage mine = _attestations[round][info.index];
        for (uint256 w = 0; w < words; ++w) {
            if (bitmap[w] != 0) mine[w] = bitmap[w];
        }
        rs.attestMask |= bit;
        uint16 attested = rs.attestCount + 1;
        rs.attestCount = attested;
        // n - f attestations fix the included set now: attempt 0 starts at this block.
        if (attested == Quorums.commitQuorum(_committeeSize)) rs.attemptStart = _blockNow();
        emit UpdatesAttested(round, msg.sender, attested);
    }

    /// @notice Submits the aggregate for the current attempt of `round`, bonding exactly
    ///         `aggregateBond`. Opens the challenge window until submitBlock + challengeWindow.
    /// @param round Must be the current round, with collection closed.
    /// @param digest SHA-256 of the canonical bytes of the new global model (non-zero).
    /// @param stop The task's stopping rule ends the task with this round (re-executed and
    ///        challengeable like the digest; a finalized stop completes the task).
    function submitAggregate(uint256 round, bytes32 digest, bool stop) external payable {
        RoundState storage rs = _currentRoundState(round);
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

    /// @notice Moves `round` to its next attempt after the chosen aggregator missed its
    ///         deadline, burning min(timeoutPenalty, stake) of the laggard's stake (credited to
    ///         address(0), which nobody can withdraw). An aggregator whose stake falls below `aggregatorStake` is
    ///         skipped by the rotation until it calls `topUpStake`. Callable by anyone.
    /// @param round Must be the current round, aggregating, with no submission this attempt.
    function advanceAttempt(uint256 round) external {
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: attempts exist only once the included set is fixed.
        _requireAggregating(round, rs);
        // INVARIANT: a submitted aggregate is never skipped.
        if (rs.status != Phase.Pending) revert AggregateAlreadySubmitted(round, rs.attempt);
        (address laggard,, uint256 deadline) = _chosen(round, rs);
        // INVARIANT: the chosen aggregator keeps its slot until the deadline has passed.
        if (block.number <= deadline) revert DeadlineNotPassed(round, rs.attempt, deadline);

        uint256 penalty = 0;
        if (laggard != address(0)) {
            AggregatorState storage info = _aggregatorState[laggard];
            penalty = _timeoutPenalty < info.stake ? _timeoutPenalty : info.stake;
            info.stake -= uint128(penalty); // penalty <= stake < 2**128
            _credit(_BURN, penalty);
        }
        uint24 newAttempt = rs.attempt + 1;
        rs.attempt = newAttempt;
        rs.attemptStart = _blockNow();
        emit AttemptAdvanced(round, newAttempt, laggard, penalty);
    }

    /// @notice Makes the submitted aggregate of `round` the global model once its challenge
    ///         window has passed, credits the bond back to the submitter and opens the next
    ///         round (or completes the task). Callable by anyone.
    /// @param round Must be the current round with a submitted aggregate.
    function finalize(uint256 round) external {
        // INVARIANT: a finalized round is immutable.
        if (_rounds[round].status == Phase.Finalized) revert RoundAlreadyFinalized(round);
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: a disputed aggregate waits for the committee's verdict.
        if (rs.status == Phase.Disputed) revert DisputeOpen(round, rs.challenger);
        // INVARIANT: only a submitted (and undisputed) aggregate can be finalized.
        if (rs.status != Phase.Submitted) revert NoAggregateSubmitted(round);
        uint256 challengeDeadline = uint256(rs.submitBlock) + _challengeWindow;
        // INVARIANT: challenges are allowed iff block.number <= challengeDeadline, so
        // finalization waits until the window has fully passed.
        if (block.number <= challengeDeadline) revert ChallengeWindowOpen(round, challengeDeadline);

        bytes32 digest = rs.aggregateDigest;
        address aggregator = _aggregators[rs.aggregatorIndex];
        rs.status = Phase.Finalized;
        _credit(aggregator, _aggregateBond);
        emit RoundFinalized(round, digest, aggregator);
        _openNext(round, digest, rs.stop);
    }

    /// @notice Ends `round` without an aggregate when its collection timed out short of
    ///         minUpdates (block.number > openBlock + collectWindow + collectTimeout): the
    ///         round is Finalized with the previous global model's digest (carried forward)
    ///         and the next round opens. The updates registered for it never count. Callable
    ///         by anyone.
    /// @param round Must be the current round, still collecting.
    function skipRound(uint256 round) external {
        RoundState storage rs = _currentRoundState(round);
        uint256 timeoutBlock = uint256(rs.openBlock) + _collectWindow + _collectTimeout;
        // INVARIANT: only a round that never reached minUpdates, after its collection timeout,
        // is skipped (a closed collection always leads to an aggregate or an attempt).
        if (rs.closeBlock != 0 || block.number <= timeoutBlock) revert CollectionNotTimedOut(round, timeoutBlock);
        bytes32 digest = round == 1 ? _initialModelDigest : _rounds[round - 1].aggregateDigest;
        rs.status = Phase.Finalized;
        rs.aggregateDigest = digest;
        emit RoundSkipped(round, rs.updateCount, digest);
        _openNext(round, digest, false);
    }

    /// @dev Opens the round after `round` (whose global model is `digest`), or completes the
    ///      task after the last one or a finalized stop.
    function _openNext(uint256 round, bytes32 digest, bool stop) private {
        if (stop || round == _numRounds) {
            _completed = true;
            emit TaskCompleted(round, digest);
        } else {
            uint256 next = round + 1;
            _currentRound = uint64(next);
            _rounds[next].openBlock = _blockNow();
            // round next - 2's accumulator (if any) is only in its events from now on
            _liveAccumulators[next % 2] = _ACCUMULATOR_MARK;
            emit RoundOpened(next, block.number);
        }
    }

    /// @notice Ends a task that made no progress for more than `abortTimeout` blocks: since
    ///         deployment if it never started, else since the current round opened. Bonds held
    ///         by the current round go back to their owners (nothing was proven), and from
    ///         then on every stake can be released (`releaseStake`) and every credit
    ///         withdrawn; no round function works any more. Callable by anyone.
    function abortTask() external {
        // INVARIANT: an ended task ends once.
        if (_completed) revert TaskAlreadyCompleted();
        uint256 round = _currentRound;
        RoundState storage rs = _rounds[round];
        uint256 abortBlock = uint256(rs.openBlock) + _abortTimeout; // round 0: the deployment block
        // INVARIANT: only a task without progress for abortTimeout blocks can be aborted.
        if (block.number <= abortBlock) revert TaskNotStalled(abortBlock);
        _completed = true;
        uint256 refunded = 0;
        Phase status = rs.status;
        if (status == Phase.Submitted || status == Phase.Disputed) {
            refunded = _aggregateBond;
            _credit(_aggregators[rs.aggregatorIndex], refunded);
            if (status == Phase.Disputed) {
                refunded += _challengeBond;
                _credit(rs.challenger, _challengeBond);
            }
        }
        emit TaskAborted(round, msg.sender, refunded);
    }

    // ------------------------------------------------------------------------------------
    // Dispute path
    // ------------------------------------------------------------------------------------

    /// @notice Challenges the aggregate submitted for `round`, bonding exactly `challengeBond`.
    ///         The round becomes Disputed until `resolveDispute` carries the committee's
    ///         verdict on-chain; meanwhile it cannot be finalized or challenged again.
    /// @dev Only a registered, non-slashed committee member other than the submitter may
    ///      challenge, and only while block.number <= submitBlock + challengeWindow.
    /// @param round Must be the current round with a submitted (undisputed) aggregate.
    function challenge(uint256 round) external payable {
        // INVARIANT: a finalized round is immutable.
        if (_rounds[round].status == Phase.Finalized) revert RoundAlreadyFinalized(round);
        RoundState storage rs = _currentRoundState(round);
        Phase status = rs.status;
        // INVARIANT: at most one open dispute per submission.
        if (status == Phase.Disputed) revert DisputeOpen(round, rs.challenger);
        // INVARIANT: only a submitted aggregate can be challenged.
        if (status != Phase.Submitted) revert NoAggregateSubmitted(round);
        uint256 challengeDeadline = uint256(rs.submitBlock) + _challengeWindow;
        // INVARIANT: challenges are allowed iff block.number <= challengeDeadline (finalize
        // needs block.number > challengeDeadline), so the two never overlap.
        if (block.number > challengeDeadline) revert ChallengeWindowClosed(round, challengeDeadline);
        AggregatorState storage info = _aggregatorState[msg.sender];
        // INVARIANT: only committee members challenge (they are the PBFT replicas).
        if (!info.registered) revert NotAggregator(msg.sender);
        // INVARIANT: a slashed member has no say in disputes any more.
        if (info.slashed) revert AggregatorIsSlashed(msg.sender);
        // INVARIANT: nobody disputes its own aggregate.
        if (info.index == rs.aggregatorIndex) revert ChallengerIsSubmitter(msg.sender);
        uint256 bit = 1 << info.index;
        // INVARIANT: one challenge per member per submission (a frivolous challenger cannot
        // hold a good aggregate up again and again).
        if (rs.challengerMask & bit != 0) revert AlreadyChallenged(round, msg.sender);
        // INVARIANT: every challenge is backed by exactly the configured bond.
        if (msg.value != _challengeBond) revert WrongValue(_challengeBond, msg.value);

        rs.status = Phase.Disputed;
        rs.challengerMask |= bit;
        rs.challenger = msg.sender;
        rs.challengeBlock = _blockNow();
        emit Challenged(round, rs.attempt, msg.sender, rs.aggregateDigest);
    }

    /// @notice Applies the committee's certified verdict on the disputed aggregate of `round`.
    ///         Callable by anyone holding the certificate.
    ///         faulty == true: the submitter is slashed (its whole remaining stake plus the
    ///         aggregate bond; permanently out of the rotation and of future quorums), the
    ///         challenger is credited its bond back plus half the slashed amount (rounded down),
    ///         the other half is burned, and the round re-opens at attempt + 1
    ///         starting at this block for the next aggregator in rotation.
    ///         faulty == false: the challenge bond is burned (not paid to the submitter, which
    ///         could be the challenger's accomplice) and the round returns to Submitted; it can be finalized once block.number >
    ///         challengeDeadline and challenged again until then, by other members only (one
    ///         challenge per member per submission).
    /// @dev The certificate: one 65-byte signature (r ‖ s ‖ v, low s, v in {27, 28}) per signer
    ///      over `verdictDigest(round, attempt, aggregateDigest, faulty, viewNumber)`. Recovered
    ///      signers must be registered, non-slashed committee members in strictly increasing
    ///      address order (so no duplicates), at least `commitQuorum()` of them.
    /// @param round Must be the current round, Disputed.
    /// @param attempt Must equal the attempt of the disputed submission.
    /// @param faulty The committee's verdict (true: the aggregate is wrong).
    /// @param viewNumber PBFT view in which the verdict committed (bound by the signatures).
    /// @param signatures Signatures sorted by recovered signer address, ascending.
    function resolveDispute(
        uint256 round,
        uint256 attempt,
        bool faulty,
        uint256 viewNumber,
        bytes[] calldata signatures
    ) external {
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: a verdict needs an open dispute.
        if (rs.status != Phase.Disputed) revert NoOpenDispute(round);
        // INVARIANT: a certificate only settles the submission it was made for.
        if (attempt != rs.attempt) revert AttemptMismatch(round, rs.attempt, attempt);
        uint256 disputeDeadline = uint256(rs.challengeBlock) + _disputeTimeout;
        // INVARIANT: resolveDispute is allowed iff block.number <= disputeDeadline and
        // expireDispute iff block.number > disputeDeadline, so the two never overlap.
        if (block.number > disputeDeadline) revert DisputeTimedOut(round, disputeDeadline);
        _verifyCertificate(verdictDigest(round, attempt, rs.aggregateDigest, faulty, viewNumber), signatures);

        address challenger = rs.challenger;
        rs.challenger = address(0);
        rs.challengeBlock = 0;
        if (faulty) {
            _rejectAggregate(round, rs, challenger, viewNumber);
        } else {
            _upholdAggregate(round, rs, challenger, viewNumber);
        }
    }

    /// @notice Discards the disputed aggregate of `round` once its dispute has gone unresolved
    ///         for more than `disputeTimeout` blocks (no certificate of n - f eligible members
    ///         could be formed). Nothing was proven: nobody is slashed, the submitter's bond is
    ///         refunded and the challenge bond burned, so a challenger that stalls the
    ///         committee cannot cost the submitter anything, and nobody gains from it. The round
    ///         re-opens at attempt + 1 for the next aggregator in rotation. Callable by anyone.
    /// @param round Must be the current round, Disputed, with block.number > disputeDeadline.
    function expireDispute(uint256 round) external {
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: only an open dispute can expire.
        if (rs.status != Phase.Disputed) revert NoOpenDispute(round);
        uint256 disputeDeadline = uint256(rs.challengeBlock) + _disputeTimeout;
        // INVARIANT: expiry needs block.number > disputeDeadline (see resolveDispute).
        if (block.number <= disputeDeadline) revert DisputeNotTimedOut(round, disputeDeadline);

        address submitter = _aggregators[rs.aggregatorIndex];
        address challenger = rs.challenger;
        uint32 attempt = rs.attempt;
        uint256 burned = _challengeBond;
        rs.challenger = address(0);
        rs.challengeBlock = 0;
        // INVARIANT: an aggregate whose dispute expired is never finalized.
        _reopen(rs);
        // Nothing was proven: the submitter's bond comes back; the challenge bond is burned
        // (never paid to anyone, so neither side can profit from stalling the committee).
        _credit(submitter, _aggregateBond);
        _credit(_BURN, burned);
        emit DisputeExpired(round, attempt, submitter, challenger, burned);
    }

    /// @notice Slashes a committee member that signed two conflicting PBFT messages under this
    ///         task's EIP-712 domain: two `PrePrepare`s (kind 0) or two `Prepare`s (kind 1) for
    ///         the same view and sequence number with different content, or two
    ///         `DisputeVerdict` commits (kind 2) for the same dispute and view with opposite
    ///         verdicts. A correct replica never signs such a pair (docs/pbft.md). The member
    ///         loses its whole stake and leaves the rotation and the quorums; the caller is
    ///         credited half of the stake (rounded down), the rest is burned. Anyone may call.
    ///         If the member was chosen for the current attempt, the attempt restarts (the
    ///         next member gets a whole submitTimeout, not the slashed one's deadline).
    /// @param kind 0 PrePrepare, 1 Prepare, 2 DisputeVerdict.
    /// @param viewNumber The PBFT view both messages name.
    /// @param seq The sequence number both messages name (ignored for kind 2, which has none).
    function slashEquivocation(
        uint8 kind,
        uint256 viewNumber,
        uint256 seq,
        SignedVote calldata a,
        SignedVote calldata b
    ) external {
        // The evidence checks (kind, conflict, both signatures, one signer) run in `_evidence`,
        // which takes this call's arguments as they are (same signature).
        (seq, a, b); // forwarded in msg.data
        // slither-disable-next-line low-level-calls
        (bool ok, bytes memory ret) = address(_evidence).staticcall(msg.data);
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(ret, 32), mload(ret))
            }
        }
        address signer = abi.decode(ret, (address));
        // INVARIANT: only committee members can be slashed.
        if (!_aggregatorState[signer].registered) revert SignerNotMember(0, signer);
        AggregatorState storage info = _aggregatorState[signer];
        // INVARIANT: a member is slashed at most once.
        if (info.slashed) revert AggregatorIsSlashed(signer);

        _restartAttemptOf(signer);
        uint256 amount = info.stake;
        uint256 reward = amount / 2;
        info.stake = 0;
        info.slashed = true;
        _credit(msg.sender, reward);
        _credit(_BURN, amount - reward);
        emit Slashed(signer, amount);
        emit EquivocationSlashed(signer, kind, viewNumber, msg.sender, reward, amount - reward);
    }

    /// @dev If `member` is the aggregator chosen for the current attempt of a running round
    ///      with no submission, opens attempt + 1 at this block (call before slashing it), so
    ///      the next member in rotation gets a whole submitTimeout instead of its old deadline.
    function _restartAttemptOf(address member) private {
        uint256 round = _currentRound;
        if (!_started || _completed) return;
        RoundState storage rs = _rounds[round];
        if (rs.status != Phase.Pending || !_collectionClosed(rs) || !_availabilityFixed(rs)) return;
        (address chosen,,) = _chosen(round, rs);
        if (chosen != member) return;
        uint24 newAttempt = rs.attempt + 1;
        rs.attempt = newAttempt;
        rs.attemptStart = _blockNow();
        emit AttemptAdvanced(round, newAttempt, member, 0);
    }

    /// @dev Faulty verdict: slash the submitter, split the slashed amount, re-open the round.
    function _rejectAggregate(uint256 round, RoundState storage rs, address challenger, uint256 viewNumber) private {
        address submitter = _aggregators[rs.aggregatorIndex];
        uint32 attempt = rs.attempt;
        AggregatorState storage sub = _aggregatorState[submitter];
        uint256 slashedAmount = sub.stake + _aggregateBond;
        // INVARIANT: the challenger gets at most half of what is slashed, so challenging one's
        // own aggregate through a second identity loses the other half.
        uint256 reward = slashedAmount / 2;
        uint256 treasuryAmount = slashedAmount - reward;
        sub.stake = 0;
        sub.slashed = true;
        // INVARIANT: a rejected aggregate never counts; the next attempt starts now and the
        // rotation skips the slashed submitter.
        _reopen(rs);
        _credit(challenger, _challengeBond + reward);
        _credit(_BURN, treasuryAmount);
        emit Slashed(submitter, slashedAmount);
        emit DisputeResolved(round, attempt, true, viewNumber, challenger, slashedAmount, reward, treasuryAmount);
    }

    /// @dev Not-faulty verdict: the forfeited challenge bond is burned (paying it to the
    ///      submitter would let a colluding pair stall rounds for free), the aggregate stands.
    function _upholdAggregate(uint256 round, RoundState storage rs, address challenger, uint256 viewNumber) private {
        uint256 bond = _challengeBond;
        rs.status = Phase.Submitted;
        _credit(_BURN, bond);
        emit DisputeResolved(round, rs.attempt, false, viewNumber, challenger, 0, 0, bond);
    }

    /// @notice EIP-712 digest the committee signs for a verdict: keccak256(0x1901 ‖
    ///         domainSeparator ‖ keccak256(abi.encode(DISPUTE_VERDICT_TYPEHASH, round, attempt,
    ///         aggregateDigest, faulty, viewNumber))); equals consensus.certificate.verdict_digest.
    function verdictDigest(uint256 round, uint256 attempt, bytes32 aggregateDigest, bool faulty, uint256 viewNumber)
        public
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(
            keccak256(abi.encode(DISPUTE_VERDICT_TYPEHASH, round, attempt, aggregateDigest, faulty, viewNumber))
        );
    }

    /// @notice Number of committee members (frozen at `start`).
    function committeeSize() external view returns (uint256) {
        return _aggregators.length;
    }

    /// @notice Signatures a dispute certificate needs: n - f with f = (n - 1) / 3 (`Quorums`).
    function commitQuorum() external view returns (uint256) {
        return Quorums.commitQuorum(_aggregators.length);
    }

    // ------------------------------------------------------------------------------------
    // Stakes and payments
    // ------------------------------------------------------------------------------------

    /// @notice Adds `msg.value` to the caller's aggregator stake. Restoring the stake to at
    ///         least `aggregatorStake` re-activates the aggregator for attempts that start
    ///         after this block.
    function topUpStake() external payable {
        AggregatorState storage info = _aggregatorState[msg.sender];
        // INVARIANT: only committee members hold stakes.
        if (!info.registered) revert NotAggregator(msg.sender);
        // INVARIANT: a slashed aggregator never re-enters the rotation.
        if (info.slashed) revert AggregatorIsSlashed(msg.sender);
        // INVARIANT: a top-up adds value.
        if (msg.value == 0) revert ZeroValue();
        uint256 threshold = _aggregatorStake;
        bool wasActive = info.stake >= threshold;
        uint256 newStake = info.stake + msg.value;
        info.stake = SafeCast.toUint128(newStake);
        bool active = newStake >= threshold;
        if (active && !wasActive) info.activeFrom = uint64(block.number);
        emit StakeToppedUp(msg.sender, msg.value, newStake, active);
    }

    /// @notice After the task has completed, moves the caller's remaining stake to its
    ///         credits (then `withdraw`).
    function releaseStake() external {
        // INVARIANT: stakes back the protocol until the last round is final.
        if (!_completed) revert TaskNotCompleted();
        AggregatorState storage info = _aggregatorState[msg.sender];
        uint256 amount = info.stake;
        // INVARIANT: nothing to release means nothing happens.
        if (amount == 0) revert NothingToWithdraw(msg.sender);
        info.stake = 0;
        _credit(msg.sender, amount);
        emit StakeReleased(msg.sender, amount);
    }

    /// @notice Pays the caller all of its credits.
    function withdraw() external nonReentrant {
        uint256 amount = _creditsOf(msg.sender);
        // INVARIANT: a withdrawal moves a positive amount.
        if (amount == 0) revert NothingToWithdraw(msg.sender);
        _creditsPlusOne[msg.sender] = 1;
        emit Withdrawal(msg.sender, amount);
        (bool ok,) = payable(msg.sender).call{value: amount}("");
        // INVARIANT: a failed transfer leaves the credits in place (the whole call reverts).
        if (!ok) revert TransferFailed(msg.sender, amount);
    }

    /// @notice Wei `account` can pull with `withdraw` (returned bonds, released stakes,
    ///         challenge rewards, forfeited challenge bonds). `credits(address(0))` is the total
    ///         burned (timeout penalties, slash remainders, expired challenge bonds): nobody can
    ///         withdraw it, and the owner is never credited anything.
    function credits(address account) external view returns (uint256) {
        return _creditsOf(account);
    }

    function _creditsOf(address account) private view returns (uint256) {
        uint256 stored = _creditsPlusOne[account];
        return stored == 0 ? 0 : stored - 1;
    }

    function _credit(address account, uint256 amount) private {
        uint256 stored = _creditsPlusOne[account];
        _creditsPlusOne[account] = (stored == 0 ? 1 : stored) + amount;
    }

    /// @notice Disabled: the task needs an owner to `start` it.
    function renounceOwnership() public view override onlyOwner {
        revert RenounceDisabled();
    }

    // ------------------------------------------------------------------------------------
    // Views
    // ------------------------------------------------------------------------------------

    /// @notice The aggregator chosen for the current attempt of the current round, the
    ///         attempt number and the last block at which it may submit. `aggregator` is
    ///         address(0) if no committee member is eligible for this attempt (then anyone
    ///         may `advanceAttempt` after the deadline).
    function currentAggregator() external view returns (address aggregator, uint256 attempt, uint256 deadlineBlock) {
        uint256 round = _currentRound;
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: no aggregator is chosen before the included set is fixed.
        _requireAggregating(round, rs);
        (aggregator,, deadlineBlock) = _chosen(round, rs);
        attempt = rs.attempt;
    }

    /// @notice The current round (1-based); 0 before `start`, the last round (numRounds, or
    ///         the round whose finalized stop completed the task) after completion.
    function currentRound() external view returns (uint256) {
        return _currentRound;
    }

    /// @notice Whether `start` has been called.
    function taskStarted() external view returns (bool) {
        return _started;
    }

    /// @notice Whether the last round has been finalized.
    function taskCompleted() external view returns (bool) {
        return _completed;
    }

    /// @notice Digest of the latest finalized global model (the initial model before).
    function globalModelDigest() external view returns (bytes32) {
        uint256 round = _currentRound;
        if (round == 0) return _initialModelDigest;
        // the current round's digest once it is final (the last round, task completed) ...
        if (_rounds[round].status == Phase.Finalized) return _rounds[round].aggregateDigest;
        // ... else the previous round's, or the initial model in round 1
        return round == 1 ? _initialModelDigest : _rounds[round - 1].aggregateDigest;
    }

    /// @notice Digest finalized for `round`, or zero if the round is not finalized.
    function roundDigest(uint256 round) external view returns (bytes32) {
        RoundState storage rs = _rounds[round];
        return rs.status == Phase.Finalized ? rs.aggregateDigest : bytes32(0);
    }

    /// @notice Current phase of `round` (Pending for rounds not opened yet).
    function phase(uint256 round) public view returns (Phase) {
        if (round == 0 || round > _currentRound) return Phase.Pending;
        RoundState storage rs = _rounds[round];
        if (rs.status != Phase.Pending) return rs.status;
        if (!_collectionClosed(rs)) return Phase.Collecting;
        return _availabilityFixed(rs) ? Phase.Aggregating : Phase.Attesting;
    }

    /// @notice Full state of `round` with lazily derived fields resolved.
    function getRound(uint256 round) external view returns (RoundInfo memory info) {
        RoundState storage rs = _rounds[round];
        info.phase = phase(round);
        if (info.phase == Phase.Pending) return info;
        bool fixed_ = _collectionClosed(rs) && _availabilityFixed(rs);
        uint64 attemptStart = _attemptStart(rs);
        info.openBlock = rs.openBlock;
        info.closeBlock = rs.closeBlock;
        info.collectionClosed = _collectionClosed(rs);
        info.updateCount = rs.updateCount;
        info.attempt = rs.attempt;
        info.attemptStart = fixed_ ? attemptStart : 0;
        info.deadlineBlock = fixed_ ? attemptStart + uint64(_submitTimeout) : 0;
        info.attestCount = rs.attestCount;
        info.attestEnd = rs.closeBlock == 0 ? 0 : rs.closeBlock + uint64(_attestWindow);
        info.availabilityFixed = fixed_;
        info.finalized = rs.status == Phase.Finalized;
        if (rs.status != Phase.Pending) {
            info.aggregator = _aggregators[rs.aggregatorIndex];
            info.aggregateDigest = rs.aggregateDigest;
            info.stop = rs.stop;
            info.submitBlock = rs.submitBlock;
            info.challengeDeadline = rs.submitBlock + uint64(_challengeWindow);
            info.submissionAttempt = rs.attempt;
            info.submissionUpdateCount = rs.updateCount;
            info.challenger = rs.challenger;
            info.challengeBlock = rs.challengeBlock;
            if (rs.status == Phase.Disputed) {
                info.disputeDeadline = rs.challengeBlock + uint64(_disputeTimeout);
            }
        }
    }

    /// @notice The accumulator over the updates registered for `round` and their count: the
    ///         low 224 bits of a keccak hash chain from 0 (`ClientRecords.extendUpdates`). The
    ///         list itself is in the round's `UpdatesRegistered` events; a node rebuilds it and
    ///         checks it against this. Kept for the current and the previous round only (the
    ///         last `UpdatesRegistered` event of an earlier round carries its final value, and
    ///         `getRound(round).updateCount` its length); (0, 0) for a round not opened yet.
    function updateAccumulator(uint256 round) external view returns (uint256 accumulator, uint256 count) {
        uint256 current = _currentRound;
        // INVARIANT: only the current and the previous round's accumulators are kept.
        if (round + 1 < current) revert AccumulatorForgotten(round, current);
        if (round == 0 || round > current) return (0, 0);
        return (_liveAccumulators[round % 2] ^ _ACCUMULATOR_MARK, _rounds[round].updateCount);
    }

    /// @notice Whether `client` has an update registered for `round`, which must be the current
    ///         round (earlier rounds: the `UpdatesRegistered` events).
    function updateSubmitted(uint256 round, address client) external view returns (bool) {
        // INVARIANT: the bitmap words only remember the latest round that wrote them.
        if (round != _currentRound) revert RoundNotOpen(round, _currentRound);
        ClientState memory c = _clients[client];
        if (!c.registered) return false;
        uint256 bits = ClientRecords.bitsFor(_updateWords[c.index / ClientRecords.CLIENTS_PER_WORD], round);
        return bits & (uint256(1) << (c.index % ClientRecords.CLIENTS_PER_WORD)) != 0;
    }

    /// @notice The included set of `round` as a bitmap over its registered updates (bit i of
    ///         word w is update 256 * w + i): the updates attested by at least f + 1 members
    ///         (every update if `attestWindow` is 0). Final once `availabilityFixed` (getRound).
    ///         Computed by `_evidence` (code size) from this contract's `attestation` views.
    function includedUpdates(uint256 round) external view returns (uint256[] memory included) {
        (round, included); // forwarded in msg.data, returned as the helper returns it
        address helper = address(_evidence);
        // Calls `_evidence` with this call's calldata and returns (or reverts with) exactly
        // what it returns.
        assembly ("memory-safe") {
            let ptr := mload(0x40)
            calldatacopy(ptr, 0, calldatasize())
            let ok := staticcall(gas(), helper, ptr, calldatasize(), 0, 0)
            returndatacopy(ptr, 0, returndatasize())
            if iszero(ok) { revert(ptr, returndatasize()) }
            return(ptr, returndatasize())
        }
    }

    /// @notice The bitmap committee member `member` (by index) attested for `round` (all zero
    ///         if it did not attest): where to fetch an included update from.
    function attestation(uint256 round, uint256 member) external view returns (uint256[] memory bitmap) {
        bitmap = new uint256[]((uint256(_rounds[round].updateCount) + 255) >> 8);
        for (uint256 w = 0; w < bitmap.length; ++w) {
            bitmap[w] = _attestations[round][member][w];
        }
    }

    /// @notice Number of updates registered for `round`.
    function updateCount(uint256 round) external view returns (uint256) {
        return _rounds[round].updateCount;
    }

    /// @notice The committee in registration order.
    function aggregators() external view returns (address[] memory) {
        return _aggregators;
    }

    /// @notice Stake and status of `account` as an aggregator. `active` means the stake is at
    ///         least `aggregatorStake` and it is not slashed; `activeFrom` is the block of its
    ///         last re-activation (it is eligible for attempts starting after that block).
    function aggregatorInfo(address account)
        external
        view
        returns (bool registered, bool active, bool slashed, uint256 stake, uint256 index, uint256 activeFrom)
    {
        AggregatorState storage info = _aggregatorState[account];
        return (
            info.registered,
            _isActive(info),
            info.slashed,
            info.stake,
            info.index,
            info.activeFrom
        );
    }

    /// @notice Whether `account` is a registered client, and its index (what its signed
    ///         records name).
    function clientInfo(address account) external view returns (bool registered, uint256 index) {
        ClientState memory c = _clients[account];
        return (c.registered, c.index);
    }

    /// @notice Number of registered clients.
    function clientCount() external view returns (uint256) {
        return _clientCount;
    }

    /// @notice The task parameters.
    function config() external view returns (TaskConfig memory) {
        uint256[_CONFIG_WORDS] memory words = _configWords;
        assembly ("memory-safe") {
            return(words, mul(_CONFIG_WORDS, 32))
        }
    }

    // ------------------------------------------------------------------------------------
    // Internals
    // ------------------------------------------------------------------------------------

    /// @dev Storage of `round`, which must be the current round of a running task.
    function _currentRoundState(uint256 round) private view returns (RoundState storage) {
        // INVARIANT: nothing happens in rounds before the task starts.
        if (!_started) revert TaskNotStarted();
        // INVARIANT: nothing happens in rounds after the task completes.
        if (_completed) revert TaskAlreadyCompleted();
        // INVARIANT: only the current round is open.
        if (round != _currentRound) revert RoundNotOpen(round, _currentRound);
        return _rounds[round];
    }

    /// @dev Reverts unless `signatures` certify `digest`: all valid (OpenZeppelin ECDSA: 65
    ///      bytes, low s, v in {27, 28}), recovered signers registered and not slashed, strictly
    ///      increasing, and at least commitQuorum(n) of them (n frozen at start).
    function _verifyCertificate(bytes32 digest, bytes[] calldata signatures) private view {
        uint256 quorum = Quorums.commitQuorum(_committeeSize);
        uint256 count = signatures.length;
        // INVARIANT: a certificate carries at least n - f distinct member signatures (checked
        // up front; every entry must then be valid, so count == distinct valid signers).
        if (count < quorum) revert QuorumNotReached(count, quorum);
        address previous = address(0);
        uint256 valid = 0;
        for (uint256 i = 0; i < count; ++i) {
            // The third return value (the error's argument) adds nothing to `err`.
            // slither-disable-next-line unused-return
            (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecoverCalldata(digest, signatures[i]);
            // INVARIANT: only well-formed, non-malleable signatures count.
            if (err != ECDSA.RecoverError.NoError) revert InvalidSignature(i, uint8(err));
            AggregatorState storage info = _aggregatorState[signer];
            // INVARIANT: only committee members vote (a signature over other data recovers a
            // stranger).
            if (!info.registered) revert SignerNotMember(i, signer);
            // INVARIANT: signers are strictly increasing, so each member counts once.
            if (signer <= previous) {
                if (signer == previous) revert DuplicateSigner(i, signer);
                revert SignersNotSorted(i, previous, signer);
            }
            previous = signer;
            // INVARIANT: a slashed member's vote no longer counts, but it does not void the
            // others' (a signer slashed after signing cannot sink a quorum).
            if (!info.slashed) ++valid;
        }
        if (valid < quorum) revert QuorumNotReached(valid, quorum);
    }

    /// @dev Reverts unless `round` is past collection and attestation (aggregation phase).
    function _requireAggregating(uint256 round, RoundState storage rs) private view {
        if (!_collectionClosed(rs)) revert CollectionNotClosed(round, rs.updateCount, rs.closeBlock);
        if (!_availabilityFixed(rs)) {
            revert AttestationOpen(round, rs.attestCount, uint256(rs.closeBlock) + _attestWindow);
        }
    }

    /// @dev Whether the included set of a round whose collection closed is fixed: n - f
    ///      members attested, or block.number >= closeBlock + attestWindow.
    function _availabilityFixed(RoundState storage rs) private view returns (bool) {
        return rs.attestCount >= Quorums.commitQuorum(_committeeSize)
            || block.number >= uint256(rs.closeBlock) + _attestWindow;
    }

    /// @dev Start block of the current attempt: attempt 0 starts when the included set was
    ///      fixed (the (n - f)-th attestation, else closeBlock + attestWindow).
    function _attemptStart(RoundState storage rs) private view returns (uint40) {
        if (rs.attempt != 0 || rs.attestCount >= Quorums.commitQuorum(_committeeSize)) {
            return rs.attemptStart;
        }
        return rs.closeBlock + uint40(_attestWindow);
    }

    /// @dev Discards the current submission and opens attempt + 1 at this block.
    function _reopen(RoundState storage rs) private {
        rs.status = Phase.Pending;
        rs.aggregatorIndex = 0;
        rs.submitBlock = 0;
        rs.aggregateDigest = bytes32(0);
        rs.attempt += 1;
        rs.attemptStart = _blockNow();
        delete rs.challengerMask;
    }

    function _blockNow() private view returns (uint40) {
        return SafeCast.toUint40(block.number);
    }

    function _collectionClosed(RoundState storage rs) private view returns (bool) {
        uint256 closeBlock = rs.closeBlock;
        return closeBlock != 0 && block.number >= closeBlock;
    }

    function _isActive(AggregatorState storage info) private view returns (bool) {
        return info.registered && !info.slashed && info.stake >= _aggregatorStake;
    }

    /// @dev Chosen aggregator and deadline for the current attempt of `round` (collection must
    ///      be closed). Walks forward cyclically from the rotation start index to the first
    ///      aggregator that is active and was already active when the attempt started, so a
    ///      mid-attempt top-up never changes who is chosen.
    function _chosen(uint256 round, RoundState storage rs)
        private
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
}
