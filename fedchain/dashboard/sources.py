"""Following a run directory as it is written: new events, records and the summary.

:class:`LineTail` reads only the complete JSON lines appended to a file since the last
call (a writer's half-written last line waits for its newline; a file that shrank is read
again from the start). :class:`RunSource` keeps a :class:`~fedchain.dashboard.model.RunView`
of one run directory up to date from ``events.jsonl``, ``rounds.jsonl``, ``summary.json``
and ``verdict.json``; :meth:`RunSource.refresh` costs a few ``stat`` calls when nothing
changed, so the server can poll it every few tens of milliseconds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fedchain.dashboard.model import RunView


class LineTail:
    """The complete JSON-object lines appended to ``path`` since the last :meth:`read`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.inode: int | None = None
        self.restarted = False  # set when the file was replaced or truncated

    def read(self, limit: int = 8 << 20) -> list[dict[str, Any]]:
        """New complete lines as dicts (non-JSON lines are skipped), at most ``limit`` bytes."""
        self.restarted = False
        if not inside(self.path, self.path.parent):
            return []
        try:
            st = self.path.stat()
        except OSError:
            return []
        if st.st_size < self.offset or (self.inode is not None and st.st_ino != self.inode):
            self.offset = 0
            self.restarted = True
        self.inode = st.st_ino
        if st.st_size == self.offset:
            return []
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read(limit)
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for raw in chunk[:end].split(b"\n"):
            if not raw.strip().startswith(b"{"):
                continue
            try:
                item = json.loads(raw)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
        return out


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None if missing, unreadable, half-written, or a symlink that
    leads out of its own directory (a run's files are its own: the listing and the pages
    never read a file elsewhere through a planted link)."""
    if not inside(path, path.parent):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def wrong_type(path: Path) -> str | None:
    """Why ``path`` is valid JSON that is not an object (None if it is an object, missing,
    unreadable or half-written: those a reader waits out)."""
    if not inside(path, path.parent):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict):
        return None
    return f"{path.name} holds a JSON {type(data).__name__}, not an object"


def inside(path: Path, root: Path | None) -> bool:
    """Does ``path`` (symlinks resolved) stay inside ``root`` (None: no root to keep to)?"""
    if root is None:
        return True
    try:
        target = path.resolve()
        base = root.resolve()
    except OSError:
        return False
    return target == base or base in target.parents


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON-object line of ``path``."""
    tail = LineTail(path)
    out: list[dict[str, Any]] = []
    while batch := tail.read():
        out += batch
    return out


class RunSource:
    """A run directory followed into a :class:`RunView` (``version`` counts changes).

    With a ``root`` (the dashboard's runs directory), a file that resolves outside it (a
    symlinked ``summary.json``) is not read, as ``/file/`` would not serve it. ``problem``
    says why the directory is unreadable (a file of the wrong type), else None."""

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        self.root = root
        self.problem: str | None = None
        self.events = LineTail(path / "events.jsonl")
        self.view = RunView()
        self.version = 0
        self._stamps: dict[str, tuple[int, int] | None] = {}

    def _changed(self, name: str) -> bool:
        stamp = _stamp(self.path / name) if inside(self.path / name, self.root) else None
        if self._stamps.get(name, (-1, -1)) == stamp:
            return False
        self._stamps[name] = stamp
        return stamp is not None

    def refresh(self) -> bool:
        """Read what changed since the last call; True if the view changed."""
        changed = False
        if not inside(self.events.path, self.root):
            return False
        while batch := self.events.read():
            if self.events.restarted:  # the run directory was rewritten: start over
                self.view = RunView()
                self._stamps.clear()
            self.view.apply_all(batch)
            changed = True
        if self._changed("rounds.jsonl"):
            self.view.merge_records(read_jsonl(self.path / "rounds.jsonl"))
            changed = True
        if self._changed("summary.json") | self._changed("verdict.json"):
            names = ("summary.json", "verdict.json")
            problems = [p for n in names if (p := wrong_type(self.path / n))]
            changed |= (problems[0] if problems else None) != self.problem
            self.problem = problems[0] if problems else None
            summary = read_json(self.path / "summary.json")
            if summary is not None and self.problem is None:
                verdict = read_json(self.path / "verdict.json")
                if not inside(self.path / "verdict.json", self.root):
                    verdict = None
                self.view.merge_summary(summary, verdict)
                changed = True
        if changed:
            self.version += 1
        return changed

    def exists(self) -> bool:
        return os.path.isdir(self.path)
