"""Equivocation evidence the task contract can check: two conflicting signed PBFT votes.

A replica records :class:`consensus.pbft.Evidence` whenever one sender signs two different
messages for the same slot. Three kinds are slashable on-chain (``slashEquivocation``),
because a correct replica never signs such a pair and the contract can recompute both
EIP-712 hashes: two ``PrePrepare`` s or two ``Prepare`` s for the same ``(view, seq)`` with
different content, and two ``DisputeVerdict`` commits for the same dispute and view with
opposite verdicts. :func:`proof_of` turns a recorded :class:`~consensus.pbft.Evidence` into
the contract's arguments (or ``None`` for the kinds the contract cannot check: checkpoints,
view changes, one proposal at two sequence numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters.contract.disputes import equivocation_commitment
from consensus.messages import Commit, Prepare, PrePrepare

__all__ = ["KIND_COMMIT", "KIND_PREPARE", "KIND_PRE_PREPARE", "EquivocationProof", "proof_of"]

KIND_PRE_PREPARE, KIND_PREPARE, KIND_COMMIT = 0, 1, 2

#: One signed vote as the contract's ``SignedVote``: (round, attempt, digest, faulty, sig).
Vote = tuple[int, int, bytes, bool, bytes]


@dataclass(frozen=True)
class EquivocationProof:
    """Arguments of ``slashEquivocation(kind, view, seq, first, second)`` against ``sender``."""

    sender: int
    kind: int
    view: int
    seq: int
    first: Vote
    second: Vote

    def contract_args(self) -> tuple[int, int, int, Vote, Vote]:
        return (self.kind, self.view, self.seq, self.first, self.second)

    def sealed(self, task: str, reporter: str) -> bytes:
        """The commitment ``reporter`` sends before revealing this proof to ``task``
        (:func:`adapters.contract.disputes.equivocation_commitment`)."""
        return equivocation_commitment(
            task, self.kind, self.view, self.seq, self.first[4], self.second[4], reporter
        )


def _vote(msg: PrePrepare | Prepare | Commit) -> Vote:
    return (msg.round, msg.attempt, msg.aggregate_digest, msg.faulty, msg.signature)


def proof_of(evidence: Any) -> EquivocationProof | None:
    """The on-chain proof for a recorded evidence pair, or None if it is not slashable."""
    first, second = evidence.first, evidence.second
    if type(first) is not type(second) or first.sender != second.sender:
        return None
    if isinstance(first, Commit) and isinstance(second, Commit):
        if first.key != second.key or first.view != second.view or first.faulty == second.faulty:
            return None
        return EquivocationProof(
            first.sender, KIND_COMMIT, first.view, 0, _vote(first), _vote(second)
        )
    if isinstance(first, PrePrepare | Prepare) and isinstance(second, PrePrepare | Prepare):
        if (first.view, first.seq) != (second.view, second.seq) or first.content == second.content:
            return None
        kind = KIND_PRE_PREPARE if isinstance(first, PrePrepare) else KIND_PREPARE
        return EquivocationProof(
            first.sender, kind, first.view, first.seq, _vote(first), _vote(second)
        )
    return None
