"""The published material of secure-aggregation and HE rounds, and the clients' part in them.

:class:`SecAggView` reads what every party of a secure-aggregation task derives from
published material, once per round (shared by every in-process client): the registered
encryption keys (``ENC_KEY`` records), the round's peers ``P_r`` (the next keys of the
updates included in round ``r − 1`` and the key records posted during it,
:func:`privacy.secagg_round.peers_from_payloads`), and once the included set is fixed the
included peers' dealt self-mask shares.

:class:`SecAggClient` is one client's duties, each a pure function of that view and the
client's own secrets (:class:`privacy.client_keys.ClientSecrets`, all derived from its
account key, so a restarted process redoes exactly the same thing):

* register its encryption key once (an ``ENC_KEY`` record);
* before round ``r`` in which it is not a peer (first round, or after it dropped), post a
  key record during round ``r − 1`` (a ``MASK_KEY`` record) and sit round ``r − 1`` out;
* in a round it is a peer of, publish its masked update (:meth:`payload`, the
  :class:`~clients.node.PrivatePayloads` of its node);
* once the round's included set is fixed, reveal its shares (a ``REVEAL`` record).

:class:`HePayloads` encrypts a client's release under the task key holder's public key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from adapters.privacy_records import MASK_KEY, PrivacyRecordsContract

from adapters.contract import TaskContract
from adapters.round_inputs import fetch_included
from adapters.storage import ContentStore
from privacy import he, he_round
from privacy.client_keys import ClientSecrets
from privacy.secagg import DealtShares
from privacy.secagg_round import (
    KeyRecord,
    MaskedUpdate,
    SecAggContext,
    client_key_record,
    client_masked_update,
    client_reveal,
    max_payload_bytes,
    peers_from_payloads,
)
from privacy.spec import PrivacySpec
from protocol.errors import CodecError, SecAggError
from protocol.manifest import TaskManifest

if TYPE_CHECKING:
    from clients.node import ClientNode

__all__ = ["HePayloads", "SecAggClient", "SecAggView"]


@dataclass
class _Round:
    """What is known of one round (peers and, once fixed, the included set)."""

    peers: dict[int, KeyRecord]
    refused: dict[int, str]
    included: dict[int, MaskedUpdate] | None = None


class SecAggView:
    """The published secure-aggregation material of a task, cached per round."""

    def __init__(
        self,
        task: TaskContract,
        records: PrivacyRecordsContract,
        store: ContentStore,
        manifest: TaskManifest,
    ) -> None:
        self.task = task
        self.records = records
        self.store = store
        self.manifest = manifest
        self.spec = PrivacySpec.from_manifest(manifest.privacy)
        self.dim = self.spec.vector_dim(manifest.layout.size)
        self.max_bytes = max_payload_bytes(manifest.layout, self.dim, self.spec.num_clients or 1)
        self._rounds: dict[int, _Round] = {}

    def context(self) -> SecAggContext:
        """The task's context with every encryption key registered so far."""
        return SecAggContext(self.task.address, self.spec.threshold, self.records.enc_keys())

    def peers(self, round_: int) -> dict[int, KeyRecord]:
        """``P_r``: every client whose mask key is in force in ``round_`` (valid records)."""
        return self._round(round_).peers

    def _round(self, round_: int) -> _Round:
        if round_ not in self._rounds:
            ctx = self.context()
            carried: dict[int, bytes] = {}
            if round_ > 1:
                updates, payloads = fetch_included(self.task, self.store, round_ - 1)
                for update, payload in zip(updates, payloads, strict=True):
                    client = self.task.client_index(update.client)
                    if payload is not None and client is not None:
                        carried[client] = payload
            posted = self.records.first_payloads(round_ - 1, MASK_KEY)
            peers, refused = peers_from_payloads(
                round_, carried, posted, ctx, self.dim, self.max_bytes
            )
            self._rounds = {r: v for r, v in self._rounds.items() if r >= round_ - 1}
            self._rounds[round_] = _Round(peers, refused)
        return self._rounds[round_]

    def included(self, round_: int) -> dict[int, MaskedUpdate]:
        """The round's included peers' masked updates (the included set must be fixed)."""
        state = self._round(round_)
        if state.included is None:
            ctx = self.context()
            updates, payloads = fetch_included(self.task, self.store, round_)
            out: dict[int, MaskedUpdate] = {}
            for update, payload in zip(updates, payloads, strict=True):
                client = self.task.client_index(update.client)
                if payload is None or client is None:
                    continue
                try:
                    masked = MaskedUpdate.from_bytes(payload, round_, self.dim, self.max_bytes)
                    masked.check(client, state.peers, ctx)
                except (CodecError, SecAggError):
                    continue  # an invalid payload: its client reveals nothing is asked of it
                out[client] = masked
            state.included = out
        return state.included


class SecAggClient:
    """One client's secure-aggregation duties (see the module docstring)."""

    def __init__(self, view: SecAggView, secrets: ClientSecrets) -> None:
        self.view = view
        self.secrets = secrets

    @property
    def index(self) -> int:
        return self.secrets.index

    def enc_key_due(self) -> bytes | None:
        """The ``ENC_KEY`` payload to publish, or None if this client's key is registered."""
        if self.view.records.enc_keys().get(self.index) == self.secrets.enc_public:
            return None
        return self.secrets.enc_public

    def is_peer(self, round_: int) -> bool:
        """Whether this client's mask key is in force in ``round_``."""
        own = self.view.peers(round_).get(self.index)
        return own is not None and own.bundle == self.secrets.keys(round_).bundle

    def key_record_due(self, round_: int, everyone: int) -> bytes | None:
        """The key record to post during ``round_`` (in force from ``round_ + 1``), if this
        client will not be a peer of the next round otherwise; None if not due. Before the
        task starts (round 0) it waits for ``everyone`` encryption keys, so that its shares
        go to every client."""
        ctx = self.view.context()
        if self.index not in ctx.enc_keys:
            return None
        if round_ == 0 and len(ctx.enc_keys) < everyone:
            return None
        if self.index in self.view.records.first_payloads(round_, MASK_KEY):
            return None  # already posted this round
        return client_key_record(self.secrets, round_ + 1, ctx).to_bytes()

    def payload(self, client: ClientNode, round_: int, vector: np.ndarray) -> bytes:
        """The masked update of ``vector`` for ``round_`` (this client must be a peer)."""
        view = self.view
        return client_masked_update(
            self.secrets, round_, vector, view.peers(round_), view.context()
        ).to_bytes()

    def reveal(self, round_: int) -> bytes:
        """This client's reveal of ``round_`` (the included set must be fixed)."""
        view = self.view
        included = view.included(round_)
        shares: dict[int, DealtShares] = {c: m.self_mask_shares for c, m in included.items()}
        rev = client_reveal(
            self.secrets, round_, included, view.peers(round_), shares, view.context()
        )
        return rev.to_bytes()


class HePayloads:
    """Encrypts a client's release under the task key holder's public key (manifest)."""

    def __init__(self, manifest: TaskManifest) -> None:
        self.spec = PrivacySpec.from_manifest(manifest.privacy)
        self.public_key = he.load_public_key(bytes.fromhex(self.spec.he_public_key or ""))

    def payload(self, client: ClientNode, round_: int, vector: np.ndarray) -> bytes:
        return he_round.encrypt_payload(round_, vector, self.public_key, self.spec.num_clients or 0)
