// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ChunkMerkle} from "./lib/ChunkMerkle.sol";
import {OneStepMath} from "./lib/OneStepMath.sol";

/// @title OneStep
/// @notice The one-step check of fedchain's fault proof: chunk j of the new state recomputed
///         from chunk j of each included update (opened against its root U_i) and chunk j of
///         the previous state (opened against the previous state root). Stateless and pure:
///         the games (FaultGames.sol) call it and compare its leaf with the submitter's.
/// @dev See docs/fault-proof.md for the commitments, the rules and the witness format.
contract OneStep {
    /// @notice Everything one step reads.
    /// @param rule OneStepMath.FEDAVG / FEDPROX / MEDIAN / TRIMMED_MEAN.
    /// @param dim Coordinates of the model vector d.
    /// @param betaNum Trimmed-mean beta numerator (beta = betaNum / betaDen; unused otherwise).
    /// @param betaDen Trimmed-mean beta denominator.
    /// @param j The chunk index.
    /// @param prevRoot Chunk root of the previous state.
    /// @param prevChunk Chunk j of the previous state (1024 bytes).
    /// @param prevProof Its Merkle proof against prevRoot.
    /// @param roots U_i of the included updates, in registration order.
    /// @param weights Their weights (num_samples), same order.
    /// @param chunks Chunk j of each update.
    /// @param proofs Their Merkle proofs against roots[i].
    /// @param witness Median / trimmed mean: per lane the ascending permutation of the inputs.
    struct Step {
        uint8 rule;
        uint64 dim;
        uint256 betaNum;
        uint256 betaDen;
        uint256 j;
        bytes32 prevRoot;
        bytes prevChunk;
        bytes32[] prevProof;
        bytes32[] roots;
        uint256[] weights;
        bytes[] chunks;
        bytes32[][] proofs;
        bytes witness;
    }

    /// @notice Everything one norm step reads (the stopping rule's commitment, see
    ///         docs/fault-proof.md): chunk j of the previous and of the claimed new state,
    ///         and the claimed prefix sum S_{j-1} opened against the claim's norm root.
    /// @param dim Coordinates of the model vector d.
    /// @param j The chunk index.
    /// @param prevRoot Chunk root of the previous state.
    /// @param prevChunk Chunk j of the previous state (1024 bytes).
    /// @param prevProof Its Merkle proof against prevRoot.
    /// @param newRoot Chunk root of the claimed new state.
    /// @param newChunk Chunk j of the claimed new state (1024 bytes).
    /// @param newProof Its Merkle proof against newRoot.
    /// @param normRoot The claim's norm root (leaves keccak256(0x03 ‖ S_j)).
    /// @param sPrev S_{j-1} (0 for j = 0).
    /// @param sPrevProof Proof of leaf j - 1 against normRoot (empty for j = 0).
    struct NormStep {
        uint64 dim;
        uint256 j;
        bytes32 prevRoot;
        bytes prevChunk;
        bytes32[] prevProof;
        bytes32 newRoot;
        bytes newChunk;
        bytes32[] newProof;
        bytes32 normRoot;
        uint256 sPrev;
        bytes32[] sPrevProof;
    }

    /// @notice roots, weights, chunks and proofs do not have one entry per input.
    error InputCountMismatch(uint256 roots, uint256 weights, uint256 chunks, uint256 proofs);
    /// @notice The previous state's chunk does not open against prevRoot at chunk j.
    error BadPrevProof(uint256 j);
    /// @notice Input `index`'s chunk does not open against its root U_i at chunk j.
    error BadInputProof(uint256 index, uint256 j);
    /// @notice The claimed new state's chunk does not open against newRoot at chunk j.
    error BadNewProof(uint256 j);
    /// @notice S_{j-1} does not open against the norm root at leaf j - 1.
    error BadNormProof(uint256 j);

    /// @notice Recompute chunk `s.j` of the new state after checking every opening.
    /// @return chunk The new chunk (1024 bytes, padding lanes 0).
    /// @return leaf Its leaf hash (keccak256(0x00 ‖ chunk)).
    function step(Step calldata s) external pure returns (bytes memory chunk, bytes32 leaf) {
        uint256 k = s.roots.length;
        // INVARIANT: one root, weight, chunk and proof per included input.
        if (s.weights.length != k || s.chunks.length != k || s.proofs.length != k) {
            revert InputCountMismatch(k, s.weights.length, s.chunks.length, s.proofs.length);
        }
        // INVARIANT: the previous chunk is the one the previous root commits to.
        if (
            !ChunkMerkle.verify(
                s.prevRoot, s.dim, s.j, ChunkMerkle.leafHash(s.prevChunk), s.prevProof
            )
        ) revert BadPrevProof(s.j);
        for (uint256 i = 0; i < k; ++i) {
            // INVARIANT: every input chunk is chunk j of the update its signer committed to.
            if (
                !ChunkMerkle.verify(
                    s.roots[i], s.dim, s.j, ChunkMerkle.leafHash(s.chunks[i]), s.proofs[i]
                )
            ) revert BadInputProof(i, s.j);
        }
        chunk = OneStepMath.stepChunk(
            s.rule,
            s.betaNum,
            s.betaDen,
            ChunkMerkle.validLanes(s.dim, s.j),
            s.prevChunk,
            s.chunks,
            s.weights,
            s.witness
        );
        leaf = ChunkMerkle.leafHashMem(chunk);
    }

    /// @notice Recompute leaf `s.j` of the norm tree, S_j = S_{j-1} + sum (new - prev)**2
    ///         over chunk j, after checking every opening.
    /// @return sum S_j.
    /// @return leaf Its norm leaf (keccak256(0x03 ‖ uint256_be(S_j))).
    function normStep(NormStep calldata s) external pure returns (uint256 sum, bytes32 leaf) {
        // INVARIANT: the previous chunk is the one the previous root commits to.
        if (
            !ChunkMerkle.verify(
                s.prevRoot, s.dim, s.j, ChunkMerkle.leafHash(s.prevChunk), s.prevProof
            )
        ) revert BadPrevProof(s.j);
        // INVARIANT: the new chunk is the one the claim's new root commits to.
        if (!ChunkMerkle.verify(s.newRoot, s.dim, s.j, ChunkMerkle.leafHash(s.newChunk), s.newProof)) {
            revert BadNewProof(s.j);
        }
        // INVARIANT: S_{j-1} is the claim's own (S_{-1} = 0 needs no opening).
        if (s.j == 0 ? s.sPrev != 0 : !_normOpens(s)) revert BadNormProof(s.j);
        sum = s.sPrev
            + OneStepMath.chunkNormSq(s.prevChunk, s.newChunk, ChunkMerkle.validLanes(s.dim, s.j));
        leaf = ChunkMerkle.normLeaf(sum);
    }

    function _normOpens(NormStep calldata s) private pure returns (bool) {
        return ChunkMerkle.verify(
            s.normRoot, s.dim, s.j - 1, ChunkMerkle.normLeaf(s.sPrev), s.sPrevProof
        );
    }

    /// @notice The squared norm of one chunk's difference, without openings (differential
    ///         testing and gas accounting).
    function chunkNormSq(bytes calldata prev, bytes calldata nw, uint256 valid)
        external
        pure
        returns (uint256)
    {
        return OneStepMath.chunkNormSq(prev, nw, valid);
    }

    /// @notice The rule alone, without openings (differential testing and gas accounting).
    function stepChunk(
        uint8 rule,
        uint256 betaNum,
        uint256 betaDen,
        uint256 valid,
        bytes calldata prev,
        bytes[] calldata xs,
        uint256[] calldata w,
        bytes calldata witness
    ) external pure returns (bytes memory) {
        return OneStepMath.stepChunk(rule, betaNum, betaDen, valid, prev, xs, w, witness);
    }

    /// @notice keccak256(0x00 ‖ payload) of a 1024-byte chunk.
    function leafHash(bytes calldata payload) external pure returns (bytes32) {
        return ChunkMerkle.leafHash(payload);
    }

    /// @notice keccak256(0x01 ‖ left ‖ right).
    function nodeHash(bytes32 left, bytes32 right) external pure returns (bytes32) {
        return ChunkMerkle.nodeHash(left, right);
    }

    /// @notice Whether `leaf` is chunk `j` of the `d`-vector committed by `root`.
    function verifyChunk(
        bytes32 root,
        uint64 d,
        uint256 j,
        bytes32 leaf,
        bytes32[] calldata proof
    ) external pure returns (bool) {
        return ChunkMerkle.verify(root, d, j, leaf, proof);
    }

    /// @notice The root of a whole vector given as its concatenated padded chunks.
    function vectorRoot(bytes calldata packed, uint64 d) external pure returns (bytes32) {
        return ChunkMerkle.vectorRoot(packed, d);
    }
}
