// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title OneStepMath
/// @notice One coordinate chunk of a coordinate-wise aggregation rule, recomputed natively:
///         new[t] = sat32(prev[t] + delta[t]) for every lane t of the chunk inside the vector.
///         Bit-identical to the Python rules (aggregators/fedavg.py, aggregators/robust.py);
///         tests/test_fault_onestep.py and scripts/fuzz_onestep.py compare both.
/// @dev Rules: FEDAVG / FEDPROX: delta = round_half_even(sum_k w_k x_k / sum_k w_k) (0 when
///      the weights sum to 0); MEDIAN: the mean of the middle one (odd K) or two (even K)
///      sorted values; TRIMMED_MEAN: the mean of sorted positions [b, K - b) with
///      b = floor(K * betaNum / betaDen). Every mean rounds half to even; every result
///      saturates to [-2**31, 2**31 - 1]; K = 0 carries the previous value forward.
///      Median and trimmed mean do not sort: the caller supplies, per lane, a permutation of
///      the K inputs in ascending order (2-byte big-endian indices, lane-major) and the
///      library verifies it in O(K) (every index once, values non-decreasing).
///      Padding lanes (past the vector's end) are left 0 in the output whatever the inputs.
library OneStepMath {
    uint8 internal constant FEDAVG = 0;
    uint8 internal constant FEDPROX = 1;
    uint8 internal constant MEDIAN = 2;
    uint8 internal constant TRIMMED_MEAN = 3;

    int256 internal constant INT32_MIN = -(2 ** 31);
    int256 internal constant INT32_MAX = 2 ** 31 - 1;
    /// @notice Largest weight a step accepts (num_samples are uint64 on-chain).
    uint256 internal constant MAX_WEIGHT = 2 ** 64 - 1;
    /// @notice Largest number of inputs (2-byte witness indices).
    uint256 internal constant MAX_INPUTS = 65_535;

    /// @notice `rule` is not one of FEDAVG, FEDPROX, MEDIAN, TRIMMED_MEAN.
    error UnknownRule(uint8 rule);
    /// @notice The trimmed-mean fraction betaNum / betaDen is not in [0, 1/2).
    error BadRuleParams(uint256 betaNum, uint256 betaDen);
    /// @notice A weight above MAX_WEIGHT.
    error WeightTooLarge(uint256 index, uint256 weight);
    /// @notice More than MAX_INPUTS inputs, or weights and chunks of different counts.
    error BadInputCount(uint256 chunks, uint256 weights);
    /// @notice An input or previous-state chunk that is not 1024 bytes.
    error BadChunk(uint256 index, uint256 length);
    /// @notice The order witness is malformed at `lane`, sorted `position`.
    error BadWitness(uint256 lane, uint256 position);
    /// @notice The order witness has the wrong length.
    error BadWitnessLength(uint256 length, uint256 expected);

    /// @notice Saturate to int32.
    function sat32(int256 v) internal pure returns (int256) {
        if (v > INT32_MAX) return INT32_MAX;
        if (v < INT32_MIN) return INT32_MIN;
        return v;
    }

    /// @notice num / den rounded to the nearest integer, ties to even (den > 0).
    function divHalfEven(int256 num, uint256 den) internal pure returns (int256 q) {
        int256 d = int256(den);
        q = num / d;
        int256 r = num % d;
        if (r < 0) {
            q -= 1;
            r += d;
        }
        // r in [0, d): round up when r > d - r, or on a tie when q is odd
        if (r > d - r || (r == d - r && q & 1 == 1)) q += 1;
    }

    /// @notice Lane `t` of a 1024-byte chunk in calldata, sign-extended.
    function laneAt(bytes calldata c, uint256 t) internal pure returns (int256 v) {
        assembly ("memory-safe") {
            v := signextend(3, shr(224, calldataload(add(c.offset, shl(2, t)))))
        }
    }

    function _laneOff(uint256 off, uint256 t) private pure returns (int256 v) {
        assembly ("memory-safe") {
            v := signextend(3, shr(224, calldataload(add(off, shl(2, t)))))
        }
    }

    function _put(bytes memory out, uint256 t, int256 v) private pure {
        // Lanes are written in ascending order: each 32-byte store also zeroes the next
        // 28 bytes, which later lanes overwrite (the buffer has 28 bytes of slack).
        assembly ("memory-safe") {
            mstore(add(add(out, 32), shl(2, t)), shl(224, and(v, 0xffffffff)))
        }
    }

    /// @notice Sum over the first `valid` lanes of (new - prev)**2, exact: each difference of
    ///         two int32 is below 2**33 in magnitude, so 256 squares stay below 2**74.
    function chunkNormSq(bytes calldata prev, bytes calldata nw, uint256 valid)
        internal
        pure
        returns (uint256 acc)
    {
        // INVARIANT: both chunks are one 1024-byte chunk.
        if (prev.length != 1024) revert BadChunk(type(uint256).max, prev.length);
        if (nw.length != 1024) revert BadChunk(0, nw.length);
        if (valid > 256) valid = 256;
        assembly ("memory-safe") {
            let po := prev.offset
            let no := nw.offset
            for {
                let t := 0
            } lt(t, valid) {
                t := add(t, 1)
            } {
                let sh := shl(2, t)
                let dlt := sub(
                    signextend(3, shr(224, calldataload(add(no, sh)))),
                    signextend(3, shr(224, calldataload(add(po, sh))))
                )
                acc := add(acc, mul(dlt, dlt))
            }
        }
    }

    /// @notice Trimmed-mean positions [lo, hi) of K sorted values for `rule`.
    function slice(
        uint8 rule,
        uint256 k,
        uint256 betaNum,
        uint256 betaDen
    ) internal pure returns (uint256 lo, uint256 hi) {
        if (rule == MEDIAN) return ((k - 1) / 2, k / 2 + 1);
        // INVARIANT: 0 <= beta < 1/2, so 2b < K and the slice is never empty.
        if (betaDen == 0 || betaNum >= betaDen || 2 * betaNum >= betaDen) {
            revert BadRuleParams(betaNum, betaDen);
        }
        uint256 b = (k * betaNum) / betaDen;
        return (b, k - b);
    }

    /// @notice The new chunk (1024 bytes, padding lanes 0) from the previous state's chunk
    ///         and the K input chunks; `valid` lanes lie inside the vector.
    function stepChunk(
        uint8 rule,
        uint256 betaNum,
        uint256 betaDen,
        uint256 valid,
        bytes calldata prev,
        bytes[] calldata xs,
        uint256[] calldata w,
        bytes calldata witness
    ) internal pure returns (bytes memory) {
        if (rule > TRIMMED_MEAN) revert UnknownRule(rule);
        // INVARIANT: the previous state's chunk is one 1024-byte chunk.
        if (prev.length != 1024) revert BadChunk(type(uint256).max, prev.length);
        uint256[] memory offs = _offsets(xs, w.length);
        if (valid > 256) valid = 256;
        if (rule == FEDAVG || rule == FEDPROX) {
            return _weightedMean(valid, _offset(prev), offs, w);
        }
        return _sorted(rule, betaNum, betaDen, valid, _offset(prev), offs, witness);
    }

    function _sorted(
        uint8 rule,
        uint256 betaNum,
        uint256 betaDen,
        uint256 valid,
        uint256 prev,
        uint256[] memory offs,
        bytes calldata witness
    ) private pure returns (bytes memory) {
        uint256 k = offs.length;
        // INVARIANT: one K-permutation of 2-byte indices per valid lane.
        if (witness.length != valid * k * 2) revert BadWitnessLength(witness.length, valid * k * 2);
        (uint256 lo, uint256 hi) = k == 0 ? (0, 0) : slice(rule, k, betaNum, betaDen);
        // lo, hi, K < 2**16: packed to keep the stack shallow
        return _sortedMean(lo | (hi << 64) | (k << 128), valid, prev, offs, _offset(witness));
    }

    function _offsets(bytes[] calldata xs, uint256 nw) private pure returns (uint256[] memory offs) {
        uint256 k = xs.length;
        // INVARIANT: one weight per input, at most MAX_INPUTS inputs, 1024-byte chunks.
        if (k > MAX_INPUTS || nw != k) revert BadInputCount(k, nw);
        offs = new uint256[](k);
        for (uint256 i = 0; i < k; ++i) {
            if (xs[i].length != 1024) revert BadChunk(i, xs[i].length);
            offs[i] = _offset(xs[i]);
        }
    }

    function _offset(bytes calldata c) private pure returns (uint256 off) {
        assembly ("memory-safe") {
            off := c.offset
        }
    }

    function _newOut() private pure returns (bytes memory out) {
        out = new bytes(1024 + 28);
        assembly ("memory-safe") {
            mstore(out, 1024)
        }
    }

    function _weightedMean(
        uint256 valid,
        uint256 prev,
        uint256[] memory offs,
        uint256[] calldata w
    ) private pure returns (bytes memory out) {
        uint256 total = 0;
        for (uint256 i = 0; i < w.length; ++i) {
            // INVARIANT: weights < 2**64 and K < 2**16 keep |sum w x| < 2**111 (no overflow).
            if (w[i] > MAX_WEIGHT) revert WeightTooLarge(i, w[i]);
            total += w[i];
        }
        out = _newOut();
        for (uint256 t = 0; t < valid; ++t) {
            int256 delta = total == 0 ? int256(0) : divHalfEven(_dot(offs, w, t), total);
            _put(out, t, sat32(_laneOff(prev, t) + delta));
        }
    }

    function _dot(
        uint256[] memory offs,
        uint256[] calldata w,
        uint256 t
    ) private pure returns (int256 acc) {
        uint256 k = offs.length;
        assembly ("memory-safe") {
            let o := add(offs, 32)
            let wp := w.offset
            let sh := shl(2, t)
            for {
                let i := 0
            } lt(i, k) {
                i := add(i, 1)
            } {
                let x := signextend(3, shr(224, calldataload(add(mload(add(o, shl(5, i))), sh))))
                acc := add(acc, mul(x, calldataload(add(wp, shl(5, i)))))
            }
        }
    }

    function _sortedMean(
        uint256 ctx,
        uint256 valid,
        uint256 prev,
        uint256[] memory offs,
        uint256 wo
    ) private pure returns (bytes memory out) {
        uint256 om;
        {
            uint256[] memory mark = new uint256[](offs.length);
            assembly ("memory-safe") {
                om := or(add(offs, 32), shl(128, add(mark, 32)))
            }
        }
        out = _newOut();
        for (uint256 t = 0; t < valid; ++t) {
            _put(out, t, sat32(_laneOff(prev, t) + _sortedDelta(ctx, om, wo, t)));
        }
    }

    /// @dev round_half_even(mean of sorted positions [lo, hi)) of lane t (0 when K = 0);
    ///      ctx = lo | hi << 64 | K << 128, om = offs data | mark data << 128.
    function _sortedDelta(uint256 ctx, uint256 om, uint256 wo, uint256 t) private pure returns (int256) {
        uint256 k = ctx >> 128;
        if (k == 0) return 0;
        uint256 lo = ctx & 0xffffffffffffffff;
        uint256 hi = (ctx >> 64) & 0xffffffffffffffff;
        (int256 sum, uint256 bad) =
            _sortedSum(lo, hi, t, k, om & type(uint128).max, om >> 128, wo + 2 * t * k);
        // INVARIANT: the witness names every input exactly once per lane, in non-decreasing
        // order of value (`bad`: the first sorted position that breaks it).
        if (bad != type(uint256).max) revert BadWitness(t, bad);
        return divHalfEven(sum, hi - lo);
    }

    /// @dev Sum of sorted positions [lo, hi) of lane t, verifying the lane's order witness:
    ///      every index below K, named once (a per-lane stamp t + 1 in `mark`), values
    ///      non-decreasing. `o` and `m` point at the data of `offs` and `mark`; `base` is the
    ///      calldata offset of the lane's K indices.
    function _sortedSum(
        uint256 lo,
        uint256 hi,
        uint256 t,
        uint256 k,
        uint256 o,
        uint256 m,
        uint256 base
    ) private pure returns (int256 sum, uint256 bad) {
        bad = type(uint256).max;
        assembly ("memory-safe") {
            let last := 0
            for {
                let i := 0
            } lt(i, k) {
                i := add(i, 1)
            } {
                let idx := shr(240, calldataload(add(base, shl(1, i))))
                if iszero(lt(idx, k)) {
                    bad := i
                    break
                }
                if eq(mload(add(m, shl(5, idx))), add(t, 1)) {
                    bad := i
                    break
                }
                mstore(add(m, shl(5, idx)), add(t, 1))
                let x := signextend(3, shr(224, calldataload(add(mload(add(o, shl(5, idx))), shl(2, t)))))
                if and(gt(i, 0), slt(x, last)) {
                    bad := i
                    break
                }
                last := x
                if and(iszero(lt(i, lo)), lt(i, hi)) {
                    sum := add(sum, x)
                }
            }
        }
    }
}
