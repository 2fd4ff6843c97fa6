// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {FaultProofFixture} from "./utils/FaultProofFixture.sol";
import {FaultGames} from "../FaultGames.sol";
import {OneStep} from "../OneStep.sol";
import {OneStepMath} from "../lib/OneStepMath.sol";

/// @title FaultGamesTest
/// @notice FaultGames' leaf games on real chunk trees (issue 22): windows and chess clocks at
///         -1/0/+1 blocks, a false leaf challenge that cannot prove and loses its bond, an
///         honest one that refutes under each rule, forged inputs, several games on one claim,
///         bonds and pull payments.
contract FaultGamesTest is FaultProofFixture {
    address internal submitter = address(0x5B);
    address internal alice = address(0xA11CE);
    address internal bob = address(0xB0B);
    address internal carol = address(0xCA401);

    function setUp() public {
        vm.roll(1_000);
        deployGames();
    }

    // -- claims ----------------------------------------------------------------------------

    function test_postClaim_keepsItsParametersAndEmits() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        int256[] memory next = honestNext(r);
        bytes32 newRoot = vectorRoot(next);
        vm.expectEmit(true, true, false, true, address(games));
        emit FaultGames.ClaimPosted(0, submitter, newRoot, CLAIM_BOND);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        FaultGames.Claim memory c = games.claim(cid);
        assertEq(c.submitter, submitter, "submitter");
        assertEq(c.windowEnd, block.number + WINDOW, "windowEnd");
        assertEq(c.newRoot, newRoot, "newRoot");
        assertEq(c.prevRoot, vectorRoot(r.prev), "prevRoot");
        assertEq(c.bond, CLAIM_BOND, "bond");
        assertEq(c.numRecords, K, "records");
        assertEq(address(games).balance, CLAIM_BOND, "bond held");
        assertFalse(games.settled(cid), "settled inside its window");
    }

    function test_postClaim_refusesMalformedAndUnprovableClaims() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        FaultGames.ClaimParams memory p = claimParams(r, vectorRoot(honestNext(r)), WINDOW);
        FaultGames.Records memory rec = recordsOf(r);
        FaultGames.Signers memory s = signersOf(r);
        rec.weights = new uint256[](K - 1);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadClaim.selector, K, K - 1));
        games.postClaim(p, rec, s, unincludedNone(r));
        rec = recordsOf(r);
        rec.excluded = new uint256[](0);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadClaim.selector, K, K));
        games.postClaim(p, rec, s, unincludedNone(r));
        rec = recordsOf(r);
        p.rule = 4;
        vm.expectRevert(abi.encodeWithSelector(FaultGames.UnprovableClaim.selector, 0));
        games.postClaim(p, rec, s, unincludedNone(r));
        p.rule = TRIMMED_MEAN;
        p.betaNum = 1;
        p.betaDen = 2; // beta = 1/2 would trim everything
        vm.expectRevert(abi.encodeWithSelector(FaultGames.UnprovableClaim.selector, 1));
        games.postClaim(p, rec, s, unincludedNone(r));
        p.rule = FEDAVG;
        uint256[] memory heavy = new uint256[](K);
        heavy[2] = uint256(type(uint64).max) + 1;
        rec.weights = heavy;
        vm.expectRevert(abi.encodeWithSelector(FaultGames.UnprovableClaim.selector, 3));
        games.postClaim(p, rec, s, unincludedNone(r));
        // a claim's bond is at least the challenge bond (it pays the refuter's moves)
        rec = recordsOf(r);
        vm.deal(submitter, GAME_BOND);
        vm.prank(submitter);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.WrongBond.selector, GAME_BOND - 1, GAME_BOND));
        games.postClaim{value: GAME_BOND - 1}(p, rec, s, unincludedNone(r));
        vm.prank(submitter);
        games.postClaim{value: GAME_BOND}(p, rec, s, unincludedNone(r));
    }

    // -- windows ---------------------------------------------------------------------------

    /// @dev Games open up to windowEnd inclusive: windowEnd - 1 and windowEnd open, +1 refused.
    function test_openLeaf_windowEdges() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        uint256 cid = postClaim(submitter, r, honestNext(r), WINDOW);
        uint256 end = games.claim(cid).windowEnd;
        vm.roll(end - 1);
        openLeaf(alice, cid, 0);
        vm.roll(end);
        openLeaf(bob, cid, 1);
        vm.roll(end + 1);
        vm.deal(carol, GAME_BOND);
        vm.prank(carol);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.WindowClosed.selector, cid, end));
        games.openLeaf{value: GAME_BOND}(cid, 2);
        assertEq(games.claim(cid).openGames, 2, "open games");
    }

    /// @dev settled / release: not before windowEnd + 1, never while a game is open.
    function test_release_onlyAfterTheWindowWithNoGameOpen() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        int256[] memory next = honestNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 end = games.claim(cid).windowEnd;
        uint256 gid = openLeaf(alice, cid, 2);
        revealLeaf(gid, next, 2);
        vm.roll(end);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotReleasable.selector, cid));
        games.release(cid);
        vm.roll(end + 1);
        assertFalse(games.settled(cid), "a game is open");
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotReleasable.selector, cid));
        games.release(cid);
        games.timeout(gid); // alice's clock ran out long ago; the game is open until then
        assertTrue(games.settled(cid), "settled");
        vm.expectEmit(true, false, false, true, address(games));
        emit FaultGames.ClaimReleased(cid);
        games.release(cid);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotReleasable.selector, cid));
        games.release(cid);
        assertEq(games.credits(submitter), CLAIM_BOND + GAME_BOND, "bond and the lost challenge");
    }

    // -- chess clocks ----------------------------------------------------------------------

    /// @dev The submitter's move lands while elapsed <= budget (-1, 0: clock left 1, 0);
    ///      timeout only once elapsed > budget (+1).
    function test_submitterClock_edges() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        int256[] memory next = honestNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        for (uint256 off = 0; off < 2; ++off) {
            uint256 gid = openLeaf(alice, cid, off);
            uint256 start = games.game(gid).turnStart;
            vm.roll(start + CLOCK - 1 + off);
            vm.expectRevert(abi.encodeWithSelector(FaultGames.ClockRunning.selector, gid, CLOCK - 1 + off, CLOCK));
            games.timeout(gid);
            revealLeaf(gid, next, off);
            assertEq(games.game(gid).submitterClock, 1 - off, "submitter's clock left");
        }
        uint256 late = openLeaf(bob, cid, 2);
        vm.roll(games.game(late).turnStart + CLOCK + 1);
        bytes32 leaf = leafOf(next, 2);
        bytes32[] memory proof = proofOf(next, 2);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.ClockExpired.selector, late, CLOCK + 1, CLOCK));
        games.revealLeaf(late, leaf, proof);
        vm.expectEmit(true, false, false, true, address(games));
        emit FaultGames.GameResolved(late, true);
        vm.expectEmit(true, true, false, true, address(games));
        emit FaultGames.ClaimRefuted(cid, bob, late, false);
        games.timeout(late);
        assertTrue(games.refuted(cid), "a silent submitter loses the claim");
        assertFalse(games.refutedByProof(cid), "a timeout proves nothing about the aggregate");
        assertEq(games.credits(bob), GAME_BOND + CLAIM_BOND, "bob: bond back + claim bond");
    }

    /// @dev The challenger's clock: before its budget ClockRunning, after it the submitter
    ///      wins and a late prove is ClockExpired.
    function test_challengerClock_edges() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        int256[] memory next = honestNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 gid = openLeaf(alice, cid, 0);
        vm.roll(block.number + 2); // the submitter spends 2 of its blocks
        revealLeaf(gid, next, 0);
        FaultGames.Game memory g = games.game(gid);
        assertEq(uint256(g.turn), uint256(FaultGames.Turn.Challenger), "challenger to move");
        assertEq(g.submitterClock, CLOCK - 2, "submitter's clock charged");
        vm.roll(g.turnStart + CLOCK);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.ClockRunning.selector, gid, CLOCK, CLOCK));
        games.timeout(gid);
        vm.roll(g.turnStart + CLOCK + 1);
        OneStep.Step memory s = stepFor(r, 0);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.ClockExpired.selector, gid, CLOCK + 1, CLOCK));
        games.prove(gid, s);
        games.timeout(gid);
        assertEq(games.credits(submitter), GAME_BOND, "the submitter takes the lost bond");
        assertFalse(games.refuted(cid), "claim stands");
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotYourMove.selector, gid, address(this)));
        games.timeout(gid);
    }

    // -- leaf games ------------------------------------------------------------------------

    /// @dev A false leaf challenge on an honest claim: prove reverts ChunkCorrect (every
    ///      chunk, every rule), the challenger can only let its clock run out and lose its bond.
    function test_falseLeafChallenge_cannotProve_losesItsBond() public {
        for (uint8 rule = FEDAVG; rule <= TRIMMED_MEAN; ++rule) {
            RoundData memory r = makeRound(rule, 10 + rule, 1);
            int256[] memory next = honestNext(r);
            uint256 cid = postClaim(submitter, r, next, WINDOW);
            for (uint256 j = 0; j < 3; ++j) {
                uint256 gid = openLeaf(alice, cid, j);
                revealLeaf(gid, next, j);
                OneStep.Step memory s = stepFor(r, j);
                vm.prank(alice);
                vm.expectRevert(abi.encodeWithSelector(FaultGames.ChunkCorrect.selector, gid, j));
                games.prove(gid, s);
            }
        }
        vm.roll(block.number + CLOCK + 1);
        for (uint256 gid = 0; gid < 12; ++gid) {
            vm.expectEmit(true, false, false, true, address(games));
            emit FaultGames.GameResolved(gid, false);
            games.timeout(gid);
        }
        assertEq(games.credits(submitter), 12 * GAME_BOND, "every false challenge's bond");
        assertEq(games.credits(alice), 0, "alice gets nothing back");
    }

    function test_honestLeafChallenge_refutes_fedavg() public {
        _honestChallengeRefutes(FEDAVG);
    }

    function test_honestLeafChallenge_refutes_fedprox() public {
        _honestChallengeRefutes(FEDPROX);
    }

    function test_honestLeafChallenge_refutes_median() public {
        _honestChallengeRefutes(MEDIAN);
    }

    function test_honestLeafChallenge_refutes_trimmedMean() public {
        _honestChallengeRefutes(TRIMMED_MEAN);
    }

    function _honestChallengeRefutes(uint8 rule) private {
        RoundData memory r = makeRound(rule, 20 + rule, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 gid = openLeaf(alice, cid, FAULT_CHUNK);
        revealLeaf(gid, next, FAULT_CHUNK);
        bytes memory right = chunkOf(honestNext(r), FAULT_CHUNK);
        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        vm.expectEmit(true, false, false, true, address(games));
        emit FaultGames.StepProven(gid, FAULT_CHUNK, keccak256(abi.encodePacked(bytes1(0), right)), right);
        vm.expectEmit(true, true, false, true, address(games));
        emit FaultGames.ClaimRefuted(cid, alice, gid, true);
        vm.prank(alice);
        games.prove(gid, s);
        assertTrue(games.refuted(cid), "refuted");
        assertTrue(games.refutedByProof(cid), "refuted by proof");
        assertTrue(games.settled(cid), "a refuted claim is settled");
        assertEq(games.credits(alice), GAME_BOND + CLAIM_BOND, "bond back + the claim's bond");
        assertEq(games.claim(cid).openGames, 0, "no game open");
        // a refuted claim takes no more games and no more moves
        vm.deal(bob, GAME_BOND);
        vm.prank(bob);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.ClaimClosed.selector, cid));
        games.openLeaf{value: GAME_BOND}(cid, 0);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotReleasable.selector, cid));
        games.release(cid);
    }

    /// @dev A faulty chunk is still correct elsewhere: a challenge on another chunk of the
    ///      faulty claim cannot prove either.
    function test_faultyClaim_correctChunkCannotBeProven() public {
        RoundData memory r = makeRound(MEDIAN, 3, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 gid = openLeaf(alice, cid, 0);
        revealLeaf(gid, next, 0);
        OneStep.Step memory s = stepFor(r, 0);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.ChunkCorrect.selector, gid, 0));
        games.prove(gid, s);
    }

    // -- forged inputs ---------------------------------------------------------------------

    function test_revealLeaf_refusesForgedPaths() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 gid = openLeaf(alice, cid, 1);
        bytes32[] memory proof = proofOf(next, 1);
        bytes32 leaf = leafOf(next, 1);
        // a sibling changed
        proof[0] = bytes32(uint256(proof[0]) ^ 1);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadLeafProof.selector, gid, 1));
        games.revealLeaf(gid, leaf, proof);
        // leaf 0 with its own (valid) path: not leaf 1
        bytes32 leaf0 = leafOf(next, 0);
        bytes32[] memory proof0 = proofOf(next, 0);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadLeafProof.selector, gid, 1));
        games.revealLeaf(gid, leaf0, proof0);
        // the honest leaf (what the step would compute): not what the claim committed to
        bytes32 honestLeaf = leafOf(honestNext(r), 1);
        bytes32[] memory proof1 = proofOf(next, 1);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadLeafProof.selector, gid, 1));
        games.revealLeaf(gid, honestLeaf, proof1);
        // a path one level short
        bytes32[] memory short = new bytes32[](1);
        short[0] = proof1[0];
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadLeafProof.selector, gid, 1));
        games.revealLeaf(gid, leaf, short);
        // the challenger cannot move first
        OneStep.Step memory s = stepFor(r, 1);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotYourMove.selector, gid, alice));
        games.prove(gid, s);
    }

    /// @dev A step that does not replay the claim (other rule, dim, beta, chunk, previous root,
    ///      inputs) is StepMismatch; openings that do not verify are OneStep's errors.
    function test_prove_refusesForgedSteps() public {
        RoundData memory r = makeRound(FEDAVG, 2, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 gid = openLeaf(alice, cid, FAULT_CHUNK);
        revealLeaf(gid, next, FAULT_CHUNK);
        vm.startPrank(alice);

        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        s.rule = FEDPROX;
        _expectMismatch(gid, s);
        s = stepFor(r, FAULT_CHUNK);
        s.j = 0;
        _expectMismatch(gid, s);
        s = stepFor(r, FAULT_CHUNK);
        s.dim = D + 1;
        _expectMismatch(gid, s);
        s = stepFor(r, FAULT_CHUNK);
        s.betaDen = 4;
        _expectMismatch(gid, s);
        // wrong previous root (a state other than the claim's)
        s = stepFor(r, FAULT_CHUNK);
        s.prevRoot = vectorRoot(next);
        _expectMismatch(gid, s);
        // inputs other than the claim's: one update dropped, a weight changed
        RoundData memory fewer = makeRound(FEDAVG, 2, 1);
        fewer.excluded[0] = 1 << 3;
        s = stepFor(fewer, FAULT_CHUNK);
        _expectMismatch(gid, s);
        s = stepFor(r, FAULT_CHUNK);
        s.weights[1] += 1;
        _expectMismatch(gid, s);

        // wrong previous chunk (chunk 0 of the previous state) under the right root
        s = stepFor(r, FAULT_CHUNK);
        s.prevChunk = chunkOf(r.prev, 0);
        vm.expectRevert(abi.encodeWithSelector(OneStep.BadPrevProof.selector, FAULT_CHUNK));
        games.prove(gid, s);
        // wrong U_i opening: update 2's chunk replaced by a chunk with one lane changed
        s = stepFor(r, FAULT_CHUNK);
        int256[] memory other = new int256[](D);
        for (uint256 c = 0; c < D; ++c) {
            other[c] = r.ups[2][c];
        }
        other[FAULT_CHUNK * 256 + 5] += 1;
        s.chunks[2] = chunkOf(other, FAULT_CHUNK);
        vm.expectRevert(abi.encodeWithSelector(OneStep.BadInputProof.selector, 2, FAULT_CHUNK));
        games.prove(gid, s);
        // update 1's chunk and proof under update 0's root
        s = stepFor(r, FAULT_CHUNK);
        s.chunks[0] = s.chunks[1];
        s.proofs[0] = s.proofs[1];
        vm.expectRevert(abi.encodeWithSelector(OneStep.BadInputProof.selector, 0, FAULT_CHUNK));
        games.prove(gid, s);
        // a chunk-0 opening of update 3 offered for chunk 1
        s = stepFor(r, FAULT_CHUNK);
        s.chunks[3] = chunkOf(r.ups[3], 0);
        s.proofs[3] = proofOf(r.ups[3], 0);
        vm.expectRevert(abi.encodeWithSelector(OneStep.BadInputProof.selector, 3, FAULT_CHUNK));
        games.prove(gid, s);
        // one chunk missing
        s = stepFor(r, FAULT_CHUNK);
        bytes[] memory three = new bytes[](3);
        for (uint256 i = 0; i < 3; ++i) {
            three[i] = s.chunks[i];
        }
        s.chunks = three;
        vm.expectRevert(abi.encodeWithSelector(OneStep.InputCountMismatch.selector, 4, 4, 3, 4));
        games.prove(gid, s);
        vm.stopPrank();

        // none of it moved the game: the honest step still refutes
        s = stepFor(r, FAULT_CHUNK);
        vm.prank(alice);
        games.prove(gid, s);
        assertTrue(games.refuted(cid), "the honest step refutes");
    }

    function _expectMismatch(uint256 gid, OneStep.Step memory s) private {
        vm.expectRevert(abi.encodeWithSelector(FaultGames.StepMismatch.selector, gid));
        games.prove(gid, s);
    }

    /// @dev Median / trimmed mean: an order witness that is not an ascending permutation of
    ///      the inputs is refused (a forged witness cannot pick another median).
    function test_prove_refusesBadOrderWitnesses() public {
        _badWitnesses(MEDIAN);
        _badWitnesses(TRIMMED_MEAN);
    }

    function _badWitnesses(uint8 rule) private {
        RoundData memory r = makeRound(rule, 4, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 gid = openLeaf(alice, cid, FAULT_CHUNK);
        revealLeaf(gid, next, FAULT_CHUNK);
        vm.startPrank(alice);
        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        uint256 lane = 3;
        // lane 3's two lowest entries swapped: values decrease at sorted position 1
        // (makeRound's values are distinct with overwhelming probability; checked here)
        uint256 p = 2 * (lane * K);
        assertTrue(_value(r, s.witness, p) < _value(r, s.witness, p + 2), "distinct values");
        (s.witness[p], s.witness[p + 2]) = (s.witness[p + 2], s.witness[p]);
        (s.witness[p + 1], s.witness[p + 3]) = (s.witness[p + 3], s.witness[p + 1]);
        vm.expectRevert(abi.encodeWithSelector(OneStepMath.BadWitness.selector, lane, 1));
        games.prove(gid, s);
        // an index named twice (the lowest one again at position 1)
        s = stepFor(r, FAULT_CHUNK);
        s.witness[p + 2] = s.witness[p];
        s.witness[p + 3] = s.witness[p + 1];
        vm.expectRevert(abi.encodeWithSelector(OneStepMath.BadWitness.selector, lane, 1));
        games.prove(gid, s);
        // an index out of range at lane 0, position 0
        s = stepFor(r, FAULT_CHUNK);
        s.witness[0] = 0;
        s.witness[1] = bytes1(uint8(K));
        vm.expectRevert(abi.encodeWithSelector(OneStepMath.BadWitness.selector, 0, 0));
        games.prove(gid, s);
        // a witness one lane short
        s = stepFor(r, FAULT_CHUNK);
        bytes memory w = s.witness;
        uint256 full = w.length;
        assembly ("memory-safe") {
            mstore(w, sub(full, mul(2, 4)))
        }
        vm.expectRevert(abi.encodeWithSelector(OneStepMath.BadWitnessLength.selector, full - 2 * K, full));
        games.prove(gid, s);
        vm.stopPrank();
        s = stepFor(r, FAULT_CHUNK);
        vm.prank(alice);
        games.prove(gid, s);
        assertTrue(games.refuted(cid), "the true witness refutes");
    }

    function _value(RoundData memory r, bytes memory w, uint256 p) private pure returns (int256) {
        uint256 idx = (uint256(uint8(w[p])) << 8) | uint8(w[p + 1]);
        return r.ups[idx][FAULT_CHUNK * 256 + 3];
    }

    // -- several games on one claim --------------------------------------------------------

    /// @dev On a faulty claim: alice's frivolous game (chunk 0) times out before the
    ///      refutation (her bond goes to the submitter), carol refutes (chunk 1: her bond back
    ///      + the claim bond), bob's frivolous game (chunk 2) ends after the refutation (his
    ///      bond is refunded). Every wei is accounted for.
    function test_twoFrivolousAndOneHonestGame_onOneClaim() public {
        RoundData memory r = makeRound(TRIMMED_MEAN, 5, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 ga = openLeaf(alice, cid, 0);
        uint256 gb = openLeaf(bob, cid, 2);
        revealLeaf(ga, next, 0);
        revealLeaf(gb, next, 2);
        vm.roll(block.number + CLOCK + 1);
        games.timeout(ga); // alice did not (could not) prove chunk 0
        uint256 gc = openLeaf(carol, cid, FAULT_CHUNK);
        revealLeaf(gc, next, FAULT_CHUNK);
        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        vm.prank(carol);
        games.prove(gc, s);
        // bob's game: no move left for anyone, timeout refunds him
        s = stepFor(r, 2);
        vm.prank(bob);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.ClaimClosed.selector, cid));
        games.prove(gb, s);
        vm.expectEmit(true, false, false, true, address(games));
        emit FaultGames.GameResolved(gb, true);
        games.timeout(gb);
        assertEq(games.credits(submitter), GAME_BOND, "submitter: alice's lost bond only");
        assertEq(games.credits(alice), 0, "alice: nothing");
        assertEq(games.credits(bob), GAME_BOND, "bob: refunded");
        assertEq(games.credits(carol), GAME_BOND + CLAIM_BOND, "carol: bond + claim bond");
        assertEq(games.claim(cid).openGames, 0, "every game over");
        assertEq(address(games).balance, CLAIM_BOND + 3 * GAME_BOND, "all held as credits");
    }

    /// @dev On an honest claim two frivolous games lose both bonds to the submitter, who also
    ///      gets its claim bond back once the window closed.
    function test_twoFrivolousGames_onAnHonestClaim() public {
        RoundData memory r = makeRound(MEDIAN, 6, 1);
        int256[] memory next = honestNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 ga = openLeaf(alice, cid, 0);
        uint256 gb = openLeaf(bob, cid, 2);
        revealLeaf(ga, next, 0);
        revealLeaf(gb, next, 2);
        vm.roll(games.claim(cid).windowEnd + 1);
        games.timeout(ga);
        games.timeout(gb);
        games.release(cid);
        assertEq(games.credits(submitter), CLAIM_BOND + 2 * GAME_BOND, "submitter");
    }

    // -- bonds, ids, moves -----------------------------------------------------------------

    function test_open_refusesWrongBondUnknownIdsAndMissingChunks() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        uint256 cid = postClaim(submitter, r, honestNext(r), WINDOW);
        vm.deal(alice, 1 ether);
        vm.startPrank(alice);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.WrongBond.selector, GAME_BOND - 1, GAME_BOND));
        games.openLeaf{value: GAME_BOND - 1}(cid, 0);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.UnknownId.selector, cid + 1));
        games.openLeaf{value: GAME_BOND}(cid + 1, 0);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadChallenge.selector, FaultGames.Kind.Leaf, 0, 3));
        games.openLeaf{value: GAME_BOND}(cid, 3); // D = 600 has chunks 0..2 only
        vm.expectRevert(abi.encodeWithSelector(FaultGames.UnknownId.selector, 0));
        games.timeout(0);
        vm.stopPrank();
    }

    function test_moves_onlyByTheirPlayer() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 gid = openLeaf(alice, cid, FAULT_CHUNK);
        revealLeaf(gid, next, FAULT_CHUNK); // anyone holding the tree reveals
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotYourMove.selector, gid, address(this)));
        revealLeaf(gid, next, FAULT_CHUNK); // not the submitter's turn any more
        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        vm.prank(bob);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotYourMove.selector, gid, bob));
        games.prove(gid, s); // only the challenger proves (and is paid)
        FaultGames.Records memory rec = recordsOf(r);
        FaultGames.Opening memory o;
        vm.expectRevert(abi.encodeWithSelector(FaultGames.WrongGame.selector, gid, FaultGames.Kind.Leaf));
        games.postChunk(gid, rec, o);
    }

    // -- pull payments ---------------------------------------------------------------------

    function test_withdraw_paysCreditsOnce() public {
        RoundData memory r = makeRound(FEDAVG, 7, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        uint256 ga = openLeaf(alice, cid, 0);
        revealLeaf(ga, next, 0);
        vm.roll(block.number + CLOCK + 1);
        games.timeout(ga);
        uint256 gb = openLeaf(bob, cid, FAULT_CHUNK);
        revealLeaf(gb, next, FAULT_CHUNK);
        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        vm.prank(bob);
        games.prove(gb, s);

        uint256 before = bob.balance;
        vm.expectEmit(true, false, false, true, address(games));
        emit FaultGames.Withdrawal(bob, GAME_BOND + CLAIM_BOND);
        vm.prank(bob);
        games.withdraw();
        assertEq(bob.balance, before + GAME_BOND + CLAIM_BOND, "bob paid");
        assertEq(games.credits(bob), 0, "bob's credits spent");
        vm.prank(bob);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NothingToWithdraw.selector, bob));
        games.withdraw();
        before = submitter.balance;
        vm.prank(submitter);
        games.withdraw();
        assertEq(submitter.balance, before + GAME_BOND, "submitter paid alice's bond");
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NothingToWithdraw.selector, alice));
        games.withdraw();
        assertEq(address(games).balance, 0, "nothing left");
    }

    // -- exclusion, inclusion, availability, descent ---------------------------------------

    /// @dev A justified exclusion is defended (not with a lane inside the bound); excluding a
    ///      good update cannot be defended and loses the claim on the submitter's clock.
    function test_exclusionGame() public {
        RoundData memory r = makeRound(FEDAVG, 8, 1);
        makeBad(r, 3, 256 + 5);
        exclude(r, 3);
        uint256 cid = postClaim(submitter, r, honestNext(r), WINDOW);
        vm.deal(alice, GAME_BOND);
        vm.prank(alice);
        uint256 gid = games.openExclusion{value: GAME_BOND}(cid, 3);
        FaultGames.Records memory rec = recordsOf(r);
        FaultGames.Opening memory o = openingOf(r, 3, 1, 6);
        vm.prank(submitter);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotBad.selector, 3, 1, 6));
        games.defendExclusion(gid, rec, o);
        o = openingOf(r, 3, 1, 5);
        vm.expectEmit(true, false, false, true, address(games));
        emit FaultGames.ExclusionDefended(gid, 1, 5);
        vm.prank(submitter);
        games.defendExclusion(gid, rec, o);
        assertEq(games.credits(submitter), GAME_BOND, "the challenge bond");

        RoundData memory r2 = makeRound(FEDAVG, 9, 1);
        exclude(r2, 1);
        uint256 cid2 = postClaim(submitter, r2, honestNext(r2), WINDOW);
        vm.deal(bob, GAME_BOND);
        vm.prank(bob);
        uint256 gid2 = games.openExclusion{value: GAME_BOND}(cid2, 1);
        rec = recordsOf(r2);
        for (uint256 lane = 0; lane < 256; lane += 85) {
            o = openingOf(r2, 1, 2, lane); // chunk 2: lanes 88.. are padding
            vm.prank(submitter);
            vm.expectRevert(abi.encodeWithSelector(FaultGames.NotBad.selector, 1, 2, lane));
            games.defendExclusion(gid2, rec, o);
        }
        vm.roll(block.number + CLOCK + 1);
        games.timeout(gid2);
        assertTrue(games.refuted(cid2), "an unjustified exclusion loses");
    }

    /// @dev A claim that included a bad update is refuted at once by its opening (no bond).
    function test_refuteInclusion() public {
        RoundData memory r = makeRound(MEDIAN, 11, 1);
        makeBad(r, 2, 512 + 3);
        exclude(r, 0);
        uint256 cid = postClaim(submitter, r, honestNext(r), WINDOW);
        FaultGames.Records memory rec = recordsOf(r);
        FaultGames.Opening memory o = openingOf(r, 2, 2, 4);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.NotBad.selector, 2, 2, 4));
        games.refuteInclusion(cid, rec, 2, o);
        o = openingOf(r, 0, 2, 3);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.WrongMembership.selector, 0, true));
        games.refuteInclusion(cid, rec, 0, o);
        o = openingOf(r, 1, 2, 3); // update 1's opening offered for update 2
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadUpdateProof.selector, 2, 2));
        games.refuteInclusion(cid, rec, 2, o);
        uint256[] memory w = new uint256[](K); // a copy: rec.weights is r.weights
        for (uint256 i = 0; i < K; ++i) {
            w[i] = r.weights[i];
        }
        w[1] += 1;
        rec.weights = w;
        o = openingOf(r, 2, 2, 3);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.RecordsMismatch.selector, cid));
        games.refuteInclusion(cid, rec, 2, o);
        rec = recordsOf(r);
        vm.expectEmit(true, true, false, true, address(games));
        emit FaultGames.ClaimRefuted(cid, carol, type(uint256).max, true);
        vm.prank(carol);
        games.refuteInclusion(cid, rec, 2, o);
        assertTrue(games.refutedByProof(cid), "an included bad update is a proof");
        assertEq(games.credits(carol), CLAIM_BOND, "the claim's bond");
        vm.expectRevert(abi.encodeWithSelector(FaultGames.ClaimClosed.selector, cid));
        games.refuteInclusion(cid, rec, 2, o);
    }

    /// @dev Data availability: the right chunk of the named update is posted in full; a
    ///      silent submitter loses the claim.
    function test_availabilityGame() public {
        RoundData memory r = makeRound(TRIMMED_MEAN, 12, 1);
        uint256 cid = postClaim(submitter, r, honestNext(r), WINDOW);
        vm.deal(alice, 2 * GAME_BOND);
        vm.prank(alice);
        uint256 gid = games.openAvailability{value: GAME_BOND}(cid, 3, 2);
        FaultGames.Records memory rec = recordsOf(r);
        FaultGames.Opening memory o = openingOf(r, 2, 2, 0);
        vm.prank(submitter);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadUpdateProof.selector, 3, 2));
        games.postChunk(gid, rec, o);
        o = openingOf(r, 3, 1, 0);
        vm.prank(submitter);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadUpdateProof.selector, 3, 2));
        games.postChunk(gid, rec, o);
        o = openingOf(r, 3, 2, 0);
        vm.expectEmit(true, false, false, true, address(games));
        emit FaultGames.ChunkPosted(gid, 3, 2, chunkOf(r.ups[3], 2));
        vm.prank(submitter);
        games.postChunk(gid, rec, o);
        assertEq(games.credits(submitter), GAME_BOND, "the challenge bond");
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadChallenge.selector, FaultGames.Kind.Availability, K, 0));
        games.openAvailability{value: GAME_BOND}(cid, K, 0);
        vm.prank(alice);
        uint256 gid2 = games.openAvailability{value: GAME_BOND}(cid, 0, 0);
        vm.roll(block.number + CLOCK + 1);
        games.timeout(gid2);
        assertTrue(games.refuted(cid), "a withheld chunk loses the claim");
    }

    /// @dev Descent without a public tree: the submitter reveals the 4 leaf slots under the
    ///      root (depth 2), the challenger picks the faulty one, the leaf game refutes.
    function test_descent_reachesTheFaultyLeaf() public {
        RoundData memory r = makeRound(FEDPROX, 13, 1);
        int256[] memory next = faultyNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        vm.deal(alice, GAME_BOND);
        vm.prank(alice);
        uint256 gid = games.openDescent{value: GAME_BOND}(cid);
        bytes32[] memory slots = leavesOf(next);
        bytes32[] memory wrong = leavesOf(honestNext(r)); // nodes of another tree
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadNodes.selector, gid, 4, 4));
        games.revealNodes(gid, wrong);
        games.revealNodes(gid, slots);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadPick.selector, gid, 4));
        games.pickNode(gid, slots, 4);
        vm.expectEmit(true, false, false, true, address(games));
        emit FaultGames.NodePicked(gid, 0, FAULT_CHUNK, slots[FAULT_CHUNK]);
        vm.prank(alice);
        games.pickNode(gid, slots, FAULT_CHUNK);
        FaultGames.Game memory g = games.game(gid);
        assertEq(uint256(g.kind), uint256(FaultGames.Kind.Leaf), "now a leaf game");
        assertEq(g.j, FAULT_CHUNK, "at the picked chunk");
        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        vm.prank(alice);
        games.prove(gid, s);
        assertTrue(games.refuted(cid), "refuted");
    }

    /// @dev A claimed tree with something in an empty leaf slot is refuted by picking it; the
    ///      honest tree's empty slot cannot be picked.
    function test_descent_emptySlot() public {
        RoundData memory r = makeRound(FEDAVG, 14, 1);
        bytes32[] memory slots = leavesOf(honestNext(r));
        assertEq(slots[3], bytes32(0), "D = 600: slot 3 is empty");
        uint256 honest = postClaim(submitter, r, honestNext(r), WINDOW);
        slots[3] = keccak256("not empty");
        uint256 cid = postClaimParams(submitter, r, claimParams(r, rootFromLeaves(D, slots), WINDOW));
        vm.deal(alice, 2 * GAME_BOND);
        vm.prank(alice);
        uint256 gid = games.openDescent{value: GAME_BOND}(cid);
        games.revealNodes(gid, slots);
        vm.prank(alice);
        games.pickNode(gid, slots, 3);
        assertTrue(games.refuted(cid), "a non-empty empty slot refutes");
        assertTrue(games.refutedByProof(cid), "by proof");

        slots[3] = bytes32(0);
        vm.prank(alice);
        uint256 gid2 = games.openDescent{value: GAME_BOND}(honest);
        games.revealNodes(gid2, slots);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(FaultGames.BadPick.selector, gid2, 3));
        games.pickNode(gid2, slots, 3);
    }
}
