"""Content addressing: known CID vectors, round trips, tamper and bad-CID refusal."""

from __future__ import annotations

import pytest

from adapters.storage import LocalStore, get_by_digest, open_store
from protocol.cid import cid_from_digest, cid_of, digest_from_cid, sha256_digest
from protocol.errors import ContentNotFound, DigestMismatch, StorageError

# What `ipfs block put --cid-codec raw` (and `ipfs add --cid-version 1 --raw-leaves`) give.
KNOWN = {
    b"hello world\n": "bafkreifjjcie6lypi6ny7amxnfftagclbuxndqonfipmb64f2km2devei4",
    b"hello world": "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e",
}


@pytest.mark.parametrize("data,cid", sorted(KNOWN.items()))
def test_cid_matches_ipfs_vectors(data: bytes, cid: str) -> None:
    assert cid_of(data) == cid
    assert digest_from_cid(cid) == sha256_digest(data)
    assert cid_from_digest(sha256_digest(data)) == cid


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "Qmabc",
        "b",
        "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",  # dag-pb, not raw
        "bafkrei!!!",
        cid_of(b"x")[:-3],
    ],
)
def test_bad_cids_are_refused(bad: str) -> None:
    with pytest.raises(StorageError):
        digest_from_cid(bad)


def test_cid_from_digest_needs_32_bytes() -> None:
    with pytest.raises(StorageError):
        cid_from_digest(b"\x00" * 31)


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
