// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title Quorums
/// @notice Byzantine quorum thresholds of the aggregator committee, defined once on-chain.
///         Mirrors `consensus/quorums.py` (`max_faulty`, `commit_quorum`) bit for bit
///         (tests/test_contract_dispute.py compares both for committees of 1 to 15 members).
/// @dev For a committee of `n` members PBFT tolerates f = (n - 1) / 3 Byzantine members.
///      A commit certificate needs n - f distinct signers: any two such sets intersect in at
///      least n - 2f >= f + 1 members, hence in at least one correct member, so two
///      conflicting verdicts can never both be certified while at most f members are faulty.
///      n - f equals 2f + 1 when n = 3f + 1 and is larger otherwise (n = 5: f = 1, quorum 4).
library Quorums {
    /// @notice A quorum of an empty committee is undefined (the Python side raises too).
    error EmptyCommittee();

    /// @notice Largest number of Byzantine members a committee of `n` tolerates.
    function maxFaulty(uint256 n) internal pure returns (uint256) {
        // INVARIANT: quorums are only defined for a non-empty committee (start() needs n >= 1).
        if (n == 0) revert EmptyCommittee();
        return (n - 1) / 3;
    }

    /// @notice Number of distinct committee signatures a commit certificate needs.
    function commitQuorum(uint256 n) internal pure returns (uint256) {
        // INVARIANT: commitQuorum(n) = n - f with f = (n - 1) / 3, exactly as
        // consensus.quorums.commit_quorum; two quorums always share a correct member.
        return n - maxFaulty(n);
    }
}
