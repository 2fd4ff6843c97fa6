// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Test} from "./utils/Test.sol";
import {TaskFixture} from "./utils/TaskFixture.sol";
import {FedChainTask} from "../FedChainTask.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";

/// @title TaskHandler
/// @notice What forge's invariant runner calls: every protocol action of a 5-member committee
///         (member 1 Byzantine, the first choice of round 2: it submits wrong aggregates,
///         challenges honest ones, signs false verdicts and equivocates; the others honest) and 6 clients, in any order, at
///         any block. Each action picks its actor from a fuzzed seed, tries the call, and keeps
///         ghost books of what went in and out and of each round's submissions, so the
///         invariants can compare the contract with what it must hold.
contract TaskHandler is TaskFixture {
    uint256 internal constant N = 5;
    uint256 internal constant BYZANTINE = 1;
    uint256 internal constant CLIENTS = 6;
    uint256 internal constant REPORTER_PK = 0xBEEF;
    uint256 internal constant CLIENT_DEPOSIT = 0.1 ether;

    FedChainTaskStorage.TaskConfig internal cfg;

    // -- ghost books ----------------------------------------------------------------------
    uint256 public deposited; // stakes, top-ups, bonds and challenge bonds paid in
    uint256 public withdrawn; // paid out by withdraw
    uint256 public depositsHeld; // client deposits locked (registered, not released)
    uint256 public honestBondLoss; // bonds of honest submissions not returned
    uint256 public earlyFinalizations; // finalizations at or before the challenge deadline
    uint256 public falseVerdicts; // certificates of a wrong verdict that were accepted
    uint256 public honestSlashed; // honest members slashed
    uint256 public wrongFinalized; // rounds finalized with a wrong (Byzantine) digest
    uint256 public finalizedRounds; // finalized or skipped
    uint256 public overweightAccepted; // updates accepted above maxSamples
    bool public aborted;
    mapping(uint256 round => bytes32) public finalizedDigest;
    mapping(uint256 round => uint256) public finalizedAt;
    mapping(bytes4 action => uint256) public calls; // successful calls per action

    constructor() {
        cfg = defaultConfig();
        cfg.numRounds = 2;
        cfg.submitTimeout = 4;
        cfg.challengeWindow = 3;
        cfg.attestWindow = 3;
        cfg.disputeTimeout = 5;
        cfg.collectTimeout = 6;
        cfg.abortTimeout = 60;
        cfg.clientDeposit = CLIENT_DEPOSIT;
        deploy(cfg);
        registerCommittee(N);
        registerClients(CLIENTS);
        startTask();
        deposited = N * STAKE + CLIENTS * CLIENT_DEPOSIT;
        depositsHeld = CLIENTS * CLIENT_DEPOSIT;
    }

    // -- helpers ---------------------------------------------------------------------------

    function actors() public view returns (address[] memory list) {
        list = new address[](N + CLIENTS + 2);
        for (uint256 i = 0; i < N; ++i) {
            list[i] = agg(i);
        }
        for (uint256 i = 0; i < CLIENTS; ++i) {
            list[N + i] = client(i);
        }
        list[N + CLIENTS] = owner;
        list[N + CLIENTS + 1] = vm.addr(REPORTER_PK);
    }

    function _round() private view returns (uint256) {
        return task.currentRound();
    }

    function _info() private view returns (FedChainTaskStorage.RoundInfo memory) {
        return task.getRound(_round());
    }

    function _count(bytes4 action) private {
        calls[action] += 1;
    }

    function _honest(uint256 member) private pure returns (bool) {
        return member != BYZANTINE;
    }

    /// @dev The first `count` honest members.
    function _honestMembers(uint256 count) private pure returns (uint256[] memory list) {
        list = new uint256[](count);
        uint256 j = 0;
        for (uint256 i = 0; j < count; ++i) {
            if (_honest(i)) list[j++] = i;
        }
    }

    // -- actions ---------------------------------------------------------------------------

    /// @notice Time passes: 1-6 blocks, or (one time in 16) long enough for the task to stall.
    function roll(uint8 blocks) external {
        vm.roll(block.number + 1 + (blocks % 16 == 0 ? cfg.abortTimeout : blocks % 6));
        _count(this.roll.selector);
    }

    /// @notice A client registers its update; one time in four it claims any weight at all
    ///         (up to 2**64 - 1, the weight-inflation attack).
    function submitUpdate(uint8 who, uint64 samples) external {
        uint256 i = who % CLIENTS;
        uint256 round = _round();
        uint64 weight = samples % 4 == 0 ? samples : uint64(bound(samples, 1, 1000));
        vm.prank(client(i));
        try task.submitUpdate(round, updateDigest(round, i), weight, rootOf(updateDigest(round, i))) {
            _count(this.submitUpdate.selector);
            if (weight > cfg.maxSamples) overweightAccepted += 1;
        } catch {}
    }

    function relayBatch(uint8 first, uint8 count) external {
        uint256 round = _round();
        uint256 k = 1 + (count % 3);
        bytes memory batch;
        for (uint256 j = 0; j < k; ++j) {
            uint256 i = (first + j) % CLIENTS;
            batch = bytes.concat(batch, updateRecord(i, round, updateDigest(round, i), uint64(5 + i)));
        }
        try task.submitUpdates(round, batch) {
            _count(this.relayBatch.selector);
        } catch {}
    }

    function attest(uint8 who) external {
        uint256 m = who % N;
        uint256 round = _round();
        uint256 count = task.updateCount(round);
        uint256[] memory bits = new uint256[]((count + 255) >> 8);
        if (bits.length != 0) bits[0] = count >= 256 ? type(uint256).max : (uint256(1) << count) - 1;
        // the Byzantine member claims to hold nothing
        if (!_honest(m) && bits.length != 0) bits[0] = 0;
        vm.prank(agg(m));
        try task.attest(round, bits) {
            _count(this.attest.selector);
        } catch {}
    }

    function submitAggregate() external {
        uint256 round = _round();
        if (task.taskCompleted()) return;
        try task.currentAggregator() returns (address chosen, uint256, uint256) {
            if (chosen == address(0)) return;
            bytes32 digest = indexOf(chosen) == BYZANTINE ? keccak256(abi.encode("wrong", round)) : honestDigest(round);
            vm.prank(chosen);
            try task.submitAggregate{value: BOND}(round, digest, false) {
                deposited += BOND;
                _count(this.submitAggregate.selector);
            } catch {}
        } catch {}
    }

    function advanceAttempt() external {
        try task.advanceAttempt(_round()) {
            _count(this.advanceAttempt.selector);
        } catch {}
    }

    function challenge(uint8 who) external {
        uint256 m = who % N;
        uint256 round = _round();
        FedChainTaskStorage.RoundInfo memory info = _info();
        // honest members challenge only wrong aggregates; the Byzantine one anything
        if (_honest(m) && info.aggregateDigest == honestDigest(round)) return;
        vm.prank(agg(m));
        try task.challenge{value: CHALLENGE_BOND}(round) {
            deposited += CHALLENGE_BOND;
            _count(this.challenge.selector);
        } catch {}
    }

    /// @notice The honest members' certificate of the true verdict (n - f = 4 of them).
    function resolve(uint8 viewNumber) external {
        uint256 round = _round();
        FedChainTaskStorage.RoundInfo memory info = _info();
        if (info.phase != FedChainTaskStorage.Phase.Disputed) return;
        bool faulty = info.aggregateDigest != honestDigest(round);
        bytes[] memory sigs = certificate(round, info.attempt, info.aggregateDigest, faulty, viewNumber, _honestMembers(4));
        try task.resolveDispute(round, info.attempt, faulty, viewNumber, sigs) {
            _count(this.resolve.selector);
        } catch {}
    }

    /// @notice The Byzantine member and `helpers` (0-2) honest signatures of the wrong verdict,
    ///         never a quorum: must never be accepted.
    function forgeVerdict(uint8 helpers) external {
        uint256 round = _round();
        FedChainTaskStorage.RoundInfo memory info = _info();
        if (info.phase != FedChainTaskStorage.Phase.Disputed) return;
        bool truth = info.aggregateDigest != honestDigest(round);
        uint256 h = helpers % 3;
        uint256[] memory signers = new uint256[](h + 1);
        signers[0] = BYZANTINE;
        uint256[] memory helpersList = _honestMembers(h);
        for (uint256 j = 0; j < h; ++j) {
            signers[j + 1] = helpersList[j];
        }
        bytes[] memory sigs = certificate(round, info.attempt, info.aggregateDigest, !truth, 0, signers);
        try task.resolveDispute(round, info.attempt, !truth, 0, sigs) {
            falseVerdicts += 1;
        } catch {}
    }

    /// @notice Lets the open dispute time out (the committee stalls) and expires it.
    function expire(bool wait) external {
        uint256 round = _round();
        FedChainTaskStorage.RoundInfo memory info = _info();
        if (info.phase != FedChainTaskStorage.Phase.Disputed) return;
        bool honestSubmission = info.aggregateDigest == honestDigest(round);
        // issue 20 item 5: before wip/20a an expired dispute sent the aggregate bond to the
        // treasury even when the aggregate was right; this campaign found it
        // (FedChainTaskExitsTest.test_expireDispute_refundsTheHonestSubmittersBond).
        if (honestSubmission && !EXPIRY_REFUNDS_HONEST_BOND) return;
        if (wait && block.number <= info.disputeDeadline) vm.roll(info.disputeDeadline + 1);
        address submitter = info.aggregator;
        uint256 before = task.credits(submitter);
        try task.expireDispute(round) {
            _count(this.expire.selector);
            if (honestSubmission && task.credits(submitter) < before + BOND) honestBondLoss += BOND;
        } catch {}
    }

    /// @dev Whether the contract under test refunds the bond of a submission whose dispute
    ///      expired (issue 20 item 5: it does since wip/20a; false skips that path).
    bool internal constant EXPIRY_REFUNDS_HONEST_BOND = true;

    /// @notice Moves the current round one step the way a live network would: clients
    ///         register (or, one time in five, stay away until the round is skipped), honest
    ///         members attest, the chosen member submits (or, one time in
    ///         four, an honest one lets its deadline pass), honest members challenge a wrong
    ///         aggregate (and the Byzantine one, one time in three, a right one), the window
    ///         passes and anyone finalizes, a dispute gets the honest certificate (or, one time
    ///         in three, the committee stalls and the dispute expires).
    function progress(uint8 seed) external {
        if (task.taskCompleted()) return;
        uint256 round = _round();
        FedChainTaskStorage.Phase phase = task.phase(round);
        if (phase == FedChainTaskStorage.Phase.Collecting) {
            if (task.getRound(round).closeBlock != 0) {
                vm.roll(task.getRound(round).closeBlock);
            } else if (seed % 5 == 0) {
                this.skipRound(true); // clients stay away: the round times out and is skipped
            } else {
                this.submitUpdate(seed, seed);
                this.submitUpdate(seed ^ 1, seed);
            }
        } else if (phase == FedChainTaskStorage.Phase.Attesting) {
            for (uint8 m = 0; m < N; ++m) {
                if (_honest(m)) this.attest(m);
            }
        } else if (phase == FedChainTaskStorage.Phase.Aggregating) {
            (address chosen,, uint256 deadline) = task.currentAggregator();
            if (chosen == address(0) || seed % 4 == 0) {
                vm.roll(deadline + 1);
                this.advanceAttempt();
            } else {
                this.submitAggregate();
            }
        } else if (phase == FedChainTaskStorage.Phase.Submitted) {
            if (task.getRound(round).aggregateDigest != honestDigest(round)) {
                this.challenge(0); // an honest member disputes a wrong aggregate
            } else if (seed % 3 == 0) {
                this.challenge(uint8(BYZANTINE)); // the Byzantine member griefs a right one
            } else {
                vm.roll(task.getRound(round).challengeDeadline + 1);
                this.finalize();
            }
        } else if (phase == FedChainTaskStorage.Phase.Disputed) {
            if (seed % 3 == 0) {
                this.expire(true); // the committee stalls
            } else {
                this.resolve(seed);
            }
        }
        _count(this.progress.selector);
    }

    /// @notice A round short of minUpdates: wait out its collect timeout (if `wait`) and skip it.
    function skipRound(bool wait) external {
        uint256 round = _round();
        if (task.taskCompleted() || task.phase(round) != FedChainTaskStorage.Phase.Collecting) return;
        uint256 timeoutBlock = task.getRound(round).openBlock + cfg.collectWindow + cfg.collectTimeout;
        if (wait && block.number <= timeoutBlock) vm.roll(timeoutBlock + 1);
        bytes32 carried = round == 1 ? MODEL0 : task.roundDigest(round - 1);
        try task.skipRound(round) {
            _count(this.skipRound.selector);
            if (block.number <= timeoutBlock) earlyFinalizations += 1;
            finalizedDigest[round] = carried;
            finalizedAt[round] = block.number;
            finalizedRounds += 1;
        } catch {}
    }

    /// @notice The task stalls (nobody moves it for abortTimeout blocks, if `wait`) and anyone
    ///         aborts it; the open submission's bonds go back to their owners.
    function abortTask(bool wait) external {
        uint256 round = _round();
        if (task.taskCompleted()) return;
        uint256 abortBlock = task.getRound(round).openBlock + cfg.abortTimeout;
        if (wait && block.number <= abortBlock) vm.roll(abortBlock + 1);
        FedChainTaskStorage.RoundInfo memory info = _info();
        bool holdsBond = info.phase == FedChainTaskStorage.Phase.Submitted || info.phase == FedChainTaskStorage.Phase.Disputed;
        uint256 before = holdsBond ? task.credits(info.aggregator) : 0;
        try task.abortTask() {
            _count(this.abortTask.selector);
            aborted = true;
            if (holdsBond && info.aggregateDigest == honestDigest(round) && task.credits(info.aggregator) < before + BOND) {
                honestBondLoss += BOND;
            }
        } catch {}
    }

    function finalize() external {
        uint256 round = _round();
        FedChainTaskStorage.RoundInfo memory info = _info();
        address submitter = info.aggregator;
        uint256 before = task.credits(submitter);
        try task.finalize(round) {
            _count(this.finalize.selector);
            if (block.number <= info.challengeDeadline) earlyFinalizations += 1;
            finalizedDigest[round] = info.aggregateDigest;
            finalizedAt[round] = block.number;
            finalizedRounds += 1;
            if (info.aggregateDigest == honestDigest(round)) {
                if (task.credits(submitter) != before + BOND) honestBondLoss += BOND;
            } else {
                wrongFinalized += 1;
            }
        } catch {}
    }

    /// @notice The Byzantine member signs two opposite commits for one dispute; a reporter
    ///         proves it.
    function equivocate(uint8 viewNumber) external {
        if (viewNumber % 8 != 0) return; // rarely: a slashed Byzantine member stops submitting
        bytes32 d = keccak256("some dispute");
        FedChainTaskStorage.SignedVote memory a;
        FedChainTaskStorage.SignedVote memory b;
        (a.round, a.attempt, a.aggregateDigest, a.faulty) = (1, 0, d, true);
        (b.round, b.attempt, b.aggregateDigest, b.faulty) = (1, 0, d, false);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(aggKey(BYZANTINE), task.verdictDigest(1, 0, d, true, viewNumber));
        a.signature = abi.encodePacked(r, s, v);
        (v, r, s) = vm.sign(aggKey(BYZANTINE), task.verdictDigest(1, 0, d, false, viewNumber));
        b.signature = abi.encodePacked(r, s, v);
        // the reporter commits first; the reveal follows one block later
        commitEvidence(vm.addr(REPORTER_PK), 2, viewNumber, 0, a, b);
        vm.prank(vm.addr(REPORTER_PK));
        try task.slashEquivocation(2, viewNumber, 0, a, b) {
            _count(this.equivocate.selector);
        } catch {}
    }

    function topUp(uint8 who, uint96 amount) external {
        uint256 m = who % N;
        uint256 value = bound(amount, 1, 3 ether);
        vm.deal(agg(m), agg(m).balance + value);
        vm.prank(agg(m));
        try task.topUpStake{value: value}() {
            deposited += value;
            _count(this.topUp.selector);
        } catch {}
    }

    function releaseStake(uint8 who) external {
        vm.prank(agg(who % N));
        try task.releaseStake() {
            _count(this.releaseStake.selector);
        } catch {}
    }

    /// @notice A client takes its deposit back (only once the task ended, only once).
    function releaseDeposit(uint8 who) external {
        vm.prank(client(who % CLIENTS));
        try task.releaseDeposit() {
            require(task.taskCompleted(), "a deposit released before the task ended");
            depositsHeld -= CLIENT_DEPOSIT;
            _count(this.releaseDeposit.selector);
        } catch {}
    }

    function withdraw(uint8 who) external {
        address[] memory list = actors();
        address account = list[who % list.length];
        uint256 owed = task.credits(account);
        uint256 before = account.balance;
        vm.prank(account);
        try task.withdraw() {
            require(account.balance - before == owed, "withdraw paid other than the credits");
            withdrawn += owed;
            _count(this.withdraw.selector);
        } catch {}
    }

    // -- checks the invariants call ----------------------------------------------------------

    /// @notice Value the contract must hold: every stake, every credit, the burned value
    ///         (`credits(address(0))`, which nobody can withdraw) and the bonds of the current
    ///         round's open submission (aggregate bond while Submitted or Disputed, plus the
    ///         challenge bond while Disputed, until the task ended). Nothing else is held.
    function owed() public view returns (uint256 total) {
        address[] memory list = actors();
        for (uint256 i = 0; i < list.length; ++i) {
            total += task.credits(list[i]);
        }
        for (uint256 i = 0; i < N; ++i) {
            total += stakeOf(agg(i));
        }
        total += task.credits(address(0)); // burned: penalties, slash remainders, forfeits
        total += depositsHeld; // client deposits, locked until the task ends
        uint256 round = _round();
        if (round != 0 && !aborted) {
            FedChainTaskStorage.Phase phase = task.phase(round);
            if (phase == FedChainTaskStorage.Phase.Submitted) total += BOND;
            if (phase == FedChainTaskStorage.Phase.Disputed) total += BOND + CHALLENGE_BOND;
        }
    }

    /// @notice After the task ended (completed or aborted): every member releases its stake
    ///         and everyone withdraws; each receives exactly its stake + credits. Returns the
    ///         value left behind, which must be exactly the burned value.
    function drainAfterCompletion() external returns (uint256 left) {
        address[] memory list = actors();
        for (uint256 i = 0; i < list.length; ++i) {
            address account = list[i];
            uint256 due = task.credits(account);
            if (i < N) {
                uint256 stake = stakeOf(account);
                if (stake != 0) {
                    vm.prank(account);
                    task.releaseStake();
                    due += stake;
                }
            } else if (i < N + CLIENTS) {
                vm.prank(account);
                try task.releaseDeposit() {
                    due += CLIENT_DEPOSIT;
                    depositsHeld -= CLIENT_DEPOSIT;
                } catch {}
            }
            if (due == 0) continue;
            uint256 before = account.balance;
            vm.prank(account);
            task.withdraw();
            require(account.balance - before == due, "paid other than owed");
        }
        return address(task).balance - task.credits(address(0));
    }

    /// @notice Whether the task has been stalled for more than abortTimeout blocks.
    function stalled() public view returns (bool) {
        if (task.taskCompleted()) return false;
        return block.number > task.getRound(_round()).openBlock + cfg.abortTimeout;
    }

    /// @notice Aborts a stalled task (must succeed) and drains it; returns the value left
    ///         behind beyond the burned value.
    function abortAndDrain() external returns (uint256) {
        task.abortTask();
        aborted = true;
        return this.drainAfterCompletion();
    }

    function honestMembersSlashed() external view returns (uint256 count) {
        for (uint256 i = 0; i < N; ++i) {
            (,, bool slashed,,,) = task.aggregatorInfo(agg(i));
            if (slashed && _honest(i)) ++count;
        }
    }

    function taskAddress() external view returns (address) {
        return address(task);
    }
}

/// @title FedChainTaskInvariantTest
/// @notice Handler-based invariants of FedChainTask (forge `invariant_*`): checked after every
///         call of every run of the campaign (`make forge-test`; longer:
///         scripts/invariant_campaign.sh).
contract FedChainTaskInvariantTest is Test {
    TaskHandler internal handler;
    FedChainTask internal task;

    function setUp() public {
        handler = new TaskHandler();
        task = FedChainTask(payable(handler.taskAddress()));
        bytes4[] memory selectors = new bytes4[](23);
        selectors[0] = TaskHandler.roll.selector;
        selectors[1] = TaskHandler.submitUpdate.selector;
        selectors[2] = TaskHandler.relayBatch.selector;
        selectors[3] = TaskHandler.attest.selector;
        selectors[4] = TaskHandler.submitAggregate.selector;
        selectors[5] = TaskHandler.advanceAttempt.selector;
        selectors[6] = TaskHandler.challenge.selector;
        selectors[7] = TaskHandler.resolve.selector;
        selectors[8] = TaskHandler.forgeVerdict.selector;
        selectors[9] = TaskHandler.expire.selector;
        selectors[10] = TaskHandler.finalize.selector;
        selectors[11] = TaskHandler.equivocate.selector;
        selectors[12] = TaskHandler.topUp.selector;
        selectors[13] = TaskHandler.releaseStake.selector;
        selectors[14] = TaskHandler.withdraw.selector;
        // forge picks selectors uniformly: repeated entries weight the round's progress and
        // challenges so that campaigns reach disputes, finalized rounds and completion
        selectors[15] = TaskHandler.progress.selector;
        selectors[16] = TaskHandler.progress.selector;
        selectors[17] = TaskHandler.progress.selector;
        selectors[18] = TaskHandler.progress.selector;
        selectors[19] = TaskHandler.challenge.selector;
        selectors[20] = TaskHandler.skipRound.selector;
        selectors[21] = TaskHandler.abortTask.selector;
        selectors[22] = TaskHandler.releaseDeposit.selector;
        targetContract(address(handler));
        targetSelector(FuzzSelector({addr: address(handler), selectors: selectors}));
    }

    /// @notice The contract's balance always equals stakes + credits + the bonds of the open
    ///         submission + the client deposits held (nothing else is held), and what was
    ///         paid in equals what it holds plus what was withdrawn.
    function invariant_balanceIsStakesBondsCredits() public view {
        assertEq(address(task).balance, handler.owed(), "balance = stakes + bonds + credits");
        assertEq(handler.deposited(), address(task).balance + handler.withdrawn(), "paid in = held + paid out");
    }

    /// @notice After the task ends (completed or aborted), every party can withdraw exactly
    ///         what it is owed; only the burned value stays.
    function invariant_everyoneWithdrawsExactlyAfterCompletion() public {
        if (!task.taskCompleted()) return;
        assertEq(handler.drainAfterCompletion(), 0, "value left after everyone withdrew");
    }

    /// @notice After the task deadline (abortTimeout blocks without a new round) anyone can end
    ///         the task, and then every stake, bond and credit is withdrawable.
    function invariant_stalledTaskEndsAndPaysEveryone() public {
        if (!handler.stalled()) return;
        assertEq(handler.abortAndDrain(), 0, "value left after abort and withdrawals");
    }

    /// @notice No round finalizes at or before its challenge deadline.
    function invariant_noRoundFinalizesBeforeItsWindow() public view {
        assertEq(handler.earlyFinalizations(), 0, "finalized inside the challenge window");
    }

    /// @notice A finalized digest never changes (and the global model is the last one).
    function invariant_finalizedDigestNeverChanges() public view {
        uint256 current = task.currentRound();
        for (uint256 r = 1; r <= current; ++r) {
            bytes32 recorded = handler.finalizedDigest(r);
            if (recorded != bytes32(0)) assertEq(task.roundDigest(r), recorded, "finalized digest changed");
            else assertEq(task.roundDigest(r), bytes32(0), "finalized without the handler");
        }
        uint256 open = !task.taskCompleted() || handler.aborted() ? 1 : 0;
        assertEq(handler.finalizedRounds() + open, current, "one open round");
    }

    /// @notice No update heavier than `maxSamples` is ever registered (issue 20 item 2).
    function invariant_noUpdateAboveMaxSamples() public view {
        assertEq(handler.overweightAccepted(), 0, "update above maxSamples accepted");
    }

    /// @notice An honest submitter never loses its bond; honest members are never slashed;
    ///         no certificate without n - f signers ever decides a dispute.
    function invariant_honestSubmitterNeverLosesItsBond() public view {
        assertEq(handler.honestBondLoss(), 0, "honest bond lost");
        assertEq(handler.honestMembersSlashed(), 0, "honest member slashed");
        assertEq(handler.falseVerdicts(), 0, "false verdict accepted");
    }
}
