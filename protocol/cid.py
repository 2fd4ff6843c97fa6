"""Content identity: a payload's on-chain digest and its IPFS CID.

A payload is stored as the UnixFS file that ``ipfs add --cid-version 1 --raw-leaves``
builds for it (256 KiB chunks, balanced, sha2-256; see :mod:`protocol.unixfs` and
``docs/storage.md``). Its identity is the root block of that DAG:

* :func:`content_digest` — the ``bytes32`` registered on-chain: the sha2-256 digest of the
  root block. For a payload of at most one chunk (256 KiB) the root is the payload itself
  as a raw block, so the digest is ``sha256(payload)``; above that it is the digest of a
  dag-pb node.
* :func:`content_cid` — the CID ``ipfs add`` prints: CIDv1, base32, codec ``raw``
  (``bafkrei…``) for one chunk, ``dag-pb`` (``bafybei…``) above.

The digest alone does not say which codec its CID has. A reader gets from digest to CID by
looking at the root block (:func:`cid_for_digest`): IPFS blockstores are keyed by the
multihash, so the block can be fetched under the raw spelling of the digest whatever its
codec; it is a multi-chunk file's root iff :func:`protocol.unixfs.is_file_root`, else the
payload itself. ``adapters.storage.get_by_digest`` does exactly that.
"""

from __future__ import annotations

import base64
import hashlib

from protocol.errors import StorageError
from protocol.unixfs import DAG_PB, RAW, build, cid_bytes, is_file_root, parse_cid_bytes

__all__ = [
    "DAG_PB",
    "RAW",
    "block_cid",
    "cid_for_digest",
    "cid_of",
    "content_cid",
    "content_digest",
    "dag_pb_cid",
    "digest_from_cid",
    "parse_cid",
    "raw_cid",
    "sha256_digest",
]


def sha256_digest(data: bytes) -> bytes:
    """The SHA-256 of ``data`` (one block's hash; a payload's identity is
    :func:`content_digest`, which equals this only for payloads of at most 256 KiB)."""
    return hashlib.sha256(data).digest()


def content_digest(payload: bytes | bytearray | memoryview) -> bytes:
    """The 32-byte digest that identifies ``payload`` on-chain: its UnixFS root's sha2-256."""
    return build(payload)[1]


def content_cid(payload: bytes | bytearray | memoryview) -> str:
    """The CID of ``payload`` as ``ipfs add --cid-version 1 --raw-leaves`` prints it."""
    return block_cid(*build(payload))


#: Former name of :func:`content_cid`.
cid_of = content_cid


def block_cid(codec: int, digest: bytes) -> str:
    """Spell a sha2-256 ``digest`` with ``codec`` (:data:`RAW` or :data:`DAG_PB`) as a
    base32 CIDv1."""
    return "b" + base64.b32encode(cid_bytes(codec, digest)).decode("ascii").lower().rstrip("=")


def raw_cid(digest: bytes) -> str:
    """The raw-codec CID of a 32-byte digest (``bafkrei…``): how a block is fetched by its
    multihash alone."""
    return block_cid(RAW, digest)


def dag_pb_cid(digest: bytes) -> str:
    """The dag-pb CID of a 32-byte digest (``bafybei…``)."""
    return block_cid(DAG_PB, digest)


def cid_for_digest(digest: bytes, root_block: bytes) -> str:
    """The CID of the content whose on-chain digest is ``digest``, given its root block.

    ``root_block`` must hash to ``digest`` (the caller fetched it verified). dag-pb if the
    block is a UnixFS file root (:func:`protocol.unixfs.is_file_root`), raw otherwise.
    """
    if sha256_digest(root_block) != digest:
        raise StorageError("the root block does not hash to the digest")
    return dag_pb_cid(digest) if is_file_root(root_block) else raw_cid(digest)


def parse_cid(cid: str) -> tuple[int, bytes]:
    """``(codec, digest)`` of a base32 CIDv1 with codec raw or dag-pb and sha2-256."""
    if not isinstance(cid, str) or not cid.startswith("b") or len(cid) < 2:
        raise StorageError(f"not a base32 CIDv1: {cid!r}")
    body = cid[1:].upper()
    body += "=" * (-len(body) % 8)
    try:
        raw = base64.b32decode(body)
    except (ValueError, TypeError) as exc:
        raise StorageError(f"not a base32 CIDv1: {cid!r}") from exc
    try:
        codec, digest = parse_cid_bytes(raw)
    except StorageError as exc:
        raise StorageError(f"{exc}: {cid!r}") from exc
    if block_cid(codec, digest) != cid:  # one spelling per CID (lower case, no padding)
        raise StorageError(f"not a canonical base32 CIDv1: {cid!r}")
    return codec, digest


def digest_from_cid(cid: str) -> bytes:
    """The 32-byte sha2-256 digest inside a raw or dag-pb CIDv1."""
    return parse_cid(cid)[1]
