"""Chunk Merkle commitments: Python (protocol/merkle.py) and Solidity (ChunkMerkle.sol via
OneStep's pure wrappers) agree on leaves, nodes, roots and proofs of random vectors,
including odd chunk counts and a last partial chunk; forged proofs are refused by both."""

from __future__ import annotations

import numpy as np
import pytest

from adapters.chain import Chain
from adapters.faultproof import OneStepContract
from protocol.merkle import (
    CHUNK,
    EMPTY,
    ChunkTree,
    chunk_bytes,
    chunk_count,
    chunk_values,
    leaf_hash,
    node_hash,
    root_of,
    tree_depth,
    vector_root,
    verify_chunk,
)


@pytest.fixture
def one_step(chain: Chain) -> OneStepContract:
    return OneStepContract.deploy(chain, chain.accounts[0])


def _rand(rng: np.random.Generator, d: int) -> np.ndarray:
    return rng.integers(-(2**31), 2**31, size=d, dtype=np.int64).astype(np.int32)


def test_byte_layout_is_pinned() -> None:
    """The exact bytes of a leaf, a node and a root (a change here breaks every proof)."""
    payload = chunk_bytes([1, -1, 2**31 - 1, -(2**31)])
    assert payload[:16] == bytes.fromhex("00000001ffffffff7fffffff80000000")
    assert payload[16:] == bytes(1024 - 16)
    from eth_utils.crypto import keccak

    assert leaf_hash(payload) == keccak(b"\x00" + payload)
    a, b = b"\x0a" * 32, b"\x0b" * 32
    assert node_hash(a, b) == keccak(b"\x01" + a + b)
    assert root_of(300, a) == keccak(b"\x02" + (300).to_bytes(8, "big") + a)
    # two chunks: top = node(leaf0, leaf1); the partial second chunk is zero-padded
    q = np.arange(300, dtype=np.int32)
    t = ChunkTree(q)
    want_top = node_hash(leaf_hash(chunk_bytes(q[:256])), leaf_hash(chunk_bytes(q[256:])))
    assert t.root == root_of(300, want_top)
    # three chunks: the fourth slot is the empty hash
    q3 = np.arange(600, dtype=np.int32)
    leaves = [leaf_hash(chunk_bytes(q3[i * 256 : (i + 1) * 256])) for i in range(3)]
    top3 = node_hash(node_hash(leaves[0], leaves[1]), node_hash(leaves[2], EMPTY))
    assert vector_root(q3) == root_of(600, top3)


@pytest.mark.parametrize("d", [0, 1, 255, 256, 257, 511, 512, 513, 769, 1280, 1500, 2049])
def test_python_and_solidity_roots_agree(one_step: OneStepContract, d: int) -> None:
    rng = np.random.default_rng(d)
    q = _rand(rng, d)
    t = ChunkTree(q)
    n = chunk_count(d)
    packed = b"".join(chunk_bytes(chunk_values(q, j)) for j in range(n))
    assert one_step.vector_root(packed, d) == t.root
    assert t.depth == tree_depth(d)
    for j in sorted({0, n // 2, n - 1} if n else set()):
        payload = chunk_bytes(chunk_values(q, j))
        leaf = one_step.leaf_hash(payload)
        assert leaf == leaf_hash(payload) == t.leaves[j]
        proof = t.proof(j)
        assert verify_chunk(t.root, d, j, leaf, proof)
        assert one_step.verify_chunk(t.root, d, j, leaf, proof)


def test_forged_openings_are_refused_by_both(one_step: OneStepContract) -> None:
    """Forged openings (wrong index, wrong length, wrong sibling, node as leaf, wrong d)."""
    rng = np.random.default_rng(7)
    d = 5 * CHUNK + 17  # six chunks, the last partial
    q = _rand(rng, d)
    t = ChunkTree(q)
    j = 5
    leaf, proof = t.leaves[j], t.proof(j)
    bad = [
        (t.root, d, 4, leaf, proof),  # another index
        (t.root, d, j, leaf, proof[:-1]),  # short proof
        (t.root, d, j, leaf, [*proof, EMPTY]),  # long proof
        (t.root, d, j, leaf, [EMPTY, *proof[1:]]),  # wrong sibling
        (t.root, d, j + 2, EMPTY, t.proof(j)),  # an empty slot opened as a leaf
        (t.root, d - 17, j, leaf, proof),  # the length is bound into the root
        (t.root, d, 1, t.node(1, 0), t.proof(1)[1:]),  # a node passed off as a leaf
    ]
    for args in bad:
        assert not verify_chunk(*args)
        assert not one_step.verify_chunk(*args)
    assert one_step.verify_chunk(t.root, d, j, leaf, proof)
    with pytest.raises(IndexError):
        t.proof(6)
    assert chunk_values(q, 5)[17:].tolist() == [0] * (CHUNK - 17)
