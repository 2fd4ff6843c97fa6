"""Running an experiment: units (cell x seed), resume, progress, the run directory.

The run directory (a dashboard reads exactly this layout)::

    RUN/experiment.json                 name, title, kind, grid, seeds, status
                                        (running | finished | interrupted | failed),
                                        started / finished timestamps (UTC, ISO 8601),
                                        units total / done, fedchain version and commit
    RUN/cells.csv                       one row per finished (cell, seed): cell_id, seed,
                                        every parameter, every metric (series as JSON)
    RUN/summary.md                      mean ± std and 95 % CI per cell, key findings
    RUN/figures/*.png                   the figures (matplotlib, Agg)
    RUN/cells/<cell-id>/cell.json       the cell's parameters
    RUN/cells/<cell-id>/seed-<s>/       the unit's own directory: for a fedchain cell the
                                        run directory (summary.json, rounds.jsonl,
                                        events.jsonl; the payload store is dropped)
    RUN/cells/<cell-id>/seed-<s>/result.json
                                        the unit's row, written last and atomically: a unit
                                        is finished if and only if this file exists

Resuming is re-running the same command (same ``--out``): finished units are read back,
any other unit directory (an interrupted unit) is deleted and run again.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from fedchain.experiments.cells import cell_kind, run_unit, validate_spec
from fedchain.experiments.grid import Cell, ExperimentSpec
from protocol.errors import ConfigError
from protocol.metrics import Progress

__all__ = ["RESULT_FILE", "ExperimentRun", "Unit", "check_run", "load_rows", "run_experiment"]

RESULT_FILE = "result.json"
#: A row's bookkeeping columns (the rest are the cell's parameters and its metrics).
ROW_KEYS = ("experiment", "cell_id", "seed", "kind", "unit_seconds", "unit_dir", "same_run_as")
#: Test hook: stop (as if interrupted) after this many units finished in this invocation.
STOP_AFTER_ENV = "FEDCHAIN_EXPERIMENT_STOP_AFTER"


@dataclass(frozen=True)
class Unit:
    """One cell run with one seed."""

    cell: Cell
    seed: int

    def directory(self, root: Path) -> Path:
        return root / "cells" / self.cell.id / f"seed-{self.seed}"


@dataclass
class ExperimentRun:
    """What :func:`run_experiment` did: the directory, rows, and how many units ran now."""

    directory: Path
    rows: list[dict[str, Any]]
    status: str
    ran: int
    reused: int
    wall_seconds: float


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def fedchain_version() -> dict[str, Any]:
    """The package version and, when run from a git checkout, the commit (and if dirty)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("fedchain")
    except PackageNotFoundError:
        ver = "unknown"
    root = Path(__file__).resolve().parents[2]
    commit: str | None = None
    dirty: bool | None = None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        pass
    return {"version": ver, "commit": commit, "dirty": dirty}


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def load_rows(directory: Path) -> list[dict[str, Any]]:
    """Every finished unit's row under ``directory/cells`` (sorted by cell id and seed)."""
    rows = []
    for path in sorted((directory / "cells").glob(f"*/seed-*/{RESULT_FILE}")):
        rows.append(json.loads(path.read_text()))
    return rows


def _csv_value(value: Any) -> Any:
    if isinstance(value, list | dict | tuple):
        return json.dumps(value)
    if value is None:
        return ""
    return value


def write_cells_csv(path: Path, rows: Sequence[Mapping[str, Any]], order: Sequence[str]) -> None:
    """``cells.csv``: the columns ``order`` first, then any other key in first-seen order."""
    columns = list(order)
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(row.get(k)) for k in columns})
    write_atomic(path, buf.getvalue())


def _format_seconds(seconds: float) -> str:
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def same_grid_family(old: Any, new: Mapping[str, Any]) -> bool:
    """True if a run directory holding grid ``old`` may be reused for grid ``new``.

    The name, the cell kind, the fixed settings and the axes' names (in order) must agree;
    an axis may gain or lose values (a new epsilon, a privacy mode this build now runs):
    a cell's id hashes every parameter, so only units with exactly the same parameters
    are reused and the others run.
    """
    if not isinstance(old, Mapping):
        return False
    keep = ("name", "kind", "fixed")
    # through JSON, as experiment.json stores it (tuples become lists)
    old_j, new_j = (json.loads(json.dumps(g, default=str)) for g in (old, new))
    return all(old_j.get(k) == new_j.get(k) for k in keep) and list(old_j.get("axes", {})) == list(
        new_j.get("axes", {})
    )


class _Experiment:
    """The run directory of one experiment and its bookkeeping."""

    def __init__(self, spec: ExperimentSpec, directory: Path, meta: Mapping[str, Any]) -> None:
        self.spec = spec
        self.dir = directory
        self.meta = dict(meta)
        # seed by seed: an experiment stopped early still has every cell for its first seeds
        self.units = [Unit(c, s) for s in spec.seeds for c in spec.cells()]

    def prepare(self) -> None:
        """Create or adopt the directory (refusing one that holds another grid)."""
        path = self.dir / "experiment.json"
        if path.exists():
            try:
                old = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ConfigError(
                    f"--out {str(self.dir)!r}: unreadable experiment.json ({exc})"
                ) from exc
            if not same_grid_family(old.get("grid"), self.spec.definition()):
                raise ConfigError(
                    f"--out {str(self.dir)!r}: holds experiment {old.get('name')!r} with another "
                    "grid; choose another --out (or delete it) to start afresh"
                )
            self.meta["started"] = old.get("started", self.meta["started"])
            self.meta["runs"] = [*old.get("runs", []), self.meta["runs"][-1]]
        elif self.dir.exists() and any(self.dir.iterdir()):
            raise ConfigError(f"--out {str(self.dir)!r}: exists and is not an experiment directory")
        try:
            (self.dir / "cells").mkdir(parents=True, exist_ok=True)
            (self.dir / "figures").mkdir(exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"--out {str(self.dir)!r}: cannot create the run directory ({exc.strerror})"
            ) from exc
        for cell in self.spec.cells():
            cdir = self.dir / "cells" / cell.id
            cdir.mkdir(exist_ok=True)
            write_atomic(
                cdir / "cell.json",
                json.dumps({"id": cell.id, "axes": cell.axes, "params": cell.params}, indent=2)
                + "\n",
            )

    def done(self, unit: Unit) -> bool:
        return (unit.directory(self.dir) / RESULT_FILE).exists()

    def write_meta(self, status: str, done: int, finished: bool = False) -> None:
        self.meta.update(
            status=status,
            units_total=len(self.units),
            units_done=done,
            updated=_now(),
            finished=_now() if finished else None,
        )
        write_atomic(self.dir / "experiment.json", json.dumps(self.meta, indent=2) + "\n")

    def row(self, unit: Unit, metrics: Mapping[str, Any], seconds: float) -> dict[str, Any]:
        kind = cell_kind(unit.cell.params, self.spec.kind)
        return {
            "experiment": self.spec.name,
            "cell_id": unit.cell.id,
            "seed": unit.seed,
            "kind": kind.name,
            **{k: v for k, v in unit.cell.params.items() if k != "kind"},
            **metrics,
            "unit_seconds": round(seconds, 3),
            "unit_dir": str(unit.directory(self.dir).relative_to(self.dir)),
        }

    def finish_unit(
        self, unit: Unit, metrics: Mapping[str, Any], seconds: float, twin: Unit | None = None
    ) -> None:
        """Write the unit's ``result.json``; a unit that shares ``twin``'s run points at
        its directory and names its cell (``same_run_as``)."""
        path = unit.directory(self.dir)
        path.mkdir(parents=True, exist_ok=True)
        row = self.row(unit, metrics, seconds)
        if twin is not None:
            row["unit_dir"] = str(twin.directory(self.dir).relative_to(self.dir))
            row["same_run_as"] = twin.cell.id
        write_atomic(path / RESULT_FILE, json.dumps(row) + "\n")

    def run_key(self, unit: Unit) -> str:
        """What determines the unit's run: its kind, effective parameters and seed."""
        kind = cell_kind(unit.cell.params, self.spec.kind)
        effective = kind.effective({k: v for k, v in unit.cell.params.items() if k != "kind"})
        return json.dumps([kind.name, effective, unit.seed], sort_keys=True, default=str)

    def metrics_of(self, unit: Unit) -> dict[str, Any]:
        """A finished unit's metrics, read back from its ``result.json``."""
        row = json.loads((unit.directory(self.dir) / RESULT_FILE).read_text())
        skip = {*ROW_KEYS, *unit.cell.params}
        return {k: v for k, v in row.items() if k not in skip}

    def current_rows(self) -> list[dict[str, Any]]:
        wanted = {(u.cell.id, u.seed) for u in self.units}
        return [r for r in load_rows(self.dir) if (r["cell_id"], r["seed"]) in wanted]

    def write_csv(self) -> list[dict[str, Any]]:
        rows = self.current_rows()
        order = ["experiment", "cell_id", "seed", "kind", *self.spec.axes]
        write_cells_csv(self.dir / "cells.csv", rows, order)
        return rows


def check_run(spec: ExperimentSpec, jobs: int) -> None:
    """Refuse a bad grid or ``--jobs`` before anything runs (one-line ``ConfigError``)."""
    validate_spec(spec)
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs!r}: must be at least 1")
    if jobs > max_jobs():
        raise ConfigError(
            f"--jobs {jobs!r}: at most {max_jobs()} (4 per core of this machine): each is a "
            "worker process, and more than the cores only adds contention"
        )


def max_jobs() -> int:
    """The most worker processes ``--jobs`` may ask for: four per core."""
    return 4 * (os.cpu_count() or 1)


def run_experiment(
    spec: ExperimentSpec,
    out: str | Path,
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    command: Sequence[str] | None = None,
    on_unit: Callable[[dict[str, Any]], None] | None = None,
    quick: bool = False,
    report_only: bool = False,
) -> ExperimentRun:
    """Run every unfinished unit of ``spec`` into ``out``, then write CSV, figures, summary.

    ``jobs > 1`` runs units in that many worker processes (results are the same: a unit is a
    pure function of its parameters and seed). Ctrl-C (or the ``STOP_AFTER_ENV`` test hook)
    stops after marking the experiment ``interrupted``; finished units are kept.
    """
    check_run(spec, jobs)
    p = progress or Progress()
    directory = Path(out)
    meta = {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "kind": spec.kind,
        "quick": quick,
        "grid": spec.definition(),
        "seeds": list(spec.seeds),
        "metric": spec.metric,
        "plots": [
            {k: v for k, v in vars(pl).items() if v not in (None, (), {})} for pl in spec.plots
        ],
        "started": _now(),
        "fedchain": fedchain_version(),
        "runs": [{"started": _now(), "command": list(command or sys.argv), "jobs": jobs}],
    }
    exp = _Experiment(spec, directory, meta)
    if report_only and not (directory / "experiment.json").exists():
        raise ConfigError(f"--report-only: {str(directory)!r} holds no experiment to report on")
    exp.prepare()
    if report_only:
        return _report_only(spec, exp, p)
    todo = [u for u in exp.units if not exp.done(u)]
    reused = len(exp.units) - len(todo)
    for unit in todo:  # an interrupted unit leaves a directory without result.json: redo it
        shutil.rmtree(unit.directory(directory), ignore_errors=True)
        shutil.rmtree(
            unit.directory(directory).parent / f".seed-{unit.seed}-staging", ignore_errors=True
        )
    exp.write_meta("running", reused)
    total = len(exp.units)
    p.line(
        f"experiment {spec.name}: {len(spec.cells())} cells x {len(spec.seeds)} seeds = "
        f"{total} units"
        + (f" ({reused} already finished, resuming)" if reused else "")
        + f" -> {directory}"
    )
    stop_after = int(os.environ.get(STOP_AFTER_ENV, "0") or 0)
    start = time.perf_counter()
    ran = 0
    durations: list[float] = []
    status = "running"

    # units whose run another cell already made (e.g. every epsilon = inf cell of a privacy
    # grid is the same non-private run): the first one's result serves them all
    runs_done: dict[str, Unit] = {}
    for unit in exp.units:
        if exp.done(unit):
            runs_done.setdefault(exp.run_key(unit), unit)

    def twin_of(unit: Unit) -> Unit | None:
        return runs_done.get(exp.run_key(unit))

    def finished(
        unit: Unit, metrics: Mapping[str, Any], seconds: float, twin: Unit | None = None
    ) -> None:
        nonlocal ran
        exp.finish_unit(unit, metrics, seconds, twin)
        runs_done.setdefault(exp.run_key(unit), twin or unit)
        ran += 1
        if twin is None:  # a shared run took no time: it would skew the ETA
            durations.append(seconds)
        done = reused + ran
        exp.write_meta("running", done)
        exp.write_csv()
        left = total - done
        eta_text = "0s" if not left else "?"
        if left and durations:
            eta_text = _format_seconds(sum(durations) / len(durations) * left / max(1, jobs))
        shown = ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in metrics.items()
            if k == spec.metric
        )
        how = f"the run of {_label(twin.cell)}" if twin else f"{seconds:.1f}s"
        p.line(
            f"[{done}/{total}] {_label(unit.cell)} seed {unit.seed}: {shown} "
            f"({how})  elapsed {_format_seconds(time.perf_counter() - start)}, "
            f"ETA {eta_text}"
        )
        if on_unit is not None:
            on_unit(exp.row(unit, metrics, seconds))
        if stop_after and ran >= stop_after and left:
            raise KeyboardInterrupt

    previous = _terminate_as_interrupt()
    try:
        if jobs == 1:
            for unit in todo:
                twin = twin_of(unit)
                if twin is not None:
                    finished(unit, exp.metrics_of(twin), 0.0, twin)
                    continue
                p.status(f"running {_label(unit.cell)} seed {unit.seed}")
                t0 = time.perf_counter()
                metrics = run_unit(
                    spec.kind, unit.cell.params, unit.seed, str(unit.directory(directory))
                )
                finished(unit, metrics, time.perf_counter() - t0)
        else:
            _run_parallel(spec, exp, todo, jobs, finished, twin_of)
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
    except BaseException:
        exp.write_meta("failed", reused + ran)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    rows = exp.write_csv()
    if status == "finished":
        from fedchain.experiments.report import write_report

        p.status("figures and summary")
        write_report(spec, directory, rows)
    exp.write_meta(status, reused + ran, finished=status == "finished")
    wall = time.perf_counter() - start
    if status == "interrupted":
        p.line(
            f"interrupted: {reused + ran}/{total} units finished; run the same command to resume"
        )
    else:
        p.line(
            f"done: {total} units ({ran} run now, {reused} reused) in {_format_seconds(wall)} "
            f"-> {directory / 'summary.md'}"
        )
    return ExperimentRun(directory, rows, status, ran, reused, wall)


def _report_only(spec: ExperimentSpec, exp: _Experiment, p: Progress) -> ExperimentRun:
    """Figures, summary and cells.csv from the finished units only; nothing runs and the
    status stays what it was (an interrupted grid stays interrupted)."""
    from fedchain.experiments.report import write_report

    rows = exp.write_csv()
    if not rows:
        raise ConfigError(f"--report-only: no finished unit in {str(exp.dir)!r}")
    write_report(spec, exp.dir, rows)
    status = str(json.loads((exp.dir / "experiment.json").read_text()).get("status"))
    if len(rows) < len(exp.units):
        summary = exp.dir / "summary.md"
        title, _, rest = summary.read_text().partition("\n")
        note = (
            f"\n> Partial: {len(rows)} of {len(exp.units)} units finished (experiment "
            f"{status}); statistics are over the finished seeds of each cell.\n"
        )
        summary.write_text(title + "\n" + note + rest)
    p.line(
        f"report of {len(rows)}/{len(exp.units)} finished units ({status}) -> "
        f"{exp.dir / 'summary.md'}"
    )
    return ExperimentRun(exp.dir, rows, status, 0, len(rows), 0.0)


def _terminate_as_interrupt() -> Any:
    """SIGTERM (``kill PID``) stops an experiment like Ctrl-C: marked interrupted, workers
    stopped, finished units kept. Returns the previous handler (None off the main thread)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _run_parallel(
    spec: ExperimentSpec,
    exp: _Experiment,
    todo: list[Unit],
    jobs: int,
    finished: Callable[..., None],
    twin_of: Callable[[Unit], Unit | None],
) -> None:
    """Run units on ``jobs`` worker processes (spawned: no state shared with this one). A
    unit whose run another unit already made is finished from it; one whose run is in
    flight waits for it."""
    directory = exp.dir
    pending = list(todo)
    running: dict[Future[dict[str, Any]], tuple[Unit, float]] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    flying = {exp.run_key(u) for u, _ in running.values()}
                    ready = [u for u in pending if exp.run_key(u) not in flying]
                    if not ready:
                        break
                    unit = ready[0]
                    pending.remove(unit)
                    twin = twin_of(unit)
                    if twin is not None:
                        finished(unit, exp.metrics_of(twin), 0.0, twin)
                        continue
                    fut = pool.submit(
                        run_unit,
                        spec.kind,
                        dict(unit.cell.params),
                        unit.seed,
                        str(unit.directory(directory)),
                    )
                    running[fut] = (unit, time.perf_counter())
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    unit, t0 = running.pop(fut)
                    finished(unit, fut.result(), time.perf_counter() - t0)
        except BaseException:
            # stop the workers now: their units have no result.json and are redone on resume
            workers = list(getattr(pool, "_processes", {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in workers:
                proc.terminate()
            raise


def _label(cell: Cell) -> str:
    return " ".join(f"{k}={v}" for k, v in cell.axes.items()) or cell.id
