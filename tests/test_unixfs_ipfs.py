"""UnixFS payloads against the real js-ipfs daemon: same CIDs, ``ipfs cat``, tampering,
missing blocks, and a round of a 10.5 M-parameter model on anvil + js-ipfs.

The daemon and anvil are started here (skipped when the binaries are absent, a failure
under ``FEDCHAIN_REQUIRE_REALNET=1``). The daemon's CIDs
come from plain HTTP calls to its ``add`` (no fedchain code), with the options
``docs/storage.md`` documents.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from adapters.services import AnvilService, IpfsService, find_anvil, find_jsipfs, find_node
from adapters.storage import IpfsStore, LocalStore, get_by_digest, has_digest, resolve_cid
from protocol.cid import content_cid, content_digest, digest_from_cid, parse_cid
from protocol.errors import ContentNotFound, DigestMismatch
from protocol.unixfs import CHUNK_SIZE, DAG_PB, RAW, build
from tests.test_realnet_services import _missing_tools

pytestmark = pytest.mark.realnet

C = CHUNK_SIZE
MiB = 1 << 20


@pytest.fixture(scope="module")
def ipfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IpfsService]:
    _missing_tools(find_node, find_jsipfs)
    with IpfsService(tmp_path_factory.mktemp("ipfs"), die_with_parent=True) as svc:
        yield svc


@pytest.fixture
def anvil(tmp_path: Path) -> Iterator[AnvilService]:
    _missing_tools(find_anvil)
    with AnvilService(tmp_path / "anvil", die_with_parent=True) as svc:
        yield svc


def payload(size: int, salt: str) -> bytes:
    return hashlib.shake_256(salt.encode()).digest(size) if size else b""


def _body(data: bytes) -> Iterator[bytes]:
    """A one-file multipart body, sent chunked (js-ipfs refuses Content-Length > 1 MiB)."""
    yield (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n"
    )
    for i in range(0, len(data), MiB):
        yield data[i : i + MiB]
    yield b"\r\n--b--\r\n"


def daemon_add(ipfs: IpfsService, data: bytes, *, chunker: str = f"size-{C}") -> str:
    """The daemon's own CID for ``data``: ``ipfs add --only-hash --cid-version 1
    --raw-leaves --chunker CHUNKER`` (balanced layout, sha2-256), by plain HTTP."""
    resp = requests.post(
        f"{ipfs.api_url}/api/v0/add",
        params={
            "cid-version": "1",
            "raw-leaves": "true",
            "chunker": chunker,
            "hash": "sha2-256",
            "trickle": "false",
            "only-hash": "true",
            "cid-base": "base32",
        },
        headers={"Content-Type": "multipart/form-data; boundary=b"},
        data=_body(data),
        timeout=300,
    )
    resp.raise_for_status()
    return str(json.loads(resp.text.splitlines()[-1])["Hash"])


def daemon_cat(ipfs: IpfsService, cid: str) -> bytes:
    """``ipfs cat CID``: the daemon's own UnixFS reader."""
    resp = requests.post(
        f"{ipfs.api_url}/api/v0/cat", params={"arg": cid, "timeout": "20s"}, timeout=60
    )
    resp.raise_for_status()
    return resp.content


def _block_file(ipfs: IpfsService, digest: bytes) -> Path:
    """Where js-ipfs keeps a block: flatfs, key = base32(multihash), next-to-last/2 dir."""
    key = base64.b32encode(bytes([0x12, 0x20]) + digest).decode().rstrip("=")
    return ipfs.repo_path / "blocks" / key[-3:-1] / f"{key}.data"


SIZES = [0, 1, C - 1, C, C + 1, MiB + 1, 50 * MiB]


@pytest.mark.parametrize("size", SIZES)
def test_cids_equal_the_daemons(ipfs: IpfsService, tmp_path: Path, size: int) -> None:
    """Embedded store, pure builder, daemon: one CID; and the IPFS adapter stores it so."""
    data = payload(size, f"equal {size}")
    expected = daemon_add(ipfs, data)
    assert LocalStore(tmp_path).put(data) == content_cid(data) == expected
    assert expected.startswith("bafkrei" if size <= C else "bafybei")
    store = IpfsStore(ipfs.api_multiaddr)
    assert store.put(data) == expected
    digest = content_digest(data)
    assert get_by_digest(store, digest) == data
    assert has_digest(store, digest) and resolve_cid(store, digest) == expected


def test_deep_tree_equals_the_daemons(ipfs: IpfsService) -> None:
    """Three levels of 174-way nodes, made cheap with 64-byte chunks (30,277 leaves)."""
    data = payload(174 * 174 * 64 + 65, "deep")
    codec, digest = build(data, chunk_size=64)
    assert parse_cid(daemon_add(ipfs, data, chunker="size-64")) == (codec, digest)


def test_ipfs_cat_returns_what_the_embedded_store_built(ipfs: IpfsService, tmp_path: Path) -> None:
    """Blocks written by the embedded store, copied to the daemon one by one with
    ``block/put``: the daemon's own UnixFS reader (``cat``) returns the payload."""
    data = payload(3 * C + 12_345, "cat")
    local = LocalStore(tmp_path)
    cid = local.put(data)
    blocks: list[tuple[int, bytes]] = []
    build(data, lambda c, d, b: blocks.append((c, d)))
    for codec, digest in blocks:
        block = local._fetch(codec, digest)
        resp = requests.post(
            f"{ipfs.api_url}/api/v0/block/put",
            params={
                "format": "raw" if codec == RAW else "dag-pb",
                "version": "1",
                "mhtype": "sha2-256",
            },
            files={"file": ("block", block, "application/octet-stream")},
            timeout=30,
        )
        resp.raise_for_status()
    assert daemon_cat(ipfs, cid) == data
    # And the one-chunk case: the raw leaf is the file.
    small = payload(1000, "cat small")
    assert daemon_cat(ipfs, IpfsStore(ipfs.api_multiaddr).put(small)) == small


@pytest.mark.parametrize("which", ["leaf", "root"])
def test_a_tampered_block_on_the_daemon_is_refused(ipfs: IpfsService, which: str) -> None:
    """A corrupt disk on the real node: the daemon serves other bytes for one block."""
    store = IpfsStore(ipfs.api_multiaddr)
    data = payload(2 * C + 99, f"tamper {which}")
    cid = store.put(data)
    root = digest_from_cid(cid)
    target = root if which == "root" else hashlib.sha256(data[C : 2 * C]).digest()
    path = _block_file(ipfs, target)
    honest = path.read_bytes()
    path.write_bytes(honest[:-1] + bytes([honest[-1] ^ 0xFF]))
    try:
        with pytest.raises(DigestMismatch):
            store.get(cid)
        with pytest.raises(DigestMismatch):
            get_by_digest(store, root)
    finally:
        path.write_bytes(honest)
    assert store.get(cid) == data


def test_a_missing_leaf_makes_the_payload_unavailable(ipfs: IpfsService) -> None:
    """Only the root and the first leaf reach the node (unpinned block/put): the payload is
    not available, within the probe timeout per missing block."""
    store = IpfsStore(ipfs.api_multiaddr, probe_timeout=0.5)
    data = payload(2 * C + 7, "partial")
    blocks: dict[bytes, tuple[int, bytes]] = {}
    root = build(data, lambda c, d, b: blocks.__setitem__(d, (c, b)))
    assert root[0] == DAG_PB
    first_leaf = hashlib.sha256(data[:C]).digest()
    for digest in (first_leaf, root[1]):
        codec, block = blocks[digest]
        requests.post(
            f"{ipfs.api_url}/api/v0/block/put",
            params={"format": "raw" if codec == RAW else "dag-pb", "version": "1"},
            files={"file": ("block", block, "application/octet-stream")},
            timeout=30,
        ).raise_for_status()
    assert not store.has(content_cid(data))
    assert not has_digest(store, root[1])
    assert resolve_cid(store, root[1]) == content_cid(data)  # the root itself is there
    with pytest.raises(ContentNotFound):
        get_by_digest(store, root[1])
    assert store.put(data) == content_cid(data)  # now complete
    assert has_digest(store, root[1]) and get_by_digest(store, root[1]) == data


@pytest.mark.slow
def test_a_round_of_a_10m_parameter_model_on_anvil_and_ipfs(
    anvil: AnvilService,
    ipfs: IpfsService,
    tmp_path: Path,
) -> None:
    """One full round of ``mlp-wide`` (10.5 M parameters, 42 MB payloads: 161 leaves under
    one dag-pb root each) with every node on the real backends."""
    from clients.models import build_model, num_parameters, param_spec
    from fedchain.config import DemoConfig
    from fedchain.sim.runner import run_demo
    from protocol.metrics import Progress

    assert num_parameters(param_spec(build_model("mlp-wide", (1, 8, 8), 10))) >= 10_000_000
    cfg = DemoConfig(
        model="mlp-wide",
        clients=2,
        aggregators=3,
        rounds=1,
        epochs=1,
        challenge_window=2,
        out=str(tmp_path),
        rpc_url=anvil.url,
        funding_key=anvil.funding_key,
        store=ipfs.store_spec,
    )
    result = run_demo(cfg, Progress(quiet=True))
    summary = result.summary
    assert summary["rounds_finalized"] == 1 and not summary["safety_violated"]
    (record,) = [json.loads(x) for x in (result.run_dir / "rounds.jsonl").read_text().splitlines()]
    assert record["finalized"] and not record["faulty_finalized"]
    assert record["updates_registered"] == 2 and len(record["included"]) == 2
    digest = bytes.fromhex(record["digest"])
    store = IpfsStore(ipfs.api_multiaddr)
    model = get_by_digest(store, digest)
    assert len(model) > 40_000_000 and content_digest(model) == digest
    assert record["cid"] == content_cid(model) and record["cid"].startswith("bafybei")
    assert daemon_cat(ipfs, record["cid"]) == model
