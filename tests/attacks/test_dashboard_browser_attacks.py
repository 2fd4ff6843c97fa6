"""The dashboard attacked from a real browser (Debian's chromium via Playwright, issue 24).

A hostile page is served from another origin (another port of 127.0.0.1, the same *site*)
and tries to frame the control panel, to click in it, to post to the API and to make the
dashboard start work with an ``<img>``. A page whose live connection fails is seen to come
back by itself, and a malformed run directory is listed as unreadable. Every check waits
for what it checks (Playwright's ``wait_for_*``), never a snapshot that races the page.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard_support import (
    DashboardProcess,
    browser_context,
    require_chromium,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Any:
    with browser_context() as context:
        yield context


@contextlib.contextmanager
def hostile_site(html: str) -> Iterator[str]:
    """An HTTP server on another 127.0.0.1 port serving ``html`` at ``/``; its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _jobs(dash: DashboardProcess) -> list[Any]:
    with urllib.request.urlopen(dash.url + "api/jobs", timeout=30) as resp:
        jobs: list[Any] = json.loads(resp.read())
    return jobs


def _fake_testnet(directory: Path, rpc_url: str) -> None:
    directory.mkdir(parents=True)
    spec = {"task": "0x" + "11" * 20, "rpc_url": rpc_url, "nodes": [], "services": {}}
    (directory / "testnet.json").write_text(json.dumps(spec))


class CountingChain:
    """A JSON-RPC endpoint that answers nothing useful and counts the requests it gets."""

    def __init__(self) -> None:
        self.requests = 0
        self.url = ""


@contextlib.contextmanager
def counting_chain() -> Iterator[CountingChain]:
    chain = CountingChain()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            chain.requests += 1
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    chain.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield chain
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def chain() -> Iterator[CountingChain]:
    with counting_chain() as c:
        yield c


def test_a_page_on_another_origin_can_neither_frame_nor_drive_the_dashboard(
    browser: Any, chain: CountingChain, tmp_path: Path
) -> None:
    """Clickjacking and cross-site requests: the framed control panel never renders (the
    browser refuses it: X-Frame-Options/frame-ancestors), a click where its start button
    would be reaches nothing, a cross-site <img> of a testnet view and a no-cors POST get
    403, a CORS POST with the CSRF header fails its pre-flight: no job is started."""
    require_chromium()
    _fake_testnet(tmp_path / "tn", chain.url)
    dash = DashboardProcess(tmp_path, max_seconds=300)
    body = json.dumps({"command": "demo", "values": {"rounds": "1"}})
    html = f"""<!doctype html><title>free prizes</title>
<iframe id="victim" src="{dash.url}control" width="1200" height="800"
        style="opacity:0.01;position:absolute;top:0;left:0"></iframe>
<img id="probe" src="{dash.url}view/tn">
<script>
window.results = {{}};
fetch("{dash.url}api/jobs", {{method: "POST", mode: "no-cors", body: {json.dumps(body)}}})
  .then(() => window.results.nocors = "sent", () => window.results.nocors = "failed");
fetch("{dash.url}api/jobs", {{method: "POST", body: {json.dumps(body)},
  headers: {{"X-Fedchain-Dashboard": "1", "Content-Type": "application/json"}}}})
  .then(r => window.results.cors = "status " + r.status, () => window.results.cors = "blocked");
</script>"""
    try:
        with hostile_site(html) as evil:
            page = browser.new_page()
            statuses: dict[str, int] = {}
            page.on("response", lambda r: statuses.__setitem__(r.url, r.status))
            blocked: list[str] = []
            page.on("requestfailed", lambda r: blocked.append(r.url))
            page.goto(evil)
            page.wait_for_function("() => window.results.nocors && window.results.cors")
            results = page.evaluate("window.results")
            assert results["cors"] == "blocked"  # the pre-flight is never answered
            # the framed control panel: no document of the dashboard's was loaded in it
            page.wait_for_function("() => window.frames.length === 1")
            frame = next(f for f in page.frames if f != page.main_frame)
            frame.wait_for_load_state()
            assert frame.locator("#form-demo").count() == 0
            assert statuses[f"{dash.url}control"] == 403  # a frame load is no top-level page
            # clicking where the start button would be reaches nothing
            page.mouse.click(200, 300)
            page.mouse.click(600, 600)
            page.wait_for_timeout(500)
            # the <img> got nothing (CORP), and the dashboard started nothing for it: no
            # JSON-RPC request reached the testnet's chain (the chain thread never started)
            assert f"{dash.url}view/tn" in blocked
            page.wait_for_timeout(3000)  # the chain thread would poll within a second
            assert chain.requests == 0
            screenshot(page, "attack-hostile-page")
            page.close()
        assert _jobs(dash) == []
        # the probe works: the dashboard's own page of the testnet does read its chain
        own = browser.new_page()
        own.goto(dash.url + "view/tn")
        wait_for(lambda: chain.requests > 0, 60, "the chain thread's first JSON-RPC call")
        own.close()
    finally:
        dash.stop()


def test_the_page_recovers_after_a_failed_reconnect(browser: Any, tmp_path: Path) -> None:
    """A reconnect answered with an HTTP error (503: the connection limit) makes the
    browser give up on an EventSource for good; the page retries with backoff and is live
    again once the server answers."""
    require_chromium()
    dash = DashboardProcess(tmp_path, "--max-streams", "1", max_seconds=300)
    try:
        holder = browser.new_page()
        holder.goto(dash.url)
        holder.wait_for_selector("#conn.live")
        page = browser.new_page()
        page.goto(dash.url)  # its stream gets 503: the only slot is taken
        page.wait_for_selector("#conn.down")
        page.wait_for_function("() => window.__fedchain.reconnects >= 1", timeout=30_000)
        assert page.locator("#conn.live").count() == 0
        holder.close()  # the slot frees: the next retry gets through
        page.wait_for_selector("#conn.live", timeout=60_000)
        page.close()
    finally:
        dash.stop()


def test_the_page_reconnects_after_a_restarted_server_first_answers_with_an_error(
    browser: Any, tmp_path: Path
) -> None:
    """The dashboard restarts while a run's page is open, and the page's first reconnect is
    answered 404 (the run's directory is briefly gone): the page keeps retrying and is live
    again once the run is back (before: stuck on "reconnecting…" until a manual reload)."""
    require_chromium()
    run = tmp_path / "r"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"rounds_finalized": 1, "rounds_requested": 1}))
    port = _free_port()
    dash = DashboardProcess(tmp_path, "--port", str(port), max_seconds=300)
    second = None
    try:
        page = browser.new_page()
        page.goto(dash.url + "view/r")
        page.wait_for_selector("#conn.live")
        dash.stop()
        page.wait_for_selector("#conn.down")
        away = tmp_path / "away"
        run.rename(away)
        with page.expect_response(
            lambda r: "/sse/view/r" in r.url and r.status == 404, timeout=90_000
        ):  # Playwright's events are delivered while it waits, not during a Python sleep
            second = DashboardProcess(tmp_path, "--port", str(port), max_seconds=300)
        away.rename(run)
        page.wait_for_selector("#conn.live", timeout=90_000)
        page.close()
    finally:
        dash.stop()
        if second is not None:
            second.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_bad_run_directory_is_listed_as_unreadable(browser: Any, tmp_path: Path) -> None:
    """summary.json of the wrong type: the list says 'unreadable: why', the run's page says
    it too, and the other runs are listed as before (no 500 anywhere)."""
    require_chromium()
    bad = tmp_path / "bad-run"
    bad.mkdir()
    (bad / "summary.json").write_text("[1, 2, 3]")
    good = tmp_path / "good-run"
    good.mkdir()
    (good / "summary.json").write_text(json.dumps({"rounds_finalized": 1, "rounds_requested": 1}))
    dash = DashboardProcess(tmp_path, max_seconds=300)
    try:
        page = browser.new_page()
        violations: list[str] = []
        page.on(
            "console",
            lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
        )
        page.goto(dash.url)
        row = page.locator("#runs-table tr[data-kind=unreadable]")
        row.wait_for()
        assert "unreadable: summary.json holds a JSON list" in row.inner_text()
        page.locator("#runs-table tr[data-rel=good-run]").wait_for()
        row.locator("a").click()
        page.wait_for_selector("#unreadable")
        assert "unreadable: summary.json holds a JSON list" in page.inner_text("#unreadable")
        page.wait_for_selector("#conn.live")
        page.goto(dash.url + "control")
        page.wait_for_selector("#conn.live")
        screenshot(page, "attack-unreadable-run")
        # a quoted path with spaces stays one argument; an option-like item is refused
        page.click("[data-tab=run]")
        form = page.locator("#form-run")
        form.locator("input[name=scenarios]").fill('"no such/x y.toml"')
        form.locator("button[type=submit]").click()
        page.wait_for_function(
            "t => document.querySelector('#form-run .form-error').textContent === t",
            arg="fedchain: error: scenario 'no such/x y.toml': no such file",
        )
        form.locator("input[name=scenarios]").fill("a.toml --out=/tmp/elsewhere")
        form.locator("button[type=submit]").click()
        page.wait_for_function(
            "() => document.querySelector('#form-run .form-error').textContent"
            ".includes(\"must not start with '-'\")"
        )
        assert violations == []  # the pages work under their own CSP
        page.close()
    finally:
        dash.stop()
