// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title ChunkMerkle
/// @notice Keccak Merkle commitments over fixed-size chunks of a quantised int32 vector; the
///         same bytes as `protocol/merkle.py` (tests/test_fault_merkle.py compares both).
/// @dev Layout (`‖` is concatenation):
///      chunk  = 256 coordinates as 4-byte big-endian two's complement int32 (1024 bytes; the
///               last chunk is zero-padded);
///      leaf   = keccak256(0x00 ‖ chunk);  node = keccak256(0x01 ‖ left ‖ right);
///      tree   = ceil(log2 n) levels over n = ceil(d / 256) leaves, empty slots bytes32(0);
///      root   = keccak256(0x02 ‖ uint64_be(d) ‖ top).
///      A proof is the `depth` sibling hashes from the leaf upward; bit l of the chunk index
///      says whether the level-l node is a right child.
library ChunkMerkle {
    /// @notice Coordinates per chunk.
    uint256 internal constant CHUNK = 256;
    /// @notice Bytes of one chunk payload.
    uint256 internal constant CHUNK_BYTES = 1024;

    /// @notice A chunk payload that is not 1024 bytes long.
    error BadChunkLength(uint256 length);

    /// @notice Number of chunks of a `d`-coordinate vector: ceil(d / 256).
    function chunkCount(uint256 d) internal pure returns (uint256) {
        return (d + CHUNK - 1) / CHUNK;
    }

    /// @notice Depth of the tree over the chunks of a `d`-vector: ceil(log2 n), 0 for n <= 1.
    function depth(uint256 d) internal pure returns (uint256 levels) {
        uint256 n = chunkCount(d);
        if (n <= 1) return 0;
        uint256 m = n - 1;
        while (m != 0) {
            ++levels;
            m >>= 1;
        }
    }

    /// @notice Coordinates of chunk `j` that lie inside the vector (the rest is padding).
    function validLanes(uint256 d, uint256 j) internal pure returns (uint256) {
        uint256 start = j * CHUNK;
        if (start >= d) return 0;
        uint256 left = d - start;
        return left < CHUNK ? left : CHUNK;
    }

    /// @notice keccak256(0x00 ‖ payload) of a 1024-byte chunk payload in calldata.
    function leafHash(bytes calldata payload) internal pure returns (bytes32 h) {
        // INVARIANT: a leaf hashes exactly one 1024-byte chunk (the Python spec's layout).
        if (payload.length != CHUNK_BYTES) revert BadChunkLength(payload.length);
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore8(p, 0)
            calldatacopy(add(p, 1), payload.offset, 1024)
            h := keccak256(p, 1025)
        }
    }

    /// @notice keccak256(0x00 ‖ payload) of a 1024-byte chunk payload in memory.
    function leafHashMem(bytes memory payload) internal pure returns (bytes32 h) {
        // INVARIANT: a leaf hashes exactly one 1024-byte chunk (the Python spec's layout).
        if (payload.length != CHUNK_BYTES) revert BadChunkLength(payload.length);
        h = keccak256(abi.encodePacked(bytes1(0x00), payload));
    }

    /// @notice keccak256(0x03 ‖ uint256_be(s)): a norm tree's leaf for prefix sum `s` (the
    ///         stopping rule's commitment; same tree shape and root domain as a chunk tree).
    function normLeaf(uint256 s) internal pure returns (bytes32) {
        return keccak256(abi.encodePacked(bytes1(0x03), s));
    }

    /// @notice keccak256(0x01 ‖ left ‖ right).
    function nodeHash(bytes32 left, bytes32 right) internal pure returns (bytes32 h) {
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore8(p, 1)
            mstore(add(p, 1), left)
            mstore(add(p, 33), right)
            h := keccak256(p, 65)
        }
    }

    /// @notice keccak256(0x02 ‖ uint64_be(d) ‖ top).
    function rootOf(uint64 d, bytes32 top) internal pure returns (bytes32) {
        return keccak256(abi.encodePacked(bytes1(0x02), d, top));
    }

    /// @notice Whether `leaf` is chunk `j` of the `d`-vector committed by `root`.
    function verify(
        bytes32 root,
        uint64 d,
        uint256 j,
        bytes32 leaf,
        bytes32[] calldata proof
    ) internal pure returns (bool) {
        if (j >= chunkCount(d) || proof.length != depth(d)) return false;
        bytes32 h = leaf;
        uint256 idx = j;
        for (uint256 l = 0; l < proof.length; ++l) {
            h = (idx & 1 == 1) ? nodeHash(proof[l], h) : nodeHash(h, proof[l]);
            idx >>= 1;
        }
        return rootOf(d, h) == root;
    }

    /// @notice The root of a whole vector given as its concatenated padded chunks (tests and
    ///         small vectors only: gas grows with d).
    function vectorRoot(bytes calldata packed, uint64 d) internal pure returns (bytes32) {
        uint256 n = chunkCount(d);
        // INVARIANT: the packed vector is exactly n padded chunks.
        if (packed.length != n * CHUNK_BYTES) revert BadChunkLength(packed.length);
        if (n == 0) return rootOf(d, bytes32(0));
        uint256 width = 1 << depth(d);
        bytes32[] memory level = new bytes32[](width);
        for (uint256 i = 0; i < n; ++i) {
            level[i] = leafHash(packed[i * CHUNK_BYTES:(i + 1) * CHUNK_BYTES]);
        }
        while (width > 1) {
            width >>= 1;
            for (uint256 i = 0; i < width; ++i) {
                level[i] = nodeHash(level[2 * i], level[2 * i + 1]);
            }
        }
        return rootOf(d, level[0]);
    }
}
