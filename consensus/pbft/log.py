"""The records a replica keeps: log slots, execution proofs, decisions, the state digest."""

from __future__ import annotations

from dataclasses import dataclass, field

from eth_hash.auto import keccak

from consensus.certificate import CommitCertificate
from consensus.messages import Commit, CommitProof, InstanceKey, Prepare, PreparedCert, PrePrepare

__all__ = ["Decided", "Proof", "Slot", "state_transition"]


def state_transition(prev: bytes, seq: int, key: InstanceKey, faulty: bool) -> bytes:
    """Rolling state digest: ``keccak256(prev ‖ seq ‖ round ‖ attempt ‖ digest ‖ faulty)``."""
    r, a, d = key
    return keccak(
        prev
        + seq.to_bytes(32, "big")
        + r.to_bytes(32, "big")
        + a.to_bytes(32, "big")
        + d
        + (b"\x01" if faulty else b"\x00")
    )


@dataclass
class Slot:
    """Log entry for one sequence number in the current view."""

    pre_prepare: PrePrepare | None = None
    prepares: dict[int, Prepare] = field(default_factory=dict)
    reissued: bool = False
    disagreed: bool = False
    own_prepare: Prepare | None = None
    own_commit: Commit | None = None
    cert: PreparedCert | None = None
    commit_msgs: tuple[Commit, ...] = ()
    committed: bool = False


@dataclass
class Proof:
    """Everything needed to prove an executed sequence number to a lagging replica."""

    pre_prepare: PrePrepare
    prepares: tuple[Prepare, ...]
    commits: tuple[Commit, ...]
    signed: CommitProof | None = None


@dataclass
class Decided:
    """A decided instance in the replica's history."""

    seq: int  # 0 if learned from a bare certificate
    faulty: bool
    certificate: CommitCertificate
    proof: Proof | None
