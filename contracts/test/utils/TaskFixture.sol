// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Test} from "./Test.sol";
import {FedChainTask} from "../../FedChainTask.sol";
import {FedChainTaskStorage} from "../../FedChainTaskStorage.sol";
import {EquivocationEvidence} from "../../lib/EquivocationEvidence.sol";

/// @title TaskFixture
/// @notice Deploys a FedChainTask with known keys (owner, committee, clients) and drives it:
///         registrations, a round's updates, the chosen aggregator's submission, EIP-712
///         certificates and signed update records made with `vm.sign` / `vm.signCompact`.
abstract contract TaskFixture is Test {
    uint256 internal constant OWNER_PK = 0x0E;
    uint256 internal constant AGG_PK0 = 0xA000; // aggregator i has key AGG_PK0 + i + 1
    uint256 internal constant CLIENT_PK0 = 0xC000; // client i has key CLIENT_PK0 + i + 1

    uint256 internal constant STAKE = 10 ether;
    uint256 internal constant BOND = 1 ether;
    uint256 internal constant CHALLENGE_BOND = 0.5 ether;
    uint256 internal constant PENALTY = 2 ether;
    /// @dev Burned value is credited to address(0), which nobody can withdraw.
    address internal constant BURN = address(0);
    bytes32 internal constant MODEL0 = keccak256("initial model");

    FedChainTask internal task;
    address internal owner;
    /// @dev The EquivocationEvidence every task of the test is given (EIP-3860: deployed on
    ///      its own, before the task; one instance serves any number of tasks).
    EquivocationEvidence internal evidence = new EquivocationEvidence();
    /// @dev The deployed task's clientDeposit (what `registerClients` pays per client).
    uint256 internal clientDeposit;

    function defaultConfig() internal pure returns (FedChainTaskStorage.TaskConfig memory cfg) {
        cfg.initialModelDigest = MODEL0;
        cfg.ruleId = keccak256("fedavg");
        cfg.ruleParamsHash = keccak256("params");
        cfg.numRounds = 2;
        cfg.minUpdates = 2;
        cfg.maxUpdates = 4;
        cfg.collectWindow = 3;
        cfg.submitTimeout = 5;
        cfg.challengeWindow = 4;
        cfg.attestWindow = 0;
        cfg.disputeTimeout = 6;
        cfg.rotationPolicy = 0;
        cfg.rotationSeed = bytes32(0);
        cfg.aggregatorStake = STAKE;
        cfg.aggregateBond = BOND;
        cfg.challengeBond = CHALLENGE_BOND;
        cfg.timeoutPenalty = PENALTY;
        cfg.maxSamples = 1_000_000;
        cfg.collectTimeout = 10;
        cfg.abortTimeout = 200;
    }

    function deploy(FedChainTaskStorage.TaskConfig memory cfg) internal returns (FedChainTask) {
        owner = vm.addr(OWNER_PK);
        vm.roll(100);
        vm.prank(owner);
        task = new FedChainTask(cfg, evidence);
        clientDeposit = cfg.clientDeposit;
        return task;
    }

    function aggKey(uint256 i) internal pure returns (uint256) {
        return AGG_PK0 + i + 1;
    }

    function agg(uint256 i) internal pure returns (address) {
        return vm.addr(aggKey(i));
    }

    function clientKey(uint256 i) internal pure returns (uint256) {
        return CLIENT_PK0 + i + 1;
    }

    function client(uint256 i) internal pure returns (address) {
        return vm.addr(clientKey(i));
    }

    function registerCommittee(uint256 n) internal {
        for (uint256 i = 0; i < n; ++i) {
            vm.deal(agg(i), 100 ether);
            vm.prank(agg(i));
            task.registerAggregator{value: STAKE}();
        }
    }

    function registerClients(uint256 k) internal {
        for (uint256 i = 0; i < k; ++i) {
            vm.deal(client(i), client(i).balance + clientDeposit);
            vm.prank(client(i));
            task.registerClient{value: clientDeposit}();
        }
    }

    function startTask() internal {
        vm.prank(owner);
        task.start();
    }

    /// @notice A deployed task with `n` members and `k` clients, started (round 1 open).
    function setUpTask(uint256 n, uint256 k) internal {
        deploy(defaultConfig());
        registerCommittee(n);
        registerClients(k);
        startTask();
    }

    function updateDigest(uint256 round, uint256 i) internal pure returns (bytes32) {
        return keccak256(abi.encode("update", round, i));
    }

    /// @notice The chunk root (U_i) the tests sign with the update of digest `digest`.
    function rootOf(bytes32 digest) internal pure returns (bytes32) {
        return keccak256(abi.encode("U_i", digest));
    }

    /// @notice Clients 0 .. count-1 register their updates of `round` themselves.
    function submitUpdates(uint256 round, uint256 count) internal {
        for (uint256 i = 0; i < count; ++i) {
            vm.prank(client(i));
            task.submitUpdate(round, updateDigest(round, i), uint64(10 + i), rootOf(updateDigest(round, i)));
        }
    }

    /// @notice Moves to the first block at which `round`'s collection is closed.
    function closeCollection(uint256 round) internal {
        FedChainTaskStorage.RoundInfo memory info = task.getRound(round);
        require(info.closeBlock != 0, "collection cannot close: too few updates");
        if (block.number < info.closeBlock) vm.roll(info.closeBlock);
    }

    function honestDigest(uint256 round) internal pure returns (bytes32) {
        return keccak256(abi.encode("aggregate", round));
    }

    /// @notice Updates registered, collection closed, the chosen member submitted `digest`.
    function reachSubmitted(uint256 round, bytes32 digest) internal returns (address chosen) {
        submitUpdates(round, 2);
        closeCollection(round);
        (chosen,,) = task.currentAggregator();
        vm.prank(chosen);
        task.submitAggregate{value: BOND}(round, digest, false);
    }

    function stakeOf(address member) internal view returns (uint256 stake) {
        (,,, stake,,) = task.aggregatorInfo(member);
    }

    function isActive(address member) internal view returns (bool active) {
        (, active,,,,) = task.aggregatorInfo(member);
    }

    function indexOf(address member) internal view returns (uint256 index) {
        (,,,, index,) = task.aggregatorInfo(member);
    }

    /// @notice A certificate: the members' signatures over the verdict, sorted by signer.
    function certificate(
        uint256 round,
        uint256 attempt,
        bytes32 digest,
        bool faulty,
        uint256 viewNumber,
        uint256[] memory memberIndices
    ) internal view returns (bytes[] memory sigs) {
        bytes32 d = task.verdictDigest(round, attempt, digest, faulty, viewNumber);
        uint256 m = memberIndices.length;
        uint256[] memory keys = new uint256[](m);
        for (uint256 i = 0; i < m; ++i) {
            keys[i] = aggKey(memberIndices[i]);
        }
        // insertion sort by address
        for (uint256 i = 1; i < m; ++i) {
            uint256 k = keys[i];
            uint256 j = i;
            while (j > 0 && vm.addr(keys[j - 1]) > vm.addr(k)) {
                keys[j] = keys[j - 1];
                --j;
            }
            keys[j] = k;
        }
        sigs = new bytes[](m);
        for (uint256 i = 0; i < m; ++i) {
            (uint8 v, bytes32 r, bytes32 s) = vm.sign(keys[i], d);
            sigs[i] = abi.encodePacked(r, s, v);
        }
    }

    /// @notice The members other than `excluded`, the first `count` of them.
    function membersExcept(uint256 n, address excluded, uint256 count) internal pure returns (uint256[] memory out) {
        out = new uint256[](count);
        uint256 j = 0;
        for (uint256 i = 0; i < n && j < count; ++i) {
            if (agg(i) != excluded) out[j++] = i;
        }
        require(j == count, "not enough members");
    }

    /// @notice Client `i`'s signed update record (140 bytes, as `submitUpdates` takes it),
    ///         its U_i `rootOf(digest)`.
    function updateRecord(uint256 i, uint256 round, bytes32 digest, uint64 numSamples)
        internal
        view
        returns (bytes memory)
    {
        bytes32 root = rootOf(digest);
        bytes32 d = task.updateRecordDigest(round, digest, numSamples, root);
        (bytes32 r, bytes32 vs) = vm.signCompact(clientKey(i), d);
        return abi.encodePacked(uint32(i), numSamples, digest, root, r, vs);
    }

    /// @notice The task's EquivocationEvidence (its `equivocationEvidence` view).
    function evidenceOf(FedChainTask t) internal view returns (EquivocationEvidence) {
        return EquivocationEvidence(t.equivocationEvidence());
    }

    /// @notice The sealed commitment `reporter` sends before revealing equivocation evidence.
    function sealedEvidence(
        address reporter,
        uint8 kind,
        uint256 viewNumber,
        uint256 seq,
        FedChainTaskStorage.SignedVote memory a,
        FedChainTaskStorage.SignedVote memory b
    ) internal view returns (bytes32) {
        return keccak256(
            abi.encode(address(task), kind, viewNumber, seq, keccak256(a.signature), keccak256(b.signature), reporter)
        );
    }

    /// @notice `reporter` commits to the evidence, then one block passes (the reveal may follow).
    function commitEvidence(
        address reporter,
        uint8 kind,
        uint256 viewNumber,
        uint256 seq,
        FedChainTaskStorage.SignedVote memory a,
        FedChainTaskStorage.SignedVote memory b
    ) internal {
        evidenceOf(task).commitEquivocation(sealedEvidence(reporter, kind, viewNumber, seq, a, b));
        vm.roll(block.number + 1);
    }
}
