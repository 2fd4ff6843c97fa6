"""Content addressing: known CID vectors, round trips, tamper and bad-CID refusal, and the
embedded store's UnixFS DAGs (more on the DAG itself in ``test_unixfs.py``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from adapters.storage import LocalStore, get_by_digest, has_digest, open_store, resolve_cid
from protocol.cid import (
    cid_of,
    content_cid,
    content_digest,
    dag_pb_cid,
    digest_from_cid,
    raw_cid,
    sha256_digest,
)
from protocol.errors import ContentNotFound, DigestMismatch, StorageError
from protocol.unixfs import CHUNK_SIZE

# What `ipfs block put --cid-codec raw` (and `ipfs add --cid-version 1 --raw-leaves`) give.
KNOWN = {
    b"hello world\n": "bafkreifjjcie6lypi6ny7amxnfftagclbuxndqonfipmb64f2km2devei4",
    b"hello world": "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e",
}


@pytest.mark.parametrize("data,cid", sorted(KNOWN.items()))
def test_cid_matches_ipfs_vectors(data: bytes, cid: str) -> None:
    assert cid_of(data) == cid
    assert digest_from_cid(cid) == sha256_digest(data)
    assert raw_cid(sha256_digest(data)) == cid


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "Qmabc",
        "b",
        "bafyreigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",  # dag-cbor
        "bafkrei!!!",
        cid_of(b"x")[:-3],
    ],
)
def test_bad_cids_are_refused(bad: str) -> None:
    with pytest.raises(StorageError):
        digest_from_cid(bad)


def test_raw_cid_needs_32_bytes() -> None:
    with pytest.raises(StorageError):
        raw_cid(b"\x00" * 31)


def test_local_store_round_trip_and_dedup(tmp_path) -> None:
    store = LocalStore(tmp_path)
    cid = store.put(b"hello world\n")
    assert cid == KNOWN[b"hello world\n"]
    assert store.put(b"hello world\n") == cid
    assert store.get(cid) == b"hello world\n"
    assert store.has(cid)
    assert get_by_digest(store, sha256_digest(b"hello world\n")) == b"hello world\n"
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 1


def test_local_store_refuses_tampered_content(tmp_path) -> None:
    store = LocalStore(tmp_path)
    cid = store.put(b"honest update")
    path = next(p for p in tmp_path.rglob("*") if p.is_file())
    path.write_bytes(b"tampered update")
    with pytest.raises(DigestMismatch):
        store.get(cid)


def test_local_store_missing_content(tmp_path) -> None:
    store = LocalStore(tmp_path)
    cid = cid_of(b"never stored")
    assert not store.has(cid)
    with pytest.raises(ContentNotFound):
        store.get(cid)


def test_store_survives_reopen(tmp_path) -> None:
    cid = LocalStore(tmp_path).put(b"persisted")
    assert open_store(str(tmp_path)).get(cid) == b"persisted"


# ----------------------------------------------------------------------------------------
# Payloads of any size: the embedded store keeps the UnixFS DAG, block by block
# ----------------------------------------------------------------------------------------


def _payload(size: int, salt: bytes = b"store") -> bytes:
    return hashlib.shake_256(salt).digest(size) if size else b""


def _blocks(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("size", [0, 1, CHUNK_SIZE, CHUNK_SIZE + 1, 4 * CHUNK_SIZE + 3])
def test_local_store_keeps_the_unixfs_dag(tmp_path: Path, size: int) -> None:
    store = LocalStore(tmp_path)
    data = _payload(size)
    cid = store.put(data)
    assert cid == content_cid(data)
    assert store.get(cid) == data
    assert store.has(cid)
    digest = content_digest(data)
    assert get_by_digest(store, digest) == data
    assert has_digest(store, digest)
    assert resolve_cid(store, digest) == cid
    leaves = max(1, -(-size // CHUNK_SIZE))
    assert len(_blocks(tmp_path)) == leaves + (leaves > 1)  # one root node above the leaves
    assert store.put(data) == cid and len(_blocks(tmp_path)) == leaves + (leaves > 1)


def test_streamed_put_and_read_in_blocks(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    data = _payload(3 * CHUNK_SIZE + 17)
    pieces = [data[i : i + 100_003] for i in range(0, len(data), 100_003)]
    cid = store.put_stream(iter(pieces))
    assert cid == content_cid(data)
    read = list(store.iter_content(cid))
    assert [len(p) for p in read] == [CHUNK_SIZE] * 3 + [17]
    assert b"".join(read) == data


def test_a_tampered_or_missing_leaf_is_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    data = _payload(2 * CHUNK_SIZE + 5, b"tamper")
    cid = store.put(data)
    digest = content_digest(data)
    second = store._path(hashlib.sha256(data[CHUNK_SIZE : 2 * CHUNK_SIZE]).digest())
    honest = second.read_bytes()
    second.write_bytes(honest[:-1] + b"\x00")
    with pytest.raises(DigestMismatch):
        store.get(cid)
    with pytest.raises(DigestMismatch):
        get_by_digest(store, digest)
    second.unlink()
    assert not store.has(cid) and not has_digest(store, digest)
    with pytest.raises(ContentNotFound):
        store.get(cid)
    second.write_bytes(honest)
    assert store.get(cid) == data and has_digest(store, digest)


def test_a_tampered_root_node_is_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    data = _payload(CHUNK_SIZE + 1, b"root")
    cid = store.put(data)
    root = store._path(digest_from_cid(cid))
    root.write_bytes(root.read_bytes()[:-1] + b"\x07")
    with pytest.raises(DigestMismatch):
        store.get(cid)
    assert not has_digest(store, digest_from_cid(cid))  # cannot tell what it was
    assert resolve_cid(store, digest_from_cid(cid)) is None


def test_missing_payload_by_digest(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    digest = content_digest(_payload(CHUNK_SIZE + 9, b"never stored"))
    assert not has_digest(store, digest)
    assert resolve_cid(store, digest) is None
    assert not store.has(dag_pb_cid(digest))
    with pytest.raises(ContentNotFound):
        get_by_digest(store, digest)


def test_a_raw_cid_reads_the_root_block_itself(tmp_path: Path) -> None:
    """Blocks are keyed by multihash: the raw spelling of a file root's digest returns the
    dag-pb node's bytes (what ``ipfs block get`` returns), which is how readers look at a
    digest's root before they know its codec."""
    store = LocalStore(tmp_path)
    data = _payload(CHUNK_SIZE + 1, b"raw spelling")
    digest = digest_from_cid(store.put(data))
    block = store.get(raw_cid(digest))
    assert hashlib.sha256(block).digest() == digest and block != data


@pytest.mark.parametrize("size", [100, CHUNK_SIZE + 1, 3 * CHUNK_SIZE])
def test_peer_store_reads_a_peers_payload_by_digest_and_pins_it(tmp_path, size):
    """A payload larger than one chunk is read through its root block: the peer store must
    not try to pin that block as a payload of its own (it is a UnixFS file node)."""
    from adapters.storage import PeerStore
    from protocol.cid import content_digest

    data = hashlib.sha256(b"seed").digest() * (size // 32 + 1)
    data = data[:size]
    owner = LocalStore(tmp_path / "owner")
    owner.put(data)
    reader = PeerStore(LocalStore(tmp_path / "reader"), {"owner": owner})
    digest = content_digest(data)
    assert get_by_digest(reader, digest) == data
    assert has_digest(reader.local, digest)  # pinned where it was read
