// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title Rotation
/// @notice Pure maths of the aggregator rotation schedule. The contract walks forward
///         cyclically from `startIndex` to the first eligible aggregator; off-chain code
///         (fedchain.contract.rotation_start_index) mirrors this function bit for bit.
library Rotation {
    /// @dev Round-robin: round r, attempt a starts at (r - 1 + a) mod n.
    uint8 internal constant ROUND_ROBIN = 0;
    /// @dev Seeded random: start = uint256(keccak256(abi.encode(seed, r, a))) mod n.
    uint8 internal constant SEEDED_RANDOM = 1;

    /// @notice Index in the committee at which the search for round `round`, attempt
    ///         `attempt` starts. `round` is 1-based and `n` must be non-zero.
    function startIndex(uint8 policy, bytes32 seed, uint256 round, uint256 attempt, uint256 n)
        internal
        pure
        returns (uint256)
    {
        if (policy == ROUND_ROBIN) {
            return (round - 1 + attempt) % n;
        }
        return uint256(keccak256(abi.encode(seed, round, attempt))) % n;
    }
}
