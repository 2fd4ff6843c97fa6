"""The FL client node: driven by chain state, idempotent and restartable.

Each :meth:`ClientNode.step` reads the contract, and if the current round is collecting and
this client has not registered an update for it yet, it fetches the global state by its
on-chain digest, trains locally, quantises the delta, publishes the payload to content
storage and calls ``submitUpdate``. Whether it already submitted is read from the chain,
so a restarted client never submits twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from eth_account.signers.local import LocalAccount
from torch import nn

from adapters.contract import Phase, TaskContract
from adapters.storage import ContentStore, get_by_digest
from clients.data import Dataset
from clients.training import TrainConfig, derive_seed, train_local
from protocol.cid import content_digest
from protocol.errors import ContractRevert
from protocol.fixedpoint import dequantise, quantise
from protocol.manifest import TaskManifest
from protocol.metrics import PhaseClock
from protocol.payloads import decode_global_state, encode_update

#: A client behaviour rewrites the float delta (flat) before quantisation; honest is identity.
DeltaHook = Callable[[int, np.ndarray], np.ndarray]
#: A payload hook encodes (round, quantised delta) itself: malformed-payload attacks.
PayloadHook = Callable[[int, np.ndarray], bytes]
#: A publish hook stores the payload somewhere else than this client's own node (e.g. only at
#: some aggregators, or nowhere): availability attacks.
PublishHook = Callable[[int, bytes], object]


@dataclass
class ClientEvent:
    """What a client did in one step (for logs and reports)."""

    round: int
    action: str
    detail: dict[str, Any]


class ClientNode:
    """One federated client with its own key, data shard and model."""

    def __init__(
        self,
        name: str,
        account: LocalAccount,
        task: TaskContract,
        store: ContentStore,
        manifest: TaskManifest,
        data: Dataset,
        model: nn.Module,
        train: TrainConfig,
        *,
        index: int = 0,
        clock: PhaseClock | None = None,
        delta_hook: DeltaHook | None = None,
        payload_hook: PayloadHook | None = None,
        ready: Callable[[int], bool] | None = None,
        publish: PublishHook | None = None,
    ) -> None:
        self.name = name
        self.account = account
        self.address: str = account.address
        self.task = task
        self.store = store
        self.manifest = manifest
        self.data = data
        self.model = model
        self.train_config = train
        self.index = index
        self.clock = clock or PhaseClock()
        self.delta_hook = delta_hook
        self.payload_hook = payload_hook
        self.ready = ready
        self.publish = publish
        self._submitted: set[int] = set()

    def already_submitted(self, round_: int) -> bool:
        """True if the chain holds an update of ours for ``round_`` (restart-safe)."""
        if round_ in self._submitted:
            return True
        if any(u.client == self.address for u in self.task.updates(round_)):
            self._submitted.add(round_)
            return True
        return False

    def step(self) -> list[ClientEvent]:
        """Do whatever the chain state asks of this client now; return what was done.

        An idle client costs one view call: the current round, which it has already
        served (rounds only move forward, and a round it served never needs it again).
        """
        task = self.task
        round_ = task.current_round()
        if round_ == 0 or round_ in self._submitted:
            return []
        if task.phase(round_) != Phase.COLLECTING or self.already_submitted(round_):
            return []
        if self.ready is not None and not self.ready(round_):
            return []  # e.g. an omniscient attacker waiting to see the honest updates
        try:
            return [self.submit_round(round_)]
        except ContractRevert as exc:
            # e.g. collection closed while this client trained: the chain says what is left
            # to do, so the refusal is reported and the client re-reads it next step.
            self._submitted.add(round_)
            return [ClientEvent(round_, "submitUpdate-refused", {"error": exc.error_name})]

    def submit_round(self, round_: int) -> ClientEvent:
        """Train on the current global state and register the update for ``round_``."""
        layout, fmt = self.manifest.layout, self.manifest.numeric
        with self.clock.phase(round_, "fetch"):
            global_digest = self.task.global_model_digest()
            state = decode_global_state(layout, get_by_digest(self.store, global_digest))
        global_flat = dequantise(state.params, fmt.frac_bits)
        global_params = {k: v.astype(np.float32) for k, v in layout.unflatten(global_flat).items()}
        cfg = replace(
            self.train_config, seed=derive_seed(self.train_config.seed, self.index, round_)
        )
        with self.clock.phase(round_, "train"):
            result = train_local(self.model, global_params, self.data, cfg)
        delta = layout.flatten(result.params).astype(np.float64) - layout.flatten(
            global_params
        ).astype(np.float64)
        if self.delta_hook is not None:
            delta = np.asarray(self.delta_hook(round_, delta), dtype=np.float64)
        q = quantise(np.nan_to_num(delta, nan=0.0), fmt.frac_bits, fmt.value_bound)
        if self.payload_hook is not None:
            payload = self.payload_hook(round_, q)
        else:
            payload = encode_update(layout, round_, q)
        with self.clock.phase(round_, "upload"):
            if self.publish is not None:
                self.publish(round_, payload)
            else:
                self.store.put(payload)
        digest = content_digest(payload)
        with self.clock.phase(round_, "register"):
            self.task.submit_update(self.account, round_, digest, result.num_samples)
        self._submitted.add(round_)
        return ClientEvent(
            round_,
            "submitUpdate",
            {"digest": digest.hex(), "num_samples": result.num_samples, "loss": result.mean_loss},
        )
