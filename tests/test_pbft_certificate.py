"""Commit certificates: what the task contract will accept, checked off-chain."""

from __future__ import annotations

from dataclasses import replace

import pytest
from eth_account import Account
from eth_account.messages import _hash_eip191_message, encode_typed_data
from eth_utils import keccak

from consensus import messages as M
from consensus.certificate import CommitCertificate, address_key, verdict_digest
from consensus.memnet import SIM_DOMAIN, simulation_accounts
from protocol.errors import ConsensusError

ACCOUNTS = simulation_accounts(7)
COMMITTEE = [a.address for a in ACCOUNTS]  # registration order, not sorted
DIGEST = keccak(text="aggregate")
INSTANCE = M.Instance(SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, 5, 1, DIGEST)
OUTSIDER = Account.from_key(keccak(text="not a member"))


def commits(
    signers: list[int],
    *,
    faulty: bool = True,
    view: int = 2,
    rnd: int = 5,
    attempt: int = 1,
    digest: bytes = DIGEST,
) -> list[M.Commit]:
    return [
        M.sign(M.Commit(rnd, attempt, digest, faulty, view, i), ACCOUNTS[i], SIM_DOMAIN)
        for i in signers
    ]


def good() -> CommitCertificate:
    return CommitCertificate.from_commits(commits([6, 0, 3, 1, 4]), COMMITTEE)


def test_valid_certificate_verifies() -> None:
    cert = good()
    cert.verify(COMMITTEE, SIM_DOMAIN, instance=INSTANCE)
    assert cert.is_valid(COMMITTEE, SIM_DOMAIN)
    keys = [address_key(s) for s, _ in cert.signatures]
    assert keys == sorted(keys) and len(set(keys)) == 5
    # committee order does not matter to verification
    cert.verify(list(reversed(COMMITTEE)), SIM_DOMAIN)


def test_from_commits_keeps_the_quorum_of_lowest_addresses() -> None:
    cert = CommitCertificate.from_commits(commits(list(range(7))), COMMITTEE)
    assert len(cert.signatures) == 5
    lowest = sorted(COMMITTEE, key=address_key)[:5]
    assert [s for s, _ in cert.signatures] == lowest
    with pytest.raises(ConsensusError):
        CommitCertificate.from_commits(commits([0]) + commits([1], faulty=False), COMMITTEE)


def test_to_contract_args() -> None:
    cert = good()
    rnd, attempt, faulty, view, sigs = cert.to_contract_args()
    assert (rnd, attempt, faulty, view) == (5, 1, True, 2)
    assert all(len(s) == 65 and s[64] in (27, 28) for s in sigs)
    digest = cert.digest(SIM_DOMAIN)
    recovered = [Account._recover_hash(digest, signature=s) for s in sigs]
    assert [address_key(a) for a in recovered] == sorted(address_key(a) for a in recovered)
    assert set(recovered) <= set(COMMITTEE)


def test_verdict_digest_is_the_eip712_hash() -> None:
    typed = M.typed_data(M.Commit(5, 1, DIGEST, True, 2, 0), SIM_DOMAIN)
    assert verdict_digest(SIM_DOMAIN, 5, 1, DIGEST, True, 2) == _hash_eip191_message(
        encode_typed_data(full_message=typed)
    )
    # spelled out as the Solidity side computes it (docs/pbft.md)
    typehash = keccak(
        text="DisputeVerdict(uint256 round,uint256 attempt,bytes32 aggregateDigest,bool faulty,"
        "uint256 view)"
    )
    struct = keccak(
        typehash
        + (5).to_bytes(32, "big")
        + (1).to_bytes(32, "big")
        + DIGEST
        + (1).to_bytes(32, "big")
        + (2).to_bytes(32, "big")
    )
    assert verdict_digest(SIM_DOMAIN, 5, 1, DIGEST, True, 2) == keccak(
        b"\x19\x01" + SIM_DOMAIN.separator + struct
    )


def _with(cert: CommitCertificate, sigs: list[tuple[str, bytes]]) -> CommitCertificate:
    return replace(cert, signatures=tuple(sigs))


def test_duplicate_signer_refused() -> None:
    cert = good()
    sigs = list(cert.signatures)
    with pytest.raises(ConsensusError, match="strictly increasing"):
        _with(cert, [sigs[0], *sigs]).verify(COMMITTEE, SIM_DOMAIN)
    # four distinct plus a repeat is still four signers, below the quorum of five
    short = CommitCertificate.from_commits(commits([0, 1, 2, 3]), COMMITTEE)
    ss = list(short.signatures)
    with pytest.raises(ConsensusError):
        _with(short, [*ss, ss[-1]]).verify(COMMITTEE, SIM_DOMAIN)


def test_unsorted_signers_refused() -> None:
    cert = good()
    with pytest.raises(ConsensusError, match="strictly increasing"):
        _with(cert, list(reversed(cert.signatures))).verify(COMMITTEE, SIM_DOMAIN)


def test_unregistered_signer_refused() -> None:
    cert = good()
    c = M.sign(M.Commit(5, 1, DIGEST, True, 2, 0), OUTSIDER, SIM_DOMAIN)
    sigs = sorted(
        [*cert.signatures, (OUTSIDER.address, c.signature)], key=lambda e: address_key(e[0])
    )
    with pytest.raises(ConsensusError, match="not a committee member"):
        _with(cert, sigs).verify(COMMITTEE, SIM_DOMAIN)
    # ... even if the quorum would be met without it
    assert not _with(cert, sigs).is_valid(COMMITTEE, SIM_DOMAIN)


@pytest.mark.parametrize(
    "stale",
    [
        {"view": 1},
        {"rnd": 4},
        {"attempt": 0},
        {"digest": keccak(text="another aggregate")},
        {"faulty": False},
    ],
    ids=["view", "round", "attempt", "digest", "verdict"],
)
def test_signatures_over_other_values_refused(stale: dict[str, object]) -> None:
    """Signatures made for another view/round/attempt/digest/verdict do not carry over."""
    old = CommitCertificate.from_commits(commits([0, 1, 3, 4, 6], **stale), COMMITTEE)  # type: ignore[arg-type]
    claimed = replace(old, round=5, attempt=1, aggregate_digest=DIGEST, faulty=True, view=2)
    with pytest.raises(ConsensusError, match="does not match"):
        claimed.verify(COMMITTEE, SIM_DOMAIN)


def test_certificate_for_another_dispute_refused() -> None:
    cert = good()
    for other in (
        replace(INSTANCE, round=6),
        replace(INSTANCE, attempt=0),
        replace(INSTANCE, aggregate_digest=b"\x00" * 32),
    ):
        with pytest.raises(ConsensusError, match="another round"):
            cert.verify(COMMITTEE, SIM_DOMAIN, instance=other)
    with pytest.raises(ConsensusError, match="another task"):
        cert.verify(COMMITTEE, SIM_DOMAIN, instance=replace(INSTANCE, chain_id=1))
    with pytest.raises(ConsensusError, match="older"):
        cert.verify(COMMITTEE, SIM_DOMAIN, min_view=3)


def test_other_domain_refused() -> None:
    cert = good()
    with pytest.raises(ConsensusError):
        cert.verify(COMMITTEE, M.Domain(SIM_DOMAIN.chain_id, "0x" + "99" * 20))
    with pytest.raises(ConsensusError):
        cert.verify(COMMITTEE, M.Domain(1, SIM_DOMAIN.verifying_contract))


def test_bad_signature_refused() -> None:
    cert = good()
    signer, sig = cert.signatures[2]
    tampered = sig[:10] + bytes([sig[10] ^ 1]) + sig[11:]
    bad_v = sig[:64] + bytes([55 - sig[64]])
    s = int.from_bytes(sig[32:64], "big")
    high_s = sig[:32] + (M.SECP256K1_N - s).to_bytes(32, "big") + bytes([55 - sig[64]])
    for bad in (tampered, bad_v, high_s, sig[:64], sig[:64] + b"\x00"):
        sigs = list(cert.signatures)
        sigs[2] = (signer, bad)
        with pytest.raises(ConsensusError):
            _with(cert, sigs).verify(COMMITTEE, SIM_DOMAIN)
    # a valid signature of another member, filed under this signer
    sigs = list(cert.signatures)
    sigs[2] = (signer, cert.signatures[3][1])
    with pytest.raises(ConsensusError, match="does not match"):
        _with(cert, sigs).verify(COMMITTEE, SIM_DOMAIN)


def test_too_few_signers_refused() -> None:
    cert = CommitCertificate.from_commits(commits([0, 1, 2, 3]), COMMITTEE)
    assert len(cert.signatures) == 4
    with pytest.raises(ConsensusError, match="quorum is 5"):
        cert.verify(COMMITTEE, SIM_DOMAIN)
    with pytest.raises(ConsensusError):
        _with(cert, []).verify(COMMITTEE, SIM_DOMAIN)


def test_duplicate_committee_refused() -> None:
    with pytest.raises(ConsensusError, match="duplicate members"):
        good().verify([*COMMITTEE, COMMITTEE[0]], SIM_DOMAIN)


def test_json_round_trip() -> None:
    cert = good()
    again = CommitCertificate.from_json(cert.to_json())
    assert again == cert
    again.verify(COMMITTEE, SIM_DOMAIN)
    for bad in ("{}", "[]", "nope", cert.to_json().replace('"faulty":true,', "")):
        with pytest.raises(ConsensusError):
            CommitCertificate.from_json(bad)


def test_solidity_test_vector() -> None:
    """The vector in docs/pbft.md, pinned byte for byte (anvil's first deployment address)."""
    domain = M.Domain(31337, "0x5FbDB2315678afecb367f032d93F642f64180aa3")
    digest_in = keccak(text="aggregate")
    assert M.TYPE_HASHES["DisputeVerdict"].hex() == (
        "99b29a55a49d381400461a60773fe93e2a19f32d242a89ca33e9dedce23cad01"
    )
    assert domain.separator.hex() == (
        "a2da3baab99d557ef0749b95d092f4ac60226074aeb564ef52f5e7ef2ab2f909"
    )
    assert verdict_digest(domain, 5, 1, digest_in, True, 2).hex() == (
        "b02d7aff8cdb82dac595dfcf3b7587ddc2625abcf5a62c0ee1b7f5f68afb94b8"
    )
    c = M.sign(M.Commit(5, 1, digest_in, True, 2, 0), ACCOUNTS[0], domain)
    assert ACCOUNTS[0].address == "0xC00809395d82A8a17704c1D412868Fbc0bDe50BE"
    assert c.signature.hex() == (
        "6dc64f2cc5e2d64e277c80669b8515fbc9bfb0e81c94343f574e21033e5ab04a"
        "5dcf6d93c7156fb32ab9a43d16aa5fd9462dc5bc90006b08c2d7d9e763983e311c"
    )
