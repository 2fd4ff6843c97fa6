"""Safety under adversarial schedules: no two correct replicas decide differently, and no
dispute ever has valid certificates for both verdicts.

Each schedule (``consensus.memnet.random_schedule``) draws, from its seed: ``f`` Byzantine
members (an equivocating primary half of the time; otherwise silent, lying, equivocating,
double-voting or randomly tampering members), one to three disputes of which ~30% split the
correct members' own verdicts (so plain re-execution cannot carry safety: the quorum logic
must), and a network with message loss, duplication, reordering and partitions until a
random GST. Schedules run in chunks so pytest-xdist can spread them over cores.

Speed: the suite signs and recovers thousands of distinct secp256k1 signatures. With the
``coincurve`` backend (which ``eth_keys`` uses automatically when installed) the 2000
schedules take about 30 s of CPU; with the pure-Python fallback, several minutes.
"""

from __future__ import annotations

from collections import Counter

import pytest

from consensus.memnet import (
    SIM_DOMAIN,
    MemNet,
    NetConfig,
    conflicting_certificates,
    random_schedule,
    simulation_accounts,
)
from consensus.messages import Instance, InstanceKey
from consensus.pbft import DoubleVoter, Node, Replica, ReplicaConfig
from consensus.quorums import commit_quorum, max_faulty

SCHEDULES = {4: 1000, 7: 1000}
CHUNKS = 10
MAX_TICKS = 1500
SETTLE_TICKS = 300  # how long disputes no side can win keep being fought over


def _chunks() -> list[tuple[int, int, int]]:
    out = []
    for n, total in SCHEDULES.items():
        size = total // CHUNKS
        out += [(n, k * size, (k + 1) * size) for k in range(CHUNKS)]
    return out


@pytest.mark.parametrize(("n", "first", "last"), _chunks(), ids=lambda v: str(v))
def test_no_two_correct_replicas_decide_differently(n: int, first: int, last: int) -> None:
    totals: Counter[str] = Counter()
    for seed in range(first, last):
        r = random_schedule(
            n, seed, max_ticks=MAX_TICKS, settle_ticks=SETTLE_TICKS, wire=seed % 25 == 0
        )
        detail = f"n={n} seed={seed} byzantine={r.byzantine}"
        assert all(len(v) <= 1 for v in r.honest_verdicts.values()), detail
        assert not r.conflicting_certificates, detail
        assert not r.divergent_seqs, detail
        assert r.invalid_certificates == 0, detail
        # liveness as a by-product: what the correct members alone can decide, they did
        assert r.decidable_decided, detail
        totals["schedules"] += 1
        totals["instances"] += len(r.instances)
        totals["decisions"] += r.decisions
        totals["view_changes"] += r.view_changes
        totals["state_transfers"] += r.state_transfers
        totals["evidence"] += r.evidence
        totals["messages"] += r.net.sent
        totals["dropped"] += r.net.dropped
        totals["equivocating_primary"] += r.byzantine.get(0) == "equivocator"
    assert totals["decisions"] >= totals["instances"] // 2
    assert totals["view_changes"] > 0 and totals["evidence"] > 0
    print(f"\nPBFT safety n={n} seeds {first}..{last - 1}: {dict(totals)}")


def _split_brain(n: int, colluders: int) -> tuple[set[bool], list[InstanceKey]]:
    """``colluders`` split-brain members (the first primaries among them); the correct
    members' own verdicts split by index parity, the same split the colluders use."""
    accounts = simulation_accounts(n)
    members = [a.address for a in accounts]
    cfg = ReplicaConfig(request_timeout=20.0, view_change_timeout=20.0, retransmit_interval=9.0)
    nodes: list[Node] = []
    for i in range(n):
        cls = DoubleVoter if i < colluders else Replica
        nodes.append(cls(i, members, accounts[i], SIM_DOMAIN, lambda _x, i=i: i % 2 == 0, cfg))
    net = MemNet(nodes, NetConfig(max_delay=2), seed=n)
    dispute = Instance(SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, 1, 0, b"\x01" * 32)
    net.start(dispute)
    honest = range(colluders, n)
    net.run_until(lambda net: net.decided(dispute, honest), 400)
    conflicts = conflicting_certificates(net.commits_seen, commit_quorum(n), members)
    return net.verdicts(dispute.key, honest), conflicts


@pytest.mark.parametrize("n", [4, 7])
def test_safety_is_lost_beyond_f(n: int) -> None:
    """The threat model's boundary, shown: f split-brain colluders cannot make correct
    members decide differently even when those members' re-executions disagree; f + 1 can
    (and then two valid, conflicting certificates for one dispute exist)."""
    f = max_faulty(n)
    verdicts, conflicts = _split_brain(n, f)
    assert len(verdicts) <= 1 and not conflicts
    verdicts, conflicts = _split_brain(n, f + 1)
    assert verdicts == {True, False} and len(conflicts) == 1
