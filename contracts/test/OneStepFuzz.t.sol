// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {FaultProofFixture} from "./utils/FaultProofFixture.sol";
import {FaultGames} from "../FaultGames.sol";
import {OneStep} from "../OneStep.sol";
import {OneStepMath} from "../lib/OneStepMath.sol";

/// @title OneStepFuzzTest
/// @notice OneStep's rules against the fixture's reference (written from the spec, sorting
///         instead of order witnesses, floor-based half-even rounding) on random chunks, the
///         order-witness check, and the chunk trees against OneStep's own Merkle functions.
contract OneStepFuzzTest is FaultProofFixture {
    function setUp() public {
        deployGames();
    }

    /// @dev A random 1024-byte chunk: every lane (padding lanes too) in [-bound, bound].
    function _lanes(uint256 seed, uint256 i, uint256 bound_) private pure returns (int256[] memory v) {
        v = new int256[](256);
        for (uint256 t = 0; t < 256; ++t) {
            v[t] = rand(seed, i, t, bound_);
        }
    }

    /// @dev A value range picked by the seed: ties (small), ordinary, or the whole int32 range
    ///      (saturation).
    function _range(uint256 seed) private pure returns (uint256) {
        uint256 pick = seed % 3;
        return pick == 0 ? 3 : (pick == 1 ? 1_000_000 : uint256(I32_MAX));
    }

    function _inputs(uint256 seed, uint256 k, uint256 bound_)
        private
        pure
        returns (int256[][] memory xs, bytes[] memory chunks)
    {
        xs = new int256[][](k);
        chunks = new bytes[](k);
        for (uint256 i = 0; i < k; ++i) {
            xs[i] = _lanes(seed, i, bound_);
            chunks[i] = chunkOf(xs[i], 0);
        }
    }

    /// @notice One random chunk step: rule, beta, valid lanes, previous chunk, inputs, weights.
    struct Case {
        uint8 rule;
        uint256 betaNum;
        uint256 betaDen;
        uint256 valid;
        int256[] prev;
        int256[][] xs;
        bytes[] chunks;
        uint256[] w;
    }

    function _case(uint8 rule, uint256 seed, uint256 k, uint256 valid) private pure returns (Case memory c) {
        uint256 range = _range(seed);
        c.rule = rule;
        c.valid = valid;
        (c.xs, c.chunks) = _inputs(seed, k, range);
        c.prev = _lanes(seed, 1_000, range);
        c.w = new uint256[](k);
    }

    /// @dev OneStep.stepChunk on the case: lanes below `valid` must be sat32(prev + delta) by
    ///      the reference, the rest 0.
    function _run(Case memory c) private view {
        bytes memory wit = c.rule >= MEDIAN ? witnessOf(c.xs, 0, c.valid) : bytes("");
        bytes memory out =
            oneStep.stepChunk(c.rule, c.betaNum, c.betaDen, c.valid, chunkOf(c.prev, 0), c.chunks, c.w, wit);
        assertEq(out.length, 1024, "chunk length");
        int256[] memory col = new int256[](c.xs.length);
        for (uint256 t = 0; t < 256; ++t) {
            int256 got = int256(int32(uint32(bytes4(_word(out, t)))));
            if (t >= c.valid) {
                assertEq(uint256(got), 0, "padding lane");
                continue;
            }
            for (uint256 i = 0; i < c.xs.length; ++i) {
                col[i] = c.xs[i][t];
            }
            int256 want = sat32(c.prev[t] + refDelta(c.rule, c.betaNum, c.betaDen, col, c.w));
            if (got != want) {
                revert(string.concat("lane ", vm.toString(t), ": got ", _str(got), " want ", _str(want)));
            }
        }
    }

    function _word(bytes memory b, uint256 t) private pure returns (bytes32 x) {
        assembly ("memory-safe") {
            x := mload(add(add(b, 32), shl(2, t)))
        }
    }

    function _str(int256 x) private pure returns (string memory) {
        return x < 0 ? string.concat("-", vm.toString(uint256(-x))) : vm.toString(uint256(x));
    }

    // -- weighted mean ---------------------------------------------------------------------

    function testFuzz_weightedMean_matchesReference(uint256 seed, uint256 kRaw, uint256 validRaw, bool prox)
        public
        view
    {
        Case memory c = _case(prox ? FEDPROX : FEDAVG, seed, bound(kRaw, 0, 6), bound(validRaw, 0, 256));
        uint256 mode = (seed >> 8) % 3;
        for (uint256 i = 0; i < c.w.length; ++i) {
            uint256 h = uint256(keccak256(abi.encode(seed, "w", i)));
            // small weights (ties, zero sums), ordinary ones, or up to the 64-bit maximum
            c.w[i] = mode == 0 ? h % 3 : (mode == 1 ? h % 1_000 : h % (2 ** 64));
        }
        _run(c);
    }

    /// @dev Ties round to the even neighbour, on both signs.
    function test_weightedMean_roundsHalfToEven() public view {
        int256[4] memory a = [int256(1), 2, -1, -2];
        int256[4] memory b = [int256(2), 3, -2, -3];
        int256[4] memory want = [int256(2), 2, -2, -2]; // 1.5, 2.5, -1.5, -2.5
        uint256[] memory w = new uint256[](2);
        w[0] = 1;
        w[1] = 1;
        for (uint256 c = 0; c < 4; ++c) {
            int256[][] memory xs = new int256[][](2);
            xs[0] = new int256[](256);
            xs[1] = new int256[](256);
            xs[0][0] = a[c];
            xs[1][0] = b[c];
            bytes[] memory chunks = new bytes[](2);
            chunks[0] = chunkOf(xs[0], 0);
            chunks[1] = chunkOf(xs[1], 0);
            bytes memory out = oneStep.stepChunk(FEDAVG, 0, 0, 1, new bytes(1024), chunks, w, "");
            int256 got = int256(int32(uint32(bytes4(_word(out, 0)))));
            assertEq(uint256(got - want[c] + 10), 10, "half to even");
            assertEq(uint256(refRound(a[c] + b[c], 2) - want[c] + 10), 10, "reference half to even");
        }
    }

    // -- median and trimmed mean -----------------------------------------------------------

    function testFuzz_median_matchesReference(uint256 seed, uint256 kRaw, uint256 validRaw) public view {
        _run(_case(MEDIAN, seed, bound(kRaw, 0, 7), bound(validRaw, 0, 256)));
    }

    function testFuzz_trimmedMean_matchesReference(
        uint256 seed,
        uint256 kRaw,
        uint256 validRaw,
        uint256 denRaw,
        uint256 numRaw
    ) public view {
        Case memory c = _case(TRIMMED_MEAN, seed, bound(kRaw, 0, 9), bound(validRaw, 0, 256));
        c.betaDen = bound(denRaw, 1, 100);
        c.betaNum = bound(numRaw, 0, (c.betaDen - 1) / 2); // 2 num < den
        _run(c);
    }

    /// @dev Two entries of a lane's witness swapped where their values differ: BadWitness at
    ///      the later position (the order breaks there first).
    function testFuzz_orderWitness_swapRefused(uint256 seed, uint256 kRaw, uint256 laneRaw, uint256 aRaw, uint256 bRaw)
        public
    {
        uint256 k = bound(kRaw, 2, 7);
        uint256 lane = bound(laneRaw, 0, 255);
        uint256 a = bound(aRaw, 0, k - 2);
        uint256 b = bound(bRaw, a + 1, k - 1);
        (int256[][] memory xs, bytes[] memory chunks) = _inputs(seed, k, 1_000_000);
        bytes memory wit = witnessOf(xs, 0, 256);
        vm.assume(xs[_at(wit, lane, k, a)][lane] != xs[_at(wit, lane, k, b)][lane]);
        _swap(wit, 2 * (lane * k + a), 2 * (lane * k + b));
        // the first sorted position whose value is below its predecessor's (the swap made one)
        uint256 firstBad = _firstDescent(xs, wit, lane, k);
        assertLe(firstBad, b, "a descent at or before b");
        vm.expectRevert(abi.encodeWithSelector(OneStepMath.BadWitness.selector, lane, firstBad));
        oneStep.stepChunk(MEDIAN, 0, 0, 256, new bytes(1024), chunks, new uint256[](k), wit);
    }

    function _swap(bytes memory wit, uint256 pa, uint256 pb) private pure {
        (wit[pa], wit[pb]) = (wit[pb], wit[pa]);
        (wit[pa + 1], wit[pb + 1]) = (wit[pb + 1], wit[pa + 1]);
    }

    function _at(bytes memory wit, uint256 lane, uint256 k, uint256 pos) private pure returns (uint256) {
        uint256 p = 2 * (lane * k + pos);
        return (uint256(uint8(wit[p])) << 8) | uint8(wit[p + 1]);
    }

    function _firstDescent(int256[][] memory xs, bytes memory wit, uint256 lane, uint256 k)
        private
        pure
        returns (uint256)
    {
        for (uint256 i = 1; i < k; ++i) {
            if (xs[_at(wit, lane, k, i)][lane] < xs[_at(wit, lane, k, i - 1)][lane]) return i;
        }
        return type(uint256).max;
    }

    // -- chunk trees -----------------------------------------------------------------------

    /// @dev The fixture's trees (protocol/merkle.py's layout) are OneStep's: same root as
    ///      `vectorRoot`, every chunk opens at its own index and at no other.
    function testFuzz_chunkTree_matchesOneStep(uint256 seed, uint256 dRaw) public view {
        uint64 d = uint64(bound(dRaw, 0, 2_100));
        int256[] memory v = new int256[](d);
        for (uint256 c = 0; c < d; ++c) {
            v[c] = rand(seed, 0, c, uint256(I32_MAX));
        }
        bytes32[] memory slots = leavesOf(v);
        bytes32 root = rootFromLeaves(d, slots);
        uint256 n = (uint256(d) + 255) / 256;
        bytes memory packed;
        for (uint256 j = 0; j < n; ++j) {
            packed = bytes.concat(packed, chunkOf(v, j));
        }
        assertEq(oneStep.vectorRoot(packed, d), root, "root");
        for (uint256 j = 0; j < n; ++j) {
            bytes32[] memory proof = proofFromLeaves(slots, j);
            assertTrue(oneStep.verifyChunk(root, d, j, slots[j], proof), "opens at j");
            if (n > 1) {
                assertFalse(oneStep.verifyChunk(root, d, (j + 1) % n, slots[j], proof), "not at another j");
            }
            assertFalse(oneStep.verifyChunk(root, d + 1, j, slots[j], proof), "the root binds d");
        }
    }

    /// @dev The whole step on real trees (openings checked) recomputes the reference's chunk,
    ///      under every rule, on random rounds.
    /// forge-config: default.fuzz.runs = 32
    function testFuzz_step_onRealTrees(uint256 seed, uint8 ruleRaw, uint256 jRaw, uint256 excludedRaw) public view {
        uint8 rule = uint8(bound(ruleRaw, 0, 3));
        uint256 j = bound(jRaw, 0, 2);
        RoundData memory r = makeRound(rule, seed, 1);
        r.excluded[0] = excludedRaw % (1 << K); // any subset excluded, all of them too
        (, bytes32 leaf) = oneStep.step(stepFor(r, j));
        assertEq(leaf, leafOf(honestNext(r), j), "step leaf = reference leaf");
    }
}

/// @title FaultGamesHandler
/// @notice Random claims (honest and faulty), leaf games, moves, timeouts, releases and
///         withdrawals on one FaultGames, at random blocks, by three actors. Honest submitters
///         reveal their leaf as soon as a game opens; faulty ones when `reveal` runs, or never.
contract FaultGamesHandler is FaultProofFixture {
    address[3] internal actors = [address(0xA1), address(0xA2), address(0xA3)];
    uint256 public paidIn;
    uint256 public withdrawn;
    bool[] internal claimFaulty;
    bytes internal params; // honest and faulty ClaimParams, Records, Signers
    bytes internal stepData; // the step of FAULT_CHUNK
    bytes32[3] internal honestLeaves;
    bytes32[3] internal faultyLeaves;
    bytes32[][3] internal honestProofs;
    bytes32[][3] internal faultyProofs;

    constructor(FaultGames games_) {
        games = games_;
        RoundData memory r = makeRound(FEDAVG, 77, 1);
        int256[] memory h = honestNext(r);
        int256[] memory f = faultyNext(r);
        params = abi.encode(
            claimParams(r, vectorRoot(h), WINDOW), claimParams(r, vectorRoot(f), WINDOW), recordsOf(r), signersOf(r)
        );
        stepData = abi.encode(stepFor(r, FAULT_CHUNK));
        for (uint256 j = 0; j < 3; ++j) {
            honestLeaves[j] = leafOf(h, j);
            faultyLeaves[j] = leafOf(f, j);
            honestProofs[j] = proofOf(h, j);
            faultyProofs[j] = proofOf(f, j);
        }
    }

    function actorsList() public view returns (address[] memory a) {
        a = new address[](3);
        for (uint256 i = 0; i < 3; ++i) {
            a[i] = actors[i];
        }
    }

    function claimCount() external view returns (uint256) {
        return claimFaulty.length;
    }

    function isFaulty(uint256 claimId) external view returns (bool) {
        return claimFaulty[claimId];
    }

    function roll(uint256 blocks) external {
        vm.roll(block.number + bound(blocks, 1, 8));
    }

    function post(uint256 who, bool faulty) external {
        (
            FaultGames.ClaimParams memory ph,
            FaultGames.ClaimParams memory pf,
            FaultGames.Records memory rec,
            FaultGames.Signers memory sig
        ) = abi.decode(params, (FaultGames.ClaimParams, FaultGames.ClaimParams, FaultGames.Records, FaultGames.Signers));
        address a = actors[who % 3];
        vm.deal(a, a.balance + CLAIM_BOND);
        vm.prank(a);
        games.postClaim{value: CLAIM_BOND}(faulty ? pf : ph, rec, sig, new uint256[](1));
        claimFaulty.push(faulty);
        paidIn += CLAIM_BOND;
    }

    function open(uint256 who, uint256 claimSeed, uint256 jSeed) external {
        if (claimFaulty.length == 0) return;
        address a = actors[who % 3];
        vm.deal(a, a.balance + GAME_BOND);
        vm.prank(a);
        uint256 cid = claimSeed % claimFaulty.length;
        uint256 gid = games.openLeaf{value: GAME_BOND}(cid, jSeed % 3);
        paidIn += GAME_BOND;
        // an honest submitter is online: it answers in the same block (a silent one loses on
        // its clock, by design); a faulty one answers when `reveal` is called, or never
        if (!claimFaulty[cid]) games.revealLeaf(gid, honestLeaves[jSeed % 3], honestProofs[jSeed % 3]);
    }

    function reveal(uint256 gameSeed) external {
        (bool ok, uint256 gid) = _gameId(gameSeed);
        if (!ok) return;
        FaultGames.Game memory g = games.game(gid);
        bool f = claimFaulty[g.claimId];
        games.revealLeaf(gid, f ? faultyLeaves[g.j] : honestLeaves[g.j], f ? faultyProofs[g.j] : honestProofs[g.j]);
    }

    function prove(uint256 gameSeed) external {
        (bool ok, uint256 gid) = _gameId(gameSeed);
        if (!ok) return;
        FaultGames.Game memory g = games.game(gid);
        OneStep.Step memory s = abi.decode(stepData, (OneStep.Step));
        s.j = g.j; // on another chunk the step mismatches or finds the chunk correct
        vm.prank(g.challenger);
        games.prove(gid, s);
    }

    function timeout(uint256 gameSeed) external {
        (bool ok, uint256 gid) = _gameId(gameSeed);
        if (!ok) return;
        games.timeout(gid);
    }

    function release(uint256 claimSeed) external {
        if (claimFaulty.length == 0) return;
        games.release(claimSeed % claimFaulty.length);
    }

    function withdraw(uint256 who) external {
        address a = actors[who % 3];
        uint256 amount = games.credits(a);
        vm.prank(a);
        games.withdraw();
        withdrawn += amount;
    }

    function _gameId(uint256 seed) private view returns (bool, uint256) {
        // games are counted by probing: FaultGames has no getter for their number
        uint256 n = gameCount();
        if (n == 0) return (false, 0);
        return (true, seed % n);
    }

    function gameCount() public view returns (uint256 n) {
        while (true) {
            try games.game(n) returns (FaultGames.Game memory) {
                ++n;
            } catch {
                return n;
            }
        }
    }
}

/// @title FaultGamesInvariantTest
/// @notice After any sequence of handler calls: FaultGames holds exactly the credits it owes
///         plus the bonds of live claims and open games (and what was paid in minus what was
///         withdrawn); an honest claim whose submitter answers is never refuted.
contract FaultGamesInvariantTest is FaultProofFixture {
    FaultGamesHandler internal handler;

    function setUp() public {
        deployGames();
        handler = new FaultGamesHandler(games);
        bytes4[] memory selectors = new bytes4[](10);
        selectors[0] = FaultGamesHandler.roll.selector;
        selectors[1] = FaultGamesHandler.post.selector;
        selectors[2] = FaultGamesHandler.open.selector;
        selectors[3] = FaultGamesHandler.open.selector;
        selectors[4] = FaultGamesHandler.reveal.selector;
        selectors[5] = FaultGamesHandler.reveal.selector;
        selectors[6] = FaultGamesHandler.prove.selector;
        selectors[7] = FaultGamesHandler.timeout.selector;
        selectors[8] = FaultGamesHandler.release.selector;
        selectors[9] = FaultGamesHandler.withdraw.selector;
        targetContract(address(handler));
        targetSelector(FuzzSelector({addr: address(handler), selectors: selectors}));
    }

    function invariant_balanceIsCreditsPlusBondsHeld() public view {
        uint256 held = creditsOf(handler.actorsList());
        uint256 claims = handler.claimCount();
        for (uint256 c = 0; c < claims; ++c) {
            FaultGames.Claim memory cl = games.claim(c);
            if (!cl.refuted && !cl.released) held += cl.bond;
        }
        uint256 n = handler.gameCount();
        for (uint256 g = 0; g < n; ++g) {
            if (games.game(g).turn != FaultGames.Turn.Over) held += GAME_BOND;
        }
        assertEq(address(games).balance, held, "balance = credits + live claim bonds + open game bonds");
        assertEq(address(games).balance, handler.paidIn() - handler.withdrawn(), "paid in - withdrawn");
    }

    function invariant_honestClaimNeverRefuted() public view {
        uint256 claims = handler.claimCount();
        for (uint256 c = 0; c < claims; ++c) {
            if (!handler.isFaulty(c)) assertFalse(games.refuted(c), "an honest claim was refuted");
        }
    }
}
