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
