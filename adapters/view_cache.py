"""Per-block cache of view-call outcomes.

Nodes poll the same views many times while the chain sits at one block, and state only
changes with a new block, so the outcome of a view (its result, or its typed revert) is kept
under ``(block number, key)`` until the chain moves on. Only entries of the latest block seen
are kept; :meth:`ViewCache.clear` drops everything (our own receipts, mining, snapshot
reverts). Not detected: another process reverting the node to a snapshot and re-mining the
same block numbers.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable
from typing import Any

from protocol.errors import ContractRevert

__all__ = ["VIEW_CACHE_MAX", "ViewCache"]

#: Upper bound on cached view results per block (distinct contract + calldata pairs).
VIEW_CACHE_MAX = 4096

#: A cached outcome: (True, result) or (False, typed revert to raise again).
Outcome = tuple[bool, Any]


class ViewCache:
    """Outcomes of view calls at one block, keyed by caller-chosen hashable keys."""

    def __init__(self, max_entries: int = VIEW_CACHE_MAX) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: dict[Hashable, Outcome] = {}
        self._block = -1
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every cached outcome."""
        with self._lock:
            self._entries.clear()
            self._block = -1

    def lookup(self, block: int, key: Hashable, compute: Callable[[], Outcome]) -> Any:
        """The outcome of ``key`` at ``block``: replayed from the cache, or ``compute()``-d and
        stored (unless the cache was cleared or moved to a newer block in the meantime)."""
        with self._lock:
            if block != self._block:
                self._entries.clear()
                self._block = block
            entry = self._entries.get(key)
            if entry is not None:
                self.hits += 1
        if entry is not None:
            return replay(entry)
        entry = compute()
        with self._lock:
            self.misses += 1
            if self._block == block and len(self._entries) < self.max_entries:
                self._entries[key] = entry
        return replay(entry)


def replay(entry: Outcome) -> Any:
    """A cached outcome: a private copy of the result, or a fresh typed revert raised."""
    ok, value = entry
    if ok:
        return copy.deepcopy(value) if isinstance(value, list | tuple | dict) else value
    assert isinstance(value, ContractRevert)
    raise type(value)(str(value), value.error_args)
