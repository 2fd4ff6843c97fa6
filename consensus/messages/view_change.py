"""View change: prepared certificates, view-change and new-view messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eth_utils.crypto import keccak

from consensus.messages.checkpoint import Checkpoint
from consensus.messages.common import _memo, item_hash, struct_hash
from consensus.messages.ordering import Prepare, PrePrepare


@dataclass(frozen=True)
class PreparedCert:
    """A pre-prepare plus ``n - f`` matching prepares from distinct replicas (not a message)."""

    pre_prepare: PrePrepare
    prepares: tuple[Prepare, ...]

    @property
    def view(self) -> int:
        return self.pre_prepare.view

    @property
    def seq(self) -> int:
        return self.pre_prepare.seq

    def cert_hash(self) -> bytes:
        return keccak(item_hash(self.pre_prepare) + b"".join(item_hash(p) for p in self.prepares))


@dataclass(frozen=True)
class ViewChange:
    """Replica ``sender`` moves to ``new_view``, with its stable checkpoint and prepared certs."""

    new_view: int
    stable_seq: int
    state_digest: bytes
    checkpoint_proof: tuple[Checkpoint, ...]
    prepared: tuple[PreparedCert, ...]
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "ViewChange"

    def proof_hash(self) -> bytes:
        checkpoints = keccak(b"".join(item_hash(c) for c in self.checkpoint_proof))
        prepared = keccak(b"".join(c.cert_hash() for c in self.prepared))
        return keccak(checkpoints + prepared)

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash(
            "ViewChange", (self.new_view, self.stable_seq, self.state_digest, self.proof_hash())
        )


@dataclass(frozen=True)
class NewView:
    """The primary of ``view`` installs it: ``n - f`` view-changes and the re-issued proposals."""

    view: int
    view_changes: tuple[ViewChange, ...]
    pre_prepares: tuple[PrePrepare, ...]
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "NewView"

    @_memo
    def struct_hash(self) -> bytes:
        vcs = keccak(b"".join(item_hash(v) for v in self.view_changes))
        pps = keccak(b"".join(item_hash(p) for p in self.pre_prepares))
        return struct_hash("NewView", (self.view, vcs, pps))
