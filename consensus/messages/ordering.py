"""Normal-case ordering phase messages: pre-prepare, prepare, commit, and the commit proof
and fetch a lagging replica uses to catch up on committed sequence numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eth_utils.crypto import keccak

from consensus.messages.common import InstanceKey, _memo, item_hash, struct_hash


@dataclass(frozen=True)
class _SlotVote:
    """Fields and hashing shared by the two per-slot messages (pre-prepare and prepare)."""

    view: int
    seq: int
    round: int
    attempt: int
    aggregate_digest: bytes
    faulty: bool
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = ""

    @property
    def key(self) -> InstanceKey:
        return (self.round, self.attempt, self.aggregate_digest)

    @property
    def content(self) -> tuple[int, int, InstanceKey, bool]:
        return (self.view, self.seq, self.key, self.faulty)

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash(
            self.TYPE,
            (self.view, self.seq, self.round, self.attempt, self.aggregate_digest, self.faulty),
        )


@dataclass(frozen=True)
class PrePrepare(_SlotVote):
    """Primary of ``view`` proposes verdict ``faulty`` for the dispute at sequence ``seq``."""

    TYPE: ClassVar[str] = "PrePrepare"


@dataclass(frozen=True)
class Prepare(_SlotVote):
    """A replica accepts the pre-prepare for ``(view, seq)`` with this verdict."""

    TYPE: ClassVar[str] = "Prepare"


@dataclass(frozen=True)
class Commit:
    """A replica saw a prepared certificate in ``view``; signs the on-chain ``DisputeVerdict``.

    The sequence number is deliberately not signed (the contract's struct has none): within a
    view a correct replica binds an instance to a single sequence number, so the commit is
    matched to its slot by ``(view, instance)``.
    """

    round: int
    attempt: int
    aggregate_digest: bytes
    faulty: bool
    view: int
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "DisputeVerdict"

    @property
    def key(self) -> InstanceKey:
        return (self.round, self.attempt, self.aggregate_digest)

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash(
            "DisputeVerdict",
            (self.round, self.attempt, self.aggregate_digest, self.faulty, self.view),
        )


@dataclass(frozen=True)
class CommitProof:
    """Self-contained proof that ``pre_prepare`` committed: its prepares and ``n - f`` commits.

    Sent to a lagging replica so it can execute a sequence number it missed (state transfer
    for entries above the stable checkpoint) and learn the decision with its certificate.
    """

    pre_prepare: PrePrepare
    prepares: tuple[Prepare, ...]
    commits: tuple[Commit, ...]
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "CommitProof"

    @property
    def seq(self) -> int:
        return self.pre_prepare.seq

    @property
    def view(self) -> int:
        return self.pre_prepare.view

    def proof_hash(self) -> bytes:
        prepares = keccak(b"".join(item_hash(p) for p in self.prepares))
        commits = keccak(b"".join(item_hash(c) for c in self.commits))
        return keccak(item_hash(self.pre_prepare) + prepares + commits)

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash("CommitProof", (self.seq, self.view, self.proof_hash()))


@dataclass(frozen=True)
class Fetch:
    """A replica that fast-forwarded over ``[from_seq, to_seq]`` asks for those commit proofs."""

    from_seq: int
    to_seq: int
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "Fetch"

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash("Fetch", (self.from_seq, self.to_seq))
