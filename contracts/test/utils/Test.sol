// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Vm} from "./Vm.sol";

/// @title Test
/// @notice A minimal base for forge tests (what forge-std's `Test` gives, reduced to what
///         fedchain's tests use): the cheatcode handle, assertions that revert with both values
///         (forge reports the revert string), `bound` for fuzz inputs, and the hooks forge's
///         invariant runner reads (`targetContracts`, `targetSelectors`, `targetSenders`).
abstract contract Test {
    /// @dev forge's cheatcode address: address(uint160(uint256(keccak256("hevm cheat code")))).
    Vm internal constant vm = Vm(0x7109709ECfa91a80626fF3989D68f67F5b1DD12D);

    /// @notice One target of the invariant runner and the functions it may call on it.
    struct FuzzSelector {
        address addr;
        bytes4[] selectors;
    }

    address[] private _targetContracts;
    address[] private _targetSenders;
    FuzzSelector[] private _targetSelectors;

    // -- invariant runner hooks (forge calls these on the test contract) -----------------

    function targetContracts() public view returns (address[] memory) {
        return _targetContracts;
    }

    function targetSenders() public view returns (address[] memory) {
        return _targetSenders;
    }

    function targetSelectors() public view returns (FuzzSelector[] memory) {
        return _targetSelectors;
    }

    function targetContract(address target) internal {
        _targetContracts.push(target);
    }

    function targetSender(address sender) internal {
        _targetSenders.push(sender);
    }

    function targetSelector(FuzzSelector memory selector) internal {
        _targetSelectors.push(selector);
    }

    // -- assertions -----------------------------------------------------------------------

    function fail(string memory message) internal pure {
        revert(message);
    }

    function assertTrue(bool condition, string memory message) internal pure {
        if (!condition) revert(message);
    }

    function assertFalse(bool condition, string memory message) internal pure {
        if (condition) revert(message);
    }

    function assertEq(uint256 a, uint256 b, string memory message) internal pure {
        if (a != b) {
            revert(string.concat(message, ": ", vm.toString(a), " != ", vm.toString(b)));
        }
    }

    function assertEq(address a, address b, string memory message) internal pure {
        if (a != b) {
            revert(string.concat(message, ": ", vm.toString(a), " != ", vm.toString(b)));
        }
    }

    function assertEq(bytes32 a, bytes32 b, string memory message) internal pure {
        if (a != b) {
            revert(string.concat(message, ": ", vm.toString(a), " != ", vm.toString(b)));
        }
    }

    function assertEq(bool a, bool b, string memory message) internal pure {
        if (a != b) revert(string.concat(message, a ? ": true != false" : ": false != true"));
    }

    function assertLe(uint256 a, uint256 b, string memory message) internal pure {
        if (a > b) revert(string.concat(message, ": ", vm.toString(a), " > ", vm.toString(b)));
    }

    function assertGt(uint256 a, uint256 b, string memory message) internal pure {
        if (a <= b) revert(string.concat(message, ": ", vm.toString(a), " <= ", vm.toString(b)));
    }

    // -- fuzz inputs ----------------------------------------------------------------------

    /// @notice `x` mapped into [lo, hi] (inclusive), uniformly enough for fuzzing and
    ///         keeping small values small (x itself when it is already in range).
    function bound(uint256 x, uint256 lo, uint256 hi) internal pure returns (uint256) {
        require(lo <= hi, "bound: lo > hi");
        if (x >= lo && x <= hi) return x;
        uint256 size = hi - lo;
        if (size == type(uint256).max) return x;
        return lo + (x % (size + 1));
    }
}
