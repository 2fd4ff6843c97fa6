"""Byzantine behaviours for tests and experiments.

:class:`SilentReplica` (crashed or silent), :class:`LyingVoter` (votes against every proposal),
:class:`EquivocatingPrimary` (shows each half of the committee a different verdict),
:class:`DoubleVoter` (split-brain colluder) and :class:`RandomByzantine` (a seeded fuzzer).
All but the silent one run the honest state machine and rewrite what it sends.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from consensus.messages import (
    Commit,
    Instance,
    Message,
    NewView,
    Prepare,
    PrePrepare,
    SignedT,
    sign,
)
from consensus.pbft.interface import Action, Broadcast, Send
from consensus.pbft.replica import Replica

__all__ = ["DoubleVoter", "EquivocatingPrimary", "LyingVoter", "RandomByzantine", "SilentReplica"]


class SilentReplica:
    """A crashed or silent member: receives everything, says nothing, never decides."""

    def __init__(self, index: int) -> None:
        self.index = index

    def start(self, instance: Instance) -> list[Action]:
        return []

    def on_message(self, msg: Message) -> list[Action]:
        return []

    def on_timer(self, timer_id: str) -> list[Action]:
        return []


def _flip(msg: PrePrepare | Prepare | Commit) -> PrePrepare | Prepare | Commit:
    return replace(msg, faulty=not msg.faulty, signature=b"")


class _Byzantine(Replica):
    """Runs the honest state machine but rewrites what it sends (``_tamper``)."""

    def start(self, instance: Instance) -> list[Action]:
        return self._tamper(super().start(instance))

    def on_message(self, msg: Message) -> list[Action]:
        return self._tamper(super().on_message(msg), msg)

    def on_timer(self, timer_id: str) -> list[Action]:
        return self._tamper(super().on_timer(timer_id))

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        raise NotImplementedError

    def _resign(self, msg: SignedT) -> SignedT:
        return sign(replace(msg, signature=b""), self.account, self.domain)

    def _others(self) -> list[int]:
        return [i for i in range(self.n) if i != self.index]


class LyingVoter(_Byzantine):
    """Votes (prepare and commit) the opposite of every proposal it sees, at once, and
    proposes the opposite of its own verdict when it is primary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lied: set[tuple[int, int]] = set()

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        out: list[Action] = []
        if isinstance(received, PrePrepare) and (received.view, received.seq) not in self._lied:
            self._lied.add((received.view, received.seq))
            pp = received
            out.append(Broadcast(self._resign(Prepare(*_slot_args(pp), not pp.faulty, self.index))))
            out.append(Broadcast(self._resign(Commit(*pp.key, not pp.faulty, pp.view, self.index))))
        for a in actions:
            if isinstance(a, Broadcast) and isinstance(a.msg, (PrePrepare, Prepare, Commit)):
                if isinstance(a.msg, (Prepare, Commit)) and self._already_lied(a.msg):
                    continue
                out.append(Broadcast(self._resign(_flip(a.msg))))
            else:
                out.append(a)
        return out

    def _already_lied(self, msg: Prepare | Commit) -> bool:
        if isinstance(msg, Prepare):
            return (msg.view, msg.seq) in self._lied
        return False


def _slot_args(pp: PrePrepare) -> tuple[int, int, int, int, bytes]:
    return (pp.view, pp.seq, pp.round, pp.attempt, pp.aggregate_digest)


class EquivocatingPrimary(_Byzantine):
    """As primary, sends verdict ``a`` to one half of the committee and ``not a`` to the other;
    its prepares and commits follow the same split, everything else is honest."""

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        out: list[Action] = []
        others = self._others()
        half = set(others[: len(others) // 2])
        for a in actions:
            if (
                isinstance(a, Broadcast)
                and isinstance(a.msg, (PrePrepare, Prepare, Commit))
                and self.primary(a.msg.view) == self.index
            ):
                flipped = self._resign(_flip(a.msg))
                out.extend(Send(i, flipped if i in half else a.msg) for i in others)
                continue
            out.append(a)
        return out


class RandomByzantine(_Byzantine):
    """A seeded fuzzer: each outgoing message is passed, dropped, flipped, split between two
    conflicting versions, or doubled; as a new primary it may also forge the re-issued set."""

    def __init__(self, *args: Any, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rng = random.Random(seed)

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        out: list[Action] = []
        others = self._others()
        for a in actions:
            if not isinstance(a, (Broadcast, Send)):
                out.append(a)
                continue
            msg = a.msg
            roll = self.rng.random()
            if isinstance(msg, (PrePrepare, Prepare, Commit)):
                if roll < 0.15:
                    continue
                if roll < 0.35:
                    out.append(replace(a, msg=self._resign(_flip(msg))))
                    continue
                if roll < 0.65:
                    flipped = self._resign(_flip(msg))
                    for i in others:
                        out.append(Send(i, flipped if self.rng.random() < 0.5 else msg))
                    continue
                if roll < 0.75:
                    out.append(a)
                    out.append(replace(a, msg=self._resign(_flip(msg))))
                    continue
            elif isinstance(msg, NewView) and msg.pre_prepares and roll < 0.5:
                forged = tuple(
                    self._resign(replace(p, faulty=not p.faulty)) for p in msg.pre_prepares
                )
                out.append(replace(a, msg=self._resign(replace(msg, pre_prepares=forged))))
                continue
            elif roll < 0.1:
                continue
            out.append(a)
        return out


class DoubleVoter(_Byzantine):
    """Split-brain colluder: shows the even-indexed members a world where every proposal is
    "faulty" and the odd-indexed ones a world where it is "not faulty" (pre-prepares when
    primary, prepares and commits always, each world self-consistent, so keeping the first
    message per slot does not help). All such members use the same split, so ``f + 1`` of them
    can drive correct members whose own verdicts differ into conflicting decisions; ``f``
    cannot."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._voted: set[tuple[int, int]] = set()

    def _world(
        self, msg: PrePrepare | Prepare | Commit, faulty: bool
    ) -> PrePrepare | Prepare | Commit:
        if isinstance(msg, PrePrepare):
            return self._resign(replace(msg, faulty=faulty))
        if isinstance(msg, Prepare):
            return self._resign(replace(msg, faulty=faulty))
        return self._resign(replace(msg, faulty=faulty))

    def _split(self, msg: PrePrepare | Prepare | Commit) -> list[Action]:
        even, odd = self._world(msg, True), self._world(msg, False)
        return [Send(i, even if i % 2 == 0 else odd) for i in self._others()]

    def _tamper(self, actions: list[Action], received: Message | None = None) -> list[Action]:
        out: list[Action] = []
        if isinstance(received, PrePrepare) and (received.view, received.seq) not in self._voted:
            self._voted.add((received.view, received.seq))
            pp = received
            out += self._split(Prepare(*_slot_args(pp), pp.faulty, self.index))
            out += self._split(Commit(*pp.key, pp.faulty, pp.view, self.index))
        for a in actions:
            if isinstance(a, Broadcast) and isinstance(a.msg, PrePrepare):
                pp = a.msg
                out += self._split(pp)
                if (pp.view, pp.seq) not in self._voted:
                    self._voted.add((pp.view, pp.seq))
                    out += self._split(Prepare(*_slot_args(pp), pp.faulty, self.index))
                    out += self._split(Commit(*pp.key, pp.faulty, pp.view, self.index))
            elif isinstance(a, Broadcast) and isinstance(a.msg, (Prepare, Commit)):
                continue
            else:
                out.append(a)
        return out
