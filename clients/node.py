"""The FL client node: driven by chain state, idempotent and restartable.

Each :meth:`ClientNode.step` reads the contract, and if the current round is collecting and
this client has not registered an update for it yet, it fetches the global state by its
on-chain digest, trains locally, quantises the delta, publishes the payload to content
storage and calls ``submitUpdate``. Whether it already submitted is read from the chain
(the round's bitmap of submitters), so a restarted client never submits twice.

Instead of sending ``submitUpdate`` itself, a client can hand a relayer its signed update
record (:meth:`ClientNode.finish_round` with ``relay``): the in-process fleet batches them
into ``submitUpdates``. The client's own transaction stays possible at any time, so no
relayer can censor it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
from eth_account.signers.local import LocalAccount
from torch import nn

from adapters.contract import Phase, RoundNotOpen, SamplesOutOfRange, SlotsNotOpen, TaskContract
from adapters.records import NO_CHUNK_ROOT, SignedUpdate, sign_update
from adapters.storage import ContentStore, get_by_digest
from clients.data import Dataset
from clients.release import Release, client_release
from clients.training import TrainConfig, TrainResult, derive_seed, train_local
from privacy.local import noise_generator
from privacy.spec import PrivacySpec
from protocol.cid import content_digest
from protocol.errors import CodecError, ConfigError, ContractRevert
from protocol.fixedpoint import dequantise, quantise
from protocol.manifest import TaskManifest
from protocol.merkle import vector_root
from protocol.metrics import PhaseClock
from protocol.payloads import decode_global_state, decode_update_bit, encode_update

#: A client behaviour rewrites the float delta (flat) before quantisation; honest is identity.
DeltaHook = Callable[[int, np.ndarray], np.ndarray]
#: A payload hook encodes (round, quantised delta) itself: malformed-payload attacks.
PayloadHook = Callable[[int, np.ndarray], bytes]
#: A publish hook stores the payload somewhere else than this client's own node (e.g. only at
#: some aggregators, or nowhere): availability attacks.
PublishHook = Callable[[int, bytes], object]
#: Where a client hands its signed update record instead of sending ``submitUpdate``.
RelayHook = Callable[[SignedUpdate], None]


class PrivatePayloads(Protocol):
    """A client's part in secure aggregation or HE (``fedchain.private_view``): whether it
    takes part in a round (secure aggregation: its mask key is in force), its masked or
    encrypted payload of an integer release, and the records it publishes itself (keys,
    reveals) when stepped alone."""

    def takes_part(self, round_: int) -> bool: ...

    def payload(self, client: ClientNode, round_: int, vector: np.ndarray) -> bytes: ...

    def step(self, round_: int) -> list[ClientEvent]: ...


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
        offline: Callable[[int], bool] | None = None,
        private: PrivatePayloads | None = None,
        weight: Callable[[int, int], int] | None = None,
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
        #: rounds in which this client is offline (registers nothing: a dropout)
        self.offline = offline
        #: (round, real numSamples) -> the numSamples registered (a weight-inflation attack)
        self.weight = weight
        self._submitted: set[int] = set()
        #: a training whose update found no open slot yet (``minCollectionBlocks``): kept,
        #: so that the retry in a later block does not train again
        self._trained: dict[int, tuple[Mapping[str, np.ndarray], TrainResult]] = {}
        self._client_index: int | None = None
        #: the task's privacy settings, read from its manifest (bound on-chain)
        self.privacy = PrivacySpec.from_manifest(manifest.privacy)
        self._accountant = self.privacy.accountant() if self.privacy.is_dp else None
        self._clip_norms: dict[int, float] = {}
        #: secure aggregation / HE: builds the masked or encrypted payload
        self.private: PrivatePayloads | None = private

    def privacy_allows(self, round_: int) -> bool:
        """False if releasing an update in ``round_`` would overspend the task's target ε
        (this client may have taken part in every round so far: the worst case)."""
        spec, acc = self.privacy, self._accountant
        if acc is None or spec.target_epsilon is None:
            return True
        return acc.epsilon(round_) <= spec.target_epsilon

    def sampled(self, round_: int) -> bool:
        """Whether this client takes part in ``round_`` (its private coin, rate from the task)."""
        if self.privacy.sample_rate >= 1:
            return True
        coin = noise_generator(self._secret(), self.task.address, round_, "client-sampling")
        return bool(coin.random() < self.privacy.sample_rate)

    def takes_part(self, round_: int) -> bool:
        """Whether this client releases an update in ``round_``: within its privacy budget,
        sampled, and (secure aggregation) a peer of the round (always, without privacy)."""
        return (
            (self.offline is None or not self.offline(round_))
            and self.privacy_allows(round_)
            and self.sampled(round_)
            and (self.private is None or self.private.takes_part(round_))
        )

    def _secret(self) -> bytes:
        return bytes(self.account.key)

    def already_submitted(self, round_: int) -> bool:
        """True if the chain holds an update of ours for ``round_`` (restart-safe), or the
        round is no longer the current one."""
        if round_ in self._submitted:
            return True
        try:
            submitted = self.task.has_submitted(round_, self.address)
        except RoundNotOpen:
            submitted = True  # the round moved on: nothing left to do for it
        if submitted:
            self._submitted.add(round_)
        return submitted

    def use_client_index(self, index: int) -> None:
        """Record this client's registration index, read by whoever drives many clients."""
        self._client_index = index

    def client_index(self) -> int:
        """This client's registration index on the task (read once)."""
        if self._client_index is None:
            index = self.task.client_index(self.address)
            if index is None:
                raise ConfigError(f"client {self.name} ({self.address}) is not registered")
            self._client_index = index
        return self._client_index

    def signed_update(
        self, round_: int, digest: bytes, num_samples: int, chunk_root: bytes = NO_CHUNK_ROOT
    ) -> SignedUpdate:
        """This client's signed update record for ``round_`` (what a relayer submits)."""
        return sign_update(
            self.account,
            self.task.domain_separator,
            self.client_index(),
            round_,
            digest,
            num_samples,
            chunk_root,
        )

    def chunk_root(self, round_: int, payload: bytes) -> bytes:
        """U_i of ``payload``: the chunk root (:func:`protocol.merkle.vector_root`) of the
        quantised delta it carries, decoded exactly as honest aggregators decode it (they
        exclude an update whose registered U_i differs). ``NO_CHUNK_ROOT`` for a hidden
        update (secure aggregation / HE rounds keep PBFT) or a payload that is no valid
        update (aggregators exclude it anyway)."""
        if self.privacy.hides_updates:
            return NO_CHUNK_ROOT
        try:
            row, _ = decode_update_bit(
                self.manifest.layout,
                self.manifest.numeric,
                round_,
                payload,
                self.privacy.adaptive_clip,
            )
        except CodecError:
            return NO_CHUNK_ROOT
        return vector_root(row)

    def step(self) -> list[ClientEvent]:
        """Do whatever the chain state asks of this client now; return what was done.

        An idle client costs one view call: the current round, which it has already
        served (rounds only move forward, and a round it served never needs it again).
        """
        task = self.task
        round_ = task.current_round()
        done = self.private.step(round_) if self.private is not None else []
        if round_ == 0 or round_ in self._submitted:
            return done
        if task.phase(round_) != Phase.COLLECTING or self.already_submitted(round_):
            return done
        if self.ready is not None and not self.ready(round_):
            return done  # e.g. an omniscient attacker waiting to see the honest updates
        if not self.takes_part(round_):
            self._submitted.add(round_)  # this client sits the round out
            return [*done, ClientEvent(round_, "skipped", {"reason": self._skip_reason(round_)})]
        try:
            return [*done, self.submit_round(round_)]
        except SlotsNotOpen:
            return done  # every slot open so far is taken: try again in a later block
        except ContractRevert as exc:
            # e.g. collection closed while this client trained: the chain says what is left
            # to do, so the refusal is reported and the client re-reads it next step.
            self._submitted.add(round_)
            return [
                *done,
                ClientEvent(round_, "submitUpdate-refused", {"error": exc.error_name}),
            ]

    def _skip_reason(self, round_: int) -> str:
        if self.offline is not None and self.offline(round_):
            return "offline"
        if not self.privacy_allows(round_):
            return "privacy budget exhausted"
        if not self.sampled(round_):
            return "not sampled"
        return "no mask key in force (it posts one for the next round)"

    def submit_round(self, round_: int) -> ClientEvent:
        """Train on the current global state and register the update for ``round_``.

        The three steps a driver may also run apart (see :meth:`finish_round`): fetch the
        global state, train (a pure function of global state, data and seed), then publish
        and register.
        """
        trained = self._trained.get(round_)
        if trained is None:
            with self.clock.phase(round_, "fetch"):
                global_params = fetch_global_params(self.task, self.store, self.manifest)
            with self.clock.phase(round_, "train"):
                result = train_local(
                    self.model, global_params, self.data, self.round_config(round_)
                )
            trained = self._trained[round_] = (global_params, result)
        event = self.finish_round(round_, *trained)
        self._trained.pop(round_, None)
        return event

    def round_config(self, round_: int) -> TrainConfig:
        """This client's training settings for ``round_``: the task's, with its own seed."""
        return replace(
            self.train_config, seed=derive_seed(self.train_config.seed, self.index, round_)
        )

    def finish_round(
        self,
        round_: int,
        global_params: Mapping[str, np.ndarray],
        result: TrainResult,
        *,
        relay: RelayHook | None = None,
    ) -> ClientEvent:
        """Publish and register the update of a finished training for ``round_``.

        ``result`` must be ``train_local(model, global_params, self.data,
        self.round_config(round_))``, computed here or by any engine: the delta, this
        client's hooks, quantisation, encoding, upload and ``submitUpdate`` all happen here,
        so the bytes are the same wherever the training ran. With ``relay``, the signed
        update record goes there instead of a ``submitUpdate`` transaction (action
        ``signedUpdate``; the relayer reports whether it was registered).
        """
        layout = self.manifest.layout
        delta = layout.flatten(result.params).astype(np.float64) - layout.flatten(
            global_params
        ).astype(np.float64)
        if self.delta_hook is not None:
            delta = np.asarray(self.delta_hook(round_, delta), dtype=np.float64)
        if self.payload_hook is not None:
            payload = self.payload_hook(round_, self._hook_vector(round_, delta))
        else:
            payload = self.encode_payload(round_, self.release(round_, delta))
        with self.clock.phase(round_, "upload"):
            if self.publish is not None:
                self.publish(round_, payload)
            else:
                self.store.put(payload)
        digest = content_digest(payload)
        chunk_root = self.chunk_root(round_, payload)
        num_samples = result.num_samples
        if self.weight is not None:
            num_samples = self.weight(round_, num_samples)
        # public forever: bucketed or hidden when the task asks (sum modes ignore it)
        num_samples = self.privacy.registered_samples(num_samples)
        detail = {"digest": digest.hex(), "num_samples": num_samples, "loss": result.mean_loss}
        if relay is not None:
            with self.clock.phase(round_, "register"):
                relay(self.signed_update(round_, digest, num_samples, chunk_root))
            return ClientEvent(round_, "signedUpdate", detail)
        with self.clock.phase(round_, "register"):
            try:
                self.task.submit_update(self.account, round_, digest, num_samples, chunk_root)
            except SamplesOutOfRange as exc:  # more than the task's maxSamples: refused
                self._submitted.add(round_)
                return ClientEvent(round_, "submitUpdate-refused", {"error": exc.error_name})
        self._submitted.add(round_)
        return ClientEvent(round_, "submitUpdate", detail)

    def release(self, round_: int, delta: np.ndarray) -> Release:
        """This client's integer release of ``delta`` under the task's privacy mode
        (:mod:`clients.release`), with noise and clip bit drawn from its own key."""
        spec, secret, task = self.privacy, self._secret(), self.task.address
        purpose = "ddp-noise" if spec.distributed else "ldp-noise"
        return client_release(
            spec,
            self.manifest.numeric,
            delta,
            self.round_clip_norm(round_),
            noise_generator(secret, task, round_, purpose),
            noise_generator(secret, task, round_, "clip-bit"),
        )

    def _hook_vector(self, round_: int, delta: np.ndarray) -> np.ndarray:
        """What a payload hook (malformed-payload attack) rewrites: the plaintext release,
        or the bare fixed-point delta when the honest payload would be masked/encrypted."""
        if self.privacy.hides_updates:
            fmt = self.manifest.numeric
            return quantise(np.nan_to_num(delta, nan=0.0), fmt.frac_bits, fmt.value_bound)
        return self.release(round_, delta).vector

    def encode_payload(self, round_: int, release: Release) -> bytes:
        """The round payload of ``release``: plaintext (with the clip bit under adaptive
        clipping), masked (secure aggregation) or encrypted (HE)."""
        if not self.privacy.hides_updates:
            return encode_update(self.manifest.layout, round_, release.vector, release.clip_bit)
        if self.private is None:
            raise ConfigError(f"privacy {self.privacy.mode!r}: this client has no private context")
        return self.private.payload(self, round_, release.vector)

    def round_clip_norm(self, round_: int) -> float:
        """The clip norm of ``round_``: the task's, or (adaptive clipping) the one the
        current global state publishes."""
        if not self.privacy.adaptive_clip:
            return self.privacy.clip_norm
        if round_ not in self._clip_norms:
            digest = self.task.global_model_digest()
            state = decode_global_state(self.manifest.layout, get_by_digest(self.store, digest))
            if state.clip_norm is None:
                raise ConfigError("adaptive clipping: the global state carries no clip norm")
            self._clip_norms = {round_: state.clip_norm}
        return self._clip_norms[round_]

    def mark_submitted(self, round_: int) -> None:
        """Record that the chain already holds this client's update for ``round_``."""
        self._submitted.add(round_)


def fetch_global_params(
    task: TaskContract, store: ContentStore, manifest: TaskManifest
) -> dict[str, np.ndarray]:
    """The current global model as float32 tensors, fetched by its on-chain digest."""
    layout, fmt = manifest.layout, manifest.numeric
    state = decode_global_state(layout, get_by_digest(store, task.global_model_digest()))
    global_flat = dequantise(state.params, fmt.frac_bits)
    return {k: v.astype(np.float32) for k, v in layout.unflatten(global_flat).items()}
