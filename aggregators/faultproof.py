"""The one-step fault proof's pure core: which chunk a step recomputes, with the real rule.

A one-step check (``contracts/OneStep.sol``) recomputes chunk ``j`` of the new state from
chunk ``j`` of each included update and chunk ``j`` of the previous state. The coordinate-wise
rules in scope (FedAvg, FedProx, Median, Trimmed mean) are local to each coordinate, so the
chunk of the full aggregate equals the rule run on the chunk's columns alone;
:func:`reference_chunk` does exactly that with the real rule classes, and
:func:`order_witness` builds the O(K) order witness median and trimmed mean need (per lane,
the inputs' indices in ascending value order). :func:`step_args` assembles the full argument
of ``OneStep.step`` from the committed vectors (openings included).

Pure: numpy, the rules and ``protocol.merkle``; no chain access (``adapters.onestep`` is the
thin contract wrapper).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from eth_abi.abi import encode as abi_encode
from eth_utils.crypto import keccak
from numpy.typing import ArrayLike, NDArray

from aggregators.base import MAX_VALUE_BOUND, AggregationInput
from aggregators.registry import make_rule
from aggregators.robust import beta_fraction
from protocol.errors import RuleParameterError
from protocol.merkle import (
    CHUNK,
    ChunkTree,
    chunk_bytes,
    chunk_count,
    chunk_values,
    norm_leaf,
)

__all__ = [
    "DESCENT_STRIDE",
    "FEDAVG",
    "FEDPROX",
    "MEDIAN",
    "RULE_IDS",
    "TRIMMED_MEAN",
    "StepRule",
    "descent_nodes",
    "descent_pick",
    "differing_chunks",
    "excluded_hash",
    "excluded_words",
    "fault_params_hash",
    "norm_step_args",
    "norm_sums",
    "norm_tree",
    "order_witness",
    "reference_chunk",
    "step_args",
    "valid_lanes",
]

FEDAVG: Final = 0
FEDPROX: Final = 1
MEDIAN: Final = 2
TRIMMED_MEAN: Final = 3
#: Rule name -> ``OneStepMath`` rule id (the rules a one-step proof covers).
RULE_IDS: Final = {
    "fedavg": FEDAVG,
    "fedprox": FEDPROX,
    "median": MEDIAN,
    "trimmed_mean": TRIMMED_MEAN,
}


@dataclass(frozen=True)
class StepRule:
    """A rule as the step contract sees it: its id and trimmed mean's rational beta."""

    name: str
    params: Mapping[str, Any]
    rule_id: int
    beta_num: int = 0
    beta_den: int = 1

    @classmethod
    def of(cls, name: str, params: Mapping[str, Any] | None = None) -> StepRule:
        """The step form of rule ``name`` (``RuleParameterError`` if out of scope)."""
        if name not in RULE_IDS:
            raise RuleParameterError(
                f"rule {name!r} has no one-step proof yet (in scope: {sorted(RULE_IDS)})"
            )
        rule = make_rule(name, params or {})
        # INVARIANT: execute_round carries a round forward when K is below the rule's minimum,
        # the step only at K = 0: they agree iff the minimum is 1 (a larger one would have to
        # become a claim parameter, docs/fault-proof.md)
        if rule.min_updates() != 1:
            raise RuleParameterError(
                f"rule {name!r} needs {rule.min_updates()} updates: the one-step proof carries "
                "a round forward at K = 0 only"
            )
        p = dict(rule.params)
        num, den = 0, 1
        if name == "trimmed_mean":
            f = beta_fraction(float(p["beta"]))
            num, den = f.numerator, f.denominator
        return cls(name, p, RULE_IDS[name], num, den)

    @property
    def sorted_rule(self) -> bool:
        return self.rule_id in (MEDIAN, TRIMMED_MEAN)


def valid_lanes(d: int, j: int) -> int:
    """Coordinates of chunk ``j`` inside a ``d``-vector (the rest is padding)."""
    return max(0, min(CHUNK, d - j * CHUNK))


def reference_chunk(
    rule: StepRule,
    prev: ArrayLike,
    inputs: ArrayLike,
    weights: Sequence[int],
    valid: int = CHUNK,
) -> NDArray[np.int64]:
    """Chunk of the new state computed by the real Python rule: the rule aggregated over the
    ``valid`` lanes of the ``(K, 256)`` input chunk and the 256-lane previous chunk; padding
    lanes are 0. ``K = 0`` or all-zero weights carry ``prev`` forward (as on-chain)."""
    p = np.asarray(prev, dtype=np.int64)
    x = np.asarray(inputs, dtype=np.int32).reshape(-1, CHUNK)
    out = np.zeros(CHUNK, dtype=np.int64)
    w = [int(v) for v in weights]
    if valid == 0:
        return out
    if x.shape[0] == 0 or (rule.rule_id in (FEDAVG, FEDPROX) and sum(w) == 0):
        out[:valid] = p[:valid]
        return out
    agg = make_rule(rule.name, rule.params).aggregate(
        AggregationInput(
            global_params=np.ascontiguousarray(p[:valid]),
            updates=np.ascontiguousarray(x[:, :valid]),
            num_samples=np.asarray(w, dtype=np.int64),
            value_bound=MAX_VALUE_BOUND,
        )
    )
    out[:valid] = agg.params
    return out


def order_witness(inputs: ArrayLike, valid: int = CHUNK) -> bytes:
    """Per lane ``t < valid``, the input indices in ascending value order (ties by index),
    each a 2-byte big-endian index, lane-major: ``valid * K * 2`` bytes."""
    x = np.asarray(inputs, dtype=np.int32).reshape(-1, CHUNK)
    if x.shape[0] == 0 or valid == 0:
        return b""
    order = np.argsort(x[:, :valid].T, axis=1, kind="stable")  # (valid, K)
    return np.ascontiguousarray(order.astype(">u2")).tobytes()


def step_args(
    rule: StepRule,
    j: int,
    prev_state: ArrayLike,
    updates: Sequence[ArrayLike],
    weights: Sequence[int],
    *,
    prev_tree: ChunkTree | None = None,
    trees: Sequence[ChunkTree] | None = None,
) -> tuple[Any, ...]:
    """The ``OneStep.Step`` tuple for chunk ``j``: openings of the previous state and of each
    update's chunk, the weights, and (median, trimmed mean) the order witness."""
    prev_v = np.asarray(prev_state)
    d = int(prev_v.size)
    if not 0 <= j < chunk_count(d):
        raise IndexError(f"chunk {j} out of range for d={d}")
    pt = prev_tree or ChunkTree(prev_v)
    ts = list(trees) if trees is not None else [ChunkTree(np.asarray(u)) for u in updates]
    chunks = np.stack([chunk_values(u, j) for u in updates]) if updates else np.zeros((0, CHUNK))
    witness = order_witness(chunks, valid_lanes(d, j)) if rule.sorted_rule else b""
    return (
        rule.rule_id,
        d,
        rule.beta_num,
        rule.beta_den,
        j,
        pt.root,
        chunk_bytes(chunk_values(prev_v, j)),
        pt.proof(j),
        [t.root for t in ts],
        [int(w) for w in weights],
        [chunk_bytes(c) for c in chunks],
        [t.proof(j) for t in ts],
        witness,
    )


def norm_sums(prev_state: ArrayLike, new_state: ArrayLike) -> list[int]:
    """The stopping rule's prefix sums: ``S_j = sum over chunks i <= j of sum (new - prev)**2``
    (exact integers; ``S_{n-1}`` is the round's squared update norm, ``delta_norm_sq``)."""
    p = np.asarray(prev_state, dtype=np.int64)
    q = np.asarray(new_state, dtype=np.int64)
    if p.shape != q.shape or p.ndim != 1:
        raise ValueError(f"state shapes differ: {p.shape} and {q.shape}")
    out, acc = [], 0
    for j in range(chunk_count(int(p.size))):
        delta = (q[j * CHUNK : (j + 1) * CHUNK] - p[j * CHUNK : (j + 1) * CHUNK]).tolist()
        acc += sum(int(x) * int(x) for x in delta)
        out.append(acc)
    return out


def norm_tree(prev_state: ArrayLike, new_state: ArrayLike) -> ChunkTree:
    """The norm tree of a round: leaf ``j`` is ``norm_leaf(S_j)`` (``protocol.merkle``)."""
    sums = norm_sums(prev_state, new_state)
    return ChunkTree.of_leaves(int(np.asarray(prev_state).size), [norm_leaf(v) for v in sums])


def norm_step_args(
    j: int,
    prev_state: ArrayLike,
    new_state: ArrayLike,
    s_prev: int,
    norm_root: bytes,
    s_prev_proof: Sequence[bytes],
    *,
    prev_tree: ChunkTree | None = None,
    new_tree: ChunkTree | None = None,
) -> tuple[Any, ...]:
    """The ``OneStep.NormStep`` tuple for chunk ``j``: chunk ``j`` of the previous and the
    new state with their openings, and ``S_{j-1} = s_prev`` (0 for ``j = 0``) with its proof
    against the claim's ``norm_root`` (a challenger takes it from the submitter's
    ``NormLeavesRevealed``: it knows only the honest norm tree)."""
    p, q = np.asarray(prev_state), np.asarray(new_state)
    d = int(p.size)
    if not 0 <= j < chunk_count(d):
        raise IndexError(f"chunk {j} out of range for d={d}")
    pt = prev_tree or ChunkTree(p)
    nt = new_tree or ChunkTree(q)
    return (
        d,
        j,
        pt.root,
        chunk_bytes(chunk_values(p, j)),
        pt.proof(j),
        nt.root,
        chunk_bytes(chunk_values(q, j)),
        nt.proof(j),
        norm_root,
        int(s_prev) if j else 0,
        list(s_prev_proof) if j else [],
    )


def excluded_words(excluded: Sequence[int], n: int) -> list[int]:
    """The claim's excluded bitmap: bit ``i % 256`` of word ``i // 256`` for each excluded
    record index ``i`` (``ceil(n / 256)`` words for ``n`` records)."""
    words = [0] * (-(-n // 256))
    for i in excluded:
        if not 0 <= i < n:
            raise IndexError(f"excluded record {i} out of range ({n} records)")
        words[i // 256] |= 1 << (i % 256)
    return words


def excluded_hash(words: Sequence[int]) -> bytes:
    """keccak256(abi.encode(uint256[] excluded)): a claim's ``excludedHash`` (FaultGames)."""
    return keccak(abi_encode(["uint256[]"], [list(words)]))


def fault_params_hash(rule: StepRule, dim: int, value_bound: int) -> bytes:
    """keccak256(abi.encode(uint8 rule, uint64 betaNum, uint64 betaDen, uint64 dim, uint256
    valueBound)): the step parameters a task binds its claims to (``setFaultGames``,
    ``FedChainTask.faultParamsHash``; ``FaultGames.claimBinding`` hashes a claim's alike)."""
    return keccak(
        abi_encode(
            ["uint8", "uint64", "uint64", "uint64", "uint256"],
            [rule.rule_id, rule.beta_num, rule.beta_den, int(dim), int(value_bound)],
        )
    )


def differing_chunks(honest: ArrayLike, claimed: ArrayLike) -> list[int]:
    """Chunk indices where a claimed state differs from the honest one (what a challenger
    names in a leaf game); a length mismatch counts every chunk."""
    a, b = np.asarray(honest, dtype=np.int64), np.asarray(claimed, dtype=np.int64)
    if a.shape != b.shape:
        return list(range(chunk_count(max(a.size, b.size))))
    diff = np.flatnonzero(a != b)
    return sorted({int(i) // CHUNK for i in diff})


#: Levels one descent move covers (``FaultGames.DESCENT_STRIDE``): 16 nodes per reveal.
DESCENT_STRIDE: Final = 4


def descent_nodes(tree: ChunkTree, level: int, index: int) -> list[bytes]:
    """The submitter's descent move: the ``2**m`` nodes ``m = min(4, level)`` levels below
    node ``index`` of ``level`` in its own tree, left to right."""
    m = min(DESCENT_STRIDE, level)
    lo = index << m
    return list(tree.levels[level - m][lo : lo + (1 << m)])


def descent_pick(tree: ChunkTree, level: int, index: int, nodes: Sequence[bytes]) -> int | None:
    """The challenger's descent move: the first revealed node that differs from the honest
    ``tree`` (``None`` if all agree: then the claim's subtree is honest here)."""
    for i, (mine, theirs) in enumerate(zip(descent_nodes(tree, level, index), nodes, strict=True)):
        if mine != theirs:
            return i
    return None
