"""Issue 21: mauled HE ciphertexts (a client re-submits a victim's public Paillier ciphertext
as Enc(B + c·(m − B)), or copies it), so the decrypted sum holds c + 1 copies of the victim's
update and its DP noise no longer hides it."""

from __future__ import annotations

import numpy as np
import pytest

from aggregators.private import private_dim, private_sum
from privacy import he, he_round
from protocol.codec import decode_tensors, encode_tensors
from tests.private_rounds import Federation, he_keys, resolved

K = 3
VICTIM, ATTACKER, OTHER = 0, 1, 2


def _maul(payload: bytes, factor: int, num_clients: int) -> bytes:
    """The victim's payload with every ciphertext c -> c^factor · g^{B(1 − factor)}: each slot
    then decodes as factor × the victim's value (what any observer can compute)."""
    pk, _ = he_keys()
    spec = he_round.packing(num_clients)
    tensors = decode_tensors(payload)
    blob = tensors[he_round.CIPHERTEXT_KEY].tobytes()
    dim, _ = he.payload_shape(blob, pk, spec)
    n, nsq = int(pk.n), int(pk.nsquare)
    slots = spec.slots(pk)
    out = []
    for i, c in enumerate(he._decode(blob, pk, spec)[2]):
        used = min(slots, dim - i * slots)
        offset = sum(spec.value_bound << (j * spec.slot_bits) for j in range(used))
        shift = (offset * (1 - factor)) % n
        out.append(pow(c, factor, nsq) * (1 + shift * n) % nsq)
    tensors[he_round.CIPHERTEXT_KEY] = np.frombuffer(
        he._encode(pk, dim, spec, 1, out), dtype=np.uint8
    )
    return encode_tensors(tensors)  # the victim's proofs (if any) travel along


@pytest.mark.parametrize("factor", [1, 3])
def test_a_mauled_ciphertext_is_refused(factor: int) -> None:
    """Mauled HE ciphertext: the decrypted sum holds (c + 1)·x_victim, bypassing DP noise."""
    fed = Federation(resolved("he", K, dropout_fraction=0.34))  # t = 2
    victim = fed.payload(VICTIM, 1)
    sent: list[bytes | None] = [victim, _maul(victim, factor, K), fed.payload(OTHER, 1)]
    inputs = fed.inputs(1, sent)  # the key holder decrypts what it accepts
    result = private_sum(fed.man, fed.spec, 1, sent, inputs)
    assert result.failure is None, result.failure
    assert ATTACKER in result.excluded and "plaintext knowledge" in result.excluded[ATTACKER]
    expected = fed.vector(VICTIM, 1) + fed.vector(OTHER, 1)
    assert result.total is not None
    assert np.array_equal(result.total[: private_dim(fed.man, fed.spec)], expected)
