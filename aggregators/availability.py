"""The task-level data-availability game as an honest member plays it (issue 22,
docs/fault-proof.md "Task-level availability").

Under the fault proof up to n - 1 members may collude, so f + 1 colluding attesters can get
an update "included" that no honest member holds. A member that cannot fetch an included
update it did not attest challenges it (``challengeAvailability``); anyone holding it
answers with one chunk opened against its U_i (``answerAvailability``); an unanswered
challenge expires (``expireAvailability``): the update leaves the included set, its
attesters are slashed and the round re-opens without it.

Pure helpers only: :class:`~aggregators.node.AggregatorNode` sends the transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adapters.records import NO_CHUNK_ROOT, UpdateEntry
from aggregators.execution import privacy_of
from protocol.errors import CodecError
from protocol.manifest import TaskManifest
from protocol.merkle import ChunkTree, chunk_bytes, chunk_count, chunk_values
from protocol.payloads import decode_update_bit


@dataclass(frozen=True)
class ChunkAnswer:
    """What ``answerAvailability`` takes: the vector's dimension, chunk ``j mod
    ceil(dim / 256)`` (1,024 bytes) and its Merkle proof against U_i."""

    dim: int
    chunk: bytes
    proof: list[bytes]


def update_row(manifest: TaskManifest, round_: int, payload: bytes) -> np.ndarray | None:
    """The quantised vector an update payload carries, decoded as the clients commit to it
    (``clients.node.ClientNode.chunk_root``); None for a payload that is no valid update."""
    try:
        row, _ = decode_update_bit(
            manifest.layout,
            manifest.numeric,
            round_,
            payload,
            privacy_of(manifest).adaptive_clip,
        )
    except CodecError:
        return None
    return np.asarray(row, np.int32)


def opens_to_root(manifest: TaskManifest, round_: int, payload: bytes, update: UpdateEntry) -> bool:
    """Whether ``payload`` is the vector ``update``'s signed U_i commits to: what an honest
    member of a fault-proof task must check before attesting it, so that it can always
    answer an availability challenge on an update it attested. A hidden update (zero U_i)
    cannot be challenged and is attested as before."""
    if update.chunk_root == NO_CHUNK_ROOT:
        return True
    row = update_row(manifest, round_, payload)
    return row is not None and ChunkTree(row).root == update.chunk_root


def chunk_answer(row: np.ndarray, j: int) -> ChunkAnswer:
    """The answer to a challenge for chunk ``j`` of ``row`` (taken modulo its chunk count,
    as the contract does)."""
    tree = ChunkTree(row)
    k = j % chunk_count(tree.dim)
    return ChunkAnswer(tree.dim, chunk_bytes(chunk_values(row, k)), tree.proof(k))


def challenge_target(
    updates: Sequence[UpdateEntry],
    included: Sequence[bool],
    mine: Sequence[bool],
    held: Sequence[bool],
) -> int | None:
    """The first included update this member neither holds (``held``: fetched, from anyone)
    nor attested (``mine``: its own attestation, which says it holds it) and that has a U_i
    to open: the one to challenge, or None."""
    for u in updates:
        i = u.index
        if included[i] and not held[i] and not mine[i] and u.chunk_root != NO_CHUNK_ROOT:
            return i
    return None
