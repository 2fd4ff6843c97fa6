"""Disputes: challenge, resolve by commit certificate, expire, and equivocation slashing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from eth_abi.abi import encode as abi_encode
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak as _keccak

from adapters.contract.artifact import ARTIFACT_PATH, load_artifact
from adapters.contract.types import AvailabilityChallenge, SignedVote, _digest
from adapters.contract.views import ViewsMixin

if TYPE_CHECKING:
    from adapters.contract.intake import IntakeMixin


def equivocation_commitment(
    task: str, kind: int, view: int, seq: int, first_sig: bytes, second_sig: bytes, reporter: str
) -> bytes:
    """The sealed commitment to equivocation evidence a ``reporter`` sends
    (``commitEquivocation``) at least one block before it reveals it to ``task``
    (``slashEquivocation``): keccak256 of ``abi.encode(task, kind, view, seq, keccak(first
    signature), keccak(second signature), reporter)``. It hides the evidence and binds the
    reward to ``reporter``."""
    return _keccak(
        abi_encode(
            ["address", "uint8", "uint256", "uint256", "bytes32", "bytes32", "address"],
            [
                to_checksum_address(task),
                int(kind),
                int(view),
                int(seq),
                _keccak(bytes(first_sig)),
                _keccak(bytes(second_sig)),
                to_checksum_address(reporter),
            ],
        )
    )


def get_create_address(creator: str, nonce: int) -> str:
    """The address of the contract ``creator`` creates with ``nonce`` (CREATE: keccak of the
    RLP of [creator, nonce], last 20 bytes)."""
    sender = bytes.fromhex(to_checksum_address(creator)[2:])
    if nonce == 0:
        enc_nonce = b"\x80"
    elif nonce < 0x80:
        enc_nonce = bytes([nonce])
    else:
        raw = nonce.to_bytes((nonce.bit_length() + 7) // 8, "big")
        enc_nonce = bytes([0x80 + len(raw)]) + raw
    payload = bytes([0x80 + 20]) + sender + enc_nonce
    return "0x" + _keccak(bytes([0xC0 + len(payload)]) + payload)[12:].hex()


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
        *,
        commit: bool = True,
    ) -> Any:
        """Prove that one member signed two conflicting PBFT messages (see
        :class:`EvidenceKind`); the caller is credited half of its stake. ``first`` and
        ``second`` are :class:`SignedVote` s or ``(round, attempt, digest, faulty, sig)``.

        The contract pays only a reporter that committed to the evidence at least one block
        before (:meth:`commit_equivocation`); with ``commit`` (the default) this sends the
        commitment first and the reveal once the commitment is mined (each transaction is
        mined before the next is sent, so they land in successive blocks). ``commit=False``
        sends the reveal alone."""
        a = first if isinstance(first, SignedVote) else SignedVote(*first)
        b = second if isinstance(second, SignedVote) else SignedVote(*second)
        if commit:
            sealed = equivocation_commitment(
                self.address, kind, view, seq, a.signature, b.signature, acct.address
            )
            self.commit_equivocation(acct, sealed)
        return self._tx(acct, "slashEquivocation", int(kind), view, seq, a.as_tuple(), b.as_tuple())

    # -- fault-proof hooks (issue 22; docs/fault-proof.md) ---------------------------------

    def set_fault_games(
        self, owner: LocalAccount, games: str, initial_state_root: bytes, params_hash: bytes
    ) -> Any:
        """Bind the task to a ``FaultGames`` contract (owner only, once, before the first
        aggregator registers; the task needs an attestation window);
        ``initial_state_root`` is the chunk root (:mod:`protocol.merkle`) of the initial
        state, ``params_hash`` that of the step parameters every claim must carry
        (:func:`aggregators.faultproof.fault_params_hash`). From then on aggregates go through
        :meth:`submit_aggregate_with_claim`."""
        root = _digest("initial_state_root", initial_state_root)
        return self._tx(owner, "setFaultGames", games, root, _digest("params_hash", params_hash))

    def set_stop_rule(self, owner: LocalAccount, threshold_sq: int, patience: int) -> Any:
        """The fault-proof task's stopping rule (owner only, once, after
        :meth:`set_fault_games`, before the first aggregator registers): quiet when a claim's
        committed squared update norm is below ``threshold_sq``; stop after ``patience``
        consecutive quiet rounds."""
        return self._tx(owner, "setStopRule", threshold_sq, patience)

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
        """Discard ``round``'s aggregate whose claim was refuted (submitter slashed, the whole
        slashed amount burned: the caller gains nothing; the round re-opened at attempt + 1).
        Anyone."""
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
        (sorted by signer, slashed signers included). Anyone; every slashed stake is burned
        (the caller gains nothing)."""
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

    # -- task-level data-availability game (docs/fault-proof.md) ---------------------------

    def challenge_availability(
        self, acct: LocalAccount, round: int, index: int, j: int, value: int | None = None
    ) -> Any:
        """Say included update ``index`` of ``round`` is unavailable: anyone holding it must
        post its chunk ``j`` (:meth:`answer_availability`) within ``dispute_timeout`` blocks,
        or :meth:`expire_availability` drops it and slashes its attesters. Bonds
        ``challenge_bond`` unless ``value`` is given; sends the round's registered records
        (what the contract reads U_i from)."""
        bond = self.config().challenge_bond if value is None else value
        entries = b"".join(
            bytes.fromhex(u.client[2:])
            + bytes(u.digest)
            + int(u.num_samples).to_bytes(8, "big")
            + bytes(u.chunk_root)
            for u in cast("IntakeMixin", self).updates(round)
        )
        return self._tx(acct, "challengeAvailability", round, index, j, entries, value=bond)

    def answer_availability(
        self, acct: LocalAccount, round: int, dim: int, chunk: bytes, proof: Sequence[bytes]
    ) -> Any:
        """Post the chunk the open availability challenge of ``round`` asks for: chunk
        ``j mod ceil(dim / 256)`` (1,024 bytes) of the update's ``dim``-vector and its Merkle
        proof against U_i. Credits the challenge bond to ``acct``."""
        return self._tx(
            acct, "answerAvailability", round, dim, bytes(chunk), [bytes(p) for p in proof]
        )

    def expire_availability(self, acct: LocalAccount, round: int) -> Any:
        """Drop the update of ``round``'s unanswered availability challenge (anyone, after
        its deadline): its attesters are slashed and the round re-opens at attempt + 1."""
        return self._tx(acct, "expireAvailability", round)

    def availability_challenge(self, round: int) -> AvailabilityChallenge | None:
        """The open availability challenge of ``round``, or None."""
        packed, root = self._call("availabilityChallenge", round)
        return AvailabilityChallenge.unpack(int(packed), bytes(root), self.config().dispute_timeout)

    def fault_games(self) -> str:
        """The FaultGames contract the task is bound to (the zero address: PBFT only)."""
        return str(self._call("faultGames"))

    def fault_params_hash(self) -> bytes:
        """The step parameters' hash every claim must carry (zero on a PBFT-only task)."""
        return bytes(self._call("faultParamsHash"))

    def claim_of(self, round: int, attempt: int) -> int | None:
        """The FaultGames claim id bound to the submission of (``round``, ``attempt``)."""
        bound, claim_id = self._call("claimOf", round, attempt)
        return int(claim_id) if bound else None

    def state_root(self, round: int) -> bytes:
        """Chunk root of the state finalized by ``round`` (round 0: the initial state)."""
        return bytes(self._call("stateRoot", round))

    @property
    def evidence_address(self) -> str:
        """The task's ``EquivocationEvidence`` contract (deployed before the task, passed to
        its constructor; the task's ``equivocationEvidence`` view)."""
        return to_checksum_address(self._call("equivocationEvidence"))

    def _evidence_contract(self) -> Any:
        abi = load_artifact(ARTIFACT_PATH.with_name("EquivocationEvidence.json"))["abi"]
        address = to_checksum_address(self.evidence_address)
        return self.chain.w3.eth.contract(address=address, abi=abi)

    def commit_equivocation(self, acct: LocalAccount, sealed: bytes) -> Any:
        """Commit to equivocation evidence (``EquivocationProof.sealed(task, reporter)``);
        the first commitment of a sealed value stands. Anyone may send it."""
        fn = self._evidence_contract().functions.commitEquivocation(bytes(sealed))
        return self.chain.transact(acct, fn, "commitEquivocation")

    def equivocation_committed_at(self, sealed: bytes) -> int:
        """Block of the first commitment of ``sealed`` (0: never committed)."""
        fn = self._evidence_contract().functions.equivocationCommittedAt(bytes(sealed))
        return int(self.chain.call(fn))
