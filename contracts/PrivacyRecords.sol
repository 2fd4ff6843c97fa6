// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ClientRecords} from "./lib/ClientRecords.sol";

/// @notice What PrivacyRecords reads of its task: the subset of FedChainTask's ABI it calls,
///         mirrored here (not imported) so that the records contract depends only on the
///         task's external interface, not on its source.
interface IFedChainTaskView {
    enum Phase {
        Pending,
        Collecting,
        Attesting,
        Aggregating,
        Submitted,
        Disputed,
        Finalized
    }

    struct RoundInfo {
        Phase phase;
        uint64 openBlock;
        uint64 closeBlock;
        bool collectionClosed;
        uint32 updateCount;
        uint32 attempt;
        uint64 attemptStart;
        uint64 deadlineBlock;
        address aggregator;
        bytes32 aggregateDigest;
        uint64 submitBlock;
        uint64 challengeDeadline;
        uint32 submissionAttempt;
        uint32 submissionUpdateCount;
        bool finalized;
        address challenger;
        uint64 challengeBlock;
        uint64 disputeDeadline;
        uint32 attestCount;
        uint64 attestEnd;
        bool availabilityFixed;
    }

    function currentRound() external view returns (uint256);
    function clientCount() external view returns (uint256);
    function taskCompleted() external view returns (bool);
    function clientInfo(address account) external view returns (bool registered, uint256 index);
    function aggregatorInfo(address account)
        external
        view
        returns (bool registered, bool active, bool slashed, uint256 stake, uint256 index, uint256 activeFrom);
    function getRound(uint256 round) external view returns (RoundInfo memory);
}

/// @title PrivacyRecords
/// @notice The published material of a private task's rounds (secure aggregation, HE), kept
///         beside the task so that the task contract does not grow: clients' encryption keys
///         (`ENC_KEY`, registered once per task), per-round mask-key records with their
///         encrypted Shamir shares (`MASK_KEY`), and reveals (`REVEAL`: a client's shares of
///         dropped peers, or the HE key holder's decryption). A record is a signed EIP-712
///         `Record(uint8 kind,uint256 round,bytes32 payloadHash)` under the domain
///         {"FedChainPrivacyRecords", "1", chainId, this contract}; anyone may relay records
///         in batches (`submitRecords`) and a client can always send its own (`submitRecord`).
///         Like the task's updates, no record is stored: each round keeps a hash-chain
///         accumulator over its ordered record list, whose payloads travel in full in the
///         `RecordRegistered` events; nodes rebuild the list from the events and check it
///         against `recordLog`. A client has at most one record of each kind per round (a
///         replayed signed record is refused). Only registered clients of the task sign records (the HE key
///         holder registers as one); a record names its signer by client index.
/// @dev Deployed per task by the task's deployer; its address is part of the task manifest
///      (hence of ruleParamsHash), so every node uses the same records contract.
contract PrivacyRecords is EIP712 {
    /// @notice EIP-712 type hash of a record.
    bytes32 public constant RECORD_TYPEHASH = keccak256("Record(uint8 kind,uint256 round,bytes32 payloadHash)");
    /// @notice Record kinds: 0 ENC_KEY, 1 MASK_KEY, 2 REVEAL.
    uint8 public constant REVEAL = 2;
    /// @dev The once-bit kind of a member's reveal attestation (not a record kind).
    uint8 private constant ATTEST_REVEALS = 3;
    /// @dev Bytes before a packed record's payload: kind (1) || length (4) || r (32) || vs (32).
    uint256 private constant HEADER_BYTES = 69;

    /// @notice The task whose rounds the records belong to.
    IFedChainTaskView public immutable task;
    /// @notice Blocks after a round's included set is fixed (attempt 0 starts) during which
    ///         its `REVEAL` records are accepted; honest aggregators compute after it.
    uint256 public immutable revealWindow;
    /// @notice The clients 0..graphClients-1 a SecAgg+ mask graph spans (0: the task uses
    ///         the full graph and pins no seed).
    uint256 public immutable graphClients;

    /// @dev round => accumulator (high 224 bits) || count (low 32 bits).
    mapping(uint256 round => uint256) private _logs;
    /// @dev round => (kind << 248 | client >> 8) => bit (client & 255): the (client, kind)
    ///      pairs that already have a record in the round.
    mapping(uint256 round => mapping(uint256 slot => uint256 bits)) private _seen;
    /// @dev round => the public randomness its mask graph is derived from (0: not pinned).
    mapping(uint256 round => bytes32) private _graphSeeds;
    /// @dev client index / 2 => the low 128 bits of the addresses of clients 2w (low half)
    ///      and 2w + 1 (high half), written when a client's first `ENC_KEY` record is admitted
    ///      (its registration checked by the task then): `submitReveals` checks a reveal's
    ///      signer against it instead of asking the task once per record.
    mapping(uint256 pair => uint256) private _clientKeys;

    /// @dev Bytes of one record in a `submitReveals` batch: client index (4, big-endian) ||
    ///      payload digest (32) || r (32) || vs (32).
    uint256 private constant REVEAL_RECORD_BYTES = 100;

    /// @notice A record for a round that is not the task's current one (or after completion).
    error RecordRoundNotOpen(uint256 round, uint256 currentRound);
    /// @notice Record `record` of a call has an unknown kind or an empty payload.
    error BadRecord(uint256 record, uint256 kind, uint256 length);
    /// @notice A batch of `length` bytes that is empty or ends inside a record.
    error BadRecordBatch(uint256 length);
    /// @notice A `REVEAL` record outside its round's reveal window (`phase` is the task's).
    error NotRevealing(uint256 round, uint8 phase);
    /// @notice Record `record`'s signature is invalid or malleable (high s).
    error BadRecordSignature(uint256 record);
    /// @notice Record `record` was not signed (or sent) by a registered client of the task.
    error NotTaskClient(uint256 record, address signer);
    /// @notice Client `client` already has a record of `kind` in `round` (one per round and
    ///         kind: a signed record cannot be replayed, nor a second one added).
    error DuplicateRecord(uint256 round, uint256 client, uint8 kind);

    /// @notice `round`'s graph seed cannot be pinned now: only during the round before it
    ///         (`currentRound`), once every graph position is registered (`clients` of
    ///         `graphClients`), in a task with a mask graph.
    error GraphSeedNotPinnable(uint256 round, uint256 currentRound, uint256 clients);

    /// @notice Reveal attestations for `round` outside its window (from the start of its
    ///         reveal window to `revealWindow` blocks after its end).
    error NotAttestingReveals(uint256 round);
    /// @notice `account` is not an active aggregator of the task.
    error NotCommitteeMember(address account);

    /// @notice Committee member `member` holds the reveal payloads of `round`'s records set in
    ///         `bitmap` (bit i of word i / 256: record i of the round's list).
    event RevealsAttested(uint256 indexed round, uint256 indexed member, uint256[] bitmap);

    /// @notice Records `firstIndex`.. of `round` were registered by `submitReveals`: each a
    ///         `REVEAL` record with a 32-byte payload, `entries` packing client index (4,
    ///         big-endian) || payload (32) per record, in order; `accumulator` is the round's
    ///         accumulator after the last (each record extends it as in `RecordRegistered`).
    event RevealsRegistered(uint256 indexed round, uint256 firstIndex, uint256 accumulator, bytes entries);

    /// @notice Record `record` of a `submitReveals` batch names client `client`, which has no
    ///         registered encryption key or whose key address is not the signer's.
    error WrongRevealSigner(uint256 record, uint256 client, address signer);

    /// @notice `round`'s mask-graph randomness was pinned at block `blockNumber`.
    event GraphSeedPinned(uint256 indexed round, uint256 blockNumber, bytes32 seed);

    /// @notice Record `index` of `round` (kind `kind`, signed by the task's client number
    ///         `client`) was registered;
    ///         `accumulator` is the round's accumulator after it.
    event RecordRegistered(
        uint256 indexed round,
        uint256 indexed client,
        uint8 indexed kind,
        uint256 index,
        uint256 accumulator,
        bytes payload
    );

    /// @param task_ The task (FedChainTask) the records belong to.
    /// @param revealWindow_ Blocks of each round's reveal window (at least 1).
    /// @param graphClients_ Clients a SecAgg+ mask graph spans (0: full graph, no seeds).
    constructor(address task_, uint256 revealWindow_, uint256 graphClients_)
        EIP712("FedChainPrivacyRecords", "1")
    {
        task = IFedChainTaskView(task_);
        revealWindow = revealWindow_ == 0 ? 1 : revealWindow_;
        graphClients = graphClients_;
    }

    /// @notice Pins `round`'s mask-graph randomness (anyone may call; the first call wins,
    ///         later ones return the pinned value): the hash of the previous block mixed
    ///         with `block.prevrandao` (a constant on eth-tester, the beacon's RANDAO output on
    ///         a PoS chain). Allowed only during round `round - 1` (round 0: before the
    ///         start), so every key record of `round` is dealt along the pinned graph, and only
    ///         once all `graphClients` positions are registered, so nobody can pick its
    ///         position after seeing the graph. Who could grind it: docs/privacy.md.
    function pinGraphSeed(uint256 round) external returns (bytes32 seed) {
        seed = _graphSeeds[round];
        if (seed != 0) return seed;
        uint256 current = task.currentRound();
        uint256 clients = task.clientCount();
        // INVARIANT: a graph seed is pinned once, in the round before its own, after every
        // graph position is taken.
        if (graphClients == 0 || round != current + 1 || task.taskCompleted() || clients < graphClients) {
            revert GraphSeedNotPinnable(round, current, clients);
        }
        seed = keccak256(abi.encode(blockhash(block.number - 1), block.prevrandao, round));
        _graphSeeds[round] = seed;
        emit GraphSeedPinned(round, block.number, seed);
    }

    /// @notice An active aggregator attests which of `round`'s records it holds the
    ///         content-stored reveal payload of (SecAgg+: a `REVEAL` record is its payload's
    ///         digest). Once per member and round, from the start of the reveal window to
    ///         `revealWindow` blocks after its end; nothing is stored but the once-bit: nodes
    ///         count the attestations from the events, and a reveal counts only with f + 1 of
    ///         them (so a correct member can serve it), like an update.
    function attestReveals(uint256 round, uint256[] calldata bitmap) external {
        IFedChainTaskView.RoundInfo memory info = task.getRound(round);
        // INVARIANT: reveal attestations only around the round's reveal window.
        if (
            round != task.currentRound() || info.phase != IFedChainTaskView.Phase.Aggregating
                || block.number >= uint256(info.attemptStart) + 2 * revealWindow
        ) revert NotAttestingReveals(round);
        (bool registered, bool active, bool slashed, uint256 stake, uint256 index, uint256 activeFrom) =
            task.aggregatorInfo(msg.sender);
        // INVARIANT: only the task's active committee attests (active: staked, not slashed).
        if (!registered || !active || slashed || stake == 0 || activeFrom > block.number) {
            revert NotCommitteeMember(msg.sender);
        }
        _markOnce(round, index, ATTEST_REVEALS);
        emit RevealsAttested(round, index, bitmap);
    }

    /// @notice `round`'s pinned mask-graph randomness (0 if not pinned yet).
    function graphSeed(uint256 round) external view returns (bytes32) {
        return _graphSeeds[round];
    }

    /// @notice Registers the caller's own record of `kind` for `round`.
    /// @param round The task's current round (0 before the start).
    function submitRecord(uint256 round, uint8 kind, bytes calldata payload) external {
        _checkRound(round, kind);
        _admit(round, 0, kind, msg.sender, payload);
    }

    /// @notice Registers a batch of signed records for `round`, in order (anyone may relay).
    ///         A bad record reverts the whole batch.
    /// @param records Packed records: kind (1) || payload length (4, big-endian) || r || vs ||
    ///        payload, (r, vs) the signer's EIP-2098 signature of `recordDigest`.
    function submitRecords(uint256 round, bytes calldata records) external {
        uint256 p = 0;
        uint256 i = 0;
        uint8 checkedKinds = 0; // bit k: the round admits kind k (checked once per batch)
        // INVARIANT: a batch is a positive whole number of records.
        if (records.length == 0) revert BadRecordBatch(records.length);
        while (p < records.length) {
            uint8 kind = uint8(records[p]);
            if (kind <= REVEAL && checkedKinds & (uint8(1) << kind) == 0) {
                _checkRound(round, kind);
                checkedKinds |= uint8(1) << kind;
            }
            p = _relayed(round, i, records, p);
            ++i;
        }
    }

    /// @dev Admits the signed record `i` starting at byte `p` of `records`; returns where the
    ///      next one starts.
    function _relayed(uint256 round, uint256 i, bytes calldata records, uint256 p) private returns (uint256) {
        // INVARIANT: a batch ends exactly after its last record.
        if (records.length - p < HEADER_BYTES) revert BadRecordBatch(records.length);
        uint256 end = p + HEADER_BYTES + uint32(bytes4(records[p + 1:p + 5]));
        if (records.length < end) revert BadRecordBatch(records.length);
        uint8 kind = uint8(records[p]);
        bytes calldata payload = records[p + HEADER_BYTES:end];
        (address signer, bool malleable) = ClientRecords.recoverCompact(
            recordDigest(kind, round, payload), bytes32(records[p + 5:p + 37]), bytes32(records[p + 37:p + 69])
        );
        // INVARIANT: every relayed record carries its signer's valid low-s signature.
        if (signer == address(0) || malleable) revert BadRecordSignature(i);
        _admit(round, i, kind, signer, payload);
        return end;
    }

    /// @notice The EIP-712 digest a client signs for its record.
    function recordDigest(uint8 kind, uint256 round, bytes calldata payload) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(RECORD_TYPEHASH, kind, round, keccak256(payload))));
    }

    /// @notice The accumulator over `round`'s records and their count.
    function recordLog(uint256 round) external view returns (uint256 accumulator, uint256 count) {
        uint256 log = _logs[round];
        return (log >> 32, log & type(uint32).max);
    }

    /// @notice Whether `round`'s `REVEAL` records are accepted now: its included set is fixed
    ///         (attempt 0 aggregating) and fewer than `revealWindow` blocks have passed since.
    function revealing(uint256 round) public view returns (bool) {
        IFedChainTaskView.RoundInfo memory info = task.getRound(round);
        return info.phase == IFedChainTaskView.Phase.Aggregating && info.attempt == 0
            && block.number < uint256(info.attemptStart) + revealWindow;
    }

    /// @dev Reverts unless `round` accepts records of `kind` now.
    function _checkRound(uint256 round, uint8 kind) private view {
        uint256 current = task.currentRound();
        // INVARIANT: records belong to the current round of a task that is not complete.
        if (round != current || task.taskCompleted()) revert RecordRoundNotOpen(round, current);
        // INVARIANT: reveals only while the round's reveal window is open.
        if (kind == REVEAL && !revealing(round)) revert NotRevealing(round, uint8(task.getRound(round).phase));
    }

    /// @dev Marks `client`'s record of `kind` in `round`; reverts if it already has one.
    function _markOnce(uint256 round, uint256 client, uint8 kind) private {
        uint256 slot = (uint256(kind) << 248) | (client >> 8);
        uint256 bit = uint256(1) << (client & 255);
        uint256 seen = _seen[round][slot];
        // INVARIANT: at most one record per (client, kind, round).
        if (seen & bit != 0) revert DuplicateRecord(round, client, kind);
        _seen[round][slot] = seen | bit;
    }

    /// @dev Appends one record to `round`'s list (its kind and payload checked here).
    function _admit(uint256 round, uint256 i, uint8 kind, address signer, bytes calldata payload) private {
        // INVARIANT: a record has a known kind and a payload.
        if (kind > REVEAL || payload.length == 0) revert BadRecord(i, kind, payload.length);
        (bool registered, uint256 client) = task.clientInfo(signer);
        // INVARIANT: records come from the task's registered clients.
        if (!registered) revert NotTaskClient(i, signer);
        _markOnce(round, client, kind);
        if (kind == 0) _storeClientKey(client, signer);
        uint256 log = _logs[round];
        uint256 count = log & type(uint32).max;
        uint256 acc = _extend(log >> 32, kind, client, keccak256(payload));
        _logs[round] = (acc << 32) | (count + 1);
        emit RecordRegistered(round, client, kind, count, acc, payload);
    }

    /// @dev Keeps `client`'s address key (once: its first `ENC_KEY` record).
    function _storeClientKey(uint256 client, address signer) private {
        uint256 shift = 128 * (client % 2);
        uint256 pair = _clientKeys[client / 2];
        if ((pair >> shift) & type(uint128).max == 0) {
            _clientKeys[client / 2] = pair | ((uint256(uint160(signer)) & type(uint128).max) << shift);
        }
    }

    /// @notice Registers a batch of signed 32-byte `REVEAL` records (SecAgg+ reveal digests)
    ///         for `round`, in order (anyone may relay; a bad record reverts the batch). The
    ///         same records as `submitRecords` (same signed `Record`, same one-per-client
    ///         rule, same accumulator and list positions), registered like updates: the record
    ///         names its client index, checked against the address key kept from the client's
    ///         `ENC_KEY` record, the once-bits are read and written once per word, and one
    ///         `RevealsRegistered` event carries the batch.
    /// @param records Packed records: client index (4, big-endian) || payload (32) || r || vs.
    function submitReveals(uint256 round, bytes calldata records) external {
        uint256 n = records.length / REVEAL_RECORD_BYTES;
        // INVARIANT: a batch is a positive whole number of records.
        if (n == 0 || records.length % REVEAL_RECORD_BYTES != 0) revert BadRecordBatch(records.length);
        _checkRound(round, REVEAL);
        uint256 log = _logs[round];
        uint256 first = log & type(uint32).max;
        // INVARIANT: a round's list stays below 2**32 records.
        if (first + n > type(uint32).max) revert BadRecordBatch(records.length);
        RevealIntake memory t = RevealIntake({
            round: round,
            acc: log >> 32,
            wordSlot: type(uint256).max,
            word: 0,
            separator: _domainSeparatorV4(),
            entries: new bytes((records.length * 36) / REVEAL_RECORD_BYTES) // 36 bytes per record
        });
        for (uint256 i = 0; i < n; ) {
            _admitReveal(t, records, i);
            unchecked {
                ++i;
            }
        }
        _seen[round][t.wordSlot] = t.word;
        _logs[round] = (t.acc << 32) | (first + n);
        emit RevealsRegistered(round, first, t.acc, t.entries);
    }

    /// @dev What a `submitReveals` batch has read so far, in memory so that each once-bit
    ///      word is read and written once per batch.
    struct RevealIntake {
        uint256 round;
        uint256 acc;
        uint256 wordSlot; // the `_seen` slot held in `word` (type(uint256).max: none yet)
        uint256 word;
        bytes32 separator;
        bytes entries;
    }

    /// @dev Admits record `i` of a `submitReveals` batch into `t`.
    function _admitReveal(RevealIntake memory t, bytes calldata records, uint256 i) private {
        (uint256 client, bytes32 payload, bytes32 payloadHash) = _revealAt(records, i, t.round, t.separator);
        uint256 slot = (uint256(REVEAL) << 248) | (client >> 8);
        if (slot != t.wordSlot) {
            if (t.wordSlot != type(uint256).max) _seen[t.round][t.wordSlot] = t.word;
            t.wordSlot = slot;
            t.word = _seen[t.round][slot];
        }
        uint256 bit = uint256(1) << (client & 255);
        // INVARIANT: at most one record per (client, kind, round).
        if (t.word & bit != 0) revert DuplicateRecord(t.round, client, REVEAL);
        t.word |= bit;
        uint256 acc = t.acc;
        assembly ("memory-safe") {
            let m := mload(0x40) // scratch, as in _extend: keccak256(abi.encode(acc, 2, client, payloadHash))
            mstore(m, acc)
            mstore(add(m, 32), 2) // REVEAL
            mstore(add(m, 64), client)
            mstore(add(m, 96), payloadHash)
            acc := shr(32, keccak256(m, 128))
        }
        t.acc = acc;
        bytes memory entries = t.entries;
        assembly ("memory-safe") {
            let e := add(add(entries, 32), mul(i, 36))
            mstore(e, shl(224, client))
            mstore(add(e, 4), payload)
        }
    }

    /// @dev Record `i` of a `submitReveals` batch (client `client`'s `REVEAL` of `payload`);
    ///      reverts unless it carries the valid low-s signature of the client's address.
    function _revealAt(bytes calldata records, uint256 i, uint256 round, bytes32 separator)
        private
        view
        returns (uint256 client, bytes32 payload, bytes32 payloadHash)
    {
        bytes32 r;
        bytes32 vs;
        assembly ("memory-safe") {
            let p := add(records.offset, mul(i, 100))
            client := shr(224, calldataload(p))
            payload := calldataload(add(p, 4))
            r := calldataload(add(p, 36))
            vs := calldataload(add(p, 68))
        }
        bytes32 typeHash = RECORD_TYPEHASH;
        bytes32 structHash;
        assembly ("memory-safe") {
            mstore(0, payload)
            payloadHash := keccak256(0, 32)
            let m := mload(0x40) // scratch above the free memory pointer, not allocated
            mstore(m, typeHash)
            mstore(add(m, 32), 2) // REVEAL
            mstore(add(m, 64), round)
            mstore(add(m, 96), payloadHash)
            structHash := keccak256(m, 128)
        }
        (address signer, bool malleable) =
            ClientRecords.recoverCompact(ClientRecords.typedDataDigest(separator, structHash), r, vs);
        // INVARIANT: every relayed record carries its signer's valid low-s signature.
        if (signer == address(0) || malleable) revert BadRecordSignature(i);
        uint256 key = (_clientKeys[client / 2] >> (128 * (client % 2))) & type(uint128).max;
        // INVARIANT: a reveal counts only if signed by the registered client it names (whose
        // key its ENC_KEY record stored; a client without one has nothing to reveal).
        if (key == 0 || key != (uint256(uint160(signer)) & type(uint128).max)) {
            revert WrongRevealSigner(i, client, signer);
        }
    }

    /// @dev The accumulator after one more record (high 224 bits of the chained hash).
    function _extend(uint256 acc, uint8 kind, uint256 client, bytes32 payloadHash) private pure returns (uint256) {
        return uint256(keccak256(abi.encode(acc, kind, client, payloadHash))) >> 32;
    }
}
