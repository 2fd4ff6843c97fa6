"""Lagging replicas: commit proofs, FETCH, and the retransmission that triggers them.

A replica that receives a *retransmission* for a sequence number it already executed answers
with a COMMIT-PROOF (pre-prepare, ``n - f`` prepares, ``n - f`` commits: self-authenticating,
so one honest helper suffices and a lying one cannot mislead). A replica that adopted a stable
checkpoint it had not reached asks for the skipped decisions with ``FETCH(from, to)``. Replies
are never answered, so nothing amplifies.
"""

from __future__ import annotations

from collections.abc import Iterable

from consensus.messages import CommitProof, Fetch, InstanceKey, PreparedCert
from consensus.pbft.core import ReplicaCore
from consensus.pbft.log import Proof
from protocol.errors import ConsensusError

__all__ = ["CatchupService"]

#: A gap nobody fills after this many retransmission rounds is given up.
MAX_FETCH_TRIES = 20


class CatchupService:
    """Commit proofs received ahead of execution, the gap a state transfer left, FETCH."""

    def __init__(self, core: ReplicaCore) -> None:
        self.core = core
        self.ready: dict[int, CommitProof] = {}  # proofs for seqs we have not executed yet
        self.gap: set[int] = set()  # seqs skipped by a state transfer, decisions unknown
        self._fetch: Fetch | None = None
        self._fetch_tries = 0

    # ---- helping others -------------------------------------------------------------------

    def _commit_proof(self, proof: Proof) -> CommitProof:
        if proof.signed is None:
            c = self.core
            proof.signed = c.sign(
                CommitProof(proof.pre_prepare, proof.prepares, proof.commits, c.index)
            )
        return proof.signed

    def _send_stable_proof(self, to: int) -> None:
        for cp in self.core.stable_proof:
            self.core.send(to, cp)

    def _proof_at(self, seq: int) -> Proof | None:
        proof = self.core.proofs.get(seq)
        if proof is None:
            for d in self.core.decided.values():
                if d.seq == seq:
                    return d.proof
        return proof

    def help_seq(self, to: int, seq: int) -> None:
        """``to`` retransmitted a message for ``seq``: if we executed it, prove it to them."""
        c = self.core
        if seq > c.last_executed:
            return
        if seq <= c.h:
            self._send_stable_proof(to)
        proof = self._proof_at(seq)
        if proof is not None:
            c.send(to, self._commit_proof(proof))

    def help_decided(self, to: int, key: InstanceKey) -> None:
        d = self.core.decided.get(key)
        if d is not None and d.proof is not None:
            if d.seq <= self.core.h:
                self._send_stable_proof(to)
            self.core.send(to, self._commit_proof(d.proof))

    def help_behind(self, to: int, stable_seq: int) -> None:
        """``to`` is at stable checkpoint ``stable_seq``: send our stable proof if it is newer
        and the commit proofs above ``stable_seq`` we hold (at most ``catchup_limit``)."""
        c = self.core
        limit = c.config.catchup_limit
        if stable_seq < c.h:
            self._send_stable_proof(to)
        proofs: dict[int, Proof] = {s: p for s, p in c.proofs.items() if s > stable_seq}
        for d in reversed(c.decided.values()):
            if len(proofs) >= limit:
                break
            if d.seq > stable_seq and d.proof is not None:
                proofs.setdefault(d.seq, d.proof)
        for s in sorted(proofs)[:limit]:
            c.send(to, self._commit_proof(proofs[s]))

    def on_fetch(self, m: Fetch) -> None:
        """Answer with our stable checkpoint proof (if it covers ``from_seq``) and the commit
        proofs we hold in the range. Answers are never answered, so nothing amplifies."""
        c = self.core
        if m.to_seq < m.from_seq:
            raise ConsensusError("empty fetch range")
        c.verify(m)
        if c.h >= m.from_seq:
            self._send_stable_proof(m.sender)
        hi = min(m.to_seq, c.last_executed, m.from_seq + c.config.catchup_limit - 1)
        for seq in range(m.from_seq, hi + 1):
            proof = self._proof_at(seq)
            if proof is not None:
                c.send(m.sender, self._commit_proof(proof))

    # ---- being helped ---------------------------------------------------------------------

    def request_skipped(self, seqs: Iterable[int]) -> None:
        """A state transfer skipped ``seqs``: ask the others for their commit proofs."""
        self.gap.update(seqs)
        self._request_gap()

    def _request_gap(self) -> None:
        while len(self.gap) > self.core.config.catchup_limit:
            self.gap.discard(min(self.gap))
        if not self.gap:
            self._fetch = None
            return
        self._request(min(self.gap), max(self.gap))

    def _request(self, lo: int, hi: int) -> None:
        if self._fetch is None or (self._fetch.from_seq, self._fetch.to_seq) != (lo, hi):
            self._fetch = self.core.sign(Fetch(lo, hi, self.core.index))
            self._fetch_tries = 0
        self.core.broadcast(self._fetch)

    def on_commit_proof(self, m: CommitProof) -> None:
        c = self.core
        pp = m.pre_prepare
        known = c.executed.get(pp.seq)
        wanted = pp.seq in self.gap or pp.key not in c.decided
        if not wanted and (known is not None or pp.seq <= c.last_executed):
            if known is not None and known != (pp.key, pp.faulty):
                self._check_commit_proof(m)
                c.stats["divergences"] += 1
            return
        self._check_commit_proof(m)
        self.gap.discard(pp.seq)
        if known is not None and known != (pp.key, pp.faulty):
            c.stats["divergences"] += 1
        proof = Proof(pp, m.prepares, m.commits)
        cur = c.prepared.get(pp.seq)
        if c.in_window(pp.seq) and (cur is None or cur.view < pp.view):
            c.prepared[pp.seq] = PreparedCert(pp, m.prepares)
        if pp.key not in c.decided:
            c.decide(pp.seq, proof)
        if pp.seq > c.last_executed and c.in_window(pp.seq):
            self.ready[pp.seq] = m
            c.ordering.progress()

    def _check_commit_proof(self, m: CommitProof) -> None:
        c = self.core
        c.verify(m)
        pp = m.pre_prepare
        c.check_prepared_cert(pp, m.prepares)
        senders = set()
        for cm in m.commits:
            if (cm.key, cm.faulty, cm.view) != (pp.key, pp.faulty, pp.view) or cm.sender in senders:
                raise ConsensusError("commit proof commits do not match its pre-prepare")
            c.verify(cm)
            senders.add(cm.sender)
        if len(senders) < c.quorum:
            raise ConsensusError("commit proof below quorum")

    def retransmit(self, unstable_checkpoint: int | None) -> None:
        """Ask again for the gap; or, if our checkpoint is not stable yet, for a stable proof
        at or past it."""
        if self.gap:
            self._fetch_tries += 1
            if self._fetch_tries > MAX_FETCH_TRIES:  # nobody holds these proofs any more
                self.gap.clear()
                self._fetch = None
            else:
                self._request_gap()
        elif unstable_checkpoint is not None:
            self._request(unstable_checkpoint, unstable_checkpoint)
