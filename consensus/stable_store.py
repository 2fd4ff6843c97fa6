"""Stable storage for a PBFT replica's signed state: a small interface, two adapters.

The state machine stays pure: it hands its drivers :class:`~consensus.pbft.Persist` actions
(the bytes of :func:`consensus.pbft.stable.snapshot`), and the driver writes them through a
:class:`StableStore` before it sends anything else of the same batch. A restarted replica is
built from ``store.load()``.

* :class:`MemoryStore` keeps the bytes in memory; tests simulate a crash by dropping the
  replica object and keeping the store object.
* :class:`FileStore` writes one file atomically and durably: a temporary file in the same
  directory, ``fsync``, ``rename`` over the old file, ``fsync`` of the directory. A crash at
  any point leaves either the old or the new snapshot, never a torn one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["FileStore", "MemoryStore", "StableStore", "StoreStats"]


@dataclass
class StoreStats:
    """Writes, bytes written and seconds spent writing (for the cost figures in docs/pbft.md)."""

    writes: int = 0
    bytes: int = 0
    seconds: float = 0.0
    last_size: int = 0
    max_size: int = 0

    def record(self, size: int, seconds: float) -> None:
        self.writes += 1
        self.bytes += size
        self.seconds += seconds
        self.last_size = size
        self.max_size = max(self.max_size, size)


class StableStore(Protocol):
    """Where one replica's last signed state lives."""

    stats: StoreStats

    def load(self) -> bytes | None:
        """The last state saved, or None if nothing was ever saved."""
        ...

    def save(self, state: bytes) -> None:
        """Replace the saved state; durable when this returns."""
        ...


class MemoryStore:
    """In-memory stable storage (survives a simulated crash as long as the object does)."""

    def __init__(self) -> None:
        self._state: bytes | None = None
        self.stats = StoreStats()

    def load(self) -> bytes | None:
        return self._state

    def save(self, state: bytes) -> None:
        t = time.perf_counter()
        self._state = bytes(state)
        self.stats.record(len(state), time.perf_counter() - t)


class FileStore:
    """Stable storage in one file (``path``), replaced atomically and fsynced on every save."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stats = StoreStats()

    def load(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def save(self, state: bytes) -> None:
        t = time.perf_counter()
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(state)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)  # the rename itself is durable
        finally:
            os.close(dfd)
        self.stats.record(len(state), time.perf_counter() - t)
