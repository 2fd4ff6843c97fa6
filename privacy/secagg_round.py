"""Secure aggregation as a fedchain round: payloads, key epochs, peer sets, unmasking.

Pure functions over published material (docs/privacy.md, "Secure aggregation on-chain"):

* **Key records.** A :class:`KeyRecord` is a client's mask public key in force from one
  round, with the Shamir shares of its secret dealt (encrypted) to every client whose
  encryption key is registered. Every mask key is used in exactly one round.
* **Peer set.** The peers of round ``r``, ``P_r``, are the clients whose key is in force at
  ``r`` (:func:`keys_in_force`): the next key carried by each update *included* in round
  ``r − 1``, and the key records posted during round ``r − 1`` (before the task starts, for
  round 1). A client not included in a round it was a peer of dropped: its mask key of that
  round is revealed, so it must post a fresh key record before it takes part again.
* **Masked update.** A peer's round-``r`` payload (:class:`MaskedUpdate`) carries its vector
  masked with its self mask and its pairwise masks with every other peer, the dealt shares
  of its self mask, and its next key record (in force from ``r + 1``).
* **Reveal.** Once the contract fixed the included set ``I_r``, any registered client
  reveals its shares: of the self mask of every ``u ∈ I_r``, of the mask key of every
  dropped peer ``v ∈ P_r \\ I_r`` (:func:`client_reveal`), never both for one client.
* **Unmask.** :func:`unmask_round` recovers ``Σ_{u∈I_r} x_u`` from those payloads only, so
  every aggregator gets the same bytes; a short or inconsistent secret is a typed failure
  that names the client, never a wrong sum.

Every check is a function of the bytes and the public context (round, registered encryption
keys, threshold), so honest nodes agree on which payloads are valid.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from privacy.client_keys import ClientSecrets
from privacy.reveal_safety import check_reveal_safe
from privacy.secagg import (
    MASK_KEY,
    RING,
    SELF_MASK,
    DealtShares,
    KeyBundle,
    Reveal,
    UnmaskResult,
    deal_shares_to,
    make_reveal,
    mask_update,
    unmask_sum,
    usable_public_key,
)
from protocol.codec import decode_tensors, encode_tensors
from protocol.errors import CodecError, SecAggError
from protocol.payloads import ModelLayout, update_max_bytes

__all__ = [
    "KEY_RECORD_MAGIC",
    "KeyRecord",
    "MaskedUpdate",
    "SecAggContext",
    "check_dealt",
    "client_key_record",
    "client_masked_update",
    "client_reveal",
    "keys_in_force",
    "max_payload_bytes",
    "peers_from_payloads",
    "table_graph",
    "unmask_round",
    "usable_enc_keys",
]

KEY_RECORD_MAGIC = b"FCSK1"
ROUND_KEY = "meta/round"
MASKED_KEY = "secagg/masked"
SELF_SHARES_KEY = "secagg/self_mask_shares"
NEXT_KEY_KEY = "secagg/next_key"
_TENSORS = {ROUND_KEY, MASKED_KEY, SELF_SHARES_KEY, NEXT_KEY_KEY}


#: The mask graph of one round: client -> its share holders (its neighbours and itself).
Holders = Callable[[int], Collection[int]]


@dataclass(frozen=True)
class SecAggContext:
    """The public context every check runs in: the task, the Shamir threshold, the
    registered encryption keys (client index -> 32-byte X25519 public key) and the mask
    graph of each round (``graph(round)``: the round's share holders, see :data:`Holders`;
    None, or a round it maps to None: the full graph of Bonawitz et al.)."""

    task: str
    threshold: int
    enc_keys: Mapping[int, bytes]
    graph: Callable[[int], Holders | None] | None = None

    def round_graph(self, round_: int) -> Holders | None:
        """The share holders of each client in ``round_`` (None: everyone)."""
        return None if self.graph is None else self.graph(round_)

    def holders(self, round_: int, client: int) -> frozenset[int] | None:
        """Whom ``client`` masks with and deals its shares to in ``round_`` (itself
        included), or None in the full graph."""
        graph = self.round_graph(round_)
        return None if graph is None else frozenset(graph(client)) | {client}

    def dealing_keys(self, round_: int, client: int) -> dict[int, bytes]:
        """The encryption keys ``client`` deals its shares of ``round_`` to."""
        holders = self.holders(round_, client)
        if holders is None:
            return dict(self.enc_keys)
        return {c: k for c, k in self.enc_keys.items() if c in holders}


def table_graph(table: Sequence[Collection[int]]) -> Holders:
    """The share holders of a neighbour table (``table[u]``: ``u``'s neighbours, e.g. a
    Harary graph over the task's clients ``0..K-1``); a client outside it has none."""
    rows = [frozenset(row) for row in table]

    def holders(client: int) -> Collection[int]:
        if 0 <= client < len(rows):
            return rows[client] | {client}
        return frozenset()

    return holders


def usable_enc_keys(keys: Mapping[int, bytes]) -> dict[int, bytes]:
    """The registered encryption keys that can be used (a low-order X25519 key is left
    out: its client holds no share, and nobody deals to it)."""
    return {c: k for c, k in keys.items() if usable_public_key(k)}


@dataclass(frozen=True)
class KeyRecord:
    """Client ``bundle.index``'s mask key in force from ``shares.round``, with its shares."""

    bundle: KeyBundle
    shares: DealtShares

    @property
    def client(self) -> int:
        return self.bundle.index

    def to_bytes(self) -> bytes:
        bundle = self.bundle.to_bytes()
        return KEY_RECORD_MAGIC + struct.pack("<I", len(bundle)) + bundle + self.shares.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyRecord:
        """Parse :meth:`to_bytes` (:class:`SecAggError` if malformed)."""
        head = len(KEY_RECORD_MAGIC) + 4
        if len(data) < head or bytes(data[: len(KEY_RECORD_MAGIC)]) != KEY_RECORD_MAGIC:
            raise SecAggError("key record: bad magic")
        (size,) = struct.unpack_from("<I", data, len(KEY_RECORD_MAGIC))
        if size > len(data) - head:
            raise SecAggError("key record: truncated")
        bundle = KeyBundle.from_bytes(bytes(data[head : head + size]))
        return cls(bundle, DealtShares.from_bytes(bytes(data[head + size :])))

    def check(self, client: int, round_: int, ctx: SecAggContext) -> None:
        """Refuse (:class:`SecAggError`) unless this is ``client``'s key for ``round_``: its
        registered encryption key, the secret committed to by the public key, shares of the
        task's threshold to registered clients only."""
        if self.bundle.index != client:
            raise SecAggError(f"key record of client {self.bundle.index}, expected {client}")
        if ctx.enc_keys.get(client) != self.bundle.enc_pk:
            raise SecAggError(f"client {client}'s key record has an unregistered encryption key")
        if not usable_public_key(self.bundle.mask_pk):
            raise SecAggError(f"client {client}'s mask key is a low-order X25519 point")
        check_dealt(self.shares, client, MASK_KEY, round_, ctx)
        if self.shares.secret_commitment != self.bundle.mask_pk:
            raise SecAggError(f"client {client}'s key shares commit to another public key")


def check_dealt(
    dealt: DealtShares,
    dealer: int,
    purpose: str,
    round_: int,
    ctx: SecAggContext,
    must_cover: Iterable[int] = (),
) -> None:
    """Refuse dealt shares that are not ``dealer``'s ``purpose`` shares for ``round_`` with the
    task's threshold, to registered clients only (and to every client of ``must_cover``)."""
    where = f"client {dealer}'s {purpose} shares"
    if dealt.dealer != dealer or dealt.purpose != purpose or dealt.round != round_:
        raise SecAggError(
            f"{where}: dealt by {dealt.dealer} as {dealt.purpose!r} for round {dealt.round}, "
            f"expected round {round_}"
        )
    if dealt.threshold != ctx.threshold:
        raise SecAggError(f"{where}: threshold {dealt.threshold}, expected {ctx.threshold}")
    strangers = [r for r in dealt.recipients if r not in ctx.enc_keys]
    if strangers:
        raise SecAggError(f"{where}: dealt to unregistered clients {strangers[:5]}")
    holders = ctx.holders(round_, dealer)
    if holders is not None:
        outside = [r for r in dealt.recipients if r not in holders]
        if outside:
            raise SecAggError(
                f"{where}: dealt to clients {outside[:5]} outside its neighbours in the "
                f"round's mask graph"
            )
        must_cover = [c for c in must_cover if c in holders]
    missing = [c for c in must_cover if not dealt.holds(c)]
    if missing:
        raise SecAggError(f"{where}: no share for peers {missing[:5]}")


@dataclass(frozen=True)
class MaskedUpdate:
    """A peer's round payload: masked vector (Z_2^32), its self-mask shares, its next key."""

    round: int
    masked: NDArray[np.uint32]
    self_mask_shares: DealtShares
    next_key: KeyRecord

    def to_bytes(self) -> bytes:
        """Canonical tensor bytes (``protocol.codec``; the masked words as int32)."""
        return encode_tensors(
            {
                ROUND_KEY: np.array([self.round], dtype=np.int64),
                MASKED_KEY: np.asarray(self.masked, dtype=RING).view(np.int32),
                SELF_SHARES_KEY: np.frombuffer(self.self_mask_shares.to_bytes(), dtype=np.uint8),
                NEXT_KEY_KEY: np.frombuffer(self.next_key.to_bytes(), dtype=np.uint8),
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, round_: int, dim: int, max_bytes: int) -> MaskedUpdate:
        """Decode a masked update for ``round_`` of ``dim`` words (:class:`CodecError` for a
        malformed tensor payload, :class:`SecAggError` for malformed secagg material)."""
        tensors = decode_tensors(data, max_bytes=max_bytes)
        if set(tensors) != _TENSORS:
            raise CodecError(
                f"masked update has tensors {sorted(tensors)}, expected {sorted(_TENSORS)}"
            )
        rnd, masked = tensors[ROUND_KEY], tensors[MASKED_KEY]
        if rnd.dtype != np.int64 or rnd.shape != (1,) or int(rnd[0]) != round_:
            raise CodecError(f"masked update is not for round {round_}")
        if masked.dtype != np.int32 or masked.shape != (dim,):
            raise CodecError(
                f"masked vector must be int32[{dim}], got {masked.dtype}{masked.shape}"
            )
        blobs = []
        for key in (SELF_SHARES_KEY, NEXT_KEY_KEY):
            arr = tensors[key]
            if arr.dtype != np.uint8 or arr.ndim != 1:
                raise CodecError(f"tensor {key!r} must be a uint8 vector")
            blobs.append(arr.tobytes())
        return cls(
            round_,
            masked.view(RING),
            DealtShares.from_bytes(blobs[0]),
            KeyRecord.from_bytes(blobs[1]),
        )

    def check(self, client: int, peers: Mapping[int, KeyRecord], ctx: SecAggContext) -> None:
        """Refuse (:class:`SecAggError`) unless ``client`` is a peer of this round and its
        self-mask shares and next key are well formed and dealt to every peer."""
        if client not in peers:
            raise SecAggError(f"client {client} has no mask key in force in round {self.round}")
        check_dealt(self.self_mask_shares, client, SELF_MASK, self.round, ctx, peers)
        self.next_key.check(client, self.round + 1, ctx)
        check_dealt(self.next_key.shares, client, MASK_KEY, self.round + 1, ctx, peers)


def max_payload_bytes(layout: ModelLayout, dim: int, num_clients: int) -> int:
    """The largest masked update a task accepts: the vector and two dealt share sets (a
    self mask and a next key) of ``num_clients`` recipients, with headroom."""
    per_client = 2 * (4 + 48 + 32)
    return update_max_bytes(layout) + 4 * dim + per_client * (num_clients + 16) + 4096


def client_key_record(secrets: ClientSecrets, round_from: int, ctx: SecAggContext) -> KeyRecord:
    """The key record of the mask key ``secrets`` derives for ``round_from`` (restart-safe)."""
    keys = secrets.keys(round_from)
    shares = deal_shares_to(
        keys.mask_secret,
        MASK_KEY,
        keys,
        ctx.dealing_keys(round_from, secrets.index),
        ctx.threshold,
        ctx.task,
        round_from,
        secrets.randomness(MASK_KEY, round_from),
    )
    return KeyRecord(keys.bundle, shares)


def client_masked_update(
    secrets: ClientSecrets,
    round_: int,
    vector: NDArray[np.integer],
    peers: Mapping[int, KeyRecord],
    ctx: SecAggContext,
) -> MaskedUpdate:
    """Mask ``vector`` (integers, embedded in Z_2^32) for ``round_`` against ``peers``.

    ``peers`` is ``P_r`` (:func:`keys_in_force`) and must hold this client's own record,
    whose public key must be the one ``secrets`` derives for ``round_``.
    """
    me = secrets.keys(round_)
    own = peers.get(secrets.index)
    if own is None or own.bundle != me.bundle:
        raise SecAggError(f"client {secrets.index} has no key in force in round {round_}")
    self_mask = secrets.self_mask(round_)
    masked = mask_update(
        np.asarray(vector, dtype=np.int64),
        me,
        [rec.bundle for rec in peers.values()],
        self_mask,
        ctx.task,
        round_,
        ctx.holders(round_, secrets.index),
    )
    shares = deal_shares_to(
        self_mask,
        SELF_MASK,
        me,
        ctx.dealing_keys(round_, secrets.index),
        ctx.threshold,
        ctx.task,
        round_,
        secrets.randomness(SELF_MASK, round_),
    )
    return MaskedUpdate(round_, masked, shares, client_key_record(secrets, round_ + 1, ctx))


def keys_in_force(
    round_: int,
    carried: Mapping[int, KeyRecord],
    posted: Mapping[int, KeyRecord],
    ctx: SecAggContext,
) -> tuple[dict[int, KeyRecord], dict[int, str]]:
    """``P_r`` and the records left out with the reason (client -> reason).

    ``carried``: the next keys of the updates included in round ``r − 1`` (already checked
    with their payload); ``posted``: the key records posted during round ``r − 1``. A client
    in both is left out (the contract allows one or the other per round).
    """
    peers: dict[int, KeyRecord] = {}
    refused: dict[int, str] = {}
    for client in sorted(set(carried) | set(posted)):
        if client in carried and client in posted:
            refused[client] = "both a carried and a posted key"
            continue
        record = carried.get(client) or posted[client]
        try:
            record.check(client, round_, ctx)
        except SecAggError as exc:
            refused[client] = str(exc)
            continue
        peers[client] = record
    return peers, refused


def peers_from_payloads(
    round_: int,
    carried: Mapping[int, bytes],
    posted: Mapping[int, bytes],
    ctx: SecAggContext,
    dim: int,
    max_bytes: int,
) -> tuple[dict[int, KeyRecord], dict[int, str]]:
    """``P_r`` from published bytes: ``carried`` maps each client of an update included in
    round ``r − 1`` to that payload, ``posted`` each client to its first key record posted
    during round ``r − 1`` (before the task started, for round 1). Payloads and records that
    do not decode are left out with the reason, like invalid ones (:func:`keys_in_force`)."""
    refused: dict[int, str] = {}
    next_keys: dict[int, KeyRecord] = {}
    for client, payload in carried.items():
        try:
            next_keys[client] = MaskedUpdate.from_bytes(
                payload, round_ - 1, dim, max_bytes
            ).next_key
        except (CodecError, SecAggError) as exc:
            refused[client] = f"included update of round {round_ - 1}: {exc}"
    records: dict[int, KeyRecord] = {}
    for client, data in posted.items():
        try:
            records[client] = KeyRecord.from_bytes(data)
        except SecAggError as exc:
            refused[client] = f"key record: {exc}"
    peers, more = keys_in_force(round_, next_keys, records, ctx)
    return peers, {**refused, **more}


def client_reveal(
    secrets: ClientSecrets,
    round_: int,
    included: Iterable[int],
    peers: Mapping[int, KeyRecord],
    self_masks: Mapping[int, DealtShares],
    ctx: SecAggContext,
    n_min: int | None = None,
) -> Reveal:
    """What this client reveals once ``included`` (``I_r``) is fixed: its shares of the
    included peers' self masks and of the dropped peers' mask keys (those that open).

    ``included`` must be the **on-chain** included set (the contract's bitmap), not the
    clients whose payloads this client could fetch: a peer in it is never treated as
    dropped, so its mask key is never revealed; if its self-mask shares (``self_masks``:
    those of the payloads this client fetched and checked) are missing, nothing is revealed
    for it (the round then cannot unmask and is carried forward: never a public update).
    Raises :class:`~privacy.reveal_safety.RevealUnsafe` when the reveal-safety rule fails
    (``n_min`` defaults to the threshold: the full graph's ``⌈(1 − δ)K⌉``).
    """
    inc = set(included)
    check_reveal_safe(
        inc & set(peers),
        peers,
        ctx.threshold,
        ctx.threshold if n_min is None else n_min,
        ctx.round_graph(round_),
    )
    return make_reveal(
        secrets.keys(round_),
        round_,
        inc,
        {c: d for c, d in self_masks.items() if c in inc},
        {c: rec.shares for c, rec in peers.items()},
        {c: rec.bundle for c, rec in peers.items()},
        ctx.task,
    )


def unmask_round(
    round_: int,
    peers: Mapping[int, KeyRecord],
    included: Mapping[int, MaskedUpdate],
    reveals: Iterable[Reveal],
    ctx: SecAggContext,
) -> UnmaskResult:
    """``Σ_{u ∈ included} x_u`` (int64 values of the int32 ring) from published material.

    ``included`` maps each included peer to its (checked) masked update; every other peer is
    dropped and its mask key must be recoverable. Raises
    :class:`~protocol.errors.SecAggThresholdError` (too few valid shares, naming whose) or
    :class:`~protocol.errors.SecAggShareError` (a dealer's shares do not match its
    commitment); bad revealed shares are skipped and listed in the result.
    """
    strangers = sorted(set(included) - set(peers))
    if strangers:
        raise SecAggError(f"included clients {strangers} are not peers of round {round_}")
    own = [r for r in reveals if r.round == round_]
    return unmask_sum(
        round_,
        ctx.task,
        {c: rec.bundle for c, rec in peers.items()},
        {c: mu.masked for c, mu in included.items()},
        {c: mu.self_mask_shares for c, mu in included.items()},
        {c: rec.shares for c, rec in peers.items()},
        own,
        ctx.round_graph(round_),
    )
