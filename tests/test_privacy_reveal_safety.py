"""The reveal-safety rule (privacy/reveal_safety.py): n_min, t included neighbours,
connectivity, and the threshold floor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from privacy.reveal_safety import (
    RevealUnsafe,
    check_reveal_safe,
    check_threshold_floor,
    full_graph,
    min_included,
)
from protocol.errors import ConfigError


def ring(k: int, width: int):  # each client holds shares of its `width` nearest on each side
    def neighbours(u: int) -> set[int]:
        return {(u + d) % k for d in range(-width, width + 1)}

    return neighbours


def test_full_graph_needs_n_min_included() -> None:
    peers = range(10)
    check_reveal_safe(range(7), peers, 7, 7)
    with pytest.raises(RevealUnsafe, match="fewer than n_min"):
        check_reveal_safe(range(6), peers, 7, 7)
    with pytest.raises(RevealUnsafe, match="fewer than n_min"):
        check_reveal_safe([3], peers, 1, 7)


def test_every_included_client_needs_t_included_neighbours() -> None:
    graph = ring(12, 2)  # 5 holders each, the dealer included
    check_reveal_safe(range(12), range(12), 5, 6, graph)
    with pytest.raises(RevealUnsafe, match="fewer than t = 5 included neighbours"):
        check_reveal_safe([i for i in range(12) if i != 1], range(12), 5, 6, graph)


def test_the_included_subgraph_must_be_connected() -> None:
    graph = ring(12, 1)
    # two arcs of the ring with a gap on both sides: each member has 2 neighbours in it
    with pytest.raises(RevealUnsafe, match="not connected"):
        check_reveal_safe([0, 1, 2, 3, 6, 7, 8, 9], range(12), 2, 8, graph)


@given(st.integers(2, 400), st.floats(0.0, 0.99))
def test_floor_refuses_exactly_the_thresholds_at_or_below_half(k: int, rho: float) -> None:
    t = min_included(k, rho)
    if t >= 2 and 2 * t > k:
        check_threshold_floor(k, t)
    else:
        with pytest.raises(ConfigError):
            check_threshold_floor(k, t)


def test_floor_with_corrupt_clients() -> None:
    with pytest.raises(ConfigError, match="corrupt"):
        check_threshold_floor(10, 6, corrupt_fraction=0.6)
    check_threshold_floor(10, 7, corrupt_fraction=0.6)
    assert set(full_graph([1, 2])(1)) == {1, 2}
