"""Content-addressed storage: an embedded on-disk store and a real IPFS node adapter.

A payload is stored as a UnixFS file — the DAG ``ipfs add --cid-version 1 --raw-leaves``
builds (:mod:`protocol.unixfs`, ``docs/storage.md``) — so any IPFS node can ``ipfs cat`` it.
The interface is deliberately small (``put``/``get``/``has`` by CID, and
:func:`get_by_digest`/:func:`has_digest` by on-chain digest) so it runs against the
embedded store, js-ipfs or Kubo alike. Every block read is hashed and refused on a mismatch
(:class:`DigestMismatch`) before its bytes are used, and a DAG that is not the canonical
one for its content is refused too, so a corrupt disk or a lying node can never feed a
payload to an aggregator under the wrong digest. Large payloads are written and read block
by block: memory is one 256 KiB block plus, for ``get``, the payload being returned.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from protocol.cid import block_cid, cid_for_digest, content_cid, dag_pb_cid, parse_cid, raw_cid
from protocol.errors import ContentNotFound, DigestMismatch, StorageError
from protocol.unixfs import CHUNK_SIZE, DagBuilder, dag_complete, is_file_root, iter_file


@runtime_checkable
class ContentStore(Protocol):
    """What every storage backend offers.

    CIDs are base32 CIDv1, sha2-256, codec raw (one block) or dag-pb (a UnixFS file root).
    Blocks are keyed by their multihash, as in IPFS blockstores: ``get`` of the raw CID of
    any stored block's digest returns that block, whatever codec it was stored under —
    :func:`get_by_digest` relies on it.
    """

    def put(self, data: bytes) -> str:
        """Store ``data`` as a UnixFS file; return its root CID
        (:func:`protocol.cid.content_cid`)."""
        ...

    def get(self, cid: str) -> bytes:
        """The content under ``cid`` — a raw CID's block, a dag-pb CID's file — every block
        verified."""
        ...

    def has(self, cid: str) -> bool:
        """Tell whether every block under ``cid`` is available."""
        ...


def verified(cid: str, data: bytes) -> bytes:
    """Return the block ``data`` if it hashes to ``cid``; raise :class:`DigestMismatch`."""
    if hashlib.sha256(data).digest() != parse_cid(cid)[1]:
        raise DigestMismatch(f"content returned for {cid} does not hash to it")
    return data


def get_by_digest(store: ContentStore, digest: bytes) -> bytes:
    """The payload whose on-chain digest is ``digest``.

    Fetches the root block under the raw spelling of the digest: a UnixFS file root
    (:func:`protocol.unixfs.is_file_root`) is then read as the file under its dag-pb CID,
    any other block is the payload itself.
    """
    root = store.get(raw_cid(digest))
    return store.get(dag_pb_cid(digest)) if is_file_root(root) else root


def has_digest(store: ContentStore, digest: bytes) -> bool:
    """Whether the whole payload with on-chain digest ``digest`` is available (its root block
    missing or corrupt: False; an unreachable store raises :class:`StorageError`)."""
    try:
        root = store.get(raw_cid(digest))
    except (ContentNotFound, DigestMismatch):
        return False
    return store.has(dag_pb_cid(digest)) if is_file_root(root) else True


def resolve_cid(store: ContentStore, digest: bytes) -> str | None:
    """The CID of the content with on-chain digest ``digest`` (``ipfs cat`` it), or None if
    its root block is not available."""
    try:
        root = store.get(raw_cid(digest))
    except (ContentNotFound, DigestMismatch):
        return None
    return cid_for_digest(digest, root)


class _DagStore:
    """``get``/``has``/``iter_content``/``put`` over a store's block primitives."""

    def _fetch(self, codec: int, digest: bytes) -> bytes:
        """The block stored under ``digest``, unverified; :class:`ContentNotFound` if absent."""
        raise NotImplementedError

    def _exists(self, codec: int, digest: bytes) -> bool:
        raise NotImplementedError

    def put_stream(self, chunks: Iterable[bytes | bytearray | memoryview]) -> str:
        """Store the payload made of ``chunks`` (any sizes) block by block; return its CID."""
        raise NotImplementedError

    def put(self, data: bytes) -> str:
        return self.put_stream((data,))

    def iter_content(self, cid: str, *, max_size: int | None = None) -> Iterator[bytes]:
        """Yield the content under ``cid`` block by block, each verified before it is yielded;
        the DAG's canonical form is confirmed when the iterator ends (see
        :func:`protocol.unixfs.iter_file`)."""
        codec, digest = parse_cid(cid)
        return iter_file(codec, digest, self._fetch, max_size=max_size)

    def get(self, cid: str) -> bytes:
        pieces = self.iter_content(cid)
        first = next(pieces)
        second = next(pieces, None)
        if second is None:  # one block: no copy
            return first
        out = io.BytesIO()  # grows in place; getvalue() hands over its buffer without a copy
        out.write(first)
        out.write(second)
        for piece in pieces:
            out.write(piece)
        return out.getvalue()

    def has(self, cid: str) -> bool:
        codec, digest = parse_cid(cid)
        return dag_complete(codec, digest, self._fetch, self._exists)


class LocalStore(_DagStore):
    """Embedded content-addressed store: one file per block under ``root``.

    Blocks are named by the raw CID of their digest (the multihash, as IPFS keys them), in
    ``root/<last two characters>/``. Writes are atomic (temporary file + rename), so a crash
    never leaves a partial block under a valid name; a block written twice is stored once.
    A file's blocks are written children first and its root last, so a present root means
    the whole DAG was written.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: bytes) -> Path:
        name = raw_cid(digest)
        return self.root / name[-2:] / name

    def _fetch(self, codec: int, digest: bytes) -> bytes:
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError as exc:
            raise ContentNotFound(f"no content stored for {block_cid(codec, digest)}") from exc

    def _exists(self, codec: int, digest: bytes) -> bool:
        return self._path(digest).exists()

    def _write(self, codec: int, digest: bytes, block: bytes) -> None:
        path = self._path(digest)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(block)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def put_stream(self, chunks: Iterable[bytes | bytearray | memoryview]) -> str:
        builder = DagBuilder(self._write)
        for chunk in chunks:
            builder.write(chunk)
        return block_cid(*builder.finish())

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"


class IpfsStore(_DagStore):
    """A real IPFS node (js-ipfs or Kubo) reached through its HTTP RPC API.

    ``api`` is the node's API multiaddr (``/ip4/127.0.0.1/tcp/5001/http``) or URL
    (``http://127.0.0.1:5001``).

    ``put`` streams the payload to ``add`` with the options of :data:`ADD_OPTIONS` (CIDv1,
    raw leaves, 256 KiB fixed-size chunks, balanced layout, sha2-256, pinned) — the DAG
    :mod:`protocol.unixfs` builds — while hashing it locally, and refuses the put
    (:class:`DigestMismatch`) unless the node's root CID equals ours. The body is sent
    chunked (js-ipfs refuses a ``Content-Length`` over 1 MiB, not a chunked body), so
    payloads of any size go through with memory bounded by one chunk.

    Reads walk the DAG with ``block/get``, one block per request, each verified before use.
    They ask the node for its *local* blocks only (``offline=true``: the testnet's parties
    share one node) and bound the daemon's wait with its ``timeout`` option: js-ipfs never
    answers "not found" for a missing block, it waits for the network. So a block the node
    does not hold costs ``probe_timeout`` seconds in :meth:`has` (False) and :meth:`get`
    (:class:`ContentNotFound`); a held block answers in milliseconds. An unreachable node
    raises :class:`StorageError` in every method (``has`` does not turn it into False).
    """

    #: ``add`` options: the same DAG as :func:`protocol.unixfs.build` (Kubo and js-ipfs
    #: spell them alike).
    ADD_OPTIONS: tuple[tuple[str, str], ...] = (
        ("cid-version", "1"),
        ("raw-leaves", "true"),
        ("chunker", f"size-{CHUNK_SIZE}"),
        ("trickle", "false"),
        ("hash", "sha2-256"),
        ("pin", "true"),
        ("wrap-with-directory", "false"),
        ("cid-base", "base32"),  # js-ipfs answers base58btc otherwise
    )
    _BOUNDARY = "fedchain-unixfs-payload"

    def __init__(
        self,
        api: str = "/ip4/127.0.0.1/tcp/5001/http",
        timeout: float = 30.0,
        *,
        probe_timeout: float = 2.0,
    ) -> None:
        import warnings

        import ipfshttpclient

        # ipfshttpclient 0.7 passes urllib3 a deprecated argument on every request.
        warnings.filterwarnings(
            "ignore", message="The 'strict' parameter is no longer needed", category=FutureWarning
        )
        if timeout <= 0 or probe_timeout <= 0:
            raise StorageError("IPFS timeouts must be > 0 seconds")
        self.api = _api_multiaddr(api)
        self.timeout = timeout
        self.probe_timeout = probe_timeout
        self._ipfshttpclient = ipfshttpclient
        self._local = threading.local()
        try:
            self._http()  # validates the address now, not at the first request
        except Exception as exc:  # AddressError and friends
            raise StorageError(f"bad IPFS API address {api!r}: {exc}") from exc

    # -- HTTP ------------------------------------------------------------------------------

    def _http(self, fresh: bool = False) -> Any:
        """This thread's HTTP client. Each thread keeps its own keep-alive session
        (requests sessions are not thread-safe); reusing the connection halves the cost of
        a request (measured on js-ipfs: get 4.2 -> 2.3 ms, put 9.8 -> 3.5 ms)."""
        local = self._local
        client = getattr(local, "client", None)
        if fresh or client is None or local.pid != os.getpid():
            if client is not None and local.pid == os.getpid():
                with contextlib.suppress(Exception):
                    client.close()
            # ipfshttpclient.connect() refuses every modern daemon's version: build it directly.
            client = self._ipfshttpclient.Client(addr=self.api, timeout=self.timeout, session=True)
            local.client, local.pid = client, os.getpid()
        return client._client

    def _call(
        self, path: str, *, read: bool = False, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        """One RPC call; errors become :class:`StorageError` (``read``: missing content
        becomes :class:`ContentNotFound`)."""
        from ipfshttpclient import exceptions as ipfs_exc

        limit = self.timeout if timeout is None else timeout
        try:
            try:
                return self._http().request(path, timeout=limit, **kwargs)
            except ipfs_exc.ConnectionError:
                # The node may have closed an idle keep-alive connection just as it was
                # reused: retry once on a new connection (every call here is idempotent:
                # reads, or a put of content-addressed bytes). A request body that is a
                # stream must be rebuilt by the caller, so only retry without one.
                if "data" in kwargs:
                    raise
                return self._http(fresh=True).request(path, timeout=limit, **kwargs)
        except ipfs_exc.ConnectionError as exc:
            self._http(fresh=True)
            raise _Unreachable(f"cannot reach the IPFS node at {self.api}: {exc}") from exc
        except ipfs_exc.TimeoutError as exc:
            if read:
                raise ContentNotFound(
                    f"{path}: no answer from {self.api} within the time limit"
                ) from exc
            raise StorageError(f"IPFS node at {self.api} did not answer {path} in time") from exc
        except ipfs_exc.Error as exc:
            text = _error_text(exc)
            lowered = text.lower()
            if read and any(m in lowered for m in _MISSING_MARKERS):
                raise ContentNotFound(f"{path}: {text}") from exc
            raise StorageError(f"IPFS node at {self.api}, {path}: {text}") from exc

    def _read_opts(self) -> dict[str, str]:
        return {"offline": "true", "timeout": f"{max(1, round(self.probe_timeout * 1000))}ms"}

    # -- blocks ----------------------------------------------------------------------------

    def _fetch(self, codec: int, digest: bytes) -> bytes:
        cid = block_cid(codec, digest)
        data = self._call("/block/get", read=True, args=(cid,), opts=self._read_opts())
        if not isinstance(data, bytes | bytearray):
            raise StorageError(f"IPFS node at {self.api} answered block/get with {type(data)}")
        return bytes(data)

    def _exists(self, codec: int, digest: bytes) -> bool:
        try:
            resp = self._call(
                "/block/stat",
                read=True,
                args=(block_cid(codec, digest),),
                opts=self._read_opts(),
                decoder="json",
                timeout=self.probe_timeout + 5.0,
            )
        except ContentNotFound:
            return False
        return bool(resp)

    # -- ContentStore ----------------------------------------------------------------------

    def put(self, data: bytes) -> str:
        try:
            return self.put_stream((data,))
        except _Unreachable:
            # The node may have dropped an idle keep-alive connection as it was reused; the
            # bytes are at hand, so send them once more on a fresh connection.
            self._http(fresh=True)
            return self.put_stream((data,))

    def put_stream(self, chunks: Iterable[bytes | bytearray | memoryview]) -> str:
        builder = DagBuilder()

        def body() -> Iterator[bytes]:
            yield (
                f"--{self._BOUNDARY}\r\n"
                'Content-Disposition: form-data; name="file"; filename="payload"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                builder.write(view)
                for start in range(0, len(view), CHUNK_SIZE):
                    yield bytes(view[start : start + CHUNK_SIZE])
            yield f"\r\n--{self._BOUNDARY}--\r\n".encode()

        resp = self._call(
            "/add",
            opts=dict(self.ADD_OPTIONS),
            data=body(),
            headers={"Content-Type": f"multipart/form-data; boundary={self._BOUNDARY}"},
            decoder="json",
        )
        got = _added_cid(resp)
        codec, digest = builder.finish()
        expected = block_cid(codec, digest)
        try:
            same = parse_cid(got) == (codec, digest)
        except StorageError:
            same = False
        if not same:
            raise DigestMismatch(
                f"IPFS node at {self.api} stored the payload as {got}, expected {expected} "
                "(does it honour the add options raw-leaves, cid-version 1, chunker size-262144?)"
            )
        return expected

    def __repr__(self) -> str:
        return f"IpfsStore({self.api!r})"


class _Unreachable(StorageError):
    """The IPFS node refused or dropped the connection."""


#: Error texts that mean "this node does not hold that block (within the time allowed)":
#: Kubo offline ("block was not found locally (offline)", "ipld: could not find"), js-ipfs
#: ("request timed out", "NotFoundError"), Kubo's --timeout ("context deadline exceeded").
_MISSING_MARKERS = (
    "not found",
    "notfound",
    "could not find",
    "timed out",
    "timeout",
    "deadline exceeded",
)


def _error_text(exc: BaseException) -> str:
    parts = [str(a) for a in exc.args if a is not None and str(a)]
    return "; ".join(parts) or type(exc).__name__


def _added_cid(resp: Any) -> str:
    """The root CID in an ``add`` answer (NDJSON: one object per file, the last is ours)."""
    item = resp[-1] if isinstance(resp, list) and resp else resp
    key = item.get("Hash") if isinstance(item, dict) else None
    if not isinstance(key, str):
        raise StorageError(f"unexpected add answer: {resp!r}")
    return key


def _api_multiaddr(api: str) -> str:
    """Turn an ``http(s)://host:port`` API URL into a multiaddr; pass multiaddrs through."""
    if not api.startswith(("http://", "https://")):
        return api
    from urllib.parse import urlsplit

    url = urlsplit(api)
    host = url.hostname
    if not host:
        raise StorageError(f"bad IPFS API URL {api!r}")
    port = url.port or (443 if url.scheme == "https" else 80)
    if ":" in host:
        proto = "ip6"
    elif host.replace(".", "").isdigit():
        proto = "ip4"
    else:
        proto = "dns"
    return f"/{proto}/{host}/tcp/{port}/{url.scheme}"


class PeerStore:
    """One node's view of content storage: its own store plus the stores of its peers.

    Each node of an in-process run gets its own store (its own IPFS node, say); ``peers``
    maps a node's address to that node's store, reached through the same Kubo-compatible
    ``put``/``get``/``has`` interface. :meth:`get` and :meth:`has` look locally first and then
    fetch from any peer that holds the content (verified by the peer's store, then pinned
    locally); :meth:`has_local` and :meth:`fetch_from` give the narrower views the
    availability protocol needs: what this node holds, and fetching a payload by its on-chain
    digest from named nodes (the update's publisher, or the members that attested to it).
    :meth:`push` hands content to chosen peers (a publisher uploading to some nodes only).
    """

    def __init__(self, local: ContentStore, peers: dict[str, ContentStore] | None = None) -> None:
        self.local = local
        self.peers: dict[str, ContentStore] = peers if peers is not None else {}

    def put(self, data: bytes) -> str:
        return self.local.put(data)

    def has_local(self, digest: bytes) -> bool:
        """Whether this node itself holds the whole payload with on-chain ``digest``."""
        return has_digest(self.local, digest)

    def fetch_from(self, digest: bytes, names: list[str]) -> bytes:
        """The payload with on-chain ``digest`` from this node, else from the first of
        ``names`` holding it (verified block by block, then pinned locally);
        :class:`ContentNotFound` if none does."""
        try:
            return get_by_digest(self.local, digest)
        except (ContentNotFound, DigestMismatch):
            pass
        for name in names:
            peer = self.peers.get(name)
            if peer is None or peer is self.local:
                continue
            try:
                data = get_by_digest(peer, digest)
            except (ContentNotFound, DigestMismatch):
                continue
            self.local.put(data)
            return data
        raise ContentNotFound(
            f"no content for digest {digest.hex()} here or at {len(names)} peer(s)"
        )

    def _by_cid(self, cid: str) -> bytes:
        try:
            return self.local.get(cid)
        except (ContentNotFound, DigestMismatch):
            pass
        for peer in self.peers.values():
            if peer is self.local:
                continue
            try:
                data = peer.get(cid)
            except (ContentNotFound, DigestMismatch):
                continue
            # A large payload's root block (read by its raw CID on the way to the whole file,
            # see get_by_digest) is not a payload of its own: the file it roots is pinned when
            # it is read under its dag-pb CID.
            if not is_file_root(data):
                self.local.put(data)
            return data
        raise ContentNotFound(f"no content for {cid} here or at {len(self.peers)} peer(s)")

    def get(self, cid: str) -> bytes:
        return self._by_cid(cid)

    def has(self, cid: str) -> bool:
        try:
            self._by_cid(cid)
        except ContentNotFound:
            return False
        return True

    def push(self, data: bytes, names: list[str]) -> str:
        """Store ``data`` at the peers ``names`` (not locally); returns its CID."""
        cid = content_cid(data)
        for name in names:
            self.peers[name].put(data)
        return cid

    def __repr__(self) -> str:
        return f"PeerStore({self.local!r}, {len(self.peers)} peers)"


def open_store(spec: str) -> ContentStore:
    """Open a store from a CLI spelling: a directory path, or ``ipfs:<multiaddr|http-url>``."""
    if spec.startswith("ipfs:"):
        return IpfsStore(spec[len("ipfs:") :])
    return LocalStore(spec)
