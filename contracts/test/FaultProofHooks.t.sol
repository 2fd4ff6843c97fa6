// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {FaultProofFixture} from "./utils/FaultProofFixture.sol";
import {FedChainTask} from "../FedChainTask.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";
import {FaultGames} from "../FaultGames.sol";
import {OneStep} from "../OneStep.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";

/// @title FaultProofHooksTest
/// @notice FedChainTask's fault-proof hooks (issue 22, run in TaskDisputes by DELEGATECALL)
///         against a real FaultGames / OneStep and real chunk trees: `setFaultGames`,
///         `submitAggregateWithClaim` and each ClaimMismatch, `finalize` waiting for the claim,
///         `rejectRefuted`, `slashRefutedCertificate`.
contract FaultProofHooksTest is FaultProofFixture {
    address internal stranger = address(0x5757);
    address internal refuter = address(0xF00D);

    // -- setFaultGames ---------------------------------------------------------------------

    function test_setFaultGames_bindsOnceBeforeAnyoneStakes() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        deploy(faultConfig(FEDAVG));
        deployGames();
        bytes32 root0 = vectorRoot(r.prev);
        bytes32 ph = paramsHashOf(r);
        assertEq(task.faultGames(), address(0), "PBFT only by default");
        // owner only
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(Ownable.OwnableUnauthorizedAccount.selector, stranger));
        task.setFaultGames(address(games), root0, ph);
        // never the zero address
        vm.prank(owner);
        vm.expectRevert(FedChainTaskStorage.NoFaultGames.selector);
        task.setFaultGames(address(0), root0, ph);
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.FaultGamesSet(address(games), root0, ph);
        vm.prank(owner);
        task.setFaultGames(address(games), root0, ph);
        assertEq(task.faultGames(), address(games), "bound");
        assertEq(task.stateRoot(0), root0, "initial state root");
        // only once
        vm.prank(owner);
        vm.expectRevert(FedChainTaskStorage.FaultGamesFixed.selector);
        task.setFaultGames(address(0xBEEF), root0, ph);
    }

    function test_setFaultGames_refusedOnceAMemberStaked() public {
        deploy(faultConfig(FEDAVG));
        deployGames();
        registerCommittee(1);
        vm.prank(owner);
        vm.expectRevert(FedChainTaskStorage.FaultGamesFixed.selector);
        task.setFaultGames(address(games), bytes32(uint256(1)), bytes32(0));
        assertEq(task.faultGames(), address(0), "still PBFT only");
    }

    // -- submitAggregate / submitAggregateWithClaim ----------------------------------------

    function test_submitAggregate_requiresAClaim() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        vm.prank(chosen);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimRequired.selector, 1));
        task.submitAggregate{value: BOND}(1, aggregateDigest(1, 0), false);
        (r);
    }

    function test_submitAggregateWithClaim_refusedOnAPbftTask() public {
        setUpTask(4, 2);
        submitUpdates(1, 2);
        closeCollection(1);
        address chosen = chosenNow();
        vm.prank(chosen);
        vm.expectRevert(FedChainTaskStorage.NoFaultGames.selector);
        task.submitAggregateWithClaim{value: BOND}(1, aggregateDigest(1, 0), 0);
    }

    function test_submitAggregateWithClaim_bindsTheGoodClaim() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        uint256 cid = postClaim(chosen, r, honestNext(r), WINDOW);
        (bool bound,) = task.claimOf(1, 0);
        assertFalse(bound, "nothing bound yet");
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.AggregateClaimed(1, 0, cid);
        _submit(chosen, 1, cid);
        uint256 claimId;
        (bound, claimId) = task.claimOf(1, 0);
        assertTrue(bound, "bound");
        assertEq(claimId, cid, "claim id");
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Submitted), "submitted");
    }

    function test_claimMismatch_1_otherSubmitter() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        address other = chosen == agg(0) ? agg(1) : agg(0);
        uint256 cid = postClaim(other, r, honestNext(r), WINDOW);
        _expectMismatch(chosen, cid, 1);
    }

    function test_claimMismatch_2_wrongPreviousRoot() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        FaultGames.ClaimParams memory p = claimParams(r, vectorRoot(honestNext(r)), WINDOW);
        p.prevRoot = vectorRoot(r.ups[0]);
        uint256 cid = postClaimParams(chosen, r, p);
        _expectMismatch(chosen, cid, 2);
    }

    /// @dev The records must be the round's registered list, in order, with the signed
    ///      digests, weights and U_i (accumulator) and the same count.
    function test_claimMismatch_3_recordsOtherThanRegistered() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        int256[] memory next = honestNext(r);
        // one update left out (count 3 of 4)
        RoundData memory fewer = makeRound(FEDAVG, 1, 1);
        fewer.ups = _first(fewer.ups, K - 1);
        fewer.roots = _firstB(fewer.roots, K - 1);
        fewer.weights = _firstU(fewer.weights, K - 1);
        fewer.clients = _firstA(fewer.clients, K - 1);
        fewer.digests = _firstB(fewer.digests, K - 1);
        _expectMismatch(chosen, postClaim(chosen, fewer, next, WINDOW), 3);
        // a weight changed
        RoundData memory q = makeRound(FEDAVG, 1, 1);
        q.weights[2] += 1;
        _expectMismatch(chosen, postClaim(chosen, q, next, WINDOW), 3);
        // a U_i changed
        q = makeRound(FEDAVG, 1, 1);
        q.roots[1] = q.roots[0];
        _expectMismatch(chosen, postClaim(chosen, q, next, WINDOW), 3);
        // a digest changed
        q = makeRound(FEDAVG, 1, 1);
        q.digests[3] = keccak256("another update");
        _expectMismatch(chosen, postClaim(chosen, q, next, WINDOW), 3);
        // another signer named
        q = makeRound(FEDAVG, 1, 1);
        q.clients[0] = stranger;
        _expectMismatch(chosen, postClaim(chosen, q, next, WINDOW), 3);
        // two records swapped
        q = makeRound(FEDAVG, 1, 1);
        (q.roots[0], q.roots[1]) = (q.roots[1], q.roots[0]);
        (q.weights[0], q.weights[1]) = (q.weights[1], q.weights[0]);
        (q.clients[0], q.clients[1]) = (q.clients[1], q.clients[0]);
        (q.digests[0], q.digests[1]) = (q.digests[1], q.digests[0]);
        _expectMismatch(chosen, postClaim(chosen, q, next, WINDOW), 3);
        // the right list binds
        _submit(chosen, 1, postClaim(chosen, r, next, WINDOW));
    }

    /// @dev The claim's window must reach the challenge deadline: challengeWindow - 1 is
    ///      refused, challengeWindow binds.
    function test_claimMismatch_4_windowTooShort() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        uint64 cw = uint64(defaultConfig().challengeWindow);
        _expectMismatch(chosen, postClaim(chosen, r, honestNext(r), cw - 1), 4);
        uint256 cid = postClaim(chosen, r, honestNext(r), cw);
        _submit(chosen, 1, cid);
        (, uint256 bound) = task.claimOf(1, 0);
        assertEq(bound, cid, "the edge binds");
    }

    function test_claimMismatch_5_refutedClaim() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(chosen, r, next, WINDOW);
        _refute(r, next, cid);
        _expectMismatch(chosen, cid, 5);
    }

    function test_claimMismatch_6_otherRule() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        RoundData memory m = makeRound(MEDIAN, 1, 1); // same records, the median rule
        _expectMismatch(chosen, postClaim(chosen, m, honestNext(m), WINDOW), 6);
        (r);
    }

    /// @dev The claim is replayed under the task's own step parameters (setFaultGames'
    ///      paramsHash): another beta, dimension or value bound is refused; the task's binds.
    function test_claimMismatch_7_otherStepParameters() public {
        RoundData memory r = _setUpRound(TRIMMED_MEAN);
        address chosen = chosenNow();
        bytes32 newRoot = vectorRoot(honestNext(r));
        FaultGames.ClaimParams memory p = claimParams(r, newRoot, WINDOW);
        p.betaNum = 1;
        p.betaDen = 3; // beta 1/3 instead of the task's 1/4
        _expectMismatch(chosen, postClaimParams(chosen, r, p), 7);
        p = claimParams(r, newRoot, WINDOW);
        p.valueBound = VALUE_BOUND + 1;
        _expectMismatch(chosen, postClaimParams(chosen, r, p), 7);
        p = claimParams(r, newRoot, WINDOW);
        p.dim = D + 1;
        _expectMismatch(chosen, postClaimParams(chosen, r, p), 7);
        uint256 cid = postClaimParams(chosen, r, claimParams(r, newRoot, WINDOW));
        _submit(chosen, 1, cid);
        (, uint256 bound) = task.claimOf(1, 0);
        assertEq(bound, cid, "the task's parameters bind");
    }

    /// @dev The claim declares not included exactly the updates outside the task's included
    ///      set (f + 1 attestations): here n - f members attest updates 0..2 only, so update 3
    ///      is not included. Declaring nothing, or one update more, is refused; the exact set
    ///      (update 3, excluded) binds.
    function test_claimMismatch_8_unincludedSetOtherThanTheTasks() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        setUpFaultTask(r);
        uint256[] memory bits = new uint256[](1);
        bits[0] = 0x7;
        registerRoundAttesting(1, r, bits);
        assertEq(task.includedUpdates(1)[0], 0x7, "updates 0..2 included");
        address chosen = chosenNow();
        exclude(r, 3);
        FaultGames.ClaimParams memory p = claimParams(r, vectorRoot(honestNext(r)), WINDOW);
        _expectMismatch(chosen, postClaimDeclaring(chosen, r, p, unincludedNone(r)), 8);
        exclude(r, 2);
        FaultGames.ClaimParams memory p2 = claimParams(r, vectorRoot(honestNext(r)), WINDOW);
        uint256[] memory two = new uint256[](1);
        two[0] = 0xC; // updates 2 and 3: update 2 was included
        _expectMismatch(chosen, postClaimDeclaring(chosen, r, p2, two), 8);
        r.excluded[0] = 0x8;
        uint256[] memory exact = new uint256[](1);
        exact[0] = 0x8;
        uint256 cid = postClaimDeclaring(chosen, r, p, exact);
        _submit(chosen, 1, cid);
        (, uint256 bound) = task.claimOf(1, 0);
        assertEq(bound, cid, "the task's not-included set binds");
    }

    /// @dev A task that names no task-level rule (ruleId zero) skips the rule-name check
    ///      (ClaimMismatch 6): the step parameters it binds (paramsHash, here the median's)
    ///      decide the rule.
    function test_claimRule_unchecked_whenTheTaskNamesNone() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        RoundData memory m = makeRound(MEDIAN, 1, 1);
        FedChainTaskStorage.TaskConfig memory cfg = faultConfig(FEDAVG);
        cfg.ruleId = bytes32(0);
        deploy(cfg);
        deployGames();
        vm.prank(owner);
        task.setFaultGames(address(games), vectorRoot(r.prev), paramsHashOf(m));
        registerCommittee(4);
        registerClients(K);
        startTask();
        registerRound(1, r);
        address chosen = chosenNow();
        uint256 cid = postClaim(chosen, m, honestNext(m), WINDOW);
        _submit(chosen, 1, cid);
        (, uint256 bound) = task.claimOf(1, 0);
        assertEq(bound, cid, "bound under the median");
    }

    // -- finalize --------------------------------------------------------------------------

    /// @dev finalize waits for the claim (window and games), then stores its new root; the
    ///      next round's claim must start from it.
    function test_finalize_waitsForTheClaimAndStoresTheStateRoot() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        int256[] memory next = honestNext(r);
        uint256 cid = postClaim(chosen, r, next, WINDOW);
        _submit(chosen, 1, cid);
        uint256 submitBlock = block.number;
        uint256 windowEnd = games.claim(cid).windowEnd;
        vm.roll(submitBlock + defaultConfig().challengeWindow + 1);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimUnsettled.selector, 1, cid));
        task.finalize(1);
        // a frivolous game, still open when the window closes
        uint256 gid = openLeaf(refuter, cid, 2);
        revealLeaf(gid, next, 2);
        vm.roll(windowEnd + 1);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimUnsettled.selector, 1, cid));
        task.finalize(1);
        games.timeout(gid);
        bytes32 newRoot = vectorRoot(next);
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.RoundFinalized(1, aggregateDigest(1, 0), chosen);
        task.finalize(1);
        assertEq(task.stateRoot(1), newRoot, "state root stored");
        assertEq(task.credits(chosen), BOND, "aggregate bond back");

        // round 2 starts from the finalized state: a claim from the old state is refused
        RoundData memory r2 = withPrev(makeRound(FEDAVG, 2, 2), next, 2);
        registerRound(2, r2);
        address chosen2 = chosenNow();
        RoundData memory stale = withPrev(makeRound(FEDAVG, 2, 2), r.prev, 2);
        _expectMismatchIn(2, chosen2, postClaim(chosen2, stale, honestNext(stale), WINDOW), 2);
        uint256 cid2 = postClaim(chosen2, r2, honestNext(r2), WINDOW);
        _submit(chosen2, 2, cid2);
        vm.roll(games.claim(cid2).windowEnd + 1);
        task.finalize(2);
        assertEq(task.stateRoot(2), vectorRoot(honestNext(r2)), "round 2's root");
    }

    /// @dev The claim's window is the bar, not the challenge window: windowEnd refused,
    ///      windowEnd + 1 finalizes.
    function test_finalize_atTheClaimWindowEdge() public {
        RoundData memory r = _setUpRound(MEDIAN);
        address chosen = chosenNow();
        uint256 cid = postClaim(chosen, r, honestNext(r), WINDOW);
        _submit(chosen, 1, cid);
        uint256 windowEnd = games.claim(cid).windowEnd;
        vm.roll(windowEnd);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimUnsettled.selector, 1, cid));
        task.finalize(1);
        vm.roll(windowEnd + 1);
        task.finalize(1);
        assertEq(task.stateRoot(1), vectorRoot(honestNext(r)), "stored");
    }

    function test_finalize_refusesARefutedAggregate() public {
        RoundData memory r = _setUpRound(TRIMMED_MEAN);
        address chosen = chosenNow();
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(chosen, r, next, WINDOW);
        _submit(chosen, 1, cid);
        _refute(r, next, cid);
        vm.roll(block.number + defaultConfig().challengeWindow + 1);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AggregateRefuted.selector, 1, cid));
        task.finalize(1);
        vm.roll(games.claim(cid).windowEnd + 1);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.AggregateRefuted.selector, 1, cid));
        task.finalize(1);
        assertEq(task.stateRoot(1), bytes32(0), "nothing stored");
    }

    /// @dev A skipped round carries the state root forward; the next claim starts from it.
    function test_skipRound_carriesTheStateRootForward() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        setUpFaultTask(r);
        bytes32 root0 = vectorRoot(r.prev);
        vm.prank(r.clients[0]);
        task.submitUpdate(1, r.digests[0], uint64(r.weights[0]), r.roots[0]); // below minUpdates
        FedChainTaskStorage.TaskConfig memory cfg = faultConfig(FEDAVG);
        vm.roll(task.getRound(1).openBlock + cfg.collectWindow + cfg.collectTimeout + 1);
        task.skipRound(1);
        assertEq(task.stateRoot(1), root0, "carried forward");
        RoundData memory r2 = withPrev(makeRound(FEDAVG, 2, 2), r.prev, 2);
        registerRound(2, r2);
        address chosen = chosenNow();
        uint256 cid = postClaim(chosen, r2, honestNext(r2), WINDOW);
        vm.prank(chosen);
        task.submitAggregateWithClaim{value: BOND}(2, aggregateDigest(2, 0), cid);
        (, uint256 bound) = task.claimOf(2, 0);
        assertEq(bound, cid, "round 2's claim starts from the carried root");
    }

    function test_rejectRefuted_refusedOnAPbftTask() public {
        setUpTask(4, 2);
        reachSubmitted(1, honestDigest(1));
        vm.expectRevert(FedChainTaskStorage.NoFaultGames.selector);
        task.rejectRefuted(1);
    }

    // -- rejectRefuted ---------------------------------------------------------------------

    function test_rejectRefuted_burnsTheWholeStakeAndReopens() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(chosen, r, next, WINDOW);
        _submit(chosen, 1, cid);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimNotRefuted.selector, 1, cid));
        task.rejectRefuted(1);
        _refute(r, next, cid);
        uint256 burned = task.credits(BURN);
        vm.expectEmit(true, false, false, true, address(task));
        emit FedChainTaskStorage.Slashed(chosen, STAKE + BOND);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.RefutedAggregateRejected(1, 0, cid, stranger, STAKE + BOND, 0, STAKE + BOND);
        vm.prank(stranger);
        task.rejectRefuted(1);
        assertEq(task.credits(stranger), 0, "the caller gains nothing");
        assertEq(task.credits(chosen), 0, "the submitter keeps nothing");
        assertEq(task.credits(BURN), burned + STAKE + BOND, "stake + bond burned");
        assertEq(stakeOf(chosen), 0, "stake gone");
        (,, bool slashed,,,) = task.aggregatorInfo(chosen);
        assertTrue(slashed, "slashed");
        FedChainTaskStorage.RoundInfo memory info = task.getRound(1);
        assertEq(info.attempt, 1, "attempt + 1");
        assertEq(uint256(info.phase), uint256(FedChainTaskStorage.Phase.Aggregating), "reopened");
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.NoAggregateSubmitted.selector, 1));
        task.rejectRefuted(1);
        // the refuter is paid by FaultGames
        assertEq(games.credits(refuter), GAME_BOND + CLAIM_BOND, "refuter paid by the games");

        // the next member submits the honest claim at attempt 1 and it finalizes
        address next1 = chosenNow();
        assertTrue(next1 != chosen, "the rotation skips the slashed submitter");
        uint256 cid2 = postClaim(next1, r, honestNext(r), WINDOW);
        vm.prank(next1);
        task.submitAggregateWithClaim{value: BOND}(1, aggregateDigest(1, 1), cid2);
        (, uint256 bound) = task.claimOf(1, 1);
        assertEq(bound, cid2, "bound at attempt 1");
        vm.roll(games.claim(cid2).windowEnd + 1);
        task.finalize(1);
        assertEq(task.stateRoot(1), vectorRoot(honestNext(r)), "honest root");
    }

    /// @dev The slashed submitter rejecting its own refuted aggregate recovers nothing.
    function test_rejectRefuted_bySubmitter_recoversNothing() public {
        RoundData memory r = _setUpRound(MEDIAN);
        address chosen = chosenNow();
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(chosen, r, next, WINDOW);
        _submit(chosen, 1, cid);
        _refute(r, next, cid);
        vm.prank(chosen);
        task.rejectRefuted(1);
        assertEq(task.credits(chosen), 0, "nothing back");
        assertEq(games.credits(chosen), 0, "claim bond lost");
    }

    /// @dev A PBFT challenge open on the refuted aggregate was right: its bond comes back.
    function test_rejectRefuted_refundsAnOpenPbftChallenger() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(chosen, r, next, WINDOW);
        _submit(chosen, 1, cid);
        address challenger = chosen == agg(0) ? agg(1) : agg(0);
        vm.prank(challenger);
        task.challenge{value: CHALLENGE_BOND}(1);
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Disputed), "disputed");
        _refute(r, next, cid);
        uint256 burned = task.credits(BURN);
        task.rejectRefuted(1);
        assertEq(task.credits(challenger), CHALLENGE_BOND, "challenge bond back");
        assertEq(task.credits(BURN), burned + STAKE + BOND, "stake + bond burned");
        FedChainTaskStorage.RoundInfo memory info = task.getRound(1);
        assertEq(info.challenger, address(0), "dispute cleared");
        assertEq(info.attempt, 1, "attempt + 1");
    }

    // -- slashRefutedCertificate -----------------------------------------------------------

    /// @dev A "not faulty" certificate on an aggregate whose claim is then refuted: every
    ///      signer is slashed once (the already slashed submitter is skipped), all burned, the
    ///      caller (a signer) gains nothing; a second report is CertificateAlreadySlashed.
    function test_slashRefutedCertificate_slashesEachSignerOnce() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(chosen, r, next, WINDOW);
        bytes32 digest = aggregateDigest(1, 0);
        _submit(chosen, 1, cid);
        address challenger = chosen == agg(0) ? agg(1) : agg(0);
        vm.prank(challenger);
        task.challenge{value: CHALLENGE_BOND}(1);
        uint256[] memory all = new uint256[](4);
        for (uint256 i = 0; i < 4; ++i) {
            all[i] = i;
        }
        bytes[] memory sigs = certificate(1, 0, digest, false, 7, all);
        // the committee (all four, the submitter too) upholds the faulty aggregate
        task.resolveDispute(1, 0, false, 7, sigs);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimNotRefuted.selector, 1, cid));
        task.slashRefutedCertificate(1, 0, digest, 7, sigs);

        _refute(r, next, cid);
        task.rejectRefuted(1); // the submitter is slashed here
        uint256 burned = task.credits(BURN);
        vm.expectEmit(true, true, false, true, address(task));
        emit FedChainTaskStorage.RefutedCertificateSlashed(1, 0, cid, 7, challenger, 3, 0, 3 * STAKE);
        vm.prank(challenger);
        task.slashRefutedCertificate(1, 0, digest, 7, sigs);
        for (uint256 i = 0; i < 4; ++i) {
            assertEq(stakeOf(agg(i)), 0, "every signer's stake");
            (,, bool slashed,,,) = task.aggregatorInfo(agg(i));
            assertTrue(slashed, "every signer slashed");
        }
        assertEq(task.credits(BURN), burned + 3 * STAKE, "three stakes burned (the submitter's once)");
        assertEq(task.credits(challenger), 0, "the reporting signer gains nothing");
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.CertificateAlreadySlashed.selector, 1, 0));
        task.slashRefutedCertificate(1, 0, digest, 7, sigs);
    }

    function test_slashRefutedCertificate_needsABoundClaimAndItsDigest() public {
        RoundData memory r = _setUpRound(FEDAVG);
        address chosen = chosenNow();
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(chosen, r, next, WINDOW);
        bytes32 digest = aggregateDigest(1, 0);
        _submit(chosen, 1, cid);
        _refute(r, next, cid);
        uint256[] memory three = membersExcept(4, chosen, 3);
        bytes32 other = keccak256("another aggregate");
        bytes[] memory sigs = certificate(1, 0, other, false, 0, three);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimNotBound.selector, 1, 0));
        task.slashRefutedCertificate(1, 0, other, 0, sigs);
        sigs = certificate(1, 1, digest, false, 0, three);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimNotBound.selector, 1, 1));
        task.slashRefutedCertificate(1, 1, digest, 0, sigs);
        // the right certificate: the three signers lose their stakes
        sigs = certificate(1, 0, digest, false, 0, three);
        task.slashRefutedCertificate(1, 0, digest, 0, sigs);
        for (uint256 i = 0; i < 3; ++i) {
            assertEq(stakeOf(agg(three[i])), 0, "signer slashed");
        }
        assertEq(stakeOf(chosen), STAKE, "the submitter did not sign (rejectRefuted slashes it)");
    }

    // -- helpers ---------------------------------------------------------------------------

    /// @dev A fault-proof task under `rule`, round 1's K updates registered, collection closed.
    function _setUpRound(uint8 rule) private returns (RoundData memory r) {
        r = makeRound(rule, 1, 1);
        setUpFaultTask(r);
        registerRound(1, r);
    }

    function _submit(address who, uint256 round, uint256 cid) private {
        vm.prank(who);
        task.submitAggregateWithClaim{value: BOND}(round, aggregateDigest(round, 0), cid);
    }

    function _expectMismatch(address who, uint256 cid, uint8 reason) private {
        _expectMismatchIn(1, who, cid, reason);
    }

    function _expectMismatchIn(uint256 round, address who, uint256 cid, uint8 reason) private {
        vm.prank(who);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimMismatch.selector, cid, reason));
        task.submitAggregateWithClaim{value: BOND}(round, aggregateDigest(round, 0), cid);
    }

    /// @dev `refuter` refutes the faulty claim with the one-step proof of FAULT_CHUNK.
    function _refute(RoundData memory r, int256[] memory next, uint256 cid) private {
        uint256 gid = openLeaf(refuter, cid, FAULT_CHUNK);
        revealLeaf(gid, next, FAULT_CHUNK);
        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        vm.prank(refuter);
        games.prove(gid, s);
        assertTrue(games.refuted(cid), "refuted");
    }

    function _first(int256[][] memory a, uint256 n) private pure returns (int256[][] memory b) {
        b = new int256[][](n);
        for (uint256 i = 0; i < n; ++i) {
            b[i] = a[i];
        }
    }

    function _firstB(bytes32[] memory a, uint256 n) private pure returns (bytes32[] memory b) {
        b = new bytes32[](n);
        for (uint256 i = 0; i < n; ++i) {
            b[i] = a[i];
        }
    }

    function _firstU(uint256[] memory a, uint256 n) private pure returns (uint256[] memory b) {
        b = new uint256[](n);
        for (uint256 i = 0; i < n; ++i) {
            b[i] = a[i];
        }
    }

    function _firstA(address[] memory a, uint256 n) private pure returns (address[] memory b) {
        b = new address[](n);
        for (uint256 i = 0; i < n; ++i) {
            b[i] = a[i];
        }
    }
}
