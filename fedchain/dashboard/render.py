"""HTML of the dashboard's pages and panels (Jinja2 templates shipped in the package).

:func:`run_panels` turns a :meth:`~fedchain.dashboard.model.RunView.snapshot` into the HTML
of each panel of a run's live view (status, timeline, rounds, disputes, stakes, curves, gas,
privacy when present, latest events), keyed by panel id: the live pages send only the
panels whose HTML changed, and the HTML report inlines them all. :func:`page` renders a
whole page. Templates autoescape; charts come from :mod:`fedchain.dashboard.svg`.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping
from typing import Any

import jinja2
from markupsafe import Markup

from fedchain.dashboard import svg
from fedchain.dashboard.model import PHASE_LABELS
from fedchain.report.detection import format_cell

VERSION = "0.1.0"
WEI_PER_ETH = 10**18
#: Panels of a run's view, in page order (``privacy`` only when the run has privacy fields).
RUN_PANELS = ("status", "timeline", "rounds", "disputes", "stakes", "curves", "gas", "privacy")


def phase_label(phase: Any) -> str:
    return PHASE_LABELS.get(str(phase), str(phase)) if phase else "-"


def num(value: Any, digits: int = 4) -> str:
    """A float with ``digits`` decimals; ``-`` for missing values."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return f"{value:.{digits}f}"


def int_text(value: Any) -> str:
    """An integer with thousands separators (``-`` for missing values)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return f"{int(value):,}"


def eth(wei: Any) -> str:
    """Wei as ETH, up to six decimals."""
    if isinstance(wei, bool) or not isinstance(wei, int | float):
        return "-"
    text = f"{wei / WEI_PER_ETH:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def short(digest: Any) -> str:
    text = str(digest or "")
    return text if len(text) <= 14 else f"{text[:8]}…{text[-4:]}"


def yesno(value: Any) -> str:
    if value is None:
        return "-"
    return "yes" if value else "no"


def clock(t: Any) -> str:
    """Local wall-clock time of a Unix timestamp."""
    if not isinstance(t, int | float):
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(t))


def gas_total(gas: Any) -> int:
    return sum(int(v) for v in gas.values()) if isinstance(gas, Mapping) else 0


#: Fields of an event the feed does not repeat in its details column.
_FEED_SKIP = {"t", "kind", "round", "attempt", "aggregators", "votes", "gas"}


def details(event: Mapping[str, Any]) -> str:
    """The rest of an event, compactly (long values shortened)."""
    parts = []
    for key, value in event.items():
        if key in _FEED_SKIP:
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        parts.append(f"{key}={short(text) if key in ('digest', 'task') else text}")
    return " ".join(parts)[:240]


@functools.cache
def environment() -> jinja2.Environment:
    """The package's template environment (autoescaping, strict undefined off)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fedchain.dashboard", "templates"),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        phase_label=phase_label,
        num=num,
        int=int_text,
        eth=eth,
        short=short,
        yesno=yesno,
        clock=clock,
        details=details,
        gas_total=gas_total,
        cell=format_cell,
        version=VERSION,
    )
    return env


def _macro(template: str, name: str, *args: Any) -> str:
    module = environment().get_template(template).module
    return str(getattr(module, name)(*args))


def run_panels(snapshot: Mapping[str, Any], path: str, now: float | None = None) -> dict[str, str]:
    """The HTML of every panel of a run's view, keyed by panel id, in page order."""
    s = snapshot
    panels = {
        "status": _macro("panels.html", "status", s, path),
        "timeline": _macro(
            "panels.html",
            "timeline",
            Markup(
                svg.timeline(
                    s["rounds"],
                    s["slashes"],
                    now=now if s["status"] == "running" else None,
                    labels=PHASE_LABELS,
                )
            ),
        ),
        "rounds": _macro("panels.html", "rounds", s),
        "disputes": _macro("panels.html", "disputes", s),
        "stakes": _macro("panels.html", "stakes", s),
        "curves": _macro(
            "panels.html",
            "curves",
            Markup(
                svg.line_chart(
                    [svg.Series("accuracy", s["curves"]["accuracy"], "#2e7d32")],
                    title="test accuracy per round",
                    x_label="round",
                    y_label="accuracy",
                    chart_id="chart-accuracy",
                )
            ),
            Markup(
                svg.line_chart(
                    [svg.Series("loss", s["curves"]["loss"], "#c0392b")],
                    title="test loss per round",
                    x_label="round",
                    y_label="loss",
                    chart_id="chart-loss",
                )
            ),
        ),
        "gas": _macro(
            "panels.html",
            "gas",
            s,
            Markup(
                svg.bar_chart(
                    list(s["gas_by_operation"].items()),
                    title="total gas per contract operation",
                    unit="gas",
                    chart_id="chart-gas",
                )
            ),
        ),
    }
    privacy = s.get("privacy")
    if privacy:
        points = [
            (float(p["round"]), float(p["epsilon"]))
            for p in privacy["rounds"]
            if isinstance(p.get("round"), int) and isinstance(p.get("epsilon"), int | float)
        ]
        total = privacy.get("total") or {}
        target = total.get("target_epsilon")
        chart = svg.line_chart(
            [svg.Series("ε spent", points, "#7b1fa2")],
            title="cumulative privacy loss ε per round",
            x_label="round",
            y_label="ε",
            chart_id="chart-epsilon",
            reference=("target ε", float(target)) if isinstance(target, int | float) else None,
        )
        panels["privacy"] = _macro("panels.html", "privacy", privacy, Markup(chart))
    panels["feed"] = _macro("panels.html", "feed", s)
    return panels


def page(template: str, **context: Any) -> str:
    """A whole page from ``templates/<template>``."""
    return environment().get_template(template).render(**context)
