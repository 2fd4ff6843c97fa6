"""Checkpoints, the stable checkpoint, garbage collection and state transfer.

After executing a multiple of ``K`` a replica broadcasts ``CHECKPOINT(s, stateDigest)``;
``n - f`` matching ones make ``s`` stable: the low-water mark ``h`` moves to ``s`` and every
log entry at or below it is dropped, so the log holds at most ``L`` sequence numbers. A replica
behind a stable checkpoint adopts it (state transfer) and asks for the skipped decisions.
"""

from __future__ import annotations

from collections.abc import Iterable

from consensus.messages import Checkpoint
from consensus.pbft.core import ReplicaCore
from protocol.errors import ConsensusError

__all__ = ["CheckpointService"]


class CheckpointService:
    """Own and received checkpoints; stability, garbage collection, state transfer."""

    def __init__(self, core: ReplicaCore) -> None:
        self.core = core
        self.own: dict[int, Checkpoint] = {}
        self.received: dict[int, dict[int, Checkpoint]] = {}  # seq -> sender -> msg

    def on_executed(self, seq: int) -> None:
        """``seq`` (a multiple of K) executed: sign and broadcast our checkpoint."""
        c = self.core
        cp = c.sign(Checkpoint(seq, c.state_digest, c.index))
        self.own[seq] = cp
        self.received.setdefault(seq, {})[c.index] = cp
        c.broadcast(cp)
        self._check_stable(seq)

    def on_checkpoint(self, m: Checkpoint) -> None:
        c = self.core
        if m.seq == 0 or m.seq % c.K:
            raise ConsensusError("checkpoint at a sequence number that is not a multiple of K")
        if m.seq <= c.h:
            # Never answer a checkpoint with anything: checkpoints are relayed inside stable
            # proofs, so the signer is not necessarily who sent it (answering would amplify).
            # A replica whose checkpoint does not become stable asks with FETCH instead.
            return
        prev = self.received.get(m.seq, {}).get(m.sender)
        if prev is not None:
            if prev == m:
                c.stats["duplicates"] += 1
            else:
                c.record_evidence("checkpoint", m.seq, prev, m)
            return
        c.verify(m)
        if m.seq > c.h + c.L:
            # far ahead of us: keep only the sender's highest such checkpoint (bounded memory)
            for s in [s for s in self.received if s > c.h + c.L and s != m.seq]:
                old = self.received[s].get(m.sender)
                if old is not None:
                    if s > m.seq:
                        return
                    del self.received[s][m.sender]
        self.received.setdefault(m.seq, {})[m.sender] = m
        self._check_stable(m.seq)
        c.ordering.progress()

    def _check_stable(self, seq: int) -> None:
        if seq <= self.core.h:
            return
        groups: dict[bytes, list[Checkpoint]] = {}
        for cp in self.received.get(seq, {}).values():
            groups.setdefault(cp.state_digest, []).append(cp)
        for digest, group in groups.items():
            if len(group) >= self.core.quorum:
                proof = tuple(sorted(group, key=lambda cp: cp.sender)[: self.core.quorum])
                self.adopt_stable(seq, digest, proof)
                return

    def adopt_stable(self, seq: int, digest: bytes, proof: tuple[Checkpoint, ...]) -> None:
        """``seq`` is stable with state ``digest`` (proved by ``proof``): move ``h`` there."""
        c = self.core
        if seq <= c.h:
            return
        if seq <= c.last_executed:
            own = self.own.get(seq)
            if own is not None and own.state_digest != digest:
                c.stats["divergences"] += 1
        else:
            # state transfer: a quorum vouches for the state digest at ``seq``; ask peers for
            # the commit proofs of the skipped sequence numbers to learn their decisions
            lo = max(c.last_executed + 1, seq - c.config.catchup_limit + 1)
            c.last_executed = seq
            c.state_digest = digest
            c.stats["state_transfers"] += 1
            c.catchup.request_skipped(range(lo, seq + 1))
        c.h = seq
        c.unsaved = True
        c.stable_digest = digest
        c.stable_proof = proof
        for d in (c.prepared, c.proofs, c.executed, c.catchup.ready):
            for s in [s for s in d if s <= seq]:
                del d[s]
        for s in [s for s in self.own if s < seq]:
            del self.own[s]
        for s in [s for s in self.received if s <= seq]:
            del self.received[s]
        c.ordering.collect_garbage(seq)

    def check_proof(self, seq: int, digest: bytes, proof: Iterable[Checkpoint]) -> None:
        """``proof`` holds ``n - f`` validly signed checkpoints for ``(seq, digest)``."""
        senders = set()
        for cp in proof:
            if cp.seq != seq or cp.state_digest != digest or cp.sender in senders:
                raise ConsensusError("checkpoint proof messages do not match")
            self.core.verify(cp)
            senders.add(cp.sender)
        if len(senders) < self.core.quorum:
            raise ConsensusError("checkpoint proof below quorum")

    def unstable(self) -> list[int]:
        """Own checkpoints above the stable one."""
        return [s for s in self.own if s > self.core.h]

    def retransmit(self) -> int | None:
        """Re-send our highest unstable checkpoint; return its sequence number."""
        unstable = self.unstable()
        if not unstable:
            return None
        self.core.broadcast(self.own[max(unstable)])
        return max(unstable)

    def log_size(self) -> int:
        return sum(len(b) for b in self.received.values())
