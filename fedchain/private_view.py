"""The published material of secure-aggregation and HE rounds, and the clients' part in them.

Every party of a private task derives the same things from the chain and content storage;
the views here do it once per round (one view serves every in-process node):

* :class:`SecAggView`: the encryption keys in force for a round (``ENC_KEY`` records of
  the rounds before it: final once the round opens, so every node uses the same set), the
  round's peers ``P_r`` (:func:`privacy.secagg_round.peers_from_payloads`: next keys of the
  updates included in round ``r − 1``, key records posted during it), the included peers'
  masked updates, and for aggregators the round's :class:`~aggregators.private.PrivateInputs`
  (with every reveal) and the validity of a payload (what an honest aggregator attests to);
* :class:`HeView`: the key holder's decryption of a round, and payload validity.

:class:`SecAggClient` is one client's duties, each a pure function of the view and the
client's own secrets (:class:`privacy.client_keys.ClientSecrets`, derived from its account
key, so a restarted process redoes exactly the same): register its encryption key; post a
key record during any round before which it is not a peer (it sits that round out); publish
its masked update in a round it is a peer of; reveal its shares once the included set is
fixed. :meth:`SecAggClient.due` lists what to publish now (the in-process driver signs and
relays them in batches); :meth:`SecAggClient.step` publishes them itself (a testnet client
process). :class:`HePayloads` encrypts under the key holder's public key.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from eth_account.signers.local import LocalAccount

from adapters.contract import Phase, RegisteredUpdate, TaskContract
from adapters.privacy_records import ENC_KEY, KINDS, MASK_KEY, REVEAL, PrivacyRecordsContract
from adapters.round_inputs import fetch_included
from adapters.storage import ContentStore, get_by_digest
from aggregators.private import PrivateInputs, graph_of, private_dim
from clients.node import ClientEvent, ClientNode
from privacy import he, he_round
from privacy.client_keys import ClientSecrets
from privacy.reveal_safety import RevealUnsafe
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
    usable_enc_keys,
)
from privacy.spec import PrivacySpec
from protocol.cid import content_digest
from protocol.errors import (
    CodecError,
    ConfigError,
    ContractRevert,
    HEError,
    SecAggError,
    StorageError,
)
from protocol.manifest import TaskManifest
from protocol.payloads import update_max_bytes

__all__ = [
    "HePayloads",
    "HeView",
    "SecAggClient",
    "SecAggView",
    "counted_reveals",
    "private_views",
    "task_records",
]


@dataclass
class _Round:
    """What is known of one round: its context, its peers and, once fixed, the included."""

    ctx: SecAggContext
    peers: dict[int, KeyRecord]
    refused: dict[int, str]
    included: dict[int, MaskedUpdate] | None = None
    onchain: frozenset[int] | None = None


def counted_reveals(attested: Mapping[int, Collection[int]], committee: int) -> frozenset[int]:
    """The record positions attested by at least f + 1 of the ``committee`` members
    (``attested``: member -> positions it holds), f = ⌊(n − 1)/3⌋: at least one correct
    member holds each, so every honest aggregator can fetch it; the others count as no
    reveal, for every aggregator alike."""
    quorum = (committee - 1) // 3 + 1
    votes: dict[int, int] = {}
    for held in attested.values():
        for i in set(held):
            votes[i] = votes.get(i, 0) + 1
    return frozenset(i for i, n in votes.items() if n >= quorum)


class _ChainSeeds(Mapping[int, bytes]):
    """The pinned graph seeds of a task, read from its records contract on demand."""

    def __init__(self, view: SecAggView) -> None:
        self.view = view

    def __getitem__(self, round_: int) -> bytes:
        seed = self.view.graph_seed(round_)
        if seed is None:
            raise KeyError(round_)
        return seed

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self.view._seeds))

    def __len__(self) -> int:
        return len(self.view._seeds)


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
        self.dim = private_dim(manifest, self.spec)
        self.max_bytes = max_payload_bytes(manifest.layout, self.dim, self.spec.num_clients or 1)
        self._rounds: dict[int, _Round] = {}
        self._seeds: dict[int, bytes] = {}
        #: who pays for pinning graph seeds (the in-process relayer; None: the client)
        self.pinner: LocalAccount | None = None
        self._reveal_window: int | None = None
        self._attested: set[tuple[str, int]] = set()
        self._graph = graph_of(self.spec, task.address, _ChainSeeds(self))

    def graph_seed(self, round_: int) -> bytes | None:
        """``round_``'s pinned mask-graph randomness (SecAgg+; None: not pinned yet)."""
        if round_ not in self._seeds:
            seed = self.records.graph_seed(round_)
            if seed is None:
                return None
            self._seeds[round_] = seed
        return self._seeds[round_]

    def graph_ready(self, round_: int) -> bool:
        """Whether ``round_``'s mask graph is known (always, for the full graph)."""
        return not self.spec.secagg_plus or self.graph_seed(round_) is not None

    def pin_graph(self, acct: LocalAccount, round_: int) -> bool:
        """Pin ``round_``'s mask-graph seed if it is due and not pinned (SecAgg+: during the
        round before it, once every graph position is registered); True if it sent one."""
        if self.graph_ready(round_):
            return False
        if self.task.client_count() < (self.spec.num_clients or 0):
            return False  # graph positions still open
        # (after the last round too: the last round's updates carry a next key, dealt along it)
        try:
            self.records.pin_graph_seed(acct, round_)
        except ContractRevert:
            return False  # the round moved on, or someone else pinned it first
        return True

    def context(self, round_: int) -> SecAggContext:
        """The context of ``round_``: encryption keys registered before it opened."""
        return self._round(round_).ctx

    def dealing_context(self, round_: int) -> SecAggContext:
        """Whom a key record posted during ``round_`` deals to: every key registered so far
        (a superset of the round's context, so the record checks in the next round), along
        the next round's mask graph."""
        keys = usable_enc_keys(self.records.enc_keys(round_))
        return SecAggContext(self.task.address, self.spec.threshold, keys, self._graph)

    def peers(self, round_: int) -> dict[int, KeyRecord]:
        """``P_r``: every client whose mask key is in force in ``round_`` (valid records)."""
        return self._round(round_).peers

    def _round(self, round_: int) -> _Round:
        if round_ not in self._rounds:
            keys = usable_enc_keys(self.records.enc_keys(round_ - 1)) if round_ > 0 else {}
            ctx = SecAggContext(self.task.address, self.spec.threshold, keys, self._graph)
            carried: dict[int, bytes] = {}
            if round_ > 1:
                updates, payloads = fetch_included(self.task, self.store, round_ - 1)
                for update, payload in zip(updates, payloads, strict=True):
                    client = self.task.client_index(update.client)
                    if payload is not None and client is not None:
                        carried[client] = payload
            posted = self.records.first_payloads(round_ - 1, MASK_KEY) if round_ > 0 else {}
            peers, refused = peers_from_payloads(
                round_, carried, posted, ctx, self.dim, self.max_bytes
            )
            self._rounds = {r: v for r, v in self._rounds.items() if r >= round_ - 1}
            self._rounds[round_] = _Round(ctx, peers, refused)
        return self._rounds[round_]

    def check(self, round_: int, client: int | None, payload: bytes) -> MaskedUpdate:
        """``payload`` decoded as ``client``'s valid masked update of ``round_`` (raises
        :class:`CodecError` / :class:`SecAggError` otherwise)."""
        state = self._round(round_)
        if client is None:
            raise SecAggError("an update from an unregistered client")
        masked = MaskedUpdate.from_bytes(payload, round_, self.dim, self.max_bytes)
        masked.check(client, state.peers, state.ctx)
        return masked

    def valid(self, round_: int, client: str, payload: bytes) -> bool:
        """Whether an honest aggregator attests to ``payload`` (``client``'s address)."""
        try:
            self.check(round_, self.task.client_index(client), payload)
        except (CodecError, SecAggError):
            return False
        return True

    def settled(self, round_: int) -> bool:
        """Whether ``round_``'s published inputs are final: its reveal window has closed
        (SecAgg+: and the window for attesting reveal payloads after it)."""
        if self.records.revealing(round_):
            return False
        if not self.spec.secagg_plus:
            return True
        start = self.task.round_info(round_).attempt_start
        return self.task.chain.block_number() >= start + 2 * self._window()

    def _window(self) -> int:
        if self._reveal_window is None:
            self._reveal_window = int(
                self.records.chain.call(self.records.contract.functions.revealWindow())
            )
        return self._reveal_window

    def attest_reveals(self, acct: LocalAccount, round_: int) -> int | None:
        """SecAgg+: once the reveal window closed, attest the reveal payloads this node holds
        (one transaction per member and round); the number attested, or None if not due."""
        key = (acct.address, round_)
        if not self.spec.secagg_plus or key in self._attested or self.records.revealing(round_):
            return None
        start = self.task.round_info(round_).attempt_start
        if self.task.chain.block_number() + 1 >= start + 2 * self._window():
            return None  # the window is over
        held = [
            rec.index
            for rec in self.records.records(round_)
            if rec.kind == REVEAL and self.reveal_payload(rec.payload) is not None
        ]
        self._attested.add(key)
        try:
            self.records.attest_reveals(acct, round_, held)
        except ContractRevert:
            return None
        return len(held)

    def counted_reveals(self, round_: int) -> frozenset[int]:
        """SecAgg+: the positions of ``round_``'s records whose reveal payload f + 1
        committee members attested (at least one correct member holds it)."""
        start = self.task.round_info(round_).attempt_start
        attested = self.records.reveal_attestations(round_, start)
        return counted_reveals(attested, self.task.committee_size())

    def included_clients(self, round_: int) -> frozenset[int]:
        """The clients the contract included in ``round_`` (its bitmap: the same set for
        every node, whatever each could fetch; the set must be fixed)."""
        state = self._round(round_)
        if state.onchain is None:
            updates = self.task.updates(round_)
            flags = self.task.included_updates(round_)
            clients = (
                self.task.client_index(u.client) for u, f in zip(updates, flags, strict=True) if f
            )
            state.onchain = frozenset(c for c in clients if c is not None)
        return state.onchain

    def included(self, round_: int) -> dict[int, MaskedUpdate]:
        """The round's included masked updates that this node could fetch and that are
        valid, by client (the set must be fixed); see :meth:`included_clients` for the set."""
        state = self._round(round_)
        if state.included is None:
            updates, payloads = fetch_included(self.task, self.store, round_)
            out: dict[int, MaskedUpdate] = {}
            for update, payload in zip(updates, payloads, strict=True):
                client = self.task.client_index(update.client)
                if payload is None or client is None:
                    continue  # unavailable here: nothing is revealed for it
                try:
                    out[client] = self.check(round_, client, payload)
                except (CodecError, SecAggError):
                    continue  # invalid: the round fails, no reveal for it helps
            state.included = out
        return state.included

    def inputs(self, round_: int, updates: Sequence[RegisteredUpdate]) -> PrivateInputs:
        """What ``execute_round`` needs beyond the payloads (aggregators and verifiers)."""
        state = self._round(round_)
        counted = self.counted_reveals(round_) if self.spec.secagg_plus else None
        reveals = tuple(
            (rec.client, self.reveal_payload(rec.payload))
            for rec in self.records.records(round_)
            if rec.kind == REVEAL and (counted is None or rec.index in counted)
        )
        if counted is not None and any(payload is None for _, payload in reveals):
            # attested by f + 1 members, so a correct one serves it: fetch again later
            raise StorageError(f"round {round_}: an attested reveal payload is not here yet")
        seeds = {r: s for r in (round_, round_ + 1) if (s := self.graph_seed(r)) is not None}
        return PrivateInputs(
            clients=tuple(self._client(u.client) for u in updates),
            task=self.task.address,
            enc_keys=state.ctx.enc_keys,
            peers=state.peers,
            reveals=reveals,
            included=self.included_clients(round_),
            graph_seeds=seeds if self.spec.secagg_plus else {},
        )

    def reveal_payload(self, record: bytes) -> bytes | None:
        """A reveal from its record: under SecAgg+ the record is the digest of the reveal in
        content storage (None when it is missing or not a digest: it counts as no reveal),
        in the full graph the reveal itself."""
        if not self.spec.secagg_plus:
            return record
        if len(record) != 32:
            return None
        try:
            return get_by_digest(self.store, record)
        except StorageError:
            return None

    def _client(self, address: str) -> int:
        index = self.task.client_index(address)
        return -1 if index is None else index


class HeView:
    """The published material of an HE task: the key holder's decryption of each round."""

    def __init__(
        self,
        task: TaskContract,
        records: PrivacyRecordsContract,
        manifest: TaskManifest,
    ) -> None:
        self.task = task
        self.records = records
        self.manifest = manifest
        self.spec = PrivacySpec.from_manifest(manifest.privacy)
        self.public_key = he.load_public_key(bytes.fromhex(self.spec.he_public_key or ""))
        self.dim = private_dim(manifest, self.spec)
        width = (int(self.public_key.nsquare).bit_length() + 7) // 8
        self.max_bytes = update_max_bytes(manifest.layout) + width * (self.dim + 1) + 4096
        self._holder: int | None = None

    def holder_index(self) -> int | None:
        """The key holder's client index (it registered as a client of the task)."""
        if self._holder is None and self.spec.he_key_holder:
            self._holder = self.task.client_index(self.spec.he_key_holder)
        return self._holder

    def valid(self, round_: int, client: str, payload: bytes) -> bool:
        """Whether ``payload`` is a well-formed HE update of ``round_`` under the task key."""
        index = self.task.client_index(client)
        if index is None:
            return False
        try:
            he_round.decode_payload(
                payload,
                round_,
                self.dim,
                self.public_key,
                self.spec.num_clients or 0,
                self.max_bytes,
                task=self.task.address,
                client=index,
            )
        except (CodecError, HEError):
            return False
        return True

    def settled(self, round_: int) -> bool:
        """Whether ``round_``'s published inputs are final (its reveal window has closed)."""
        return not self.records.revealing(round_)

    def inputs(self, round_: int, updates: Sequence[RegisteredUpdate]) -> PrivateInputs:
        """The round's context: the key holder's first decryption record, or under threshold
        decryption each committee member's first decryption-share record."""
        reveals = self.records.first_payloads(round_, REVEAL)
        holder = self.holder_index()
        decryption = reveals.get(holder) if holder is not None else None
        shares: list[tuple[int, bytes]] = []
        for member, address in enumerate(self.spec.he_decryptors, start=1):
            index = self.task.client_index(address)
            if index is not None and index in reveals:
                shares.append((member, reveals[index]))
        clients = tuple(self._client(u.client) for u in updates)
        return PrivateInputs(
            clients=clients,
            task=self.task.address,
            decryption=decryption,
            decryption_shares=tuple(shares),
        )

    def _client(self, address: str) -> int:
        index = self.task.client_index(address)
        return -1 if index is None else index


class SecAggClient:
    """One client's secure-aggregation duties (see the module docstring)."""

    def __init__(self, view: SecAggView, secrets: ClientSecrets, account: LocalAccount) -> None:
        self.view = view
        self.secrets = secrets
        self.account = account

    @property
    def index(self) -> int:
        return self.secrets.index

    def takes_part(self, round_: int) -> bool:
        """Whether this client's mask key is in force in ``round_`` (it is a peer)."""
        own = self.view.peers(round_).get(self.index)
        return own is not None and own.bundle == self.secrets.keys(round_).bundle

    def due(self, round_: int, phase: Phase, everyone: int) -> list[tuple[int, bytes]]:
        """The records (kind, payload) to publish now in ``round_`` (0: before the start).

        ``everyone``: how many clients the task expects; before the start a client deals
        its first key only once that many encryption keys are registered."""
        records = self.view.records
        out: list[tuple[int, bytes]] = []
        if records.enc_keys(round_).get(self.index) != self.secrets.enc_public:
            if self.index not in records.first_payloads(round_, ENC_KEY):
                out.append((ENC_KEY, self.secrets.enc_public))
            return out  # nothing else before the key is registered
        if self._key_record_due(round_, phase, everyone) and self.view.graph_ready(round_ + 1):
            ctx = self.view.dealing_context(round_)
            out.append((MASK_KEY, client_key_record(self.secrets, round_ + 1, ctx).to_bytes()))
        if (
            round_ > 0
            and phase == Phase.AGGREGATING
            and records.revealing(round_)
            and self.index not in records.first_payloads(round_, REVEAL)
        ):
            reveal = self.reveal(round_)
            if reveal is not None:
                if self.view.spec.secagg_plus:  # O(K) records: the digest on-chain
                    self.view.store.put(reveal)
                    reveal = content_digest(reveal)
                out.append((REVEAL, reveal))
        return out

    def _key_record_due(self, round_: int, phase: Phase, everyone: int) -> bool:
        if self.index in self.view.records.first_payloads(round_, MASK_KEY):
            return False  # posted this round already
        if round_ == 0:
            return len(self.view.records.enc_keys(0)) >= everyone
        if phase == Phase.FINALIZED:
            return False  # the next round opens with the task's completion or not at all
        return not self.takes_part(round_)  # sits this round out, in force from the next

    def payload(self, client: ClientNode, round_: int, vector: np.ndarray) -> bytes:
        """The masked update of ``vector`` for ``round_`` (this client must be a peer); under
        SecAgg+ it pins the next round's graph first if nobody has (its next key is dealt
        along it)."""
        view = self.view
        view.pin_graph(view.pinner or self.account, round_ + 1)
        return client_masked_update(
            self.secrets, round_, vector, view.peers(round_), view.context(round_)
        ).to_bytes()

    def reveal(self, round_: int) -> bytes | None:
        """This client's reveal of ``round_`` (the included set must be fixed), or None when
        the reveal-safety rule refuses the round's on-chain included set.

        The included set is the contract's, never the payloads this node could fetch: an
        included peer whose payload it cannot fetch or check gets nothing revealed (never
        its mask key), so nodes with different fetch views cannot together expose it."""
        view = self.view
        available = view.included(round_)
        shares: dict[int, DealtShares] = {c: m.self_mask_shares for c, m in available.items()}
        try:
            rev = client_reveal(
                self.secrets,
                round_,
                view.included_clients(round_),
                view.peers(round_),
                shares,
                view.context(round_),
                view.spec.min_included,
            )
        except RevealUnsafe:
            return None
        return rev.to_bytes()

    def step(self, round_: int) -> list[ClientEvent]:
        """Publish what is due now, each record in its own transaction (no relayer)."""
        phase = self.view.task.phase(round_) if round_ > 0 else Phase.PENDING
        events: list[ClientEvent] = []
        if self.view.pin_graph(self.account, round_ + 1):
            events.append(ClientEvent(round_, "graph-seed-pinned", {"round": round_ + 1}))
        for kind, payload in self.due(round_, phase, self.view.spec.num_clients or 0):
            name = f"record-{KINDS[kind]}"
            try:
                self.view.records.submit_record(self.account, round_, kind, payload)
            except ContractRevert as exc:
                events.append(ClientEvent(round_, name + "-refused", {"error": exc.error_name}))
                continue
            events.append(ClientEvent(round_, name, {"bytes": len(payload)}))
        return events


class HePayloads:
    """Encrypts a client's release under the task key holder's public key (manifest)."""

    def __init__(self, manifest: TaskManifest) -> None:
        self.spec = PrivacySpec.from_manifest(manifest.privacy)
        self.public_key = he.load_public_key(bytes.fromhex(self.spec.he_public_key or ""))

    def takes_part(self, round_: int) -> bool:
        return True

    def payload(self, client: ClientNode, round_: int, vector: np.ndarray) -> bytes:
        return he_round.encrypt_payload(
            round_,
            vector,
            self.public_key,
            self.spec.num_clients or 0,
            task=client.task.address,
            client=client.client_index(),
        )

    def step(self, round_: int) -> list[ClientEvent]:
        return []


def task_records(task: TaskContract, manifest: TaskManifest) -> PrivacyRecordsContract:
    """The records contract the manifest of ``task`` names (checked to belong to it)."""
    spec = PrivacySpec.from_manifest(manifest.privacy)
    if not spec.records_contract:
        raise ConfigError("the task manifest names no privacy records contract")
    records = PrivacyRecordsContract(task.chain, spec.records_contract)
    records.check_task(task.address)
    return records


def private_views(
    task: TaskContract, store: ContentStore, manifest: TaskManifest
) -> SecAggView | HeView | None:
    """The view a node of ``task`` needs (None for a task that hides no update)."""
    spec = PrivacySpec.from_manifest(manifest.privacy)
    if not spec.hides_updates:
        return None
    records = task_records(task, manifest)
    if "secagg" in spec.components:
        return SecAggView(task, records, store, manifest)
    return HeView(task, records, manifest)
