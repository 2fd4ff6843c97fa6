"""Content identifiers: CIDv1, ``raw`` codec, sha2-256 multihash, base32 multibase.

The on-chain ``bytes32`` digest of a payload is the SHA-256 of its bytes; its CID is derived
from that digest alone, so a contract digest and a storage address are two spellings of
the same thing. These are exactly the CIDs an IPFS node gives for
``ipfs block put --cid-codec raw`` (or ``ipfs add --cid-version 1 --raw-leaves`` of a payload
that fits in one chunk).
"""

from __future__ import annotations

import base64
import hashlib

from protocol.errors import StorageError

CID_VERSION = 1
RAW_CODEC = 0x55
SHA2_256 = 0x12
DIGEST_SIZE = 32
_PREFIX = bytes([CID_VERSION, RAW_CODEC, SHA2_256, DIGEST_SIZE])


def sha256_digest(data: bytes) -> bytes:
    """Return the 32-byte SHA-256 digest that identifies ``data`` on-chain."""
    return hashlib.sha256(data).digest()


def cid_from_digest(digest: bytes) -> str:
    """Spell a 32-byte SHA-256 digest as a base32 CIDv1 (raw codec)."""
    if len(digest) != DIGEST_SIZE:
        raise StorageError(f"a sha2-256 digest has 32 bytes, got {len(digest)}")
    return "b" + base64.b32encode(_PREFIX + digest).decode("ascii").lower().rstrip("=")


def cid_of(data: bytes) -> str:
    """Return the CIDv1 (raw, sha2-256, base32) of ``data``."""
    return cid_from_digest(sha256_digest(data))


def digest_from_cid(cid: str) -> bytes:
    """Recover the SHA-256 digest from a CIDv1 raw/sha2-256 base32 CID; reject anything else."""
    if not isinstance(cid, str) or not cid.startswith("b") or len(cid) < 2:
        raise StorageError(f"not a base32 CIDv1: {cid!r}")
    body = cid[1:].upper()
    body += "=" * (-len(body) % 8)
    try:
        raw = base64.b32decode(body)
    except (ValueError, TypeError) as exc:
        raise StorageError(f"not a base32 CIDv1: {cid!r}") from exc
    if len(raw) != len(_PREFIX) + DIGEST_SIZE or raw[: len(_PREFIX)] != _PREFIX:
        raise StorageError(f"only CIDv1 raw sha2-256 CIDs are supported, got {cid!r}")
    return raw[len(_PREFIX) :]
