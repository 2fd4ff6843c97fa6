"""An experiment's ``summary.md`` and ``figures/*.png``, from its rows.

The summary lists the grid, a table with every metric per cell as mean ± std and 95 % CI
over seeds, the key findings (experiment-specific, see :mod:`.builtin`; otherwise the best
and worst cells), and links the figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedchain.experiments.cells import cell_kind
from fedchain.experiments.grid import ExperimentSpec, PlotSpec
from fedchain.experiments.plots import draw, metric_label, value_label
from fedchain.experiments.stats import describe, group_rows

__all__ = ["default_plots", "summary_markdown", "write_report"]


def default_plots(spec: ExperimentSpec) -> tuple[PlotSpec, ...]:
    """The figures of a grid without ``[[plot]]`` tables: its metric against the first axis
    (per value of the second as series), and accuracy over rounds when cells have them."""
    if spec.plots:
        return spec.plots
    axes = list(spec.axes)
    if not axes:
        return ()
    plots = []
    first = spec.axes[axes[0]]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in first)
    series = axes[1] if len(axes) > 1 else None
    if len(axes) >= 2 and not numeric:
        plots.append(PlotSpec("heatmap", x=axes[0], y=axes[1], metrics=(spec.metric,)))
    else:
        kind = "lines" if numeric else "bars"
        plots.append(PlotSpec(kind, x=axes[0], series=series, metrics=(spec.metric,)))
    if cell_kind(spec.cells()[0].params, spec.kind).series:
        plots.append(PlotSpec("rounds"))
    return tuple(plots)


def summary_markdown(
    spec: ExperimentSpec,
    rows: Sequence[Mapping[str, Any]],
    figures: Sequence[Path],
    findings: Sequence[str],
    metrics: Sequence[str],
) -> str:
    """The text of ``summary.md``."""
    lines = [f"# {spec.title or spec.name}", ""]
    if spec.description:
        lines += [spec.description, ""]
    fixed = ", ".join(f"{k} = {v}" for k, v in spec.fixed.items())
    lines += [
        f"Experiment `{spec.name}` ({spec.kind} cells): "
        f"{len(spec.cells())} cells x {len(spec.seeds)} seeds {list(spec.seeds)}.",
        "",
        f"Fixed: {fixed or '-'}.",
        "",
        "Axes: " + "; ".join(f"{k} ∈ {list(v)}" for k, v in spec.axes.items()) + ".",
        "",
        "## Key findings",
        "",
        *[f"- {f}" for f in findings],
        "",
        "## Cells (mean ± std over seeds, 95 % CI by Student t)",
        "",
    ]
    axes = list(spec.axes)
    shown = [m for m in metrics if any(r.get(m) not in (None, "") for r in rows)]
    lines.append("| " + " | ".join([*axes, *[metric_label(m) for m in shown]]) + " |")
    lines.append("|" + "---|" * (len(axes) + len(shown)))
    for key, members in group_rows(rows, axes, spec.axes).items():
        cells = [value_label(a, v) for a, v in zip(axes, key, strict=True)]
        for m in shown:
            digits = 3 if m in ("final_accuracy", "ssim", "label_accuracy", "final_loss") else 1
            big = m in ("gas_per_round", "total_gas")
            st = describe(r.get(m) for r in members)
            cells.append(_big(st) if big else st.text(digits))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Figures", ""]
    lines += [f"![{f.stem}](figures/{f.name})" for f in figures]
    return "\n".join(lines) + "\n"


def _big(st: Any) -> str:
    if st.n == 0:
        return "-"
    if st.n == 1:
        return f"{st.mean:,.0f} (n=1)"
    return f"{st.mean:,.0f} ± {st.std:,.0f} (n={st.n})"


def _generic_findings(spec: ExperimentSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    groups = group_rows(rows, list(spec.axes))
    stats = [(k, describe(r.get(spec.metric) for r in m)) for k, m in groups.items()]
    stats = [(k, s) for k, s in stats if s.n]
    if not stats:
        return ["no finished cells"]
    best = max(stats, key=lambda ks: ks[1].mean)
    worst = min(stats, key=lambda ks: ks[1].mean)

    def name(key: tuple[Any, ...]) -> str:
        return ", ".join(f"{a} {value_label(a, v)}" for a, v in zip(spec.axes, key, strict=True))

    return [
        f"highest {metric_label(spec.metric)}: {name(best[0])}: {best[1].text()}",
        f"lowest: {name(worst[0])}: {worst[1].text()}",
    ]


def write_report(
    spec: ExperimentSpec, directory: Path, rows: Sequence[Mapping[str, Any]]
) -> list[Path]:
    """Draw every figure into ``directory/figures`` and write ``directory/summary.md``."""
    from fedchain.experiments.builtin import findings_for

    figdir = directory / "figures"
    figdir.mkdir(exist_ok=True)
    figures = []
    kind = cell_kind(spec.cells()[0].params, spec.kind)
    for i, plot in enumerate(default_plots(spec), start=1):
        title = spec.title or spec.name
        path = figdir / plot.filename(i)
        figures.append(draw(rows, plot, spec.axes, path, title, directory, kind.series))
    findings = findings_for(spec, rows) or _generic_findings(spec, rows)
    metrics: list[str] = []
    for k in spec.axes.get("kind", (spec.kind,)):
        from fedchain.experiments.cells import CELL_KINDS

        for m in CELL_KINDS[str(k)]().metrics:
            if m not in metrics:
                metrics.append(m)
    text = summary_markdown(spec, rows, figures, findings, metrics)
    (directory / "summary.md").write_text(text)
    return figures
