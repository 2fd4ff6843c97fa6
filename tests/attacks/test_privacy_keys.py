"""Issue 21: low-order X25519 keys in secure aggregation (a key record or an encryption key
that makes every honest peer raise), against the real contracts on the embedded chain."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters.privacy_records import ENC_KEY, PrivacyRecordsContract
from adapters.storage import LocalStore
from aggregators.private import private_dim
from fedchain.private_view import SecAggClient, SecAggView
from privacy import secagg as sa
from privacy import secagg_round as sr
from privacy.client_keys import ClientSecrets
from protocol.cid import content_digest
from tests.private_rounds import Federation, manifest, resolved

#: encodings of points of order 1, 2, 4 and 8 (u = 0, u = 1, a point of order 8, u = p - 1)
LOW_ORDER = [
    bytes(32),
    b"\x01" + bytes(31),
    bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
    bytes.fromhex("ec" + "ff" * 30 + "7f"),
]
K = 5
EVIL = 4


@pytest.mark.parametrize("point", LOW_ORDER, ids=["u0", "u1", "order8", "p-1"])
def test_low_order_keys_are_unusable(point: bytes) -> None:
    assert not sa.usable_public_key(point)


def test_a_low_order_encryption_key_does_not_stall_the_round(
    task_factory: Any, tmp_path: Path
) -> None:
    """Low-order ENC_KEY: every honest client raises while dealing shares to it."""
    s = task_factory(n_clients=K, min_updates=K - 1, max_updates=K - 1, start=False)
    records = PrivacyRecordsContract.deploy(s.chain, s.owner, s.task.address, 20)
    spec = resolved("secagg", K, dropout_fraction=0.2, records_contract=records.address)
    man = manifest(spec)
    store = LocalStore(tmp_path / "store")
    view = SecAggView(s.task, records, store, man)
    honest = [
        SecAggClient(view, ClientSecrets(bytes(a.key), s.task.address, i), a)
        for i, a in enumerate(s.clients)
        if i != EVIL
    ]
    records.submit_record(s.clients[EVIL], 0, ENC_KEY, LOW_ORDER[2])
    for _ in range(2):  # encryption keys, then the first key records
        for c in honest:
            c.step(0)  # dealt to every usable key: no ValueError
    s.task.start(s.owner)
    assert sorted(view.peers(1)) == [0, 1, 2, 3] and EVIL not in view.context(1).enc_keys
    dim = private_dim(man, spec)
    for c in honest:
        payload = c.payload(None, 1, np.arange(dim))  # type: ignore[arg-type]
        store.put(payload)
        s.task.submit_update(s.clients[c.index], 1, content_digest(payload), 10)
        assert view.valid(1, s.clients[c.index].address, payload)


def test_a_low_order_mask_key_is_refused_from_the_peer_set() -> None:
    """Low-order mask key in a key record: every honest peer raises while masking."""
    fed = Federation(resolved("secagg", K, dropout_fraction=0.2))
    good = sr.client_key_record(fed.secrets[EVIL], 1, fed.ctx)
    evil_bundle = replace(good.bundle, mask_pk=LOW_ORDER[2])
    evil = sr.KeyRecord(evil_bundle, replace(good.shares, secret_commitment=LOW_ORDER[2]))
    posted = {i: sr.client_key_record(fed.secrets[i], 1, fed.ctx) for i in range(K - 1)}
    peers, refused = sr.keys_in_force(1, {}, {**posted, EVIL: evil}, fed.ctx)
    assert EVIL not in peers and "low-order" in refused[EVIL]
    vec = np.arange(fed.man.layout.size)
    sr.client_masked_update(fed.secrets[0], 1, vec, peers, fed.ctx)  # masks without raising


def test_the_testnet_file_with_keys_is_owner_only(tmp_path: Path) -> None:
    """Key files: the testnet file (account keys, Paillier p and q) was world-readable."""
    from fedchain.testnet.cluster import _write_spec, write_private

    path = tmp_path / "secret.json"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, '{"key": "00"}')
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text() == '{"key": "00"}'
    _write_spec(tmp_path, {"he_private_key": {"p": "0b", "q": "0d"}})
    spec_files = [p for p in tmp_path.iterdir() if p.name != "secret.json"]
    assert spec_files and all(p.stat().st_mode & 0o777 == 0o600 for p in spec_files)
