"""What a replica keeps on stable storage, as bytes: :func:`snapshot` and :func:`restore`.

Castro and Liskov's PBFT assumes a correct replica never forgets what it signed. A replica
that restarts with an empty log breaks that: it can pre-prepare, prepare or commit a second,
conflicting message for a slot it already voted in (two disputes at one sequence number, both
verdicts for one dispute, and a slashable equivocation by an honest member). So before any
message leaves a replica, the driver writes the replica's *signed state* durably (the
:class:`~consensus.pbft.interface.Persist` action that leads each batch of actions), and a
restarted replica is built from the last such snapshot.

The snapshot holds everything that constrains what the replica may sign next, and no more:

* the view and whether it is active (a replica that asked to leave view ``v`` never votes in
  ``v`` again), its own VIEW-CHANGE and the installed NEW-VIEW;
* the log of the current view above the low-water mark: per sequence number the pre-prepare
  it accepted (or sent), the prepares it holds (its own among them), its own commit, and
  whether the slot was re-issued by a NEW-VIEW;
* its prepared certificates above the stable checkpoint (a later VIEW-CHANGE must report
  them, or a quorum intersecting only in this replica could lose a committed verdict);
* the stable checkpoint and its proof, its own checkpoints above it, what it executed and the
  state digest (not the commit proofs: a restarted replica leaves proving those to others);
* its own verdicts on the disputes it observed, and the most recent decisions
  (:data:`DECISIONS_KEPT`), so a restarted replica neither re-votes nor re-proposes them;
* the sequence numbers a state transfer skipped whose decisions it still has to fetch.

Its size is bounded by the window ``L`` and ``n``, not by history. The encoding is canonical
JSON of the wire messages (``consensus.messages.encode``), so a snapshot is parsed as strictly
as a message when it is read back; the log's signatures, the prepared certificates, the stable
proof and the decisions' certificates are verified again on restore.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from consensus.certificate import CommitCertificate
from consensus.messages import (
    Checkpoint,
    Commit,
    Instance,
    InstanceKey,
    Message,
    NewView,
    Prepare,
    PreparedCert,
    PrePrepare,
    ViewChange,
    decode,
    encode,
)
from consensus.pbft.log import Decided, Slot
from protocol.errors import ConsensusError

if TYPE_CHECKING:
    from consensus.pbft.replica import Replica

__all__ = ["DECISIONS_KEPT", "SNAPSHOT_VERSION", "restore", "snapshot"]

SNAPSHOT_VERSION = 1
#: The most recent decisions kept in a snapshot (older disputes are settled on-chain).
DECISIONS_KEPT = 8


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


@lru_cache(maxsize=8192)
def _obj(msg: Message) -> Any:
    # messages are immutable and live in the log across many snapshots: parse each once
    return json.loads(encode(msg))


@lru_cache(maxsize=1024)
def _cert(cert: CommitCertificate) -> Any:
    return json.loads(cert.to_json())


def _m(msg: Message | None) -> Any:
    return None if msg is None else _obj(msg)


def _key(key: InstanceKey) -> list[Any]:
    return [key[0], key[1], key[2].hex()]


def _unkey(obj: Any) -> InstanceKey:
    r, a, d = obj
    return (int(r), int(a), bytes.fromhex(d))


def snapshot(r: Replica) -> bytes:
    """The replica's signed state as canonical bytes (see the module docstring)."""
    o = r.ordering
    slots = []
    for s in sorted(o.slots):
        sl = o.slots[s]
        if sl.pre_prepare is None and sl.own_prepare is None:
            continue  # only others' prepares: nothing this replica signed or accepted
        slots.append(
            {
                "seq": s,
                "pp": _m(sl.pre_prepare),
                "prepares": [_m(sl.prepares[i]) for i in sorted(sl.prepares)],
                "reissued": sl.reissued,
                "disagreed": sl.disagreed,
                "commit": _m(sl.own_commit),
            }
        )
    decided = list(r.decided.items())[-DECISIONS_KEPT:]
    obj = {
        "version": SNAPSHOT_VERSION,
        "index": r.index,
        "chainId": r.domain.chain_id,
        "task": r.domain.verifying_contract,
        "committee": list(r.committee),
        "view": r.view,
        "active": r.active,
        "h": r.h,
        "stableDigest": r.stable_digest.hex(),
        "stableProof": [_m(c) for c in r.stable_proof],
        "lastExecuted": r.last_executed,
        "stateDigest": r.state_digest.hex(),
        "executed": [[s, *_key(k), f] for s, (k, f) in sorted(r.executed.items())],
        "prepared": [
            [_m(c.pre_prepare), [_m(p) for p in c.prepares]] for _, c in sorted(r.prepared.items())
        ],
        "slots": slots,
        "ownViewChange": _m(r.view_changes.own),
        "newView": _m(r.view_changes.new_view),
        "checkpoints": [_m(c) for _, c in sorted(r.checkpoints.own.items())],
        "verdicts": [[*_key(k), v] for k, v in r.verdicts.items()],
        "disputes": [_key(k) for k in r.disputes],
        "decided": [[*_key(k), d.seq, d.faulty, _cert(d.certificate)] for k, d in decided],
        "backoff": r._vc_attempts,
        "gap": sorted(r.catchup.gap),
    }
    return _dumps(obj)


def _msg(obj: Any, cls: type[Any]) -> Any:
    msg = decode(_dumps(obj))
    if not isinstance(msg, cls):
        raise ConsensusError(f"stable state: expected {cls.__name__}, got {type(msg).__name__}")
    return msg


def _msgs(objs: Any, cls: type[Any]) -> list[Any]:
    return [_msg(o, cls) for o in objs]


def restore(r: Replica, data: bytes) -> None:
    """Load a :func:`snapshot` into a freshly constructed replica (raises ConsensusError if
    the bytes are not a snapshot of this member's state, or a signature does not verify)."""
    try:
        obj = json.loads(data.decode("ascii"))
        _restore(r, obj)
    except ConsensusError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConsensusError(f"unreadable stable state: {exc}") from exc


def _restore(r: Replica, obj: dict[str, Any]) -> None:
    if obj["version"] != SNAPSHOT_VERSION or obj["index"] != r.index:
        raise ConsensusError("stable state belongs to another member or format")
    domain = (obj["chainId"], obj["task"], tuple(obj["committee"]))
    if domain != (r.domain.chain_id, r.domain.verifying_contract, r.committee):
        raise ConsensusError("stable state belongs to another task, chain or committee")
    r.view = int(obj["view"])
    r.active = bool(obj["active"])
    r.h = int(obj["h"])
    r.stable_digest = bytes.fromhex(obj["stableDigest"])
    r.stable_proof = tuple(_msgs(obj["stableProof"], Checkpoint))
    if r.h:
        r.checkpoints.check_proof(r.h, r.stable_digest, r.stable_proof)
    r.last_executed = int(obj["lastExecuted"])
    r.state_digest = bytes.fromhex(obj["stateDigest"])
    for s, rr, a, d, f in obj["executed"]:
        r.executed[int(s)] = (_unkey([rr, a, d]), bool(f))
    for pp_obj, preps in obj["prepared"]:
        pp = _msg(pp_obj, PrePrepare)
        prepares = tuple(_msgs(preps, Prepare))
        r.check_prepared_cert(pp, prepares)
        r.prepared[pp.seq] = PreparedCert(pp, prepares)
    o = r.ordering
    for entry in obj["slots"]:
        seq = int(entry["seq"])
        slot = Slot(reissued=bool(entry["reissued"]), disagreed=bool(entry["disagreed"]))
        for p in _msgs(entry["prepares"], Prepare):
            r.verify(p)
            slot.prepares[p.sender] = p
        slot.own_prepare = slot.prepares.get(r.index)
        if entry["pp"] is not None:
            pp = _msg(entry["pp"], PrePrepare)
            r.verify(pp)
            slot.pre_prepare = pp
            o.slot_of[pp.key] = seq
            matching = sorted(
                (p for p in slot.prepares.values() if p.content == pp.content),
                key=lambda p: p.sender,
            )
            if len(matching) >= r.quorum:
                slot.cert = PreparedCert(pp, tuple(matching[: r.quorum]))
        if entry["commit"] is not None:
            own = _msg(entry["commit"], Commit)
            slot.own_commit = own
            o.commits.setdefault(own.key, {})[r.index] = own
        o.slots[seq] = slot
    vc = obj["ownViewChange"]
    if vc is not None:
        own_vc = _msg(vc, ViewChange)
        r.view_changes.own = own_vc
        r.view_changes.received.setdefault(own_vc.new_view, {})[r.index] = own_vc
    if obj["newView"] is not None:
        r.view_changes.new_view = _msg(obj["newView"], NewView)
    for cp in _msgs(obj["checkpoints"], Checkpoint):
        r.checkpoints.own[cp.seq] = cp
        r.checkpoints.received.setdefault(cp.seq, {})[r.index] = cp
    for rr, a, d, v in obj["verdicts"]:
        r.verdicts[_unkey([rr, a, d])] = bool(v)
    for k in obj["disputes"]:
        key = _unkey(k)
        r.disputes[key] = Instance.in_domain(r.domain, key)
    for rr, a, d, seq, faulty, cert_obj in obj["decided"]:
        key = _unkey([rr, a, d])
        cert = CommitCertificate.from_json(json.dumps(cert_obj))
        cert.verify(r.committee, r.domain)
        r.decided[key] = Decided(int(seq), bool(faulty), cert, None)
    r._vc_attempts = int(obj["backoff"])
    r.catchup.gap = {int(s) for s in obj["gap"]}
