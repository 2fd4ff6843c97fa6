"""The block loop: every node takes one chain-driven step; a block is mined when none acted.

Windows and deadlines are counted in blocks, so time passes only by mining. The clients
step as one :class:`~fedchain.sim.driver.fleet.ClientFleet` (one view per block for all of
them, training fanned out to an engine); each aggregator steps on its own. The loop also
restarts crashed aggregators after their scenario's delay, and hands each ended round to a
callback. It stops when the task completes (or is aborted), or reports a stall (a dispute
without quorum, or ``max_blocks`` idle blocks).

Every second of a round is charged to one phase of the shared :class:`PhaseClock`: the
nodes' own phases (train, register, fetch, aggregate, verify, ...), ``dispute``, ``mine``
for idle blocks, and ``drive`` for the rest of the loop (views, bookkeeping, event log).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from adapters.chain import Chain
from adapters.contract import Phase, TaskContract
from aggregators.behaviours import Behaviour
from aggregators.node import AggregatorNode, NodeCrashed
from fedchain.sim.driver.disputes import DisputeDriver
from fedchain.sim.driver.events import EventLog
from fedchain.sim.driver.faults import FaultLog
from fedchain.sim.driver.fleet import ClientFleet
from protocol.metrics import PhaseClock, Progress


class BlockLoop:
    """Drives clients, aggregators and disputes block by block until the task completes."""

    def __init__(
        self,
        chain: Chain,
        task: TaskContract,
        clients: ClientFleet,
        aggregators: list[AggregatorNode],
        behaviours: Callable[[int], Behaviour],
        restart: Callable[[int, Behaviour], AggregatorNode],
        disputes: DisputeDriver,
        faults: FaultLog,
        events: EventLog,
        progress: Progress,
        clock: PhaseClock,
        *,
        rounds: int,
        max_blocks: int,
        extra: Sequence[Callable[[], bool]] = (),
    ) -> None:
        self.chain = chain
        self.task = task
        self.clients = clients
        self.aggregators = aggregators
        self.behaviours = behaviours
        self.restart = restart
        self.disputes = disputes
        self.faults = faults
        self.events = events
        self.progress = progress
        self.clock = clock
        self.rounds = rounds
        self.max_blocks = max_blocks
        #: further chain-driven steps per block (private tasks: the clients' records, the
        #: HE key holder); each returns True if it acted
        self.extra = list(extra)
        self.down: dict[int, int] = {}  # aggregator index -> block it crashed at
        self.stalled: str | None = None
        #: the round the task was aborted in (``abortTask``; 0: before start), if it was
        self.aborted: int | None = None
        #: stop (cleanly, not a stall) once this round ends: the privacy budget is spent
        self.stop_after: int | None = None

    def run(self, on_round_end: Callable[[int, float, bool], None]) -> None:
        """Step until the task completes or stalls; ``on_round_end(round, wall, finalized)``."""
        idle_blocks = 0
        round_started = time.perf_counter()
        round_ = self.task.current_round()
        self.events.emit("phase", round=round_, attempt=0, phase="collecting")
        completed = self.task.task_completed()
        while not completed and self.stalled is None:
            with self.clock.phase(round_, "drive"):
                acted = self.clients.step()
                for step in self.extra:
                    acted |= step()
                acted |= self._step_aggregators(round_)
                with self.clock.phase(round_, "dispute"):
                    acted |= self.disputes.step(round_)
                    acted |= self.disputes.slash_refuted_certificates()
                if self.disputes.stalled is not None:
                    self.stalled = self.disputes.stalled
                acted |= self._restart_crashed()
                if not acted:
                    with self.clock.phase(round_, "mine"):
                        self.chain.mine(1)
                    idle_blocks += 1
                    if idle_blocks > self.max_blocks:
                        self.stalled = f"no progress after {self.max_blocks} idle blocks"
                else:
                    idle_blocks = 0
                current = self.task.current_round()
                completed = self.task.task_completed()
            if completed and self.task.phase(round_) != Phase.FINALIZED:
                # ended by abortTask (no progress for abortTimeout blocks, or never started)
                self.aborted = round_
                self.progress.line(f"task aborted in round {round_}")
                self.events.emit("task_aborted", round=round_)
                if round_ >= 1:
                    on_round_end(round_, time.perf_counter() - round_started, False)
                return
            if current != round_ or completed:
                on_round_end(round_, time.perf_counter() - round_started, True)
                if self.stop_after is not None and round_ >= self.stop_after and not completed:
                    return
                round_, round_started = current, time.perf_counter()
                if not completed:
                    with self.clock.phase(round_, "drive"):
                        self.events.emit("phase", round=round_, attempt=0, phase="collecting")
        if self.stalled is not None:
            self.progress.line(f"STALLED in round {round_}: {self.stalled}")
            self.events.emit("stalled", round=round_, reason=self.stalled)
            on_round_end(round_, time.perf_counter() - round_started, False)

    def _step_aggregators(self, round_: int) -> bool:
        acted = False
        for index, agg in enumerate(self.aggregators):
            if index in self.down:
                continue
            self.faults.note_chosen(round_)  # the contract's choice, read independently
            try:
                events = agg.step()
            except NodeCrashed as exc:
                block = self.chain.block_number()
                self.down[index] = block
                self.faults.crashed(agg.name, round_, block, str(exc))
                self.progress.line(f"  {exc} (block {block})")
                acted = True
                continue
            for ev in events:
                self.faults.absorb(agg, self.behaviours(index), ev)
            acted |= bool(events)
        return acted

    def _restart_crashed(self) -> bool:
        acted = False
        block = self.chain.block_number()
        for index, crashed_at in list(self.down.items()):
            behaviour = self.behaviours(index)
            after = behaviour.restart_after_blocks
            if after is not None and block >= crashed_at + after:
                # A fresh process: no memory but its key; it resumes from chain + storage.
                self.aggregators[index] = self.restart(index, replace(behaviour, crash_at=None))
                del self.down[index]
                self.faults.restarted(f"aggregator-{index}", block)
                self.progress.line(f"  aggregator-{index} restarted (block {block})")
                acted = True
        return acted
