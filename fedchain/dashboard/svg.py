"""Charts as inline SVG strings: line charts, horizontal bar charts and the round timeline.

Pure functions of their data (no I/O, no JavaScript), so the live pages and the
self-contained HTML report draw identical charts, and every plotted value is also in the
markup: each point or bar carries ``data-x``/``data-y`` (or ``data-value``) attributes and a
``<title>`` tooltip. Sizes are in SVG user units; the charts scale with their container.
Every string that comes from a run is escaped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

#: Fill colours of the round phases in the timeline (CSS class ``ph-<phase>`` overrides).
PHASE_COLOURS = {
    "collecting": "#9db4cf",
    "attesting": "#7cc4b8",
    "aggregating": "#f0c05a",
    "submitted": "#b69be0",
    "disputed": "#e06c6c",
    "finalized": "#5fb36b",
}


@dataclass(frozen=True)
class Series:
    """One line of a line chart: a name, points (x, y) and a CSS colour."""

    name: str
    points: Sequence[tuple[float, float]]
    colour: str = "#3b6fb6"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [lo, hi] (steps of 1, 2 or 5 x 10^k)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        return [lo]
    raw = (hi - lo) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    # the smallest round step >= raw; if no multiple of it falls in [lo, hi], the next
    # smaller one (a step <= raw <= (hi - lo) / 2 always has one)
    steps = [m * magnitude for m in (1, 2, 5, 10)]
    chosen = next(i for i, step in enumerate(steps) if step >= raw)
    for step in reversed(steps[: chosen + 1]):
        first, last = math.ceil(lo / step - 1e-12), math.floor(hi / step + 1e-12)
        if first <= last:
            return [k * step for k in range(first, last + 1)]
    return [lo, hi]


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.4g}"


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 460,
    height: int = 240,
    y_range: tuple[float, float] | None = None,
    chart_id: str = "",
    reference: tuple[str, float] | None = None,
    integer_x: bool = True,
) -> str:
    """A line chart with axes, ticks, a legend and one marked point per value.

    ``reference`` draws a labelled horizontal line (e.g. a privacy budget target);
    ``integer_x`` keeps only whole-number ticks on the x axis (rounds).
    """
    points = [p for s in series for p in s.points]
    left, right, top, bottom = 56, 12, 28, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(title)}">',
        f'<text class="chart-title" x="{left}" y="16">{escape(title)}</text>',
    ]
    if not points:
        parts.append(
            f'<text class="chart-empty" x="{left + plot_w / 2}" y="{top + plot_h / 2}" '
            'text-anchor="middle">no data yet</text></svg>'
        )
        return "".join(parts)
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    if reference is not None:
        ys.append(reference[1])
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_lo, y_hi = y_range if y_range is not None else (min(ys), max(ys))
    if y_hi == y_lo:
        pad = abs(y_hi) * 0.1 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    y_ticks = nice_ticks(y_lo, y_hi)
    y_lo, y_hi = min(y_lo, y_ticks[0]), max(y_hi, y_ticks[-1])

    def sx(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h

    parts.append(
        f'<rect class="plot" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" '
        'fill="none" stroke="#ccc"/>'
    )
    for yt in y_ticks:
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(yt):.1f}" y2="{sy(yt):.1f}" '
            f'stroke="#eee"/><text class="tick" x="{left - 6}" y="{sy(yt) + 4:.1f}" '
            f'text-anchor="end">{_fmt(yt)}</text>'
        )
    x_ticks = [t for t in nice_ticks(x_lo, x_hi, 6) if float(t).is_integer() or not integer_x]
    for xt in x_ticks:
        parts.append(
            f'<text class="tick" x="{sx(xt):.1f}" y="{top + plot_h + 16}" '
            f'text-anchor="middle">{_fmt(xt)}</text>'
        )
    parts.append(
        f'<text class="axis-label" x="{left + plot_w / 2}" y="{height - 6}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
        f'<text class="axis-label" transform="translate(14 {top + plot_h / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    if reference is not None:
        label, value = reference
        parts.append(
            f'<line class="reference" x1="{left}" x2="{left + plot_w}" y1="{sy(value):.1f}" '
            f'y2="{sy(value):.1f}" stroke="#c0392b" stroke-dasharray="5 4"/>'
            f'<text class="tick" x="{left + plot_w - 4}" y="{sy(value) - 4:.1f}" '
            f'text-anchor="end" fill="#c0392b">{escape(label)} {_fmt(value)}</text>'
        )
    for i, s in enumerate(series):
        pts = sorted(s.points)
        if len(pts) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            parts.append(
                f'<polyline fill="none" stroke="{escape(s.colour)}" stroke-width="2" '
                f'points="{path}"/>'
            )
        for x, y in pts:
            parts.append(
                f'<circle class="point" data-series="{escape(s.name)}" data-x="{x:g}" '
                f'data-y="{y!r}" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" '
                f'fill="{escape(s.colour)}"><title>{escape(s.name)} {x:g}: {y:.4f}</title>'
                "</circle>"
            )
        lx = width - right - 110 * (len(series) - i)
        parts.append(
            f'<rect x="{lx}" y="7" width="10" height="10" fill="{escape(s.colour)}"/>'
            f'<text class="legend" x="{lx + 14}" y="16">{escape(s.name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(
    items: Sequence[tuple[str, float]],
    *,
    title: str,
    unit: str = "",
    width: int = 460,
    bar_height: int = 18,
    chart_id: str = "",
    colour: str = "#3b6fb6",
) -> str:
    """Horizontal bars, largest first, each labelled with its name and value."""
    rows = sorted(items, key=lambda kv: -kv[1])
    label_w, value_w, top = 150, 90, 26
    height = top + max(1, len(rows)) * (bar_height + 6) + 6
    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(title)}">',
        f'<text class="chart-title" x="0" y="16">{escape(title)}</text>',
    ]
    if not rows:
        parts.append(f'<text class="chart-empty" x="0" y="{top + 14}">no data yet</text></svg>')
        return "".join(parts)
    top_value = max(v for _, v in rows) or 1.0
    span = width - label_w - value_w
    for i, (name, value) in enumerate(rows):
        y = top + i * (bar_height + 6)
        w = max(1.0, value / top_value * span)
        parts.append(
            f'<g class="bar" data-label="{escape(name)}" data-value="{value:.15g}">'
            f'<text class="tick" x="{label_w - 6}" y="{y + bar_height - 5}" '
            f'text-anchor="end">{escape(name)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_height}" '
            f'fill="{escape(colour)}"><title>{escape(name)}: {value:,.0f} {escape(unit)}</title>'
            f'</rect><text class="tick" x="{label_w + w + 4:.1f}" y="{y + bar_height - 5}">'
            f"{value:,.0f}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def lane_scale(
    bounds: Sequence[float], width: float, min_share: float = 0.08
) -> Callable[[float], float]:
    """x (0..width) of a time on a lane whose phases start at ``bounds`` (the last bound is
    the lane's end): piecewise linear in time, but every phase at least ``min_share`` of the
    width, so a short dispute stays visible next to a long collection."""
    times = sorted(bounds)
    durations = [b - a for a, b in itertools.pairwise(times)]
    n = len(durations)
    if n == 0 or times[-1] <= times[0]:
        return lambda t: 0.0
    floor = min(min_share, 1 / n) * width
    fixed = [False] * n  # phases held at the floor width
    while True:
        free = sum(d for d, f in zip(durations, fixed, strict=True) if not f)
        room = width - floor * sum(fixed)
        widths = [
            floor if f else (d / free * room if free > 0 else 0.0)
            for d, f in zip(durations, fixed, strict=True)
        ]
        short = [k for k in range(n) if not fixed[k] and widths[k] < floor]
        if not short:
            break
        for k in short:
            fixed[k] = True
        if all(fixed):
            widths = [width / n] * n
            break
    edges = [0.0]
    for w in widths:
        edges.append(edges[-1] + w)

    def x(t: float) -> float:
        if t <= times[0]:
            return 0.0
        for k in range(n):
            if t <= times[k + 1]:
                span = times[k + 1] - times[k]
                frac = (t - times[k]) / span if span > 0 else 1.0
                return edges[k] + frac * widths[k]
        return width

    return x


def _marker(kind: str, x: float, y: float, label: str) -> str:
    """A small timeline marker with a tooltip."""
    tip = f"<title>{escape(label)}</title>"
    if kind == "faulty":
        return (
            f'<circle class="mk mk-faulty" cx="{x:.1f}" cy="{y}" r="5" fill="#c0392b" '
            f'stroke="#fff">{tip}</circle>'
        )
    if kind == "submit":
        return (
            f'<circle class="mk mk-submit" cx="{x:.1f}" cy="{y}" r="5" fill="#2e7d32" '
            f'stroke="#fff">{tip}</circle>'
        )
    if kind == "challenge":
        return (
            f'<path class="mk mk-challenge" d="M{x:.1f},{y - 6} l6,11 h-12 z" fill="#e67e22" '
            f'stroke="#fff">{tip}</path>'
        )
    if kind == "slash":
        return (
            f'<path class="mk mk-slash" d="M{x - 5:.1f},{y - 5} l10,10 M{x + 5:.1f},{y - 5} '
            f'l-10,10" stroke="#7b1fa2" stroke-width="3">{tip}</path>'
        )
    if kind == "timeout":
        return (
            f'<rect class="mk mk-timeout" x="{x - 4:.1f}" y="{y - 4}" width="8" height="8" '
            f'fill="#555">{tip}</rect>'
        )
    return (  # dispute resolved
        f'<path class="mk mk-resolved" d="M{x:.1f},{y - 6} l6,6 l-6,6 l-6,-6 z" '
        f'fill="#34495e" stroke="#fff">{tip}</path>'
    )


def timeline(
    rounds: Sequence[dict[str, Any]],
    slashes: Sequence[dict[str, Any]],
    *,
    now: float | None = None,
    labels: dict[str, str] | None = None,
    width: int = 940,
    lane: int = 34,
    chart_id: str = "timeline",
) -> str:
    """One lane per round: its phases as coloured segments in order (lengths proportional to
    time, but each phase at least 8 % of the lane: :func:`lane_scale`; the lane's duration at
    its end; seconds in each tooltip), the contract's choice per attempt, submissions (red:
    faulty), challenges, resolved disputes, timeouts and slashings as markers.

    ``rounds`` are :meth:`fedchain.dashboard.model.RunView.snapshot` rounds; a round still
    open ends at ``now`` (or its last event).
    """
    labels = labels or {}
    lanes = [r for r in rounds if r.get("phases")]
    left, top, right = 70, 24, 16
    height = top + max(1, len(lanes)) * lane + 8
    parts = [
        f'<svg class="chart timeline" id="{escape(chart_id)}" viewBox="0 0 {width} {height}" '
        'role="img" aria-label="round timeline">'
    ]
    if not lanes:
        parts.append(f'<text class="chart-empty" x="{left}" y="{top + 14}">no rounds yet</text>')
        parts.append("</svg>")
        return "".join(parts)

    def events_t(r: dict[str, Any]) -> list[float]:
        ts = [p["t"] for p in r["phases"] if isinstance(p.get("t"), int | float)]
        for a in r["attempts"]:
            for item in (a.get(k) for k in ("submission", "resolved", "expired", "timed_out")):
                if item and isinstance(item.get("t"), int | float):
                    ts.append(item["t"])
            ts += [c["t"] for c in a.get("challenges", []) if isinstance(c.get("t"), int | float)]
        return ts

    spans = []
    for r in lanes:
        ts = events_t(r)
        start = min(ts)
        end = max(ts)
        if r.get("phase") != "finalized" and now is not None:
            end = max(end, now)
        spans.append((start, max(end, start + 1e-3)))
    plot_w = width - left - right - 56  # room for each lane's duration on the right

    for i, (r, (start, end)) in enumerate(zip(lanes, spans, strict=True)):
        y = top + i * lane
        mid = y + lane / 2 - 2
        parts.append(
            f'<g class="lane" data-round="{r["round"]}" data-phase="{escape(str(r["phase"]))}">'
            f'<text class="lane-label" x="{left - 8}" y="{mid + 4}" text-anchor="end">'
            f"round {r['round']}</text>"
        )
        phases = [p for p in r["phases"] if isinstance(p.get("t"), int | float)]
        bounds = [start] + [p["t"] for p in phases[1:] if p["phase"] != "finalized"] + [end]
        to_x = lane_scale(bounds, plot_w)

        def sx(
            seconds: float, to_x: Callable[[float], float] = to_x, start: float = start
        ) -> float:
            return left + to_x(start + seconds)

        parts.append(
            f'<text class="tick" x="{left + plot_w + 6}" y="{mid + 4}">{end - start:.1f} s</text>'
        )
        for j, p in enumerate(phases):
            if p["phase"] == "finalized":
                continue
            seg_end = phases[j + 1]["t"] if j + 1 < len(phases) else end
            x0, x1 = sx(p["t"] - start), sx(seg_end - start)
            name = str(p["phase"])
            label = labels.get(name, name)
            parts.append(
                f'<rect class="seg ph-{escape(name)}" x="{x0:.1f}" y="{y + 4}" '
                f'width="{max(1.0, x1 - x0):.1f}" height="{lane - 12}" '
                f'fill="{PHASE_COLOURS.get(name, "#bbb")}"><title>round {r["round"]} '
                f"attempt {p['attempt']}: {escape(label)} {seg_end - p['t']:.2f} s</title></rect>"
            )
        for a in r["attempts"]:
            agg_start = next(
                (
                    p["t"]
                    for p in phases
                    if p["phase"] == "aggregating" and p["attempt"] == a["attempt"]
                ),
                None,
            )
            if agg_start is not None and a.get("chosen"):
                parts.append(
                    f'<text class="chosen" x="{sx(agg_start - start) + 3:.1f}" y="{y + 16}">'
                    f"{escape(str(a['chosen']))}</text>"
                )
            sub = a.get("submission") or {}
            marks: list[tuple[str, dict[str, Any], str]] = [
                (
                    "faulty" if sub.get("faulty") else "submit",
                    sub,
                    f"attempt {a['attempt']}: {sub.get('aggregator')} submitted "
                    f"{'a FAULTY' if sub.get('faulty') else 'an'} aggregate "
                    f"({sub.get('behaviour') or 'honest'}), block {sub.get('block')}",
                )
            ]
            for c in a.get("challenges", []):
                marks.append(
                    (
                        "challenge",
                        c,
                        f"{c.get('challenger')} challenged attempt {a['attempt']} "
                        f"(block {c.get('block')})",
                    )
                )
            late = a.get("timed_out") or {}
            marks.append(
                (
                    "timeout",
                    late,
                    f"attempt {a['attempt']}: {late.get('aggregator')} missed its submit "
                    f"timeout (block {late.get('block')})",
                )
            )
            res = a.get("resolved") or {}
            marks.append(
                (
                    "resolved",
                    res,
                    f"PBFT verdict: {res.get('verdict')} ({res.get('signers')} signatures), "
                    f"block {res.get('block')}",
                )
            )
            for kind, what, text in marks:  # those that happened (they carry a time)
                if isinstance(what.get("t"), int | float):
                    parts.append(_marker(kind, sx(what["t"] - start), y + lane - 10, text))
        for s in slashes:
            t = s.get("t")
            if isinstance(t, int | float) and start <= t <= end:
                parts.append(
                    _marker(
                        "slash",
                        sx(t - start),
                        y + lane - 10,
                        f"{s.get('aggregator')} slashed {int(s.get('amount') or 0) / 1e18:g} ETH",
                    )
                )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)
