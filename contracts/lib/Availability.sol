// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title Availability
/// @notice Pure bit-sliced counting of attestation bitmaps: which updates did at least
///         `threshold` committee members attest? One 256-bit word covers 256 updates; a
///         counter is 9 bit planes (plane k holds bit k of every update's count), enough for
///         the contract's 256 members. Adding a bitmap is a ripple-carry addition across the
///         planes and the threshold test a bitwise comparison, so a word costs O(members)
///         word operations instead of O(256 * members) bit operations.
library Availability {
    /// @notice Adds one attestation word (one bit per update) to `counter`.
    function add(uint256[9] memory counter, uint256 word) internal pure {
        uint256 carry = word;
        for (uint256 k = 0; k < 9 && carry != 0; ++k) {
            uint256 plane = counter[k];
            counter[k] = plane ^ carry;
            carry = plane & carry;
        }
    }

    /// @notice The bits whose count in `counter` is at least `threshold` (< 512).
    function atLeast(uint256[9] memory counter, uint256 threshold) internal pure returns (uint256) {
        // Compare from the most significant plane down: `greater` collects bits already known
        // to exceed the threshold, `equal` those whose higher planes all match it.
        uint256 greater = 0;
        uint256 equal = type(uint256).max;
        for (uint256 i = 9; i > 0; --i) {
            uint256 k = i - 1;
            uint256 plane = counter[k];
            if ((threshold >> k) & 1 == 1) {
                equal &= plane;
            } else {
                greater |= equal & plane;
                equal &= ~plane;
            }
        }
        return greater | equal;
    }

    /// @notice A bitmap with the first `count` bits set (every update included).
    function allSet(uint256 count) internal pure returns (uint256[] memory words) {
        words = new uint256[]((count + 255) >> 8);
        for (uint256 w = 0; w < words.length; ++w) {
            uint256 bits = count - 256 * w;
            words[w] = bits >= 256 ? type(uint256).max : (uint256(1) << bits) - 1;
        }
    }
}
