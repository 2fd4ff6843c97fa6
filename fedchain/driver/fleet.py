"""The in-process clients as one fleet: one shared view per block, training fanned out.

Stepping every client node on every block costs one round of view calls per client per
block, and a collecting round lasts at least one block per registration: quadratic in the
number of clients. :class:`ClientFleet` reads the round and its phase once per block for
all of them, reads the registered updates once when a round starts collecting, and while
the round collects it:

1. fetches the global state once (verified against its on-chain digest),
2. hands the round's trainings to the :mod:`~fedchain.driver.engine` in waves, and
3. lets each :class:`~clients.node.ClientNode` publish and register its own result
   (:meth:`~clients.node.ClientNode.finish_round`), in client order.

Training is a pure function of (global state, client data, seed), so this is exactly what
each node's own :meth:`~clients.node.ClientNode.step` would do, as the testnet's
one-process-per-node clients still do. A client whose ``ready`` hook says "not yet" (an
omniscient attacker) is trained in a later block, once it is ready.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from adapters.contract import CollectionClosed, Phase, RoundNotOpen, TaskContract
from adapters.storage import ContentStore
from clients.node import ClientEvent, ClientNode, fetch_global_params
from fedchain.driver.engine import ModelSpec, TrainingEngine, TrainJob
from protocol.errors import ContractRevert
from protocol.manifest import TaskManifest
from protocol.metrics import PhaseClock, Progress

#: Trainings handed to the engine at once: bounds the results held in memory, and the
#: work wasted if the round closes early (``--min-updates`` below the number of clients).
DEFAULT_WAVE = 250


class ClientFleet:
    """Steps every in-process client node from one view of the chain per block."""

    def __init__(
        self,
        clients: Sequence[ClientNode],
        task: TaskContract,
        store: ContentStore,
        manifest: TaskManifest,
        engine: TrainingEngine,
        model: ModelSpec,
        clock: PhaseClock,
        progress: Progress,
        *,
        on_registered: Callable[[ClientNode, ClientEvent], None] | None = None,
        wave: int = DEFAULT_WAVE,
    ) -> None:
        self.clients = list(clients)
        self.task = task
        self.store = store
        self.manifest = manifest
        self.engine = engine
        self.clock = clock
        self.progress = progress
        self.on_registered = on_registered
        self.wave = max(1, int(wave))
        self._position = {id(node): i for i, node in enumerate(self.clients)}
        self._round = 0
        self._pending: list[ClientNode] = []
        self._done: set[int] = set()
        self._global: dict[str, np.ndarray] | None = None
        engine.bind(model, [node.data for node in self.clients])

    def step(self) -> bool:
        """Do what the chain asks of the clients now; True if any client acted."""
        task = self.task
        round_ = task.current_round()
        if round_ == 0 or round_ in self._done:
            return False
        if task.phase(round_) != Phase.COLLECTING:
            return False
        if round_ != self._round:
            self._open(round_)
        ready = [n for n in self._pending if n.ready is None or n.ready(round_)]
        acted = False
        for start in range(0, len(ready), self.wave):
            if start and task.phase(round_) != Phase.COLLECTING:
                break
            wave = ready[start : start + self.wave]
            if not self._run_wave(round_, wave):
                self._done.add(round_)  # collection closed under us: nobody else gets in
                break
            acted = True
        if not self._pending:
            self._done.add(round_)
            self._global = None
        return acted

    def _open(self, round_: int) -> None:
        """A round starts collecting: who still has to register (one read for all)."""
        self._round = round_
        self._global = None
        registered = {u.client for u in self.task.updates(round_)}
        self._pending = []
        for node in self.clients:
            if node.address in registered or not node.takes_part(round_):
                node.mark_submitted(round_)  # registered, or sits out (privacy budget, sampling)
            else:
                self._pending.append(node)

    def _run_wave(self, round_: int, wave: list[ClientNode]) -> bool:
        """Train ``wave`` on the engine, then register in order; False if collection closed."""
        if self._global is None:
            with self.clock.phase(round_, "fetch"):
                self._global = fetch_global_params(self.task, self.store, self.manifest)
        global_params = self._global
        self.progress.status(f"round {round_}: training {len(wave)} clients ({self.engine.name})")
        jobs = [TrainJob(self._position[id(n)], n.round_config(round_)) for n in wave]
        with self.clock.phase(round_, "train"):
            results = self.engine.train(global_params, jobs)
        for node, result in zip(wave, results, strict=True):
            try:
                event = node.finish_round(round_, global_params, result)
            except (CollectionClosed, RoundNotOpen):
                return False
            except ContractRevert as exc:
                # as ClientNode.step does: the refusal is reported, the chain re-read later
                node.mark_submitted(round_)
                event = ClientEvent(round_, "submitUpdate-refused", {"error": exc.error_name})
            self._pending.remove(node)
            if self.on_registered is not None:
                self.on_registered(node, event)
        return True
