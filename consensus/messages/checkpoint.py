"""Checkpoint phase: the signed state digest after a sequence number."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from consensus.messages.common import _memo, struct_hash


@dataclass(frozen=True)
class Checkpoint:
    """The replica's state digest after executing sequence number ``seq``."""

    seq: int
    state_digest: bytes
    sender: int
    signature: bytes = b""

    TYPE: ClassVar[str] = "Checkpoint"

    @_memo
    def struct_hash(self) -> bytes:
        return struct_hash("Checkpoint", (self.seq, self.state_digest))
