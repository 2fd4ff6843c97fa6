"""Gas used per operation name: what a run's summary reports (exact: gas is deterministic)."""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, field

__all__ = ["GasLedger"]


@dataclass
class GasLedger:
    """Gas used per operation name (only successful transactions are recorded)."""

    _records: dict[str, list[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, op: str, gas_used: int) -> None:
        with self._lock:
            self._records.setdefault(op, []).append(int(gas_used))

    def values(self, op: str) -> list[int]:
        """Gas of every recorded ``op`` transaction, in order."""
        with self._lock:
            return list(self._records.get(op, []))

    def count(self, op: str) -> int:
        return len(self.values(op))

    def total(self, op: str) -> int:
        return sum(self.values(op))

    @property
    def ops(self) -> list[str]:
        with self._lock:
            return sorted(self._records)

    def reset(self) -> None:
        with self._lock:
            self._records.clear()

    def summary(self) -> dict[str, dict[str, int | float]]:
        """``{op: {count, total, mean, min, max}}``; JSON-serialisable."""
        with self._lock:
            return {
                op: {
                    "count": len(vals),
                    "total": sum(vals),
                    "mean": float(statistics.fmean(vals)),
                    "min": min(vals),
                    "max": max(vals),
                }
                for op, vals in sorted(self._records.items())
                if vals
            }
