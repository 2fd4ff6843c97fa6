// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TaskFixture} from "./utils/TaskFixture.sol";
import {FedChainTask} from "../FedChainTask.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";
import {Quorums} from "../lib/Quorums.sol";
import {Rotation} from "../lib/Rotation.sol";
import {ClientRecords} from "../lib/ClientRecords.sol";

/// @title FedChainTaskFuzzTest
/// @notice Fuzz tests of the arithmetic: quorum counting, rotation, the records' hash chain and
///         bitmaps, stakes and penalties, the dispute split, credits and collection closing.
contract FedChainTaskFuzzTest is TaskFixture {
    // -- pure libraries ---------------------------------------------------------------------

    /// @notice n - f quorums of any committee intersect in at least f + 1 members (one correct).
    function testFuzz_quorumsIntersectInACorrectMember(uint256 n) public pure {
        n = bound(n, 1, 256);
        uint256 f = Quorums.maxFaulty(n);
        uint256 q = Quorums.commitQuorum(n);
        assertLe(3 * f + 1, n, "3f + 1 <= n");
        assertEq(q, n - f, "quorum = n - f");
        assertLe(q, n, "quorum <= n");
        assertLe(f + 1, 2 * q - n, "two quorums share f + 1 members");
        // f is the largest such: one more faulty member breaks 3f + 1 <= n
        assertGt(3 * (f + 1) + 1, n, "f maximal");
    }

    function testFuzz_rotationStartIndexInRange(uint8 policy, bytes32 seed, uint256 round, uint256 attempt, uint256 n)
        public
        pure
    {
        policy = uint8(bound(policy, 0, 1));
        round = bound(round, 1, type(uint64).max);
        attempt = bound(attempt, 0, type(uint24).max);
        n = bound(n, 1, 256);
        uint256 start = Rotation.startIndex(policy, seed, round, attempt, n);
        assertLe(start + 1, n, "start < n");
        if (policy == Rotation.ROUND_ROBIN) {
            assertEq(start, (round - 1 + attempt) % n, "round robin");
        } else {
            assertEq(start, uint256(keccak256(abi.encode(seed, round, attempt))) % n, "seeded");
        }
    }

    function testFuzz_accumulatorIsLow224BitsOfTheChain(
        uint224 acc,
        address who,
        bytes32 digest,
        uint64 samples,
        bytes32 root
    ) public pure {
        uint256 expected =
            uint256(keccak256(abi.encode(uint256(acc), who, digest, uint256(samples), root))) & type(uint224).max;
        assertEq(uint256(ClientRecords.extendUpdates(acc, who, digest, samples, root)), expected, "hash chain");
    }

    function testFuzz_taggedBitmapWordsBelongToOneRound(uint256 bits, uint32 round, uint32 other) public pure {
        bits = bits & ((uint256(1) << 224) - 1);
        vm.assume(round != other);
        uint256 word = ClientRecords.tagged(bits, round);
        assertEq(ClientRecords.bitsFor(word, round), bits, "round's bits");
        assertEq(ClientRecords.bitsFor(word, other), 0, "other rounds see none");
    }

    function testFuzz_recoverCompactFindsTheSignerAndRefusesHighS(uint256 key, bytes32 digest, uint256 highS) public pure {
        key = bound(key, 1, 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364140);
        (bytes32 r, bytes32 vs) = vm.signCompact(key, digest);
        (address signer, bool malleable) = ClientRecords.recoverCompact(digest, r, vs);
        assertFalse(malleable, "low s");
        assertEq(signer, vm.addr(key), "signer");
        highS = bound(highS, ClientRecords.HALF_ORDER + 1, (uint256(1) << 255) - 1);
        (signer, malleable) = ClientRecords.recoverCompact(digest, r, bytes32(highS));
        assertTrue(malleable && signer == address(0), "high s refused");
    }

    // -- collection -------------------------------------------------------------------------

    /// @notice closeBlock = the block of the maxUpdates-th update, else max(openBlock +
    ///         collectWindow, block of the minUpdates-th update).
    function testFuzz_collectionCloseBlock(uint32 minU, uint32 maxU, uint32 window, uint256 count, uint256 gap) public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.minUpdates = uint32(bound(minU, 1, 6));
        cfg.maxUpdates = uint32(bound(maxU, cfg.minUpdates, 8));
        cfg.collectWindow = uint32(bound(window, 1, 20));
        deploy(cfg);
        registerCommittee(4);
        registerClients(8);
        startTask();
        uint256 open = block.number;
        _registerSpaced(cfg, bound(count, 0, cfg.maxUpdates), bound(gap, 0, 3));
        FedChainTaskStorage.RoundInfo memory info = task.getRound(1);
        if (info.updateCount < cfg.minUpdates) {
            assertEq(info.closeBlock, 0, "open until minUpdates");
        } else if (_maxBlock != 0) {
            assertEq(info.closeBlock, _maxBlock, "maxUpdates closes at once");
        } else {
            uint256 windowEnd = open + cfg.collectWindow;
            assertEq(info.closeBlock, windowEnd > _minBlock ? windowEnd : _minBlock, "min + window");
        }
        assertLe(info.updateCount, cfg.maxUpdates, "never more than maxUpdates");
    }

    uint256 private _minBlock;
    uint256 private _maxBlock;

    /// @dev Clients 0 .. count-1 register one update each, `gap` blocks apart, while
    ///      collection is open; records the blocks of the min- and maxUpdates-th updates.
    function _registerSpaced(FedChainTaskStorage.TaskConfig memory cfg, uint256 count, uint256 gap) private {
        for (uint256 i = 0; i < count; ++i) {
            if (task.getRound(1).collectionClosed) break;
            vm.prank(client(i));
            task.submitUpdate(1, updateDigest(1, i), 1, rootOf(updateDigest(1, i)));
            if (i + 1 == cfg.minUpdates) _minBlock = block.number;
            if (i + 1 == cfg.maxUpdates) _maxBlock = block.number;
            vm.roll(block.number + gap);
        }
    }

    // -- stakes, penalties, rotation ----------------------------------------------------------

    /// @notice Missed deadlines: each laggard loses min(timeoutPenalty, stake) (burned), the
    ///         rotation walks on to the next member that is still at the stake and was active
    ///         when the attempt started; value is conserved throughout.
    function testFuzz_timeoutsPenaliseAndRotate(uint256 n, uint256 penalty, uint256 attempts, bool seeded, bytes32 seed)
        public
    {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        n = bound(n, 4, 8);
        cfg.timeoutPenalty = bound(penalty, 0, 2 * STAKE);
        cfg.rotationPolicy = seeded ? 1 : 0;
        cfg.rotationSeed = seed;
        deploy(cfg);
        registerCommittee(n);
        registerClients(2);
        startTask();
        submitUpdates(1, 2);
        closeCollection(1);
        uint256[] memory stakes = new uint256[](n);
        for (uint256 i = 0; i < n; ++i) {
            stakes[i] = STAKE;
        }
        uint256 burned = 0;
        attempts = bound(attempts, 0, 10);
        for (uint256 a = 0; a < attempts; ++a) {
            burned += _timeOut(cfg, stakes, a);
        }
        uint256 total = burned;
        for (uint256 i = 0; i < n; ++i) {
            assertEq(stakeOf(agg(i)), stakes[i], "stake");
            total += stakes[i];
        }
        assertEq(task.credits(BURN), burned, "penalties burned");
        assertEq(task.credits(owner), 0, "the owner gains nothing");
        assertEq(address(task).balance, total, "value conserved");
    }

    /// @dev One missed deadline at attempt `a`, checked against the model `stakes`; returns the
    ///      penalty burned.
    function _timeOut(FedChainTaskStorage.TaskConfig memory cfg, uint256[] memory stakes, uint256 a)
        private
        returns (uint256 p)
    {
        (address expected, uint256 chosenIndex) = _modelChoice(cfg, stakes, a);
        (address chosen, uint256 attempt, uint256 deadline) = task.currentAggregator();
        assertEq(attempt, a, "attempt");
        assertEq(chosen, expected, "rotation");
        vm.roll(deadline + 1);
        task.advanceAttempt(1);
        if (expected != address(0)) {
            p = cfg.timeoutPenalty < stakes[chosenIndex] ? cfg.timeoutPenalty : stakes[chosenIndex];
            stakes[chosenIndex] -= p;
        }
    }

    /// @dev The member the rotation must choose at attempt `a` of round 1: the first from the
    ///      start index whose (model) stake is still at `aggregatorStake`.
    function _modelChoice(FedChainTaskStorage.TaskConfig memory cfg, uint256[] memory stakes, uint256 a)
        private
        pure
        returns (address expected, uint256 chosenIndex)
    {
        uint256 n = stakes.length;
        uint256 first = Rotation.startIndex(cfg.rotationPolicy, cfg.rotationSeed, 1, a, n);
        for (uint256 i = 0; i < n; ++i) {
            uint256 idx = (first + i) % n;
            if (stakes[idx] >= STAKE) return (agg(idx), idx);
        }
    }

    /// @notice A top-up adds exactly its value; the member is active again iff its stake is back
    ///         to `aggregatorStake`, and only for attempts that start after the top-up.
    function testFuzz_topUpArithmetic(uint256 amount) public {
        setUpTask(4, 2);
        submitUpdates(1, 2);
        closeCollection(1);
        (,, uint256 deadline) = task.currentAggregator();
        vm.roll(deadline + 1);
        task.advanceAttempt(1); // member 0 down to STAKE - PENALTY
        amount = bound(amount, 1, 50 ether);
        vm.deal(agg(0), amount);
        vm.prank(agg(0));
        task.topUpStake{value: amount}();
        uint256 stake = stakeOf(agg(0));
        assertEq(stake, STAKE - PENALTY + amount, "stake + top-up");
        assertEq(isActive(agg(0)), stake >= STAKE, "active iff at the stake");
        (,,,,, uint256 activeFrom) = task.aggregatorInfo(agg(0));
        if (stake >= STAKE) assertEq(activeFrom, block.number, "active from the top-up block");
        // still attempt 1 (started before the top-up): member 0 is not chosen in it
        (address chosen,,) = task.currentAggregator();
        assertTrue(chosen != agg(0), "not chosen mid-attempt");
        assertEq(address(task).balance, 4 * STAKE + amount, "balance = stakes + penalty credit");
    }

    // -- disputes and payouts -----------------------------------------------------------------

    /// @notice Faulty verdict: the slashed stake + bond is split challenger half (rounded
    ///         down) / treasury rest; the challenger gets its bond back; nothing is created or lost.
    function testFuzz_disputeSplit(uint128 stakeAmount, uint128 bond, uint128 challengeBond, bool faulty) public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.aggregatorStake = bound(stakeAmount, 1, 1e24);
        cfg.aggregateBond = bound(bond, 0, 1e24);
        cfg.challengeBond = bound(challengeBond, 0, 1e24);
        (address chosen, address challenger) = _disputedWith(cfg);
        uint256 before = address(task).balance;
        _resolve(chosen, faulty);
        if (faulty) {
            uint256 slashed = cfg.aggregatorStake + cfg.aggregateBond;
            assertEq(task.credits(challenger), cfg.challengeBond + slashed / 2, "challenger");
            assertEq(task.credits(BURN), slashed - slashed / 2, "the rest burned");
            assertEq(stakeOf(chosen), 0, "submitter's stake gone");
        } else {
            assertEq(task.credits(BURN), cfg.challengeBond, "forfeited challenge bond burned");
            assertEq(task.credits(challenger), 0, "challenger");
        }
        assertEq(address(task).balance, before, "no value moves out before withdraw");
        assertEq(task.credits(owner), 0, "the owner gains nothing");
        uint256 sum = task.credits(BURN) + task.credits(challenger) + _stakes(4);
        if (!faulty) sum += cfg.aggregateBond; // still held for the standing submission
        assertEq(address(task).balance, sum, "balance = stakes + held bond + credits");
    }

    function _resolve(address chosen, bool faulty) private {
        bytes[] memory sigs = certificate(1, 0, keccak256("aggregate"), faulty, 0, membersExcept(4, chosen, 3));
        task.resolveDispute(1, 0, faulty, 0, sigs);
    }

    function _stakes(uint256 n) private view returns (uint256 sum) {
        for (uint256 i = 0; i < n; ++i) {
            sum += stakeOf(agg(i));
        }
    }

    /// @dev A 4-member task under `cfg` whose round-1 aggregate is submitted and challenged.
    function _disputedWith(FedChainTaskStorage.TaskConfig memory cfg) private returns (address chosen, address challenger) {
        deploy(cfg);
        for (uint256 i = 0; i < 4; ++i) {
            vm.deal(agg(i), 4e24);
            vm.prank(agg(i));
            task.registerAggregator{value: cfg.aggregatorStake}();
        }
        registerClients(2);
        startTask();
        submitUpdates(1, 2);
        closeCollection(1);
        (chosen,,) = task.currentAggregator();
        vm.prank(chosen);
        task.submitAggregate{value: cfg.aggregateBond}(1, keccak256("aggregate"), false);
        challenger = chosen == agg(1) ? agg(2) : agg(1);
        vm.prank(challenger);
        task.challenge{value: cfg.challengeBond}(1);
    }

    /// @notice A certificate counts iff it has at least n - f distinct member signatures.
    function testFuzz_quorumCountingInResolveDispute(uint256 n, uint256 k, bool faulty) public {
        n = bound(n, 4, 10);
        deploy(defaultConfig());
        registerCommittee(n);
        registerClients(2);
        startTask();
        bytes32 d = keccak256("aggregate");
        address chosen = reachSubmitted(1, d);
        address challenger = chosen == agg(1) ? agg(2) : agg(1);
        vm.prank(challenger);
        task.challenge{value: CHALLENGE_BOND}(1);
        k = bound(k, 0, n - 1);
        bytes[] memory sigs = certificate(1, 0, d, faulty, 0, membersExcept(n, chosen, k));
        uint256 quorum = n - (n - 1) / 3;
        assertEq(task.commitQuorum(), quorum, "quorum");
        if (k < quorum) {
            vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.QuorumNotReached.selector, k, quorum));
        }
        task.resolveDispute(1, 0, faulty, 0, sigs);
    }

    /// @notice `withdraw` pays exactly the credits, once: a submitter's bond after a round
    ///         that first went through fuzzed missed deadlines.
    function testFuzz_withdrawPaysExactlyTheCredits(uint256 bond, uint8 timeouts) public {
        FedChainTaskStorage.TaskConfig memory cfg = defaultConfig();
        cfg.aggregateBond = bound(bond, 1, 1e24);
        deploy(cfg);
        registerCommittee(4);
        registerClients(2);
        startTask();
        submitUpdates(1, 2);
        closeCollection(1);
        uint256 t = bound(timeouts, 0, 3);
        for (uint256 i = 0; i < t; ++i) {
            (,, uint256 deadline) = task.currentAggregator();
            vm.roll(deadline + 1);
            task.advanceAttempt(1);
        }
        (address chosen,,) = task.currentAggregator();
        vm.deal(chosen, cfg.aggregateBond);
        vm.prank(chosen);
        task.submitAggregate{value: cfg.aggregateBond}(1, honestDigest(1), false);
        vm.roll(task.getRound(1).challengeDeadline + 1);
        task.finalize(1);
        uint256 owed = task.credits(chosen);
        assertEq(owed, cfg.aggregateBond, "the bond is owed");
        uint256 before = chosen.balance;
        uint256 held = address(task).balance;
        vm.prank(chosen);
        task.withdraw();
        assertEq(chosen.balance - before, owed, "paid the credits");
        assertEq(address(task).balance, held - owed, "left the contract");
        assertEq(task.credits(chosen), 0, "credits cleared");
        vm.prank(chosen);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NothingToWithdraw.selector, chosen));
        task.withdraw();
    }
}
