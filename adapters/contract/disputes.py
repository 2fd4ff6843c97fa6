"""Disputes: challenge, resolve by commit certificate, expire, and equivocation slashing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eth_account.signers.local import LocalAccount

from adapters.contract.types import SignedVote, _digest
from adapters.contract.views import ViewsMixin


class DisputesMixin(ViewsMixin):
    """Dispute transactions and the verdict digest they sign."""

    def challenge(self, acct: LocalAccount, round: int, value: int | None = None) -> Any:
        """Challenge the submitted aggregate of ``round``; bonds ``challenge_bond`` unless
        ``value`` is given. ``acct`` must be a non-slashed committee member, not the submitter,
        and the transaction must execute while ``block.number <= challenge_deadline``."""
        bond = self.config().challenge_bond if value is None else value
        return self._tx(acct, "challenge", round, value=bond)

    def resolve_dispute(
        self,
        acct: LocalAccount,
        round: int,
        attempt: int,
        faulty: bool,
        view: int,
        signatures: Sequence[bytes],
    ) -> Any:
        """Carry the committee's verdict on-chain (anyone may send it).

        ``signatures``: 65-byte ``r || s || v`` signatures over :meth:`verdict_digest`, ordered
        by signer address ascending, at least :meth:`commit_quorum` of them.
        """
        sigs = [bytes(sig) for sig in signatures]
        return self._tx(acct, "resolveDispute", round, attempt, bool(faulty), view, sigs)

    def resolve_certificate(self, acct: LocalAccount, certificate: Any) -> Any:
        """:meth:`resolve_dispute` with a ``consensus.certificate.CommitCertificate`` (or any
        object whose ``to_contract_args()`` returns ``(round, attempt, faulty, view, sigs)``)."""
        round, attempt, faulty, view, sigs = certificate.to_contract_args()
        return self.resolve_dispute(acct, round, attempt, faulty, view, sigs)

    def verdict_digest(
        self, round: int, attempt: int, aggregate_digest: bytes, faulty: bool, view: int
    ) -> bytes:
        """The EIP-712 digest a committee member signs for this verdict (computed on-chain)."""
        return bytes(
            self._call(
                "verdictDigest",
                round,
                attempt,
                _digest("aggregate_digest", aggregate_digest),
                bool(faulty),
                view,
            )
        )

    def expire_dispute(self, acct: LocalAccount, round: int) -> Any:
        """Discard the disputed aggregate of ``round`` after its dispute timed out."""
        return self._tx(acct, "expireDispute", round)

    def slash_equivocation(
        self,
        acct: LocalAccount,
        kind: int,
        view: int,
        seq: int,
        first: SignedVote | tuple[int, int, bytes, bool, bytes],
        second: SignedVote | tuple[int, int, bytes, bool, bytes],
    ) -> Any:
        """Prove that one member signed two conflicting PBFT messages (see
        :class:`EvidenceKind`); the caller is credited half of its stake. ``first`` and
        ``second`` are :class:`SignedVote` s or ``(round, attempt, digest, faulty, sig)``."""
        a = first if isinstance(first, SignedVote) else SignedVote(*first)
        b = second if isinstance(second, SignedVote) else SignedVote(*second)
        return self._tx(acct, "slashEquivocation", int(kind), view, seq, a.as_tuple(), b.as_tuple())

    # -- fault-proof hooks (issue 22; docs/fault-proof.md) ---------------------------------

    def set_fault_games(self, owner: LocalAccount, games: str, initial_state_root: bytes) -> Any:
        """Bind the task to a ``FaultGames`` contract (owner only, once, before ``start``);
        ``initial_state_root`` is the chunk root (:mod:`protocol.merkle`) of the initial
        state. From then on aggregates go through :meth:`submit_aggregate_with_claim`."""
        root = _digest("initial_state_root", initial_state_root)
        return self._tx(owner, "setFaultGames", games, root)

    def submit_aggregate_with_claim(
        self,
        acct: LocalAccount,
        round: int,
        digest: bytes,
        claim_id: int,
        value: int | None = None,
    ) -> Any:
        """``submitAggregate`` on a fault-proof task, binding the caller's FaultGames claim
        ``claim_id`` (bonds ``aggregate_bond`` unless ``value`` is given)."""
        bond = self.config().aggregate_bond if value is None else value
        return self._tx(
            acct,
            "submitAggregateWithClaim",
            round,
            _digest("digest", digest),
            claim_id,
            value=bond,
        )

    def reject_refuted(self, acct: LocalAccount, round: int) -> Any:
        """Discard ``round``'s aggregate whose claim was refuted (submitter slashed, the
        caller credited half, the round re-opened at attempt + 1). Anyone."""
        return self._tx(acct, "rejectRefuted", round)

    def slash_refuted_certificate(
        self,
        acct: LocalAccount,
        round: int,
        attempt: int,
        aggregate_digest: bytes,
        view: int,
        signatures: Sequence[bytes],
    ) -> Any:
        """Slash every signer of a "not faulty" commit certificate on (``round``,
        ``attempt``) whose claim was refuted; ``signatures`` as for :meth:`resolve_dispute`
        (sorted by signer, slashed signers included). Anyone; the caller gets half."""
        sigs = [bytes(sig) for sig in signatures]
        return self._tx(
            acct,
            "slashRefutedCertificate",
            round,
            attempt,
            _digest("aggregate_digest", aggregate_digest),
            view,
            sigs,
        )

    def fault_games(self) -> str:
        """The FaultGames contract the task is bound to (the zero address: PBFT only)."""
        return str(self._call("faultGames"))

    def claim_of(self, round: int, attempt: int) -> int | None:
        """The FaultGames claim id bound to the submission of (``round``, ``attempt``)."""
        bound, claim_id = self._call("claimOf", round, attempt)
        return int(claim_id) if bound else None

    def state_root(self, round: int) -> bytes:
        """Chunk root of the state finalized by ``round`` (round 0: the initial state)."""
        return bytes(self._call("stateRoot", round))
