"""Issue 21: attacks on secure aggregation's reveals (inconsistent fetch views, reveals
below the threshold, a task without a threshold floor), against the real FedChainTask and
PrivacyRecords contracts on the embedded chain where a chain is involved."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters.privacy_records import REVEAL, PrivacyRecordsContract
from adapters.storage import LocalStore
from aggregators.private import private_dim
from fedchain.private_view import SecAggClient, SecAggView
from privacy import secagg as sa
from privacy import secagg_round as sr
from privacy.client_keys import ClientSecrets
from privacy.reveal_safety import RevealUnsafe
from privacy.spec import PrivacySpec
from protocol.cid import content_digest
from protocol.errors import ConfigError, SecAggError
from tests.private_rounds import Federation, manifest, resolved

K = 6
VICTIM = 0
DENIED = (1, 2)  # honest clients that cannot fetch the victim's included payload


def _revealed(records: PrivacyRecordsContract, round_: int) -> list[sa.Reveal]:
    return [sa.Reveal.from_bytes(p) for p in records.first_payloads(round_, REVEAL).values()]


def test_inconsistent_fetch_views_never_make_both_secrets_of_a_client_public(
    task_factory: Any, tmp_path: Path
) -> None:
    """Inconsistent views: clients denied an included payload reveal its mask key."""
    s = task_factory(n_clients=K, min_updates=K, max_updates=K, start=False)
    records = PrivacyRecordsContract.deploy(s.chain, s.owner, s.task.address, 20)
    spec = resolved("secagg", K, dropout_fraction=0.34, records_contract=records.address)
    man = manifest(spec)
    full, partial = LocalStore(tmp_path / "full"), LocalStore(tmp_path / "partial")
    clients = []
    for i, acct in enumerate(s.clients):
        view = SecAggView(s.task, records, partial if i in DENIED else full, man)
        secrets = ClientSecrets(bytes(acct.key), s.task.address, i)
        clients.append(SecAggClient(view, secrets, acct))
    for _ in range(2):  # encryption keys, then the first key records (before the start)
        for c in clients:
            c.step(0)
    s.task.start(s.owner)
    dim = private_dim(man, spec)
    for i, c in enumerate(clients):
        vector = np.random.default_rng(i).integers(-1000, 1000, dim)
        payload = c.payload(None, 1, vector)  # type: ignore[arg-type]
        full.put(payload)
        if i != VICTIM:
            partial.put(payload)
        s.task.submit_update(s.clients[i], 1, content_digest(payload), 10)
    assert all(s.task.included_updates(1))  # the contract included every update
    for c in clients:
        c.step(1)  # each reveals from its own view
    reveals = _revealed(records, 1)
    assert len(reveals) == K  # the denied clients still reveal the others' self masks
    for v in range(K):
        selfs = sum(v in r.self_mask_shares for r in reveals)
        keys = sum(v in r.mask_key_shares for r in reveals)
        assert not (selfs and keys), f"client {v}: {selfs} self-mask and {keys} key shares"
    # nobody reveals the victim's mask key, so its pairwise masks stay on its vector
    assert all(VICTIM not in r.mask_key_shares for r in reveals)


def test_reveals_below_the_threshold_are_refused() -> None:
    """Reveals below the threshold: one included update is recovered exactly."""
    fed = Federation(resolved("secagg", 5, dropout_fraction=0.4))  # t = 3
    payload = fed.payload(VICTIM, 1)
    masked = sr.MaskedUpdate.from_bytes(payload, 1, fed.man.layout.size, 1 << 24)
    reveals = []
    for i in range(5):
        try:
            reveals.append(
                sr.client_reveal(
                    fed.secrets[i],
                    1,
                    [VICTIM],
                    fed.peers,
                    {VICTIM: masked.self_mask_shares},
                    fed.ctx,
                )
            )
        except RevealUnsafe:
            continue
    assert reveals == []  # every honest client refuses: nothing is public
    with pytest.raises(SecAggError):  # so anyone's unmasking fails (it would be exact)
        sr.unmask_round(1, fed.peers, {VICTIM: masked}, reveals, fed.ctx)


@pytest.mark.parametrize(("k", "rho"), [(10, 0.9), (6, 0.5), (10, 0.5)])
def test_a_task_without_a_threshold_floor_is_refused(k: int, rho: float) -> None:
    """No threshold floor: rho = 0.9 at K = 10 gives t = 1 (every share is the secret)."""
    with pytest.raises(ConfigError, match="threshold"):
        PrivacySpec(mode="secagg", num_clients=k, dropout_fraction=rho).validate()


def test_an_aggregator_never_treats_an_included_update_as_dropped() -> None:
    """Inconsistent views: an aggregator that cannot fetch an included update unmasks it as
    dropped (with the mask key other views revealed)."""
    fed = Federation(resolved("secagg", 5, dropout_fraction=0.4))  # t = 3
    sent: list[bytes | None] = [fed.payload(i, 1) for i in range(5)]
    inputs = fed.inputs(1, sent)
    # this aggregator's fetch of client 0's included payload failed
    seen: list[bytes | None] = [None, *sent[1:]]
    result = fed.run(1, seen, replace(inputs, included=frozenset(range(5))))
    assert result.carried_forward
    assert "are unavailable" in result.notes["failure"]
