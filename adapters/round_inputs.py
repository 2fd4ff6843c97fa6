"""The payloads of a round's included updates, fetched from wherever they are served.

Every party that computes from a round's included set — the chosen aggregator, every
verifier, and in private tasks the clients (their peers' next mask keys, the self-mask
shares they reveal) and the HE key holder — fetches it the same way: exactly the updates
the contract included (its availability bitmap), each checked against its on-chain digest
by the store. With per-node stores (:class:`~adapters.storage.PeerStore`) an included
update is fetched from the members that attested to it (at least one of them is correct);
if none serves it yet, :class:`~protocol.errors.StorageError` (try again later). Updates
outside the included set are ``None``, whatever this node holds.
"""

from __future__ import annotations

from adapters.contract import RegisteredUpdate, TaskContract
from adapters.storage import ContentStore, PeerStore, get_by_digest
from protocol.errors import StorageError

__all__ = ["attesters", "fetch_included"]


def attesters(task: TaskContract, round_: int, count: int) -> dict[int, list[str]]:
    """Update index -> addresses of the members that attested to holding it."""
    out: dict[int, list[str]] = {}
    for member, address in enumerate(task.aggregators()):
        for index, held in enumerate(task.attestation(round_, member)[:count]):
            if held:
                out.setdefault(index, []).append(address)
    return out


def fetch_included(
    task: TaskContract,
    store: ContentStore,
    round_: int,
    updates: list[RegisteredUpdate] | None = None,
    included: list[bool] | None = None,
) -> tuple[list[RegisteredUpdate], list[bytes | None]]:
    """The registered updates of ``round_`` and the payload of each included one (None for
    the others). ``updates`` / ``included`` may be passed when the caller already read
    them."""
    updates = task.updates(round_) if updates is None else updates
    included = task.included_updates(round_) if included is None else included
    payloads: list[bytes | None] = []
    sources: dict[int, list[str]] | None = None
    for update, take in zip(updates, included, strict=True):
        if not take:
            payloads.append(None)
            continue
        if not isinstance(store, PeerStore):
            try:
                payloads.append(get_by_digest(store, update.digest))
            except StorageError:
                payloads.append(None)
            continue
        if sources is None:
            sources = attesters(task, round_, len(updates))
        # no attestation at all (attestWindow 0): any peer that has it
        where = sources.get(update.index) or list(store.peers)
        try:
            payloads.append(store.fetch_from(update.digest, where))
        except StorageError:
            if update.index in sources:
                raise  # attested by f + 1: a correct attester will serve it
            payloads.append(None)
    return updates, payloads
