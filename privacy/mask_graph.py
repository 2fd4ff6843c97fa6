"""The mask graph of a secure-aggregation round: the full graph, or SecAgg+'s random Harary
graph derived from public on-chain randomness (docs/privacy.md, "SecAgg+").

In SecAgg+ (Bell et al. 2020) a client masks pairwise only with its ``k`` neighbours and
Shamir-shares its self mask and its mask key only among them (itself included, threshold
``t``). Round ``r``'s graph spans the task's clients ``0..K−1`` (registration indices) and
is a pure function of ``(K, k, seed_r)``, where ``seed_r`` is the randomness the task's
``PrivacyRecords`` contract pinned for round ``r`` during round ``r − 1`` (once every graph
position was registered): every client and every aggregator derives the same graph, and
an aggregator re-executes the unmasking byte for byte.

:func:`round_holders` is the one call the protocol makes; the graph itself comes from
:func:`harary_table` (the Harary graph ``H(k, K)`` on a seed-keyed permutation of the
clients: the "random Harary graph" of Bell et al.).
"""

from __future__ import annotations

import hashlib
import hmac

from privacy.secagg_round import Holders, table_graph
from protocol.errors import ConfigError

__all__ = ["GRAPH_VERSION", "graph_seed", "harary_table", "round_holders"]

#: Version of the graph derivation (bound into the task manifest with the parameters).
GRAPH_VERSION = 1


def graph_seed(randomness: bytes, task: str, round_number: int) -> bytes:
    """The seed of ``round_number``'s graph: SHA-256 of the pinned on-chain randomness,
    bound to the task's address and the round (a seed is never reused across tasks)."""
    if len(randomness) != 32:
        raise ConfigError("the pinned graph randomness is 32 bytes")
    text = f"fedchain-secagg-graph-v{GRAPH_VERSION}|{task.lower()}|{int(round_number)}"
    return hashlib.sha256(text.encode() + b"|" + bytes(randomness)).digest()


def harary_table(num_clients: int, degree: int, seed: bytes) -> tuple[tuple[int, ...], ...]:
    """Neighbours of each client ``0..K−1`` in ``H(degree, K)`` over the permutation of the
    clients sorted by HMAC-SHA256(seed, client): position ``p`` is adjacent to positions
    ``p ± 1 .. p ± ⌊degree/2⌋`` (mod K), and for an odd degree also to ``p + K/2``."""
    k, n = int(degree), int(num_clients)
    if n < 3 or not 2 <= k < n - 1 or (k % 2 and n % 2):
        raise ConfigError(
            f"graph degree {degree} of {num_clients} clients: need 2 <= k < K - 1 (and K even "
            "for an odd k)"
        )
    order = sorted(range(n), key=lambda c: hmac.digest(seed, c.to_bytes(4, "big"), "sha256"))
    rows: list[set[int]] = [set() for _ in range(n)]
    for p, client in enumerate(order):
        for d in range(1, k // 2 + 1):
            rows[client].update((order[(p + d) % n], order[(p - d) % n]))
        if k % 2:
            rows[client].add(order[(p + n // 2) % n])
    return tuple(tuple(sorted(r)) for r in rows)


def round_holders(
    num_clients: int, degree: int, randomness: bytes, task: str, round_number: int
) -> Holders:
    """The share holders of each client in ``round_number`` (its neighbours and itself)."""
    seed = graph_seed(randomness, task, round_number)
    return table_graph(harary_table(num_clients, degree, seed))
