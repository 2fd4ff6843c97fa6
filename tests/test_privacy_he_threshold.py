"""An HE round with threshold decryption (no key holder): the committee's decryption shares
are combined by every aggregator's execute_round; t of n decrypt, t - 1 cannot, a wrong share
is skipped and named, and the model is the plaintext twin's."""

from __future__ import annotations

import random
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
import pytest
from phe import paillier

from aggregators.private import private_sum
from privacy import he, he_round
from privacy import threshold_paillier as tp
from protocol.errors import ConfigError
from tests.private_rounds import TASK, Federation, resolved

# two 512-bit safe primes (tp.generate_safe_prime(512, random.Random(2021).randrange))
P = int(
    "d03dc67b3bbebe72ee8c72ff253d540a31d2aef6e105a6fa16d315646eead94113a6d7c8e85a8a6133e77f64"
    "b286b908d54d108c512eb3d6d8beccbc5a1126d3",
    16,
)
Q = int(
    "c1f5e93e48696d1273be49991b283edd85b0b5b2f09dd8210739be143dc5ce9b68fae5324d028c06bca6251e"
    "b3ed5caece86368a440a60d5479a53d2d4e53363",
    16,
)
T, MEMBERS, K = 3, 4, 4
DECRYPTORS = tuple(f"0x{i:040x}" for i in range(1, MEMBERS + 1))


@lru_cache(maxsize=1)
def committee() -> tuple[tp.ThresholdKey, list[tp.KeyShare]]:
    return tp.deal(P, Q, T, MEMBERS, random.Random(5).randrange)


def federation(**kw: Any) -> Federation:
    key, _ = committee()
    pk = paillier.PaillierPublicKey(key.n)
    spec = resolved(
        "he",
        K,
        dropout_fraction=0.25,
        he_public_key=he.public_key_bytes(pk).hex(),
        he_threshold_key=key.to_bytes().hex(),
        he_decryptors=DECRYPTORS,
        **kw,
    )
    fed = Federation(spec)
    fed.he_pk = pk  # type: ignore[attr-defined]
    return fed


def encrypt(fed: Federation, i: int, round_: int) -> bytes:
    return he_round.encrypt_payload(
        round_,
        fed.vector(i, round_),
        fed.he_pk,
        K,
        task=TASK,
        client=i,  # type: ignore[attr-defined]
    )


def share_records(
    fed: Federation, sent: list[bytes], members: list[int]
) -> list[tuple[int, bytes]]:
    key, shares = committee()
    dim = fed.man.layout.size
    blobs = [
        he_round.decode_payload(p, 1, dim, fed.he_pk, K, 1 << 26, task=TASK, client=i)  # type: ignore[attr-defined]
        for i, p in enumerate(sent)
    ]
    combined = he_round.combine_round(blobs, fed.he_pk, K)  # type: ignore[attr-defined]
    return [
        (m, he_round.threshold_shares(1, combined, key, shares[m - 1], K, TASK, fed.spec.threshold))
        for m in members
    ]


def test_t_of_n_committee_members_decrypt_the_round() -> None:
    fed = federation()
    sent = [encrypt(fed, i, 1) for i in range(K)]
    inputs = fed.inputs(1, [None] * K)  # no key holder: nothing else to decrypt with
    expected = sum(fed.vector(i, 1).astype(np.int64) for i in range(K))
    for members in ([1, 2, 3], [4, 2, 1], [1, 2, 3, 4]):
        full = replace(inputs, decryption_shares=tuple(share_records(fed, sent, members)))
        result = private_sum(fed.man, fed.spec, 1, list(sent), full)
        assert result.failure is None, result.failure
        assert np.array_equal(result.total, expected)
        # execute_round (what every aggregator runs) finalizes the same model bytes
        assert not fed.run(1, list(sent), full).carried_forward
    # t - 1 members cannot: the round is carried forward, never decrypted
    short = replace(inputs, decryption_shares=tuple(share_records(fed, sent, [1, 3])))
    result = private_sum(fed.man, fed.spec, 1, list(sent), short)
    assert result.total is None and "fewer than the threshold 3" in (result.failure or "")
    assert fed.run(1, list(sent), short).carried_forward


def test_a_wrong_decryption_share_is_named_and_skipped() -> None:
    fed = federation()
    sent = [encrypt(fed, i, 1) for i in range(K)]
    records = share_records(fed, sent, [1, 2, 3, 4])
    member2 = bytearray(records[1][1])
    member2[-5] ^= 1  # a flipped bit in its last response
    records[1] = (2, bytes(member2))
    records.append((3, records[0][1]))  # member 1's record replayed under member 3: skipped
    inputs = replace(fed.inputs(1, [None] * K), decryption_shares=tuple(records))
    result = private_sum(fed.man, fed.spec, 1, list(sent), inputs)
    assert result.failure is None and result.notes["bad_decryptors"] == [2]
    assert np.array_equal(result.total, sum(fed.vector(i, 1).astype(np.int64) for i in range(K)))


def test_threshold_spec_is_checked() -> None:
    key, _ = committee()
    pk = he.public_key_bytes(paillier.PaillierPublicKey(key.n)).hex()
    with pytest.raises(ConfigError, match="decryptors"):
        resolved("he", K, he_public_key=pk, he_threshold_key=key.to_bytes().hex())
    other = he.public_key_bytes(he.generate_keypair(1024)[0]).hex()
    with pytest.raises(ConfigError, match="modulus"):
        resolved(
            "he",
            K,
            he_public_key=other,
            he_threshold_key=key.to_bytes().hex(),
            he_decryptors=DECRYPTORS,
        )
    assert tp.ThresholdKey.from_bytes(key.to_bytes()) == key


@pytest.mark.slow
def test_an_he_demo_decrypts_with_t_of_n_committee_members(tmp_path: Any) -> None:
    """In-process HE task with --he-threshold 2 of 3 aggregators' decryptors: every round
    finalizes from the committee's decryption shares; no key holder exists."""
    from adapters.privacy_records import REVEAL
    from fedchain.private_view import task_records
    from fedchain.sim.runner import Demo, DemoConfig

    cfg = DemoConfig(
        clients=4,
        aggregators=4,
        rounds=2,
        epochs=1,
        out=str(tmp_path),
        challenge_window=2,
        privacy="he",
        he_key_bits=1024,
        he_threshold=2,
    )
    demo = Demo(cfg)
    summary = demo.run().summary
    assert summary["rounds_finalized"] == 2 and not summary["safety_violated"]
    dep = demo.deployment
    assert dep.key_holder is None and len(dep.decryptors) == 4
    spec = dep.privacy
    assert spec.he_threshold_key and spec.he_key_holder is None
    records = task_records(dep.task, dep.manifest)
    members = {dep.task.client_index(a.address) for a in dep.decryptors}
    for round_ in (1, 2):
        revealed = set(records.first_payloads(round_, REVEAL))
        assert revealed == members  # every member published its shares, nobody else


def test_he_threshold_option_is_checked() -> None:
    from fedchain.sim.runner import DemoConfig

    with pytest.raises(ConfigError, match="--he-threshold"):
        DemoConfig(privacy="he", aggregators=4, he_threshold=1).validate()
    with pytest.raises(ConfigError, match="--he-threshold"):
        DemoConfig(privacy="he", aggregators=4, he_threshold=5).validate()
    with pytest.raises(ConfigError, match="--he-threshold"):
        DemoConfig(privacy="secagg", he_threshold=2).validate()
