"""What a driver sees of a replica: its configuration, the actions it returns, the evidence
it records, and the :class:`Node` protocol every replica (honest, Byzantine, silent) meets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeAlias

from consensus.certificate import CommitCertificate
from consensus.messages import Instance, Message
from protocol.errors import ConsensusError

__all__ = [
    "Action",
    "Broadcast",
    "CancelTimer",
    "Decide",
    "Evidence",
    "Node",
    "Persist",
    "ReplicaConfig",
    "Send",
    "SetTimer",
]


@dataclass(frozen=True)
class ReplicaConfig:
    """Protocol parameters. Durations are in abstract time units (memnet: ticks; tcp: a unit
    derived from the measured round-trip time, see :mod:`consensus.rtt`).

    ``checkpoint_interval`` is K, ``log_window`` is L (high-water mark = h + L, L >= K).
    With ``stable_storage`` (the default) every batch of actions that follows a change of the
    replica's signed state starts with a :class:`Persist` (see :mod:`consensus.pbft.stable`).
    Timeouts back off as ``timeout * 2**min(k, max_backoff_exponent)`` where ``k`` counts view
    changes since the last executed sequence number.
    """

    checkpoint_interval: int = 4
    log_window: int = 8
    request_timeout: float = 40.0
    view_change_timeout: float = 40.0
    retransmit_interval: float = 15.0
    max_backoff_exponent: int = 6
    history_limit: int = 1024
    catchup_limit: int = 64
    max_evidence: int = 256
    record_trace: bool = False
    stable_storage: bool = True

    def __post_init__(self) -> None:
        if self.checkpoint_interval < 1 or self.log_window < self.checkpoint_interval:
            raise ConsensusError("need checkpoint_interval >= 1 and log_window >= it")
        if min(self.request_timeout, self.view_change_timeout, self.retransmit_interval) <= 0:
            raise ConsensusError("timeouts must be positive")
        if self.max_backoff_exponent < 0 or self.history_limit < 1 or self.catchup_limit < 1:
            raise ConsensusError("invalid limits")


@dataclass(frozen=True)
class Send:
    """Deliver ``msg`` to replica ``to``."""

    to: int
    msg: Message


@dataclass(frozen=True)
class Broadcast:
    """Deliver ``msg`` to every other replica (a replica processes its own messages itself)."""

    msg: Message


@dataclass(frozen=True)
class Persist:
    """Write ``state`` durably to this replica's stable storage BEFORE carrying out any later
    action of the same batch (it is always the first one); a restarted replica is built from
    the last state written (``Replica(..., state=...)``). Drivers without storage may drop it,
    at the price of the restart guarantee."""

    state: bytes


@dataclass(frozen=True)
class SetTimer:
    """Call ``on_timer(timer_id)`` after ``delay`` time units (ids are never reused)."""

    timer_id: str
    delay: float


@dataclass(frozen=True)
class CancelTimer:
    timer_id: str


@dataclass(frozen=True)
class Decide:
    """The instance committed with verdict ``faulty``; ``certificate`` goes on-chain.

    ``seq`` is the sequence number it executed at (known from the commit proof if the replica
    learned the decision while catching up).
    """

    instance: Instance
    faulty: bool
    certificate: CommitCertificate
    seq: int


Action: TypeAlias = Persist | Send | Broadcast | SetTimer | CancelTimer | Decide


@dataclass(frozen=True)
class Evidence:
    """Two conflicting messages signed by one replica (``kind`` names the slot type).

    ``commit`` evidence is two ``DisputeVerdict`` signatures for the same dispute and view with
    different verdicts: checkable on-chain, hence slashable.
    """

    kind: str
    sender: int
    first: Message
    second: Message


class Node(Protocol):
    """What a network driver needs from a replica (honest, Byzantine or silent)."""

    index: int

    def start(self, instance: Instance) -> list[Action]: ...

    def on_message(self, msg: Message) -> list[Action]: ...

    def on_timer(self, timer_id: str) -> list[Action]: ...
