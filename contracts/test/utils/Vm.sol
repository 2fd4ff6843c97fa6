// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title Vm
/// @notice The few forge cheatcodes fedchain's contract tests use, declared here instead of
///         importing forge-std (the npm `forge-std` package is an unofficial 2022 copy that
///         does not even ship the ds-test file it imports; forge must run offline). The
///         signatures are forge's own (foundry-rs/forge-std `src/Vm.sol`); forge answers
///         calls to `VM_ADDRESS` = address(uint160(uint256(keccak256("hevm cheat code")))).
interface Vm {
    // block and account state
    function roll(uint256 newHeight) external;
    function warp(uint256 newTimestamp) external;
    function deal(address account, uint256 newBalance) external;
    function getBlockNumber() external view returns (uint256 height);
    // callers
    function prank(address msgSender) external;
    function startPrank(address msgSender) external;
    function stopPrank() external;
    // expectations on the next call
    function expectRevert() external;
    function expectRevert(bytes4 revertData) external;
    function expectRevert(bytes calldata revertData) external;
    function expectEmit(bool checkTopic1, bool checkTopic2, bool checkTopic3, bool checkData) external;
    function expectEmit(bool checkTopic1, bool checkTopic2, bool checkTopic3, bool checkData, address emitter)
        external;
    // keys and signatures
    function addr(uint256 privateKey) external pure returns (address keyAddr);
    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);
    function signCompact(uint256 privateKey, bytes32 digest) external pure returns (bytes32 r, bytes32 vs);
    // fuzzing
    function assume(bool condition) external pure;
    // logs
    struct Log {
        bytes32[] topics;
        bytes data;
        address emitter;
    }

    function recordLogs() external;
    function getRecordedLogs() external returns (Log[] memory logs);
    // formatting
    function toString(uint256 value) external pure returns (string memory);
    function toString(address value) external pure returns (string memory);
    function toString(bytes32 value) external pure returns (string memory);
    function label(address account, string calldata newLabel) external;
}
