// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TaskFixture} from "./utils/TaskFixture.sol";
import {FedChainTask} from "../FedChainTask.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {EquivocationEvidence} from "../lib/EquivocationEvidence.sol";
import {EVIDENCE_CODEHASH} from "../lib/EvidenceCodeHash.sol";

/// @notice An EquivocationEvidence look-alike (same selectors, other code): accepts any evidence.
contract FedChainTaskUnitTestLookAlike {
    function slashEquivocation(uint8, uint256, uint256, bytes calldata, bytes calldata)
        external
        pure
        returns (address)
    {
        return address(0xdead);
    }
}

/// @notice Refuses every payment: a withdrawal to it must revert and keep its credits.
contract RejectingReceiver {
    function register(FedChainTask task) external payable {
        task.registerAggregator{value: msg.value}();
    }

    function withdrawFrom(FedChainTask task) external {
        task.withdraw();
    }
}

/// @title FedChainTaskUnitTest
/// @notice The guards (custom errors) and events of every external function of FedChainTask.
contract FedChainTaskUnitTest is TaskFixture {
    // -- constructor ------------------------------------------------------------------------

    function test_constructor_refusesZeroRounds() public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.numRounds = 0;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidNumRounds.selector, 0));
        new FedChainTask(cfg, evidence);
    }

    function test_constructor_refusesBadUpdateBounds() public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.minUpdates = 0;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidUpdateBounds.selector, 0, 4));
        new FedChainTask(cfg, evidence);
        cfg.minUpdates = 5;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidUpdateBounds.selector, 5, 4));
        new FedChainTask(cfg, evidence);
    }

    function test_constructor_refusesEmptyWindows() public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.challengeWindow = 0;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidWindow.selector, 3, 5, 0, 6));
        new FedChainTask(cfg, evidence);
    }

    function test_constructor_refusesUnknownRotationAndZeroModel() public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.rotationPolicy = 2;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidRotationPolicy.selector, 2));
        new FedChainTask(cfg, evidence);
        cfg = defaultConfig();
        cfg.initialModelDigest = bytes32(0);
        vm.expectRevert(FedChainTaskStorage.ZeroDigest.selector);
        new FedChainTask(cfg, evidence);
    }

    function test_constructor_keepsConfigAndOwner() public {
        deploy(defaultConfig());
        assertEq(task.owner(), owner, "owner");
        assertEq(task.config().aggregatorStake, STAKE, "stake");
        assertEq(task.globalModelDigest(), MODEL0, "initial model");
        assertEq(task.currentRound(), 0, "round before start");
    }

    function test_constructor_evidenceCodeHashIsTheGeneratedConstant() public {
        // the same code hash under Foundry as under adapters.compile (no CBOR metadata in either)
        assertEq(address(new EquivocationEvidence()).codehash, EVIDENCE_CODEHASH, "EVIDENCE_CODEHASH");
        deploy(defaultConfig());
        assertEq(task.equivocationEvidence(), address(evidence), "evidence");
    }

    function test_constructor_refusesEvidenceLookAlike() public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        address fake = address(new FedChainTaskUnitTestLookAlike());
        vm.expectRevert(
            abi.encodeWithSelector(FedChainTaskStorage.EvidenceCodeMismatch.selector, fake, fake.codehash)
        );
        new FedChainTask(cfg, EquivocationEvidence(fake));
        address nothing = address(0xBEEF);
        vm.expectRevert(
            abi.encodeWithSelector(FedChainTaskStorage.EvidenceCodeMismatch.selector, nothing, bytes32(0))
        );
        new FedChainTask(cfg, EquivocationEvidence(nothing));
    }

    // -- registration -----------------------------------------------------------------------

    function test_registerAggregator_emitsAndStakes() public {
        deploy(defaultConfig());
        vm.deal(agg(0), STAKE);
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.AggregatorRegistered(agg(0), 0, STAKE);
        vm.prank(agg(0));
        task.registerAggregator{value: STAKE}();
        (bool registered, bool active,, uint256 stake,,) = task.aggregatorInfo(agg(0));
        assertTrue(registered && active, "registered and active");
        assertEq(stake, STAKE, "stake");
        assertEq(address(task).balance, STAKE, "balance");
    }

    function test_registerAggregator_guards() public {
        deploy(defaultConfig());
        vm.deal(agg(0), 100 ether);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.WrongValue.selector, STAKE, STAKE - 1));
        task.registerAggregator{value: STAKE - 1}();
        vm.prank(agg(0));
        task.registerAggregator{value: STAKE}();
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AggregatorAlreadyRegistered.selector, agg(0)));
        task.registerAggregator{value: STAKE}();
        for (uint256 i = 1; i < 4; ++i) {
            vm.deal(agg(i), STAKE);
            vm.prank(agg(i));
            task.registerAggregator{value: STAKE}();
        }
        startTask();
        vm.deal(agg(4), STAKE);
        vm.prank(agg(4));
        vm.expectRevert(FedChainTaskStorage.TaskAlreadyStarted.selector);
        task.registerAggregator{value: STAKE}();
    }

    function test_registerClient_emitsAndRefusesTwice() public {
        deploy(defaultConfig());
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.ClientRegistered(client(0), 0);
        vm.prank(client(0));
        task.registerClient();
        (bool registered, uint256 index) = task.clientInfo(client(0));
        assertTrue(registered, "registered");
        assertEq(index, 0, "index");
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClientAlreadyRegistered.selector, client(0)));
        task.registerClient();
    }

    function test_start_guardsAndEvents() public {
        deploy(defaultConfig());
        vm.prank(owner);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.CommitteeTooSmall.selector, 0, 4));
        task.start();
        registerCommittee(4);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(Ownable.OwnableUnauthorizedAccount.selector, agg(0)));
        task.start();
        vm.expectEmit(false, false, false, true, address(task));
        emit FedChainTaskStorage.TaskStarted(4, block.number);
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.RoundOpened(1, block.number);
        startTask();
        assertEq(task.currentRound(), 1, "round 1 open");
        vm.prank(owner);
        vm.expectRevert(FedChainTaskStorage.TaskAlreadyStarted.selector);
        task.start();
    }

    function test_renounceOwnership_disabled() public {
        deploy(defaultConfig());
        vm.prank(owner);
        vm.expectRevert(FedChainTaskStorage.RenounceDisabled.selector);
        task.renounceOwnership();
    }

    // -- collection -------------------------------------------------------------------------

    function test_submitUpdate_guards() public {
        deploy(defaultConfig());
        registerCommittee(4);
        registerClients(5);
        vm.prank(client(0));
        vm.expectRevert(FedChainTaskStorage.TaskNotStarted.selector);
        task.submitUpdate(1, bytes32(uint256(1)), 1, rootOf(bytes32(uint256(1))));
        startTask();
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.RoundNotOpen.selector, 2, 1));
        task.submitUpdate(2, bytes32(uint256(1)), 1, rootOf(bytes32(uint256(1))));
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NotClient.selector, agg(0)));
        task.submitUpdate(1, bytes32(uint256(1)), 1, rootOf(bytes32(uint256(1))));
        vm.prank(client(0));
        vm.expectRevert(FedChainTaskStorage.ZeroSamples.selector);
        task.submitUpdate(1, bytes32(uint256(1)), 0, rootOf(bytes32(uint256(1))));
        vm.prank(client(0));
        vm.expectRevert(FedChainTaskStorage.ZeroDigest.selector);
        task.submitUpdate(1, bytes32(0), 1, rootOf(bytes32(0)));
        vm.prank(client(0));
        task.submitUpdate(1, bytes32(uint256(1)), 1, rootOf(bytes32(uint256(1))));
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.UpdateAlreadySubmitted.selector, 1, client(0)));
        task.submitUpdate(1, bytes32(uint256(2)), 1, rootOf(bytes32(uint256(2))));
    }

    function test_submitUpdate_maxUpdatesClosesCollectionInThatBlock() public {
        setUpTask(4, 5);
        submitUpdates(1, 4); // maxUpdates
        FedChainTaskStorage.RoundInfo memory info = task.getRound(1);
        assertEq(info.closeBlock, block.number, "closed at maxUpdates");
        assertTrue(info.collectionClosed, "closed");
        vm.prank(client(4));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.CollectionClosed.selector, 1, block.number));
        task.submitUpdate(1, bytes32(uint256(9)), 1, rootOf(bytes32(uint256(9))));
    }

    function test_submitUpdate_minUpdatesWaitsForCollectWindow() public {
        setUpTask(4, 5);
        uint256 opened = block.number;
        submitUpdates(1, 2); // minUpdates, same block as the opening
        FedChainTaskStorage.RoundInfo memory info = task.getRound(1);
        assertEq(info.closeBlock, opened + 3, "closes at openBlock + collectWindow");
        assertFalse(info.collectionClosed, "still open");
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Collecting), "collecting");
        vm.roll(opened + 3);
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Aggregating), "aggregating");
    }

    function test_submitUpdate_emitsEntryAndAccumulator() public {
        setUpTask(4, 2);
        bytes32 d = updateDigest(1, 0);
        vm.recordLogs();
        vm.prank(client(0));
        task.submitUpdate(1, d, 7, rootOf(d));
        (uint256 acc, uint256 count) = task.updateAccumulator(1);
        assertEq(count, 1, "one update");
        uint256 expected =
            uint256(keccak256(abi.encode(uint256(0), client(0), d, uint256(7), rootOf(d)))) & type(uint224).max;
        assertEq(acc, expected, "accumulator = low 224 bits of the hash chain");
        assertEq(
            keccak256(vm.getRecordedLogs()[0].data),
            keccak256(abi.encode(uint256(0), acc, abi.encodePacked(client(0), d, uint64(7), rootOf(d)))),
            "UpdatesRegistered(firstIndex, accumulator, entries)"
        );
        assertTrue(task.updateSubmitted(1, client(0)), "bitmap bit set");
        assertFalse(task.updateSubmitted(1, client(1)), "other client unset");
    }

    function test_submitUpdates_acceptsSignedRecordsAndSkipsDuplicates() public {
        setUpTask(4, 4);
        bytes memory batch = bytes.concat(
            updateRecord(0, 1, updateDigest(1, 0), 5),
            updateRecord(1, 1, updateDigest(1, 1), 6),
            updateRecord(0, 1, updateDigest(1, 9), 7) // client 0 again: skipped
        );
        vm.prank(agg(0)); // anyone relays
        task.submitUpdates(1, batch);
        assertEq(task.updateCount(1), 2, "duplicate skipped");
        assertTrue(task.updateSubmitted(1, client(1)), "client 1 registered");
    }

    function test_submitUpdates_guards() public {
        setUpTask(4, 2);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.BadBatch.selector, 0));
        task.submitUpdates(1, "");
        bytes memory rec = updateRecord(0, 1, updateDigest(1, 0), 5);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.BadBatch.selector, 139));
        task.submitUpdates(1, _slice(rec, 139));
        // a record whose U_i is not the one its client signed recovers an unrelated address
        bytes memory otherRoot = updateRecord(0, 1, updateDigest(1, 0), 5);
        otherRoot[44] = otherRoot[44] ^ 0x01;
        vm.expectRevert();
        task.submitUpdates(1, otherRoot);
        // a record naming client 5 (unregistered)
        bytes memory unknown = updateRecord(5, 1, updateDigest(1, 0), 5);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.UnknownClient.selector, 0, 5));
        task.submitUpdates(1, unknown);
        // client 1's signature on a record naming client 0
        bytes memory forged = updateRecord(1, 1, updateDigest(1, 0), 5);
        forged[3] = 0x00;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.WrongSigner.selector, 0, 0, client(1)));
        task.submitUpdates(1, forged);
        // high-s (malleable) twin of a valid signature
        bytes memory malleable = _malleate(rec);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidSignature.selector, 0, 3));
        task.submitUpdates(1, malleable);
        // a record signed for round 2 recovers an unrelated address
        bytes memory otherRound = updateRecord(0, 2, updateDigest(1, 0), 5);
        vm.expectRevert();
        task.submitUpdates(1, otherRound);
    }

    function _slice(bytes memory b, uint256 n) private pure returns (bytes memory out) {
        out = new bytes(n);
        for (uint256 i = 0; i < n; ++i) {
            out[i] = b[i];
        }
    }

    /// @dev The record with s set to half the curve order + 1: an upper-half s, which
    ///      EIP-2098 can carry only below 2**255 and the contract refuses as malleable.
    function _malleate(bytes memory rec) private pure returns (bytes memory) {
        uint256 highS = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A1;
        assembly {
            mstore(add(rec, add(32, 108)), highS)
        }
        return rec;
    }

    // -- attestation ------------------------------------------------------------------------

    function _attestingTask() private {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.attestWindow = 4;
        deploy(cfg);
        registerCommittee(4);
        registerClients(3);
        startTask();
    }

    function test_attest_guardsAndQuorumFixesIncludedSet() public {
        _attestingTask();
        submitUpdates(1, 3);
        uint256[] memory bits = new uint256[](1);
        bits[0] = 0x3; // updates 0 and 1
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.CollectionNotClosed.selector, 1, 3, block.number + 3));
        task.attest(1, bits);
        closeCollection(1);
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Attesting), "attesting");
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NotAggregator.selector, client(0)));
        task.attest(1, bits);
        uint256[] memory tooLong = new uint256[](2);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.BadBitmap.selector, 1, 2));
        task.attest(1, tooLong);
        uint256[] memory pastCount = new uint256[](1);
        pastCount[0] = 0x8; // bit 3, only 3 updates
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.BadBitmap.selector, 1, 1));
        task.attest(1, pastCount);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.UpdatesAttested(1, agg(0), 1);
        vm.prank(agg(0));
        task.attest(1, bits);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AlreadyAttested.selector, 1, agg(0)));
        task.attest(1, bits);
        vm.prank(agg(1));
        task.attest(1, bits);
        // the submission waits for the included set
        (address chosen,,) = (agg(0), 0, 0);
        vm.prank(chosen);
        vm.expectRevert();
        task.submitAggregate{value: BOND}(1, honestDigest(1), false);
        vm.prank(agg(2));
        task.attest(1, bits); // n - f = 3: fixed now
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Aggregating), "fixed by quorum");
        assertEq(task.includedUpdates(1)[0], 0x3, "f + 1 attested updates 0 and 1");
        vm.prank(agg(3));
        vm.expectRevert();
        task.attest(1, bits);
    }

    // -- aggregation ------------------------------------------------------------------------

    function test_submitAggregate_guards() public {
        setUpTask(4, 4);
        submitUpdates(1, 2);
        (address chosen,,) = (agg(0), 0, 0); // round 1, attempt 0, round robin: member 0
        vm.deal(chosen, 100 ether);
        vm.prank(chosen);
        vm.expectRevert(
            abi.encodeWithSelector(FedChainTaskStorage.CollectionNotClosed.selector, 1, 2, block.number + 3)
        );
        task.submitAggregate{value: BOND}(1, honestDigest(1), false);
        closeCollection(1);
        (address current,, uint256 deadline) = task.currentAggregator();
        assertEq(current, agg(0), "round robin: round 1 -> member 0");
        vm.prank(agg(1));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NotChosenAggregator.selector, agg(1), agg(0)));
        task.submitAggregate{value: BOND}(1, honestDigest(1), false);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.WrongValue.selector, BOND, 0));
        task.submitAggregate(1, honestDigest(1), false);
        vm.prank(agg(0));
        vm.expectRevert(FedChainTaskStorage.ZeroDigest.selector);
        task.submitAggregate{value: BOND}(1, bytes32(0), false);
        uint256 snapshotBlock = block.number;
        vm.roll(deadline + 1);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.SubmitDeadlinePassed.selector, 1, 0, deadline));
        task.submitAggregate{value: BOND}(1, honestDigest(1), false);
        vm.roll(snapshotBlock);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.AggregateSubmitted(1, 0, agg(0), honestDigest(1), block.number + 4);
        vm.prank(agg(0));
        task.submitAggregate{value: BOND}(1, honestDigest(1), false);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AggregateAlreadySubmitted.selector, 1, 0));
        task.submitAggregate{value: BOND}(1, honestDigest(1), false);
    }

    function test_advanceAttempt_penalisesLaggardAndMovesRotation() public {
        setUpTask(4, 4);
        submitUpdates(1, 2);
        closeCollection(1);
        (address laggard,, uint256 deadline) = task.currentAggregator();
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.DeadlineNotPassed.selector, 1, 0, deadline));
        task.advanceAttempt(1);
        vm.roll(deadline + 1);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.AttemptAdvanced(1, 1, laggard, PENALTY);
        task.advanceAttempt(1);
        (,,, uint256 stake,,) = task.aggregatorInfo(laggard);
        assertEq(stake, STAKE - PENALTY, "penalty taken from the stake");
        assertEq(task.credits(BURN), PENALTY, "penalty burned");
        assertEq(task.credits(owner), 0, "the owner gains nothing");
        (address next, uint256 attempt,) = task.currentAggregator();
        assertEq(attempt, 1, "attempt 1");
        assertEq(next, agg(1), "next member");
        // the laggard is below the stake now: skipped until it tops up
        (, bool active,,,,) = task.aggregatorInfo(laggard);
        assertFalse(active, "inactive below the stake");
    }

    function test_finalize_guardsEventsAndNextRound() public {
        setUpTask(4, 4);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NoAggregateSubmitted.selector, 1));
        task.finalize(1);
        address chosen = reachSubmitted(1, honestDigest(1));
        uint256 deadline = task.getRound(1).challengeDeadline;
        vm.roll(deadline);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ChallengeWindowOpen.selector, 1, deadline));
        task.finalize(1);
        vm.roll(deadline + 1);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.RoundFinalized(1, honestDigest(1), chosen);
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.RoundOpened(2, block.number);
        task.finalize(1);
        assertEq(task.credits(chosen), BOND, "bond credited back");
        assertEq(task.roundDigest(1), honestDigest(1), "digest kept");
        assertEq(task.globalModelDigest(), honestDigest(1), "global model");
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.RoundAlreadyFinalized.selector, 1));
        task.finalize(1);
        // last round completes the task
        address chosen2 = reachSubmitted(2, honestDigest(2));
        vm.roll(task.getRound(2).challengeDeadline + 1);
        vm.expectEmit(false, false, false, true, address(task));
        emit FedChainTaskStorage.TaskCompleted(2, honestDigest(2));
        task.finalize(2);
        assertTrue(task.taskCompleted(), "completed");
        assertEq(task.credits(chosen2), chosen2 == chosen ? 2 * BOND : BOND, "second bond");
        vm.prank(client(0));
        vm.expectRevert(FedChainTaskStorage.TaskAlreadyCompleted.selector);
        task.submitUpdate(2, bytes32(uint256(1)), 1, rootOf(bytes32(uint256(1))));
    }

    // -- disputes ---------------------------------------------------------------------------

    function test_challenge_guards() public {
        setUpTask(4, 4);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NoAggregateSubmitted.selector, 1));
        task.challenge(1);
        address chosen = reachSubmitted(1, honestDigest(1));
        vm.deal(client(0), 1 ether);
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NotAggregator.selector, client(0)));
        task.challenge{value: CHALLENGE_BOND}(1);
        vm.prank(chosen);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ChallengerIsSubmitter.selector, chosen));
        task.challenge{value: CHALLENGE_BOND}(1);
        address challenger = agg(1) == chosen ? agg(2) : agg(1);
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.WrongValue.selector, CHALLENGE_BOND, 1));
        task.challenge{value: 1}(1);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.Challenged(1, 0, challenger, honestDigest(1));
        vm.prank(challenger);
        task.challenge{value: CHALLENGE_BOND}(1);
        vm.prank(challenger);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.DisputeOpen.selector, 1, challenger));
        task.challenge{value: CHALLENGE_BOND}(1);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.DisputeOpen.selector, 1, challenger));
        task.finalize(1);
    }

    function test_challenge_closedAfterWindow() public {
        setUpTask(4, 4);
        reachSubmitted(1, honestDigest(1));
        uint256 deadline = task.getRound(1).challengeDeadline;
        vm.roll(deadline + 1);
        vm.prank(agg(1));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ChallengeWindowClosed.selector, 1, deadline));
        task.challenge{value: CHALLENGE_BOND}(1);
    }

    function _disputed(bytes32 digest) private returns (address chosen, address challenger) {
        setUpTask(4, 4);
        chosen = reachSubmitted(1, digest);
        challenger = agg(1) == chosen ? agg(2) : agg(1);
        vm.prank(challenger);
        task.challenge{value: CHALLENGE_BOND}(1);
    }

    function test_resolveDispute_faultySlashesAndSplits() public {
        bytes32 wrong = keccak256("wrong aggregate");
        (address chosen, address challenger) = _disputed(wrong);
        bytes[] memory sigs = certificate(1, 0, wrong, true, 0, membersExcept(4, chosen, 3));
        uint256 slashed = STAKE + BOND;
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.Slashed(chosen, slashed);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.DisputeResolved(1, 0, true, 0, challenger, slashed, slashed / 2, slashed - slashed / 2);
        task.resolveDispute(1, 0, true, 0, sigs);
        assertEq(task.credits(challenger), CHALLENGE_BOND + slashed / 2, "challenger: bond + half");
        assertEq(task.credits(BURN), slashed - slashed / 2, "the rest burned");
        assertEq(task.credits(owner), 0, "the owner gains nothing");
        (,, bool isSlashed, uint256 stake,,) = task.aggregatorInfo(chosen);
        assertTrue(isSlashed, "slashed");
        assertEq(stake, 0, "stake gone");
        FedChainTaskStorage.RoundInfo memory info = task.getRound(1);
        assertEq(info.attempt, 1, "round re-opened at attempt 1");
        assertEq(uint256(info.phase), uint256(FedChainTaskStorage.Phase.Aggregating), "aggregating again");
        (address next,,) = task.currentAggregator();
        assertTrue(next != chosen && next != address(0), "rotation skips the slashed member");
    }

    function test_resolveDispute_upheldBurnsChallengeBond() public {
        (address chosen, address challenger) = _disputed(honestDigest(1));
        bytes[] memory sigs = certificate(1, 0, honestDigest(1), false, 2, membersExcept(4, address(0), 3));
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.DisputeResolved(1, 0, false, 2, challenger, 0, 0, CHALLENGE_BOND);
        task.resolveDispute(1, 0, false, 2, sigs);
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Submitted), "back to submitted");
        assertEq(task.credits(challenger), 0, "challenger loses its bond");
        assertEq(task.credits(BURN), CHALLENGE_BOND, "burned, not paid to anyone");
        vm.roll(task.getRound(1).challengeDeadline + 1);
        task.finalize(1);
        assertEq(task.credits(chosen), BOND, "honest submitter's bond back");
    }

    function test_resolveDispute_certificateGuards() public {
        bytes32 wrong = keccak256("wrong aggregate");
        (address chosen,) = _disputed(wrong);
        uint256[] memory two = membersExcept(4, chosen, 2);
        bytes[] memory sigs = certificate(1, 0, wrong, true, 0, two);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.QuorumNotReached.selector, 2, 3));
        task.resolveDispute(1, 0, true, 0, sigs);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AttemptMismatch.selector, 1, 0, 1));
        task.resolveDispute(1, 1, true, 0, sigs);
        // signed for the other verdict: recovers strangers
        bytes[] memory other = certificate(1, 0, wrong, false, 0, membersExcept(4, chosen, 3));
        vm.expectRevert();
        task.resolveDispute(1, 0, true, 0, other);
        // unsorted
        bytes[] memory good = certificate(1, 0, wrong, true, 0, membersExcept(4, chosen, 3));
        bytes[] memory swapped = new bytes[](3);
        (swapped[0], swapped[1], swapped[2]) = (good[1], good[0], good[2]);
        vm.expectRevert();
        task.resolveDispute(1, 0, true, 0, swapped);
        // duplicate
        (swapped[0], swapped[1], swapped[2]) = (good[0], good[0], good[1]);
        vm.expectRevert();
        task.resolveDispute(1, 0, true, 0, swapped);
        // malformed
        bytes[] memory shortSig = new bytes[](3);
        (shortSig[0], shortSig[1], shortSig[2]) = (good[0], hex"1234", good[2]);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidSignature.selector, 1, 2));
        task.resolveDispute(1, 0, true, 0, shortSig);
        // too late
        uint256 deadline = task.getRound(1).disputeDeadline;
        vm.roll(deadline + 1);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.DisputeTimedOut.selector, 1, deadline));
        task.resolveDispute(1, 0, true, 0, good);
    }

    function test_resolveDispute_noOpenDispute() public {
        setUpTask(4, 4);
        reachSubmitted(1, honestDigest(1));
        bytes[] memory none = new bytes[](0);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NoOpenDispute.selector, 1));
        task.resolveDispute(1, 0, true, 0, none);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NoOpenDispute.selector, 1));
        task.expireDispute(1);
    }

    function test_expireDispute_guardsAndReopens() public {
        (address chosen, address challenger) = _disputed(honestDigest(1));
        uint256 deadline = task.getRound(1).disputeDeadline;
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.DisputeNotTimedOut.selector, 1, deadline));
        task.expireDispute(1);
        vm.roll(deadline + 1);
        vm.expectEmit(true, true, true, true, address(task));
        emit FedChainTaskStorage.DisputeExpired(1, 0, chosen, challenger, CHALLENGE_BOND);
        task.expireDispute(1);
        assertEq(task.credits(chosen), BOND, "submitter's bond refunded");
        assertEq(task.credits(BURN), CHALLENGE_BOND, "challenge bond burned");
        assertEq(task.getRound(1).attempt, 1, "attempt 1");
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Aggregating), "aggregating");
    }

    function _vote(uint256 member, uint8 kind, uint256 viewNumber, uint256 seq, bytes32 digest, bool faulty)
        private
        view
        returns (FedChainTaskStorage.SignedVote memory v)
    {
        v.round = 1;
        v.attempt = 0;
        v.aggregateDigest = digest;
        v.faulty = faulty;
        bytes32 typeHash = kind == 0 ? task.PRE_PREPARE_TYPEHASH() : task.PREPARE_TYPEHASH();
        bytes32 structHash = kind == 2
            ? keccak256(abi.encode(task.DISPUTE_VERDICT_TYPEHASH(), 1, 0, digest, faulty, viewNumber))
            : keccak256(abi.encode(typeHash, viewNumber, seq, 1, 0, digest, faulty));
        bytes32 d = kind == 2
            ? task.verdictDigest(1, 0, digest, faulty, viewNumber)
            : keccak256(abi.encodePacked(hex"1901", _domainSeparator(), structHash));
        (uint8 vv, bytes32 r, bytes32 s) = vm.sign(aggKey(member), d);
        v.signature = abi.encodePacked(r, s, vv);
    }

    function _domainSeparator() private view returns (bytes32) {
        (, string memory name, string memory version, uint256 chainId, address verifying,,) = task.eip712Domain();
        return keccak256(
            abi.encode(
                keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"),
                keccak256(bytes(name)),
                keccak256(bytes(version)),
                chainId,
                verifying
            )
        );
    }

    function test_slashEquivocation_conflictingCommitsSlashOnce() public {
        setUpTask(4, 4);
        FedChainTaskStorage.SignedVote memory a = _vote(2, 2, 5, 0, honestDigest(1), true);
        FedChainTaskStorage.SignedVote memory b = _vote(2, 2, 5, 0, honestDigest(1), false);
        address reporter = client(3);
        commitEvidence(reporter, 2, 5, 0, a, b);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.EquivocationSlashed(agg(2), 2, 5, reporter, STAKE / 2, STAKE - STAKE / 2);
        vm.prank(reporter);
        task.slashEquivocation(2, 5, 0, a, b);
        assertEq(task.credits(reporter), STAKE / 2, "reporter half");
        assertEq(task.credits(BURN), STAKE - STAKE / 2, "the rest burned");
        commitEvidence(address(this), 2, 5, 0, a, b);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AggregatorIsSlashed.selector, agg(2)));
        task.slashEquivocation(2, 5, 0, a, b);
    }

    /// @notice Attack: a watcher copies a reporter's evidence from the mempool and reveals it
    ///         from its own account, or commits for itself and reveals in the same block.
    function test_slashEquivocation_paysOnlyAnEarlierCommitment() public {
        setUpTask(4, 4);
        FedChainTaskStorage.SignedVote memory a = _vote(2, 2, 5, 0, honestDigest(1), true);
        FedChainTaskStorage.SignedVote memory b = _vote(2, 2, 5, 0, honestDigest(1), false);
        address reporter = client(3);
        address copier = client(2);
        // the copier sends the reporter's commitment itself: it binds the reporter
        vm.prank(copier);
        evidenceOf(task).commitEquivocation(sealedEvidence(reporter, 2, 5, 0, a, b));
        vm.prank(copier);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.EvidenceNotCommitted.selector, copier));
        task.slashEquivocation(2, 5, 0, a, b);
        // a commitment of its own counts only from the next block on
        vm.prank(copier);
        evidenceOf(task).commitEquivocation(sealedEvidence(copier, 2, 5, 0, a, b));
        vm.prank(copier);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.EvidenceNotCommitted.selector, copier));
        task.slashEquivocation(2, 5, 0, a, b);
        // the reporter's commitment is older: it reveals and is paid
        vm.roll(block.number + 1);
        vm.prank(reporter);
        task.slashEquivocation(2, 5, 0, a, b);
        assertEq(task.credits(reporter), STAKE / 2, "reporter half");
        assertEq(task.credits(copier), 0, "the copier gains nothing");
        // the first commitment of a sealed value stands
        bytes32 commitment = sealedEvidence(reporter, 2, 5, 0, a, b);
        uint256 at = evidenceOf(task).equivocationCommittedAt(commitment);
        evidenceOf(task).commitEquivocation(commitment);
        assertEq(evidenceOf(task).equivocationCommittedAt(commitment), at, "first commitment stands");
    }

    function test_slashEquivocation_evidenceGuards() public {
        setUpTask(4, 4);
        FedChainTaskStorage.SignedVote memory a = _vote(2, 1, 5, 7, honestDigest(1), true);
        FedChainTaskStorage.SignedVote memory same = _vote(2, 1, 5, 7, honestDigest(1), true);
        FedChainTaskStorage.SignedVote memory other = _vote(3, 1, 5, 7, keccak256("x"), true);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidEvidence.selector, 1));
        task.slashEquivocation(3, 5, 7, a, other);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidEvidence.selector, 2));
        task.slashEquivocation(1, 5, 7, a, same);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidEvidence.selector, 3));
        task.slashEquivocation(1, 5, 7, a, other);
        // commits of one dispute with the same verdict are not evidence
        FedChainTaskStorage.SignedVote memory c1 = _vote(2, 2, 5, 0, honestDigest(1), true);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.InvalidEvidence.selector, 2));
        task.slashEquivocation(2, 5, 0, c1, c1);
        // two prepares for one (view, seq) with different digests are
        FedChainTaskStorage.SignedVote memory b = _vote(2, 1, 5, 7, keccak256("x"), true);
        commitEvidence(address(this), 1, 5, 7, a, b);
        task.slashEquivocation(1, 5, 7, a, b);
        (,, bool isSlashed,,,) = task.aggregatorInfo(agg(2));
        assertTrue(isSlashed, "slashed");
    }

    // -- stakes and payments ------------------------------------------------------------------

    function test_topUpStake_guardsAndReactivation() public {
        setUpTask(4, 4);
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NotAggregator.selector, client(0)));
        task.topUpStake{value: 0}();
        vm.prank(agg(0));
        vm.expectRevert(FedChainTaskStorage.ZeroValue.selector);
        task.topUpStake{value: 0}();
        submitUpdates(1, 2);
        closeCollection(1);
        (, , uint256 deadline) = task.currentAggregator();
        vm.roll(deadline + 1);
        task.advanceAttempt(1); // member 0 loses PENALTY
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.StakeToppedUp(agg(0), PENALTY, STAKE, true);
        vm.prank(agg(0));
        task.topUpStake{value: PENALTY}();
        (, bool active,,,, uint256 activeFrom) = task.aggregatorInfo(agg(0));
        assertTrue(active, "active again");
        assertEq(activeFrom, block.number, "from this block");
    }

    function test_topUpStake_refusedAfterSlash() public {
        setUpTask(4, 4);
        FedChainTaskStorage.SignedVote memory a = _vote(0, 2, 1, 0, honestDigest(1), true);
        FedChainTaskStorage.SignedVote memory b = _vote(0, 2, 1, 0, honestDigest(1), false);
        commitEvidence(address(this), 2, 1, 0, a, b);
        task.slashEquivocation(2, 1, 0, a, b);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AggregatorIsSlashed.selector, agg(0)));
        task.topUpStake{value: 1}();
    }

    function test_releaseStakeAndWithdraw_afterCompletion() public {
        setUpTask(4, 4);
        vm.prank(agg(3));
        vm.expectRevert(FedChainTaskStorage.TaskNotCompleted.selector);
        task.releaseStake();
        for (uint256 r = 1; r <= 2; ++r) {
            reachSubmitted(r, honestDigest(r));
            vm.roll(task.getRound(r).challengeDeadline + 1);
            task.finalize(r);
        }
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.StakeReleased(agg(3), STAKE);
        vm.prank(agg(3));
        task.releaseStake();
        vm.prank(agg(3));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NothingToWithdraw.selector, agg(3)));
        task.releaseStake();
        uint256 before = agg(3).balance;
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.Withdrawal(agg(3), STAKE);
        vm.prank(agg(3));
        task.withdraw();
        assertEq(agg(3).balance - before, STAKE, "stake paid out");
        vm.prank(agg(3));
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NothingToWithdraw.selector, agg(3)));
        task.withdraw();
    }

    /// @notice A finalized round that says stop (the stopping rule) completes the task
    ///         before numRounds; stakes are then releasable as after the last round.
    function test_finalize_stopCompletesTaskEarly() public {
        setUpTask(4, 4);
        submitUpdates(1, 2);
        closeCollection(1);
        (address chosen,,) = task.currentAggregator();
        vm.prank(chosen);
        task.submitAggregate{value: BOND}(1, honestDigest(1), true);
        assertTrue(task.getRound(1).stop, "claim visible to verifiers");
        vm.roll(task.getRound(1).challengeDeadline + 1);
        vm.expectEmit(false, false, false, true, address(task));
        emit FedChainTaskStorage.TaskCompleted(1, honestDigest(1));
        task.finalize(1);
        assertTrue(task.taskCompleted(), "completed after round 1 of 2");
        assertEq(task.currentRound(), 1, "current round stays at the stopping round");
        vm.prank(client(0));
        vm.expectRevert(FedChainTaskStorage.TaskAlreadyCompleted.selector);
        task.submitUpdate(2, bytes32(uint256(1)), 1, rootOf(bytes32(uint256(1))));
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.StakeReleased(agg(3), STAKE);
        vm.prank(agg(3));
        task.releaseStake();
    }

    function test_finalize_noStopKeepsGoing() public {
        setUpTask(4, 4);
        reachSubmitted(1, honestDigest(1));
        assertFalse(task.getRound(1).stop, "no claim");
        vm.roll(task.getRound(1).challengeDeadline + 1);
        task.finalize(1);
        assertFalse(task.taskCompleted(), "round 2 opens");
        assertEq(task.currentRound(), 2, "next round");
    }

    function test_withdraw_failedTransferKeepsCredits() public {
        deploy(defaultConfig());
        RejectingReceiver receiver = new RejectingReceiver();
        vm.deal(address(this), STAKE);
        receiver.register{value: STAKE}(task);
        registerCommittee(3);
        registerClients(4);
        startTask();
        // receiver is member 0: round 1's first choice; let it time out, then finish the task
        submitUpdates(1, 2);
        closeCollection(1);
        (,, uint256 deadline) = task.currentAggregator();
        vm.roll(deadline + 1);
        task.advanceAttempt(1);
        (address chosen,,) = task.currentAggregator();
        vm.prank(chosen);
        task.submitAggregate{value: BOND}(1, honestDigest(1), false);
        vm.roll(task.getRound(1).challengeDeadline + 1);
        task.finalize(1);
        reachSubmitted(2, honestDigest(2));
        vm.roll(task.getRound(2).challengeDeadline + 1);
        task.finalize(2);
        vm.prank(address(receiver));
        task.releaseStake();
        uint256 owed = task.credits(address(receiver));
        assertEq(owed, STAKE - PENALTY, "stake less the penalty");
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.TransferFailed.selector, address(receiver), owed));
        receiver.withdrawFrom(task);
        assertEq(task.credits(address(receiver)), owed, "credits kept");
    }
}
