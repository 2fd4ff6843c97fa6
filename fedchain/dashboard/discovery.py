"""What lives under the dashboard's ``--runs`` directory, and where each view finds it.

:func:`classify` names a directory's kind from the files in it: an experiment
(``experiment.json``), a testnet (``testnet.json``), a run of ``fedchain demo`` or
``fedchain run`` (``summary.json`` or ``events.jsonl``), a scenario set (a folder whose runs
have ``verdict.json``) or a plain folder of runs. :func:`scan` lists a tree of
:class:`Entry` with each entry's status and headline figures, reading only small files
(never the chain). :func:`resolve_under` maps a URL path to a directory inside the root and
refuses anything outside it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedchain.dashboard.sources import read_json
from protocol.errors import ConfigError

#: Sub-directories that never hold runs (stores, node data, the dashboard's own job logs).
SKIP_DIRS = frozenset({"store", "logs", "pids", "anvil", "ipfs", "netem", "figures"})
#: Files that make a directory a run, a testnet or an experiment.
RUN_FILES = ("summary.json", "events.jsonl", "testnet.json", "experiment.json")
#: A run without a ``run_finished`` event or summary counts as running while its event log
#: changed within this many seconds; after that it is "incomplete" (interrupted).
RUNNING_GRACE_SECONDS = 300.0


@dataclass
class Entry:
    """One directory the dashboard can show."""

    rel: str  # path relative to the root, "/"-separated ("" for the root itself)
    kind: str  # demo | scenario | set | folder | testnet | experiment
    name: str
    status: str
    modified: float
    figures: dict[str, Any] = field(default_factory=dict)
    children: list[Entry] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rel": self.rel,
            "kind": self.kind,
            "name": self.name,
            "status": self.status,
            "modified": self.modified,
            "figures": self.figures,
            "children": [c.as_dict() for c in self.children],
        }


def _last_event(path: Path) -> dict[str, Any] | None:
    """The last complete line of an events file (reads at most its last 64 KiB)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            tail = fh.read()
    except OSError:
        return None
    lines = tail.split(b"\n")
    for raw in reversed(lines[:-1]):  # the piece after the last newline is incomplete
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        return event if isinstance(event, dict) else None
    return None


def _first_event(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as fh:
            line = fh.readline(1 << 20)
    except OSError:
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def classify(path: Path) -> str | None:
    """The kind of directory ``path`` is, or None if the dashboard has nothing to show."""
    if not path.is_dir():
        return None
    if (path / "experiment.json").is_file():
        return "experiment"
    if (path / "testnet.json").is_file():
        return "testnet"
    if (path / "summary.json").is_file() or (path / "events.jsonl").is_file():
        summary = read_json(path / "summary.json")
        if summary is not None:
            return "scenario" if (summary.get("scenario") or {}).get("source") else "demo"
        first = _first_event(path / "events.jsonl")
        return "scenario" if first and first.get("run_kind") == "run" else "demo"
    # Folders of runs are looked into one level deep (a deep tree of plain folders would
    # make every listing walk the whole disk).
    children = [c for c in _subdirs(path) if holds_run(c)]
    if not children:
        return None
    return "set" if any((c / "verdict.json").is_file() for c in children) else "folder"


def holds_run(path: Path) -> bool:
    """Does ``path`` itself hold a run, a testnet or an experiment?"""
    return any((path / name).is_file() for name in RUN_FILES)


def _subdirs(path: Path) -> list[Path]:
    try:
        items = sorted(path.iterdir())
    except OSError:
        return []
    return [
        p for p in items if p.is_dir() and not p.name.startswith(".") and p.name not in SKIP_DIRS
    ]


def _mtime(path: Path, *names: str) -> float:
    times = []
    for name in names:
        try:
            times.append((path / name).stat().st_mtime)
        except OSError:
            continue
    if not times:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0
    return max(times)


def run_entry(path: Path, rel: str, kind: str, now: float | None = None) -> Entry:
    """A demo or scenario run: status and headline figures from summary/events."""
    now = time.time() if now is None else now
    modified = _mtime(path, "events.jsonl", "summary.json", "rounds.jsonl")
    summary = read_json(path / "summary.json")
    figures: dict[str, Any] = {}
    if summary is not None:
        status = "stalled" if summary.get("liveness_lost") else "finished"
        if summary.get("safety_violated"):
            status = "safety violated"
        figures = {
            "rounds_finalized": summary.get("rounds_finalized"),
            "rounds_requested": summary.get("rounds_requested"),
            "final_accuracy": summary.get("final_accuracy"),
            "total_gas": summary.get("total_gas"),
            "slashed": [
                c.get("aggregator")
                for c in (summary.get("faults") or {}).get("equivocations") or []
            ],
        }
    else:
        last = _last_event(path / "events.jsonl")
        if last is not None and last.get("kind") == "run_finished":
            status = "finished"
        elif last is not None and last.get("kind") == "stalled":
            status = "stalled"
        elif now - modified <= RUNNING_GRACE_SECONDS:
            status = "running"
        else:
            status = "incomplete"
        first = _first_event(path / "events.jsonl") or {}
        figures = {"rounds_requested": first.get("rounds")}
        if last is not None and last.get("round"):
            figures["round"] = last.get("round")
    verdict = read_json(path / "verdict.json")
    if verdict is not None:
        figures["outcome"] = verdict.get("outcome")
        figures["expectation_met"] = not verdict.get("problems")
    return Entry(rel, kind, path.name, status, modified, figures)


def testnet_entry(path: Path, rel: str) -> Entry:
    """A testnet directory: how many of its processes are alive (PID files only)."""
    from adapters.services import is_running
    from fedchain.testnet import cluster as testnet

    spec = read_json(path / "testnet.json") or {}
    nodes = [str(n.get("name")) for n in spec.get("nodes", [])]
    alive = sum(
        1 for n in nodes if (pid := testnet.node_pid(path, n)) is not None and is_running(pid)
    )
    services = spec.get("services") or {}
    anvil = (services.get("anvil") or {}).get("pid")
    chain_up = isinstance(anvil, int) and is_running(anvil)
    status = "up" if chain_up else "down"
    figures = {"nodes": len(nodes), "nodes_running": alive, "task": spec.get("task")}
    return Entry(rel, "testnet", path.name, status, _mtime(path, "testnet.json"), figures)


def experiment_entry(path: Path, rel: str) -> Entry:
    meta = read_json(path / "experiment.json") or {}
    figures = {
        "experiment": meta.get("name"),
        "units_done": meta.get("units_done"),
        "units_total": meta.get("units_total"),
        "cells": _count_lines(path / "cells.csv") - 1,
        "figures": len(list((path / "figures").glob("*.png"))),
    }
    return Entry(
        rel,
        "experiment",
        str(meta.get("name") or path.name),
        str(meta.get("status") or "unknown"),
        _mtime(path, "experiment.json", "cells.csv", "summary.md"),
        figures,
    )


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def entry(path: Path, rel: str, kind: str, depth: int = 1) -> Entry:
    """The entry of a classified directory (folders and sets with their runs)."""
    if kind in ("demo", "scenario"):
        return run_entry(path, rel, kind)
    if kind == "testnet":
        return testnet_entry(path, rel)
    if kind == "experiment":
        return experiment_entry(path, rel)
    children = scan_children(path, rel, depth) if depth > 0 else []
    status = "running" if any(c.status == "running" for c in children) else "done"
    modified = max((c.modified for c in children), default=_mtime(path))
    figures = {"runs": len(children)}
    return Entry(rel, kind, path.name, status, modified, figures, children)


def scan_children(path: Path, rel: str, depth: int = 1) -> list[Entry]:
    """Entries for every showable sub-directory of ``path``, newest first."""
    out = []
    for child in _subdirs(path):
        kind = classify(child)
        if kind is None:
            continue
        child_rel = f"{rel}/{child.name}" if rel else child.name
        out.append(entry(child, child_rel, kind, depth - 1))
    out.sort(key=lambda e: -e.modified)
    return out


def scan(root: Path) -> list[Entry]:
    """The tree the runs page lists: the root's entries, folders and sets one level deep."""
    return scan_children(root, "", depth=2)


def resolve_under(root: Path, rel: str) -> Path:
    """``root/rel`` if it stays inside ``root`` (symlinks resolved), else ConfigError."""
    base = root.resolve()
    target = (base / rel).resolve()
    if target != base and base not in target.parents:
        raise ConfigError(f"{rel!r}: outside the dashboard's runs directory")
    return target
