"""Quorum thresholds, EIP-712 signing of PBFT messages, canonical wire encoding."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace

import pytest
from eth_account import Account
from eth_account.messages import _hash_eip191_message, encode_typed_data
from eth_utils import keccak
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consensus import messages as M
from consensus.memnet import SIM_DOMAIN, simulation_accounts
from consensus.quorums import commit_quorum, max_faulty, weak_quorum
from protocol.errors import ConsensusError

ACCOUNTS = simulation_accounts(4)
COMMITTEE = [a.address for a in ACCOUNTS]
D = b"\x42" * 32


# ---- quorums -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "f", "q", "w"),
    [
        (1, 0, 1, 1),
        (3, 0, 3, 1),
        (4, 1, 3, 2),
        (5, 1, 4, 2),
        (6, 1, 5, 2),
        (7, 2, 5, 3),
        (10, 3, 7, 4),
    ],
)
def test_quorums(n: int, f: int, q: int, w: int) -> None:
    assert (max_faulty(n), commit_quorum(n), weak_quorum(n)) == (f, q, w)


@pytest.mark.parametrize("n", range(1, 40))
def test_quorum_intersection_contains_a_correct_replica(n: int) -> None:
    f, q = max_faulty(n), commit_quorum(n)
    assert 2 * q - n >= f + 1  # any two quorums share at least one correct member
    assert q <= n - f  # a quorum is reachable with f silent members
    if n == 3 * f + 1:
        assert q == 2 * f + 1


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "4"])
def test_quorums_reject_bad_sizes(bad: object) -> None:
    with pytest.raises(ConsensusError):
        max_faulty(bad)  # type: ignore[arg-type]


# ---- EIP-712 -------------------------------------------------------------------------------


def _samples() -> list[M.Message]:
    a = ACCOUNTS[0]
    pp = M.sign(M.PrePrepare(3, 7, 11, 2, D, True, 0), a, SIM_DOMAIN)
    p = M.sign(M.Prepare(3, 7, 11, 2, D, True, 0), a, SIM_DOMAIN)
    c = M.sign(M.Commit(11, 2, D, True, 3, 0), a, SIM_DOMAIN)
    ck = M.sign(M.Checkpoint(8, b"\x07" * 32, 0), a, SIM_DOMAIN)
    vc = M.sign(
        M.ViewChange(4, 8, b"\x07" * 32, (ck,), (M.PreparedCert(pp, (p,)),), 0), a, SIM_DOMAIN
    )
    nv = M.sign(M.NewView(4, (vc,), (pp,), 0), a, SIM_DOMAIN)
    cp = M.sign(M.CommitProof(pp, (p,), (c,), 0), a, SIM_DOMAIN)
    fe = M.sign(M.Fetch(5, 9, 0), a, SIM_DOMAIN)
    return [pp, p, c, ck, vc, nv, cp, fe]


def test_type_strings_are_the_documented_ones() -> None:
    assert M.TYPE_STRINGS["DisputeVerdict"] == (
        "DisputeVerdict(uint256 round,uint256 attempt,bytes32 aggregateDigest,bool faulty,"
        "uint256 view)"
    )
    assert M.TYPE_STRINGS["EIP712Domain"] == (
        "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
    )


@pytest.mark.parametrize("msg", _samples(), ids=lambda m: type(m).__name__)
def test_signable_matches_eth_account_encode_typed_data(msg: M.Message) -> None:
    """Our fast EIP-712 hashing equals eth_account's, so wallets and contracts agree."""
    reference = encode_typed_data(full_message=M.typed_data(msg, SIM_DOMAIN))
    ours = M.signable(SIM_DOMAIN, msg.struct_hash())
    assert ours == reference
    assert _hash_eip191_message(reference) == M.signing_digest(msg, SIM_DOMAIN)
    # signing through the documented eth_account API gives the same signature
    assert Account.sign_message(reference, ACCOUNTS[0].key).signature == msg.signature
    assert Account.recover_message(reference, signature=msg.signature) == COMMITTEE[0]
    M.verify_signer(msg, COMMITTEE, SIM_DOMAIN)


def test_domain_separator_matches_reference() -> None:
    expected = keccak(
        keccak(
            text="EIP712Domain(string name,string version,uint256 chainId,"
            "address verifyingContract)"
        )
        + keccak(text="FedChainTask")
        + keccak(text="1")
        + SIM_DOMAIN.chain_id.to_bytes(32, "big")
        + b"\x00" * 12
        + bytes.fromhex(SIM_DOMAIN.verifying_contract[2:])
    )
    assert SIM_DOMAIN.separator == expected


def test_signature_binds_domain_and_sender() -> None:
    c = M.sign(M.Commit(1, 0, D, False, 0, 1), ACCOUNTS[1], SIM_DOMAIN)
    M.verify_signer(c, COMMITTEE, SIM_DOMAIN)
    other_task = M.Domain(SIM_DOMAIN.chain_id, "0x" + "01" * 20)
    other_chain = M.Domain(SIM_DOMAIN.chain_id + 1, SIM_DOMAIN.verifying_contract)
    for dom in (other_task, other_chain):
        with pytest.raises(ConsensusError):
            M.verify_signer(c, COMMITTEE, dom)
    with pytest.raises(ConsensusError, match="not by its sender"):
        M.verify_signer(replace(c, sender=2), COMMITTEE, SIM_DOMAIN)
    with pytest.raises(ConsensusError, match="outside the committee"):
        M.verify_signer(replace(c, sender=9), COMMITTEE, SIM_DOMAIN)
    with pytest.raises(ConsensusError):
        M.verify_signer(replace(c, faulty=True), COMMITTEE, SIM_DOMAIN)


def test_signature_format_rules() -> None:
    sig = _samples()[2].signature
    M.check_signature_format(sig)
    for bad in (sig[:64], sig + b"\x00", sig[:64] + b"\x01", b"\x00" * 32 + sig[32:]):
        with pytest.raises(ConsensusError):
            M.check_signature_format(bad)
    s = int.from_bytes(sig[32:64], "big")
    high_s = sig[:32] + (M.SECP256K1_N - s).to_bytes(32, "big") + bytes([55 - sig[64]])
    with pytest.raises(ConsensusError, match="lower half"):
        M.check_signature_format(high_s)


def test_instance_validation() -> None:
    inst = M.Instance(SIM_DOMAIN.verifying_contract.lower(), 1337, 1, 0, D)
    assert inst.task == SIM_DOMAIN.verifying_contract and inst.matches(SIM_DOMAIN)
    for args in [("0x12", 1, 1, 0, D), (inst.task, 1, -1, 0, D), (inst.task, 1, 1, 0, b"x")]:
        with pytest.raises(ConsensusError):
            M.Instance(*args)  # type: ignore[arg-type]


# ---- wire encoding -------------------------------------------------------------------------


@pytest.mark.parametrize("msg", _samples(), ids=lambda m: type(m).__name__)
def test_round_trip(msg: M.Message) -> None:
    data = M.encode(msg)
    assert M.decode(data) == msg
    assert M.encode(M.decode(data)) == data
    assert b"pickle" not in data and data.startswith(b"{")


uints = st.integers(min_value=0, max_value=2**256 - 1)
digests = st.binary(min_size=32, max_size=32)
sigs = st.binary(min_size=65, max_size=65)
senders = st.integers(min_value=0, max_value=2**16)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(uints, uints, uints, uints, digests, st.booleans(), senders, sigs)
def test_round_trip_property(
    view: int, seq: int, rnd: int, att: int, dig: bytes, faulty: bool, sender: int, sig: bytes
) -> None:
    msgs: list[M.Message] = [
        M.PrePrepare(view, seq, rnd, att, dig, faulty, sender, sig),
        M.Prepare(view, seq, rnd, att, dig, faulty, sender, sig),
        M.Commit(rnd, att, dig, faulty, view, sender, sig),
        M.Checkpoint(seq, dig, sender, sig),
        M.Fetch(seq, view, sender, sig),
    ]
    pp, p, c, ck = msgs[0], msgs[1], msgs[2], msgs[3]
    assert isinstance(pp, M.PrePrepare) and isinstance(p, M.Prepare)
    assert isinstance(c, M.Commit) and isinstance(ck, M.Checkpoint)
    vc = M.ViewChange(view, seq, dig, (ck, ck), (M.PreparedCert(pp, (p, p)),), sender, sig)
    msgs += [
        vc,
        M.NewView(view, (vc,), (pp,), sender, sig),
        M.CommitProof(pp, (p,), (c,), sender, sig),
    ]
    for m in msgs:
        assert M.decode(M.encode(m)) == m


def _obj(msg: M.Message) -> dict[str, object]:
    return json.loads(M.encode(msg))  # type: ignore[no-any-return]


def _dump(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _mutations() -> list[tuple[str, bytes]]:
    commit = _obj(_samples()[2])
    out: list[tuple[str, bytes]] = []

    def mut(name: str, **changes: object) -> None:
        o = dict(commit)
        for k, v in changes.items():
            if v is KeyError:
                del o[k]
            else:
                o[k] = v
        out.append((name, _dump(o)))

    mut("missing field", round=KeyError)
    mut("extra field", extra=1)
    mut("negative", round=-1)
    mut("too large", view=2**256)
    mut("float", attempt=1.5)
    mut("bool as int", attempt=True)
    mut("int as bool", faulty=1)
    mut("short digest", digest="0x" + "00" * 31)
    mut("uppercase hex", digest="0x" + "AB" * 32)
    mut("no 0x", digest="00" * 33)
    mut("non-hex", digest="0x" + "zz" * 32)
    mut("short sig", sig="0x" + "11" * 64)
    mut("unknown type", type="vote")
    mut("wrong version", v=2)
    mut("version bool", v=True)
    mut("sender too large", sender=2**16 + 1)
    mut("string number", round="1")
    mut("nested wrong type", digest={"a": 1})
    good = M.encode(_samples()[2])
    out += [
        ("not json", b"\x00\x01garbage"),
        ("json array", b"[1,2,3]"),
        ("non-ascii", good.replace(b'"commit"', '"c\u00f6mmit"'.encode())),
        ("whitespace", good.replace(b",", b", ")),
        ("unsorted keys", json.dumps(dict(reversed(list(commit.items())))).encode()),
        ("duplicate key", good[:-1] + b',"view":3}'),
        ("NaN", good.replace(b'"view":3', b'"view":NaN')),
        ("exponent", good.replace(b'"view":3', b'"view":3e0')),
        ("truncated", good[:-5]),
        ("empty", b""),
        ("deep nesting", b"[" * 100000 + b"]" * 100000),
        ("oversized", b" " * (M.MAX_MESSAGE_BYTES + 1)),
    ]
    vc = _obj(_samples()[4])
    vc2 = dict(vc)
    vc2["checkpoints"] = [dict(vc["checkpoints"][0], type="prepare")]  # type: ignore[index]
    out.append(("nested item of wrong type", _dump(vc2)))
    vc3 = dict(vc)
    vc3["prepared"] = "nope"
    out.append(("list expected", _dump(vc3)))
    vc4 = dict(vc)
    vc4["checkpoints"] = [vc["checkpoints"][0]] * (M.MAX_LIST + 1)  # type: ignore[index]
    out.append(("list too long", _dump(vc4)))
    return out


@pytest.mark.parametrize(("name", "data"), _mutations(), ids=[n for n, _ in _mutations()])
def test_malformed_input_is_refused(name: str, data: bytes) -> None:
    with pytest.raises(ConsensusError):
        M.decode(data)


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_decode_never_raises_anything_but_consensus_error(data: bytes) -> None:
    with contextlib.suppress(ConsensusError):
        M.decode(data)


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(ConsensusError):
        M.decode("{}")  # type: ignore[arg-type]
