"""UnixFS DAG builder and verifier (protocol.unixfs) and content identity (protocol.cid).

The CID vectors below were produced by the js-ipfs 0.66 daemon the project installs
(``ipfs add --only-hash --cid-version 1 --raw-leaves --chunker size-N`` of
``shake_256(b"fedchain").digest(size)``); ``tests/test_unixfs_ipfs.py`` re-derives the main
sizes from a live daemon. Everything else here checks structure and refusals directly.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import unixfs
from protocol.cid import (
    block_cid,
    cid_for_digest,
    content_cid,
    content_digest,
    dag_pb_cid,
    digest_from_cid,
    parse_cid,
    raw_cid,
)
from protocol.codec import encode_tensors
from protocol.errors import ContentNotFound, DigestMismatch, StorageError
from protocol.unixfs import CHUNK_SIZE, DAG_PB, MAX_LINKS, RAW, Link

C = CHUNK_SIZE

#: size -> CID from the js-ipfs daemon, 256 KiB chunks (the stored layout).
DAEMON_CIDS = {
    0: "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku",
    1: "bafkreibg4w76jmdimft6hzhavlcazoxagukrohjxl6i6uvr4tqce5hc4y4",
    C - 1: "bafkreie4c33rf5u2isqmtzn6mkxaaf7vgqgh4zsosdjtb672qvsj3hddwm",
    C: "bafkreibklz53lhsywhd2y2gdvw734wokxypp54r4gfjlqzizfvy7bfqzni",
    C + 1: "bafybeig4ic5qxjfkkxazuu4qdh5xx6y2cutej3r6njvqoyntzpdiubb6w4",
    2 * C: "bafybeiff52xnemua2tcft5q662ftb3jrpedq25swu3ww4bpft5z42v7cci",
    (1 << 20) + 1: "bafybeieoqpwup55sjmtsklocnnwyk2sunpkp5xlxz7fjafy5qw5ermovwi",
    174 * C: "bafybeidanoamgmzykbnmgtrvmqhblop5ilsdmvjespkgw7ivtwveucztnu",  # one full node
    174 * C + 1: "bafybeidc7og5lr5j4fqfjhbfkb4nqmerllnyfijikwm7zdw4jek5ugbqfu",  # two levels
}

#: size -> CID from the daemon with ``--chunker size-64``: deep trees at small sizes.
DAEMON_CIDS_64 = {
    174 * 64: "bafybeiaw6ik6rhkpvob4j3clytbvph2jgpqavhhvfe2tq42vq2hm5mmb24",
    174 * 64 + 1: "bafybeiei6ktnqcbdf2ny4hd2daid6dsfseim76ejf4tv45wlrc5ftrc2su",
    174 * 174 * 64: "bafybeihzp4hpesir2wqmvb5cp74ehpfmnofh7724vyfapuyvfufxypihaq",
    174 * 174 * 64 + 1: "bafybeiapf7txeeuy24kgefo7qvez73trnzgbxrl52psonpqhceygchixnm",  # 3 levels
    174 * 174 * 64 + 175 * 64 + 3: "bafybeigus7brlvjdwpttfo6hixp6bkw5ls3ikz6qtcmenqsa2djbpctnsy",
}


def payload(size: int, salt: bytes = b"fedchain") -> bytes:
    return hashlib.shake_256(salt).digest(size) if size else b""


Blocks = dict[bytes, tuple[int, bytes]]


def store_of(data: bytes, **kw: int) -> tuple[tuple[int, bytes], Blocks, list[bytes]]:
    """Build ``data``; return its root, its blocks by digest, and the emission order."""
    blocks: Blocks = {}
    order: list[bytes] = []

    def sink(codec: int, digest: bytes, block: bytes) -> None:
        assert hashlib.sha256(block).digest() == digest
        blocks[digest] = (codec, block)
        order.append(digest)

    root = unixfs.build(data, sink, **kw)
    return root, blocks, order


def fetch_from(blocks: Blocks) -> Callable[[int, bytes], bytes]:
    def fetch(codec: int, digest: bytes) -> bytes:
        try:
            return blocks[digest][1]
        except KeyError:
            raise ContentNotFound(digest.hex()) from None

    return fetch


def read_back(root: tuple[int, bytes], blocks: Blocks, **kw: int | None) -> bytes:
    return b"".join(unixfs.iter_file(*root, fetch_from(blocks), **kw))


# ----------------------------------------------------------------------------------------
# Same CIDs as the daemon
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", sorted(DAEMON_CIDS))
def test_cids_equal_the_daemons(size: int) -> None:
    data = payload(size)
    assert content_cid(data) == DAEMON_CIDS[size]
    assert content_digest(data) == digest_from_cid(DAEMON_CIDS[size])
    # One chunk: the root is the payload as a raw block, so the digest is its SHA-256.
    assert (content_digest(data) == hashlib.sha256(data).digest()) == (size <= C)
    assert DAEMON_CIDS[size].startswith("bafkrei" if size <= C else "bafybei")


@pytest.mark.parametrize("size", sorted(DAEMON_CIDS_64))
def test_deep_trees_equal_the_daemons(size: int) -> None:
    """174-way levels: one full node, a second level, a third level (30,277 leaves)."""
    assert block_cid(*unixfs.build(payload(size), chunk_size=64)) == DAEMON_CIDS_64[size]


# ----------------------------------------------------------------------------------------
# Structure of the DAG, checked node by node
# ----------------------------------------------------------------------------------------


def _check_subtree(blocks: Blocks, codec: int, digest: bytes) -> tuple[int, int, int]:
    """Walk a built DAG independently; return (filesize, cumulative size, height)."""
    kind, block = blocks[digest]
    assert kind == codec
    if codec == RAW:
        return len(block), len(block), 0
    node = unixfs.decode_file_node(block)
    assert unixfs.encode_file_node(list(node.links), list(node.blocksizes)) == block
    assert 1 <= len(node.links) <= MAX_LINKS
    heights = set()
    total = len(block)
    for link, size in zip(node.links, node.blocksizes, strict=True):
        filesize, cumulative, height = _check_subtree(blocks, link.codec, link.digest)
        assert filesize == size and cumulative == link.tsize
        heights.add(height)
        total += cumulative
    assert len(heights) == 1  # balanced: every leaf at the same depth
    return node.filesize, total, heights.pop() + 1


@pytest.mark.parametrize(
    "size,chunk",
    [
        *[(0, C), (1, C), (C, C), (C + 1, C), (3 * C + 5, C)],
        *[(174 * 10, 10), (174 * 10 + 1, 10), (174 * 174 * 4 + 9, 4)],
    ],
)
def test_dag_structure(size: int, chunk: int) -> None:
    data = payload(size)
    root, blocks, order = store_of(data, chunk_size=chunk)
    assert order[-1] == root[1]  # the root is emitted last
    leaves = [blocks[d][1] for d in order if blocks[d][0] == RAW]
    assert b"".join(leaves) == data
    assert all(len(leaf) == chunk for leaf in leaves[:-1])
    assert 0 < len(leaves[-1]) <= chunk or size == 0
    filesize, _, height = _check_subtree(blocks, *root)
    assert filesize == size
    n_leaves = max(1, -(-size // chunk))
    expected_height = 0
    while n_leaves > 1:
        n_leaves, expected_height = -(-n_leaves // MAX_LINKS), expected_height + 1
    assert height == expected_height
    assert root[0] == (RAW if size <= chunk else DAG_PB)


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(0, 5 * C + 3),
    cuts=st.lists(st.integers(0, 5 * C + 3), max_size=8),
)
def test_streaming_writes_in_any_pieces_give_the_same_dag(size: int, cuts: list[int]) -> None:
    data = payload(size, b"stream")
    whole = unixfs.build(data)
    builder = unixfs.DagBuilder()
    points = sorted({0, size, *(c for c in cuts if c <= size)})
    for a, b in itertools.pairwise(points):
        builder.write(memoryview(data)[a:b])
    assert builder.finish() == whole
    assert builder.size == size


def test_builder_is_one_shot() -> None:
    builder = unixfs.DagBuilder()
    builder.write(b"abc")
    root = builder.finish()
    assert builder.finish() == root
    with pytest.raises(ValueError):
        builder.write(b"more")


# ----------------------------------------------------------------------------------------
# Reading back: round trips, verification of every block, canonical form
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, C - 1, C, C + 1, 2 * C, 3 * C + 7, 174 * C + 1])
def test_round_trip(size: int) -> None:
    data = payload(size, b"rt")
    root, blocks, _ = store_of(data)
    assert read_back(root, blocks) == data


def _multi_chunk() -> tuple[tuple[int, bytes], Blocks, bytes]:
    data = payload(3 * C + 100, b"tamper")
    root, blocks, _ = store_of(data)
    return root, blocks, data


@pytest.mark.parametrize("which", ["root", "first leaf", "last leaf"])
def test_a_tampered_block_is_refused(which: str) -> None:
    root, blocks, _ = _multi_chunk()
    leaves = [d for d, (codec, _) in blocks.items() if codec == RAW]
    target = {"root": root[1], "first leaf": leaves[0], "last leaf": leaves[-1]}[which]
    codec, block = blocks[target]
    blocks[target] = (codec, block[:-1] + bytes([block[-1] ^ 1]))
    with pytest.raises(DigestMismatch):
        read_back(root, blocks)


def test_a_missing_block_is_reported_by_the_fetcher() -> None:
    root, blocks, _ = _multi_chunk()
    del blocks[next(d for d, (codec, _) in blocks.items() if codec == RAW)]
    with pytest.raises(ContentNotFound):
        read_back(root, blocks)


def test_size_limit_is_checked_before_any_leaf_is_fetched() -> None:
    root, blocks, _ = _multi_chunk()
    fetched: list[bytes] = []

    def fetch(codec: int, digest: bytes) -> bytes:
        fetched.append(digest)
        return blocks[digest][1]

    with pytest.raises(StorageError, match="exceeds the limit"):
        list(unixfs.iter_file(*root, fetch, max_size=3 * C))
    assert fetched == [root[1]]
    small = payload(100)
    with pytest.raises(StorageError, match="exceeds the limit"):
        list(unixfs.iter_file(RAW, hashlib.sha256(small).digest(), lambda c, d: small, max_size=99))
    assert read_back(*store_of(small)[:2], max_size=100) == small


def _adopt(blocks: Blocks, links: list[Link], sizes: list[int]) -> tuple[int, bytes]:
    """Add a hand-made dag-pb node over ``links`` to ``blocks``; return its (codec, digest)."""
    node = unixfs.encode_file_node(links, sizes)
    digest = hashlib.sha256(node).digest()
    blocks[digest] = (DAG_PB, node)
    return DAG_PB, digest


def _leaf(blocks: Blocks, data: bytes) -> Link:
    digest = hashlib.sha256(data).digest()
    blocks[digest] = (RAW, data)
    return Link(RAW, digest, len(data))


def test_other_chunkings_of_the_same_bytes_are_refused() -> None:
    """Every block hashes correctly, but the DAG is not the canonical one for its bytes."""
    data = payload(2 * C + 10, b"chunks")
    blocks: Blocks = {}
    # 128 KiB chunks (a valid UnixFS file, ``--chunker size-131072``).
    half = C // 2
    leaves = [_leaf(blocks, data[i : i + half]) for i in range(0, len(data), half)]
    root = _adopt(blocks, leaves, [link.tsize for link in leaves])
    with pytest.raises(DigestMismatch):
        read_back(root, blocks)
    # Canonical chunks under an extra, unbalanced level.
    leaves = [_leaf(blocks, data[i : i + C]) for i in range(0, len(data), C)]
    inner = _adopt(blocks, leaves[:2], [C, C])
    inner_size = len(blocks[inner[1]][1]) + 2 * C
    root = _adopt(blocks, [Link(*inner, inner_size), leaves[2]], [2 * C, 10])
    with pytest.raises(DigestMismatch):
        read_back(root, blocks)
    # The right shape, a wrong Tsize.
    root = _adopt(blocks, [*leaves[:2], Link(RAW, leaves[2].digest, 11)], [C, C, 10])
    with pytest.raises(DigestMismatch):
        read_back(root, blocks)
    # A dag-pb root for a payload of one chunk (the canonical root is the raw leaf).
    small = payload(1000)
    parts = [_leaf(blocks, small[:500]), _leaf(blocks, small[500:])]
    with pytest.raises(DigestMismatch, match="one-chunk"):
        read_back(_adopt(blocks, parts, [500, 500]), blocks)
    # The canonical DAG itself reads back.
    assert read_back(_adopt(blocks, leaves, [C, C, 10]), blocks) == data


def test_only_the_final_rebuild_catches_these() -> None:
    """Shapes every per-node check accepts; the parents rebuilt from the leaves differ."""
    chunk = payload(C, b"same chunk")  # 175 copies of one leaf: 45 MB of payload, one block
    blocks: Blocks = {}
    leaf = _leaf(blocks, chunk)

    def parent(n: int) -> Link:
        codec, digest = _adopt(blocks, [leaf] * n, [C] * n)
        return Link(codec, digest, len(blocks[digest][1]) + n * C)

    canonical = _adopt(blocks, [parent(174), parent(1)], [174 * C, C])
    assert read_back(canonical, blocks) == chunk * 175
    # Another split of the same 175 leaves at the same height: 100 + 75.
    other = _adopt(blocks, [parent(100), parent(75)], [100 * C, 75 * C])
    with pytest.raises(DigestMismatch, match="canonical DAG"):
        read_back(other, blocks)
    # The canonical shape with one internal link's Tsize off by one.
    first, second = parent(174), parent(1)
    off = _adopt(blocks, [first, Link(second.codec, second.digest, second.tsize + 1)], [174 * C, C])
    with pytest.raises(DigestMismatch, match="canonical DAG"):
        read_back(off, blocks)
    # A link without the empty Name field (valid dag-pb, not how ipfs add writes it).
    three = payload(2 * C + 1, b"nameless")
    root, small_blocks, _ = store_of(three)
    canonical_node = small_blocks[root[1]][1]
    decoded = unixfs.decode_file_node(canonical_node)
    unixfs_data = b"\x08\x02\x18" + unixfs._varint(decoded.filesize)
    unixfs_data += b"".join(b"\x20" + unixfs._varint(size) for size in decoded.blocksizes)
    data_field = unixfs._field(1, unixfs_data)
    node = b"".join(
        unixfs._field(
            2,
            unixfs._field(1, unixfs.cid_bytes(x.codec, x.digest))
            + b"\x18"
            + unixfs._varint(x.tsize),
        )
        for x in decoded.links
    )
    node += data_field
    nameless = hashlib.sha256(node).digest()
    small_blocks[nameless] = (DAG_PB, node)
    assert len(unixfs.decode_file_node(node).links) == 3
    with pytest.raises(DigestMismatch, match="canonical DAG"):
        read_back((DAG_PB, nameless), small_blocks)


def test_a_root_claiming_more_leaves_than_it_has_is_refused() -> None:
    data = payload(2 * C, b"short")
    blocks: Blocks = {}
    leaves = [_leaf(blocks, data[:C]), _leaf(blocks, data[C:])]
    # Claims 3 chunks' worth in its blocksizes but links two leaves of the right sizes.
    node = bytearray(unixfs.encode_file_node(leaves, [C, C]))
    with pytest.raises(StorageError):
        unixfs.decode_file_node(bytes(node[:-1]))  # truncated
    root = _adopt(blocks, leaves, [C, C + 1])
    with pytest.raises(DigestMismatch):
        read_back(root, blocks)


# ----------------------------------------------------------------------------------------
# The dag-pb / UnixFS codec, strictly
# ----------------------------------------------------------------------------------------


def _link(i: int) -> Link:
    return Link(RAW, hashlib.sha256(bytes([i])).digest(), 1000 + i)


def test_node_encoding_round_trips_and_is_canonical() -> None:
    links = [_link(i) for i in range(3)]
    block = unixfs.encode_file_node(links, [1000, 1001, 1002])
    node = unixfs.decode_file_node(block)
    assert node.links == tuple(links)
    assert node.blocksizes == (1000, 1001, 1002)
    assert node.filesize == 3003
    # Links first (0x12), each with Hash, Name "", Tsize; then Data (0x0a): Type File, ...
    assert block[0] == 0x12 and block[2:4] == b"\x0a\x24"
    assert block[4:8] == bytes([1, RAW, 0x12, 0x20])
    assert block[40:42] == b"\x12\x00"
    assert unixfs.is_file_root(block)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63 - 1])
def test_varints_round_trip(value: int) -> None:
    encoded = unixfs._varint(value)
    assert unixfs._read_varint(encoded + b"\xff", 0) == (value, len(encoded))


def _good_node() -> bytes:
    return unixfs.encode_file_node([_link(0), _link(1)], [10, 20])


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda b: b[:-1], id="truncated"),
        pytest.param(lambda b: b + b"\x0a\x00", id="second-data"),
        pytest.param(lambda b: b + b"\x12\x00", id="link-after-data"),
        pytest.param(lambda b: b + b"\x18\x01", id="unknown-field"),
        pytest.param(lambda b: b"\x0d" + b[1:], id="wire-type-5"),
        pytest.param(lambda b: b.replace(b"\x12\x00\x18", b"\x12\x01x\x18", 1), id="named-link"),
        pytest.param(lambda b: b[:-1] + b"\x80\x00", id="non-minimal-varint"),
    ],
)
def test_malformed_nodes_are_refused(mutate: Callable[[bytes], bytes]) -> None:
    with pytest.raises(StorageError):
        unixfs.decode_file_node(mutate(_good_node()))


def test_unixfs_data_is_checked() -> None:
    link = unixfs._field(2, unixfs._field(1, unixfs.cid_bytes(RAW, b"\x01" * 32)) + b"\x18\x05")
    cases = {
        "directory": b"\x08\x01\x18\x05\x20\x05",
        "no filesize": b"\x08\x02\x20\x05",
        "sum mismatch": b"\x08\x02\x18\x06\x20\x05",
        "inline data": b"\x08\x02\x12\x01x\x18\x05\x20\x05",
        "missing blocksize": b"\x08\x02\x18\x05",
    }
    for name, data in cases.items():
        with pytest.raises(StorageError):
            unixfs.decode_file_node(link + unixfs._field(1, data))
        assert name
    assert (
        unixfs.decode_file_node(link + unixfs._field(1, b"\x08\x02\x18\x05\x20\x05")).filesize == 5
    )
    no_tsize = unixfs._field(2, unixfs._field(1, unixfs.cid_bytes(RAW, b"\x01" * 32)))
    with pytest.raises(StorageError, match="Tsize"):
        unixfs.decode_file_node(no_tsize + unixfs._field(1, b"\x08\x02\x18\x05\x20\x05"))
    too_many = [_link(i % 250) for i in range(MAX_LINKS + 1)]
    with pytest.raises(StorageError, match="links"):
        unixfs.decode_file_node(unixfs.encode_file_node(too_many, [1] * len(too_many)))


# ----------------------------------------------------------------------------------------
# From the on-chain digest to the CID: the root block decides
# ----------------------------------------------------------------------------------------


def test_the_root_block_decides_the_codec() -> None:
    big = payload(C + 1)
    (codec, digest), blocks, _ = store_of(big)
    assert codec == DAG_PB
    assert cid_for_digest(digest, blocks[digest][1]) == content_cid(big) == dag_pb_cid(digest)
    for small in (b"", b"hello world\n", payload(C), json.dumps({"a": 1}).encode()):
        assert not unixfs.is_file_root(small)
        assert cid_for_digest(hashlib.sha256(small).digest(), small) == content_cid(small)
    codec_payload = encode_tensors({"w": __import__("numpy").zeros(3, dtype="int32")})
    assert not unixfs.is_file_root(codec_payload)  # "FCT1": not even a protobuf
    with pytest.raises(StorageError):
        cid_for_digest(digest, big[:10])  # not the block of that digest


def test_a_one_chunk_payload_that_is_a_file_root_is_refused() -> None:
    """Stored raw, it would read back as the other file: the builder refuses it."""
    (_, digest), blocks, _ = store_of(payload(C + 1))
    ambiguous = blocks[digest][1]
    assert unixfs.is_file_root(ambiguous)
    with pytest.raises(StorageError, match="itself a UnixFS file node"):
        content_digest(ambiguous)
    # Inside a larger payload the same bytes are harmless (the root is dag-pb anyway).
    assert content_cid(ambiguous * (C // len(ambiguous) + 1)).startswith("bafybei")


# ----------------------------------------------------------------------------------------
# CID spelling
# ----------------------------------------------------------------------------------------


def test_cid_spellings() -> None:
    digest = hashlib.sha256(b"x").digest()
    assert parse_cid(raw_cid(digest)) == (RAW, digest)
    assert parse_cid(dag_pb_cid(digest)) == (DAG_PB, digest)
    assert raw_cid(digest).startswith("bafkrei") and dag_pb_cid(digest).startswith("bafybei")
    assert digest_from_cid(dag_pb_cid(digest)) == digest


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "b",
        "QmT78zSuBmuS4z925WZfrqQ1qHaJ56DQaTfyMUF7F8ff5o",  # CIDv0
        "bafyreigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",  # dag-cbor
        "BAFKREIFJJCIE6LYPI6NY7AMXNFFTAGCLBUXNDQONFIPMB64F2KM2DEVEI4",  # upper case
        "bafkrei!!!",
        "bafkreifjjcie6lypi6ny7amxnfftagclbuxndqonfipmb64f2km2devei",  # truncated
    ],
)
def test_bad_cids_are_refused(bad: str) -> None:
    with pytest.raises(StorageError):
        parse_cid(bad)


def test_cid_bytes_checks_its_input() -> None:
    with pytest.raises(StorageError):
        unixfs.cid_bytes(RAW, b"\x00" * 31)
    with pytest.raises(StorageError):
        unixfs.cid_bytes(0x71, b"\x00" * 32)
