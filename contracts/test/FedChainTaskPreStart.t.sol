// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Test} from "./utils/Test.sol";
import {TaskFixture} from "./utils/TaskFixture.sol";
import {FedChainTask} from "../FedChainTask.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";

/// @title PreStartHandler
/// @notice The committee before `start`: members join and leave in any order, the owner may
///         start (it needs 4) or never do, anyone aborts a task that never started, everyone
///         withdraws.
contract PreStartHandler is TaskFixture {
    uint256 internal constant CANDIDATES = 6;
    uint256 public deposited;
    uint256 public withdrawn;
    uint256 public startedBelowFour;

    constructor() {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.abortTimeout = 40;
        deploy(cfg);
    }

    function join(uint8 who) external {
        address a = agg(who % CANDIDATES);
        vm.deal(a, STAKE);
        vm.prank(a);
        try task.registerAggregator{value: STAKE}() {
            deposited += STAKE;
        } catch {}
    }

    function leave(uint8 who) external {
        vm.prank(agg(who % CANDIDATES));
        try task.leaveCommittee() {} catch {}
    }

    function start() external {
        uint256 n = task.committeeSize();
        vm.prank(owner);
        try task.start() {
            if (n < 4) startedBelowFour += 1;
        } catch {}
    }

    function wait(uint8 blocks) external {
        vm.roll(block.number + 1 + blocks);
    }

    function abortTask() external {
        try task.abortTask() {} catch {}
    }

    function release(uint8 who) external {
        vm.prank(agg(who % CANDIDATES));
        try task.releaseStake() {} catch {}
    }

    function withdraw(uint8 who) external {
        address a = agg(who % CANDIDATES);
        uint256 owed = task.credits(a);
        uint256 before = a.balance;
        vm.prank(a);
        try task.withdraw() {
            require(a.balance - before == owed, "paid other than the credits");
            withdrawn += owed;
        } catch {}
    }

    /// @notice Σ stakes + Σ credits of every candidate (nothing is burned before start).
    function owed() external view returns (uint256 total) {
        for (uint256 i = 0; i < CANDIDATES; ++i) {
            total += stakeOf(agg(i)) + task.credits(agg(i));
        }
        total += task.credits(BURN);
    }

    /// @notice Members of the frozen-or-not committee are exactly the registered candidates,
    ///         each at its own index.
    function committeeConsistent() external view returns (bool) {
        address[] memory members = task.aggregators();
        uint256 registered = 0;
        for (uint256 i = 0; i < CANDIDATES; ++i) {
            (bool isMember,,,, uint256 index,) = task.aggregatorInfo(agg(i));
            if (!isMember) continue;
            ++registered;
            if (index >= members.length || members[index] != agg(i)) return false;
        }
        return registered == members.length;
    }

    function taskAddress() external view returns (address) {
        return address(task);
    }
}

/// @title FedChainTaskPreStartInvariantTest
/// @notice Before `start` nobody's stake is locked: leaving credits it, the committee stays
///         consistent, `start` never accepts fewer than 4 members, and value is conserved.
contract FedChainTaskPreStartInvariantTest is Test {
    PreStartHandler internal handler;
    FedChainTask internal task;

    function setUp() public {
        handler = new PreStartHandler();
        task = FedChainTask(payable(handler.taskAddress()));
        targetContract(address(handler));
    }

    function invariant_preStartValueIsConserved() public view {
        assertEq(address(task).balance, handler.owed(), "balance = stakes + credits");
        assertEq(handler.deposited(), address(task).balance + handler.withdrawn(), "paid in = held + paid out");
    }

    function invariant_committeeIsConsistentAndNeverBelowFour() public view {
        assertTrue(handler.committeeConsistent(), "committee list and indices agree");
        assertEq(handler.startedBelowFour(), 0, "started with fewer than 4 members");
    }
}
