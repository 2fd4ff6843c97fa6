"""Experiment grids: fixed settings, axes, seeds and plots; their cells; the TOML format.

An experiment is a grid: every cell sets each *axis* to one of its values on top of the
*fixed* settings, and runs once per seed. A custom grid is a TOML file::

    [experiment]
    name = "ipm-vs-median"       # default: the file's stem
    title = "IPM against the median"
    kind = "fedchain"            # fedchain | centralized | recovery (see cells.py)
    seeds = 3                    # a count (seeds 0..2) or a list, e.g. [0, 5, 7]
    metric = "final_accuracy"    # the metric summary.md leads with

    [fixed]                      # settings of every cell (the kind's parameters)
    clients = 20
    rounds = 10
    byzantine = 0.2

    [grid]                       # axes: the cells are the cross product of these lists
    rule = ["fedavg", "median"]
    attack = ["none", "inner_product_manipulation(epsilon=10)"]

    [[plot]]                     # optional; default: the metric against the first axis
    kind = "heatmap"             # heatmap | lines | rounds | bars | images
    x = "rule"
    y = "attack"

Values name things the way the command line does; an attack or a defence with parameters
is written ``name(key=value, ...)`` (values in TOML syntax). Every key and value is checked
before any cell runs; a bad one stops with one line naming the file, the table, the key and
the value (``FILE [grid] rule = 'foo': ...``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.errors import ConfigError

__all__ = [
    "PLOT_KINDS",
    "Cell",
    "ExperimentSpec",
    "PlotSpec",
    "cell_id",
    "load_grid",
    "parse_call",
    "parse_seeds",
    "spec_from_dict",
]

#: Figure kinds (see plots.py): ``heatmap`` (x by y, colour = metric), ``lines`` (metric
#: against a numeric x, one line per ``series`` value, 95 % CI bars), ``rounds`` (accuracy
#: over rounds for selected cells), ``bars`` (metrics per x value, 95 % CI bars), ``images``
#: (recovery cells' reconstructions next to the originals).
PLOT_KINDS = ("heatmap", "lines", "rounds", "bars", "images")
PLOT_KEYS: dict[str, type] = {
    "kind": str,
    "x": str,
    "y": str,
    "series": str,
    "metric": str,
    "metrics": list,
    "select": dict,
    "title": str,
    "file": str,
    "logx": bool,
}


@dataclass(frozen=True)
class PlotSpec:
    """One figure of an experiment (fields as in the ``[[plot]]`` table)."""

    kind: str
    x: str | None = None
    y: str | None = None
    series: str | None = None
    metrics: tuple[str, ...] = ()
    select: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    title: str | None = None
    file: str | None = None
    logx: bool | None = None

    def filename(self, index: int) -> str:
        if self.file:
            return self.file if self.file.endswith(".png") else self.file + ".png"
        parts = [self.kind, *(p for p in (self.y, self.x, self.series) if p)]
        return f"{index:02d}-" + "-".join(parts) + ".png"


@dataclass(frozen=True)
class Cell:
    """One grid point: its id and every parameter (fixed settings and axis values)."""

    id: str
    axes: Mapping[str, Any]
    params: Mapping[str, Any]


@dataclass(frozen=True)
class ExperimentSpec:
    """An experiment: name, cell kind, fixed settings, axes (ordered), seeds, figures."""

    name: str
    kind: str
    fixed: Mapping[str, Any]
    axes: Mapping[str, tuple[Any, ...]]
    seeds: tuple[int, ...]
    title: str = ""
    description: str = ""
    metric: str = "final_accuracy"
    plots: tuple[PlotSpec, ...] = ()
    source: str | None = None

    def cells(self) -> list[Cell]:
        """Every grid point, in axis order (the first axis varies slowest)."""
        names = list(self.axes)
        out = []
        for combo in itertools.product(*(self.axes[n] for n in names)):
            axes = dict(zip(names, combo, strict=True))
            params = {**self.fixed, **axes}
            out.append(Cell(cell_id(axes, params), axes, params))
        return out

    def definition(self) -> dict[str, Any]:
        """What identifies the grid (seeds excluded: a run may add seeds and resume)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "fixed": dict(self.fixed),
            "axes": {k: list(v) for k, v in self.axes.items()},
        }


def _slug(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    text = re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")
    return text[:40] or "x"


def cell_id(axes: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """A readable, filesystem-safe id: the axis values, then a hash of every parameter.

    The hash keeps ids of different grids apart (same axis values, other fixed settings),
    so a finished cell is only ever reused for exactly the same parameters.
    """
    digest = hashlib.sha256(
        json.dumps(dict(params), sort_keys=True, default=str).encode()
    ).hexdigest()[:8]
    readable = "_".join(f"{_slug(k)}-{_slug(v)}" for k, v in axes.items())
    return f"{readable}_{digest}" if readable else digest


_CALL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_+-]*)\s*(?:\((.*)\))?\s*$", re.S)


def parse_call(text: str) -> tuple[str, dict[str, Any]]:
    """Parse ``name`` or ``name(key=value, ...)`` (values in TOML syntax) into its parts.

    ``"inner_product_manipulation(epsilon=10)"`` -> ``("inner_product_manipulation",
    {"epsilon": 10})``. Raises :class:`ConfigError` with the reason on a malformed text.
    """
    m = _CALL.match(text)
    if m is None:
        raise ConfigError("expected NAME or NAME(key=value, ...)")
    name, inner = m.group(1), m.group(2)
    if inner is None or not inner.strip():
        return name, {}
    try:
        table = tomllib.loads(f"v = {{ {inner} }}")["v"]
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"bad parameters in {text!r} ({exc})") from exc
    return name, dict(table)


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"{where} seeds = {value!r}: expected a count >= 1 or a list")
        return tuple(range(value))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    ):
        if len(set(value)) != len(value):
            raise ConfigError(f"{where} seeds = {value!r}: seeds repeat")
        return tuple(value)
    raise ConfigError(
        f"{where} seeds = {value!r}: expected a count >= 1 or a list of distinct seeds >= 0"
    )


def parse_seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: a count (``3`` -> 0, 1, 2) or a comma list (``0,5,7``)."""
    problem = "expected a count >= 1 (3) or a comma list of distinct seeds >= 0 (0,5,7)"
    try:
        value: Any = [int(p) for p in text.split(",") if p.strip()] if "," in text else int(text)
        return _seeds(value, "--seeds")
    except (ValueError, ConfigError):
        raise ConfigError(f"--seeds {text!r}: {problem}") from None


def _plot(table: Mapping[str, Any], where: str, default_metric: str) -> PlotSpec:
    unknown = sorted(set(table) - set(PLOT_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(PLOT_KEYS)}")
    for key, value in table.items():
        want = PLOT_KEYS[key]
        if not isinstance(value, want) or isinstance(value, bool) != (want is bool):
            word = {str: "a string", list: "a list", dict: "a table", bool: "true or false"}
            raise ConfigError(f"{where} {key} = {value!r}: expected {word[want]}")
    kind = table.get("kind")
    if kind not in PLOT_KINDS:
        raise ConfigError(f"{where} kind = {kind!r}: expected one of {list(PLOT_KINDS)}")
    metrics = tuple(table.get("metrics", ())) or (str(table.get("metric", default_metric)),)
    select = {
        k: tuple(v) if isinstance(v, list) else (v,) for k, v in table.get("select", {}).items()
    }
    return PlotSpec(
        kind=str(kind),
        x=table.get("x"),
        y=table.get("y"),
        series=table.get("series"),
        metrics=metrics,
        select=select,
        title=table.get("title"),
        file=table.get("file"),
        logx=table.get("logx"),
    )


EXPERIMENT_KEYS = {"name", "title", "description", "kind", "seeds", "metric"}


def spec_from_dict(data: Mapping[str, Any], source: str) -> ExperimentSpec:
    """Build an :class:`ExperimentSpec` from parsed TOML (structure only; the cell kind
    checks the values: :func:`fedchain.experiments.cells.validate_spec`)."""
    allowed = {"experiment", "fixed", "grid", "plot"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{source}: unknown table(s) {unknown}; allowed: {sorted(allowed)}")
    head = data.get("experiment", {})
    if not isinstance(head, Mapping):
        raise ConfigError(f"{source} experiment = {head!r}: expected a table [experiment]")
    unknown = sorted(set(head) - EXPERIMENT_KEYS)
    if unknown:
        raise ConfigError(
            f"{source} [experiment]: unknown key(s) {unknown}; allowed: {sorted(EXPERIMENT_KEYS)}"
        )
    for key in ("name", "title", "description", "kind", "metric"):
        if key in head and not isinstance(head[key], str):
            raise ConfigError(f"{source} [experiment] {key} = {head[key]!r}: expected a string")
    name = str(head.get("name", Path(source).stem))
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError(
            f"{source} [experiment] name = {name!r}: expected letters, digits, '_', '.', '-'"
        )
    seeds = _seeds(head.get("seeds", 3), f"{source} [experiment]")
    fixed = data.get("fixed", {})
    if not isinstance(fixed, Mapping):
        raise ConfigError(f"{source} fixed = {fixed!r}: expected a table [fixed]")
    grid = data.get("grid", {})
    if not isinstance(grid, Mapping):
        raise ConfigError(f"{source} grid = {grid!r}: expected a table [grid]")
    axes: dict[str, tuple[Any, ...]] = {}
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(
                f"{source} [grid] {key} = {values!r}: expected a non-empty list of values"
            )
        if key in fixed:
            raise ConfigError(f"{source} [grid] {key}: also set in [fixed]; keep one")
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
            raise ConfigError(f"{source} [grid] {key} = {values!r}: values repeat")
        axes[key] = tuple(values)
    metric = str(head.get("metric", "final_accuracy"))
    plots_raw = data.get("plot", [])
    if not isinstance(plots_raw, list) or not all(isinstance(t, Mapping) for t in plots_raw):
        raise ConfigError(f"{source} plot: expected an array of tables [[plot]]")
    plots = tuple(_plot(t, f"{source} [[plot]] #{i + 1}", metric) for i, t in enumerate(plots_raw))
    return ExperimentSpec(
        name=name,
        kind=str(head.get("kind", "fedchain")),
        fixed=dict(fixed),
        axes=axes,
        seeds=seeds,
        title=str(head.get("title", name)),
        description=str(head.get("description", "")),
        metric=metric,
        plots=plots,
        source=source,
    )


def load_grid(path: str | Path) -> ExperimentSpec:
    """Read a grid TOML file (structure checked; values are checked by the cell kind)."""
    from fedchain.config import read_toml

    return spec_from_dict(read_toml(path, "grid"), str(path))


def select_rows(rows: Sequence[Mapping[str, Any]], select: Mapping[str, Any]) -> list[Any]:
    """The rows whose parameters match every ``select`` entry (a tuple of allowed values)."""
    return [r for r in rows if all(r.get(k) in vals for k, vals in select.items())]
