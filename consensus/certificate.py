"""Commit certificates: ``n - f`` committee signatures over one ``DisputeVerdict``.

A certificate is what goes on-chain after a PBFT dispute vote. The task contract recomputes

    digest = keccak256(0x19 0x01 ‖ domainSeparator ‖ keccak256(abi.encode(
        DISPUTE_VERDICT_TYPEHASH, round, attempt, aggregateDigest, faulty, view)))

(:func:`verdict_digest`), recovers every signer with ``ecrecover``, and requires the signers to
be strictly increasing addresses (so no duplicates), all registered committee members, and at
least ``commit_quorum(n) = n - f`` of them. :meth:`CommitCertificate.verify` applies exactly
those rules off-chain (plus low-``s`` and ``v ∈ {27, 28}``, which OpenZeppelin's ``ECDSA``
enforces), so a certificate that verifies here is accepted by a contract following
``docs/pbft.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from eth_account.signers.local import LocalAccount
from eth_utils.crypto import keccak

from consensus.messages import (
    Commit,
    Domain,
    Instance,
    InstanceKey,
    checksum_address,
    recover_signer,
    sign_struct,
    struct_hash,
)
from consensus.quorums import commit_quorum
from protocol.errors import ConsensusError

__all__ = ["CommitCertificate", "address_key", "endorse", "verdict_digest", "verdict_struct_hash"]


def verdict_struct_hash(
    round: int, attempt: int, aggregate_digest: bytes, faulty: bool, view: int
) -> bytes:
    """``keccak256(abi.encode(DISPUTE_VERDICT_TYPEHASH, round, attempt, digest, faulty, view))``."""
    return struct_hash("DisputeVerdict", (round, attempt, aggregate_digest, faulty, view))


def verdict_digest(
    domain: Domain, round: int, attempt: int, aggregate_digest: bytes, faulty: bool, view: int
) -> bytes:
    """The 32-byte EIP-712 digest a commit signs (what the contract passes to ``ecrecover``)."""
    sh = verdict_struct_hash(round, attempt, aggregate_digest, faulty, view)
    return keccak(b"\x19\x01" + domain.separator + sh)


def address_key(address: str) -> bytes:
    """Sort key of an address: its 20 bytes, i.e. the order of ``uint160(address)``."""
    return bytes.fromhex(address[2:])


def endorse(
    certificate: CommitCertificate, account: LocalAccount, domain: Domain
) -> tuple[str, bytes]:
    """``account``'s own signature over the verdict ``certificate`` decided.

    A correct replica that knows a decision (it holds a valid certificate) may add its
    signature to the same ``DisputeVerdict(round, attempt, digest, faulty, view)``: the verdict
    is decided, so no conflicting certificate can exist, and the replica never signs the
    opposite verdict for that dispute and view (the only commit pair the contract slashes).
    This is how a certificate is completed from members still eligible on-chain when some of
    the original signers were slashed meanwhile. Returns ``(address, 65-byte signature)``."""
    sh = verdict_struct_hash(
        certificate.round,
        certificate.attempt,
        certificate.aggregate_digest,
        certificate.faulty,
        certificate.view,
    )
    return str(account.address), sign_struct(account, domain, sh)


def eligible_certificate(
    decided: CommitCertificate,
    pool: Mapping[str, bytes],
    eligible: Callable[[str], bool] | None,
    quorum: int,
) -> CommitCertificate | None:
    """The cheapest certificate for ``decided``'s verdict from a pool of signatures over it.

    ``pool`` maps signer addresses to signatures over the same ``DisputeVerdict`` (commits of
    that view and endorsements); only signers for which ``eligible(address)`` holds (on-chain:
    registered and not slashed when ``resolveDispute`` runs) are kept, the lowest ``quorum``
    of them by address. ``None`` while fewer than ``quorum`` eligible signers are in."""
    keep = {a: sig for a, sig in pool.items() if eligible is None or eligible(a)}
    if len(keep) < quorum:
        return None
    signers = sorted(keep, key=address_key)[:quorum]
    return replace(decided, signatures=tuple((a, keep[a]) for a in signers))


@dataclass(frozen=True)
class CommitCertificate:
    """``n - f`` signatures over ``DisputeVerdict(round, attempt, aggregateDigest, faulty, view)``.

    ``signatures`` holds ``(signer address, 65-byte r ‖ s ‖ v)`` pairs sorted by signer address
    ascending (numeric order), without duplicates. Construction does not check anything beyond
    shapes, so an untrusted certificate can be built and then :meth:`verify`-ed.
    """

    round: int
    attempt: int
    aggregate_digest: bytes
    faulty: bool
    view: int
    signatures: tuple[tuple[str, bytes], ...]

    @property
    def key(self) -> InstanceKey:
        return (self.round, self.attempt, self.aggregate_digest)

    @classmethod
    def from_commits(
        cls, commits: Iterable[Commit], committee: Sequence[str], limit: int | None = None
    ) -> CommitCertificate:
        """Build from matching commit messages (already verified), keeping the lowest signers.

        ``limit`` caps the number of signatures (default: ``commit_quorum(len(committee))``,
        the cheapest certificate the contract accepts).
        """
        commits = list(commits)
        if not commits:
            raise ConsensusError("a certificate needs at least one commit")
        first = commits[0]
        by_signer: dict[str, bytes] = {}
        for c in commits:
            if (c.round, c.attempt, c.aggregate_digest, c.faulty, c.view) != (
                first.round,
                first.attempt,
                first.aggregate_digest,
                first.faulty,
                first.view,
            ):
                raise ConsensusError("commits in a certificate must sign the same verdict")
            by_signer.setdefault(committee[c.sender], c.signature)
        cap = commit_quorum(len(committee)) if limit is None else limit
        signers = sorted(by_signer, key=address_key)[:cap]
        return cls(
            first.round,
            first.attempt,
            first.aggregate_digest,
            first.faulty,
            first.view,
            tuple((s, by_signer[s]) for s in signers),
        )

    def digest(self, domain: Domain) -> bytes:
        return verdict_digest(
            domain, self.round, self.attempt, self.aggregate_digest, self.faulty, self.view
        )

    def verify(
        self,
        committee: Sequence[str],
        domain: Domain,
        instance: Instance | None = None,
        min_view: int = 0,
    ) -> None:
        """Raise :class:`ConsensusError` unless the contract would accept this certificate.

        ``committee`` is the registered aggregator set (any order); ``instance``, if given, is
        the dispute the caller expects (a certificate for another round, attempt, digest, task
        or chain is refused); ``min_view`` lets a caller refuse certificates from older views.
        """
        members = {checksum_address(a) for a in committee}
        if len(members) != len(committee):
            raise ConsensusError("committee has duplicate members")
        if instance is not None:
            if not instance.matches(domain):
                raise ConsensusError("instance belongs to another task or chain")
            if instance.key != self.key:
                raise ConsensusError("certificate is for another round, attempt or aggregate")
        if self.view < min_view:
            raise ConsensusError(f"certificate view {self.view} is older than {min_view}")
        sh = verdict_struct_hash(
            self.round, self.attempt, self.aggregate_digest, self.faulty, self.view
        )
        previous = b""
        for signer, sig in self.signatures:
            if not isinstance(signer, str) or not isinstance(sig, bytes):
                raise ConsensusError("malformed signature entry")
            checksummed = checksum_address(signer)
            key = address_key(checksummed)
            if key <= previous:
                raise ConsensusError("signers must be strictly increasing (sorted, no duplicates)")
            previous = key
            if checksummed not in members:
                raise ConsensusError(f"{signer} is not a committee member")
            recovered = recover_signer(domain, sh, sig)
            if address_key(recovered) != key:
                raise ConsensusError(f"signature of {signer} does not match the verdict")
        need = commit_quorum(len(committee))
        if len(self.signatures) < need:
            raise ConsensusError(f"{len(self.signatures)} signers, the quorum is {need}")

    def is_valid(self, committee: Sequence[str], domain: Domain, **kw: Any) -> bool:
        try:
            self.verify(committee, domain, **kw)
        except ConsensusError:
            return False
        return True

    def to_contract_args(self) -> tuple[int, int, bool, int, list[bytes]]:
        """``(round, attempt, faulty, view, signatures)``, signatures ordered by signer."""
        sigs = [sig for _, sig in sorted(self.signatures, key=lambda e: address_key(e[0]))]
        return (self.round, self.attempt, self.faulty, self.view, sigs)

    # --- JSON form (for logs, run reports, the node's persistence) ----------------------------

    def to_json(self) -> str:
        return json.dumps(
            {
                "round": self.round,
                "attempt": self.attempt,
                "aggregateDigest": "0x" + self.aggregate_digest.hex(),
                "faulty": self.faulty,
                "view": self.view,
                "signatures": [[s, "0x" + sig.hex()] for s, sig in self.signatures],
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> CommitCertificate:
        try:
            obj = json.loads(text)
            sigs = tuple(
                (checksum_address(s), bytes.fromhex(sig[2:])) for s, sig in obj["signatures"]
            )
            cert = cls(
                int(obj["round"]),
                int(obj["attempt"]),
                bytes.fromhex(obj["aggregateDigest"][2:]),
                bool(obj["faulty"]),
                int(obj["view"]),
                sigs,
            )
        except (KeyError, TypeError, ValueError, AttributeError, ConsensusError) as exc:
            raise ConsensusError(f"malformed certificate JSON: {exc}") from exc
        if len(cert.aggregate_digest) != 32 or any(len(s) != 65 for _, s in sigs):
            raise ConsensusError("malformed certificate JSON: wrong byte lengths")
        return cert
