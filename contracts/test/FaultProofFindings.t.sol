// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {FaultProofFixture} from "./utils/FaultProofFixture.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";
import {OneStep} from "../OneStep.sol";

/// @title FaultProofFindingsTest
/// @notice The two findings of the Foundry review of issue 22's hooks, kept as regression
///         tests of the fixed behaviour (docs/fault-proof.md, "Certificates and refutations").
///         `slashRefutedCertificate` slashes the signers of a "not faulty" certificate when the
///         bound claim is refuted, but (1) a claim is also "refuted" without any proof when its
///         submitter misses a move (timeout): the task now requires `refutedByProof`
///         (ClaimNotProvenFaulty); (2) the certificate names the aggregate's digest only, which
///         nothing on-chain ties to the claim's new root: on a fault-proof task a "not faulty"
///         verdict vouches for the whole SUBMISSION (digest and bound claim), so honest nodes
///         vote "faulty" on a right digest bound to a claim whose new root differs from their
///         own re-execution (`AggregatorNode.dispute_verdict`), and are never slashed.
contract FaultProofFindingsTest is FaultProofFixture {
    address internal accomplice = address(0xACC);

    /// @dev Finding 1 (fixed): an HONEST claim (its new root is the reference's) whose
    ///      submitter is offline for CLOCK + 1 blocks loses a leaf game by timeout. Its
    ///      submitter is still slashed (`rejectRefuted`: it failed to defend its own claim),
    ///      but the members who certified the (right) aggregate "not faulty" in a PBFT dispute
    ///      keep their stakes: a timeout is no proof (ClaimNotProvenFaulty). On the old
    ///      contracts one Byzantine member (the PBFT challenger) plus an accomplice account that
    ///      opens the game, or a few blocks of censorship of the submitter, slashed all three
    ///      honest signers (f = 1 of n = 4).
    function test_finding1_signersOfAnHonestClaimRefutedByTimeoutKeepTheirStakes() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        setUpFaultTask(r);
        registerRound(1, r);
        address submitter = chosenNow();
        int256[] memory next = honestNext(r);
        uint256 cid = postClaim(submitter, r, next, WINDOW);
        bytes32 digest = aggregateDigest(1, 0);
        vm.prank(submitter);
        task.submitAggregateWithClaim{value: BOND}(1, digest, cid);
        address byzantine = submitter == agg(0) ? agg(1) : agg(0);
        vm.prank(byzantine);
        task.challenge{value: CHALLENGE_BOND}(1);
        uint256[] memory honest = membersExcept(4, byzantine, 3);
        bytes[] memory sigs = certificate(1, 0, digest, false, 0, honest);
        task.resolveDispute(1, 0, false, 0, sigs); // upheld: the aggregate is right
        // the accomplice opens a leaf game; the (honest) submitter is offline for CLOCK + 1 blocks
        uint256 gid = openLeaf(accomplice, cid, 0);
        vm.roll(block.number + CLOCK + 1);
        games.timeout(gid);
        assertTrue(games.refuted(cid), "refuted by timeout");
        assertFalse(games.refutedByProof(cid), "but not by proof");
        assertEq(games.claim(cid).newRoot, vectorRoot(next), "the claim was the honest state");
        vm.prank(byzantine);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.ClaimNotProvenFaulty.selector, 1, cid));
        task.slashRefutedCertificate(1, 0, digest, 0, sigs);
        for (uint256 i = 0; i < 3; ++i) {
            address member = agg(honest[i]);
            assertEq(stakeOf(member), STAKE, "an honest signer keeps its stake without a one-step proof");
        }
        // the submitter that missed its move still loses its stake and bond (liveness)
        task.rejectRefuted(1);
        assertEq(stakeOf(submitter), 0, "the submitter that missed a move is slashed");
        assertEq(uint256(task.phase(1)), uint256(FedChainTaskStorage.Phase.Aggregating), "reopened");
    }

    /// @dev Finding 2 (fixed by the verdict's semantics): n = 7, f = 2 Byzantine members (the
    ///      submitter and a PBFT challenger). The submitter submits the RIGHT digest (the model
    ///      every honest member recomputes) with a FAULTY claim. On the old node code the five
    ///      honest members certified the digest "not faulty", the claim was refuted by proof and
    ///      `slashRefutedCertificate` slashed all five, while the same digest was finalized
    ///      later. Now a "not faulty" verdict vouches for the whole submission: the honest
    ///      members vote "faulty" (the claim's root is not their re-execution's), the Byzantine
    ///      submitter is slashed by the certificate, no honest member can be slashed, and the
    ///      same digest, resubmitted with an honest claim, is finalized.
    ///      (The node side: tests/attacks/test_fault_proof_hooks.py::
    ///      test_honest_nodes_vote_faulty_on_a_right_digest_bound_to_a_wrong_root.)
    function test_finding2_honestMembersCertifyTheSubmissionFaultyAndKeepTheirStakes() public {
        RoundData memory r = makeRound(FEDAVG, 1, 1);
        setUpFaultTaskWith(r, 7);
        registerRound(1, r);
        address submitter = chosenNow();
        bytes32 digest = aggregateDigest(1, 0); // the honest model's digest
        int256[] memory wrong = faultyNext(r);
        uint256 cid = postClaim(submitter, r, wrong, WINDOW);
        vm.prank(submitter);
        task.submitAggregateWithClaim{value: BOND}(1, digest, cid);
        address byzantine = submitter == agg(0) ? agg(1) : agg(0);
        vm.prank(byzantine);
        task.challenge{value: CHALLENGE_BOND}(1);
        uint256[] memory honest = _others(submitter, byzantine);
        // the claim's root differs from the honest re-execution: the SUBMISSION is faulty
        bytes[] memory faultySigs = certificate(1, 0, digest, true, 0, honest);
        task.resolveDispute(1, 0, true, 0, faultySigs);
        assertEq(stakeOf(submitter), 0, "the Byzantine submitter is slashed by the certificate");
        assertEq(task.credits(byzantine), CHALLENGE_BOND + (STAKE + BOND) / 2, "the challenge was right");
        // an honest node also refutes the faulty claim (what honest nodes do: aggregators/node.py)
        _refuteAs(agg(honest[0]), r, wrong, cid);
        assertTrue(games.refutedByProof(cid), "refuted by proof");
        // no "not faulty" certificate exists: the two Byzantine members cannot make one
        uint256[] memory two = new uint256[](2);
        two[0] = _keyIndex(submitter);
        two[1] = _keyIndex(byzantine);
        bytes[] memory byz = certificate(1, 0, digest, false, 0, two);
        vm.expectRevert(abi.encodeWithSelector(FedChainTaskStorage.QuorumNotReached.selector, 2, 5));
        task.slashRefutedCertificate(1, 0, digest, 0, byz);
        _resubmitAndFinalize(r, digest);
        assertEq(task.getRound(1).aggregateDigest, digest, "the right digest is final");
        for (uint256 i = 0; i < 5; ++i) {
            assertEq(stakeOf(agg(honest[i])), STAKE, "an honest member keeps its stake");
        }
    }

    /// @dev i such that agg(i) == `member` (the key `certificate` signs with).
    function _keyIndex(address member) private pure returns (uint256 i) {
        while (agg(i) != member) ++i;
    }

    /// @dev The 5 members of 7 other than `a` and `b`.
    function _others(address a, address b) private pure returns (uint256[] memory out) {
        out = new uint256[](5);
        uint256 h = 0;
        for (uint256 i = 0; i < 7; ++i) {
            if (agg(i) != a && agg(i) != b) out[h++] = i;
        }
    }

    function _refuteAs(address who, RoundData memory r, int256[] memory wrong, uint256 cid) private {
        uint256 gid = openLeaf(who, cid, FAULT_CHUNK);
        revealLeaf(gid, wrong, FAULT_CHUNK);
        OneStep.Step memory s = stepFor(r, FAULT_CHUNK);
        vm.prank(who);
        games.prove(gid, s);
    }

    /// @dev The same digest with the honest claim, by whoever the rotation chooses now, at a
    ///      later attempt; then finalized.
    function _resubmitAndFinalize(RoundData memory r, bytes32 digest) private {
        address next = chosenNow();
        assertTrue(task.getRound(1).attempt > 0, "a later attempt");
        uint256 cid2 = postClaim(next, r, honestNext(r), WINDOW);
        vm.prank(next);
        task.submitAggregateWithClaim{value: BOND}(1, digest, cid2);
        vm.roll(games.claim(cid2).windowEnd + 1);
        task.finalize(1);
    }
}
