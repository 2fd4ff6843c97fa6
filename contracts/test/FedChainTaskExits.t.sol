// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TaskFixture} from "./utils/TaskFixture.sol";
import {FedChainTask} from "../FedChainTask.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";

/// @title FedChainTaskExitsTest
/// @notice Issue 20's contract changes (wip/20a): bounded client weight (`maxSamples`), the
///         exits (`leaveCommittee`, `skipRound`, `abortTask`), the committee bound, griefing
///         economics (owner off the committee, burned forfeits, one challenge per member,
///         expired disputes refund the submitter), the client allowlist, certificates counting
///         unslashed signers, and
///         a slashed chosen member restarting the attempt. Each test names the attack it closes.
contract FedChainTaskExitsTest is TaskFixture {
    // -- bounded weight ---------------------------------------------------------------------

    function test_constructor_refusesUnboundedWeightsAndEndlessWaits() public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.maxSamples = 0;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidMaxSamples.selector, 0, 4));
        new FedChainTask(cfg, evidence);
        // maxSamples * maxUpdates must fit an int64
        cfg.maxSamples = uint64(type(int64).max / 4) + 1;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidMaxSamples.selector, cfg.maxSamples, 4));
        new FedChainTask(cfg, evidence);
        cfg = defaultConfig();
        cfg.collectTimeout = 0;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidTimeouts.selector, 0, cfg.abortTimeout));
        new FedChainTask(cfg, evidence);
        cfg = defaultConfig();
        cfg.abortTimeout = 0;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidTimeouts.selector, cfg.collectTimeout, 0));
        new FedChainTask(cfg, evidence);
    }

    /// @notice Attack: one client claims numSamples = 2**63 (or 2**40) and halts or owns every rule.
    function testFuzz_samplesAboveMaxSamplesAreRefused(uint64 samples) public {
        setUpTask(4, 2);
        uint64 maxSamples = task.config().maxSamples;
        samples = uint64(bound(samples, 1, type(uint64).max));
        vm.prank(client(0));
        if (samples > maxSamples) {
            vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.SamplesOutOfRange.selector, samples, maxSamples));
        }
        task.submitUpdate(1, updateDigest(1, 0), samples, rootOf(updateDigest(1, 0)));
        // the same through a relayed signed record
        bytes memory rec = updateRecord(1, 1, updateDigest(1, 1), samples);
        if (samples > maxSamples) {
            vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.SamplesOutOfRange.selector, samples, maxSamples));
        }
        task.submitUpdates(1, rec);
    }

    // -- committee ---------------------------------------------------------------------------

    /// @notice Attack: a committee of 1-3 members, where n - f = n makes the accused sign its
    ///         own conviction.
    function test_start_refusesCommitteesBelowFour() public {
        deploy(defaultConfig());
        for (uint256 n = 0; n < 4; ++n) {
            vm.prank(owner);
            vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.CommitteeTooSmall.selector, n, 4));
            task.start();
            vm.deal(agg(n), STAKE);
            vm.prank(agg(n));
            task.registerAggregator{value: STAKE}();
        }
        startTask(); // n = 4 = 3f + 1 with f = 1
        assertEq(task.commitQuorum(), 3, "quorum 3 of 4");
    }

    /// @notice Attack: the owner sits on the committee and profits from the disputes it causes.
    function test_registerAggregator_refusesTheOwner() public {
        deploy(defaultConfig());
        vm.deal(owner, STAKE);
        vm.prank(owner);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.OwnerCannotServe.selector, owner));
        task.registerAggregator{value: STAKE}();
    }

    /// @notice Attack: the owner never calls `start`; members leave with their stakes.
    function test_leaveCommittee_beforeStartCreditsTheStake() public {
        deploy(defaultConfig());
        registerCommittee(5);
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.AggregatorLeft(agg(1), STAKE);
        vm.prank(agg(1));
        task.leaveCommittee();
        assertEq(task.credits(agg(1)), STAKE, "stake credited");
        assertEq(task.committeeSize(), 4, "four left");
        // the last member took the leaver's index
        assertEq(task.aggregators()[1], agg(4), "last member moved into the gap");
        assertEq(indexOf(agg(4)), 1, "its index follows");
        vm.prank(agg(1));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NotAggregator.selector, agg(1)));
        task.leaveCommittee();
        uint256 before = agg(1).balance;
        vm.prank(agg(1));
        task.withdraw();
        assertEq(agg(1).balance - before, STAKE, "stake paid out");
        startTask();
        vm.prank(agg(2));
        vm.expectRevert(FedChainTaskStorage.TaskAlreadyStarted.selector);
        task.leaveCommittee();
    }

    // -- admission ----------------------------------------------------------------------------

    /// @notice Attack: sybil clients register by the dozen and fill every round's slots; a
    ///         `clientAllowlist` task admits only the accounts its owner allowed.
    function testFuzz_allowlistAdmitsExactlyTheAllowedClients(uint8 allowedMask) public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.clientAllowlist = true;
        deploy(cfg);
        uint256 count = 0;
        for (uint256 i = 0; i < 6; ++i) {
            if (allowedMask & (1 << i) != 0) ++count;
        }
        address[] memory allowed = new address[](count);
        uint256 j = 0;
        for (uint256 i = 0; i < 6; ++i) {
            if (allowedMask & (1 << i) != 0) allowed[j++] = client(i);
        }
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(Ownable.OwnableUnauthorizedAccount.selector, client(0)));
        task.allowClients(allowed);
        vm.expectEmit(false, false, false, true, address(task));
        emit FedChainTaskStorage.ClientsAllowed(allowed);
        vm.prank(owner);
        task.allowClients(allowed);
        for (uint256 i = 0; i < 6; ++i) {
            vm.prank(client(i));
            if (allowedMask & (1 << i) == 0) {
                vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClientNotAllowed.selector, client(i)));
            }
            task.registerClient();
        }
        assertEq(task.clientCount(), count, "exactly the allowed clients registered");
    }

    function test_allowlistOff_everyoneRegisters() public {
        deploy(defaultConfig());
        vm.prank(client(0));
        task.registerClient();
        assertEq(task.clientCount(), 1, "open registration");
    }

    // -- liveness exits ----------------------------------------------------------------------

    /// @notice Attack: a round that never reaches minUpdates waits forever.
    function test_skipRound_carriesTheModelForwardAfterTheCollectTimeout() public {
        setUpTask(4, 2);
        submitUpdates(1, 1); // one short of minUpdates
        FedChainTaskStorage.TaskConfig memory cfg = task.config();
        uint256 timeoutBlock = task.getRound(1).openBlock + cfg.collectWindow + cfg.collectTimeout;
        vm.roll(timeoutBlock);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.CollectionNotTimedOut.selector, 1, timeoutBlock));
        task.skipRound(1);
        vm.roll(timeoutBlock + 1);
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.RoundSkipped(1, 1, MODEL0);
        task.skipRound(1);
        assertEq(task.roundDigest(1), MODEL0, "initial model carried forward");
        assertEq(task.currentRound(), 2, "round 2 open");
        assertEq(task.globalModelDigest(), MODEL0, "global model unchanged");
    }

    function test_skipRound_refusedOnceCollectionClosed() public {
        setUpTask(4, 2);
        submitUpdates(1, 2);
        FedChainTaskStorage.TaskConfig memory cfg = task.config();
        uint256 timeoutBlock = task.getRound(1).openBlock + cfg.collectWindow + cfg.collectTimeout;
        vm.roll(timeoutBlock + 1);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.CollectionNotTimedOut.selector, 1, timeoutBlock));
        task.skipRound(1);
    }

    /// @notice Attack: the task stalls (no start, a dead committee, a stuck round) and locks
    ///         every stake and bond; after abortTimeout anyone ends it and everyone is paid.
    function test_abortTask_stalledRoundRefundsBondsAndReleasesStakes() public {
        setUpTask(4, 4);
        address chosen = reachSubmitted(1, honestDigest(1));
        address challenger = chosen == agg(1) ? agg(2) : agg(1);
        vm.prank(challenger);
        task.challenge{value: CHALLENGE_BOND}(1);
        uint256 abortBlock = task.getRound(1).openBlock + task.config().abortTimeout;
        vm.roll(abortBlock);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.TaskNotStalled.selector, abortBlock));
        task.abortTask();
        vm.roll(abortBlock + 1);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.TaskAborted(1, client(0), BOND + CHALLENGE_BOND);
        vm.prank(client(0));
        task.abortTask();
        assertEq(task.credits(chosen), BOND, "submitter's bond back");
        assertEq(task.credits(challenger), CHALLENGE_BOND, "challenger's bond back");
        vm.expectRevert(FedChainTaskStorage.TaskAlreadyCompleted.selector);
        task.abortTask();
        for (uint256 i = 0; i < 4; ++i) {
            vm.prank(agg(i));
            task.releaseStake();
            vm.prank(agg(i));
            task.withdraw();
        }
        assertEq(address(task).balance, 0, "every stake and bond paid out");
    }

    function test_abortTask_neverStartedTask() public {
        deploy(defaultConfig());
        registerCommittee(4);
        uint256 abortBlock = 100 + task.config().abortTimeout; // deployed at block 100
        vm.roll(abortBlock + 1);
        task.abortTask();
        vm.prank(agg(0));
        task.releaseStake();
        assertEq(task.credits(agg(0)), STAKE, "stake released");
    }

    // -- griefing economics --------------------------------------------------------------------

    /// @notice Attack: one member challenges the same good aggregate again and again.
    function test_challenge_oncePerMemberPerSubmission() public {
        setUpTask(4, 4);
        address chosen = reachSubmitted(1, honestDigest(1));
        address griefer = chosen == agg(1) ? agg(2) : agg(1);
        vm.prank(griefer);
        task.challenge{value: CHALLENGE_BOND}(1);
        task.resolveDispute(1, 0, false, 0, certificate(1, 0, honestDigest(1), false, 0, membersExcept(4, griefer, 3)));
        assertEq(task.credits(BURN), CHALLENGE_BOND, "forfeited bond burned");
        assertEq(task.credits(owner), 0, "the owner gains nothing");
        vm.prank(griefer);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AlreadyChallenged.selector, 1, griefer));
        task.challenge{value: CHALLENGE_BOND}(1);
    }

    /// @notice Attack: a Byzantine member challenges a right aggregate and stalls the
    ///         committee; the expired dispute used to send the honest submitter's bond to the
    ///         treasury (the Foundry invariant campaign found this on 66b619d).
    function test_expireDispute_refundsTheHonestSubmittersBond() public {
        setUpTask(4, 4);
        address chosen = reachSubmitted(1, honestDigest(1));
        address griefer = chosen == agg(1) ? agg(2) : agg(1);
        vm.prank(griefer);
        task.challenge{value: CHALLENGE_BOND}(1);
        vm.roll(task.getRound(1).disputeDeadline + 1);
        vm.expectEmit(true, true, true, true, address(task));
        emit FedChainTaskStorage.DisputeExpired(1, 0, chosen, griefer, CHALLENGE_BOND);
        task.expireDispute(1);
        assertEq(task.credits(chosen), BOND, "submitter's bond refunded");
        assertEq(task.credits(BURN), CHALLENGE_BOND, "challenge bond burned");
        assertEq(task.credits(owner), 0, "the owner gains nothing");
    }

    // -- the smaller ones ------------------------------------------------------------------------

    /// @notice Attack: a signer of a certificate gets itself slashed (through a second
    ///         identity) to void the quorum; its signature now just does not count.
    function test_certificate_countsOnlyUnslashedSigners() public {
        deploy(defaultConfig());
        registerCommittee(7); // n = 7: f = 2, quorum 5
        registerClients(2);
        startTask();
        bytes32 wrong = keccak256("wrong");
        address chosen = reachSubmitted(1, wrong);
        uint256[] memory others = membersExcept(7, chosen, 6);
        vm.prank(agg(others[0]));
        task.challenge{value: CHALLENGE_BOND}(1);
        // six members sign; then one of them is slashed for equivocating elsewhere
        bytes[] memory sigs = certificate(1, 0, wrong, true, 0, others);
        _slashForEquivocation(others[5]);
        // five valid signatures remain: the certificate stands (it used to revert SignerSlashed)
        task.resolveDispute(1, 0, true, 0, sigs);
        (,, bool slashed,,,) = task.aggregatorInfo(chosen);
        assertTrue(slashed, "convicted");
    }

    function test_certificate_slashedSignersDoNotMakeAQuorum() public {
        deploy(defaultConfig());
        registerCommittee(7);
        registerClients(2);
        startTask();
        bytes32 wrong = keccak256("wrong");
        address chosen = reachSubmitted(1, wrong);
        uint256[] memory others = membersExcept(7, chosen, 5);
        vm.prank(agg(others[0]));
        task.challenge{value: CHALLENGE_BOND}(1);
        bytes[] memory sigs = certificate(1, 0, wrong, true, 0, others);
        _slashForEquivocation(others[4]);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.QuorumNotReached.selector, 4, 5));
        task.resolveDispute(1, 0, true, 0, sigs);
    }

    function _slashForEquivocation(uint256 member) private {
        bytes32 d = keccak256("elsewhere");
        FedChainTaskStorage.SignedVote memory a;
        FedChainTaskStorage.SignedVote memory b;
        (a.round, a.attempt, a.aggregateDigest, a.faulty) = (1, 0, d, true);
        (b.round, b.attempt, b.aggregateDigest, b.faulty) = (1, 0, d, false);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(aggKey(member), task.verdictDigest(1, 0, d, true, 9));
        a.signature = abi.encodePacked(r, s, v);
        (v, r, s) = vm.sign(aggKey(member), task.verdictDigest(1, 0, d, false, 9));
        b.signature = abi.encodePacked(r, s, v);
        commitEvidence(client(1), 2, 9, 0, a, b);
        vm.prank(client(1));
        task.slashEquivocation(2, 9, 0, a, b);
    }

    /// @notice Attack: the chosen member is slashed mid-attempt and the next member inherits
    ///         its deadline (then is penalised); the attempt now restarts for the next one.
    function test_slashingTheChosenMemberRestartsTheAttempt() public {
        setUpTask(4, 4);
        submitUpdates(1, 2);
        closeCollection(1);
        (address chosen, uint256 attempt, uint256 deadline) = task.currentAggregator();
        vm.roll(deadline - 1);
        _slashForEquivocation(indexOf(chosen));
        (address next, uint256 attempt2, uint256 deadline2) = task.currentAggregator();
        assertEq(attempt2, attempt + 1, "attempt restarted");
        assertTrue(next != chosen, "another member");
        assertEq(deadline2, block.number + task.config().submitTimeout, "a whole submitTimeout");
    }

    /// @notice Attack: one batch at round open takes every slot. With minCollectionBlocks the
    ///         round opens ceil(maxUpdates * blocks open / minCollectionBlocks) slots, so
    ///         collection cannot close on maxUpdates before the round was open that long.
    function testFuzz_slotsOpenProgressively(uint8 m8, uint8 wait8) public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.collectWindow = 20;
        cfg.minCollectionBlocks = uint32(bound(m8, 1, 12));
        deploy(cfg);
        registerCommittee(4);
        registerClients(4);
        startTask();
        uint256 open = task.getRound(1).openBlock;
        vm.roll(open + bound(wait8, 0, 14));
        uint256 blocksOpen = block.number - open + 1;
        uint256 m = cfg.minCollectionBlocks;
        uint256 slots = blocksOpen >= m ? 4 : (4 * blocksOpen + m - 1) / m;
        for (uint256 i = 0; i < slots; ++i) {
            vm.prank(client(i));
            task.submitUpdate(1, updateDigest(1, i), 10, rootOf(updateDigest(1, i)));
        }
        if (slots < 4) {
            vm.prank(client(slots));
            vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.SlotsNotOpen.selector, 1, slots));
            task.submitUpdate(1, updateDigest(1, slots), 10, rootOf(updateDigest(1, slots)));
        } else {
            assertTrue(task.getRound(1).collectionClosed, "maxUpdates closes once every slot is open");
        }
    }

    /// @notice A client locks exactly clientDeposit; it comes back once, after the task ended.
    function test_clientDeposit_lockedThenReturnedOnce() public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.clientDeposit = 1 ether;
        deploy(cfg);
        registerCommittee(4);
        vm.deal(client(0), 3 ether);
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.WrongValue.selector, 1 ether, 0));
        task.registerClient();
        registerClients(2);
        assertEq(address(task).balance, 4 * STAKE + 2 ether, "stakes + deposits");
        vm.prank(client(0));
        vm.expectRevert(FedChainTaskStorage.TaskNotCompleted.selector);
        task.releaseDeposit();
        vm.roll(block.number + cfg.abortTimeout + 1);
        task.abortTask();
        vm.prank(client(0));
        task.releaseDeposit();
        assertEq(task.credits(client(0)), 1 ether, "deposit credited");
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NothingToWithdraw.selector, client(0)));
        task.releaseDeposit();
    }
}
