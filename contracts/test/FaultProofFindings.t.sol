// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {FaultProofFixture} from "./utils/FaultProofFixture.sol";
import {FedChainTaskStorage} from "../FedChainTaskStorage.sol";
import {OneStep} from "../OneStep.sol";

/// @title FaultProofFindingsTest
/// @notice Findings of the Foundry review of issue 22's hooks, one test each, written as the
///         behaviour the contracts promise. THEY FAIL ON THE CONTRACTS OF THIS COMMIT (reported,
///         not hidden; the contracts are not changed here). `slashRefutedCertificate` slashes
///         the signers of a "not faulty" certificate whenever the bound claim is refuted, but
///         (1) a claim is also "refuted" without any proof, when its submitter misses a move
///         (timeout), and (2) the certificate vouches for the aggregate's digest, which nothing
///         on-chain ties to the claim's new root: an honest committee that rightly called a
///         digest "not faulty" is slashed, and the same digest is then finalized.
contract FaultProofFindingsTest is FaultProofFixture {
    address internal accomplice = address(0xACC);

    /// @dev Finding 1: an HONEST claim (its new root is the reference's) whose submitter is
    ///      offline for CLOCK + 1 blocks loses a leaf game by timeout. Its submitter is slashed
    ///      by design (liveness), but the members who certified the (right) aggregate "not
    ///      faulty" in a PBFT dispute lose their stakes too, although no one-step proof
    ///      contradicts them (TaskDisputes: "INVARIANT: signers are slashed only when the
    ///      one-step proof contradicts them"). One Byzantine member (the PBFT challenger) plus
    ///      an accomplice account that opens the game, or a few blocks of censorship of the
    ///      submitter, suffice: f = 1 of n = 4.
    function test_FINDING_signersOfAnHonestClaimRefutedByTimeoutAreSlashed() public {
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
        assertEq(games.claim(cid).newRoot, vectorRoot(next), "the claim was the honest state");
        vm.prank(byzantine);
        try task.slashRefutedCertificate(1, 0, digest, 0, sigs) {} catch {}
        for (uint256 i = 0; i < 3; ++i) {
            address member = agg(honest[i]);
            if (member == submitter) continue;
            assertEq(stakeOf(member), STAKE, "FINDING 1: an honest signer was slashed without a one-step proof");
        }
    }

    /// @dev Finding 2: n = 7, f = 2 Byzantine members (the submitter and a PBFT challenger).
    ///      The submitter submits the RIGHT digest (the model every honest member recomputes)
    ///      with a FAULTY claim. The five honest members rightly certify the digest "not
    ///      faulty" (honest nodes judge the digest: `AggregatorNode.dispute_verdict`); an
    ///      honest node refutes the claim with a real one-step proof; `slashRefutedCertificate`
    ///      then slashes all five honest signers, and the same digest, resubmitted with an
    ///      honest claim by the one member left, is finalized.
    function test_FINDING_signersSlashedForTheDigestTheTaskFinalizes() public {
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
        bytes[] memory sigs = certificate(1, 0, digest, false, 0, honest);
        task.resolveDispute(1, 0, false, 0, sigs); // the digest is right: upheld
        // an honest node refutes the faulty claim (what honest nodes do: aggregators/node.py)
        _refuteAs(agg(honest[0]), r, wrong, cid);
        task.rejectRefuted(1);
        vm.prank(byzantine);
        try task.slashRefutedCertificate(1, 0, digest, 0, sigs) {} catch {}
        _resubmitAndFinalize(r, digest);
        assertEq(task.getRound(1).aggregateDigest, digest, "the vouched-for digest is final");
        for (uint256 i = 0; i < 5; ++i) {
            assertEq(
                stakeOf(agg(honest[i])),
                STAKE,
                "FINDING 2: an honest signer was slashed for the digest the task finalized"
            );
        }
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
