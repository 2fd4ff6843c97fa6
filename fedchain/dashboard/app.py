"""The Starlette application: pages, a JSON API, server-sent events and the control panel.

Routes (``REL`` is a path under the runs root; nothing outside it is ever read):

=================================== ==========================================================
``GET /``                           every run, scenario set, testnet and experiment
``GET /view/REL``                   the page of REL (a run's live view, a set's detection
                                    table, a testnet with its processes, an experiment)
``GET /control``                    the control panel (forms from the CLI's parser, jobs)
``GET /sse/view/REL``, ``/sse/``,   server-sent events: ``panels`` messages carrying the HTML
``/sse/control``                    of each panel that changed, the event count and the last
                                    event's time
``GET /api/runs``                   the runs tree as JSON
``GET /api/view/REL``               a run's or testnet's whole view as JSON
``GET /api/commands``               the control panel's forms as JSON
``GET /api/jobs``                   the jobs; ``POST /api/jobs`` starts one (``{"command",
                                    "values"}``), ``POST /api/jobs/ID/stop`` stops one
``POST /api/testnet/REL/node/N/A``  A = kill | start a testnet node; ``.../restart-chain``
``GET /file/REL``                   a figure, CSV, Markdown, JSON or log file of a run
``GET /static/...``                 the page's CSS and JavaScript (package data)
=================================== ==========================================================

Mutating requests must carry the ``X-Fedchain-Dashboard`` header (a cross-site form cannot
set it, and a cross-origin script would need a CORS pre-flight this app never answers), and
the ``Host`` header must be a loopback name (no DNS rebinding).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from markupsafe import Markup
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from fedchain.dashboard import discovery, forms, render
from fedchain.dashboard.jobs import JobError, JobManager
from fedchain.dashboard.pages import Page, open_page, views_macro
from protocol.errors import ConfigError, FedchainError

#: Seconds between two looks at a followed run (a few stat calls when nothing changed).
POLL_SECONDS = 0.05
#: Pages nobody streamed for this long are dropped from the cache.
PAGE_TTL_SECONDS = 600.0
#: File types ``/file/`` serves, with their media types.
FILE_TYPES = {
    ".png": "image/png",
    ".csv": "text/csv; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".log": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}  # never HTML or SVG: a file from a run directory must not run script on this origin
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
CSRF_HEADER = "x-fedchain-dashboard"
COMMAND_LABELS = {"demo": "Demo", "run": "Scenario", "experiment": "Experiment"}


@dataclass
class _Cached:
    page: Page
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used: float = field(default_factory=time.monotonic)


class Dashboard:
    """State shared by the routes: the runs root, cached pages and the job manager."""

    def __init__(self, runs: Path, jobs: JobManager, scenarios_dir: Path | None) -> None:
        self.runs = runs
        self.jobs = jobs
        self.scenarios_dir = scenarios_dir
        self.pages: dict[str, _Cached] = {}

    def cached(self, rel: str) -> _Cached:
        now = time.monotonic()
        for key in [k for k, c in self.pages.items() if now - c.used > PAGE_TTL_SECONDS]:
            self.pages.pop(key).page.close()
        if rel not in self.pages:
            self.pages[rel] = _Cached(open_page(self.runs, rel))
        entry = self.pages[rel]
        entry.used = now
        return entry

    async def refresh(self, entry: _Cached) -> None:
        async with entry.lock:
            if entry.page.blocking:
                await anyio.to_thread.run_sync(entry.page.refresh)
            else:
                entry.page.refresh()

    def scenario_files(self) -> list[str]:
        if self.scenarios_dir is None or not self.scenarios_dir.is_dir():
            return []
        return [str(p) for p in sorted(self.scenarios_dir.glob("*.toml"))]

    def control_panels(self) -> dict[str, str]:
        self.jobs.poll()
        jobs = []
        for job in sorted(self.jobs.jobs.values(), key=lambda j: j.started, reverse=True):
            d = job.as_dict()
            d["run_links"] = [link for p in d["run_dirs"] if (link := self.link(p))]
            jobs.append(d)
        testnets = [e for e in discovery.scan(self.runs) if e.kind == "testnet"]
        return {
            "jobs": views_macro("jobs", jobs),
            "testnets": "<h3>Testnets</h3>" + views_macro("runs_list", testnets, str(self.runs)),
        }

    def link(self, path: str) -> str | None:
        """``path`` relative to the runs root, if it is inside it and holds something to
        show yet (an experiment's directory appears once its first file is written)."""
        try:
            target = Path(path).resolve()
            rel = target.relative_to(self.runs.resolve()).as_posix()
        except (ValueError, OSError):
            return None
        return rel if discovery.holds_run(target) else None


def _state(request: Request) -> Dashboard:
    state: Dashboard = request.app.state.dashboard
    return state


def _rel(request: Request) -> str:
    return str(request.path_params.get("rel", "")).strip("/")


def _crumbs(rel: str) -> list[tuple[str, str]]:
    crumbs = [("runs", "/")]
    parts = rel.split("/")[:-1] if rel else []
    for i, part in enumerate(parts):
        crumbs.append((part, "/view/" + "/".join(parts[: i + 1])))
    return crumbs


def _digest(html: str) -> str:
    return hashlib.sha1(html.encode(), usedforsecurity=False).hexdigest()


async def index(request: Request) -> Response:
    return await view_page(request)


async def _refreshed(request: Request) -> tuple[Dashboard, str, _Cached]:
    """The dashboard, REL and REL's cached page, just refreshed (404 if nothing is there)."""
    dash = _state(request)
    rel = _rel(request)
    try:
        entry = dash.cached(rel)
    except ConfigError as exc:
        raise HTTPException(404, str(exc)) from exc
    await dash.refresh(entry)
    return dash, rel, entry


async def view_page(request: Request) -> Response:
    _, rel, entry = await _refreshed(request)
    page = entry.page
    html = render.page(
        "page.html",
        title=page.title,
        layout=page.layout,
        panels={k: Markup(v) for k, v in page.panels().items()},
        crumbs=_crumbs(rel) if rel else [],
        stream=f"/sse/view/{rel}" if rel else "/sse/",
        intro=None,
    )
    return HTMLResponse(html)


async def stream_view(request: Request) -> Response:
    dash, _, entry = await _refreshed(request)

    async def panels() -> dict[str, Any]:
        await dash.refresh(entry)
        return {"panels": entry.page.panels(), **entry.page.stream_info()}

    return EventSourceResponse(_panel_stream(request, panels), ping=10, send_timeout=30)


async def _panel_stream(
    request: Request, produce: Callable[[], Any], interval: float = POLL_SECONDS
) -> AsyncIterator[dict[str, str]]:
    """``panels`` messages with the panels whose HTML changed since the last message."""
    sent: dict[str, str] = {}
    while not await request.is_disconnected():
        update = await produce()
        changed = {k: v for k, v in update["panels"].items() if sent.get(k) != _digest(v)}
        if changed:
            sent.update({k: _digest(v) for k, v in changed.items()})
            update["panels"] = changed
            update["sent_at"] = time.time()
            yield {"event": "panels", "data": json.dumps(update)}
        await asyncio.sleep(interval)


async def control_page(request: Request) -> Response:
    dash = _state(request)
    parser = _parser()
    html = render.page(
        "control.html",
        title="control panel",
        forms=forms.command_forms(parser),
        labels=COMMAND_LABELS,
        scenarios=dash.scenario_files(),
        experiments=_experiment_names(),
        runs=str(dash.runs),
        job_timeout=f"{dash.jobs.timeout:g}",
        max_jobs=dash.jobs.max_jobs,
        panels={k: Markup(v) for k, v in dash.control_panels().items()},
        stream="/sse/control",
    )
    return HTMLResponse(html)


async def stream_control(request: Request) -> Response:
    dash = _state(request)

    async def panels() -> dict[str, Any]:
        return {"panels": await anyio.to_thread.run_sync(dash.control_panels)}

    return EventSourceResponse(_panel_stream(request, panels, 0.25), ping=10, send_timeout=30)


def _experiment_names() -> list[str]:
    from fedchain.experiments.builtin import BUILTINS

    return list(BUILTINS)


def _parser() -> Any:
    from fedchain.cli import build_parser

    return build_parser()


def _check_mutation(request: Request) -> None:
    if request.headers.get(CSRF_HEADER) != "1":
        raise HTTPException(403, f"missing {CSRF_HEADER} header")
    origin = request.headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host"):
        raise HTTPException(403, f"cross-origin request from {origin}")


async def api_runs(request: Request) -> Response:
    dash = _state(request)
    return JSONResponse([e.as_dict() for e in discovery.scan(dash.runs)])


async def api_view(request: Request) -> Response:
    _, rel, entry = await _refreshed(request)
    snapshot = getattr(entry.page, "snapshot", None)
    if snapshot is None:
        raise HTTPException(404, f"{rel!r} is not a run or a testnet")
    return JSONResponse(json.loads(json.dumps(snapshot(), default=str)))


async def api_commands(request: Request) -> Response:
    return JSONResponse(forms.command_forms(_parser()))


async def api_jobs(request: Request) -> Response:
    dash = _state(request)
    dash.jobs.poll()
    return JSONResponse([j.as_dict() for j in dash.jobs.jobs.values()])


async def api_start_job(request: Request) -> Response:
    _check_mutation(request)
    dash = _state(request)
    try:
        body = await request.json()
    except ValueError:
        return JSONResponse({"error": "the request body is not JSON"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "the request body is not a JSON object"}, status_code=400)
    command = str(body.get("command", ""))
    values = body.get("values") or {}
    if not isinstance(values, dict):
        return JSONResponse({"error": "values: expected an object"}, status_code=400)
    try:
        argv = forms.argv_from_form(_parser(), command, values)
    except KeyError as exc:
        return JSONResponse({"error": str(exc.args[0])}, status_code=400)
    try:
        # Popen on the event loop's thread: the job's pdeathsig is tied to the forking thread.
        problem = await anyio.to_thread.run_sync(_check, argv)
        if problem is not None:
            raise JobError(problem)
        argv = await anyio.to_thread.run_sync(_with_outputs_under, argv, dash.runs)
        job = dash.jobs.start(argv, checked=True)
    except JobError as exc:
        return JSONResponse({"error": str(exc), "argv": argv}, status_code=400)
    return JSONResponse({"job": job.as_dict()})


def _check(argv: list[str]) -> str | None:
    from fedchain.cli import check_command

    return check_command(argv)


def _with_outputs_under(argv: list[str], runs: Path) -> list[str]:
    """``argv`` (already checked) with an experiment's default ``--out`` under the
    dashboard's runs directory (``RUNS/experiments/NAME[-quick]``, the CLI's default with
    RUNS for ``runs``), so the experiment shows up here."""
    if not argv or argv[0] != "experiment" or "--out" in argv:
        return argv
    from fedchain.cli import build_parser, experiment_out, experiment_spec

    args = build_parser().parse_args(argv)
    return [*argv, "--out", experiment_out(args, experiment_spec(args), runs)]


async def api_stop_job(request: Request) -> Response:
    _check_mutation(request)
    dash = _state(request)
    job_id = str(request.path_params["job"])
    try:
        job = await anyio.to_thread.run_sync(dash.jobs.stop, job_id)
    except JobError as exc:
        return JSONResponse({"error": str(exc)}, status_code=404)
    return JSONResponse({"job": job.as_dict(), "message": f"job {job_id}: {job.state}"})


async def api_testnet_node(request: Request) -> Response:
    _check_mutation(request)
    dash = _state(request)
    from fedchain.testnet import cluster as testnet

    rel = _rel(request)
    name = str(request.path_params["node"])
    action = str(request.path_params["action"])
    try:
        path = discovery.resolve_under(dash.runs, rel)
        if discovery.classify(path) != "testnet":
            raise ConfigError(f"{rel!r}: not a testnet directory")
        if action == "kill":
            ran = await anyio.to_thread.run_sync(testnet.kill_node, path, name)
            message = f"{name}: {'killed (SIGKILL)' if ran else 'was not running'}"
        elif action == "start":
            pid = await anyio.to_thread.run_sync(testnet.start_node, path, name)
            message = f"{name}: started (pid {pid})"
        else:
            raise ConfigError(f"action {action!r}: expected kill or start")
    except FedchainError as exc:
        return JSONResponse({"error": f"fedchain: error: {exc}"}, status_code=400)
    return JSONResponse({"message": message})


async def api_restart_chain(request: Request) -> Response:
    _check_mutation(request)
    dash = _state(request)
    from fedchain.testnet import cluster as testnet

    rel = _rel(request)
    try:
        path = discovery.resolve_under(dash.runs, rel)
        if discovery.classify(path) != "testnet":
            raise ConfigError(f"{rel!r}: not a testnet directory")
        spec = await anyio.to_thread.run_sync(testnet.restart_chain, path)
    except FedchainError as exc:
        return JSONResponse({"error": f"fedchain: error: {exc}"}, status_code=400)
    return JSONResponse({"message": f"anvil restarted from its saved state on {spec['rpc_url']}"})


async def serve_file(request: Request) -> Response:
    dash = _state(request)
    rel = _rel(request)
    try:
        path = discovery.resolve_under(dash.runs, rel)
    except ConfigError as exc:
        raise HTTPException(404, str(exc)) from exc
    media = FILE_TYPES.get(path.suffix.lower())
    if media is None or not path.is_file():
        raise HTTPException(404, f"{rel!r}: not a file the dashboard serves")
    return FileResponse(path, media_type=media, headers={"X-Content-Type-Options": "nosniff"})


async def _watch_jobs(dash: Dashboard) -> None:
    """Collect exit statuses and enforce time limits even with no page open."""
    while True:
        await anyio.to_thread.run_sync(dash.jobs.poll)
        await asyncio.sleep(1.0)


def create_app(
    runs: Path,
    *,
    job_timeout: float = 3600.0,
    max_jobs: int = 2,
    scenarios_dir: Path | None = None,
) -> Starlette:
    """The dashboard for the runs under ``runs`` (jobs bounded to ``job_timeout`` seconds)."""
    jobs = JobManager(runs, timeout=job_timeout, max_jobs=max_jobs)
    dash = Dashboard(runs, jobs, scenarios_dir)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        watcher = asyncio.create_task(_watch_jobs(dash))
        try:
            yield
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            for cached in dash.pages.values():
                cached.page.close()
            stopped = await anyio.to_thread.run_sync(jobs.shutdown)
            if stopped:
                print(f"fedchain dashboard: stopped jobs {', '.join(stopped)}", flush=True)

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/view/{rel:path}", view_page),
            Route("/control", control_page),
            Route("/sse/", stream_view),
            Route("/sse/view/{rel:path}", stream_view),
            Route("/sse/control", stream_control),
            Route("/api/runs", api_runs),
            Route("/api/view/{rel:path}", api_view),
            Route("/api/commands", api_commands),
            Route("/api/jobs", api_jobs, methods=["GET"]),
            Route("/api/jobs", api_start_job, methods=["POST"]),
            Route("/api/jobs/{job}/stop", api_stop_job, methods=["POST"]),
            Route(
                "/api/testnet/{rel:path}/node/{node}/{action}", api_testnet_node, methods=["POST"]
            ),
            Route("/api/testnet/{rel:path}/restart-chain", api_restart_chain, methods=["POST"]),
            Route("/file/{rel:path}", serve_file),
            Mount("/static", StaticFiles(packages=[("fedchain.dashboard", "static")])),
        ],
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS)],
        lifespan=lifespan,
    )
    app.state.dashboard = dash
    return app
