"""Round-trip time estimation and the timer scale derived from it (pure, no clock).

The TCP transport pings every peer (:mod:`consensus.tcp`) and feeds each answered ping's round
trip to that peer's :class:`RttEstimator`, the Jacobson/Karels estimator of RFC 6298: a
smoothed RTT, its mean deviation, and ``RTO = SRTT + max(G, 4 · RTTVAR)``.

The replica's timers are in abstract units (:class:`~consensus.pbft.ReplicaConfig`); the
transport turns a unit into seconds with :class:`TimerScale`: one RTO is ``rto_units`` units
(so with the default configuration the request and view-change timeouts are 4 RTO and the
retransmission interval 1.5 RTO), clamped to ``[min_unit, max_unit]`` seconds. Exponential
back-off stays where it was, in the replica (``timeout · 2^k`` after ``k`` view changes).

Which RTO: a quorum needs replies from ``commit_quorum(n) - 1`` peers, so the transport takes
the ``commit_quorum(n) - 1``-th smallest peer RTO (:func:`quorum_rto`). Pongs only answer
pings this node actually sent, so a Byzantine peer can only make its own RTO larger; with at
most ``f`` such peers the chosen RTO is at most the largest RTO among correct peers, and a
crashed peer (no samples) does not count at all.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from consensus.quorums import commit_quorum
from protocol.errors import ConsensusError

__all__ = ["PingBook", "RttEstimator", "TimerScale", "quorum_rto"]


@dataclass
class RttEstimator:
    """RFC 6298 section 2: ``alpha = 1/8``, ``beta = 1/4``, ``K = 4``, clock granularity G."""

    alpha: float = 0.125
    beta: float = 0.25
    k: float = 4.0
    granularity: float = 0.001
    srtt: float | None = None
    rttvar: float = 0.0
    samples: int = 0

    def sample(self, rtt: float) -> None:
        """Fold one measured round trip (seconds) into the estimate."""
        if not rtt >= 0.0:  # also refuses NaN
            raise ConsensusError(f"round-trip time must be >= 0, got {rtt!r}")
        if self.srtt is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = (1 - self.beta) * self.rttvar + self.beta * abs(self.srtt - rtt)
            self.srtt = (1 - self.alpha) * self.srtt + self.alpha * rtt
        self.samples += 1

    @property
    def rto(self) -> float | None:
        """Retransmission timeout in seconds, or None before the first sample."""
        if self.srtt is None:
            return None
        return self.srtt + max(self.granularity, self.k * self.rttvar)


def quorum_rto(rtos: Iterable[float | None], needed: int) -> float | None:
    """The ``needed``-th smallest of the known RTOs (the largest if fewer are known); None if
    none is known. ``needed`` is the number of peers a quorum has to hear from."""
    known = sorted(r for r in rtos if r is not None)
    if not known:
        return None
    return known[min(max(needed, 1), len(known)) - 1]


@dataclass(frozen=True)
class TimerScale:
    """Seconds per replica time unit: ``rto / rto_units`` clamped to ``[min_unit, max_unit]``;
    ``min_unit`` before any RTO is known (and on loopback, where RTOs are a millisecond)."""

    rto_units: float = 10.0
    min_unit: float = 0.01
    max_unit: float = 1.0

    def __post_init__(self) -> None:
        if not (self.rto_units > 0 and 0 < self.min_unit <= self.max_unit):
            raise ConsensusError("need rto_units > 0 and 0 < min_unit <= max_unit")

    def unit(self, rto: float | None) -> float:
        if rto is None:
            return self.min_unit
        return min(self.max_unit, max(self.min_unit, rto / self.rto_units))


class PingBook:
    """Per-peer estimators fed by ping nonces (pure: callers pass the clock's readings).

    :meth:`ping` hands out a fresh nonce and remembers when it was sent (the last
    ``max_pending`` per peer); :meth:`pong` turns the answer into a sample. An answer to a
    nonce never sent, or already answered, is ignored: a peer can delay its samples, not
    forge them.
    """

    def __init__(self, max_pending: int = 16) -> None:
        self.estimators: dict[int, RttEstimator] = {}
        self.max_pending = max_pending
        self._pending: dict[int, OrderedDict[int, float]] = {}
        self._nonce = 0

    def ping(self, peer: int, now: float) -> int:
        self._nonce += 1
        sent = self._pending.setdefault(peer, OrderedDict())
        sent[self._nonce] = now
        while len(sent) > self.max_pending:
            sent.popitem(last=False)
        return self._nonce

    def pong(self, peer: int, nonce: int, now: float) -> bool:
        """Record the answer to ``nonce``; True if it was a ping of ours still pending."""
        sent = self._pending.get(peer, OrderedDict()).pop(nonce, None)
        if sent is None:
            return False
        self.estimators.setdefault(peer, RttEstimator()).sample(max(0.0, now - sent))
        return True

    def quorum_rto(self, n: int) -> float | None:
        """The RTO of the slowest peer a quorum of a committee of ``n`` needs to hear from."""
        return quorum_rto((e.rto for e in self.estimators.values()), commit_quorum(n) - 1)

    def summary(self) -> dict[str, Any]:
        return {
            str(i): {"srtt": e.srtt, "rttvar": e.rttvar, "rto": e.rto, "samples": e.samples}
            for i, e in sorted(self.estimators.items())
        }
