// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TaskFixture} from "./utils/TaskFixture.sol";
import {FedChainTask} from "../FedChainTask.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";
import {PrivacyRecords} from "../PrivacyRecords.sol";

/// @notice Deploys a task with its PrivacyRecords and signs records with the clients' keys.
abstract contract RecordsFixture is TaskFixture {
    uint256 internal constant REVEAL_WINDOW = 3;
    PrivacyRecords internal records;

    function setUpRecords() internal {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        deploy(cfg);
        records = new PrivacyRecords(address(task), REVEAL_WINDOW, 0);
        registerCommittee(4);
        registerClients(4);
    }

    /// @notice Client `i`'s signed record, packed as `submitRecords` takes it.
    function signedRecord(uint256 i, uint8 kind, uint256 round, bytes memory payload)
        internal
        view
        returns (bytes memory)
    {
        bytes32 d = _recordDigest(kind, round, payload);
        (bytes32 r, bytes32 vs) = vm.signCompact(clientKey(i), d);
        return abi.encodePacked(kind, uint32(payload.length), r, vs, payload);
    }

    function _recordDigest(uint8 kind, uint256 round, bytes memory payload) internal view returns (bytes32) {
        return records.recordDigest(kind, round, payload);
    }

    /// @notice The accumulator after one more record (what `_admit` computes).
    function nextAcc(uint256 acc, uint8 kind, uint256 clientIndex, bytes memory payload)
        internal
        pure
        returns (uint256)
    {
        return uint256(keccak256(abi.encode(acc, kind, clientIndex, keccak256(payload)))) >> 32;
    }

    /// @notice Round 1 with its included set fixed (attempt 0 aggregating): reveals open.
    function reachRevealing() internal {
        startTask();
        submitUpdates(1, 2);
        closeCollection(1);
    }
}

/// @title PrivacyRecordsUnitTest
/// @notice Guards and events of PrivacyRecords' external functions.
contract PrivacyRecordsUnitTest is RecordsFixture {
    function setUp() public {
        setUpRecords();
    }

    function test_constructor_windowAtLeastOne() public {
        PrivacyRecords r = new PrivacyRecords(address(task), 0, 0);
        assertEq(r.revealWindow(), 1, "window 0 -> 1");
        assertEq(address(records.task()), address(task), "task");
        assertEq(records.revealWindow(), REVEAL_WINDOW, "window");
    }

    function test_pinGraphSeed_onceInThePreviousRoundAfterEveryPosition() public {
        PrivacyRecords r = new PrivacyRecords(address(task), REVEAL_WINDOW, 5);
        // four of five graph positions registered: nobody may pin yet
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.GraphSeedNotPinnable.selector, 1, 0, 4));
        r.pinGraphSeed(1);
        vm.prank(client(4));
        task.registerClient();
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.GraphSeedNotPinnable.selector, 2, 0, 5));
        r.pinGraphSeed(2);
        vm.roll(block.number + 7);
        bytes32 expected = keccak256(abi.encode(blockhash(block.number - 1), block.prevrandao, uint256(1)));
        vm.expectEmit(true, true, true, true, address(r));
        emit PrivacyRecords.GraphSeedPinned(1, block.number, expected);
        bytes32 seed = r.pinGraphSeed(1);
        assertEq(seed, expected, "seed");
        assertEq(r.graphSeed(1), seed, "stored");
        vm.roll(block.number + 3);
        assertEq(r.pinGraphSeed(1), seed, "a later call returns the pinned seed");
        // the full graph pins nothing
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.GraphSeedNotPinnable.selector, 1, 0, 5));
        records.pinGraphSeed(1);
        startTask();
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.GraphSeedNotPinnable.selector, 3, 1, 5));
        r.pinGraphSeed(3);
        assertTrue(r.pinGraphSeed(2) != 0, "round 2 during round 1");
    }

    function test_attestReveals_membersOnceInsideTheWindow() public {
        uint256[] memory bitmap = new uint256[](1);
        bitmap[0] = 5;
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.NotAttestingReveals.selector, 0));
        records.attestReveals(0, bitmap);
        reachRevealing();
        uint256 start = task.getRound(1).attemptStart;
        vm.expectEmit(true, true, true, true, address(records));
        emit PrivacyRecords.RevealsAttested(1, 0, bitmap);
        vm.prank(agg(0));
        records.attestReveals(1, bitmap);
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.DuplicateRecord.selector, 1, 0, 3));
        records.attestReveals(1, bitmap);
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.NotCommitteeMember.selector, client(0)));
        records.attestReveals(1, bitmap);
        vm.roll(start + 2 * REVEAL_WINDOW - 1);
        vm.prank(agg(1));
        records.attestReveals(1, bitmap);
        vm.roll(start + 2 * REVEAL_WINDOW);
        vm.prank(agg(2));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.NotAttestingReveals.selector, 1));
        records.attestReveals(1, bitmap);
    }

    function test_submitRecord_encKeyBeforeStartInRoundZero() public {
        bytes memory key = hex"0102";
        vm.expectEmit(true, true, true, true, address(records));
        emit PrivacyRecords.RecordRegistered(0, 2, 0, 0, nextAcc(0, 0, 2, key), key);
        vm.prank(client(2));
        records.submitRecord(0, 0, key);
        (uint256 acc, uint256 count) = records.recordLog(0);
        assertEq(count, 1, "one record");
        assertEq(acc, nextAcc(0, 0, 2, key), "accumulator");
        vm.prank(client(2));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.RecordRoundNotOpen.selector, 1, 0));
        records.submitRecord(1, 0, key);
    }

    function test_submitRecord_guards() public {
        startTask();
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.BadRecord.selector, 0, 3, 1));
        records.submitRecord(1, 3, hex"01");
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.BadRecord.selector, 0, 1, 0));
        records.submitRecord(1, 1, "");
        vm.prank(agg(0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.NotTaskClient.selector, 0, agg(0)));
        records.submitRecord(1, 1, hex"01");
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.RecordRoundNotOpen.selector, 0, 1));
        records.submitRecord(0, 1, hex"01");
        // a reveal while round 1 is still collecting
        vm.prank(client(0));
        vm.expectRevert(
            abi.encodeWithSelector(PrivacyRecords.NotRevealing.selector, 1, uint8(FedChainTaskStorage.Phase.Collecting))
        );
        records.submitRecord(1, 2, hex"01");
    }

    function test_submitRecord_revealWindow() public {
        reachRevealing();
        uint256 start = task.getRound(1).attemptStart;
        assertTrue(records.revealing(1), "open at the start of attempt 0");
        vm.prank(client(1));
        records.submitRecord(1, 2, hex"aa");
        vm.roll(start + REVEAL_WINDOW);
        assertFalse(records.revealing(1), "closed after the window");
        vm.prank(client(1));
        vm.expectRevert(
            abi.encodeWithSelector(PrivacyRecords.NotRevealing.selector, 1, uint8(FedChainTaskStorage.Phase.Aggregating))
        );
        records.submitRecord(1, 2, hex"aa");
    }

    function test_submitRecord_refusedAfterCompletion() public {
        startTask();
        for (uint256 r = 1; r <= 2; ++r) {
            reachSubmitted(r, honestDigest(r));
            vm.roll(task.getRound(r).challengeDeadline + 1);
            task.finalize(r);
        }
        vm.prank(client(0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.RecordRoundNotOpen.selector, 2, 2));
        records.submitRecord(2, 1, hex"01");
    }

    function test_submitRecords_relaysInOrder() public {
        startTask();
        bytes memory p0 = hex"00aa";
        bytes memory p1 = hex"11bbcc";
        bytes memory batch = bytes.concat(signedRecord(0, 1, 1, p0), signedRecord(3, 1, 1, p1));
        vm.expectEmit(true, true, true, true, address(records));
        emit PrivacyRecords.RecordRegistered(1, 0, 1, 0, nextAcc(0, 1, 0, p0), p0);
        vm.expectEmit(true, true, true, true, address(records));
        emit PrivacyRecords.RecordRegistered(1, 3, 1, 1, nextAcc(nextAcc(0, 1, 0, p0), 1, 3, p1), p1);
        vm.prank(agg(2)); // anyone relays
        records.submitRecords(1, batch);
        (, uint256 count) = records.recordLog(1);
        assertEq(count, 2, "two records");
    }

    /// @notice Client `i`'s signed 32-byte REVEAL, packed as `submitReveals` takes it,
    ///         naming client index `named`.
    function signedReveal(uint256 i, uint256 named, uint256 round, bytes32 payload) internal view returns (bytes memory) {
        (bytes32 r, bytes32 vs) = vm.signCompact(clientKey(i), _recordDigest(2, round, abi.encodePacked(payload)));
        return abi.encodePacked(uint32(named), payload, r, vs);
    }

    function test_submitReveals_likeSubmitRecordsAndGuarded() public {
        for (uint256 i = 0; i < 3; ++i) {
            vm.prank(client(i));
            records.submitRecord(0, 0, abi.encodePacked(keccak256(abi.encode("key", i))));
        }
        reachRevealing();
        bytes32 p0 = keccak256("reveal 0");
        bytes32 p1 = keccak256("reveal 1");
        // a record naming another client's index, or a client without an ENC_KEY, is refused
        bytes memory batch = signedReveal(0, 1, 1, p0);
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.WrongRevealSigner.selector, 0, 1, client(0)));
        records.submitReveals(1, batch);
        batch = signedReveal(3, 3, 1, p0);
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.WrongRevealSigner.selector, 0, 3, client(3)));
        records.submitReveals(1, batch);
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.BadRecordBatch.selector, 99));
        records.submitReveals(1, new bytes(99));
        vm.prank(client(2)); // a reveal through submitRecord takes the same once-bit
        records.submitRecord(1, 2, abi.encodePacked(p1));
        batch = signedReveal(2, 2, 1, p1);
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.DuplicateRecord.selector, 1, 2, 2));
        records.submitReveals(1, batch);
        batch = bytes.concat(signedReveal(0, 0, 1, p0), signedReveal(0, 0, 1, p0));
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.DuplicateRecord.selector, 1, 0, 2));
        records.submitReveals(1, batch);
        (uint256 acc0,) = records.recordLog(1);
        acc0 = nextAcc(nextAcc(acc0, 2, 0, abi.encodePacked(p0)), 2, 1, abi.encodePacked(p1));
        records.submitReveals(1, bytes.concat(signedReveal(0, 0, 1, p0), signedReveal(1, 1, 1, p1)));
        (uint256 acc, uint256 count) = records.recordLog(1);
        assertEq(acc, acc0, "accumulator");
        assertEq(count, 3, "three reveals on the list");
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.DuplicateRecord.selector, 1, 1, 2));
        vm.prank(client(1));
        records.submitRecord(1, 2, abi.encodePacked(p1));
    }

    function test_submitRecords_guards() public {
        startTask();
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.BadRecordBatch.selector, 0));
        records.submitRecords(1, "");
        bytes memory rec = signedRecord(0, 1, 1, hex"0102");
        bytes memory shortHeader = new bytes(68);
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.BadRecordBatch.selector, 68));
        records.submitRecords(1, shortHeader);
        bytes memory truncated = new bytes(rec.length - 1);
        for (uint256 i = 0; i < truncated.length; ++i) {
            truncated[i] = rec[i];
        }
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.BadRecordBatch.selector, rec.length - 1));
        records.submitRecords(1, truncated);
        // high s
        bytes memory bad = bytes.concat(rec);
        uint256 highS = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A1;
        assembly {
            mstore(add(bad, add(32, 37)), highS)
        }
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.BadRecordSignature.selector, 0));
        records.submitRecords(1, bad);
        // a stranger's signature (key of member 0)
        bytes32 d = records.recordDigest(1, 1, hex"0102");
        (bytes32 r, bytes32 vs) = vm.signCompact(aggKey(0), d);
        bytes memory stranger = abi.encodePacked(uint8(1), uint32(2), r, vs, hex"0102");
        vm.expectRevert(abi.encodeWithSelector(PrivacyRecords.NotTaskClient.selector, 1, agg(0)));
        records.submitRecords(1, bytes.concat(rec, stranger));
        // a record signed for another round recovers someone else
        bytes memory otherRound = signedRecord(0, 1, 2, hex"0102");
        vm.expectRevert();
        records.submitRecords(1, otherRound);
        // a reveal in a batch outside the window
        bytes memory reveal = signedRecord(0, 2, 1, hex"0102");
        vm.expectRevert(
            abi.encodeWithSelector(PrivacyRecords.NotRevealing.selector, 1, uint8(FedChainTaskStorage.Phase.Collecting))
        );
        records.submitRecords(1, reveal);
    }
}

/// @title PrivacyRecordsFuzzTest
/// @notice The accumulator chain and the reveal window under fuzzed inputs.
contract PrivacyRecordsFuzzTest is RecordsFixture {
    function setUp() public {
        setUpRecords();
    }

    function testFuzz_accumulatorChainsEveryRecord(bytes[4] memory payloads, uint8 kinds, uint8 who) public {
        startTask();
        uint256 acc = 0;
        bytes memory batch;
        for (uint256 i = 0; i < 4; ++i) {
            bytes memory payload = payloads[i].length == 0 ? bytes(hex"00") : payloads[i];
            uint8 kind = uint8((kinds >> (2 * i)) % 2); // ENC_KEY or MASK_KEY
            uint256 c = (who + i) % 4;
            batch = bytes.concat(batch, signedRecord(c, kind, 1, payload));
            acc = nextAcc(acc, kind, c, payload);
        }
        records.submitRecords(1, batch);
        (uint256 got, uint256 count) = records.recordLog(1);
        assertEq(count, 4, "count");
        assertEq(got, acc, "accumulator = hash chain of the ordered records");
    }

    function testFuzz_revealingIffInsideTheWindow(uint256 offset) public {
        reachRevealing();
        uint256 start = task.getRound(1).attemptStart;
        offset = bound(offset, 0, 3 * REVEAL_WINDOW);
        vm.roll(start + offset);
        bool open = records.revealing(1);
        assertEq(open, offset < REVEAL_WINDOW, "window");
        vm.prank(client(0));
        if (!open) vm.expectRevert();
        records.submitRecord(1, 2, hex"01");
    }
}

/// @notice Invariant-runner actions on a task's records: clients and relayers send records of
///         every kind for the current (or a wrong) round while the task moves on.
contract RecordsHandler is RecordsFixture {
    mapping(uint256 round => uint256) public expectedAcc;
    mapping(uint256 round => uint256) public expectedCount;
    uint256 public revealsOutsideWindow;
    uint256 public wrongRoundAccepted;
    uint256 public accepted;
    uint256 public revealsWithoutKey;
    mapping(uint256 client => bool) internal _hasKey; // an ENC_KEY record of it was accepted

    constructor() {
        setUpRecords();
        for (uint256 c = 0; c < 3; ++c) {
            bytes memory key = abi.encodePacked(keccak256(abi.encode("key", c)));
            vm.prank(client(c));
            records.submitRecord(0, 0, key); // client 3 has no ENC_KEY (until it sends one)
            _accept(0, 0, c, key);
        }
        startTask();
    }

    function _windowOpen(uint256 round) private view returns (bool) {
        FedChainTaskStorage.RoundInfo memory info = task.getRound(round);
        return info.phase == FedChainTaskStorage.Phase.Aggregating && info.attempt == 0
            && block.number < uint256(info.attemptStart) + REVEAL_WINDOW;
    }

    function _accept(uint256 round, uint8 kind, uint256 c, bytes memory payload) private {
        if (kind == 2 && !_windowOpen(round)) revealsOutsideWindow += 1;
        if (round != task.currentRound() || task.taskCompleted()) wrongRoundAccepted += 1;
        if (kind == 0) _hasKey[c] = true;
        expectedAcc[round] = nextAcc(expectedAcc[round], kind, c, payload);
        expectedCount[round] += 1;
        accepted += 1;
    }

    function send(uint8 who, uint8 kind, bytes calldata payload, bool wrongRound) external {
        uint256 c = who % 4;
        kind = kind % 4; // 3 is unknown: refused
        uint256 round = task.currentRound() + (wrongRound ? 1 : 0);
        vm.prank(client(c));
        try records.submitRecord(round, kind, payload) {
            _accept(round, kind, c, payload);
        } catch {}
    }

    function relay(uint8 who, uint8 kind, bytes calldata payload, uint8 n) external {
        uint256 round = task.currentRound();
        kind = kind % 3;
        uint256 k = 1 + n % 3;
        bytes memory batch;
        for (uint256 j = 0; j < k; ++j) {
            batch = bytes.concat(batch, signedRecord((who + j) % 4, kind, round, payload));
        }
        try records.submitRecords(round, batch) {
            for (uint256 j = 0; j < k; ++j) {
                _accept(round, kind, (who + j) % 4, payload);
            }
        } catch {}
    }

    function relayReveals(uint8 who, bytes32 payload, uint8 n, bool wrongRound) external {
        uint256 round = task.currentRound() + (wrongRound ? 1 : 0);
        uint256 k = 1 + n % 3;
        bytes memory batch;
        for (uint256 j = 0; j < k; ++j) {
            uint256 c = (who + j) % 4;
            bytes32 d = records.recordDigest(2, round, abi.encodePacked(payload));
            (bytes32 r, bytes32 vs) = vm.signCompact(clientKey(c), d);
            batch = bytes.concat(batch, abi.encodePacked(uint32(c), payload, r, vs));
        }
        try records.submitReveals(round, batch) {
            for (uint256 j = 0; j < k; ++j) {
                if (!_hasKey[(who + j) % 4]) revealsWithoutKey += 1;
                _accept(round, 2, (who + j) % 4, abi.encodePacked(payload));
            }
        } catch {}
    }

    function roll(uint8 blocks) external {
        vm.roll(block.number + 1 + blocks % 4);
    }

    /// @notice The task's round moves one step (updates, submission, finalization).
    function advanceTask() external {
        if (task.taskCompleted()) return;
        uint256 round = task.currentRound();
        FedChainTaskStorage.Phase phase = task.phase(round);
        if (phase == FedChainTaskStorage.Phase.Collecting) {
            if (task.getRound(round).closeBlock == 0) submitUpdates(round, 2);
            else vm.roll(task.getRound(round).closeBlock);
        } else if (phase == FedChainTaskStorage.Phase.Aggregating) {
            (address chosen,,) = task.currentAggregator();
            vm.prank(chosen);
            task.submitAggregate{value: BOND}(round, honestDigest(round), false);
        } else if (phase == FedChainTaskStorage.Phase.Submitted) {
            vm.roll(task.getRound(round).challengeDeadline + 1);
            task.finalize(round);
        }
    }

    function recordsAddress() external view returns (address) {
        return address(records);
    }

    function taskAddress() external view returns (address) {
        return address(task);
    }
}

/// @title PrivacyRecordsInvariantTest
/// @notice Each round's record log is exactly the hash chain of the records accepted for it, in
///         order; reveals are accepted only inside their window; no record lands in a round
///         other than the task's current one.
contract PrivacyRecordsInvariantTest is RecordsFixture {
    RecordsHandler internal handler;

    function setUp() public {
        handler = new RecordsHandler();
        records = PrivacyRecords(handler.recordsAddress());
        task = FedChainTask(payable(handler.taskAddress()));
        bytes4[] memory selectors = new bytes4[](7);
        selectors[6] = RecordsHandler.relayReveals.selector;
        selectors[0] = RecordsHandler.send.selector;
        selectors[1] = RecordsHandler.relay.selector;
        selectors[2] = RecordsHandler.roll.selector;
        selectors[3] = RecordsHandler.advanceTask.selector;
        selectors[4] = RecordsHandler.advanceTask.selector;
        selectors[5] = RecordsHandler.send.selector;
        targetContract(address(handler));
        targetSelector(FuzzSelector({addr: address(handler), selectors: selectors}));
    }

    function invariant_recordLogIsTheChainOfAcceptedRecords() public view {
        uint256 total = 0;
        for (uint256 r = 0; r <= task.currentRound() + 1; ++r) {
            (uint256 acc, uint256 count) = records.recordLog(r);
            assertEq(count, handler.expectedCount(r), "count");
            assertEq(acc, handler.expectedAcc(r), "accumulator");
            total += count;
        }
        assertEq(total, handler.accepted(), "every accepted record is in a log");
    }

    function invariant_revealsOnlyInsideTheirWindow() public view {
        assertEq(handler.revealsOutsideWindow(), 0, "reveal outside its window");
        assertEq(handler.wrongRoundAccepted(), 0, "record for a round that is not open");
        assertEq(handler.revealsWithoutKey(), 0, "submitReveals from a client without ENC_KEY");
    }
}
