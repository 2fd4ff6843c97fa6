"""Issue 20/21: replaying signed privacy records, against the real PrivacyRecords contract on
the embedded chain."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.contract import Phase
from adapters.privacy_records import (
    ENC_KEY,
    MASK_KEY,
    REVEAL,
    DuplicateRecord,
    PrivacyRecordsContract,
)


def _setup(task_factory: Any) -> tuple[Any, PrivacyRecordsContract]:
    s = task_factory(n_clients=4, min_updates=4, max_updates=4, start=False)
    return s, PrivacyRecordsContract.deploy(s.chain, s.owner, s.task.address, 10)


def test_a_signed_record_cannot_be_replayed(task_factory: Any) -> None:
    """Replay: anyone relays the same signed record again and again."""
    s, records = _setup(task_factory)
    signed = records.sign(s.clients[0], 0, ENC_KEY, b"\x01" * 32)
    records.submit_records(s.owner, 0, [signed])
    with pytest.raises(DuplicateRecord) as exc:
        records.submit_records(s.aggregators[0], 0, [signed])  # relayed again
    assert exc.value.error_args == {"round": 0, "client": 0, "kind": ENC_KEY}
    with pytest.raises(DuplicateRecord):  # twice in one batch
        records.submit_records(s.owner, 0, [records.sign(s.clients[1], 0, MASK_KEY, b"k")] * 2)
    with pytest.raises(DuplicateRecord):  # a second, different record of the same kind
        records.submit_record(s.clients[0], 0, ENC_KEY, b"\x02" * 32)
    assert records.record_log(0)[1] == 1
    # other kinds, other clients and other rounds stay open
    records.submit_record(s.clients[0], 0, MASK_KEY, b"key record")
    records.submit_record(s.clients[1], 0, ENC_KEY, b"\x03" * 32)
    s.task.start(s.owner)
    records.submit_record(s.clients[0], 1, MASK_KEY, b"next key record")
    assert [r.client for r in records.records(0)] == [0, 0, 1]


def test_a_reveal_cannot_be_replayed_or_doubled(task_factory: Any) -> None:
    """Replay: a second reveal of one client in one round (e.g. a different share set)."""
    s, records = _setup(task_factory)
    s.task.start(s.owner)
    for i, client in enumerate(s.clients):
        s.task.submit_update(client, 1, bytes([i + 1]) * 32, 10)
    assert s.task.phase(1) == Phase.AGGREGATING and records.revealing(1)
    first = records.sign(s.clients[2], 1, REVEAL, b"shares")
    records.submit_records(s.owner, 1, [first])
    with pytest.raises(DuplicateRecord):
        records.submit_records(s.owner, 1, [first])
    with pytest.raises(DuplicateRecord):
        records.submit_record(s.clients[2], 1, REVEAL, b"other shares")
    assert records.first_payloads(1, REVEAL) == {2: b"shares"}
