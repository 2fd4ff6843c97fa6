"""The dashboard's pages as objects that refresh from disk (or the chain) and render panels.

Every page has ``refresh()`` (read what changed; True if something did), ``panels()`` (the
HTML of each panel, rendered once per change) and ``version``. The server serves the first
render as a page and then streams the panels whose HTML changed. :func:`open_page` picks the
page for a directory under the runs root from its kind (:mod:`fedchain.dashboard.discovery`).
"""

from __future__ import annotations

import base64
import csv
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from markupsafe import Markup

from fedchain.dashboard import discovery, render
from fedchain.dashboard.sources import RunSource, read_json
from fedchain.dashboard.testnet_view import TestnetSource
from protocol.errors import ConfigError


def views_macro(name: str, *args: Any) -> str:
    """A panel macro of ``templates/views.html``, rendered."""
    module = render.environment().get_template("views.html").module
    return str(getattr(module, name)(*args))


class Page:
    """Base: a title, a layout, panels cached per version."""

    title = ""
    layout = "run"
    #: Minimum seconds between two refreshes (directory scans are throttled).
    min_interval = 0.0
    #: True if ``refresh`` does network I/O (the server then runs it in a worker thread).
    blocking = False

    def __init__(self) -> None:
        self.version = 0
        self._rendered: tuple[int, dict[str, str]] | None = None
        self._last_refresh = 0.0

    def refresh(self) -> bool:
        now = time.monotonic()
        if now - self._last_refresh < self.min_interval and self._rendered is not None:
            return False
        self._last_refresh = now
        changed = self._refresh()
        if changed:
            self.version += 1
        return changed

    def _refresh(self) -> bool:
        raise NotImplementedError

    def panels(self) -> dict[str, str]:
        if self._rendered is None or self._rendered[0] != self.version:
            self._rendered = (self.version, self._render())
        return self._rendered[1]

    def _render(self) -> dict[str, str]:
        raise NotImplementedError

    def stream_info(self) -> dict[str, Any]:
        """What each streamed update carries besides panels (event count, last event time)."""
        return {"version": self.version}

    def close(self) -> None:
        """Release what the page holds (threads, worker processes)."""


class RunPage(Page):
    """A demo or scenario run: the live view of :func:`render.run_panels`."""

    def __init__(self, path: Path, rel: str) -> None:
        super().__init__()
        self.rel = rel
        self.source = RunSource(path)
        self.title = path.name

    def _refresh(self) -> bool:
        return self.source.refresh()

    def snapshot(self) -> dict[str, Any]:
        return self.source.view.snapshot()

    def _render(self) -> dict[str, str]:
        return render.run_panels(self.snapshot(), self.rel, now=time.time())

    def stream_info(self) -> dict[str, Any]:
        view = self.source.view
        return {"version": self.version, "n_events": view.n_events, "last_t": view.last_t}


class TestnetPage(Page):
    """A testnet: its processes (with kill/start buttons) and the live view of its chain."""

    min_interval = 0.05

    def __init__(self, path: Path, rel: str, interactive: bool = True) -> None:
        super().__init__()
        self.rel = rel
        self.interactive = interactive
        self.source = TestnetSource(path)
        self.title = f"testnet {path.name}"

    def _refresh(self) -> bool:
        return self.source.refresh()

    def close(self) -> None:
        self.source.close()

    def snapshot(self) -> dict[str, Any]:
        snap = self.source.view.snapshot()
        snap["processes"] = self.source.processes
        snap["chain"] = self.source.chain_status
        return snap

    def _render(self) -> dict[str, str]:
        nodes = views_macro(
            "nodes",
            self.source.processes,
            self.source.chain_status,
            self.source.chain_error,
            self.rel,
            self.interactive,
        )
        return {"nodes": nodes, **render.run_panels(self.snapshot(), self.rel, now=time.time())}

    def stream_info(self) -> dict[str, Any]:
        view = self.source.view
        return {"version": self.version, "n_events": view.n_events, "last_t": view.last_t}


def _tree_stamp(path: Path) -> tuple[Any, ...]:
    """Changes when a run below ``path`` (one level) is added, written or finishes."""
    stamp = []
    for child in sorted(path.iterdir()) if path.is_dir() else []:
        for name in ("summary.json", "verdict.json", "events.jsonl", "testnet.json"):
            try:
                st = (child / name).stat()
            except OSError:
                continue
            stamp.append((child.name, name, st.st_size, st.st_mtime_ns))
    return tuple(stamp)


class SetPage(Page):
    """A scenario set (or a folder of runs): the detection table and the runs in it."""

    layout = "wide"
    min_interval = 1.0

    def __init__(self, path: Path, rel: str, root: Path, links: bool = True) -> None:
        super().__init__()
        self.path, self.rel, self.root, self.links = path, rel, root, links
        self.title = path.name
        self._stamp: tuple[Any, ...] | None = None

    def _refresh(self) -> bool:
        stamp = _tree_stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        return True

    def rows(self) -> list[dict[str, Any]]:
        from fedchain.report.detection import collect

        rows = collect([self.path])
        for r in rows:
            r["link"] = Path(r["run_dir"]).resolve().relative_to(self.root.resolve()).as_posix()
        return rows

    def _render(self) -> dict[str, str]:
        from fedchain.report.detection import COLUMNS

        entries = discovery.scan_children(self.path, self.rel, depth=1)
        return {
            "detection": views_macro("detection", self.rows(), COLUMNS, self.links),
            "runs": views_macro("runs_list", entries, self.rel or "."),
        }


class IndexPage(Page):
    """Every run, set, testnet and experiment under the root."""

    layout = "wide"
    min_interval = 1.0

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.title = "runs"
        self._last: str | None = None

    def _refresh(self) -> bool:
        html = views_macro("runs_list", discovery.scan(self.root), str(self.root))
        if html == self._last:
            return False
        self._last = html
        return True

    def _render(self) -> dict[str, str]:
        return {"runs": self._last or ""}


def markdown_html(text: str, image_src: Callable[[str], str | None] | None = None) -> str:
    """Markdown as HTML (CommonMark plus tables; raw HTML in the source is escaped).

    ``image_src`` maps each image's relative path (``figures/x.png`` in an experiment's
    ``summary.md``) to the URL the page can load; an image it maps to None is dropped to
    its alt text. Absolute and external image URLs are always dropped (offline, no
    third-party requests)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    for token in tokens:
        for child in token.children or []:
            if child.type != "image":
                continue
            src = str(child.attrGet("src") or "")
            local = src and "://" not in src and not src.startswith(("/", "data:", "//"))
            url = image_src(src) if local and image_src is not None else None
            if url is None:
                child.type, child.tag, child.nesting = "text", "", 0
                child.content = child.content or src
                child.children = None
            else:
                child.attrSet("src", url)
    return str(md.renderer.render(tokens, md.options, {}))


def read_csv(path: Path, limit: int = 2000) -> tuple[list[str], list[list[str]]]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return [], []
    rows = list(csv.reader(io.StringIO(text)))
    return (rows[0] if rows else []), rows[1 : limit + 1]


def experiment_progress(
    meta: dict[str, Any], unit_seconds: list[float], running: int = 0
) -> dict[str, Any]:
    """How far an experiment is, from its ``experiment.json`` and finished units' seconds.

    ``done``/``total`` units, ``percent``, ``running`` (unit directories without a result
    yet) and, while it runs, ``eta_seconds``: the mean unit time times the units left over
    the worker processes of the current invocation (as the CLI's progress line estimates).
    """
    total = _count(meta.get("units_total"))
    done = min(_count(meta.get("units_done")), total) if total else _count(meta.get("units_done"))
    status = str(meta.get("status") or "unknown")
    runs = meta.get("runs") if isinstance(meta.get("runs"), list) else []
    last = runs[-1] if runs and isinstance(runs[-1], dict) else {}
    jobs = max(1, _count(last.get("jobs")) or 1)
    left = max(0, total - done)
    eta = None
    if status == "running" and unit_seconds and left:
        eta = sum(unit_seconds) / len(unit_seconds) * left / jobs
    return {
        "status": status,
        "done": done,
        "total": total,
        "percent": round(100.0 * done / total, 1) if total else 0.0,
        "running": running if status == "running" else 0,
        "eta_seconds": eta,
        "jobs": jobs,
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _seconds(header: list[str], rows: list[list[str]], column: str = "unit_seconds") -> list[float]:
    if column not in header:
        return []
    i = header.index(column)
    out = []
    for row in rows:
        try:
            out.append(float(row[i]))
        except (IndexError, ValueError):
            continue
    return out


class ExperimentPage(Page):
    """An experiment run directory: progress, summary.md, figures, cells.csv, cell runs.

    While the experiment runs, the page follows its progress (units done of the total, the
    units running now with links to their live run views, an ETA); its results appear as
    the experiment writes them (``cells.csv`` after each unit, figures and ``summary.md``
    at the end).
    """

    layout = "wide"
    min_interval = 1.0

    def __init__(self, path: Path, rel: str, *, inline_images: bool = False) -> None:
        super().__init__()
        self.path, self.rel, self.inline_images = path, rel, inline_images
        self.title = f"experiment {path.name}"
        self._stamp: tuple[Any, ...] | None = None

    def _refresh(self) -> bool:
        stamp = []
        for p in [
            self.path / "experiment.json",
            self.path / "cells.csv",
            self.path / "summary.md",
            *sorted((self.path / "figures").glob("*.png")),
        ]:
            try:
                st = p.stat()
            except OSError:
                continue
            stamp.append((p.name, st.st_size, st.st_mtime_ns))
        if (self.path / "cells").is_dir():
            stamp.append(("cells", len(list((self.path / "cells").iterdir())), 0))
        for unit in self.running_units():  # their live round counts
            stamp.append((unit.name, *_stat(unit / "events.jsonl")))
        if tuple(stamp) == self._stamp:
            return False
        self._stamp = tuple(stamp)
        return True

    def running_units(self) -> list[Path]:
        """Unit directories without a ``result.json`` yet (running, or left by a stop)."""
        return [
            d
            for d in sorted((self.path / "cells").glob("*/seed-*"))
            if d.is_dir() and not (d / "result.json").exists()
        ]

    def image_src(self, png: Path) -> str:
        if self.inline_images:
            return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
        return f"/file/{self.rel}/{png.resolve().relative_to(self.path.resolve()).as_posix()}"

    def summary_image(self, src: str) -> str | None:
        """The URL of an image ``summary.md`` links relatively (a PNG inside this
        experiment's directory), else None."""
        try:
            png = discovery.resolve_under(self.path, src)
        except ConfigError:
            return None
        return self.image_src(png) if png.suffix.lower() == ".png" and png.is_file() else None

    def _render(self) -> dict[str, str]:
        meta = read_json(self.path / "experiment.json") or {}
        header, rows = read_csv(self.path / "cells.csv")
        figures = [
            (p.name, self.image_src(p)) for p in sorted((self.path / "figures").glob("*.png"))
        ]
        try:
            summary = (self.path / "summary.md").read_text(encoding="utf-8", errors="replace")
        except OSError:
            summary = "*(no summary.md yet)*"
        running = self.running_units()
        progress = experiment_progress(meta, _seconds(header, rows), len(running))
        units = []
        if progress["status"] == "running" and not self.inline_images:
            for d in running:
                rel = f"{self.rel}/{d.relative_to(self.path).as_posix()}"
                kind = discovery.classify(d)
                units.append(
                    discovery.run_entry(d, rel, kind)
                    if kind in ("demo", "scenario")
                    else discovery.Entry(rel, "unit", rel, "running", 0.0)
                )
        panels = {
            "experiment": views_macro("experiment_meta", meta, progress, units),
            "summary": views_macro("markdown", Markup(markdown_html(summary, self.summary_image))),
            "figures": views_macro("figures", figures),
            "cells": views_macro("csv_table", header, rows, "cells.csv"),
        }
        if not self.inline_images and (self.path / "cells").is_dir():
            entries = discovery.scan_children(self.path / "cells", f"{self.rel}/cells", depth=2)
            panels["cell_runs"] = views_macro("runs_list", entries, f"{self.rel}/cells")
        return panels


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_size, st.st_mtime_ns)


def open_page(root: Path, rel: str) -> Page:
    """The page of ``root/rel`` by its kind (``ConfigError`` if there is nothing to show)."""

    path = discovery.resolve_under(root, rel)
    rel = path.relative_to(root.resolve()).as_posix() if path != root.resolve() else ""
    if not rel:
        return IndexPage(root)
    kind = discovery.classify(path)
    if kind in ("demo", "scenario"):
        return RunPage(path, rel)
    if kind == "testnet":
        return TestnetPage(path, rel)
    if kind == "experiment":
        return ExperimentPage(path, rel)
    if kind in ("set", "folder"):
        return SetPage(path, rel, root)
    raise ConfigError(f"{rel!r}: no run, scenario set, testnet or experiment there")
