"""The mask graph of a secure-aggregation round: the full graph, or SecAgg+'s random Harary
graph derived from public on-chain randomness (docs/privacy.md, "SecAgg+").

In SecAgg+ (Bell et al. 2020) a client masks pairwise only with its ``k`` neighbours and
Shamir-shares its self mask and its mask key only among them (itself included, threshold
``t``). Round ``r``'s graph spans the task's clients ``0..K−1`` (registration indices) and
is a pure function of ``(K, k, seed_r)``, where ``seed_r`` is the randomness the task's
``PrivacyRecords`` contract pinned for round ``r`` during round ``r − 1`` (once every graph
position was registered): every client and every aggregator derives the same graph, and
an aggregator re-executes the unmasking byte for byte.

:func:`round_holders` is the one call the protocol makes; the graph itself is
:mod:`privacy.secagg_graph`'s (version ``harary-sha256-v1``: the Harary graph ``H(k, K)`` on a
seed-keyed permutation of the clients, the "random Harary graph" of Bell et al.).
"""

from __future__ import annotations

from privacy import secagg_graph
from privacy.secagg_round import Holders, table_graph
from protocol.errors import ConfigError

__all__ = ["GRAPH_VERSION", "graph_seed", "harary_table", "round_holders"]

#: Version of the graph derivation (bound into the task manifest with the parameters).
GRAPH_VERSION = secagg_graph.HARARY_VERSION


def graph_seed(randomness: bytes, task: str, round_number: int) -> bytes:
    """The seed of ``round_number``'s graph from the pinned on-chain randomness, bound to
    the task's address and the round (:func:`privacy.secagg_graph.graph_seed`)."""
    if len(randomness) != 32:
        raise ConfigError("the pinned graph randomness is 32 bytes")
    return secagg_graph.graph_seed(bytes(randomness), task, int(round_number))


def harary_table(num_clients: int, degree: int, seed: bytes) -> tuple[tuple[int, ...], ...]:
    """Neighbours of each client ``0..K−1`` in the random Harary graph ``H(degree, K)`` of
    ``seed`` (:func:`privacy.secagg_graph.harary_neighbours`); SecAgg+ needs
    ``2 <= k < K − 1`` (``k = K − 1`` is the full graph: ``--mask-graph full``)."""
    k, n = int(degree), int(num_clients)
    if n < 4 or not 2 <= k < n - 1:
        raise ConfigError(
            f"graph degree {degree} of {num_clients} clients: SecAgg+ needs 2 <= k < K - 1"
        )
    return secagg_graph.harary_neighbours(n, k, seed)


def round_holders(
    num_clients: int, degree: int, randomness: bytes, task: str, round_number: int
) -> Holders:
    """The share holders of each client in ``round_number`` (its neighbours and itself)."""
    seed = graph_seed(randomness, task, round_number)
    return table_graph(harary_table(num_clients, degree, seed))
