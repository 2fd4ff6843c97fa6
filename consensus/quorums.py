"""Byzantine quorum thresholds, defined once for the whole project.

For a committee of ``n`` replicas PBFT tolerates ``f = max_faulty(n) = (n - 1) // 3`` Byzantine
members. Two thresholds follow from it:

* ``commit_quorum(n) = n - f``: any two such sets intersect in at least ``n - 2f >= f + 1``
  replicas, hence in at least one correct replica. It equals ``2f + 1`` when ``n = 3f + 1`` and
  is larger otherwise (for ``n = 5``, ``f = 1`` and the quorum is 4, not 3: ``2f + 1`` would let
  two quorums of 3 intersect only in one, possibly faulty, replica).
* ``weak_quorum(n) = f + 1``: at least one member of any such set is correct (used to join a
  view change that someone correct asked for).

Everything else in the project (the PBFT state machine, certificates, the contract's
``n - f`` check) must import these rather than re-derive them.
"""

from __future__ import annotations

from protocol.errors import ConsensusError

__all__ = ["commit_quorum", "max_faulty", "weak_quorum"]


def _check(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConsensusError(f"committee size must be a positive integer, got {n!r}")


def max_faulty(n: int) -> int:
    """Largest number of Byzantine replicas a committee of ``n`` tolerates: ``(n - 1) // 3``."""
    _check(n)
    return (n - 1) // 3


def commit_quorum(n: int) -> int:
    """Size of a commit (and prepare, checkpoint, view-change) quorum: ``n - f``."""
    return n - max_faulty(n)


def weak_quorum(n: int) -> int:
    """Smallest set guaranteed to contain a correct replica: ``f + 1``."""
    return max_faulty(n) + 1
