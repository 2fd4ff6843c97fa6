// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {Quorums} from "./lib/Quorums.sol";
import {Rotation} from "./lib/Rotation.sol";
import {Availability} from "./lib/Availability.sol";
import {ClientRecords} from "./lib/ClientRecords.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {EquivocationEvidence} from "./lib/EquivocationEvidence.sol";
import {EVIDENCE_CODEHASH} from "./lib/EvidenceCodeHash.sol";
import {FedChainTaskStorage, IFaultGamesHook} from "./FedChainTaskStorage.sol";
import {TaskDisputes} from "./TaskDisputes.sol";

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
///         Code layout: the types, errors, events and state are in `FedChainTaskStorage`;
///         the dispute path (`challenge`, `resolveDispute`, `expireDispute`,
///         `slashEquivocation`) runs in `TaskDisputes`, a module this task creates and
///         DELEGATECALLs (same storage, same address for events and payments, same errors),
///         so that the task stays under the EIP-170 code size limit.
contract FedChainTask is FedChainTaskStorage {
    /// @dev The dispute-path module (created by the constructor, executed by DELEGATECALL).
    TaskDisputes private immutable _disputes;

    // ------------------------------------------------------------------------------------
    // Construction and registration
    // ------------------------------------------------------------------------------------

    /// @notice Creates the task; the deployer becomes the owner. The EIP-712 domain of dispute
    ///         certificates is {name "FedChainTask", version "1", chainId, this contract}.
    /// @param cfg Task parameters; windows are in blocks.
    /// @param evidence The equivocation-evidence checker, deployed by a transaction of its own
    ///        before the task (EIP-3860: the task's init code has no room for its creation
    ///        code); any instance with the audited code serves (it keys all state by task).
    constructor(TaskConfig memory cfg, EquivocationEvidence evidence) FedChainTaskStorage(cfg, evidence) {
        // INVARIANT: the task trusts only the audited EquivocationEvidence code (whose code
        // hash adapters.compile generates), never code its deployer could choose.
        if (address(evidence).codehash != EVIDENCE_CODEHASH) {
            revert EvidenceCodeMismatch(address(evidence), address(evidence).codehash);
        }
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
        _creditsPlusOne[_BURN] = 1; // burns rewrite a slot instead of creating one
        _rounds[0].openBlock = _blockNow(); // round 0 (never used otherwise): abortTask's clock before start
        _disputes = new TaskDisputes(cfg, _evidence);
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
    function registerClient() external payable {
        // INVARIANT: a task with an allowlist admits only the clients its owner allowed, so
        // sybils cannot fill its rounds.
        if (_clientAllowlist && !_allowedClients[msg.sender]) revert ClientNotAllowed(msg.sender);
        ClientState storage c = _clients[msg.sender];
        // INVARIANT: one registration per address.
        if (c.registered) revert ClientAlreadyRegistered(msg.sender);
        // INVARIANT: a client locks exactly clientDeposit, so n sybils cost n deposits.
        if (msg.value != _clientDeposit) revert WrongValue(_clientDeposit, msg.value);
        if (msg.value != 0) {
            c.depositHeld = true;
            _depositsHeld += msg.value;
        }
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
    /// @param chunkRoot U_i: chunk root of the quantised update (`protocol.merkle`); the
    ///        fault-proof games open the update's chunks against it.
    function submitUpdate(uint256 round, bytes32 digest, uint64 numSamples, bytes32 chunkRoot) external {
        RoundState storage rs = _currentRoundState(round);
        ClientState memory c = _clients[msg.sender];
        // INVARIANT: only registered clients contribute updates.
        if (!c.registered) revert NotClient(msg.sender);
        Intake memory t = _openIntake(round, rs, 1);
        _checkUpdate(digest, numSamples);
        // INVARIANT: at most one update per client per round.
        if (!_admitUpdate(t, c.index, msg.sender, digest, numSamples, chunkRoot)) {
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
    ///         closes (maxUpdates reached mid-batch) or once the slots open in this block are
    ///         taken (`minCollectionBlocks`): a relayer racing a client that submits alone
    ///         never loses its batch. `UpdatesRegistered` lists what was accepted.
    /// @param round Must be the current round, collecting.
    /// @param records Packed records (`ClientRecords.UPDATE_RECORD_BYTES` each): client index
    ///        (4 bytes) || numSamples (8) || digest || chunkRoot || r || vs, (r, vs) the
    ///        client's EIP-2098 signature.
    function submitUpdates(uint256 round, bytes calldata records) external {
        RoundState storage rs = _currentRoundState(round);
        uint256 n = records.length / ClientRecords.UPDATE_RECORD_BYTES;
        // INVARIANT: a batch is a positive whole number of records.
        if (n == 0 || records.length % ClientRecords.UPDATE_RECORD_BYTES != 0) revert BadBatch(records.length);
        Intake memory t = _openIntake(round, rs, n);
        bytes32 separator = _domainSeparatorV4();
        uint256 clients = _clientCount;
        for (uint256 i = 0; i < n && t.closed == 0 && t.count < t.slots; ++i) {
            _relayUpdate(t, records, i, clients, separator);
        }
        _closeIntake(t, rs);
    }

    /// @dev Checks record `i` of a `submitUpdates` batch and admits it (or skips it).
    function _relayUpdate(Intake memory t, bytes calldata records, uint256 i, uint256 clients, bytes32 separator)
        private
    {
        (uint256 index, uint64 numSamples, bytes32 digest, bytes32 chunkRoot, bytes32 r, bytes32 vs) =
            ClientRecords.updateRecordAt(records, i);
        _checkUpdate(digest, numSamples);
        bytes32 structHash = ClientRecords.updateStructHash(t.round, digest, numSamples, chunkRoot);
        address client = _recordClient(i, clients, index, separator, structHash, r, vs);
        _admitUpdate(t, index, client, digest, numSamples, chunkRoot);
    }

    /// @notice EIP-712 digest a client signs for its update record of `round` under this
    ///         task's domain; equals adapters.records.update_record_digest.
    function updateRecordDigest(uint256 round, bytes32 digest, uint64 numSamples, bytes32 chunkRoot)
        external
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(ClientRecords.updateStructHash(round, digest, numSamples, chunkRoot));
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
        uint256 slots; // slots open in this block (see `_openIntake`)
    }

    /// @dev Starts registering up to `capacity` updates of the current `round`.
    function _openIntake(uint256 round, RoundState storage rs, uint256 capacity) private view returns (Intake memory t) {
        // INVARIANT: updates are accepted only while collection is open.
        if (_collectionClosed(rs)) revert CollectionClosed(round, rs.closeBlock);
        // INVARIANT: in its first minCollectionBlocks blocks a round opens its maxUpdates slots
        // progressively (ceil(maxUpdates * blocks open / minCollectionBlocks)), so one batch at
        // round open cannot take every slot and maxUpdates cannot close collection earlier.
        uint256 slots = _maxUpdates;
        uint256 m = _minCollectionBlocks;
        if (m != 0) {
            uint256 opened = block.number - rs.openBlock + 1;
            if (opened < m) slots = (slots * opened + m - 1) / m;
            if (rs.updateCount >= slots) revert SlotsNotOpen(round, slots);
        }
        t.slots = slots;
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
    function _admitUpdate(
        Intake memory t,
        uint256 index,
        address client,
        bytes32 digest,
        uint64 numSamples,
        bytes32 chunkRoot
    ) private returns (bool) {
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
        ClientRecords.writeUpdateEntry(t.entries, offset, client, digest, numSamples, chunkRoot);
        t.entryOffset = offset + ClientRecords.UPDATE_ENTRY_BYTES;
        t.acc = ClientRecords.extendUpdates(uint224(t.acc), client, digest, numSamples, chunkRoot);
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
    ///      On a fault-proof task (`setFaultGames`) use `submitAggregateWithClaim` (its
    ///      aggregates never stop the task: the games do not check the stopping rule).
    /// @param stop The task's stopping rule ends the task with this round (re-executed and
    ///        challengeable like the digest; a finalized stop completes the task).
    function submitAggregate(uint256 round, bytes32 digest, bool stop) external payable {
        // INVARIANT: a fault-proof task's aggregates are all bound to a claim.
        if (_faultProof) revert ClaimRequired(round);
        _submitAggregate(round, digest, stop);
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
        // INVARIANT: nobody is penalized for not aggregating an included set under an open
        // availability challenge (its expiry re-opens the round with a fresh attempt).
        if (_availability[round].challenger != address(0)) {
            revert AvailabilityChallengeOpen(round, _availability[round].index);
        }

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
        // INVARIANT: the included set may still lose an update while a challenge on it is open.
        if (_availability[round].challenger != address(0)) {
            revert AvailabilityChallengeOpen(round, _availability[round].index);
        }
        // INVARIANT: only a submitted (and undisputed) aggregate can be finalized.
        if (rs.status != Phase.Submitted) revert NoAggregateSubmitted(round);
        uint256 challengeDeadline = uint256(rs.submitBlock) + _challengeWindow;
        // INVARIANT: challenges are allowed iff block.number <= challengeDeadline, so
        // finalization waits until the window has fully passed.
        if (block.number <= challengeDeadline) revert ChallengeWindowOpen(round, challengeDeadline);
        if (_faultProof) {
            uint256 claimId = (_boundClaims[round][rs.attempt] >> 192) - 1;
            // One view answers every hook; finalize needs three of its fields.
            // slither-disable-next-line unused-return
            (,, bytes32 newRoot,,, bool isSettled, bool isRefuted) = _faultGames.claimHook(claimId);
            // INVARIANT: an aggregate is final only once no game on its claim can refute it.
            if (!isSettled) revert ClaimUnsettled(round, claimId);
            // INVARIANT: a refuted aggregate is never finalized (`rejectRefuted` discards it).
            if (isRefuted) revert AggregateRefuted(round, claimId);
            _stateRoots[round] = newRoot;
        }

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
        // the state is carried forward, so is its chunk root (fault-proof tasks)
        if (_faultProof) _stateRoots[round] = _stateRoots[round - 1];
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
        // an open availability challenge proved nothing either: its bond comes back
        address availabilityChallenger = _availability[round].challenger;
        if (availabilityChallenger != address(0)) {
            refunded += _challengeBond;
            _credit(availabilityChallenger, _challengeBond);
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
        (round); // forwarded in msg.data
        _delegateToDisputes();
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
        (round, attempt, faulty, viewNumber, signatures); // forwarded in msg.data
        _delegateToDisputes();
    }

    /// @notice Discards the disputed aggregate of `round` once its dispute has gone unresolved
    ///         for more than `disputeTimeout` blocks (no certificate of n - f eligible members
    ///         could be formed). Nothing was proven: nobody is slashed, the submitter's bond is
    ///         refunded and the challenge bond burned, so a challenger that stalls the
    ///         committee cannot cost the submitter anything, and nobody gains from it. The round
    ///         re-opens at attempt + 1 for the next aggregator in rotation. Callable by anyone.
    /// @param round Must be the current round, Disputed, with block.number > disputeDeadline.
    function expireDispute(uint256 round) external {
        (round); // forwarded in msg.data
        _delegateToDisputes();
    }

    /// @notice Slashes a committee member that signed two conflicting PBFT messages under this
    ///         task's EIP-712 domain: two `PrePrepare`s (kind 0) or two `Prepare`s (kind 1) for
    ///         the same view and sequence number with different content, or two
    ///         `DisputeVerdict` commits (kind 2) for the same dispute and view with opposite
    ///         verdicts. A correct replica never signs such a pair (docs/pbft.md). The member
    ///         loses its whole stake and leaves the rotation and the quorums; the caller is
    ///         credited half of the stake (rounded down), the rest is burned. Anyone may call
    ///         who committed to the evidence at least one block before
    ///         (`EquivocationEvidence.commitEquivocation`, else `EvidenceNotCommitted`), so a
    ///         copied transaction gains nothing.
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
        (kind, viewNumber, seq, a, b); // forwarded in msg.data
        _delegateToDisputes();
    }

    // ------------------------------------------------------------------------------------
    // Fault-proof hooks (issue 22; docs/fault-proof.md): run in TaskDisputes as well
    // ------------------------------------------------------------------------------------

    /// @notice Binds this task to the fault-proof games of `games` (a `FaultGames`
    ///         contract): from then on every aggregate is submitted with the submitter's claim
    ///         (`submitAggregateWithClaim`), `finalize` waits until that claim is settled and
    ///         refuses a refuted one. `initialStateRoot` is the chunk root (protocol/merkle.py)
    ///         of the initial state, the previous root of round 1's claims; `paramsHash`
    ///         binds every claim's step parameters (`faultParamsHash`). Owner only, once,
    ///         before the first aggregator registers, so every member stakes knowing which
    ///         games contract can get it slashed (a task without it is PBFT only); the task
    ///         needs an attestation window (`attestWindow` > 0).
    function setFaultGames(address games, bytes32 initialStateRoot, bytes32 paramsHash) external {
        (games, initialStateRoot, paramsHash); // forwarded in msg.data
        _delegateToDisputes();
    }

    /// @notice The stopping rule of a fault-proof task (issue 22): a round is quiet when its
    ///         claim's committed squared update norm is below `thresholdSq`; the task
    ///         completes after `patience` consecutive quiet rounds. Owner only, once, after
    ///         `setFaultGames` and before the first aggregator registers.
    function setStopRule(uint256 thresholdSq, uint256 patience) external {
        (thresholdSq, patience); // forwarded in msg.data
        _delegateToDisputes();
    }

    /// @notice `submitAggregate` on a fault-proof task: also binds FaultGames claim `claimId`,
    ///         which must be the caller's, start from the last finalized state root, cover
    ///         the round's registered updates, declare not included exactly those outside the
    ///         included set, carry the task's step parameters (`faultParamsHash`), keep its
    ///         game window open at least until the challenge deadline, and not be refuted.
    function submitAggregateWithClaim(uint256 round, bytes32 digest, uint256 claimId) external payable {
        (round, digest, claimId); // forwarded in msg.data
        _delegateToDisputes();
    }

    /// @notice Discards the submitted (or disputed) aggregate of `round` whose claim was
    ///         refuted in FaultGames, like a faulty verdict: the submitter loses its stake and
    ///         the aggregate bond (all burned: the caller gains nothing, since the submitter could
    ///         call this itself; the refuter is paid by FaultGames), an open PBFT
    ///         challenge gets its bond back, and the round re-opens at attempt + 1. Anyone.
    function rejectRefuted(uint256 round) external {
        (round); // forwarded in msg.data
        _delegateToDisputes();
    }

    /// @notice Slashes every (not yet slashed) signer of a commit certificate that called the
    ///         aggregate of (`round`, `attempt`) "not faulty" while the FaultGames claim bound
    ///         to it was refuted: the one-step proof contradicts what they signed. Every slashed
    ///         stake is burned (the caller gains nothing: a signer could report itself). Anyone.
    /// @param aggregateDigest The digest the certificate names (the submission's).
    /// @param signatures At least commitQuorum() valid signatures over
    ///        `verdictDigest(round, attempt, aggregateDigest, false, viewNumber)`, sorted by
    ///        signer address (slashed signers included).
    function slashRefutedCertificate(
        uint256 round,
        uint256 attempt,
        bytes32 aggregateDigest,
        uint256 viewNumber,
        bytes[] calldata signatures
    ) external {
        (round, attempt, aggregateDigest, viewNumber, signatures); // forwarded in msg.data
        _delegateToDisputes();
    }

    /// @notice Every call whose selector the task does not define runs in its `TaskDisputes`
    ///         module by DELEGATECALL (see `_delegateToDisputes`), which reverts for a selector
    ///         it does not define either (and for plain ether transfers: it has no receive).
    ///         This is how the task-level data-availability game (issue 22) is reached
    ///         without a forwarder each: `challengeAvailability`, `answerAvailability`,
    ///         `expireAvailability` and the `availabilityChallenge` view (TaskDisputes'
    ///         NatSpec; their ABI entries come from TaskDisputes' artifact).
    fallback() external payable {
        _delegateToDisputes();
    }

    /// @notice Plain ether transfers are refused: the module has no receive function, so the
    ///         DELEGATECALL reverts (stakes, bonds and deposits come in through their calls).
    receive() external payable {
        _delegateToDisputes();
    }

    /// @notice The FaultGames contract this task is bound to (address(0): PBFT only).
    function faultGames() external view returns (address) {
        return address(_faultGames);
    }

    /// @notice keccak256(abi.encode(uint8 rule, uint64 betaNum, uint64 betaDen, uint64 dim,
    ///         uint256 valueBound)): the one-step parameters every claim must carry (zero on
    ///         a PBFT-only task). A node checks it against its manifest before joining.
    function faultParamsHash() external view returns (bytes32) {
        return _faultParamsHash;
    }

    /// @notice The FaultGames claim bound to the submission of (`round`, `attempt`).
    function claimOf(uint256 round, uint256 attempt) external view returns (bool bound, uint256 claimId) {
        uint256 packed = _boundClaims[round][attempt];
        return packed == 0 ? (false, 0) : (true, (packed >> 192) - 1);
    }

    /// @notice Chunk root of the state finalized by `round` (round 0: the initial state);
    ///         zero before then, and on PBFT-only tasks.
    function stateRoot(uint256 round) external view returns (bytes32) {
        return _stateRoots[round];
    }

    /// @dev Runs this call (same calldata, same msg.sender and msg.value) in `_disputes`'s code
    ///      against this contract's storage, and returns or reverts with exactly what it
    ///      returned or reverted with (its custom errors are this contract's). `_disputes` is
    ///      an immutable created by the constructor with this task's own config, so no caller
    ///      can choose the code that runs here.
    function _delegateToDisputes() private {
        address module = address(_disputes);
        assembly ("memory-safe") {
            let ptr := mload(0x40)
            calldatacopy(ptr, 0, calldatasize())
            let ok := delegatecall(gas(), module, ptr, calldatasize(), 0, 0)
            returndatacopy(ptr, 0, returndatasize())
            if iszero(ok) { revert(ptr, returndatasize()) }
            return(ptr, returndatasize())
        }
    }

    /// @notice EIP-712 digest the committee signs for a verdict: keccak256(0x1901 ‖
    ///         domainSeparator ‖ keccak256(abi.encode(DISPUTE_VERDICT_TYPEHASH, round, attempt,
    ///         aggregateDigest, faulty, viewNumber))); equals consensus.certificate.verdict_digest.
    function verdictDigest(uint256 round, uint256 attempt, bytes32 aggregateDigest, bool faulty, uint256 viewNumber)
        public
        view
        returns (bytes32)
    {
        return _verdictDigest(round, attempt, aggregateDigest, faulty, viewNumber);
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

    /// @notice Credits the caller's client deposit back once the task has ended (completed or
    ///         aborted); then `withdraw`.
    function releaseDeposit() external {
        // INVARIANT: deposits are locked until the task ends.
        if (!_completed) revert TaskNotCompleted();
        ClientState storage c = _clients[msg.sender];
        // INVARIANT: a deposit is returned once.
        if (!c.depositHeld) revert NothingToWithdraw(msg.sender);
        c.depositHeld = false;
        uint256 amount = _clientDeposit;
        _depositsHeld -= amount;
        _credit(msg.sender, amount);
        emit DepositReleased(msg.sender, amount);
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
        uint256 window = _attestWindow;
        // Calls `_evidence` with this call's calldata followed by `attestWindow` (one word)
        // and returns (or reverts with) exactly what it returns.
        assembly ("memory-safe") {
            let ptr := mload(0x40)
            calldatacopy(ptr, 0, calldatasize())
            mstore(add(ptr, calldatasize()), window)
            let ok := staticcall(gas(), helper, ptr, add(calldatasize(), 32), 0, 0)
            returndatacopy(ptr, 0, returndatasize())
            if iszero(ok) { revert(ptr, returndatasize()) }
            return(ptr, returndatasize())
        }
    }

    /// @notice The EquivocationEvidence contract this task forwards to (where reporters
    ///         commit equivocation evidence); its code hash is `EVIDENCE_CODEHASH`.
    function equivocationEvidence() external view returns (address) {
        return address(_evidence);
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







}
