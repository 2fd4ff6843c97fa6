"""Signed update records, batches (``submitUpdates``), the accumulator and the round bitmap,
against a real eth-tester chain (see tests/test_contract.py for the block arithmetic)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest

from adapters.contract import (
    AccumulatorForgotten,
    BadBatch,
    CollectionClosed,
    InvalidSignature,
    NotClient,
    Phase,
    RoundNotOpen,
    SignatureFault,
    TaskContract,
    UnknownClient,
    UpdateAlreadySubmitted,
    WrongSigner,
    ZeroDigest,
    ZeroSamples,
)
from adapters.records import (
    AccumulatorMismatch,
    SignedUpdate,
    compact_signature,
    extend_updates,
    sign_update,
    update_record_digest,
)
from protocol.eip712 import domain_separator

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def dg(label: object) -> bytes:
    return hashlib.sha256(repr(label).encode()).digest()


def ur(label: object) -> bytes:
    """A chunk root (U_i) standing for the update labelled ``label``."""
    return dg(("U_i", label))


def record(s: Any, i: int, round_: int, label: object = None, n: int = 10) -> SignedUpdate:
    """Client ``i``'s signed record for ``round_`` (its U_i is ``ur`` of the label)."""
    client = s.clients[i]
    lab = label or (round_, i)
    return sign_update(client, s.task.domain_separator, i, round_, dg(lab), n, ur(lab))


def test_record_digest_and_accumulator_mirror_the_contract(task_factory: Any) -> None:
    s = task_factory(n_clients=3, min_updates=3, max_updates=3)
    task = s.task
    assert task.domain_separator == domain_separator(s.chain.chain_id, task.address)
    for args in [(1, dg("a"), 1, ur("a")), (7, dg("b"), 2**64 - 1, b"\xff" * 32)]:
        assert task.update_record_digest(*args) == update_record_digest(
            task.domain_separator, *args
        )
    # U_i is signed: another chunk root is another record
    assert task.update_record_digest(1, dg("a"), 1, ur("b")) != update_record_digest(
        task.domain_separator, 1, dg("a"), 1, ur("a")
    )
    receipt = task.submit_updates(s.owner, 1, [record(s, i, 1) for i in range(3)])
    acc = 0
    for i in range(3):
        acc = extend_updates(acc, s.clients[i].address, dg((1, i)), 10, ur((1, i)))
    assert task.update_accumulator(1) == (acc, 3)
    assert [(u.index, u.client, u.chunk_root) for u in task.accepted_updates(receipt)] == [
        (i, s.clients[i].address, ur((1, i))) for i in range(3)
    ]
    # a client's own submitUpdate carries its U_i too (entry and accumulator)
    s2 = task_factory(n_clients=4, min_updates=4, max_updates=4)
    got = s2.task.accepted_updates(s2.task.submit_update(s2.clients[1], 1, dg("own"), 5, ur("own")))
    assert [(u.client, u.digest, u.num_samples, u.chunk_root) for u in got] == [
        (s2.clients[1].address, dg("own"), 5, ur("own"))
    ]
    assert s2.task.update_accumulator(1) == (
        extend_updates(0, s2.clients[1].address, dg("own"), 5, ur("own")),
        1,
    )


def test_batch_registers_in_order_and_nodes_rebuild_it(task_factory: Any) -> None:
    s = task_factory(n_clients=4, min_updates=4, max_updates=4)
    task = s.task
    task.submit_update(s.clients[2], 1, dg((1, 2)), 10)  # alone first: index 0
    receipt = task.submit_updates(s.aggregators[0], 1, [record(s, i, 1) for i in (3, 0, 1)])
    (event,) = [e for e in task.events(receipt) if e.name == "UpdatesRegistered"]
    assert event.args["round"] == 1 and event.args["firstIndex"] == 1
    expected = [(s.clients[i].address, dg((1, i))) for i in (2, 3, 0, 1)]
    assert [(u.client, u.digest) for u in task.updates(1)] == expected
    # a fresh wrapper (a restarted node) rebuilds the same list from the events alone
    fresh = TaskContract.at(s.chain, task.address)
    assert [(u.client, u.digest) for u in fresh.updates(1)] == expected
    assert all(fresh.has_submitted(1, c.address) for c in s.clients)
    assert task.phase(1) != Phase.COLLECTING  # maxUpdates reached


def test_signature_edge_cases(task_factory: Any) -> None:
    s = task_factory(n_clients=3, min_updates=3, max_updates=3)
    task, sep = s.task, s.task.domain_separator
    outsider = s.spare[0]

    def refused(records: list[SignedUpdate]) -> Any:
        with pytest.raises(Exception) as info:
            task.submit_updates(s.owner, 1, records)
        return info.value

    # wrong signer: an unregistered key signs a record naming client 1
    exc = refused([sign_update(outsider, sep, 1, 1, dg("x"), 10)])
    assert isinstance(exc, WrongSigner)
    assert exc.error_args == {"record": 0, "clientIndex": 1, "signer": outsider.address}
    # another registered client's key: still not client 1's record
    assert isinstance(refused([sign_update(s.clients[0], sep, 1, 1, dg("x"), 10)]), WrongSigner)
    # a record signed for round 2 (or replayed from another round) does not count in round 1
    good = record(s, 0, 1)
    exc = refused([good, record(s, 1, 2)])
    assert isinstance(exc, WrongSigner) and exc.error_args["record"] == 1
    # another chain, another task contract: other domains
    for other in (
        domain_separator(s.chain.chain_id + 1, task.address),
        domain_separator(s.chain.chain_id, s.owner.address),
    ):
        assert isinstance(
            refused([sign_update(s.clients[0], other, 0, 1, dg("x"), 10)]), WrongSigner
        )
    # an index nobody registered
    exc = refused([sign_update(s.clients[0], sep, 9, 1, dg("x"), 10)])
    assert isinstance(exc, UnknownClient) and exc.error_args == {"record": 0, "clientIndex": 9}
    # high s: a compact signature's s is 255 bits, so the malleable twin n - s of a low s
    # mostly does not even fit; any s above n / 2 that does is refused before recovery
    r, vs = compact_signature(s.clients[0], update_record_digest(sep, 1, dg("y"), 10))
    v_bit = int.from_bytes(vs, "big") >> 255
    assert int.from_bytes(vs, "big") & ((1 << 255) - 1) <= SECP256K1_N // 2  # we sign low s
    high = (SECP256K1_N // 2 + 1) | (v_bit << 255)
    exc = refused([SignedUpdate(0, 1, dg("y"), 10, r, high.to_bytes(32, "big"))])
    assert isinstance(exc, InvalidSignature)
    assert exc.error_args["reason"] == SignatureFault.MALLEABLE_S
    # garbage that recovers nobody
    exc = refused([SignedUpdate(0, 1, dg("y"), 10, bytes(32), bytes(32))])
    assert isinstance(exc, InvalidSignature)
    assert exc.error_args["reason"] == SignatureFault.INVALID_SIGNATURE
    # fields the client signed but the contract never accepts
    assert isinstance(refused([sign_update(s.clients[0], sep, 0, 1, dg("z"), 0)]), ZeroSamples)
    assert isinstance(refused([sign_update(s.clients[0], sep, 0, 1, bytes(32), 1)]), ZeroDigest)
    # malformed batches
    with pytest.raises(BadBatch):
        task.submit_updates(s.owner, 1, [])
    with pytest.raises(BadBatch) as bad:
        task._tx(s.owner, "submitUpdates", 1, good.packed()[:-1])
    assert bad.value.error_args == {"length": 139}
    # nothing of the above registered anything
    assert task.update_accumulator(1) == (0, 0) and task.updates(1) == []
    task.submit_updates(s.owner, 1, [good])
    assert [u.client for u in task.updates(1)] == [s.clients[0].address]


def test_duplicates_are_skipped_and_singles_refused(task_factory: Any) -> None:
    s = task_factory(n_clients=3, min_updates=3, max_updates=3)
    task = s.task
    task.submit_update(s.clients[1], 1, dg("alone"), 5)
    # client 0 twice in one batch (two different updates), client 1 already registered alone
    receipt = task.submit_updates(
        s.owner, 1, [record(s, 0, 1, "first"), record(s, 1, 1), record(s, 0, 1, "second")]
    )
    assert [(u.client, u.digest) for u in task.accepted_updates(receipt)] == [
        (s.clients[0].address, dg("first"))
    ]
    # a batch of nothing but duplicates changes nothing and emits nothing
    receipt = task.submit_updates(s.owner, 1, [record(s, 0, 1, "third")])
    assert task.accepted_updates(receipt) == [] and task.update_accumulator(1)[1] == 2
    with pytest.raises(UpdateAlreadySubmitted):
        task.submit_update(s.clients[0], 1, dg("again"), 1)
    with pytest.raises(NotClient):
        task.submit_update(s.spare[0], 1, dg("x"), 1)
    assert [u.digest for u in task.updates(1)] == [dg("alone"), dg("first")]


def test_batch_crossing_max_updates_and_closed_collection(task_factory: Any) -> None:
    s = task_factory(n_clients=4, min_updates=2, max_updates=3)
    task = s.task
    receipt = task.submit_updates(s.owner, 1, [record(s, i, 1) for i in range(4)])
    # maxUpdates reached at the third record: the fourth is skipped, collection closes now
    assert [u.index for u in task.accepted_updates(receipt)] == [0, 1, 2]
    info = task.round_info(1)
    assert info.update_count == 3 and info.close_block == receipt["blockNumber"]
    assert info.collection_closed
    with pytest.raises(CollectionClosed):
        task.submit_updates(s.owner, 1, [record(s, 3, 1)])
    with pytest.raises(CollectionClosed):
        task.submit_update(s.clients[3], 1, dg("late"), 1)
    with pytest.raises(RoundNotOpen):
        task.submit_updates(s.owner, 2, [record(s, 3, 2)])


def test_min_updates_in_a_batch_after_the_window_closes_collection(task_factory: Any) -> None:
    s = task_factory(n_clients=4, min_updates=2, max_updates=4, collect_window=1)
    s.chain.mine(3)  # the collect window is over: reaching minUpdates closes collection
    receipt = s.task.submit_updates(s.owner, 1, [record(s, i, 1) for i in range(4)])
    assert [u.index for u in s.task.accepted_updates(receipt)] == [0, 1]
    assert s.task.round_info(1).close_block == receipt["blockNumber"]


def test_bitmap_words_are_reused_round_after_round(task_factory: Any) -> None:
    s = task_factory(n_clients=2, min_updates=2, max_updates=3, num_rounds=3, collect_window=8)
    task = s.task
    for round_ in (1, 2):
        assert not task.has_submitted(round_, s.clients[0].address)
        task.submit_updates(s.owner, round_, [record(s, 0, round_), record(s, 1, round_)])
        assert task.has_submitted(round_, s.clients[0].address)
        with pytest.raises(UpdateAlreadySubmitted):
            task.submit_update(s.clients[0], round_, dg("dup"), 1)
        s.chain.mine_to(task.round_info(round_).close_block)
        agg = s.account(task.current_aggregator().address)
        task.submit_aggregate(agg, round_, dg(("agg", round_)))
        s.chain.mine(task.config().challenge_window)
        task.finalize(s.owner, round_)
        with pytest.raises(RoundNotOpen):
            task.has_submitted(round_, s.clients[0].address)  # only the current round
    # earlier rounds stay readable from their events, checked against their accumulators
    assert [u.digest for u in task.updates(1)] == [dg((1, 0)), dg((1, 1))]
    assert [u.digest for u in task.updates(2)] == [dg((2, 0)), dg((2, 1))]


def test_accumulators_of_the_current_and_previous_round_are_kept(task_factory: Any) -> None:
    """Round 3 reuses round 1's accumulator slot: round 1 keeps only its count (the list is
    checked against its length and its events' own accumulators); round 2 and 3 the full
    check. A new round's list starts empty whatever the slot held before."""
    s = task_factory(n_clients=2, min_updates=2, max_updates=2, num_rounds=3)
    task = s.task
    for round_ in (1, 2):
        task.submit_updates(s.owner, round_, [record(s, 0, round_), record(s, 1, round_)])
        s.chain.mine_to(task.round_info(round_).close_block)
        agg = s.account(task.current_aggregator().address)
        task.submit_aggregate(agg, round_, dg(("agg", round_)))
        s.chain.mine(task.config().challenge_window)
        task.finalize(s.owner, round_)
    assert task.update_accumulator(3) == (0, 0)
    task.submit_update(s.clients[1], 3, dg("three"), 4)
    assert task.update_accumulator(3) == (
        extend_updates(0, s.clients[1].address, dg("three"), 4),
        1,
    )
    acc2 = 0
    for i in range(2):
        acc2 = extend_updates(acc2, s.clients[i].address, dg((2, i)), 10, ur((2, i)))
    assert task.update_accumulator(2) == (acc2, 2)
    assert task.update_accumulator(1) == (None, 2)
    with pytest.raises(AccumulatorForgotten):
        s.chain.call(task.contract.functions.updateAccumulator(1))
    fresh = TaskContract.at(s.chain, task.address)
    assert [u.digest for u in fresh.updates(1)] == [dg((1, 0)), dg((1, 1))]
    real = s.chain.logs
    s.chain.logs = lambda *args: real(*args)[:0]  # type: ignore[method-assign]
    with pytest.raises(AccumulatorMismatch):
        TaskContract.at(s.chain, task.address).updates(1)  # a lost event: too short


def test_a_list_that_does_not_match_the_accumulator_is_an_error(
    task_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose RPC drops a log, or alters one, refuses the list instead of using it."""
    s = task_factory(n_clients=3, min_updates=3, max_updates=3)
    task = s.task
    task.submit_update(s.clients[0], 1, dg("a"), 1)
    task.submit_updates(s.owner, 1, [record(s, 1, 1), record(s, 2, 1)])
    real = s.chain.logs

    def drop_first(*args: Any) -> Any:
        return real(*args)[1:]

    monkeypatch.setattr(s.chain, "logs", drop_first)
    with pytest.raises(AccumulatorMismatch, match="skip updates"):
        TaskContract.at(s.chain, task.address).updates(1)

    def alter(*args: Any) -> Any:
        logs = real(*args)
        data = bytearray(logs[0].data)
        data[-40] ^= 1  # a digest byte of the first entry
        return [replace(logs[0], data=bytes(data)), *logs[1:]]

    monkeypatch.setattr(s.chain, "logs", alter)
    with pytest.raises(AccumulatorMismatch, match="does not hash"):
        TaskContract.at(s.chain, task.address).updates(1)
    monkeypatch.setattr(s.chain, "logs", real)
    assert len(TaskContract.at(s.chain, task.address).updates(1)) == 3


def test_embedded_log_reader_matches_eth_get_logs(task_factory: Any) -> None:
    """The embedded chain reads logs from py-evm's receipts (eth-tester's own eth_getLogs is
    quadratic in the chain length); both give the same logs."""
    s = task_factory(n_clients=3, min_updates=3, max_updates=3)
    s.task.submit_update(s.clients[0], 1, dg("a"), 1)
    s.task.submit_updates(s.owner, 1, [record(s, 1, 1), record(s, 2, 1)])
    head = s.chain.block_number()
    fast = s.chain.logs(s.task.address, [], 0, head)
    raw = s.chain.w3.eth.get_logs({"address": s.task.address, "fromBlock": 0, "toBlock": head})
    assert len(fast) > 5
    assert [(e.block_number, e.topics, e.data) for e in fast] == [
        (int(r["blockNumber"]), tuple(bytes(t) for t in r["topics"]), bytes(r["data"])) for r in raw
    ]
    topic = fast[-1].topics[0]
    assert s.chain.logs(s.task.address, [topic], 0, head) == [
        e for e in fast if e.topics[0] == topic
    ]
    assert s.chain.logs(s.task.address, [topic, bytes(32)], 0, head) == []
