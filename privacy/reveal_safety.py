"""The public reveal-safety rule of secure aggregation, and the task's threshold floor.

Unmasking is a pure function of public data: once shares are revealed, *anyone* can
combine them, so refusing to unmask is not a protection; only refusing to *reveal* is.
Every client therefore checks :func:`check_reveal_safe` before it publishes a reveal, and
every aggregator checks the same rule before it unmasks (so an unsafe round is carried
forward identically everywhere):

* ``|I| >= n_min = ⌈(1 − δ)K⌉`` — at least as many included updates as the task's
  distributed-DP noise is calibrated for (fewer included updates would make a sum of too
  few updates, in the extreme one update, public);
* every included client has at least ``t`` included share holders ("neighbours"): its
  self mask can be recovered without anyone revealing a dropped client's key twice;
* the included subgraph is connected (a sum splits into no smaller public sums).

``I`` is the *on-chain* included set (the contract's availability bitmap), never a set a
client built from the payloads it could fetch: two clients with different fetch views would
otherwise reveal different kinds of share for the same peer (its self mask and its mask
key), and the peer's update would be public.

The graph is given by ``neighbours`` (who holds a client's shares); the full graph of
Bonawitz et al. is :func:`full_graph` (every peer holds a share of every peer, the dealer
included). :func:`check_threshold_floor` refuses a task whose parameters leave the
threshold at or below half the clients: two disjoint halves could then each reconstruct a
different secret of the same client (a self mask from one, a mask key from the other).

SecAgg+ (:mod:`privacy.secagg_graph`): the graph is a random Harary graph of degree ``k``
and the threshold ``t`` is counted among a client's share holders (its ``k`` neighbours and
itself). :func:`graph_share_holders` turns a :class:`~privacy.secagg_graph.SecAggPlusParams`
and the round's seed into ``neighbours``; :func:`check_reveal_safe_graph` is the rule with
``t`` and ``n_min = ⌈(1 − δ)K⌉`` taken from the parameters; :func:`check_task_graph` refuses
a task's ``(K, δ, γ)`` when ``t ≤ K/2`` (or ``t ≤ γK``) for the full graph, or outside the
parameter finder's feasible region for SecAgg+. The full graph is the special case
``k = K − 1`` (:func:`~privacy.secagg_graph.full_graph_params`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable

from privacy.secagg_graph import (
    FULL_GRAPH,
    HARARY_VERSION,
    SecAggPlusParams,
    find_parameters,
    full_graph_params,
)
from protocol.errors import ConfigError, SecAggError

__all__ = [
    "GRAPHS",
    "RevealUnsafe",
    "check_reveal_safe",
    "check_reveal_safe_graph",
    "check_task_graph",
    "check_threshold_floor",
    "full_graph",
    "graph_share_holders",
    "min_included",
]

#: The mask graphs a task may name (``check_task_graph``): the full graph, or SecAgg+'s.
GRAPHS = (FULL_GRAPH, HARARY_VERSION)

Neighbours = Callable[[int], Collection[int]]


class RevealUnsafe(SecAggError):
    """The included set of a round does not satisfy the reveal-safety rule (nobody reveals,
    nobody unmasks; the round is carried forward)."""


def min_included(num_clients: int, dropout_fraction: float) -> int:
    """``n_min = ⌈(1 − δ)K⌉`` (at least 1): the fewest included updates a round may reveal."""
    if num_clients < 1:
        raise ConfigError(f"num_clients {num_clients!r}: must be at least 1")
    if not 0.0 <= dropout_fraction < 1.0:
        raise ConfigError(f"dropout_fraction {dropout_fraction!r}: must lie in [0, 1)")
    return max(1, math.ceil(round((1.0 - dropout_fraction) * num_clients, 9)))


def full_graph(peers: Collection[int]) -> Neighbours:
    """The share holders of each peer in the full graph: every peer (the dealer included)."""
    everyone = frozenset(peers)

    def neighbours(client: int) -> Collection[int]:
        return everyone

    return neighbours


def check_reveal_safe(
    included: Iterable[int],
    peers: Collection[int],
    threshold: int,
    n_min: int,
    neighbours: Neighbours | None = None,
) -> None:
    """Raise :class:`RevealUnsafe` unless revealing for ``included`` is safe (module doc).

    ``included``: the on-chain included clients; ``peers``: the round's peer set ``P_r``
    (an included client that is not a peer holds no key in force: the round fails, and
    nothing is revealed for it); ``threshold``: Shamir's ``t``; ``n_min``: the fewest
    included updates; ``neighbours``: share holders of a client (default: full graph).
    """
    inc = sorted(set(included))
    graph = neighbours or full_graph(peers)
    if len(inc) < n_min:
        raise RevealUnsafe(
            f"{len(inc)} included updates, fewer than n_min = {n_min}: revealing would make "
            "a sum of too few updates public"
        )
    members = set(inc)
    short = {u: len(members & set(graph(u))) for u in inc}
    short = {u: n for u, n in short.items() if n < threshold}
    if short:
        first = dict(list(short.items())[:5])
        raise RevealUnsafe(
            f"included clients with fewer than t = {threshold} included neighbours "
            f"(client: neighbours) {first}"
        )
    if inc:
        seen = {inc[0]}
        frontier = [inc[0]]
        while frontier:
            u = frontier.pop()
            for v in graph(u):
                if v in members and v not in seen:
                    seen.add(v)
                    frontier.append(v)
        if len(seen) != len(members):
            raise RevealUnsafe(
                f"the included subgraph is not connected ({len(seen)} of {len(members)} "
                "reachable from the first included client)"
            )


def check_threshold_floor(num_clients: int, threshold: int, corrupt_fraction: float = 0.0) -> None:
    """Refuse (:class:`ConfigError`) a full-graph task whose threshold is at most ``K/2``
    (or at most the ``γK`` corrupt clients, or 1, where every share is the secret)."""
    if threshold < 2:
        raise ConfigError(
            f"threshold {threshold}: at t = 1 every Shamir share equals the secret "
            "(lower --dropout-fraction)"
        )
    if 2 * threshold <= num_clients:
        raise ConfigError(
            f"threshold {threshold} of {num_clients} clients: t <= K/2 lets two disjoint "
            "halves reconstruct different secrets of one client (use --dropout-fraction "
            "below 0.5)"
        )
    if threshold <= corrupt_fraction * num_clients:
        raise ConfigError(
            f"threshold {threshold}: at most {corrupt_fraction:g} x {num_clients} corrupt "
            "clients could reconstruct any secret alone"
        )


def graph_share_holders(params: SecAggPlusParams, seed: bytes | None = None) -> Neighbours:
    """The share holders of each client in ``params``' graph for the round of ``seed``: its
    neighbours and itself (the full graph needs no seed: everyone)."""
    if params.is_full:
        return full_graph(range(params.clients))
    if seed is None:
        raise ConfigError("a SecAgg+ graph needs the round's seed (graph_seed)")
    holders = [frozenset(nb) | {c} for c, nb in enumerate(params.neighbours(seed))]

    def neighbours(client: int) -> Collection[int]:
        return holders[client] if 0 <= client < len(holders) else frozenset()

    return neighbours


def check_reveal_safe_graph(
    included: Iterable[int],
    peers: Collection[int],
    params: SecAggPlusParams,
    seed: bytes | None = None,
) -> None:
    """:func:`check_reveal_safe` over ``params``' graph: ``|I| >= n_min = ⌈(1 − δ)K⌉``,
    every included client has ``>= t`` included share holders (neighbours or itself), and
    the included subgraph is connected. ``included`` and ``peers`` are client indices
    ``0..K−1`` (the graph's vertices)."""
    check_reveal_safe(
        included, peers, params.threshold, params.n_min, graph_share_holders(params, seed)
    )


def check_task_graph(
    num_clients: int,
    dropout_fraction: float,
    corrupt_fraction: float = 0.0,
    graph: str = FULL_GRAPH,
    sigma: int = 40,
    eta: int = 20,
) -> SecAggPlusParams:
    """The mask graph of a task with ``K`` clients, a fraction δ dropping out and γ corrupt,
    or :class:`ConfigError` saying why the task is refused.

    ``graph="full"``: ``t = ⌈(1 − δ)K⌉`` must pass :func:`check_threshold_floor` (``t >= 2``,
    ``t > K/2``, ``t > γK``). ``graph="harary-sha256-v1"`` (SecAgg+): ``(k, t)`` from
    :func:`~privacy.secagg_graph.find_parameters`, which raises
    :class:`~privacy.secagg_graph.SecAggParameterError` (a :class:`ConfigError`) outside
    its feasible region.
    """
    if graph == FULL_GRAPH:
        t = min_included(num_clients, dropout_fraction)
        check_threshold_floor(num_clients, t, corrupt_fraction)
        return full_graph_params(num_clients, t, corrupt_fraction, dropout_fraction)
    if graph == HARARY_VERSION:
        return find_parameters(num_clients, corrupt_fraction, dropout_fraction, sigma, eta)
    raise ConfigError(f"secagg graph {graph!r}: known {list(GRAPHS)}")
