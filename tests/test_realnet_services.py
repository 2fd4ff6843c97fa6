"""Real backends: an anvil chain and a js-ipfs daemon, started and stopped by adapters.services.

The session fixtures start one anvil (~0.2 s) and one js-ipfs daemon (~4-6 s on 2 cores)
from the project-local binaries that ``scripts/install_tools.sh`` (``make setup``) installs.
These tests are skipped only when those binaries are absent; set
``FEDCHAIN_REQUIRE_REALNET=1`` to make that a failure instead (CI).

Nothing here fakes the daemon's HTTP layer: the tampered-content test corrupts a block file
in the daemon's own repository (a corrupt disk), and the adapter must refuse what the real
daemon then serves. Only the refusal of a node that builds another DAG than ours (as a Kubo
with other defaults would) is exercised against a small stand-in server, because no Kubo
binary can be installed here. UnixFS payloads of every size: ``test_unixfs_ipfs.py``.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from adapters.chain import Chain
from adapters.contract import TaskConfig, TaskContract
from adapters.services import (
    AnvilService,
    IpfsService,
    ServiceError,
    find_anvil,
    find_jsipfs,
    find_node,
    is_running,
    port_free,
    read_pidfile,
    stop_pidfile,
    write_pidfile,
)
from adapters.storage import IpfsStore, LocalStore, get_by_digest, open_store
from protocol.cid import cid_of, content_digest, digest_from_cid, raw_cid, sha256_digest
from protocol.errors import ContentNotFound, DigestMismatch, StorageError
from tests.conftest import DEFAULT_TASK_CONFIG

HELLO = b"hello world\n"
HELLO_CID = "bafkreifjjcie6lypi6ny7amxnfftagclbuxndqonfipmb64f2km2devei4"
REQUIRE = os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1"


def _missing_tools(*finders: Callable[[], Path]) -> None:
    """Skip (or fail, under FEDCHAIN_REQUIRE_REALNET=1) if a tool binary is not installed."""
    for find in finders:
        try:
            find()
        except ServiceError as exc:
            message = f"{exc} (installs anvil and js-ipfs into the project)"
            if REQUIRE:
                pytest.fail(message)
            pytest.skip(message)


def _payload(size: int, salt: str) -> bytes:
    """Deterministic, incompressible-looking bytes, unique per (size, salt)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += sha256_digest(f"{salt}:{counter}".encode())
        counter += 1
    return bytes(out[:size])


# ----------------------------------------------------------------------------------------
# Session fixtures: one anvil, one js-ipfs daemon
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def anvil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilService]:
    _missing_tools(find_anvil)
    svc = AnvilService(tmp_path_factory.mktemp("anvil"), die_with_parent=True)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def ipfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IpfsService]:
    _missing_tools(find_node, find_jsipfs)
    svc = IpfsService(tmp_path_factory.mktemp("ipfs"), die_with_parent=True)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture
def store(ipfs: IpfsService) -> IpfsStore:
    return IpfsStore(ipfs.api_multiaddr)


def _multipart(data: bytes) -> tuple[dict[str, str], Iterator[bytes]]:
    """One-file multipart body, sent chunked: js-ipfs refuses a Content-Length over 1 MiB
    (multipart overhead included), but not a chunked body."""
    boundary = "fedchain-test-boundary"
    head = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="file"; filename="data"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body = head + data + f"\r\n--{boundary}--\r\n".encode()
    return {"Content-Type": f"multipart/form-data; boundary={boundary}"}, iter([body])


def _raw_put(ipfs: IpfsService, data: bytes) -> str:
    """The daemon's own CID for ``data`` (plain HTTP, independent of IpfsStore)."""
    headers, body = _multipart(data)
    resp = requests.post(
        f"{ipfs.api_url}/api/v0/block/put",
        params={"format": "raw", "version": "1", "mhtype": "sha2-256", "cid-base": "base32"},
        headers=headers,
        data=body,
        timeout=30,
    )
    resp.raise_for_status()
    return str(resp.json()["Key"])


def _raw_add(ipfs: IpfsService, data: bytes) -> str:
    """``ipfs add --cid-version 1 --raw-leaves --only-hash``: a one-chunk file's CID."""
    headers, body = _multipart(data)
    resp = requests.post(
        f"{ipfs.api_url}/api/v0/add",
        params={
            "cid-version": "1",
            "raw-leaves": "true",
            "only-hash": "true",
            "cid-base": "base32",
        },
        headers=headers,
        data=body,
        timeout=30,
    )
    resp.raise_for_status()
    return str(json.loads(resp.text.splitlines()[-1])["Hash"])


def _block_file(ipfs: IpfsService, cid: str) -> Path:
    """Where js-ipfs keeps ``cid`` on disk: flatfs, key = base32(multihash), next-to-last/2."""
    multihash = bytes([0x12, 0x20]) + digest_from_cid(cid)
    key = base64.b32encode(multihash).decode().rstrip("=")
    return ipfs.repo_path / "blocks" / key[-3:-1] / f"{key}.data"


# ----------------------------------------------------------------------------------------
# IPFS: CIDs, round trips, missing and tampered content
# ----------------------------------------------------------------------------------------


@pytest.mark.realnet
def test_daemon_and_embedded_store_give_the_same_cids(ipfs: IpfsService, tmp_path: Path) -> None:
    local = LocalStore(tmp_path / "store")
    assert local.put(HELLO) == _raw_put(ipfs, HELLO) == HELLO_CID
    sizes = [0, 1, 1000, 65_537, 262_144, 262_145, 900_000, 1 << 20]
    for size in sizes:
        data = _payload(size, "cids")
        # One block of any size: the raw CID of its SHA-256, as the embedded store names it.
        assert _raw_put(ipfs, data) == raw_cid(sha256_digest(data)), size
        assert local.put(data) == cid_of(data), size  # a UnixFS file (test_unixfs_ipfs.py)
    # ``ipfs add --cid-version 1 --raw-leaves`` of a one-chunk payload (256 KiB) is its raw
    # block, so its CID is the raw CID of its SHA-256.
    for size in (1, 1000, 262_144):
        data = _payload(size, "add")
        assert _raw_add(ipfs, data) == cid_of(data), size


@pytest.mark.realnet
def test_ipfs_store_round_trip(ipfs: IpfsService, store: IpfsStore) -> None:
    for size in (0, 12, 4096, 900_000, 1 << 20):
        data = _payload(size, "round-trip")
        cid = store.put(data)
        assert cid == cid_of(data)
        assert store.put(data) == cid  # idempotent
        assert store.has(cid)
        assert store.get(cid) == data
        assert get_by_digest(store, content_digest(data)) == data
    assert store.put(HELLO) == HELLO_CID
    # The other spellings of the same node reach the same blocks.
    by_url = IpfsStore(ipfs.api_url)
    assert by_url.get(HELLO_CID) == HELLO
    opened = open_store(ipfs.store_spec)
    assert isinstance(opened, IpfsStore) and opened.has(HELLO_CID)


@pytest.mark.realnet
def test_put_pins_the_block(ipfs: IpfsService, store: IpfsStore) -> None:
    cid = store.put(_payload(100, "pinned"))
    resp = requests.post(
        f"{ipfs.api_url}/api/v0/pin/ls",
        params={"arg": cid, "type": "recursive", "cid-base": "base32"},
        timeout=10,
    )
    assert resp.ok, resp.text
    assert cid in resp.json()["Keys"]


@pytest.mark.realnet
def test_missing_content_is_reported_within_the_probe_timeout(ipfs: IpfsService) -> None:
    store = IpfsStore(ipfs.api_multiaddr, probe_timeout=0.5)
    missing = cid_of(b"never stored " + os.urandom(16))
    t0 = time.monotonic()
    assert not store.has(missing)
    assert time.monotonic() - t0 < 3.0
    t0 = time.monotonic()
    with pytest.raises(ContentNotFound):
        store.get(missing)
    assert time.monotonic() - t0 < 3.0


@pytest.mark.realnet
def test_tampered_block_on_the_daemon_is_refused(ipfs: IpfsService, store: IpfsStore) -> None:
    """A corrupt disk on the real node: the daemon serves other bytes under the CID."""
    honest = _payload(5000, "honest update")
    cid = store.put(honest)
    path = _block_file(ipfs, cid)
    assert path.read_bytes() == honest
    path.write_bytes(_payload(5000, "tampered update"))
    with pytest.raises(DigestMismatch):
        store.get(cid)
    path.write_bytes(honest)  # repair, the daemon serves it again
    assert store.get(cid) == honest


def test_unreachable_node_is_an_error_not_missing_content() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nobody listens once the socket is closed
    store = IpfsStore(f"/ip4/127.0.0.1/tcp/{port}/http", timeout=5)
    for call in (lambda: store.has(HELLO_CID), lambda: store.get(HELLO_CID)):
        with pytest.raises(StorageError, match="cannot reach") as info:
            call()
        assert not isinstance(info.value, ContentNotFound)
    with pytest.raises(StorageError, match="cannot reach"):
        store.put(HELLO)


def test_bad_api_address_and_cid_are_refused() -> None:
    with pytest.raises(StorageError):
        IpfsStore("not a multiaddr")
    store = IpfsStore("http://127.0.0.1:9")
    assert store.api == "/ip4/127.0.0.1/tcp/9/http"
    with pytest.raises(StorageError):
        store.has("Qmabc")


# ----------------------------------------------------------------------------------------
# add: the node's root CID must be ours (against a stand-in server: no Kubo here)
# ----------------------------------------------------------------------------------------


class _StandIn(http.server.BaseHTTPRequestHandler):
    """Answers ``add`` like a node that builds another DAG (``answer``: "other", e.g. other
    chunking, or "v0", a node that ignores ``cid-version``) or the right one ("honest")."""

    answer = "honest"
    seen: list[dict[str, str]] = []  # noqa: RUF012 - per-class test state

    def log_message(self, *args: Any) -> None:
        """Silence the default per-request log line."""

    def do_POST(self) -> None:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        type(self).seen.append(query)
        body = b""
        while True:  # the adapter always sends a chunked body
            size = int(self.rfile.readline().strip(), 16)
            if size == 0:
                self.rfile.readline()
                break
            body += self.rfile.read(size)
            self.rfile.readline()
        data = body.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n--", 1)[0]
        key = {
            "honest": cid_of(data),
            "other": cid_of(data + b"!"),
            "v0": "QmT78zSuBmuS4z925WZfrqQ1qHaJ56DQaTfyMUF7F8ff5o",
        }[self.answer]
        payload = json.dumps({"Name": "payload", "Hash": key, "Size": str(len(data))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def stand_in() -> Iterator[Callable[..., tuple[str, type[_StandIn]]]]:
    servers: list[http.server.HTTPServer] = []

    def make(**attrs: Any) -> tuple[str, type[_StandIn]]:
        handler = type("Handler", (_StandIn,), {**attrs, "seen": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"/ip4/127.0.0.1/tcp/{server.server_address[1]}/http", handler

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def test_put_sends_the_documented_add_options(stand_in: Callable[..., Any]) -> None:
    api, handler = stand_in(answer="honest")
    data = _payload(300_000, "options")  # two chunks
    assert IpfsStore(api).put(data) == cid_of(data)
    (query,) = handler.seen
    assert {k: query[k] for k, _ in IpfsStore.ADD_OPTIONS} == dict(IpfsStore.ADD_OPTIONS)


@pytest.mark.parametrize("answer", ["other", "v0"])
def test_put_refuses_a_node_that_builds_another_dag(
    stand_in: Callable[..., Any], answer: str
) -> None:
    api, _ = stand_in(answer=answer)
    with pytest.raises(DigestMismatch, match="stored the payload as"):
        IpfsStore(api).put(HELLO)


# ----------------------------------------------------------------------------------------
# anvil: a task round on the real chain, with payloads on the real IPFS node
# ----------------------------------------------------------------------------------------


@pytest.mark.realnet
def test_task_round_on_anvil_with_payloads_on_ipfs(anvil: AnvilService, store: IpfsStore) -> None:
    chain = Chain.connect(anvil.url, funding_key=anvil.funding_key, num_accounts=7, seed=101)
    owner, agg, c1, c2, *others = chain.accounts
    cfg = TaskConfig(**{**DEFAULT_TASK_CONFIG, "min_updates": 2, "max_updates": 2})
    task = TaskContract.deploy(chain, owner, cfg)
    task.register_aggregator(agg)
    for member in others:  # start needs a committee of 4 (issue 20)
        task.register_aggregator(member)
    task.register_client(c1)
    task.register_client(c2)
    task.start(owner)
    updates = [_payload(50_000, f"update {i}") for i in (1, 2)]
    for client, payload in zip((c1, c2), updates, strict=True):
        store.put(payload)
        task.submit_update(client, 1, sha256_digest(payload), 10)
    assert task.current_aggregator().address == agg.address
    # The aggregator fetches by on-chain digest; the store verifies every byte.
    fetched = [get_by_digest(store, sha256_digest(p)) for p in updates]
    assert fetched == updates
    model = b"".join(sha256_digest(p) for p in fetched)
    store.put(model)
    receipt = task.submit_aggregate(agg, 1, sha256_digest(model))
    chain.mine_to(receipt["blockNumber"] + cfg.challenge_window)
    task.finalize(owner, 1)
    assert task.global_model_digest() == sha256_digest(model)
    assert get_by_digest(store, task.global_model_digest()) == model
    task.withdraw(agg)


@pytest.mark.realnet
def test_interval_mining(tmp_path: Path) -> None:
    _missing_tools(find_anvil)
    with AnvilService(tmp_path, block_time=0.2, die_with_parent=True) as svc:
        chain = Chain.connect(svc.url, num_accounts=1)
        first = chain.block_number()
        time.sleep(0.9)
        assert chain.block_number() >= first + 2
        assert "--block-time" in (tmp_path / "anvil.log").read_text()


# ----------------------------------------------------------------------------------------
# Life cycle: stop really stops, pid files, restarts
# ----------------------------------------------------------------------------------------


@pytest.mark.realnet
def test_anvil_stop_kills_the_process_and_frees_the_port(tmp_path: Path) -> None:
    _missing_tools(find_anvil)
    svc = AnvilService(tmp_path, die_with_parent=True)
    svc.start()
    pid, port = svc.pid, svc.port
    assert pid is not None and port is not None
    assert is_running(pid) and not port_free(port)
    record = read_pidfile(svc.pid_path)
    assert record is not None and record.pid == record.pgid == pid
    assert record.info["url"] == svc.url
    with pytest.raises(ServiceError, match="already running"):
        AnvilService(tmp_path).start()  # the pid file guards the data directory
    svc.stop()
    assert not is_running(pid)
    assert port_free(port)
    assert not svc.pid_path.exists()
    svc.stop()  # idempotent


@pytest.mark.realnet
def test_stop_pidfile_stops_a_detached_anvil(tmp_path: Path) -> None:
    _missing_tools(find_anvil)
    svc = AnvilService(tmp_path, die_with_parent=True)
    svc.start()
    pid, port = svc.pid, svc.port
    assert pid is not None and port is not None
    svc.detach()  # e.g. `fedchain testnet up` exits, leaving the chain running
    assert is_running(pid)
    assert stop_pidfile(tmp_path / "anvil.pid")
    assert not is_running(pid) and port_free(port)
    assert not (tmp_path / "anvil.pid").exists()
    assert not stop_pidfile(tmp_path / "anvil.pid")  # nothing left to stop


def test_stop_pidfile_never_signals_a_recycled_pid(tmp_path: Path) -> None:
    victim = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        path = tmp_path / "stale.pid"
        record = write_pidfile(path, victim.pid, {"service": "anvil"})
        # Same pid, but recorded as having started at another time: a recycled pid.
        text = path.read_text().splitlines()
        meta = json.loads(text[1])
        meta["start_ticks"] = (record.start_ticks or 0) + 12345
        path.write_text(f"{text[0]}\n{json.dumps(meta)}\n")
        assert not stop_pidfile(path)
        assert victim.poll() is None  # untouched
        assert not path.exists()  # the stale file is gone
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.realnet
def test_ipfs_survives_a_crash_keeps_its_blocks_and_stops_cleanly(tmp_path: Path) -> None:
    _missing_tools(find_node, find_jsipfs)
    data = _payload(10_000, "persisted")
    first = IpfsService(tmp_path, die_with_parent=True)
    first.start()
    assert first.pid is not None
    assert IpfsStore(first.api_multiaddr).put(data) == cid_of(data)
    # Crash: SIGKILL leaves js-ipfs's repo.lock and api file behind.
    os.killpg(first.pid, signal.SIGKILL)
    assert first._proc is not None
    first._proc.wait(timeout=10)
    assert (first.repo_path / "repo.lock").exists()

    second = IpfsService(tmp_path, die_with_parent=True)
    second.start()  # stale lock and pid file are recognised and cleared
    pid, port = second.pid, second.port
    assert pid is not None and port is not None
    try:
        assert IpfsStore(second.api_multiaddr).get(cid_of(data)) == data
        assert json.loads((second.repo_path / "config").read_text())["Bootstrap"] == []
    finally:
        second.stop()
    assert not is_running(pid)
    assert port_free(port)
    assert not second.pid_path.exists()
    assert not (second.repo_path / "api").exists()
