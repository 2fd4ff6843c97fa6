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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable

from protocol.errors import ConfigError, SecAggError

__all__ = [
    "RevealUnsafe",
    "check_reveal_safe",
    "check_threshold_floor",
    "full_graph",
    "min_included",
]

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
