"""Issue 21 item 3: attacks on SecAgg+'s mask graph, against the real PrivacyRecords
contract on the embedded chain where the chain is involved.

* Grinding the graph seed: the seed of round r is pinned once, by the first call during
  round r − 1 after every graph position is registered; a later caller (who waited for a
  block hash it likes) gets the pinned seed, and nobody can pin before the positions are
  taken (a sybil would otherwise register into a position it chose after seeing the graph).
* Revealing along another graph: a client that computes its neighbours from a seed of its
  own holds no share of a non-neighbour's secrets (they are dealt along the pinned graph),
  so a "share" it reveals for one fails the dealer's commitment and is attributed to it;
  an update dealt along another graph is refused (no honest aggregator attests it).
* Reveals below the neighbour threshold: when an included client has fewer than t included
  neighbours, every honest client refuses to reveal, and every aggregator refuses to unmask.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from adapters.privacy_records import (
    REVEAL,
    GraphSeedNotPinnable,
    NotCommitteeMember,
    PrivacyRecordsContract,
)
from fedchain.private_view import counted_reveals
from privacy import secagg_round as sr
from privacy.client_keys import ClientSecrets
from privacy.mask_graph import round_holders
from privacy.reveal_safety import RevealUnsafe
from privacy.secagg import Reveal
from protocol.errors import SecAggError

TASK = "0x00000000000000000000000000000000000000ab"
K, DEGREE, T, N_MIN = 16, 6, 4, 12
PINNED = bytes(range(32))


def _graph(round_: int) -> sr.Holders:
    return round_holders(K, DEGREE, PINNED, TASK, round_)


def _federation() -> tuple[list[ClientSecrets], sr.SecAggContext, dict[int, sr.KeyRecord]]:
    secrets = [ClientSecrets(bytes([5, i + 1]) * 16, TASK, i) for i in range(K)]
    ctx = sr.SecAggContext(TASK, T, {s.index: s.enc_public for s in secrets}, _graph)
    posted = {s.index: sr.client_key_record(s, 1, ctx) for s in secrets}
    peers, refused = sr.keys_in_force(1, {}, posted, ctx)
    assert not refused
    return secrets, ctx, peers


def test_the_graph_seed_cannot_be_ground_or_pinned_early(task_factory: Any) -> None:
    s = task_factory(n_clients=4, start=False)
    records = PrivacyRecordsContract.deploy(s.chain, s.owner, s.task.address, 10, 5)
    with pytest.raises(GraphSeedNotPinnable):  # graph position 4 is still open
        records.pin_graph_seed(s.spare[0], 1)
    s.task.register_client(s.spare[0])
    with pytest.raises(GraphSeedNotPinnable):  # not during round 0
        records.pin_graph_seed(s.spare[0], 2)
    first = records.pin_graph_seed(s.spare[0], 1)
    s.chain.mine(3)  # a grinder waits for a block hash it likes, then pins again
    assert records.pin_graph_seed(s.spare[1], 1) == first == records.graph_seed(1)
    s.task.start(s.owner)
    with pytest.raises(GraphSeedNotPinnable):  # two rounds ahead
        records.pin_graph_seed(s.spare[1], 3)
    assert records.pin_graph_seed(s.spare[1], 2) not in (None, first)


def test_a_client_revealing_along_another_graph_gains_nothing() -> None:
    secrets, ctx, peers = _federation()
    pinned = _graph(1)
    victim = 0
    # the attacker grinds a seed of its own until it is the victim's neighbour there
    attacker = next(c for c in range(K) if c not in pinned(victim))
    ground = next(
        g
        for g in (bytes([i]) * 32 for i in range(1, 256))
        if attacker in round_holders(K, DEGREE, g, TASK, 1)(victim)
    )
    rng = np.random.default_rng(3)
    xs = {i: rng.integers(-1000, 1000, 16) for i in range(K)}
    ups = {i: sr.client_masked_update(secrets[i], 1, xs[i], peers, ctx) for i in range(K)}
    assert not ups[victim].self_mask_shares.holds(attacker)  # it was dealt no share
    shares = {i: m.self_mask_shares for i, m in ups.items()}
    honest = [sr.client_reveal(secrets[i], 1, ups, peers, shares, ctx, N_MIN) for i in range(K)]
    # its reveal along the ground graph: a made-up share of the victim's self mask
    forged = Reveal(attacker, 1, {victim: 123456789}, {})
    reveals = [r for r in honest if r.revealer != attacker] + [forged]
    result = sr.unmask_round(1, peers, ups, reveals, ctx)
    assert np.array_equal(result.total, sum(xs.values()))  # the sum, nothing more
    assert result.bad_shares == ()  # it holds no share: its "share" is not even read
    # its own update dealt along the ground graph is refused: nobody attests it
    wrong = sr.SecAggContext(
        TASK, T, ctx.enc_keys, lambda r: round_holders(K, DEGREE, ground, TASK, r)
    )
    bad = sr.client_masked_update(secrets[attacker], 1, xs[attacker], peers, wrong)
    with pytest.raises(SecAggError, match="outside its neighbours"):
        bad.check(attacker, peers, ctx)


def test_reveals_below_the_neighbour_threshold_are_refused() -> None:
    secrets, ctx, peers = _federation()
    victim = 0
    neighbours = sorted(set(_graph(1)(victim)) - {victim})
    dropped = set(neighbours[: DEGREE - T + 2])  # the victim keeps t - 2 included neighbours
    xs = {i: np.arange(8) * i for i in range(K)}
    ups = {
        i: sr.client_masked_update(secrets[i], 1, xs[i], peers, ctx)
        for i in range(K)
        if i not in dropped
    }
    assert len(ups) >= N_MIN  # enough updates: only the neighbour rule can refuse
    shares = {i: m.self_mask_shares for i, m in ups.items()}
    for i in ups:
        with pytest.raises(RevealUnsafe, match=f"fewer than t = {T} included neighbours"):
            sr.client_reveal(secrets[i], 1, ups, peers, shares, ctx, N_MIN)


def test_a_reveal_handed_to_one_aggregator_counts_for_nobody(task_factory: Any) -> None:
    """A revealer (or a storage node) that serves its content-stored reveal to one
    aggregator only: that member attests it, the others do not, and with fewer than f + 1
    attestations no aggregator counts it, so all unmask from the same reveals."""
    s = task_factory(n_clients=4, min_updates=4, max_updates=4)
    records = PrivacyRecordsContract.deploy(s.chain, s.owner, s.task.address, 10)
    for i, client in enumerate(s.clients):
        s.task.submit_update(client, 1, bytes([i + 1]) * 32, 10)
    for i in (0, 1):
        records.submit_record(s.clients[i], 1, REVEAL, bytes([0xA0 + i]) * 32)
    records.attest_reveals(s.aggregators[0], 1, [0, 1])  # it was served both
    records.attest_reveals(s.aggregators[1], 1, [0])
    records.attest_reveals(s.aggregators[2], 1, [0])
    with pytest.raises(NotCommitteeMember):
        records.attest_reveals(s.clients[3], 1, [1])
    attested = records.reveal_attestations(1)
    assert attested == {0: frozenset({0, 1}), 1: frozenset({0}), 2: frozenset({0})}
    assert counted_reveals(attested, s.task.committee_size()) == {0}
