"""The PrivacyRecords contract against a real eth-tester chain: signed records relayed in
batches or sent alone, the per-round accumulator and its event-rebuilt list, the reveal
window, and every refusal (wrong round, non-client, bad signature, bad kind, bad batch)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest

from adapters.contract import Phase
from adapters.privacy_records import (
    ENC_KEY,
    MASK_KEY,
    REVEAL,
    BadRecord,
    BadRecordBatch,
    BadRecordSignature,
    DuplicateRecord,
    NotRevealing,
    NotTaskClient,
    PrivacyRecordsContract,
    RecordRoundNotOpen,
    WrongRevealSigner,
    extend_records,
    predicted_address,
    record_digest,
)
from protocol.errors import ConfigError

WINDOW = 3


def setup(task_factory: Any, *, start: bool = True) -> tuple[Any, PrivacyRecordsContract]:
    s = task_factory(n_clients=4, min_updates=4, max_updates=4, start=False)
    nonce = s.chain.w3.eth.get_transaction_count(s.owner.address)
    expected = predicted_address(s.owner.address, nonce)
    records = PrivacyRecordsContract.deploy(s.chain, s.owner, s.task.address, WINDOW)
    assert records.address == expected  # what the manifest names before deployment
    if start:
        s.task.start(s.owner)
    return s, records


def dg(label: object) -> bytes:
    return hashlib.sha256(repr(label).encode()).digest()


def test_relayed_and_own_records_rebuild_against_the_accumulator(task_factory: Any) -> None:
    s, records = setup(task_factory, start=False)
    signed = [records.sign(s.clients[i], 0, ENC_KEY, bytes([i]) * 32) for i in (2, 0)]
    records.submit_records(s.aggregators[0], 0, signed)  # anyone relays
    records.submit_record(s.clients[1], 0, MASK_KEY, b"key record of client 1")
    acc = 0
    for client, kind, payload in [
        (2, ENC_KEY, bytes([2]) * 32),
        (0, ENC_KEY, bytes([0]) * 32),
        (1, MASK_KEY, b"key record of client 1"),
    ]:
        acc = extend_records(acc, kind, client, payload)
    assert records.record_log(0) == (acc, 3)
    got = [(r.index, r.client, r.kind) for r in records.records(0)]
    assert got == [(0, 2, ENC_KEY), (1, 0, ENC_KEY), (2, 1, MASK_KEY)]
    # a fresh reader (a restarted node) rebuilds the same list from the events alone
    fresh = PrivacyRecordsContract(s.chain, records.address)
    assert fresh.records(0) == records.records(0)
    assert fresh.enc_keys(0) == {2: bytes([2]) * 32, 0: bytes([0]) * 32}
    digest = records.chain.call(records.contract.functions.recordDigest(MASK_KEY, 5, b"x"))
    assert bytes(digest) == record_digest(records.separator, MASK_KEY, 5, b"x")


def test_records_are_refused_with_typed_errors(task_factory: Any) -> None:
    s, records = setup(task_factory)
    outsider = s.spare[0]
    with pytest.raises(RecordRoundNotOpen):
        records.submit_record(s.clients[0], 0, ENC_KEY, b"k" * 32)  # round 1 is current
    with pytest.raises(NotTaskClient):
        records.submit_record(outsider, 1, MASK_KEY, b"x")
    with pytest.raises(NotTaskClient):  # a relayed record of a non-client
        records.submit_records(s.owner, 1, [records.sign(outsider, 1, MASK_KEY, b"x")])
    with pytest.raises(BadRecord):
        records.submit_record(s.clients[0], 1, MASK_KEY, b"")
    good = records.sign(s.clients[0], 1, MASK_KEY, b"x")
    forged = replace(good, payload=b"y")  # altered by the relayer: another signer recovers
    with pytest.raises(NotTaskClient):
        records.submit_records(s.owner, 1, [forged])
    high_s = replace(good, vs=(int.from_bytes(good.vs, "big") | (2**255 - 1)).to_bytes(32, "big"))
    with pytest.raises(BadRecordSignature):
        records.submit_records(s.owner, 1, [high_s])
    fn = records.contract.functions.submitRecords(1, good.packed()[:-1])
    with pytest.raises(BadRecordBatch):
        s.chain.transact(s.owner, fn, "submitRecords")
    with pytest.raises(ConfigError):
        records.submit_records(s.owner, 2, [good])  # a record of another round in the batch
    with pytest.raises(NotRevealing):
        records.submit_record(s.clients[0], 1, REVEAL, b"too early")
    assert records.record_log(1) == (0, 0)


def test_reveals_are_accepted_only_inside_the_reveal_window(task_factory: Any) -> None:
    s, records = setup(task_factory)
    for i, client in enumerate(s.clients):
        s.task.submit_update(client, 1, dg(i), 10)  # the fourth closes collection
    assert s.task.phase(1) == Phase.AGGREGATING and records.revealing(1)
    start = s.task.round_info(1).attempt_start
    records.submit_records(s.owner, 1, [records.sign(s.clients[3], 1, REVEAL, b"shares")])
    records.submit_record(s.clients[2], 1, REVEAL, b"own shares")
    s.chain.mine_to(start + WINDOW)
    assert not records.revealing(1)
    with pytest.raises(NotRevealing):
        records.submit_record(s.clients[1], 1, REVEAL, b"late")
    assert records.first_payloads(1, REVEAL) == {3: b"shares", 2: b"own shares"}
    assert s.task.phase(1) == Phase.AGGREGATING  # the aggregator computes now


def test_reveal_digests_relayed_by_submit_reveals_join_the_same_list(task_factory: Any) -> None:
    s, records = setup(task_factory, start=False)
    keys = [records.sign(c, 0, ENC_KEY, bytes([i]) * 32) for i, c in enumerate(s.clients[:3])]
    records.submit_records(s.owner, 0, keys)
    s.task.start(s.owner)
    for i, client in enumerate(s.clients):
        s.task.submit_update(client, 1, dg(i), 10)
    assert records.revealing(1)
    sign = records.sign
    relayed = [sign(s.clients[2], 1, REVEAL, dg("r2")), sign(s.clients[3], 1, REVEAL, b"shares")]
    records.submit_records(s.owner, 1, relayed)  # the window has room for two transactions
    with pytest.raises(WrongRevealSigner):  # a relayer naming another client's index
        records.submit_reveals(s.owner, 1, [(1, sign(s.clients[0], 1, REVEAL, dg("r0")))])
    with pytest.raises(WrongRevealSigner):  # client 3 registered no encryption key
        records.submit_reveals(s.owner, 1, [(3, sign(s.clients[3], 1, REVEAL, dg("r3")))])
    with pytest.raises(WrongRevealSigner):  # nor a non-client
        records.submit_reveals(s.owner, 1, [(3, sign(s.spare[0], 1, REVEAL, dg("r3")))])
    forged = replace(sign(s.clients[0], 1, REVEAL, dg("r0")), payload=dg("other"))
    with pytest.raises(WrongRevealSigner):  # an altered digest recovers another signer
        records.submit_reveals(s.owner, 1, [(0, forged)])
    with pytest.raises(DuplicateRecord):  # one reveal per client and round, either way
        records.submit_reveals(s.owner, 1, [(2, sign(s.clients[2], 1, REVEAL, dg("again")))])
    with pytest.raises(ConfigError):
        records.submit_reveals(s.owner, 1, [(0, sign(s.clients[0], 1, REVEAL, b"not 32"))])
    batch = [(i, sign(s.clients[i], 1, REVEAL, dg(f"r{i}"))) for i in (1, 0)]
    records.submit_reveals(s.owner, 1, batch)
    acc = 0
    for client, payload in [(2, dg("r2")), (3, b"shares"), (1, dg("r1")), (0, dg("r0"))]:
        acc = extend_records(acc, REVEAL, client, payload)
    assert records.record_log(1) == (acc, 4)
    fresh = PrivacyRecordsContract(s.chain, records.address)  # rebuilt from both events
    assert [(r.index, r.client, r.payload) for r in fresh.records(1)] == [
        (0, 2, dg("r2")),
        (1, 3, b"shares"),
        (2, 1, dg("r1")),
        (3, 0, dg("r0")),
    ]


def test_records_of_another_task_are_refused(task_factory: Any) -> None:
    s, records = setup(task_factory)
    other = task_factory(n_aggregators=1, n_clients=1, start=False)
    with pytest.raises(ConfigError, match="belongs to task"):
        records.check_task(other.task.address)
    records.check_task(s.task.address)
