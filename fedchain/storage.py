"""Content-addressed storage: an embedded on-disk store and a real IPFS node adapter.

The interface is deliberately small (``put``/``get``/``has``) so it runs against the
embedded store, js-ipfs or Kubo alike. Every read recomputes the CID of the bytes returned
and refuses a mismatch, so a corrupt disk or a lying node can never feed a payload to an
aggregator under the wrong digest.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fedchain.cid import cid_from_digest, cid_of, digest_from_cid, sha256_digest
from fedchain.errors import ContentNotFound, DigestMismatch, StorageError


@runtime_checkable
class ContentStore(Protocol):
    """What every storage backend offers."""

    def put(self, data: bytes) -> str:
        """Store ``data``; return its CID (CIDv1, raw, sha2-256)."""
        ...

    def get(self, cid: str) -> bytes:
        """Return the bytes stored under ``cid``, verified against it."""
        ...

    def has(self, cid: str) -> bool:
        """Tell whether content for ``cid`` is available."""
        ...


def verified(cid: str, data: bytes) -> bytes:
    """Return ``data`` if it hashes to ``cid``; raise :class:`DigestMismatch` otherwise."""
    expected = digest_from_cid(cid)
    if sha256_digest(data) != expected:
        raise DigestMismatch(f"content returned for {cid} does not hash to it")
    return data


def get_by_digest(store: ContentStore, digest: bytes) -> bytes:
    """Fetch the payload whose on-chain digest is ``digest``."""
    return store.get(cid_from_digest(digest))


class LocalStore:
    """Embedded content-addressed store: one file per block under ``root``.

    Writes are atomic (temporary file + rename), so a crash never leaves a partial block
    under a valid name; a block written twice is stored once.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, cid: str) -> Path:
        digest_from_cid(cid)  # validates the CID's form before it becomes a path
        return self.root / cid[-2:] / cid

    def put(self, data: bytes) -> str:
        cid = cid_of(data)
        path = self._path(cid)
        if path.exists():
            return cid
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return cid

    def get(self, cid: str) -> bytes:
        path = self._path(cid)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise ContentNotFound(f"no content stored for {cid}") from exc
        return verified(cid, data)

    def has(self, cid: str) -> bool:
        return self._path(cid).exists()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"


class IpfsStore:
    """A real IPFS node (Kubo or js-ipfs) reached through its HTTP RPC API.

    Blocks are written with ``block/put`` (codec raw, CIDv1, sha2-256) so the node's CID is
    the same as :func:`fedchain.cid.cid_of`; the returned CID is checked against ours. The
    default IPFS block limit (1 MiB on most nodes) bounds one payload; larger payloads need
    chunking, which this adapter does not do yet and refuses clearly.
    """

    MAX_BLOCK = 1 << 20

    def __init__(self, api: str = "/ip4/127.0.0.1/tcp/5001/http", timeout: float = 30.0) -> None:
        import ipfshttpclient  # type: ignore[import-untyped]

        # ipfshttpclient.connect() refuses every modern daemon's version: build the client directly.
        self.api = api
        self._client: Any = ipfshttpclient.Client(addr=api, timeout=timeout)

    def _request(self, path: str, **kwargs: Any) -> Any:
        try:
            return self._client._client.request(path, **kwargs)
        except Exception as exc:  # ipfshttpclient raises many unrelated types
            text = str(exc)
            if "not found" in text.lower() or "could not find" in text.lower():
                raise ContentNotFound(text) from exc
            raise StorageError(f"IPFS node at {self.api}: {text}") from exc

    def put(self, data: bytes) -> str:
        if len(data) > self.MAX_BLOCK:
            raise StorageError(
                f"payload of {len(data)} bytes exceeds the IPFS block limit ({self.MAX_BLOCK})"
            )
        cid = cid_of(data)
        from ipfshttpclient import multipart

        body, headers = multipart.stream_files([("data", data)], chunk_size=65536)  # type: ignore[arg-type]
        resp = self._request(
            "/block/put",
            params=(
                ("format", "raw"),
                ("cid-codec", "raw"),
                ("mhtype", "sha2-256"),
                ("version", "1"),
                ("cid-base", "base32"),
            ),
            data=body,
            headers=headers,
            decoder="json",
        )
        got = resp[0]["Key"] if isinstance(resp, list) else resp["Key"]
        if got != cid:
            raise DigestMismatch(f"IPFS node stored the block as {got}, expected {cid}")
        return cid

    def get(self, cid: str) -> bytes:
        digest_from_cid(cid)
        data = self._request("/block/get", args=(cid,))
        return verified(cid, bytes(data))

    def has(self, cid: str) -> bool:
        digest_from_cid(cid)
        try:
            self._request("/block/stat", args=(cid,), params=(("offline", "true"),))
        except StorageError:
            return False
        return True

    def __repr__(self) -> str:
        return f"IpfsStore({self.api!r})"


def open_store(spec: str) -> ContentStore:
    """Open a store from a CLI spelling: a directory path, or ``ipfs:<multiaddr|http-url>``."""
    if spec.startswith("ipfs:"):
        return IpfsStore(spec[len("ipfs:") :])
    return LocalStore(spec)
