// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TaskFixture} from "./TaskFixture.sol";
import {FedChainTaskStorage} from "../../FedChainTaskStorage.sol";
import {FaultGames} from "../../FaultGames.sol";
import {OneStep} from "../../OneStep.sol";
import {ChunkMerkle} from "../../lib/ChunkMerkle.sol";
import {Quorums} from "../../lib/Quorums.sol";

/// @title FaultProofFixture
/// @notice Everything the fault-proof suites build (issue 22): small int32 vectors, their chunk
///         trees (the bytes of `protocol/merkle.py`: 256 big-endian int32 lanes per 1024-byte
///         chunk, zero padding, leaf 0x00 / node 0x01 / root 0x02 ‖ uint64_be(d) domains,
///         empty slots bytes32(0)), a round of K updates with its U_i, an independent reference
///         of the four step rules (FedAvg / FedProx weighted mean, median, trimmed mean, every
///         mean rounded half to even, saturated to int32), the claims, steps and order
///         witnesses FaultGames takes, and a fault-proof FedChainTask bound to a FaultGames.
///         The one place to adapt when the claim or the hooks change.
abstract contract FaultProofFixture is TaskFixture {
    uint8 internal constant FEDAVG = 0;
    uint8 internal constant FEDPROX = 1;
    uint8 internal constant MEDIAN = 2;
    uint8 internal constant TRIMMED_MEAN = 3;

    /// @dev 600 coordinates: 3 chunks (the last one 88 lanes + padding), depth 2, one empty slot.
    uint64 internal constant D = 600;
    /// @dev Updates per round (the default config's maxUpdates).
    uint256 internal constant K = 4;
    /// @dev FaultGames' chess clock per side, in blocks.
    uint64 internal constant CLOCK = 5;
    /// @dev Game window of the claims the suites post (blocks after posting).
    uint64 internal constant WINDOW = 20;
    /// @dev FaultGames' challenge bond (every game).
    uint256 internal constant GAME_BOND = 0.1 ether;
    /// @dev The submitter's claim bond.
    uint256 internal constant CLAIM_BOND = 1 ether;
    /// @dev Largest |q| of a valid update coordinate.
    uint256 internal constant VALUE_BOUND = 1_000;
    /// @dev The chunk and lane a faulty claim gets wrong (+1).
    uint256 internal constant FAULT_CHUNK = 1;
    uint256 internal constant FAULT_LANE = 7;

    int256 internal constant I32_MIN = -(2 ** 31);
    int256 internal constant I32_MAX = 2 ** 31 - 1;

    /// @dev Attestation window of a fault-proof task (the fault proof needs one).
    uint32 internal constant ATTEST_WINDOW = 3;

    OneStep internal oneStep;
    FaultGames internal games;
    /// @dev Committee size of the fault-proof task set up last (who attests each round).
    uint256 internal committee;

    /// @notice One round as a claim sees it: the previous state, K updates with their U_i,
    ///         weights, signers and digests, and the excluded bitmap.
    struct RoundData {
        uint8 rule;
        uint64 betaNum;
        uint64 betaDen;
        int256[] prev;
        int256[][] ups;
        bytes32[] roots;
        uint256[] weights;
        address[] clients;
        bytes32[] digests;
        uint256[] excluded;
    }

    // ------------------------------------------------------------------------------------
    // Deployment

    function deployGames() internal {
        oneStep = new OneStep();
        games = new FaultGames(oneStep, CLOCK, GAME_BOND);
    }

    /// @notice The task config of a fault-proof task under `rule` (its rule id is the
    ///         sha256 of the rule's name, `aggregators.registry.rule_id`).
    function faultConfig(uint8 rule) internal pure returns (FedChainTaskStorage.TaskConfig memory cfg) {
        cfg = defaultConfig();
        cfg.ruleId = sha256(bytes(ruleName(rule)));
        cfg.maxUpdates = uint32(K);
        cfg.submitTimeout = 20;
        cfg.attestWindow = ATTEST_WINDOW;
    }

    /// @notice The step parameters' hash a task binds (`setFaultGames`), as
    ///         `FaultGames.claimBinding` computes it for a claim over `r`.
    function paramsHashOf(RoundData memory r) internal pure returns (bytes32) {
        return keccak256(abi.encode(r.rule, r.betaNum, r.betaDen, uint64(r.prev.length), VALUE_BOUND));
    }

    function ruleName(uint8 rule) internal pure returns (string memory) {
        if (rule == FEDAVG) return "fedavg";
        if (rule == FEDPROX) return "fedprox";
        if (rule == MEDIAN) return "median";
        return "trimmed_mean";
    }

    /// @notice A fault-proof task (FaultGames set before anyone stakes, initial state root
    ///         that of `r.prev`), 4 members, K clients, started: round 1 collecting.
    function setUpFaultTask(RoundData memory r) internal {
        setUpFaultTaskWith(r, 4);
    }

    /// @notice The same with an `n`-member committee.
    function setUpFaultTaskWith(RoundData memory r, uint256 n) internal {
        deploy(faultConfig(r.rule));
        deployGames();
        vm.prank(owner);
        task.setFaultGames(address(games), vectorRoot(r.prev), paramsHashOf(r));
        registerCommittee(n);
        committee = n;
        registerClients(K);
        startTask();
    }

    /// @notice The round's clients register their updates (digest, weight, U_i) of `round`;
    ///         then the collection closes and n - f members attest every update (all included).
    function registerRound(uint256 round, RoundData memory r) internal {
        uint256[] memory all = new uint256[](1);
        all[0] = (uint256(1) << r.ups.length) - 1;
        registerRoundAttesting(round, r, all);
    }

    /// @notice The same with n - f members attesting the updates of `bits` (the included set).
    function registerRoundAttesting(uint256 round, RoundData memory r, uint256[] memory bits) internal {
        for (uint256 i = 0; i < r.ups.length; ++i) {
            vm.prank(r.clients[i]);
            task.submitUpdate(round, r.digests[i], uint64(r.weights[i]), r.roots[i]);
        }
        closeCollection(round);
        uint256 n = committee == 0 ? 4 : committee;
        uint256 quorum = Quorums.commitQuorum(n);
        for (uint256 m = 0; m < n && quorum > 0; ++m) {
            (,, bool slashed,,,) = task.aggregatorInfo(agg(m));
            if (slashed) continue;
            vm.prank(agg(m));
            task.attest(round, bits);
            --quorum;
        }
    }

    function chosenNow() internal view returns (address chosen) {
        (chosen,,) = task.currentAggregator();
    }

    function aggregateDigest(uint256 round, uint256 attempt) internal pure returns (bytes32) {
        return keccak256(abi.encode("aggregate", round, attempt));
    }

    // ------------------------------------------------------------------------------------
    // Vectors and chunk trees (protocol/merkle.py)

    /// @notice Chunk `j` of `v`: 256 big-endian int32 lanes, zero padded (1024 bytes).
    function chunkOf(int256[] memory v, uint256 j) internal pure returns (bytes memory c) {
        c = new bytes(1024 + 32); // 32 bytes of slack for the word stores below
        uint256 start = j * 256;
        uint256 n = v.length > start ? v.length - start : 0;
        if (n > 256) n = 256;
        assembly ("memory-safe") {
            mstore(c, 1024)
            let src := add(add(v, 32), shl(5, start))
            let dst := add(c, 32)
            for {
                let t := 0
            } lt(t, n) {
                t := add(t, 1)
            } {
                let x := mload(add(src, shl(5, t)))
                let p := add(dst, shl(2, t))
                // keep the bytes after this lane (a later lane writes them; padding stays 0)
                mstore(p, or(shl(224, and(x, 0xffffffff)), shr(32, shl(32, mload(p)))))
            }
        }
    }

    /// @notice The 2**depth leaf slots of `v`'s tree (empty slots bytes32(0)).
    function leavesOf(int256[] memory v) internal pure returns (bytes32[] memory slots) {
        uint256 n = ChunkMerkle.chunkCount(v.length);
        slots = new bytes32[](1 << ChunkMerkle.depth(v.length));
        for (uint256 j = 0; j < n; ++j) {
            slots[j] = ChunkMerkle.leafHashMem(chunkOf(v, j));
        }
    }

    /// @notice The root over leaf slots `slots` of a `d`-vector.
    function rootFromLeaves(uint64 d, bytes32[] memory slots) internal pure returns (bytes32) {
        uint256 width = slots.length;
        bytes32[] memory level = new bytes32[](width);
        for (uint256 i = 0; i < width; ++i) {
            level[i] = slots[i];
        }
        while (width > 1) {
            width >>= 1;
            for (uint256 i = 0; i < width; ++i) {
                level[i] = ChunkMerkle.nodeHash(level[2 * i], level[2 * i + 1]);
            }
        }
        return ChunkMerkle.rootOf(d, level[0]);
    }

    /// @notice The sibling hashes of slot `j`, from the leaf upward.
    function proofFromLeaves(bytes32[] memory slots, uint256 j) internal pure returns (bytes32[] memory proof) {
        uint256 width = slots.length;
        uint256 levels = 0;
        while ((1 << levels) < width) ++levels;
        proof = new bytes32[](levels);
        bytes32[] memory level = new bytes32[](width);
        for (uint256 i = 0; i < width; ++i) {
            level[i] = slots[i];
        }
        uint256 idx = j;
        for (uint256 l = 0; l < levels; ++l) {
            proof[l] = level[idx ^ 1];
            width >>= 1;
            for (uint256 i = 0; i < width; ++i) {
                level[i] = ChunkMerkle.nodeHash(level[2 * i], level[2 * i + 1]);
            }
            idx >>= 1;
        }
    }

    function vectorRoot(int256[] memory v) internal pure returns (bytes32) {
        return rootFromLeaves(uint64(v.length), leavesOf(v));
    }

    function proofOf(int256[] memory v, uint256 j) internal pure returns (bytes32[] memory) {
        return proofFromLeaves(leavesOf(v), j);
    }

    function leafOf(int256[] memory v, uint256 j) internal pure returns (bytes32) {
        return ChunkMerkle.leafHashMem(chunkOf(v, j));
    }

    /// @notice A deterministic value in [-bound, bound].
    function rand(uint256 seed, uint256 a, uint256 b, uint256 bound_) internal pure returns (int256) {
        return int256(uint256(keccak256(abi.encode(seed, a, b))) % (2 * bound_ + 1)) - int256(bound_);
    }

    // ------------------------------------------------------------------------------------
    // Rounds

    /// @notice K updates of D coordinates within the value bound, weights 10 + 7i, nothing
    ///         excluded; clients client(0..K-1), digests of round `round`.
    function makeRound(uint8 rule, uint256 seed, uint256 round) internal pure returns (RoundData memory r) {
        r.rule = rule;
        if (rule == TRIMMED_MEAN) {
            r.betaNum = 1;
            r.betaDen = 4;
        }
        r.prev = new int256[](D);
        for (uint256 c = 0; c < D; ++c) {
            r.prev[c] = rand(seed, 99, c, 50_000);
        }
        r.ups = new int256[][](K);
        r.roots = new bytes32[](K);
        r.weights = new uint256[](K);
        r.clients = new address[](K);
        r.digests = new bytes32[](K);
        for (uint256 i = 0; i < K; ++i) {
            int256[] memory u = new int256[](D);
            for (uint256 c = 0; c < D; ++c) {
                u[c] = rand(seed, i, c, VALUE_BOUND);
            }
            r.ups[i] = u;
            r.roots[i] = vectorRoot(u);
            r.weights[i] = 10 + 7 * i;
            r.clients[i] = client(i);
            r.digests[i] = updateDigest(round, i);
        }
        r.excluded = new uint256[](1);
    }

    /// @notice The same updates on top of the state `prev` (the next round's claim).
    function withPrev(RoundData memory r, int256[] memory prev, uint256 round)
        internal
        pure
        returns (RoundData memory)
    {
        r.prev = prev;
        for (uint256 i = 0; i < r.ups.length; ++i) {
            r.digests[i] = updateDigest(round, i);
        }
        return r;
    }

    /// @notice Update `i` made bad: coordinate `c` set to VALUE_BOUND + 1 (its U_i recomputed).
    function makeBad(RoundData memory r, uint256 i, uint256 c) internal pure {
        r.ups[i][c] = int256(VALUE_BOUND) + 1;
        r.roots[i] = vectorRoot(r.ups[i]);
    }

    /// @notice Exclude update `i` from the claim (bit i of the bitmap).
    function exclude(RoundData memory r, uint256 i) internal pure {
        r.excluded[i / 256] |= 1 << (i % 256);
    }

    /// @notice Chunk `j` of update `i` opened against its U_i, naming lane `lane`.
    function openingOf(RoundData memory r, uint256 i, uint256 j, uint256 lane)
        internal
        pure
        returns (FaultGames.Opening memory o)
    {
        o.j = j;
        o.chunk = chunkOf(r.ups[i], j);
        o.proof = proofOf(r.ups[i], j);
        o.lane = lane;
    }

    function isExcluded(RoundData memory r, uint256 i) internal pure returns (bool) {
        return (r.excluded[i / 256] >> (i % 256)) & 1 == 1;
    }

    function includedCount(RoundData memory r) internal pure returns (uint256 m) {
        for (uint256 i = 0; i < r.ups.length; ++i) {
            if (!isExcluded(r, i)) ++m;
        }
    }

    // ------------------------------------------------------------------------------------
    // Reference rules (independent of OneStepMath: written from the spec)

    function sat32(int256 v) internal pure returns (int256) {
        return v > I32_MAX ? I32_MAX : (v < I32_MIN ? I32_MIN : v);
    }

    /// @notice num / den to the nearest integer, ties to the even one (den > 0), via floor.
    function refRound(int256 num, uint256 den) internal pure returns (int256 q) {
        int256 d = int256(den);
        q = num >= 0 ? num / d : -((-num + d - 1) / d); // floor
        int256 r = num - q * d; // in [0, d)
        if (2 * r > d || (2 * r == d && q % 2 != 0)) q += 1;
    }

    /// @notice The rule's delta over the values `xs` with weights `w` (0 for no input).
    function refDelta(uint8 rule, uint256 betaNum, uint256 betaDen, int256[] memory xs, uint256[] memory w)
        internal
        pure
        returns (int256)
    {
        uint256 k = xs.length;
        if (k == 0) return 0;
        if (rule == FEDAVG || rule == FEDPROX) {
            int256 num = 0;
            uint256 den = 0;
            for (uint256 i = 0; i < k; ++i) {
                num += xs[i] * int256(w[i]);
                den += w[i];
            }
            return den == 0 ? int256(0) : refRound(num, den);
        }
        int256[] memory s = sortedCopy(xs);
        if (rule == MEDIAN) {
            return k % 2 == 1 ? s[k / 2] : refRound(s[k / 2 - 1] + s[k / 2], 2);
        }
        uint256 b = (k * betaNum) / betaDen;
        int256 sum = 0;
        for (uint256 i = b; i < k - b; ++i) {
            sum += s[i];
        }
        return refRound(sum, k - 2 * b);
    }

    function sortedCopy(int256[] memory xs) internal pure returns (int256[] memory s) {
        s = new int256[](xs.length);
        for (uint256 i = 0; i < xs.length; ++i) {
            int256 x = xs[i];
            uint256 p = i;
            while (p > 0 && s[p - 1] > x) {
                s[p] = s[p - 1];
                --p;
            }
            s[p] = x;
        }
    }

    /// @notice The honest new state: every coordinate by the reference rule over the
    ///         included updates.
    function honestNext(RoundData memory r) internal pure returns (int256[] memory next) {
        uint256 m = includedCount(r);
        uint256[] memory w = new uint256[](m);
        int256[] memory xs = new int256[](m);
        next = new int256[](r.prev.length);
        for (uint256 c = 0; c < r.prev.length; ++c) {
            uint256 p = 0;
            for (uint256 i = 0; i < r.ups.length; ++i) {
                if (isExcluded(r, i)) continue;
                xs[p] = r.ups[i][c];
                w[p] = r.weights[i];
                ++p;
            }
            next[c] = sat32(r.prev[c] + refDelta(r.rule, r.betaNum, r.betaDen, xs, w));
        }
    }

    /// @notice The honest state with lane FAULT_LANE of chunk FAULT_CHUNK off by one.
    function faultyNext(RoundData memory r) internal pure returns (int256[] memory next) {
        return faultyAt(r, FAULT_CHUNK, FAULT_LANE);
    }

    function faultyAt(RoundData memory r, uint256 j, uint256 lane) internal pure returns (int256[] memory next) {
        next = honestNext(r);
        uint256 c = j * 256 + lane;
        next[c] = next[c] == I32_MAX ? next[c] - 1 : next[c] + 1;
    }

    // ------------------------------------------------------------------------------------
    // Claims and steps

    function claimParams(RoundData memory r, bytes32 newRoot, uint64 window)
        internal
        pure
        returns (FaultGames.ClaimParams memory p)
    {
        p.rule = r.rule;
        p.betaNum = r.betaNum;
        p.betaDen = r.betaDen;
        p.dim = uint64(r.prev.length);
        p.window = window;
        p.valueBound = VALUE_BOUND;
        p.prevRoot = vectorRoot(r.prev);
        p.newRoot = newRoot;
    }

    function recordsOf(RoundData memory r) internal pure returns (FaultGames.Records memory rec) {
        rec.roots = r.roots;
        rec.weights = r.weights;
        rec.excluded = r.excluded;
    }

    function signersOf(RoundData memory r) internal pure returns (FaultGames.Signers memory s) {
        s.clients = r.clients;
        s.digests = r.digests;
    }

    /// @notice `submitter` posts the claim that `r` leads to `next`, with the claim bond.
    function postClaim(address submitter, RoundData memory r, int256[] memory next, uint64 window)
        internal
        returns (uint256 claimId)
    {
        return postClaimParams(submitter, r, claimParams(r, vectorRoot(next), window));
    }

    function postClaimParams(address submitter, RoundData memory r, FaultGames.ClaimParams memory p)
        internal
        returns (uint256 claimId)
    {
        return postClaimDeclaring(submitter, r, p, unincludedNone(r));
    }

    /// @notice The same declaring the records of `unincluded` not included by the task.
    function postClaimDeclaring(
        address submitter,
        RoundData memory r,
        FaultGames.ClaimParams memory p,
        uint256[] memory unincluded
    ) internal returns (uint256 claimId) {
        vm.deal(submitter, submitter.balance + CLAIM_BOND);
        vm.prank(submitter);
        claimId = games.postClaim{value: CLAIM_BOND}(p, recordsOf(r), signersOf(r), unincluded);
    }

    /// @notice An `unincluded` bitmap declaring nothing (every record included).
    function unincludedNone(RoundData memory r) internal pure returns (uint256[] memory) {
        return new uint256[]((r.roots.length + 255) / 256);
    }

    function openLeaf(address challenger, uint256 claimId, uint256 j) internal returns (uint256 gameId) {
        vm.deal(challenger, challenger.balance + GAME_BOND);
        vm.prank(challenger);
        gameId = games.openLeaf{value: GAME_BOND}(claimId, j);
    }

    /// @notice Anyone reveals leaf j of `next` (the claimed state) with its proof.
    function revealLeaf(uint256 gameId, int256[] memory next, uint256 j) internal {
        games.revealLeaf(gameId, leafOf(next, j), proofOf(next, j));
    }

    /// @notice The one-step of chunk `j` over `r`: openings of the previous state and of every
    ///         included update, and (median / trimmed mean) the ascending order witness.
    function stepFor(RoundData memory r, uint256 j) internal pure returns (OneStep.Step memory s) {
        s.rule = r.rule;
        s.dim = uint64(r.prev.length);
        s.betaNum = r.betaNum;
        s.betaDen = r.betaDen;
        s.j = j;
        s.prevRoot = vectorRoot(r.prev);
        s.prevChunk = chunkOf(r.prev, j);
        s.prevProof = proofOf(r.prev, j);
        uint256 m = includedCount(r);
        s.roots = new bytes32[](m);
        s.weights = new uint256[](m);
        s.chunks = new bytes[](m);
        s.proofs = new bytes32[][](m);
        int256[][] memory inc = new int256[][](m);
        uint256 p = 0;
        for (uint256 i = 0; i < r.ups.length; ++i) {
            if (isExcluded(r, i)) continue;
            inc[p] = r.ups[i];
            s.roots[p] = r.roots[i];
            s.weights[p] = r.weights[i];
            s.chunks[p] = chunkOf(r.ups[i], j);
            s.proofs[p] = proofOf(r.ups[i], j);
            ++p;
        }
        if (r.rule == MEDIAN || r.rule == TRIMMED_MEAN) {
            s.witness = witnessOf(inc, j * 256, ChunkMerkle.validLanes(r.prev.length, j));
        }
    }

    /// @notice Per lane (lanes `start` .. `start + valid - 1` of the vectors), the input indices
    ///         in ascending order of value, 2-byte big-endian, lane-major.
    function witnessOf(int256[][] memory xs, uint256 start, uint256 valid) internal pure returns (bytes memory w) {
        uint256 k = xs.length;
        w = new bytes(valid * k * 2);
        uint256[] memory order = new uint256[](k);
        for (uint256 t = 0; t < valid; ++t) {
            for (uint256 i = 0; i < k; ++i) {
                uint256 p = i;
                int256 x = xs[i][start + t];
                while (p > 0 && xs[order[p - 1]][start + t] > x) {
                    order[p] = order[p - 1];
                    --p;
                }
                order[p] = i;
            }
            for (uint256 i = 0; i < k; ++i) {
                w[2 * (t * k + i)] = bytes1(uint8(order[i] >> 8));
                w[2 * (t * k + i) + 1] = bytes1(uint8(order[i]));
            }
        }
    }

    /// @notice The sum of every credit FaultGames owes `accounts`.
    function creditsOf(address[] memory accounts) internal view returns (uint256 total) {
        for (uint256 i = 0; i < accounts.length; ++i) {
            total += games.credits(accounts[i]);
        }
    }
}
