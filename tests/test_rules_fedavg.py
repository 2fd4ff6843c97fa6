"""FedAvg / FedProx: exactness against a float64 reference, rounding, overflow paths,
byte identity across processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregators.base import AggregationInput
from aggregators.intmath import div_round_half_even, exact_weighted_sum
from aggregators.registry import make_rule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _inp(
    u: np.ndarray, n: np.ndarray, g: np.ndarray | None = None, vb: int = 2**20, fb: int = 16
) -> AggregationInput:
    if g is None:
        g = np.zeros(u.shape[1], np.int64)
    return AggregationInput(g, u.astype(np.int32), n.astype(np.int64), {}, fb, vb)


def _exact_ref(u: np.ndarray, n: np.ndarray) -> list[int]:
    """Independent exact reference with Fractions: round half to even of the weighted mean."""
    tot = sum(int(x) for x in n)
    out = []
    for j in range(u.shape[1]):
        fr = Fraction(sum(int(n[k]) * int(u[k, j]) for k in range(u.shape[0])), tot)
        out.append(round(fr))  # Python round(Fraction) is half-to-even
    return out


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(1, 12),
    d=st.integers(1, 40),
    vb_bits=st.integers(1, 30),
    nmax_bits=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_fedavg_matches_exact_and_float_reference(
    k: int, d: int, vb_bits: int, nmax_bits: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    vb = 2**vb_bits
    u = rng.integers(-vb, vb + 1, size=(k, d)).astype(np.int32)
    n = rng.integers(1, 2**nmax_bits + 1, size=k).astype(np.int64)
    g = rng.integers(-(2**30), 2**30, size=d).astype(np.int64)
    out = make_rule("fedavg").aggregate(_inp(u, n, g, vb))
    assert out.params.dtype == np.int64 and out.state == {} and out.selected is None
    assert (out.params - g).tolist() == _exact_ref(u, n)
    # float64 reference: within 0.5 fixed-point ulp plus the float reference's own error
    ref = (n.astype(np.float64)[:, None] * u.astype(np.float64)).sum(0) / float(n.sum())
    err = np.abs((out.params - g) - ref)
    assert err.max() <= 0.5 + 1e-9 * vb


def test_round_half_to_even_ties() -> None:
    num = np.array([1, 3, 5, -1, -3, -5, 2, -2, 7, -7], np.int64)
    assert div_round_half_even(num, 2).tolist() == [0, 2, 2, 0, -2, -2, 1, -1, 4, -4]
    assert div_round_half_even(np.array([5, -5, 4, -4], np.int64), 3).tolist() == [2, -2, 1, -1]
    obj = np.array([10**30 + 1, -(10**30) - 1], dtype=object)
    assert div_round_half_even(obj, 2).tolist() == [5 * 10**29, -5 * 10**29]
    # huge divisor (> int64) falls back to Python ints
    assert div_round_half_even(np.array([2**62, -(2**62)], np.int64), 2**64).tolist() == [0, 0]
    assert div_round_half_even(np.array([2**62], np.int64), 2**63).tolist() == [0]
    assert div_round_half_even(np.array([3 * 2**61], np.int64), 2**63).tolist() == [1]


def test_fedavg_tie_example() -> None:
    # (1*1 + 1*2) / 2 = 1.5 -> 2 ; (1*1 + 1*0)/2 = 0.5 -> 0 ; (-1 + -2)/2 = -1.5 -> -2
    u = np.array([[1, 1, -1], [2, 0, -2]], np.int32)
    out = make_rule("fedavg").aggregate(_inp(u, np.array([1, 1])))
    assert out.params.tolist() == [2, 0, -2]


@pytest.mark.parametrize("nbits", [20, 34, 45, 62])
def test_weighted_sum_paths_exact(nbits: int) -> None:
    """float64 single limb, split limbs into int64, and Python-int recombination."""
    rng = np.random.default_rng(nbits)
    k, d, vb = 7, 300, 2**30
    u = rng.integers(-vb, vb + 1, size=(k, d)).astype(np.int32)
    u[0, :5] = vb
    u[1, :5] = -vb
    n = rng.integers(2 ** (nbits - 1), 2**nbits, size=k).astype(np.int64)
    got = exact_weighted_sum(u, n, vb)
    want = [sum(int(n[i]) * int(u[i, j]) for i in range(k)) for j in range(d)]
    assert [int(x) for x in got] == want
    out = make_rule("fedavg").aggregate(_inp(u, n, vb=vb))
    assert out.params.tolist() == _exact_ref(u, n)


def test_result_saturates_to_int32() -> None:
    """Total execution: a new global value beyond int32 saturates (it used to raise)."""
    u = np.full((2, 4), 2**30, np.int32)
    u[:, 1] = -(2**30)
    g = np.full(4, 2**31 - 10, np.int64)
    g[1] = -(2**31) + 5
    out = make_rule("fedavg").aggregate(_inp(u, np.array([1, 1]), g, vb=2**30))
    assert out.params.tolist() == [2**31 - 1, -(2**31), 2**31 - 1, 2**31 - 1]


def test_fedprox_aggregates_like_fedavg() -> None:
    rng = np.random.default_rng(3)
    u = rng.integers(-1000, 1000, size=(6, 50)).astype(np.int32)
    n = rng.integers(1, 50, size=6)
    a = make_rule("fedavg").aggregate(_inp(u, n, vb=1000))
    b = make_rule("fedprox", {"mu": "0.3"}).aggregate(_inp(u, n, vb=1000))
    assert np.array_equal(a.params, b.params)
    assert make_rule("fedprox").params == {"mu": 0.01}


def test_chunked_matches_unchunked_large_d() -> None:
    """d spans several column chunks; compare with an exact int64 computation."""
    rng = np.random.default_rng(11)
    k, d, vb = 9, 70_001, 2**16
    u = rng.integers(-vb, vb + 1, size=(k, d)).astype(np.int32)
    n = rng.integers(1, 1000, size=k).astype(np.int64)
    s = (u.astype(np.int64) * n[:, None]).sum(0)
    want = div_round_half_even(s, int(n.sum()))
    out = make_rule("fedavg").aggregate(_inp(u, n, vb=vb))
    assert np.array_equal(out.params, want)


_SUBPROC = r"""
import hashlib, sys
import numpy as np
from aggregators.base import AggregationInput
from aggregators.registry import make_rule
rng = np.random.default_rng(1234)
k, d, vb = 13, 50_003, 2**24
u = rng.integers(-vb, vb + 1, size=(k, d)).astype(np.int32)
n = rng.integers(1, 10**6, size=k).astype(np.int64)
g = rng.integers(-2**28, 2**28, size=d).astype(np.int64)
out = make_rule("fedavg").aggregate(AggregationInput(g, u, n, {}, 16, vb))
print(hashlib.sha256(out.params.astype("<i8").tobytes()).hexdigest())
"""


def test_fedavg_identical_bytes_across_processes() -> None:
    digests = []
    for threads in ("1", "2"):
        env = dict(
            os.environ,
            OMP_NUM_THREADS=threads,
            OPENBLAS_NUM_THREADS=threads,
            MKL_NUM_THREADS=threads,
            PYTHONPATH=ROOT,
        )
        r = subprocess.run(
            [sys.executable, "-c", _SUBPROC],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        digests.append(r.stdout.strip())
    assert digests[0] == digests[1]
    assert len(digests[0]) == 64
    # and equal to this process
    ns: dict[str, object] = {}
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(_SUBPROC, ns)
    assert buf.getvalue().strip() == digests[0]
    assert hashlib.sha256(b"").digest()  # hashlib sanity


def test_huge_weights_and_entries_beyond_value_bound_are_exact() -> None:
    """Total execution: weights large enough for the limb path (sum >= 2**22) with entries
    beyond value_bound give the exact rounded mean instead of raising."""
    rng = np.random.default_rng(22)
    k, d, vb = 5, 700, 2**10
    u = rng.integers(-(2**31), 2**31, size=(k, d), dtype=np.int64).astype(np.int32)
    n = rng.integers(2**30, 2**40, size=k)
    out = make_rule("fedavg").aggregate(_inp(u, n, vb=vb))
    assert out.params.tolist() == _exact_ref(u, n)
