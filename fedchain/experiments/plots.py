"""Figures of an experiment from its rows (matplotlib, Agg backend, PNG at 200 dpi).

Every figure has labelled axes with units, a legend where there are several series, and
error bars (or bands) of the 95 % confidence interval over seeds (Student t, see
:mod:`.stats`); a heatmap annotates each cell with mean ± std. Functions take the rows of
``cells.csv`` (as dicts) and write one PNG; they return its path.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from numpy.typing import NDArray

from fedchain.experiments.grid import PlotSpec, parse_call, select_rows
from fedchain.experiments.stats import describe, group_rows

__all__ = ["axis_label", "draw", "heatmap_grid", "metric_label", "value_label"]

METRIC_LABELS = {
    "final_accuracy": "final test accuracy (fraction correct)",
    "final_loss": "final test loss (cross-entropy, nats)",
    "seconds_per_round": "wall time per round (s)",
    "gas_per_round": "gas per round (gas units)",
    "total_gas": "total gas (gas units)",
    "psnr": "PSNR (dB)",
    "ssim": "SSIM (1 = identical)",
    "label_accuracy": "labels recovered (fraction)",
    "accuracy_per_round": "test accuracy (fraction correct)",
    "accuracy_per_epoch": "test accuracy (fraction correct)",
}
AXIS_LABELS = {
    "clients": "clients K",
    "rule": "aggregation rule",
    "attack": "client attack (20 % Byzantine clients)",
    "defence": "defence",
    "model": "model",
    "kind": "training",
    "privacy": "privacy",
    "collusion": "collusion model",
    "byzantine": "Byzantine clients",
    "target_epsilon": "privacy budget ε (client level, δ = 1e-5)",
}
PRIVACY_NAMES = {
    "none": "no privacy",
    "ldp": "local DP",
    "ddp+secagg": "distributed DP + sec. agg.",
    "secagg": "sec. agg.",
    "he": "HE",
    "ddp+he": "distributed DP + HE",
}
MECHANISM_NAMES = {"gaussian": "Gaussian", "laplace": "Laplace", "skellam": "Skellam"}
RULE_NAMES = {
    "fedavg": "FedAvg",
    "median": "Median",
    "trimmed_mean": "Trimmed mean",
    "krum": "Krum",
    "multikrum": "Multi-Krum",
    "bulyan": "Bulyan",
}
ATTACK_NAMES = {
    "none": "none",
    "sign_flip": "sign flip",
    "scale": "scaling",
    "gaussian_noise": "Gaussian",
    "label_flip": "label flip",
    "alie": "ALIE",
    "inner_product_manipulation": "IPM",
}
DEFENCE_NAMES = {
    "none": "none",
    "batch": "batch",
    "steps": "local steps",
    "secagg": "sec. agg.",
    "ldp": "local DP",
}
SHORT_PARAMS = {"epsilon": "ε", "factor": "×", "sigma": "σ", "size": "B=", "n": "", "k": "K="}


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric.replace("_", " "))


def axis_label(axis: str) -> str:
    return AXIS_LABELS.get(axis, axis.replace("_", " "))


def value_label(axis: str, value: Any) -> str:
    """How a value appears on a figure: ``inner_product_manipulation(epsilon=10)`` ->
    ``IPM ε=10``, ``krum`` -> ``Krum``, ``fedchain`` -> ``federated``."""
    if axis == "rule":
        return RULE_NAMES.get(str(value), str(value))
    if axis == "kind":
        return {"fedchain": "federated", "centralized": "centralized"}.get(str(value), str(value))
    if axis == "privacy" and isinstance(value, str):
        try:
            name, params = parse_call(value)
        except Exception:
            return value
        shown = PRIVACY_NAMES.get(name, name)
        mech = params.get("dp_mechanism")
        return f"{shown}, {MECHANISM_NAMES.get(str(mech), str(mech))}" if mech else shown
    if isinstance(value, float):
        return "∞" if math.isinf(value) and value > 0 else f"{value:g}"
    if axis in ("attack", "defence") and isinstance(value, str):
        parts = []
        for piece in value.split("+"):
            try:
                name, params = parse_call(piece)
            except Exception:
                return value
            names = ATTACK_NAMES if axis == "attack" else DEFENCE_NAMES
            shown = names.get(name, name)
            extra = []
            for k, v in params.items():
                if k == "replace":
                    continue
                sym = SHORT_PARAMS.get(k, f"{k}=")
                joiner = "" if sym.endswith(("=", "×")) or sym == "" else "="
                extra.append(f"{sym}{joiner}{v:g}" if isinstance(v, float) else f"{sym}{joiner}{v}")
            if name == "steps" and params:
                shown = f"{params.get('n')} local steps"
                extra = []
            parts.append(" ".join([shown, *extra]))
        return " + ".join(parts)
    return str(value)


def _order(
    rows: Sequence[Mapping[str, Any]], axis: str, axes: Mapping[str, Sequence[Any]]
) -> list[Any]:
    if axis in axes:
        present = {json.dumps(r.get(axis), sort_keys=True) for r in rows}
        return [v for v in axes[axis] if json.dumps(v, sort_keys=True) in present]
    seen: list[Any] = []
    for r in rows:
        if r.get(axis) not in seen:
            seen.append(r.get(axis))
    return seen


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=200, bbox_inches="tight")
    plt.close(fig)
    return path


def _style() -> None:
    plt.rcParams.update(
        {
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.fontsize": 9,
            "axes.grid": True,
            "grid.alpha": 0.3,
        }
    )


def heatmap_grid(
    rows: Sequence[Mapping[str, Any]], plot: PlotSpec, axes: Mapping[str, Sequence[Any]]
) -> tuple[list[Any], list[Any], NDArray[np.float64], list[list[str]]]:
    """The heatmap's x values, y values, mean per (y, x) cell over seeds (NaN: no run) and
    each cell's "mean ± std" label, over the rows ``plot.select`` keeps."""
    assert plot.x and plot.y
    if plot.select:
        rows = select_rows(rows, plot.select)
    metric = plot.metrics[0]
    xs, ys = _order(rows, plot.x, axes), _order(rows, plot.y, axes)
    groups = group_rows(rows, [plot.y, plot.x])
    mean = np.full((len(ys), len(xs)), np.nan)
    text = [["" for _ in xs] for _ in ys]
    for i, yv in enumerate(ys):
        for j, xv in enumerate(xs):
            st = describe(r.get(metric) for r in groups.get(_key(yv, xv), []))
            if st.n:
                mean[i, j] = st.mean
                text[i][j] = f"{st.mean:.2f}" + (
                    f"\n±{st.std:.2f}" if st.n > 1 and not math.isnan(st.std) else ""
                )
    return list(xs), list(ys), mean, text


def heatmap(
    rows: Sequence[Mapping[str, Any]],
    plot: PlotSpec,
    axes: Mapping[str, Sequence[Any]],
    path: Path,
    title: str,
) -> Path:
    """Mean of the metric per (y, x) cell over seeds, annotated mean ± std."""
    assert plot.x and plot.y
    metric = plot.metrics[0]
    xs, ys, mean, text = heatmap_grid(rows, plot, axes)
    _style()
    fig, ax = plt.subplots(figsize=(1.2 * len(xs) + 2.5, 0.6 * len(ys) + 1.8))
    ax.grid(False)
    bounded = metric in (
        "final_accuracy",
        "last5_accuracy",
        "min_after_warmup",
        "ssim",
        "label_accuracy",
    )
    im = ax.imshow(
        mean,
        cmap="viridis",
        vmin=0.0 if bounded else None,
        vmax=1.0 if bounded else None,
        aspect="auto",
    )
    for i in range(len(ys)):
        for j in range(len(xs)):
            if text[i][j]:
                dark = not math.isnan(mean[i, j]) and (
                    mean[i, j] < 0.55 if bounded else mean[i, j] < np.nanmean(mean)
                )
                ax.text(
                    j,
                    i,
                    text[i][j],
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if dark else "black",
                )
    ax.set_xticks(range(len(xs)), [value_label(plot.x, v) for v in xs], rotation=30, ha="right")
    ax.set_yticks(range(len(ys)), [value_label(plot.y, v) for v in ys])
    ax.set_xlabel(axis_label(plot.x))
    ax.set_ylabel(axis_label(plot.y))
    ax.set_title(title)
    bar = fig.colorbar(im, ax=ax)
    bar.set_label(metric_label(metric) + ", mean over seeds")
    return _save(fig, path)


def _key(*values: Any) -> tuple[Any, ...]:
    return tuple(json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v for v in values)


def _stats_by_series(
    rows: Sequence[Mapping[str, Any]], plot: PlotSpec, xs: Sequence[Any], series: Sequence[Any]
) -> list[tuple[Any, dict[str, list[Any]]]]:
    """For each series value, each metric's :class:`Stat` at every x value."""
    assert plot.x
    out = []
    for s in series:
        sub = (
            rows
            if s is None
            else [r for r in rows if _key(r.get(plot.series or ""))[0] == _key(s)[0]]
        )
        groups = group_rows(sub, [plot.x])
        out.append(
            (
                s,
                {
                    m: [describe(r.get(m) for r in groups.get(_key(xv), [])) for xv in xs]
                    for m in plot.metrics
                },
            )
        )
    return out


def _panels(
    rows: Sequence[Mapping[str, Any]],
    plot: PlotSpec,
    axes: Mapping[str, Sequence[Any]],
    width: float,
    height: float,
    stacked: bool = False,
) -> tuple[list[Any], list[Any], Any, Any]:
    """x values, series values, and a figure with one panel per metric (side by side, or
    one above the other when ``stacked``: wide panels)."""
    assert plot.x
    xs = _order(rows, plot.x, axes)
    series = _order(rows, plot.series, axes) if plot.series else [None]
    _style()
    n = len(plot.metrics)
    if stacked:
        fig, panels = plt.subplots(n, 1, figsize=(width, height * n), squeeze=False)
        return xs, series, fig, [row[0] for row in panels]
    fig, panels = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
    return xs, series, fig, panels[0]


def _finish_panel(ax: Any, plot: PlotSpec, metric: str, series: Sequence[Any]) -> None:
    if metric in BOUNDED:
        ax.set_ylim(0.0, 1.05)
    ax.set_xlabel(axis_label(plot.x or ""))
    ax.set_ylabel(metric_label(metric))
    if list(series) != [None]:  # beside the panel: bars reach the top of a bounded axis
        ax.legend(title=axis_label(plot.series or ""), loc="upper left", bbox_to_anchor=(1, 1))


def _ci(stat: Any) -> float:
    return 0.0 if math.isnan(stat.ci95) else float(stat.ci95)


#: Up to this many seeds a figure shows the seeds' range, beyond it the 95 % CI: Student t
#: with 1 or 2 degrees of freedom (t = 12.7, 4.3) gives intervals too wide to read.
FEW_SEEDS = 3


def _err(stats: Sequence[Any]) -> list[list[float]]:
    """Error bars (below, above) for ``stats``: the 95 % CI, or the range of few seeds."""
    below, above = [], []
    for st in stats:
        if st.n > FEW_SEEDS:
            below.append(_ci(st))
            above.append(_ci(st))
        elif st.n:
            below.append(st.mean - st.min)
            above.append(st.max - st.mean)
        else:
            below.append(0.0)
            above.append(0.0)
    return [below, above]


def _spread_words(stats: Sequence[Any]) -> str:
    n = max((st.n for st in stats), default=0)
    return "95 % CI over seeds" if n > FEW_SEEDS else f"bars: range of {n} seeds"


BOUNDED = ("final_accuracy", "ssim", "label_accuracy")


def lines(
    rows: Sequence[Mapping[str, Any]],
    plot: PlotSpec,
    axes: Mapping[str, Sequence[Any]],
    path: Path,
    title: str,
) -> Path:
    """Each metric (one panel each) against a numeric x, one line per series value."""
    xs, series, fig, panels = _panels(rows, plot, axes, 5.2 if len(plot.metrics) == 1 else 4.2, 3.6)
    numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs)
    finite = [x for x in xs if numeric and math.isfinite(x)]
    logx = (
        plot.logx
        if plot.logx is not None
        else (numeric and len(finite) > 2 and min(finite) > 0 and max(finite) / min(finite) >= 10)
    )
    where = _positions(xs, finite, bool(logx)) if numeric else {}
    stats = _stats_by_series(rows, plot, xs, series)
    for ax, metric in zip(panels, plot.metrics, strict=True):
        for s, by_metric in stats:
            pts = sorted(
                (
                    (where[_key(xv)] if numeric else i, st)
                    for i, (xv, st) in enumerate(zip(xs, by_metric[metric], strict=True))
                    if st.n
                ),
                key=lambda p: p[0],
            )
            if not pts:
                continue
            # ∞ (drawn right of the axis break) joins its line with a dotted segment
            apart = [p for p in pts if numeric and p[0] > max(finite, default=math.inf)]
            joined = [p for p in pts if p not in apart] or apart
            bar = ax.errorbar(
                [p[0] for p in joined],
                [p[1].mean for p in joined],
                yerr=_err([p[1] for p in joined]),
                marker="o",
                capsize=3,
                label=None if s is None else value_label(plot.series or "", s),
            )
            if apart and joined is not apart:
                colour = bar.lines[0].get_color()
                ax.errorbar(
                    [p[0] for p in apart],
                    [p[1].mean for p in apart],
                    yerr=_err([p[1] for p in apart]),
                    marker="o",
                    capsize=3,
                    color=colour,
                    linestyle="none",
                )
                ax.plot(
                    [joined[-1][0], apart[0][0]],
                    [joined[-1][1].mean, apart[0][1].mean],
                    color=colour,
                    linestyle=":",
                )
        if logx:
            ax.set_xscale("log")
        if numeric:
            ax.set_xticks([where[_key(x)] for x in xs], [_tick(plot.x or "", x) for x in xs])
            ax.minorticks_off()
            if len(finite) < len(xs) and finite:  # ∞ stands apart: a break in the axis
                edge = where[_key(max(finite))]
                gap = where[_key(math.inf)]
                cut = math.sqrt(edge * gap) if logx else (edge + gap) / 2
                ax.axvline(cut, color="grey", lw=0.8, ls=(0, (2, 2)))
        else:
            ax.set_xticks(
                range(len(xs)), [value_label(plot.x or "", v) for v in xs], rotation=30, ha="right"
            )
        _finish_panel(ax, plot, metric, series)
    every = [st for _, by in stats for m in plot.metrics for st in by[m]]
    fig.suptitle(f"{title} (mean; {_spread_words(every)})")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return _save(fig, path)


def _positions(xs: Sequence[Any], finite: Sequence[float], logx: bool) -> dict[Any, float]:
    """Where each numeric x value is drawn: itself, and ∞ one step (a factor 4 on a log
    axis, the largest gap on a linear one) right of the largest finite value."""
    out: dict[Any, float] = {_key(x): float(x) for x in finite}
    if len(finite) == len(xs):
        return out
    top = max(finite, default=1.0)
    if logx:
        far = top * 4.0
    else:
        ordered = sorted(finite)
        step = max((b - a for a, b in itertools.pairwise(ordered)), default=1.0)
        far = top + step
    out.update({_key(x): far for x in xs if not math.isfinite(x)})
    return out


def _tick(axis: str, value: Any) -> str:
    if isinstance(value, float):
        return value_label(axis, value) if math.isinf(value) else f"{value:g}"
    return str(value)


def _series_of(row: Mapping[str, Any], name: str) -> list[float]:
    value = row.get(name)
    if isinstance(value, str):
        value = json.loads(value) if value else []
    return [float(v) if v is not None else math.nan for v in (value or [])]


def rounds(
    rows: Sequence[Mapping[str, Any]],
    plot: PlotSpec,
    axes: Mapping[str, Sequence[Any]],
    path: Path,
    title: str,
    series_name: str = "accuracy_per_round",
) -> Path:
    """Accuracy over rounds, one colour per selected cell: the mean over seeds, and the
    95 % CI band (more than 3 seeds) or every seed's own curve (thin, up to 3 seeds: a
    t interval from 2 or 3 values is too wide to read)."""
    from matplotlib.ticker import MaxNLocator

    sub = select_rows(rows, plot.select) if plot.select else list(rows)
    varying = [a for a in axes if len({_key(r.get(a)) for r in sub}) > 1 and a != "seed"]
    groups = group_rows(sub, varying, axes)
    _style()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    styles = ["-", "--", ":", "-."]
    seeds = len({r.get("seed") for r in sub})
    for idx, (key, members) in enumerate(groups.items()):
        curves = [_series_of(r, series_name) for r in members]
        length = max((len(c) for c in curves), default=0)
        if not length:
            continue
        stats = [describe(c[t] for c in curves if t < len(c)) for t in range(length)]
        xs = np.arange(1, length + 1)
        mean = np.array([s.mean for s in stats])
        label = ", ".join(value_label(a, v) for a, v in zip(varying, key, strict=True))
        (line,) = ax.plot(
            xs, mean, styles[idx // 10 % 4], marker=".", linewidth=2, label=label or "all"
        )
        if seeds > FEW_SEEDS:
            ci = np.array([_ci(s) for s in stats])
            ax.fill_between(xs, mean - ci, mean + ci, color=line.get_color(), alpha=0.15)
        else:
            for c in curves:
                ax.plot(np.arange(1, len(c) + 1), c, color=line.get_color(), lw=0.7, alpha=0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round" if series_name == "accuracy_per_round" else "epoch")
    ax.set_ylabel(metric_label(series_name))
    ax.set_ylim(0.0, 1.0)
    spread = "95 % CI band" if seeds > FEW_SEEDS else "thin: each seed"
    ax.set_title(f"{title} (mean of {seeds} seeds; {spread})")
    ax.legend(loc="best", fontsize=8, title=", ".join(axis_label(a) for a in varying) or None)
    return _save(fig, path)


def bars(
    rows: Sequence[Mapping[str, Any]],
    plot: PlotSpec,
    axes: Mapping[str, Sequence[Any]],
    path: Path,
    title: str,
) -> Path:
    """Each metric (one panel each) per x value, grouped by series, 95 % CI error bars."""
    n_x = len(_order(rows, plot.x or "", axes))
    fig_width = max(4.5, 0.9 * n_x + 1.5)
    stacked = fig_width > 8
    xs, series, fig, panels = _panels(rows, plot, axes, fig_width, 3.6, stacked=stacked)
    width = 0.8 / len(series)
    stats = _stats_by_series(rows, plot, xs, series)
    low = min(
        (x.mean - e for _, by in stats for m in plot.metrics for x, e in _lows(by[m])),
        default=0.0,
    )
    for ax, metric in zip(panels, plot.metrics, strict=True):
        for si, (s, by_metric) in enumerate(stats):
            st = by_metric[metric]
            ax.bar(
                np.arange(len(xs)) + (si - (len(series) - 1) / 2) * width,
                [x.mean for x in st],
                width,
                yerr=_err(st),
                capsize=3,
                label=None if s is None else value_label(plot.series or "", s),
            )
        ax.set_xticks(
            range(len(xs)), [value_label(plot.x or "", v) for v in xs], rotation=30, ha="right"
        )
        _finish_panel(ax, plot, metric, series)
        if metric in BOUNDED and low < 0:  # SSIM can be negative: show it
            ax.set_ylim(low - 0.05, 1.05)
    every = [st for _, by in stats for m in plot.metrics for st in by[m]]
    fig.suptitle(f"{title} (mean; {_spread_words(every)})")
    fig.tight_layout(rect=(0, 0, 1, 0.96 if stacked and len(panels) > 1 else 0.94))
    return _save(fig, path)


def _lows(stats: Sequence[Any]) -> list[tuple[Any, float]]:
    """Each stat with the length of its lower error bar (for the axis' lower limit)."""
    below = _err(stats)[0]
    return [(st, b) for st, b in zip(stats, below, strict=True) if st.n]


def images(
    rows: Sequence[Mapping[str, Any]],
    plot: PlotSpec,
    axes: Mapping[str, Sequence[Any]],
    path: Path,
    title: str,
    root: Path,
) -> Path:
    """The target image of each seed (columns, up to 8): the original on top, then its best
    reconstruction under each x value (rows), labelled with that row's mean PSNR."""
    assert plot.x
    xs = _order(rows, plot.x, axes)
    seeds = sorted({int(r["seed"]) for r in rows})[:8]
    by = {(_key(r.get(plot.x)), int(r["seed"])): r for r in rows}
    _style()
    fig, grid = plt.subplots(
        len(xs) + 1,
        len(seeds),
        figsize=(0.95 * len(seeds) + 2.4, 0.95 * (len(xs) + 1) + 0.7),
        squeeze=False,
    )
    for i, xv in enumerate([None, *xs]):
        for j, seed in enumerate(seeds):
            ax = grid[i][j]
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            r = by.get((_key(xs[0] if xv is None else xv), seed))
            if r is None:
                continue
            data = np.load(root / str(r["unit_dir"]) / "reconstruction.npz")
            img = data["original"][0] if xv is None else data["reconstruction"][0]
            ax.imshow(np.clip(img.squeeze(), 0, 1), cmap="gray", vmin=0, vmax=1)
        if xv is None:
            text = "original"
        else:
            st = describe(r.get("psnr") for r in rows if _key(r.get(plot.x)) == _key(xv))
            text = f"{value_label(plot.x, xv)}\n{st.mean:.1f} dB"
        grid[i][0].set_ylabel(text, rotation=0, ha="right", va="center", fontsize=8)
    for j, seed in enumerate(seeds):
        grid[-1][j].set_xlabel(f"seed {seed}", fontsize=8)
    fig.suptitle(title + " (8x8 digits, pixels in [0, 1]; dB = mean PSNR over seeds)")
    fig.tight_layout()
    return _save(fig, path)


def draw(
    rows: Sequence[Mapping[str, Any]],
    plot: PlotSpec,
    axes: Mapping[str, Sequence[Any]],
    path: Path,
    title: str,
    root: Path,
    series_name: str | None = None,
) -> Path:
    """Draw ``plot`` from ``rows`` into ``path``."""
    title = plot.title or title
    if plot.kind == "heatmap":
        return heatmap(rows, plot, axes, path, title)
    if plot.kind == "lines":
        return lines(rows, plot, axes, path, title)
    if plot.kind == "rounds":
        return rounds(rows, plot, axes, path, title, series_name or "accuracy_per_round")
    if plot.kind == "bars":
        return bars(rows, plot, axes, path, title)
    return images(rows, plot, axes, path, title, root)
