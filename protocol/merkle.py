"""Chunk Merkle commitments: the one specification of chunking and hashing shared by Python and
Solidity (``contracts/lib/ChunkMerkle.sol`` implements the same bytes; tests compare both).

A quantised vector ``q`` of ``d`` int32 coordinates (a client's delta ``U_i``, or a model state)
is cut into ``n = ceil(d / 256)`` chunks of :data:`CHUNK` = 256 coordinates; the last chunk is
padded with zeros to 256 coordinates. Byte layouts (``‖`` is concatenation):

* chunk bytes: the 256 coordinates as 4-byte **big-endian two's complement** int32, 1024 bytes
  (padding coordinates are 0);
* leaf: ``keccak256(0x00 ‖ chunk bytes)`` (1025 bytes hashed);
* node: ``keccak256(0x01 ‖ left ‖ right)`` (65 bytes hashed);
* tree: ``depth = ceil(log2 n)`` levels (``depth = 0`` for ``n <= 1``); the ``2**depth`` leaf
  slots are filled left to right with the ``n`` leaves, the remaining slots with the empty
  hash ``bytes32(0)`` (no preimage is known, so an empty slot cannot be opened as a leaf);
  ``top`` is the single node at the top (for ``n = 1`` the leaf itself; for ``d = 0`` zero);
* root: ``keccak256(0x02 ‖ uint64_be(d) ‖ top)`` (41 bytes hashed) - the length is bound
  into the root, so a proof also fixes how many coordinates the last chunk holds.

A *norm tree* (the stopping rule's commitment under the fault proof, docs/fault-proof.md) has
the same shape and root domain over ``n`` leaves ``keccak256(0x03 ‖ uint256_be(S_j))``, the
prefix sums of a round's squared update norm per chunk (:func:`norm_leaf`,
:meth:`ChunkTree.of_leaves`).

A proof for chunk ``j`` is the ``depth`` sibling hashes from the leaf upward; bit ``l`` of
``j`` says whether the node at level ``l`` is a right child. The four prefixes keep leaves,
norm leaves, nodes and roots in disjoint domains (a node can never be passed off as a leaf
and vice versa).

Pure functions; numpy and keccak only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
from eth_utils.crypto import keccak
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "CHUNK",
    "CHUNK_BYTES",
    "EMPTY",
    "LEAF_PREFIX",
    "NODE_PREFIX",
    "NORM_PREFIX",
    "ROOT_PREFIX",
    "ChunkTree",
    "chunk_bytes",
    "chunk_count",
    "chunk_values",
    "leaf_hash",
    "node_hash",
    "norm_leaf",
    "root_of",
    "tree_depth",
    "vector_root",
    "verify_chunk",
]

#: Coordinates per chunk.
CHUNK: Final = 256
#: Bytes of one chunk's payload (256 big-endian int32).
CHUNK_BYTES: Final = 4 * CHUNK
LEAF_PREFIX: Final = b"\x00"
NODE_PREFIX: Final = b"\x01"
ROOT_PREFIX: Final = b"\x02"
NORM_PREFIX: Final = b"\x03"
#: Hash of an empty leaf slot.
EMPTY: Final = bytes(32)

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


def chunk_count(d: int) -> int:
    """Number of chunks of a ``d``-coordinate vector: ``ceil(d / 256)``."""
    if d < 0:
        raise ValueError("dimension must be >= 0")
    return -(-d // CHUNK)


def tree_depth(d: int) -> int:
    """Levels of the tree over ``chunk_count(d)`` leaves: ``ceil(log2 n)``, 0 when ``n <= 1``."""
    n = chunk_count(d)
    return 0 if n <= 1 else (n - 1).bit_length()


def _as_int32(q: ArrayLike) -> NDArray[np.int32]:
    a = np.asarray(q)
    if a.ndim != 1:
        raise ValueError("a committed vector is one-dimensional")
    if a.size and (int(a.min()) < _INT32_MIN or int(a.max()) > _INT32_MAX):
        raise ValueError("committed coordinates must fit int32")
    return a.astype(np.int32, copy=False)


def chunk_values(q: ArrayLike, j: int) -> NDArray[np.int32]:
    """Chunk ``j`` of ``q`` as 256 int32 values (zero-padded past the end)."""
    a = _as_int32(q)
    if not 0 <= j < chunk_count(a.size):
        raise IndexError(f"chunk {j} out of range for d={a.size}")
    out = np.zeros(CHUNK, dtype=np.int32)
    part = a[j * CHUNK : (j + 1) * CHUNK]
    out[: part.size] = part
    return out


def chunk_bytes(values: ArrayLike) -> bytes:
    """The 1024-byte payload of one chunk: 256 int32 big-endian (fewer values are zero-padded)."""
    a = _as_int32(values)
    if a.size > CHUNK:
        raise ValueError(f"a chunk holds at most {CHUNK} coordinates")
    out = np.zeros(CHUNK, dtype=">i4")
    out[: a.size] = a
    return out.tobytes()


def leaf_hash(payload: bytes) -> bytes:
    """``keccak256(0x00 ‖ payload)`` for a 1024-byte chunk payload."""
    if len(payload) != CHUNK_BYTES:
        raise ValueError(f"a chunk payload is {CHUNK_BYTES} bytes, got {len(payload)}")
    return keccak(LEAF_PREFIX + payload)


def norm_leaf(s: int) -> bytes:
    """``keccak256(0x03 ‖ uint256_be(s))``: a norm tree's leaf for prefix sum ``s``."""
    if not 0 <= s < 2**256:
        raise ValueError("a norm prefix sum is a uint256")
    return keccak(NORM_PREFIX + s.to_bytes(32, "big"))


def node_hash(left: bytes, right: bytes) -> bytes:
    """``keccak256(0x01 ‖ left ‖ right)``."""
    return keccak(NODE_PREFIX + left + right)


def root_of(d: int, top: bytes) -> bytes:
    """``keccak256(0x02 ‖ uint64_be(d) ‖ top)``: the committed root of a ``d``-vector."""
    if not 0 <= d < 2**64:
        raise ValueError("dimension must fit uint64")
    return keccak(ROOT_PREFIX + d.to_bytes(8, "big") + top)


class ChunkTree:
    """The full tree of one vector: leaves, every level, the root, and proofs."""

    def __init__(self, q: ArrayLike) -> None:
        a = _as_int32(q)
        self.dim = int(a.size)
        n = chunk_count(self.dim)
        padded = np.zeros(n * CHUNK, dtype=">i4")
        padded[: self.dim] = a
        raw = padded.tobytes()
        self._build(
            [keccak(LEAF_PREFIX + raw[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES]) for i in range(n)]
        )

    @classmethod
    def of_leaves(cls, d: int, leaves: Sequence[bytes]) -> ChunkTree:
        """The tree of a ``d``-vector's shape over given leaf hashes (a norm tree)."""
        if len(leaves) != chunk_count(d):
            raise ValueError(f"a d={d} tree has {chunk_count(d)} leaves, got {len(leaves)}")
        tree = cls.__new__(cls)
        tree.dim = d
        tree._build(list(leaves))
        return tree

    def _build(self, leaves: list[bytes]) -> None:
        n = len(leaves)
        self.leaves: list[bytes] = leaves
        self.depth = tree_depth(self.dim)
        level = self.leaves + [EMPTY] * ((1 << self.depth) - n) if n else []
        self.levels: list[list[bytes]] = [level]
        while len(level) > 1:
            level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
            self.levels.append(level)
        top = level[0] if level else EMPTY
        self.top = top
        self.root = root_of(self.dim, top)

    @property
    def num_chunks(self) -> int:
        return len(self.leaves)

    def proof(self, j: int) -> list[bytes]:
        """Sibling hashes of leaf ``j`` from the bottom level up (``depth`` of them)."""
        if not 0 <= j < self.num_chunks:
            raise IndexError(f"chunk {j} out of range ({self.num_chunks} chunks)")
        out = []
        idx = j
        for lvl in range(self.depth):
            out.append(self.levels[lvl][idx ^ 1])
            idx >>= 1
        return out

    def node(self, level: int, index: int) -> bytes:
        """The node at ``level`` (0 = leaves) and ``index`` (from the left)."""
        return self.levels[level][index]


def vector_root(q: ArrayLike) -> bytes:
    """The committed root of ``q`` (see the module docstring)."""
    return ChunkTree(q).root


def verify_chunk(root: bytes, d: int, j: int, leaf: bytes, proof: Sequence[bytes]) -> bool:
    """Whether ``leaf`` is chunk ``j`` of the ``d``-vector committed by ``root``."""
    if not 0 <= j < chunk_count(d) or len(proof) != tree_depth(d):
        return False
    h = leaf
    idx = j
    for sib in proof:
        h = node_hash(sib, h) if idx & 1 else node_hash(h, sib)
        idx >>= 1
    return root_of(d, h) == root
