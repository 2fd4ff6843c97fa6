"""UnixFS files exactly as ``ipfs add`` builds them, and a verifier that walks them back.

A payload is stored as the UnixFS v1 file DAG that ``ipfs add --cid-version 1 --raw-leaves
--chunker size-262144 --hash sha2-256`` (balanced layout, at most 174 links per node, the
defaults of both Kubo and js-ipfs) produces for it:

* the payload is cut into 256 KiB chunks (the last one shorter; an empty payload is one
  empty chunk); each chunk is a **raw** block (codec 0x55);
* a payload of one chunk is that raw block: its root digest is ``sha256(payload)``;
* otherwise leaves are grouped 174 at a time under **dag-pb** nodes (codec 0x70) holding a
  UnixFS ``File`` message (``Type``, ``filesize``, one ``blocksizes`` entry per link) and
  links with an empty ``Name`` and the child's cumulative size ``Tsize``; those nodes are
  grouped 174 at a time again, level by level, until one root remains.

The dag-pb and UnixFS protobuf messages are encoded by hand, in the canonical form of the
dag-pb spec (links before data, fields in order, minimal varints), because a generic
protobuf library writes ``Data`` before ``Links`` (field order) and would not refuse
non-canonical input. Everything here is pure: blocks go to a ``sink`` callback when built,
and come from a ``fetch`` callback when read, so the same code runs for the embedded store,
an IPFS node and the protocol's digests (:func:`protocol.cid.content_digest`).

Reading (:func:`iter_file`) verifies the SHA-256 of every block before its contents are
used, bounds the walk by the shape of the canonical tree for the declared size, and finally
rebuilds the parent nodes from the leaves it saw: a DAG that is not byte-for-byte the
canonical one for its content is refused (:class:`~protocol.errors.DigestMismatch`), so the
digest identifies one payload and one DAG.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from protocol.errors import ContentNotFound, DigestMismatch, StorageError

CHUNK_SIZE = 262_144  # 256 KiB, ``--chunker size-262144`` (the default)
MAX_LINKS = 174  # links per node, the balanced layout's default (Kubo and js-ipfs)
RAW = 0x55  # multicodec ``raw``: a leaf, the chunk's bytes as they are
DAG_PB = 0x70  # multicodec ``dag-pb``: a UnixFS node
SHA2_256 = 0x12  # multihash code
DIGEST_SIZE = 32
CID_VERSION = 1
_UNIXFS_FILE = 2  # UnixFS Data.DataType.File
_FILE_ROOT_PREFIX = bytes([0x08, _UNIXFS_FILE])  # UnixFS Data starting with ``Type = File``

#: ``sink(codec, digest, block)``: receives every block as it is built (children first,
#: the root last).
Sink = Callable[[int, bytes, bytes], None]
#: ``fetch(codec, digest) -> block``: returns the block stored under that multihash
#: (unverified: :func:`iter_file` checks it).
Fetch = Callable[[int, bytes], bytes]


# ----------------------------------------------------------------------------------------
# Binary CIDs
# ----------------------------------------------------------------------------------------


def cid_bytes(codec: int, digest: bytes) -> bytes:
    """Binary CIDv1 of a sha2-256 ``digest`` with ``codec`` (raw or dag-pb)."""
    if codec not in (RAW, DAG_PB):
        raise StorageError(f"unsupported CID codec 0x{codec:x} (raw 0x55 or dag-pb 0x70 only)")
    if len(digest) != DIGEST_SIZE:
        raise StorageError(f"a sha2-256 digest has 32 bytes, got {len(digest)}")
    return bytes([CID_VERSION, codec, SHA2_256, DIGEST_SIZE]) + digest


def parse_cid_bytes(raw: bytes) -> tuple[int, bytes]:
    """``(codec, digest)`` of a binary CIDv1 (raw or dag-pb, sha2-256); refuse anything else."""
    if len(raw) != 4 + DIGEST_SIZE or raw[0] != CID_VERSION or raw[2:4] != bytes([SHA2_256, 32]):
        raise StorageError(f"not a CIDv1 sha2-256 CID: {raw.hex()}")
    if raw[1] not in (RAW, DAG_PB):
        raise StorageError(f"unsupported CID codec 0x{raw[1]:x} (raw 0x55 or dag-pb 0x70 only)")
    return raw[1], bytes(raw[4:])


# ----------------------------------------------------------------------------------------
# Protobuf primitives (varints, length-delimited fields), strict
# ----------------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    if n < 0:
        raise ValueError("varints here are unsigned")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a minimal unsigned varint of at most 63 bits at ``pos``; return (value, end)."""
    value = shift = 0
    start = pos
    while True:
        if pos >= len(buf):
            raise StorageError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 56:
            raise StorageError("varint longer than 63 bits")
    if pos - start > 1 and buf[pos - 1] == 0:
        raise StorageError("non-minimal varint")
    return value, pos


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited (wire type 2) field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field number, wire type, value)``: varint (0) or length-delimited (2) only."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise StorageError("protobuf field number 0")
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise StorageError("truncated length-delimited field")
            yield number, wire, buf[pos : pos + length]
            pos += length
        else:
            raise StorageError(f"unexpected protobuf wire type {wire}")


# ----------------------------------------------------------------------------------------
# dag-pb nodes carrying a UnixFS File
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A dag-pb link of a UnixFS file node: the child's CID and cumulative size (``Tsize``)."""

    codec: int
    digest: bytes
    tsize: int


@dataclass(frozen=True)
class FileNode:
    """A decoded UnixFS ``File`` dag-pb node (an internal node of a raw-leaves file DAG)."""

    links: tuple[Link, ...]
    filesize: int
    blocksizes: tuple[int, ...]


def encode_file_node(links: list[Link], blocksizes: list[int]) -> bytes:
    """The canonical dag-pb bytes of a UnixFS ``File`` node over ``links``.

    ``blocksizes[i]`` is the payload size under ``links[i]``; ``filesize`` is their sum. The
    node holds no data of its own (raw leaves), as ``ipfs add --raw-leaves`` writes it.
    """
    if len(links) != len(blocksizes):
        raise ValueError("one blocksize per link")
    unixfs = bytearray(_FILE_ROOT_PREFIX)
    unixfs += b"\x18" + _varint(sum(blocksizes))  # filesize (3)
    for size in blocksizes:
        unixfs += b"\x20" + _varint(size)  # blocksizes (4), not packed
    out = bytearray()
    for link in links:
        body = _field(1, cid_bytes(link.codec, link.digest))  # Hash
        body += b"\x12\x00"  # Name: "" (written, as both Kubo and js-ipfs do)
        body += b"\x18" + _varint(link.tsize)  # Tsize
        out += _field(2, body)  # PBNode.Links (2) come before Data (1)
    out += _field(1, bytes(unixfs))
    return bytes(out)


def _decode_dag_pb(block: bytes) -> tuple[list[tuple[bytes, int | None]], bytes | None]:
    """Strict dag-pb: links (hash, tsize) then at most one Data; names must be empty."""
    links: list[tuple[bytes, int | None]] = []
    data: bytes | None = None
    for number, wire, value in _fields(block):
        if number == 2 and wire == 2 and data is None:
            assert isinstance(value, bytes)
            links.append(_decode_link(value))
        elif number == 1 and wire == 2 and data is None:
            assert isinstance(value, bytes)
            data = value
        else:
            raise StorageError(f"not a canonical dag-pb node (field {number}, wire type {wire})")
    return links, data


def _decode_link(buf: bytes) -> tuple[bytes, int | None]:
    seen = 0
    hash_: bytes | None = None
    tsize: int | None = None
    for number, wire, value in _fields(buf):
        if number <= seen or (number, wire) not in ((1, 2), (2, 2), (3, 0)):
            raise StorageError(f"not a canonical dag-pb link (field {number}, wire type {wire})")
        seen = number
        if number == 1:
            assert isinstance(value, bytes)
            hash_ = value
        elif number == 2 and value != b"":
            raise StorageError("a UnixFS file link has an empty name")
        elif number == 3:
            assert isinstance(value, int)
            tsize = value
    if hash_ is None:
        raise StorageError("a dag-pb link without a hash")
    return hash_, tsize


def is_file_root(block: bytes) -> bool:
    """Whether ``block`` reads as a dag-pb UnixFS file node with at least one link.

    This is the rule that turns an on-chain digest into a CID (:func:`protocol.cid.
    cid_for_digest`): the block under the digest is a multi-chunk file's root if and only if
    it decodes as a strict dag-pb node with at least one link whose ``Data`` starts with the
    UnixFS field ``Type = File`` (bytes ``08 02``); any other block is a one-chunk payload
    stored raw. The builder refuses one-chunk payloads that satisfy the rule, so the two
    readings never collide.
    """
    try:
        links, data = _decode_dag_pb(block)
    except StorageError:
        return False
    return bool(links) and data is not None and data.startswith(_FILE_ROOT_PREFIX)


def decode_file_node(block: bytes) -> FileNode:
    """Decode a UnixFS ``File`` dag-pb node of a raw-leaves DAG; refuse any other node."""
    links, data = _decode_dag_pb(block)
    if data is None:
        raise StorageError("a dag-pb node without UnixFS data")
    fields: dict[int, int] = {}
    blocksizes: list[int] = []
    last = 0
    for number, wire, value in _fields(data):
        if (
            wire != 0
            or number not in (1, 3, 4)
            or number < last
            or (number != 4 and number == last)
        ):
            raise StorageError(f"not a raw-leaves UnixFS file node (field {number})")
        last = number
        assert isinstance(value, int)
        if number == 4:
            blocksizes.append(value)
        else:
            fields[number] = value
    if fields.get(1) != _UNIXFS_FILE or 3 not in fields:
        raise StorageError("not a UnixFS file node (Type File and filesize required)")
    if not links or len(links) != len(blocksizes) or len(links) > MAX_LINKS:
        raise StorageError(
            f"a UnixFS file node needs 1..{MAX_LINKS} links, one blocksize each; "
            f"got {len(links)} links, {len(blocksizes)} blocksizes"
        )
    if sum(blocksizes) != fields[3]:
        raise StorageError("UnixFS filesize is not the sum of its blocksizes")
    parsed: list[Link] = []
    for hash_, tsize in links:
        codec, digest = parse_cid_bytes(hash_)
        if tsize is None:
            raise StorageError("a UnixFS file link without Tsize")
        parsed.append(Link(codec, digest, tsize))
    return FileNode(tuple(parsed), fields[3], tuple(blocksizes))


# ----------------------------------------------------------------------------------------
# Building: a streaming, balanced, raw-leaves DAG builder
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Child:
    codec: int
    digest: bytes
    tsize: int  # cumulative size of the child's blocks
    filesize: int  # payload bytes under the child


class DagBuilder:
    """Build the canonical DAG of a payload fed in pieces, with memory bounded by one chunk
    plus one pending link list per tree level.

    ``write`` any number of byte pieces, then ``finish`` for the root ``(codec, digest)``.
    Every block goes to ``sink`` (if given) as soon as it is complete: leaves in order,
    each parent right after its last child, the root last. A level is reduced as soon as it
    holds 174 children, which yields exactly the tree of js-ipfs's ``reduceToParents``
    (group level by level, 174 at a time) and Kubo's balanced builder.
    """

    def __init__(self, sink: Sink | None = None, *, chunk_size: int = CHUNK_SIZE) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be positive")
        self._sink = sink
        self._chunk = chunk_size
        self._buf = bytearray()
        self._levels: list[list[_Child]] = [[]]
        self._leaves = 0
        self._first_is_file_root = False  # see finish(): such a one-chunk payload is refused
        self.size = 0
        self._root: tuple[int, bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` to the payload."""
        if self._root is not None:
            raise ValueError("write() after finish()")
        view = memoryview(data).cast("B")
        self.size += len(view)
        if self._buf:
            take = min(len(view), self._chunk - len(self._buf))
            self._buf += view[:take]
            view = view[take:]
            if len(self._buf) < self._chunk:
                return
            self._leaf(bytes(self._buf))
            self._buf.clear()
        while len(view) >= self._chunk:
            self._leaf(view[: self._chunk])
            view = view[self._chunk :]
        self._buf += view

    def finish(self) -> tuple[int, bytes]:
        """Close the payload; return the root's ``(codec, digest)`` (emitted last)."""
        if self._root is not None:
            return self._root
        if self._buf or self._leaves == 0:
            self._leaf(bytes(self._buf))
            self._buf.clear()
        if self._leaves == 1:  # one chunk: the raw leaf is the root (reduceSingleLeafToSelf)
            if self._first_is_file_root:
                raise StorageError(
                    "this payload is itself a UnixFS file node; stored raw it would read back "
                    "as another file (wrap it, e.g. in the tensor codec)"
                )
            leaf = self._levels[0][0]
            self._root = (leaf.codec, leaf.digest)
            return self._root
        return self._close()

    # -- internals --------------------------------------------------------------------------

    def _leaf(self, chunk: bytes | memoryview) -> None:
        digest = hashlib.sha256(chunk).digest()
        if self._leaves == 0:
            self._first_is_file_root = is_file_root(bytes(chunk))
        if self._sink is not None:
            self._sink(RAW, digest, bytes(chunk) if isinstance(chunk, memoryview) else chunk)
        self._add_leaf(digest, len(chunk))

    def _add_leaf(self, digest: bytes, size: int) -> None:
        """Add a raw leaf by digest and size (the verifier rebuilds parents this way)."""
        self._leaves += 1
        self._push(0, _Child(RAW, digest, size, size))

    def _push(self, level: int, child: _Child) -> None:
        if level == len(self._levels):
            self._levels.append([])
        self._levels[level].append(child)
        if len(self._levels[level]) == MAX_LINKS:
            self._reduce(level)

    def _reduce(self, level: int) -> None:
        children = self._levels[level]
        self._levels[level] = []
        block = encode_file_node(
            [Link(c.codec, c.digest, c.tsize) for c in children], [c.filesize for c in children]
        )
        digest = hashlib.sha256(block).digest()
        if self._sink is not None:
            self._sink(DAG_PB, digest, block)
        parent = _Child(
            DAG_PB,
            digest,
            len(block) + sum(c.tsize for c in children),
            sum(c.filesize for c in children),
        )
        self._push(level + 1, parent)

    def _close(self) -> tuple[int, bytes]:
        level = 0
        while True:
            pending = self._levels[level]
            higher = any(self._levels[h] for h in range(level + 1, len(self._levels)))
            if level > 0 and not higher and len(pending) == 1:
                root = pending[0]
                self._root = (root.codec, root.digest)
                return self._root
            if pending:
                self._reduce(level)
            level += 1


def build(
    payload: bytes | bytearray | memoryview,
    sink: Sink | None = None,
    *,
    chunk_size: int = CHUNK_SIZE,
) -> tuple[int, bytes]:
    """Build the canonical DAG of ``payload``; return its root ``(codec, digest)``.

    ``chunk_size`` other than 256 KiB is for tests of deep trees only (``ipfs add
    --chunker size-N`` builds the same); stored payloads always use :data:`CHUNK_SIZE`.
    """
    builder = DagBuilder(sink, chunk_size=chunk_size)
    builder.write(payload)
    return builder.finish()


def leaf_count(filesize: int) -> int:
    """Number of raw leaves of the canonical DAG of a ``filesize``-byte payload."""
    return max(1, -(-filesize // CHUNK_SIZE))


def tree_depth(filesize: int) -> int:
    """Levels of dag-pb nodes above the leaves in the canonical DAG (0: one raw leaf)."""
    depth, width = 0, leaf_count(filesize)
    while width > 1:
        width = -(-width // MAX_LINKS)
        depth += 1
    return depth


# ----------------------------------------------------------------------------------------
# Reading: walk and verify
# ----------------------------------------------------------------------------------------


def verified_block(fetch: Fetch, codec: int, digest: bytes) -> bytes:
    """``fetch(codec, digest)``, refused with :class:`DigestMismatch` unless it hashes to it."""
    block = fetch(codec, digest)
    if hashlib.sha256(block).digest() != digest:
        kind = "raw" if codec == RAW else "dag-pb"
        raise DigestMismatch(f"{kind} block {digest.hex()} does not hash to its CID")
    return block


def iter_file(
    codec: int, digest: bytes, fetch: Fetch, *, max_size: int | None = None
) -> Iterator[bytes]:
    """Yield the payload under ``(codec, digest)`` leaf by leaf, each block verified first.

    A raw CID is one block: its bytes. A dag-pb CID must be the root of the canonical
    raw-leaves DAG of its content (:func:`iter_leaves` checks that). Memory is one block at
    a time; a consumer must treat the bytes as valid only once the iterator is exhausted
    without error.
    """
    if codec == RAW:
        root = verified_block(fetch, codec, digest)
        if max_size is not None and len(root) > max_size:
            raise StorageError(f"payload of {len(root)} bytes exceeds the limit of {max_size}")
        yield root
        return
    for link in iter_leaves(digest, fetch, max_size=max_size):
        yield verified_leaf(link, fetch(RAW, link.digest))


def verified_leaf(link: Link, data: bytes) -> bytes:
    """``data`` if it is the raw leaf ``link`` names (its hash and its size), else refuse it."""
    if len(data) != link.tsize or hashlib.sha256(data).digest() != link.digest:
        raise DigestMismatch(f"raw block {link.digest.hex()} does not hash to its CID")
    return data


def iter_leaves(digest: bytes, fetch: Fetch, *, max_size: int | None = None) -> Iterator[Link]:
    """Yield, in payload order, the raw leaves of the canonical DAG whose dag-pb root is
    ``digest``, fetching (and verifying) only its internal nodes.

    The walk refuses any node deeper, wider or larger than the canonical tree allows for the
    root's declared ``filesize`` (so its work is bounded by it, and by ``max_size`` if given,
    before any leaf is named), leaf sizes other than the 256 KiB chunking, and, once the
    last leaf was taken, parents other than those rebuilt from the leaves' digests and sizes
    (:class:`DigestMismatch`). The consumer fetches each leaf and checks it with
    :func:`verified_leaf` (hash and size).
    """
    node = decode_file_node(verified_block(fetch, DAG_PB, digest))
    if max_size is not None and node.filesize > max_size:
        raise StorageError(f"payload of {node.filesize} bytes exceeds the limit of {max_size}")
    if node.filesize <= CHUNK_SIZE:
        raise DigestMismatch(f"dag-pb root {digest.hex()} of a one-chunk payload is not canonical")
    expected_leaves = leaf_count(node.filesize)
    rebuild = DagBuilder()
    seen = [0, 0]  # leaves, bytes

    def walk(node: FileNode, height: int) -> Iterator[Link]:
        for link, size in zip(node.links, node.blocksizes, strict=True):
            if height == 1:
                if link.codec != RAW:
                    raise DigestMismatch("a non-raw leaf: not the canonical raw-leaves DAG")
                seen[0] += 1
                seen[1] += link.tsize
                last = seen[0] == expected_leaves
                if (
                    seen[0] > expected_leaves
                    or link.tsize != size
                    or not (0 < size <= CHUNK_SIZE if last else size == CHUNK_SIZE)
                ):
                    raise DigestMismatch("leaf sizes differ from the canonical 256 KiB chunking")
                rebuild._add_leaf(link.digest, size)
                yield link
            else:
                if link.codec != DAG_PB:
                    raise DigestMismatch("a leaf above the bottom level: not the balanced layout")
                child = decode_file_node(verified_block(fetch, DAG_PB, link.digest))
                if child.filesize != size:
                    raise DigestMismatch("a blocksize differs from its child's filesize")
                yield from walk(child, height - 1)

    yield from walk(node, tree_depth(node.filesize))
    if seen != [expected_leaves, node.filesize]:
        raise DigestMismatch(f"dag-pb root {digest.hex()}: leaves do not add up to its filesize")
    if rebuild.finish() != (DAG_PB, digest):
        raise DigestMismatch(f"dag-pb root {digest.hex()} is not the canonical DAG of its content")


def dag_complete(
    codec: int, digest: bytes, fetch: Fetch, exists: Callable[[int, bytes], bool]
) -> bool:
    """Whether every block of the DAG under ``(codec, digest)`` is present.

    Internal nodes are fetched (verified) to learn their links; leaves are only probed with
    ``exists``. A missing internal node, or one that fails to verify or decode, makes the
    answer False; other storage errors (an unreachable node) propagate. No more than the
    canonical tree's depth is followed.
    """
    if not exists(codec, digest):
        return False
    if codec == RAW:
        return True

    def node(node_digest: bytes) -> FileNode | None:
        try:
            block = verified_block(fetch, DAG_PB, node_digest)
        except (ContentNotFound, DigestMismatch):
            return None  # any other StorageError (an unreachable node) propagates
        try:
            return decode_file_node(block)
        except StorageError:
            return None

    def complete(parent: FileNode, height: int) -> bool:
        for link in parent.links:
            if link.codec == RAW:
                if not exists(RAW, link.digest):
                    return False
                continue
            child = node(link.digest) if height > 1 and exists(DAG_PB, link.digest) else None
            if child is None or not complete(child, height - 1):
                return False
        return True

    root = node(digest)
    return root is not None and complete(root, tree_depth(root.filesize))
