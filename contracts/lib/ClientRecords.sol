// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title ClientRecords
/// @notice Pure maths of the records clients sign and anyone relays: their EIP-712 struct
///         hashes, the per-round accumulator (a hash chain) that replaces per-record storage,
///         and the round-tagged bitmap words that allow one record per client per round.
///         A record kind (an update today; others later) is an EIP-712 struct signed by a
///         registered client under the task's domain {"FedChainTask", "1", chainId, task}; the
///         contract recovers the signer, checks it is the client at the record's index, marks
///         the client in a tagged bitmap and extends the kind's accumulator. Python mirrors
///         every function here bit for bit (`adapters.records`).
library ClientRecords {
    /// @notice EIP-712 type hash of a client's update record: the update of `round` has
    ///         canonical bytes with SHA-256 `digest`, weight `numSamples` and chunk root
    ///         `chunkRoot` (U_i: the keccak Merkle root of its quantised delta,
    ///         `ChunkMerkle` / `protocol.merkle`). The domain binds the task
    ///         (verifyingContract) and the chain (chainId); the signer is the client.
    bytes32 internal constant UPDATE_TYPEHASH =
        keccak256("Update(uint256 round,bytes32 digest,uint64 numSamples,bytes32 chunkRoot)");

    /// @notice Clients per bitmap word: the low 224 bits are client bits (bit i of word w is
    ///         the client with index 224 * w + i), the high 32 bits the round the bits belong to.
    uint256 internal constant CLIENTS_PER_WORD = 224;

    /// @notice Tag of a word that no round has written yet (rounds are below 2**32 - 1), so a
    ///         word is never zero once its first client registered: marking a client then
    ///         rewrites a non-zero slot instead of creating one.
    uint256 internal constant NO_ROUND = type(uint32).max;

    uint256 private constant BITS_MASK = (uint256(1) << 224) - 1;

    /// @notice Bytes one accepted update takes in the `UpdatesRegistered` event:
    ///         client (20) || digest (32) || numSamples (8, big-endian) || chunkRoot (32).
    uint256 internal constant UPDATE_ENTRY_BYTES = 92;

    /// @notice Bytes of one record in a `submitUpdates` batch: client index (4, big-endian) ||
    ///         numSamples (8, big-endian) || digest (32) || chunkRoot (32) || r (32) || vs (32),
    ///         the last two the client's EIP-2098 compact signature.
    uint256 internal constant UPDATE_RECORD_BYTES = 140;

    /// @notice Upper bound of a low-s signature's s (secp256k1 order / 2).
    uint256 internal constant HALF_ORDER = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    /// @notice Record `i` of a packed batch (the caller checked the batch length).
    function updateRecordAt(bytes calldata records, uint256 i)
        internal
        pure
        returns (uint256 client, uint64 numSamples, bytes32 digest, bytes32 chunkRoot, bytes32 r, bytes32 vs)
    {
        assembly ("memory-safe") {
            let p := add(records.offset, mul(i, 140))
            client := shr(224, calldataload(p))
            numSamples := shr(192, calldataload(add(p, 4)))
            digest := calldataload(add(p, 12))
            chunkRoot := calldataload(add(p, 44))
            r := calldataload(add(p, 76))
            vs := calldataload(add(p, 108))
        }
    }

    /// @notice What the contract keeps of a client's address to check its records' signers:
    ///         the low 128 bits (an address is a hash, so finding a key whose address matches
    ///         a registered client's 128 bits is a 2**128 search).
    function clientKey(address client) internal pure returns (uint256) {
        return uint256(uint160(client)) & type(uint128).max;
    }

    /// @notice EIP-712 struct hash of an update record:
    ///         keccak256(abi.encode(UPDATE_TYPEHASH, round, digest, numSamples, chunkRoot)).
    function updateStructHash(uint256 round, bytes32 digest, uint64 numSamples, bytes32 chunkRoot)
        internal
        pure
        returns (bytes32 h)
    {
        bytes32 typeHash = UPDATE_TYPEHASH;
        assembly ("memory-safe") {
            let p := mload(0x40) // scratch above the free memory pointer, not allocated
            mstore(p, typeHash)
            mstore(add(p, 32), round)
            mstore(add(p, 64), digest)
            mstore(add(p, 96), numSamples)
            mstore(add(p, 128), chunkRoot)
            h := keccak256(p, 160)
        }
    }

    /// @notice The EIP-712 digest of `structHash` under the domain `separator`:
    ///         keccak256("\x19\x01" || separator || structHash).
    function typedDataDigest(bytes32 separator, bytes32 structHash) internal pure returns (bytes32 h) {
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore(p, hex"1901")
            mstore(add(p, 2), separator)
            mstore(add(p, 34), structHash)
            h := keccak256(p, 66)
        }
    }

    /// @notice The signer of `digest` by the compact signature (r, vs), or address(0) if it
    ///         is invalid; `malleable` when s is in the upper half order (refused).
    function recoverCompact(bytes32 digest, bytes32 r, bytes32 vs)
        internal
        pure
        returns (address signer, bool malleable)
    {
        uint256 s = uint256(vs) & ((uint256(1) << 255) - 1);
        if (s > HALF_ORDER) return (address(0), true);
        signer = ecrecover(digest, uint8((uint256(vs) >> 255) + 27), r, bytes32(s));
    }

    /// @notice The accumulator after appending one update: the low 224 bits of
    ///         keccak256(abi.encode(acc, client, digest, numSamples, chunkRoot)). A round
    ///         starts at 0, so the accumulator commits to the round's whole ordered update
    ///         list, U_i included (what a FaultGames claim's records are checked against).
    function extendUpdates(uint224 acc, address client, bytes32 digest, uint64 numSamples, bytes32 chunkRoot)
        internal
        pure
        returns (uint224 next)
    {
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore(p, acc)
            mstore(add(p, 32), client)
            mstore(add(p, 64), digest)
            mstore(add(p, 96), numSamples)
            mstore(add(p, 128), chunkRoot)
            next := and(keccak256(p, 160), 0xffffffffffffffffffffffffffffffffffffffffffffffffffffffff)
        }
    }

    /// @notice The client bits `word` holds for `round` (none if it was last written for
    ///         another round).
    function bitsFor(uint256 word, uint256 round) internal pure returns (uint256) {
        return word >> 224 == round ? word & BITS_MASK : 0;
    }

    /// @notice The word holding client `bits` for `round`.
    function tagged(uint256 bits, uint256 round) internal pure returns (uint256) {
        return (round << 224) | bits;
    }

    /// @notice Writes one update entry (client || digest || numSamples || chunkRoot) at
    ///         `offset` of `entries`, which must have 32 bytes of slack after its last entry.
    function writeUpdateEntry(
        bytes memory entries,
        uint256 offset,
        address client,
        bytes32 digest,
        uint64 numSamples,
        bytes32 chunkRoot
    ) internal pure {
        assembly ("memory-safe") {
            let p := add(add(entries, 32), offset)
            mstore(p, shl(96, client))
            mstore(add(p, 20), digest)
            mstore(add(p, 52), shl(192, numSamples))
            mstore(add(p, 60), chunkRoot)
        }
    }
}
