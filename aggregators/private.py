"""The first step of a private round: the exact sum of the included updates, from published
material only (secure aggregation: unmasking; HE: combination and a verified decryption).

:func:`private_sum` is a pure function of the round's payloads (by on-chain registration
index), the public context (:class:`PrivateInputs`: the task address, the registered
encryption keys, the round's peer set, the reveals, the key holder's decryption) and the
task's privacy settings. Every aggregator, the chosen one and every verifier, calls it with
the same bytes and gets the same sum, or the same typed reason why the sum cannot be
recovered; :func:`~aggregators.execution.execute_round` then carries the model forward.

What counts as *included*: a registered update the contract included (payload not None)
that decodes and is well formed for this round (secure aggregation: its client has a key in
force, its shares are dealt to every peer). Under the threat model every included update is
valid (an honest aggregator attests only valid payloads, and inclusion needs f + 1
attestations); an invalid one anyway makes the round fail, not the sum wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privacy import he, he_round, threshold_paillier
from privacy.reveal_safety import RevealUnsafe, check_reveal_safe
from privacy.secagg import Reveal
from privacy.secagg_round import (
    Holders,
    KeyRecord,
    MaskedUpdate,
    SecAggContext,
    max_payload_bytes,
    unmask_round,
)
from privacy.spec import PrivacySpec
from protocol.errors import CodecError, HEError, SecAggError, SecAggShareError, SecAggThresholdError
from protocol.manifest import TaskManifest
from protocol.payloads import update_max_bytes

__all__ = ["PrivateInputs", "PrivateSum", "private_dim", "private_sum", "secagg_context"]


@dataclass(frozen=True)
class PrivateInputs:
    """The public context of a private round, read from the chain and content storage.

    ``clients``: the client index of each registered update (registration order);
    ``task``: the task contract's address; ``enc_keys``: the registered encryption keys;
    ``peers``: ``P_r`` (:func:`privacy.secagg_round.keys_in_force`); ``reveals``: every
    registered reveal as ``(revealer client index, payload or None)``; ``decryption``: the
    key holder's decryption record of the round (HE), or None; ``included``: the clients
    the contract included (its bitmap; None: those whose payload is given);
    ``decryption_shares``: under threshold HE, each committee member's share record as
    ``(member index, payload)``; ``graph_seeds``: under SecAgg+, the randomness the records
    contract pinned for each round's mask graph (this round's and the next's: the update
    carries the next key, dealt along the next graph).
    """

    clients: tuple[int, ...]
    task: str = ""
    enc_keys: Mapping[int, bytes] = field(default_factory=dict)
    peers: Mapping[int, KeyRecord] = field(default_factory=dict)
    reveals: tuple[tuple[int, bytes | None], ...] = ()
    decryption: bytes | None = None
    included: frozenset[int] | None = None
    decryption_shares: tuple[tuple[int, bytes], ...] = ()
    graph_seeds: Mapping[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class PrivateSum:
    """The exact sum of the included updates (ring values as int64; the last coordinate is
    the count of clip bits under adaptive clipping), or why it cannot be recovered."""

    total: NDArray[np.int64] | None
    included: tuple[int, ...]
    excluded: dict[int, str]
    failure: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)


def private_dim(manifest: TaskManifest, spec: PrivacySpec) -> int:
    """Coordinates of a private vector: the model, plus one for the clip bit."""
    return spec.vector_dim(manifest.layout.size)


def secagg_context(spec: PrivacySpec, inputs: PrivateInputs) -> SecAggContext:
    """The secure-aggregation context of a task (its threshold, keys, address and, under
    SecAgg+, each round's mask graph from its pinned seed)."""
    graph = graph_of(spec, inputs.task, inputs.graph_seeds)
    return SecAggContext(inputs.task, spec.threshold, inputs.enc_keys, graph)


def graph_of(
    spec: PrivacySpec, task: str, seeds: Mapping[int, bytes]
) -> Callable[[int], Holders | None] | None:
    """Round -> its mask graph under SecAgg+ (None for the full graph). A round whose seed
    is not pinned has no graph: every client of it holds no neighbour (nothing checks)."""
    if not spec.secagg_plus:
        return None
    from privacy.mask_graph import round_holders

    cache: dict[int, Holders] = {}
    none: Holders = lambda client: frozenset()  # noqa: E731

    def graph(round_: int) -> Holders | None:
        seed = seeds.get(round_)
        if seed is None:
            return none
        if round_ not in cache:
            cache[round_] = round_holders(
                spec.num_clients or 0, spec.graph_degree, seed, task, round_
            )
        return cache[round_]

    return graph


def private_sum(
    manifest: TaskManifest,
    spec: PrivacySpec,
    round_: int,
    updates: Sequence[bytes | None],
    inputs: PrivateInputs,
) -> PrivateSum:
    """The exact sum of round ``round_``'s included updates (see the module docstring)."""
    if len(inputs.clients) != len(updates):
        raise ValueError("one client index per registered update is needed")
    if "secagg" in spec.components:
        return _secagg_sum(manifest, spec, round_, updates, inputs)
    return _he_sum(manifest, spec, round_, updates, inputs)


def _secagg_sum(
    manifest: TaskManifest,
    spec: PrivacySpec,
    round_: int,
    updates: Sequence[bytes | None],
    inputs: PrivateInputs,
) -> PrivateSum:
    ctx = secagg_context(spec, inputs)
    dim = private_dim(manifest, spec)
    limit = max_payload_bytes(manifest.layout, dim, spec.num_clients or 1)
    masked: dict[int, MaskedUpdate] = {}
    included: list[int] = []
    excluded: dict[int, str] = {}
    for index, (client, payload) in enumerate(zip(inputs.clients, updates, strict=True)):
        if payload is None:
            excluded[index] = "payload unavailable"
            continue
        try:
            update = MaskedUpdate.from_bytes(payload, round_, dim, limit)
            update.check(client, inputs.peers, ctx)
        except (CodecError, SecAggError) as exc:
            excluded[index] = f"invalid: {exc}"
            continue
        if client in masked:
            excluded[index] = f"invalid: a second update of client {client}"
            continue
        masked[client] = update
        included.append(index)
    dropped = sorted(set(inputs.peers) - set(masked))
    notes: dict[str, Any] = {"peers": len(inputs.peers), "dropped": dropped}
    reveals, bad_reveals = _reveals(round_, inputs.reveals)
    notes["reveals"] = len(reveals)
    if bad_reveals:
        notes["bad_reveals"] = bad_reveals
    # an included payload of a peer that is not valid: its masks stay in the others' sum
    bad = sorted(
        inputs.clients[i]
        for i in excluded
        if updates[i] is not None
        and inputs.clients[i] in inputs.peers
        and inputs.clients[i] not in masked
    )
    if bad:
        return PrivateSum(
            None,
            tuple(included),
            excluded,
            f"secagg: included payloads of clients {bad} are invalid, so their masks cannot "
            "be removed",
            notes,
        )
    onchain = inputs.included
    unavailable = sorted(set(onchain or ()) & set(inputs.peers) - set(masked))
    if unavailable:
        # honest clients reveal nothing for an included peer they cannot see (never its
        # mask key), so it can neither be unmasked nor treated as dropped
        return PrivateSum(
            None,
            tuple(included),
            excluded,
            f"secagg: included payloads of clients {unavailable} are unavailable, so their "
            "masks cannot be removed",
            notes,
        )
    if len(masked) < spec.min_included:
        return PrivateSum(
            None,
            tuple(included),
            excluded,
            f"secagg: {len(masked)} included updates, fewer than the threshold "
            f"{spec.min_included} (n_min; a smaller sum could expose individual updates)",
            notes,
        )
    try:
        check_reveal_safe(
            masked, inputs.peers, ctx.threshold, spec.min_included, ctx.round_graph(round_)
        )
    except RevealUnsafe as exc:
        return PrivateSum(
            None, tuple(included), excluded, f"secagg: reveal-safety rule: {exc}", notes
        )
    try:
        result = unmask_round(round_, inputs.peers, masked, reveals, ctx)
    except SecAggThresholdError as exc:
        notes["short_secrets"] = {str(k): v for k, v in sorted(exc.missing.items())}
        return PrivateSum(None, tuple(included), excluded, f"secagg threshold: {exc}", notes)
    except SecAggShareError as exc:
        notes["culprit"] = {"client": exc.culprit, "role": exc.role}
        return PrivateSum(None, tuple(included), excluded, f"secagg dealer fault: {exc}", notes)
    except SecAggError as exc:
        return PrivateSum(None, tuple(included), excluded, f"secagg: {exc}", notes)
    if result.bad_shares:
        notes["bad_shares"] = [list(pair) for pair in result.bad_shares]
    return PrivateSum(result.total, tuple(included), excluded, None, notes)


def _reveals(
    round_: int, registered: Sequence[tuple[int, bytes | None]]
) -> tuple[list[Reveal], list[dict[str, Any]]]:
    """The decodable reveals of ``round_`` whose revealer is the registering client."""
    good: list[Reveal] = []
    bad: list[dict[str, Any]] = []
    seen: set[int] = set()
    for client, payload in registered:
        if payload is None:
            bad.append({"client": client, "reason": "unavailable"})
            continue
        try:
            reveal = Reveal.from_bytes(payload)
        except SecAggError as exc:
            bad.append({"client": client, "reason": str(exc)})
            continue
        if reveal.revealer != client or reveal.round != round_ or client in seen:
            bad.append({"client": client, "reason": "not its reveal of this round"})
            continue
        seen.add(client)
        good.append(reveal)
    return good, bad


def _he_sum(
    manifest: TaskManifest,
    spec: PrivacySpec,
    round_: int,
    updates: Sequence[bytes | None],
    inputs: PrivateInputs,
) -> PrivateSum:
    if spec.he_public_key is None or spec.num_clients is None:
        raise ValueError("an HE task needs its public key and number of clients")
    public_key = he.load_public_key(bytes.fromhex(spec.he_public_key))
    dim = private_dim(manifest, spec)
    width = (int(public_key.nsquare).bit_length() + 7) // 8
    limit = update_max_bytes(manifest.layout) + width * (dim + 1) + 4096
    blobs: list[bytes] = []
    included: list[int] = []
    excluded: dict[int, str] = {}
    for index, (client, payload) in enumerate(zip(inputs.clients, updates, strict=True)):
        if payload is None:
            excluded[index] = "payload unavailable"
            continue
        try:
            blob = he_round.decode_payload(
                payload,
                round_,
                dim,
                public_key,
                spec.num_clients,
                limit,
                task=inputs.task,
                client=client,
            )
        except (CodecError, HEError) as exc:
            excluded[index] = f"invalid: {exc}"
            continue
        blobs.append(blob)
        included.append(index)
    notes: dict[str, Any] = {}
    if len(blobs) < spec.threshold:
        failure = (
            f"he: {len(blobs)} included updates, fewer than the threshold {spec.threshold} "
            "(the key holder does not decrypt smaller sums)"
        )
        return PrivateSum(None, tuple(included), excluded, failure, notes)
    combined = he_round.combine_round(blobs, public_key, spec.num_clients)
    notes["combined_bytes"] = len(combined)
    if spec.he_threshold_key:
        key = threshold_paillier.ThresholdKey.from_bytes(bytes.fromhex(spec.he_threshold_key))
        try:
            total, bad = he_round.threshold_sum(
                round_, combined, inputs.decryption_shares, key, spec.num_clients, inputs.task
            )
        except HEError as exc:
            notes["culprit"] = {"role": "decryption committee"}
            return PrivateSum(None, tuple(included), excluded, f"he threshold: {exc}", notes)
        if bad:
            notes["bad_decryptors"] = list(bad)
        notes["decryption_shares"] = len(inputs.decryption_shares)
        return PrivateSum(total, tuple(included), excluded, None, notes)
    if inputs.decryption is None:
        failure = "he: the key holder published no decryption of this round"
        return PrivateSum(None, tuple(included), excluded, failure, notes)
    try:
        total = he_round.verified_sum(
            round_, combined, inputs.decryption, public_key, spec.num_clients
        )
    except HEError as exc:
        notes["culprit"] = {"role": "key holder"}
        return PrivateSum(None, tuple(included), excluded, f"he: {exc}", notes)
    return PrivateSum(total, tuple(included), excluded, None, notes)
