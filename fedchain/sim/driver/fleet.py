"""The in-process clients as one fleet: one shared view per block, training fanned out.

Stepping every client node on every block costs one round of view calls per client per
block, and a collecting round lasts at least one block per registration: quadratic in the
number of clients. :class:`ClientFleet` reads the round and its phase once per block for
all of them, reads the registered updates once when a round starts collecting, and while
the round collects it:

1. fetches the global state once (verified against its on-chain digest),
2. hands the round's trainings to the :mod:`~fedchain.sim.driver.engine` in waves, and
3. lets each :class:`~clients.node.ClientNode` publish its own result and sign its update
   record (:meth:`~clients.node.ClientNode.finish_round` with a relay), in client order,
4. and relays the signed records in batches of ``batch`` (``submitUpdates``, sent by the
   ``relayer`` account): the contract checks every signature, so the relayer cannot forge
   or alter an update, and a client it left out could still register alone.

Without a relayer each node sends its own ``submitUpdate`` (the testnet's clients do: each
process holds only its own key and no relay channel exists between them). A batch the
contract refuses as a whole (it never should: every record comes from an honest node of
this process) falls back to each client submitting alone.

Training is a pure function of (global state, client data, seed), so this is exactly what
each node's own :meth:`~clients.node.ClientNode.step` would do, as the testnet's
one-process-per-node clients still do. A client whose ``ready`` hook says "not yet" (an
omniscient attacker) is trained in a later block, once it is ready.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from eth_account.signers.local import LocalAccount

from adapters.contract import CollectionClosed, Phase, RoundNotOpen, SlotsNotOpen, TaskContract
from adapters.records import SignedUpdate, batch_gas_limit
from adapters.storage import ContentStore
from clients.node import ClientEvent, ClientNode, fetch_global_params
from fedchain.sim.driver.engine import ModelSpec, TrainingEngine, TrainJob
from protocol.errors import ContractRevert
from protocol.manifest import TaskManifest
from protocol.metrics import PhaseClock, Progress

#: Trainings handed to the engine at once: bounds the results held in memory, and the
#: work wasted if the round closes early (``--min-updates`` below the number of clients).
DEFAULT_WAVE = 250
#: Signed records per ``submitUpdates`` transaction (about 8k gas per update at 100).
DEFAULT_BATCH = 100


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
        relayer: LocalAccount | None = None,
        batch: int = DEFAULT_BATCH,
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
        self.relayer = relayer
        self.batch = max(1, int(batch))
        self._indexed = False
        self._position = {id(node): i for i, node in enumerate(self.clients)}
        self._round = 0
        self._pending: list[ClientNode] = []
        #: signed records relayed when no slot was open for them yet (retried each block)
        self._waiting: list[tuple[ClientNode, ClientEvent, SignedUpdate]] = []
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
        acted = False
        if self._waiting:
            # signed records the round had no open slot for yet (minCollectionBlocks): relay
            # them again, once per block, without training again
            waiting, self._waiting = self._waiting, []
            if not self._relay(round_, waiting):
                self._done.add(round_)
                return True
            # acted only if some got in: a refused batch may mine nothing (then time passes)
            acted = len(self._waiting) < len(waiting)
        held = {id(node) for node, _, _ in self._waiting}
        ready = [
            n for n in self._pending if id(n) not in held and (n.ready is None or n.ready(round_))
        ]
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
        self._waiting = []
        registered = {u.client for u in self.task.updates(round_)}
        self._pending = []
        for node in self.clients:
            if node.address in registered or not node.takes_part(round_):
                node.mark_submitted(round_)  # registered, or sits out (privacy budget, sampling)
            else:
                self._pending.append(node)
        if self.relayer is not None and not self._indexed:
            # one read of the registrations for all clients (each node would read its own)
            for node in self.clients:
                index = self.task.client_index(node.address)
                if index is not None:
                    node.use_client_index(index)
            self._indexed = True

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
        signed: list[tuple[ClientNode, ClientEvent, SignedUpdate]] = []
        for node, result in zip(wave, results, strict=True):
            records: list[SignedUpdate] = []
            relay = records.append if self.relayer is not None else None
            try:
                event = node.finish_round(round_, global_params, result, relay=relay)
            except (CollectionClosed, RoundNotOpen):
                return False
            except ContractRevert as exc:
                # as ClientNode.step does: the refusal is reported, the chain re-read later
                node.mark_submitted(round_)
                event = ClientEvent(round_, "submitUpdate-refused", {"error": exc.error_name})
            if records:
                signed.append((node, event, records[0]))
            else:
                self._settle(node, event)
        for start in range(0, len(signed), self.batch):
            if not self._relay(round_, signed[start : start + self.batch]):
                for node, _, _ in signed[start + self.batch :]:
                    node.mark_submitted(round_)
                    self._settle(node, _refused(round_, "CollectionClosed"))
                return False
        return True

    def _relay(
        self, round_: int, chunk: list[tuple[ClientNode, ClientEvent, SignedUpdate]]
    ) -> bool:
        """Relay one batch of signed records; False once collection is closed."""
        assert self.relayer is not None
        records = [rec for _, _, rec in chunk]
        with self.clock.phase(round_, "register"):
            try:
                # py-evm would run the batch twice (estimate, then send): a bound instead
                gas = batch_gas_limit(len(records)) if self.task.chain.is_embedded else None
                receipt = self.task.submit_updates(self.relayer, round_, records, gas=gas)
            except (CollectionClosed, RoundNotOpen):
                receipt = None
            except SlotsNotOpen:
                self._waiting += chunk  # every slot open so far is taken: a later block
                return True
            except ContractRevert:
                return self._alone(round_, chunk)
            registered = self.task.accepted_updates(receipt) if receipt else []
            accepted = {u.client: u.index for u in registered}
            open_ = receipt is not None and (
                len(accepted) == len(chunk) or self.task.phase(round_) == Phase.COLLECTING
            )
        # where each update sits in the round's list, and the transaction that put it there
        # (its first index and size): what the dashboard shows of batched registration
        batch = {"batch": registered[0].index, "batch_size": len(registered)} if registered else {}
        slots = self.task.config().min_collection_blocks
        for node, event, rec in chunk:
            if node.address not in accepted and open_ and slots:
                self._waiting.append((node, event, rec))  # no slot open for it yet
                continue
            node.mark_submitted(round_)
            if node.address in accepted:
                detail = {**event.detail, "relayed": True, "index": accepted[node.address], **batch}
                self._settle(node, ClientEvent(round_, "submitUpdate", detail))
            else:
                reason = "UpdateAlreadySubmitted" if open_ else "CollectionClosed"
                self._settle(node, _refused(round_, reason))
        return open_

    def _alone(
        self, round_: int, chunk: list[tuple[ClientNode, ClientEvent, SignedUpdate]]
    ) -> bool:
        """A refused batch: every client of it submits alone (the censorship-free path)."""
        for node, event, rec in chunk:
            node.mark_submitted(round_)
            try:
                self.task.submit_update(
                    node.account, round_, rec.digest, rec.num_samples, rec.chunk_root
                )
            except (CollectionClosed, RoundNotOpen):
                self._settle(node, _refused(round_, "CollectionClosed"))
                return False
            except ContractRevert as exc:
                self._settle(node, _refused(round_, exc.error_name))
                continue
            self._settle(node, ClientEvent(round_, "submitUpdate", event.detail))
        return True

    def _settle(self, node: ClientNode, event: ClientEvent) -> None:
        """``node`` is done for the round: report what happened."""
        self._pending.remove(node)
        if self.on_registered is not None:
            self.on_registered(node, event)


def _refused(round_: int, error: str) -> ClientEvent:
    return ClientEvent(round_, "submitUpdate-refused", {"error": error})
