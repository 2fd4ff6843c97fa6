"""``fedchain report RUN_DIR --html``: one self-contained HTML file per run, set or experiment.

The report is the dashboard's own panels, rendered once: the stylesheet is inlined, charts
are inline SVG, an experiment's figures are base64 PNG ``data:`` URIs, and there is no
script and no reference to any other file or URL, so the file can be attached to a paper or
an issue and opened anywhere. A scenario set's report has the detection table followed by
each run's full view (collapsed).
"""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path

from markupsafe import Markup

from fedchain.dashboard import discovery, render
from fedchain.dashboard.pages import ExperimentPage, Page, SetPage, TestnetPage
from fedchain.dashboard.sources import RunSource
from protocol.errors import ConfigError


def stylesheet() -> str:
    """The dashboard's CSS (package data)."""
    return (resources.files("fedchain.dashboard") / "static" / "dashboard.css").read_text("utf-8")


def _run_panels(path: Path, name: str) -> dict[str, str]:
    source = RunSource(path)
    source.refresh()
    return render.run_panels(source.view.snapshot(), name)


def _page_panels(page: Page) -> dict[str, str]:
    page.refresh()
    return page.panels()


def report_html(path: Path) -> str:
    """The report of the run, scenario set, testnet or experiment in ``path``."""
    kind = discovery.classify(path)
    name = path.resolve().name
    intro = None
    if kind in ("demo", "scenario"):
        panels = _run_panels(path, name)
        title = f"{kind} run {name}"
        layout = "run"
    elif kind in ("set", "folder"):
        set_page = SetPage(path, "", path.parent, links=False)
        set_page.refresh()
        panels = {"detection": set_page.panels()["detection"]}
        for row in set_page.rows():
            run_dir = Path(row["run_dir"])
            inner = "".join(
                f'<div class="panel p-{pid}">{html}</div>'
                for pid, html in _run_panels(run_dir, run_dir.name).items()
                if pid != "feed"
            )
            panels[f"run-{run_dir.name}"] = (
                f"<details><summary><strong>{Markup.escape(row['scenario'])}</strong> — "
                f"{Markup.escape(row['outcome'])} ({Markup.escape(run_dir.name)})</summary>"
                f'<div class="panels layout-run">{inner}</div></details>'
            )
        title = f"scenario set {name}"
        layout = "wide"
        intro = f"{len(set_page.rows())} scenario runs; each run's view below the table."
    elif kind == "experiment":
        panels = _page_panels(ExperimentPage(path, name, inline_images=True))
        title = f"experiment {name}"
        layout = "wide"
    elif kind == "testnet":
        testnet_page = TestnetPage(path, name, interactive=False)
        testnet_page.source.settle()
        panels = _page_panels(testnet_page)
        testnet_page.close()
        title = f"testnet {name}"
        layout = "run"
    else:
        raise ConfigError(
            f"RUN_DIR {str(path)!r}: not a run, scenario set, testnet or experiment directory "
            "(no summary.json, events.jsonl, testnet.json or experiment.json there)"
        )
    return render.page(
        "page.html",
        title=title,
        layout=layout,
        panels={k: Markup(v) for k, v in panels.items()},
        crumbs=[],
        stream=None,
        intro=intro,
        inline={"css": Markup(stylesheet())},
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
    )


def write_report(path: Path, output: str | None) -> str:
    """Write the report of ``path`` to ``output`` (default ``path/report.html``; ``-``:
    stdout); returns where it went."""
    html = report_html(path)
    if output == "-":
        sys.stdout.write(html)
        return "<stdout>"
    target = Path(output) if output else path / "report.html"
    try:
        target.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"-o {str(target)!r}: cannot write it ({exc.strerror})") from exc
    return str(target)
