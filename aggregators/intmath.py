"""Exact integer helpers for the aggregation rules.

Everything here is exact: integer arithmetic, or float64 arithmetic on integers where every
intermediate value provably stays below 2**53 in magnitude (then every partial sum is an
integer that float64 represents exactly, so the result does not depend on summation order,
SIMD width, FMA contraction or BLAS thread count). The argument is stated at each use.

Rounding rule (the only one used in fedchain's rules): **round half to even**.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from aggregators.base import INT32_MAX, INT32_MIN, AggregationInputError, AggregationRangeError

__all__ = [
    "EXACT_F64",
    "check_chunk_bound",
    "column_chunks",
    "div_round_half_even",
    "div_round_half_even_f64",
    "exact_weighted_sum",
    "gram_exact",
    "pairwise_sq_dists",
    "rint_to_int64",
    "saturate_int32",
    "to_int32_range",
    "weighted_sum_chunks",
]

#: float64 represents every integer of magnitude <= 2**53 exactly.
EXACT_F64 = 2**53
_INT64_MAX = 2**63 - 1

#: Default number of columns per chunk: K x 4096 float64 stays within L2/L3 for K <= 100.
DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024


def column_chunks(
    k: int, d: int, bytes_per_elem: int = 8, target: int = DEFAULT_CHUNK_BYTES
) -> Iterator[tuple[int, int]]:
    """Yield ``(start, stop)`` column ranges so that a ``k x chunk`` buffer is ~``target`` bytes.

    Chunking only bounds memory and keeps buffers in cache; it never changes results (all
    per-column work is independent and every cross-column sum is exact).
    """
    width = max(256, min(d, target // max(1, k * bytes_per_elem)))
    width = max(1, width)
    for s in range(0, d, width):
        yield s, min(d, s + width)


def check_chunk_bound(chunk: NDArray[Any], value_bound: int) -> None:
    """Raise :class:`AggregationInputError` if any entry of ``chunk`` has ``|q| > value_bound``."""
    if chunk.size and (chunk.max() > value_bound or chunk.min() < -value_bound):
        raise AggregationInputError(f"an update entry exceeds value_bound={value_bound}")


def div_round_half_even(num: NDArray[Any], den: int) -> NDArray[Any]:
    """``num / den`` rounded to the nearest integer, ties to even; ``den > 0`` (Python int).

    ``num`` is an int64 array (any value) or an object array of Python ints. Never overflows:
    ``q = floor(num / den)``, ``r = num - q*den`` in ``[0, den)``, and the comparison
    ``r > den - r`` (i.e. ``2r > den``) avoids forming ``2r``.
    """
    den = int(den)
    if den <= 0:
        raise ValueError("den must be positive")
    if num.dtype == object:
        q = num // den
        r = num - q * den
        up = (r > den - r) | ((r == den - r) & (q % 2 == 1))
        return np.asarray(q + up.astype(np.int64), dtype=object)
    if den > _INT64_MAX:
        # |num| <= 2**63 < den: the quotient is 0 or -1 and r = num + den if num < 0.
        return div_round_half_even(num.astype(object), den)
    num = np.asarray(num, dtype=np.int64)
    q = np.floor_divide(num, den)
    r = num - q * den  # in [0, den): exact in int64
    half = den - r
    up = (r > half) | ((r == half) & ((q & 1) == 1))
    q += up
    return np.asarray(q)


def div_round_half_even_f64(num: NDArray[np.float64], den: int) -> NDArray[np.float64]:
    """``num / den`` rounded half to even, for float64 ``num`` holding exact integers.

    Precondition (callers guarantee it): ``|num| + den < 2**53``. Then: ``q = rint(num/den)``
    is within 1 of the answer (the quotient's relative error is ``2**-53`` and its magnitude
    ``< 2**53 / den``); ``r = num - q*den`` is computed exactly (every value is an integer
    below ``2**53``), and ``2r`` (exact) against ``+-den`` fixes ``q`` by one and settles ties
    toward even - the same integers as :func:`div_round_half_even`, with SIMD float ops.
    """
    dn = float(den)
    q = np.rint(num / dn)
    r2 = (num - q * dn) * 2.0
    half = q * 0.5  # exact
    odd = np.floor(half) != half
    up = (r2 > dn) | ((r2 == dn) & odd)
    down = (r2 < -dn) | ((r2 == -dn) & odd)
    q += up
    q -= down
    return q


def rint_to_int64(x: NDArray[np.float64], what: str = "value") -> NDArray[np.int64]:
    """Round float64 to the nearest integer, ties to even (IEEE ``rint``), as int64.

    ``np.rint`` is exact (the result is an integer-valued float64), so this is deterministic.
    Non-finite values or values outside int64 raise :class:`AggregationRangeError`.
    """
    r = np.rint(x)
    if r.size:
        if not np.isfinite(r).all():
            raise AggregationRangeError(f"{what} is not finite (NaN or Inf)")
        if r.max() >= 2.0**62 or r.min() <= -(2.0**62):
            raise AggregationRangeError(f"{what} is out of the fixed-point range")
    return r.astype(np.int64)


def to_int32_range(params: NDArray[Any], what: str = "new global params") -> NDArray[np.int64]:
    """Check that ``params`` fit int32 and return them as int64.

    Raises :class:`AggregationRangeError` (a clear error, not a silent wrap) otherwise: the
    task's ``frac_bits``/clipping leave too little headroom, or the step diverged.
    """
    if params.size:
        hi, lo = params.max(), params.min()
        if hi > INT32_MAX or lo < INT32_MIN:
            raise AggregationRangeError(
                f"{what} do not fit int32 (range [{lo}, {hi}]): lower frac_bits or the clip bound"
            )
    return np.asarray(params, dtype=np.int64)


def saturate_int32(params: NDArray[Any]) -> NDArray[np.int64]:
    """Clamp ``params`` to ``[INT32_MIN, INT32_MAX]`` and return them as int64.

    Total execution (docs/fault-proof.md): the coordinate-wise rules a one-step fault proof
    replays give every input a defined output, so a new global value outside int32 saturates
    instead of raising - the same rule as ``OneStepMath.sat32`` on-chain. For inputs whose
    result fits int32 (every input that did not raise before) this is the identity.
    """
    if params.dtype == object:
        params = np.asarray([min(max(int(v), INT32_MIN), INT32_MAX) for v in params], np.int64)
    return np.asarray(np.clip(params, INT32_MIN, INT32_MAX), dtype=np.int64)


def _within_bound(block: NDArray[Any], value_bound: int) -> bool:
    return not block.size or (block.max() <= value_bound and block.min() >= -value_bound)


def _exact_column_sum(
    updates: NDArray[np.int32], rows: Sequence[int], weights: Sequence[int], s: int, e: int
) -> NDArray[Any]:
    """``sum_k w_k q_k`` over columns ``[s, e)`` in Python ints (any int32 entries, any weights).

    The slow but total path of :func:`weighted_sum_chunks` for a column chunk holding an entry
    beyond ``value_bound`` when the fast path needs that bound for exactness.
    """
    acc = np.zeros(e - s, dtype=object)
    for i in rows:
        acc = acc + updates[i, s:e].astype(object) * int(weights[i])
    return acc


def _limb_bits(k: int, value_bound: int) -> int:
    """Largest L with ``k * (2**L - 1) * value_bound < 2**53``."""
    bits = 0
    while k * ((1 << (bits + 1)) - 1) * value_bound < EXACT_F64 and bits < 62:
        bits += 1
    return bits


_INT32_ABS_MAX = 2**31  # |q| <= 2**31 for any int32: a bound that needs no checking

# Row block x column chunk of the weighted sum: 16 rows x 64Ki columns of float64 = 8 MiB of
# source streamed as 16 long contiguous runs (prefetch-friendly), 1 MiB of buffer.
_WS_ROWS = 16
_WS_COLS = 1 << 16


class WeightedSumPlan:
    """How :func:`weighted_sum_chunks` computes ``sum_k w_k q_k`` exactly (decided from the
    weights and ``value_bound`` only, never from the platform, so every node takes the same
    path - and every path gives the same exact integers anyway)."""

    def __init__(self, weights: Sequence[int], k: int, value_bound: int) -> None:
        w = [int(x) for x in weights]
        if len(w) != k:
            raise ValueError("one weight per update row is required")
        if any(x < 0 for x in w):
            raise ValueError("weights must be non-negative")
        self.total = sum(w)
        vb = int(value_bound)
        #: every column sum satisfies |S| <= total * vb: int64 result when that fits
        self.fits_int64 = self.total * vb <= _INT64_MAX
        if self.total * _INT32_ABS_MAX < EXACT_F64:
            # exact even for arbitrary int32 entries: no value-bound check needed
            self.bound, self.check = _INT32_ABS_MAX, False
        else:
            self.bound, self.check = vb, True
        if self.total * self.bound < EXACT_F64:
            self.limb_bits = 0
            limbs = [w]
        else:
            # Split every weight into L-bit limbs with k * (2**L - 1) * vb < 2**53, so each
            # limb's weighted sum is again exact in float64; recombine with integers.
            self.limb_bits = _limb_bits(k, vb)
            if self.limb_bits < 1:
                raise AggregationInputError("too many updates for exact aggregation")
            mask = (1 << self.limb_bits) - 1
            nlimbs = max(1, -(-max(w).bit_length() // self.limb_bits))
            limbs = [[(x >> (self.limb_bits * i)) & mask for x in w] for i in range(nlimbs)]
        #: single limb with |S| + total < 2**53: callers may keep S in float64
        self.float_exact = self.limb_bits == 0 and self.total * (self.bound + 1) < EXACT_F64
        # drop rows whose weight is zero (e.g. Multi-Krum's unselected rows)
        self.rows = [i for i in range(k) if w[i] != 0]
        self.dense = len(self.rows) == k
        self.wf = np.array([[limb[i] for i in self.rows] for limb in limbs], dtype=np.float64)


_BLAS_CONTROLLER: Any = None
_BLAS_LOCK = threading.Lock()
_BLAS_USERS = 0
_BLAS_LIMITER: Any = None


@contextlib.contextmanager
def blas_single_thread() -> Iterator[None]:
    """Limit BLAS to one thread while the rules stream small products.

    OpenBLAS multi-threads even small ``gemv``/``syrk`` calls, which here costs more than it
    saves (and collapses when the cores are shared). This only affects speed: every BLAS use
    in the rules is exact (integer-valued float64 below 2**53), so any thread count gives the
    same bytes. Re-entrant and thread-safe (reference-counted: the first user lowers the
    limit, the last one restores it). A no-op when ``threadpoolctl`` is unavailable.
    """
    global _BLAS_CONTROLLER, _BLAS_USERS, _BLAS_LIMITER
    with _BLAS_LOCK:
        if _BLAS_CONTROLLER is None:
            try:
                from threadpoolctl import ThreadpoolController

                _BLAS_CONTROLLER = ThreadpoolController().select(user_api="blas")
            except Exception:  # pragma: no cover - optional speed-up only
                _BLAS_CONTROLLER = False
        if _BLAS_CONTROLLER is not False:
            if _BLAS_USERS == 0:
                _BLAS_LIMITER = _BLAS_CONTROLLER.limit(limits=1)
            _BLAS_USERS += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            if _BLAS_CONTROLLER is not False:
                _BLAS_USERS -= 1
                if _BLAS_USERS == 0 and _BLAS_LIMITER is not None:
                    _BLAS_LIMITER.restore_original_limits()
                    _BLAS_LIMITER = None


_TLS = threading.local()


def work_buffer(name: str, shape: tuple[int, ...], dtype: Any = np.float64) -> NDArray[Any]:
    """A per-thread scratch array (contents undefined), reused across calls.

    Re-allocating multi-MiB scratch buffers on every call costs page faults comparable to the
    work itself at small sizes; caching them per thread keeps rules re-entrant.
    """
    cache: dict[tuple[str, str], NDArray[Any]] | None = getattr(_TLS, "buffers", None)
    if cache is None:
        cache = {}
        _TLS.buffers = cache
    size = int(np.prod(shape, dtype=np.int64))
    key = (name, np.dtype(dtype).str)
    flat = cache.get(key)
    if flat is None or flat.size < size:
        flat = np.empty(max(size, 1), dtype=dtype)
        cache[key] = flat
    return flat[:size].reshape(shape)


def weighted_sum_chunks(
    updates: NDArray[np.int32],
    weights: Sequence[int] | NDArray[np.int64],
    value_bound: int,
    consume: Callable[[int, int, NDArray[Any]], None],
) -> WeightedSumPlan:
    """Call ``consume(start, stop, S)`` with ``S[j] = sum_k weights[k] * updates[k, start+j]``
    exactly, column chunk by column chunk, so consumers finish each chunk while it is in
    cache. ``S`` is float64 holding exact integers when ``plan.float_exact`` (then
    ``|S| + sum(w) < 2**53``; valid only during the call), else int64 when
    ``sum(w) * value_bound < 2**63``, else Python ints. Returns the plan.

    Method: int32 -> float64 conversion of row blocks (exact) and float64 products with the
    weights (BLAS ``gemv``), accumulated over row blocks. Exactness argument: with a bound
    ``B`` on ``|q|`` (``2**31`` - true of any int32 - when ``sum(w) * 2**31 < 2**53``; else
    ``value_bound``, then checked per block), every partial sum of the products
    ``w_k * q_k`` is an integer of magnitude ``<= sum(w) * B``. While that is ``< 2**53`` every
    partial sum is exactly representable, and each float64 operation (multiply, add, fused
    multiply-add) on exactly representable integers with an exactly representable result is
    exact - so the result is the exact integer whatever the summation order, SIMD width or
    thread count. Larger weights are split into limbs (:class:`WeightedSumPlan`).
    """
    k, d = updates.shape
    plan = WeightedSumPlan(list(weights), k, value_bound)
    vb = int(value_bound)
    nrows = len(plan.rows)
    out_dtype: Any = np.int64 if plan.fits_int64 else object
    if nrows == 0 or d == 0:
        for s in range(0, d, _WS_COLS):
            e = min(d, s + _WS_COLS)
            consume(s, e, np.zeros(e - s, dtype=out_dtype))
        return plan
    wlist = [int(x) for x in weights]
    nl = plan.wf.shape[0]
    rows_per_block = min(_WS_ROWS, nrows)
    cols = min(d, _WS_COLS)
    buf = work_buffer("ws.buf", (rows_per_block, cols))
    acc = work_buffer("ws.acc", (nl, cols))
    tmp = work_buffer("ws.tmp", (nl, cols))
    row_idx = np.asarray(plan.rows, dtype=np.intp)
    with blas_single_thread():
        for s in range(0, d, cols):
            e = min(d, s + cols)
            w = e - s
            a = acc[:, :w]
            if plan.check and not all(
                _within_bound(
                    updates[r0 : min(nrows, r0 + _WS_ROWS), s:e]
                    if plan.dense
                    else updates[row_idx[r0 : min(nrows, r0 + _WS_ROWS)], s:e],
                    vb,
                )
                for r0 in range(0, nrows, _WS_ROWS)
            ):
                # an entry beyond value_bound: the limb path would not be exact - total
                # execution computes this column chunk in Python ints instead
                consume(s, e, _exact_column_sum(updates, plan.rows, wlist, s, e))
                continue
            for r0 in range(0, nrows, _WS_ROWS):
                r1 = min(nrows, r0 + _WS_ROWS)
                src = updates[r0:r1, s:e] if plan.dense else updates[row_idx[r0:r1], s:e]
                b = buf[: r1 - r0, :w]
                np.copyto(b, src, casting="unsafe")  # int32 -> float64: exact
                if r0 == 0:
                    np.dot(plan.wf[:, r0:r1], b, out=a)  # exact: see docstring
                else:
                    t = tmp[:, :w]
                    np.dot(plan.wf[:, r0:r1], b, out=t)  # exact: see docstring
                    a += t  # exact: partial sums stay below 2**53
            if plan.float_exact:
                consume(s, e, a[0])
                continue
            ints = a.astype(np.int64)  # integer-valued float64 < 2**53: exact
            if plan.limb_bits == 0:
                consume(s, e, ints[0])
                continue
            out: NDArray[Any]
            if plan.fits_int64:
                # (out << L) + limb stays within +-total*vb < 2**63 at every step
                out = np.zeros(w, dtype=np.int64)
                for i in range(nl - 1, -1, -1):
                    out = (out << plan.limb_bits) + ints[i]
            else:
                out = np.zeros(w, dtype=object)
                for i in range(nl - 1, -1, -1):
                    out = out * (1 << plan.limb_bits) + ints[i].astype(object)
            consume(s, e, out)
    return plan


def exact_weighted_sum(
    updates: NDArray[np.int32],
    weights: Sequence[int] | NDArray[np.int64],
    value_bound: int,
) -> NDArray[Any]:
    """Exact ``sum_k weights[k] * updates[k]`` per column (weights: non-negative ints).

    int64 when ``sum(weights) * value_bound < 2**63`` (the result provably fits), otherwise an
    object array of Python ints. See :func:`weighted_sum_chunks` for the exactness argument.
    """
    d = updates.shape[1]
    fits = sum(int(x) for x in weights) * int(value_bound) <= _INT64_MAX
    out = np.empty(d, dtype=np.int64 if fits else object)

    def put(s: int, e: int, part: NDArray[Any]) -> None:
        out[s:e] = part  # float64 parts hold exact integers < 2**53: exact cast

    weighted_sum_chunks(updates, weights, value_bound, put)
    return out


def gram_exact(
    updates: NDArray[np.int32], value_bound: int, *, check_bound: bool = True
) -> NDArray[Any]:
    """Exact Gram matrix ``G[i, j] = sum_t q[i, t] * q[j, t]`` (object array of Python ints,
    or int64 when ``d * value_bound**2 < 2**63``).

    Method: float64 BLAS ``syrk``-like products on column chunks, each chunk's partial Gram
    exact. Exactness argument: with ``|q| <= vb``, every partial sum of a chunk of ``c``
    columns is an integer of magnitude ``<= c * vb**2``; the chunk width is chosen so that this
    is ``< 2**53``. If ``vb**2 * 256`` already exceeds ``2**53`` (``vb > 2**22.5``), entries are
    split into two limbs ``q = hi * 2**16 + lo`` with ``lo`` in ``[0, 2**16)`` and
    ``|hi| <= 2**15``, so every limb product is ``<= 2**32`` and chunks of up to ``2**20``
    columns stay exact; ``q_i . q_j = 2**32 hi.hi + 2**16 (hi.lo + lo.hi) + lo.lo``.
    Chunk results (exact integers) are accumulated in int64 while provably safe and folded
    into Python ints otherwise.
    """
    k, d = updates.shape
    vb = int(value_bound)
    split = vb * vb * 256 >= EXACT_F64
    prod_bound = (1 << 32) if split else vb * vb
    # columns per chunk: exactness bound and a memory target
    rows = 2 * k if split else k
    cmax = (EXACT_F64 - 1) // prod_bound
    width = max(1, min(cmax, max(256, DEFAULT_CHUNK_BYTES // (8 * rows)), d if d else 1))
    int64_ok = d * vb * vb <= _INT64_MAX
    total: NDArray[Any] = np.zeros((k, k), dtype=np.int64 if int64_ok else object)
    # accumulate chunk Grams in int64 until the running bound could exceed int64, then fold
    running = np.zeros((rows, rows), dtype=np.int64)
    running_bound = 0
    chunk_bound = width * prod_bound
    buf = work_buffer("gram.buf", (rows, width))

    def fold(run: NDArray[np.int64]) -> NDArray[Any]:
        if not split:
            return run
        hh = run[:k, :k].astype(object)
        hl = run[:k, k:].astype(object)
        lh = run[k:, :k].astype(object)
        ll = run[k:, k:].astype(object)
        g = hh * (1 << 32) + (hl + lh) * (1 << 16) + ll
        return np.asarray(g)

    with blas_single_thread():  # see blas_single_thread: threads only cost time here
        for s in range(0, d, width):
            e = min(d, s + width)
            src = updates[:, s:e]
            b = buf[:, : e - s]
            if split:
                if check_bound:
                    check_chunk_bound(src, vb)
                hi = src >> 16  # arithmetic shift: floor division, |hi| <= 2**15
                np.copyto(b[:k], hi, casting="unsafe")
                np.copyto(b[k:], src - (hi << 16), casting="unsafe")  # lo in [0, 2**16)
            else:
                np.copyto(b, src, casting="unsafe")  # exact
                if check_bound:
                    check_chunk_bound(b, vb)  # on the cached copy: cheaper than on src
            g = b @ b.T  # exact: every partial sum <= (e - s) * prod_bound < 2**53
            if running_bound + chunk_bound > _INT64_MAX:
                total = _add_gram(total, fold(running), int64_ok)
                running[...] = 0
                running_bound = 0
            running += g.astype(np.int64)
            running_bound += chunk_bound
    total = _add_gram(total, fold(running), int64_ok)
    return total


def _add_gram(total: NDArray[Any], part: NDArray[Any], int64_ok: bool) -> NDArray[Any]:
    if int64_ok:
        # |G| <= d * vb**2 <= int64 max: the split limbs recombine within range too
        if part.dtype == object:
            part = part.astype(np.int64)
        return np.asarray(total + part)
    return np.asarray(total + part.astype(object))


def pairwise_sq_dists(
    updates: NDArray[np.int32], value_bound: int, *, check_bound: bool = True
) -> NDArray[Any]:
    """Exact squared Euclidean distances ``D[i, j] = ||q_i - q_j||**2`` as a K x K matrix.

    Computed from the exact Gram matrix: ``D = G_ii + G_jj - 2 G_ij``. Returns int64 when
    ``d * (2 * value_bound)**2 < 2**63`` (every distance provably fits), else Python ints.
    """
    d = updates.shape[1]
    g = gram_exact(updates, value_bound, check_bound=check_bound)
    diag = np.diagonal(g).copy()
    if g.dtype != object and d * (2 * value_bound) ** 2 > _INT64_MAX:
        g = g.astype(object)
        diag = diag.astype(object)
    dist = diag[:, None] + diag[None, :] - 2 * g
    return np.asarray(dist)
