"""Exact integer helpers: rounding divisions, weighted sums, Gram/distance matrices."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregators.base import AggregationInputError, AggregationRangeError
from aggregators.intmath import (
    EXACT_F64,
    div_round_half_even,
    div_round_half_even_f64,
    exact_weighted_sum,
    gram_exact,
    pairwise_sq_dists,
    rint_to_int64,
    to_int32_range,
)


@settings(max_examples=300, deadline=None)
@given(
    nums=st.lists(st.integers(-(2**52) + 2**30, 2**52 - 2**30), min_size=1, max_size=20),
    den=st.integers(1, 2**30),
)
def test_float_division_equals_integer_division(nums: list[int], den: int) -> None:
    a = np.array(nums, dtype=np.int64)
    want = [round(Fraction(x, den)) for x in nums]  # half to even
    assert div_round_half_even(a, den).tolist() == want
    got = div_round_half_even_f64(a.astype(np.float64), den)
    assert got.astype(np.int64).tolist() == want


@pytest.mark.parametrize("den", [1, 2, 3, 7, 2**20 + 1, 2**52 - 1])
def test_division_ties_and_edges(den: int) -> None:
    xs = [
        0,
        1,
        -1,
        den // 2,
        -(den // 2),
        den,
        -den,
        3 * den // 2,
        -(3 * den // 2),
        den * 5 + den // 2,
    ]
    a = np.array(xs, dtype=np.int64)
    want = [round(Fraction(x, den)) for x in xs]
    assert div_round_half_even(a, den).tolist() == want
    if max(abs(x) for x in xs) + den < EXACT_F64:
        assert div_round_half_even_f64(a.astype(np.float64), den).astype(np.int64).tolist() == want


def test_int64_extremes_do_not_overflow() -> None:
    a = np.array([2**63 - 1, -(2**63), 2**62, -(2**62) - 1], dtype=np.int64)
    for den in (1, 3, 2**62, 2**63 - 1):
        assert div_round_half_even(a, den).tolist() == [round(Fraction(int(x), den)) for x in a]
    with pytest.raises(ValueError):
        div_round_half_even(a, 0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), vb_bits=st.sampled_from([2, 10, 20, 22, 23, 26, 30]))
def test_gram_and_distances_exact(seed: int, vb_bits: int) -> None:
    rng = np.random.default_rng(seed)
    vb = 2**vb_bits
    k, d = int(rng.integers(1, 7)), int(rng.integers(1, 30))
    u = rng.integers(-vb, vb + 1, size=(k, d)).astype(np.int32)
    u[0, 0] = -vb
    rows = [[int(x) for x in r] for r in u]
    g = gram_exact(u, vb)
    assert [[int(x) for x in r] for r in g] == [
        [sum(a * b for a, b in zip(ri, rj, strict=True)) for rj in rows] for ri in rows
    ]
    dist = pairwise_sq_dists(u, vb)
    assert [[int(x) for x in r] for r in dist] == [
        [sum((a - b) ** 2 for a, b in zip(ri, rj, strict=True)) for rj in rows] for ri in rows
    ]


def test_gram_many_chunks_and_int64_folding() -> None:
    """d large enough for several exactness-bounded chunks (vb = 2**22: 512 columns each)."""
    rng = np.random.default_rng(1)
    vb = 2**22
    u = rng.integers(-vb, vb + 1, size=(4, 5000)).astype(np.int32)
    u[:, :100] = vb
    want = u.astype(object) @ u.T.astype(object)
    assert (gram_exact(u, vb).astype(object) == want).all()


def test_distances_value_bound_enforced() -> None:
    u = np.array([[5, 0], [0, 0]], dtype=np.int32)
    with pytest.raises(AggregationInputError, match="value_bound"):
        pairwise_sq_dists(u, 4)


def test_weighted_sum_zero_weights_and_empty() -> None:
    u = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert exact_weighted_sum(u, [0, 0, 0], 100).tolist() == [0, 0, 0, 0]
    assert exact_weighted_sum(u, [0, 2, 0], 100).tolist() == (2 * u[1]).tolist()
    assert exact_weighted_sum(np.zeros((2, 0), np.int32), [1, 1], 10).shape == (0,)
    with pytest.raises(ValueError):
        exact_weighted_sum(u, [1, -1, 1], 100)
    with pytest.raises(ValueError):
        exact_weighted_sum(u, [1, 1], 100)


def test_weighted_sum_big_weights_beyond_value_bound_stay_exact() -> None:
    """With sum(w) * 2**31 >= 2**53 the fast path needs the value bound; an entry beyond it
    no longer raises (total execution): that column chunk is summed in Python ints."""
    u = np.array([[2**20 + 1, 3], [0, -(2**31)]], dtype=np.int32)
    got = exact_weighted_sum(u, [2**40, 1], 2**20)
    assert [int(x) for x in got] == [2**40 * (2**20 + 1), 3 * 2**40 - 2**31]
    assert exact_weighted_sum(u[:, :1], [2**10, 1], 2**20).tolist() == [2**10 * (2**20 + 1)]


def test_rint_and_range_helpers() -> None:
    assert rint_to_int64(np.array([0.5, 1.5, 2.5, -0.5, -1.5])).tolist() == [0, 2, 2, 0, -2]
    with pytest.raises(AggregationRangeError, match="not finite"):
        rint_to_int64(np.array([np.nan]))
    with pytest.raises(AggregationRangeError, match="range"):
        rint_to_int64(np.array([1e30]))
    assert to_int32_range(np.array([2**31 - 1, -(2**31)])).dtype == np.int64
    with pytest.raises(AggregationRangeError, match="int32"):
        to_int32_range(np.array([2**31]))


def test_blas_limit_is_reentrant_and_restored() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from aggregators.intmath import blas_single_thread

    def blas_threads() -> list[int]:
        return [
            i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"
        ]

    before = blas_threads()
    with blas_single_thread():
        with blas_single_thread():
            assert all(t == 1 for t in blas_threads())
        assert all(t == 1 for t in blas_threads())
    assert blas_threads() == before
