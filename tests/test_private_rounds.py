"""execute_round under secure aggregation and HE: exact sums for every dropout pattern up to
the threshold, typed failures beyond it, attribution, key epochs, byte identity."""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from aggregators.intmath import div_round_half_even
from aggregators.private import private_dim, private_sum
from privacy import secagg as sa
from privacy import secagg_round as sr
from protocol.errors import SecAggError
from protocol.payloads import decode_global_state
from tests.private_rounds import LAYOUT, Federation, resolved


def _expected_params(fed: Federation, round_: int, included: list[int]) -> np.ndarray:
    total = sum(fed.vector(i, round_) for i in included)
    return np.asarray(div_round_half_even(np.asarray(total, dtype=np.int64), len(included)))


def test_secagg_exact_for_every_dropout_pattern_and_typed_failure_beyond() -> None:
    fed = Federation(resolved("secagg", 5, dropout_fraction=0.4))  # t = 3
    assert fed.spec.threshold == 3
    payloads = [fed.payload(i, 1) for i in range(5)]
    checked = 0
    for r in range(0, 5):
        for dropped in itertools.combinations(range(5), r):
            sent = [None if i in dropped else p for i, p in enumerate(payloads)]
            inc = [i for i in range(5) if i not in dropped]
            result = fed.run(1, sent, fed.inputs(1, sent))
            state = decode_global_state(LAYOUT, result.payload)
            if len(inc) >= 3:
                assert not result.carried_forward, result.notes
                assert np.array_equal(state.params, _expected_params(fed, 1, inc))
                assert result.notes["dropped"] == sorted(dropped)
                checked += 1
            else:  # beyond the threshold: the model is carried forward, never a wrong one
                assert result.carried_forward and not state.params.any()
                assert "fewer than the threshold 3" in result.notes["failure"]
    assert checked == 1 + 5 + 10


def test_too_few_reveals_name_the_short_clients() -> None:
    fed = Federation(resolved("secagg", 5, dropout_fraction=0.4))
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(4)] + [None]
    result = fed.run(1, sent, fed.inputs(1, sent, revealers=[0, 1]))  # t - 1 reveal
    assert result.carried_forward
    assert "threshold" in result.notes["failure"]
    assert result.notes["short_secrets"] == {str(c): 2 for c in range(5)}


def test_a_tampered_share_is_attributed_and_skipped() -> None:
    fed = Federation(resolved("secagg", 5, dropout_fraction=0.4))
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(4)] + [None]
    honest = fed.inputs(1, sent)
    rev = sa.Reveal.from_bytes(dict(honest.reveals)[0] or b"")
    shares = dict(rev.self_mask_shares)
    shares[2] = (shares[2] + 1) % (2**255)
    forged = sa.Reveal(0, 1, shares, rev.mask_key_shares).to_bytes()
    result = fed.run(1, sent, fed.inputs(1, sent, reveal_bytes={0: forged}))
    assert not result.carried_forward
    assert result.notes["bad_shares"] == [[0, 2]]
    state = decode_global_state(LAYOUT, result.payload)
    assert np.array_equal(state.params, _expected_params(fed, 1, [0, 1, 2, 3]))


def test_a_reveal_under_another_name_or_round_is_ignored_and_listed() -> None:
    fed = Federation(resolved("secagg", 4, dropout_fraction=0.25))
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(4)]
    inputs = fed.inputs(1, sent)
    stolen = dict(inputs.reveals)[1]
    inputs = replace(inputs, reveals=((0, stolen), *inputs.reveals[1:], (3, b"junk")))
    summed = private_sum(fed.man, fed.spec, 1, sent, inputs)
    reasons = {b["client"]: b["reason"] for b in summed.notes["bad_reveals"]}
    assert reasons[0] == "not its reveal of this round" and "bad magic" in reasons[3]


def test_a_dealer_whose_shares_do_not_match_its_commitment_is_named() -> None:
    fed = Federation(resolved("secagg", 4, dropout_fraction=0.25))
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(4)]
    mu = sr.MaskedUpdate.from_bytes(sent[1] or b"", 1, LAYOUT.size, 1 << 24)
    lie = replace(mu.self_mask_shares, secret_commitment=hashlib.sha256(b"other").digest())
    sent[1] = replace(mu, self_mask_shares=lie).to_bytes()
    result = fed.run(1, sent, fed.inputs(1, sent))
    assert result.carried_forward
    assert result.notes["culprit"] == {"client": 1, "role": "dealer"}


def test_an_included_invalid_payload_fails_the_round_instead_of_a_wrong_sum() -> None:
    fed = Federation(resolved("secagg", 4, dropout_fraction=0.25))
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(4)]
    good = fed.inputs(1, sent)
    sent[2] = b"garbage"
    result = fed.run(1, sent, good)
    assert result.carried_forward and "clients [2] are invalid" in result.notes["failure"]


def test_key_epochs_carry_into_the_next_round_and_a_dropped_client_rekeys() -> None:
    fed = Federation(resolved("secagg", 5, dropout_fraction=0.4))
    sent1: list[bytes | None] = [fed.payload(i, 1) for i in range(4)] + [None]  # 4 drops
    assert not fed.run(1, sent1, fed.inputs(1, sent1)).carried_forward
    dim = private_dim(fed.man, fed.spec)
    carried = {
        i: sr.MaskedUpdate.from_bytes(p, 1, dim, 1 << 24).next_key
        for i, p in enumerate(sent1)
        if p is not None
    }
    # without a new key record the dropped client is not a peer of round 2 ...
    peers, _ = sr.keys_in_force(2, carried, {}, fed.ctx)
    assert sorted(peers) == [0, 1, 2, 3]
    with pytest.raises(SecAggError):
        sr.client_masked_update(fed.secrets[4], 2, fed.vector(4, 2), peers, fed.ctx)
    # ... it posts one during round 1 and is back in round 2, with everybody's next key
    posted = {4: sr.client_key_record(fed.secrets[4], 2, fed.ctx)}
    fed.peers, refused = sr.keys_in_force(2, carried, posted, fed.ctx)
    assert sorted(fed.peers) == [0, 1, 2, 3, 4] and not refused
    sent2: list[bytes | None] = [fed.payload(i, 2) for i in range(5)]
    sent2[0] = None  # another dropout in round 2: its round-2 key is reconstructed
    result = fed.run(2, sent2, fed.inputs(2, sent2))
    assert not result.carried_forward
    assert np.array_equal(
        decode_global_state(LAYOUT, result.payload).params, _expected_params(fed, 2, [1, 2, 3, 4])
    )
    # a record for the wrong round, or under a key not registered, is refused
    wrong = sr.client_key_record(fed.secrets[4], 3, fed.ctx)
    _, refused = sr.keys_in_force(2, {}, {4: wrong}, fed.ctx)
    assert "round 3" in refused[4]


def test_honest_reveals_never_expose_both_secrets_of_one_client() -> None:
    """What every aggregator sees (payloads + reveals) unmasks the sum, never a survivor:
    no reveal has a survivor's mask-key share, so its pairwise masks stay on its vector."""
    fed = Federation(resolved("secagg", 6, dropout_fraction=0.34))  # t = 4
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(5)] + [None]
    inputs = fed.inputs(1, sent)
    for _, payload in inputs.reveals:
        rev = sa.Reveal.from_bytes(payload or b"")
        assert set(rev.mask_key_shares) == {5} and set(rev.self_mask_shares) == {0, 1, 2, 3, 4}
    # remove client 0's self mask with every revealed secret: the rest is still uniform
    mu = sr.MaskedUpdate.from_bytes(sent[0] or b"", 1, LAYOUT.size, 1 << 24)
    b0 = fed.secrets[0].self_mask(1)
    residue = mu.masked - sa.expand_mask(b0.to_bytes(32, "big"), LAYOUT.size)
    assert stats.kstest(residue / 2**32, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("mode", ["ddp+secagg", "ddp+he"])
def test_distributed_dp_round_recovers_the_noisy_mean(mode: str) -> None:
    fed = Federation(resolved(mode, 4, dropout_fraction=0.25, target_epsilon=50.0))
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(4)]
    result = fed.run(1, sent, fed.inputs(1, sent))
    assert not result.carried_forward, result.notes
    got = decode_global_state(LAYOUT, result.payload).params / 2**16
    clipped = [d * min(1.0, 1.0 / np.linalg.norm(d)) for d in fed.deltas]
    want = np.mean(clipped, axis=0)
    # the residual is the noise: 4 shares of variance mu/t, in units of C per S - sqrt(d)/2
    p = fed.spec.ddp()
    expected = np.sqrt(4 * p.client_variance) / (p.scale - np.sqrt(LAYOUT.size) / 2) / 4
    assert 0.6 < float(np.std(got - want)) / expected < 1.5


def test_he_round_is_exact_and_a_bad_decryption_carries_the_model_forward() -> None:
    fed = Federation(resolved("he", 3, dropout_fraction=0.34))  # t = 2
    sent: list[bytes | None] = [fed.payload(0, 1), None, fed.payload(2, 1)]
    inputs = fed.inputs(1, sent)
    result = fed.run(1, sent, inputs)
    assert not result.carried_forward
    assert np.array_equal(
        decode_global_state(LAYOUT, result.payload).params, _expected_params(fed, 1, [0, 2])
    )
    dec = bytearray(inputs.decryption or b"")
    dec[-1] ^= 1
    bad = fed.run(1, sent, replace(inputs, decryption=bytes(dec)))
    assert bad.carried_forward and "does not verify" in bad.notes["failure"]
    assert bad.notes["culprit"] == {"role": "key holder"}
    missing = fed.run(1, sent, replace(inputs, decryption=None))
    assert missing.carried_forward and "no decryption" in missing.notes["failure"]
    other = fed.inputs(1, [fed.payload(0, 1), fed.payload(1, 1), None])
    wrong = fed.run(1, sent, replace(inputs, decryption=other.decryption))
    assert wrong.carried_forward and "another combination" in wrong.notes["failure"]


def test_adaptive_clip_is_set_by_the_summed_bits() -> None:
    spec = resolved("ddp+secagg", 4, dropout_fraction=0.25, adaptive_clip=True)
    fed = Federation(spec, clip=1.0)
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(4)]
    result = fed.run(1, sent, fed.inputs(1, sent))
    state = decode_global_state(LAYOUT, result.payload)
    bits = sum(int(fed.vector(i, 1)[-1]) for i in range(4))
    assert result.notes["clip_bits"] == bits and result.notes["clip_norm"] == 1.0
    assert state.clip_norm == result.notes["next_clip_norm"] != 1.0


def test_secagg_round_bytes_are_identical_in_another_process(tmp_path) -> None:
    fed = Federation(resolved("ddp+secagg", 4, dropout_fraction=0.25))
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(3)] + [None]
    inputs = fed.inputs(1, sent)
    here = fed.run(1, sent, inputs).digest
    import pickle  # test-only: our own objects into our own subprocess

    (tmp_path / "in.pkl").write_bytes(pickle.dumps((fed.man, fed.global_payload, sent, inputs)))
    code = (
        "import pickle,sys; from aggregators.execution import execute_round; "
        f"m,g,s,i=pickle.loads(open({str(tmp_path / 'in.pkl')!r},'rb').read()); "
        "sys.stdout.write(execute_round(m,1,g,s,[1]*len(s),private=i).digest.hex())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout == here.hex()
