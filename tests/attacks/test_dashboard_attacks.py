"""Attacks on the dashboard and the CLI (issue 24): a hostile page in the same browser,
hostile or malformed run directories, secrets, option injection through form fields.

The application is driven in-process through its ASGI interface (the real Starlette app with
its middleware, no mock), or as a real ``fedchain dashboard`` process over HTTP where the
process boundary matters (``ps``, the job's log, the bound address, live connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest

from fedchain.cli import main
from fedchain.dashboard import forms
from fedchain.dashboard.app import create_app
from fedchain.dashboard.jobs import Job
from fedchain.options import build_parser, check_command
from protocol.errors import ConfigError
from tests.dashboard_support import DashboardProcess, wait_for

CROSS_SITE_IMG = {
    "sec-fetch-site": "same-site",
    "sec-fetch-mode": "no-cors",
    "sec-fetch-dest": "image",
}
CROSS_SITE_NAV = {
    "sec-fetch-site": "cross-site",
    "sec-fetch-mode": "navigate",
    "sec-fetch-dest": "document",
}
SAME_ORIGIN_NAV = {
    "sec-fetch-site": "same-origin",
    "sec-fetch-mode": "navigate",
    "sec-fetch-dest": "document",
}
SECRET = "0x" + "5e" * 32  # a well-formed private key that appears nowhere else


# ----------------------------------------------------------------------------------------
# An in-process HTTP request to the ASGI app
# ----------------------------------------------------------------------------------------


def request(
    app: Any,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    host: str = "127.0.0.1:8765",
) -> tuple[int, dict[str, str], bytes]:
    """One request through the whole app (middleware included): status, headers, body."""

    async def run() -> tuple[int, dict[str, str], bytes]:
        raw_path, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": unquote(raw_path),
            "raw_path": raw_path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(b"host", host.encode())]
            + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8765),
        }
        messages: list[dict[str, Any]] = []
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            messages.append(message)

        await app(scope, receive, send)
        start = next(m for m in messages if m["type"] == "http.response.start")
        out = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
        hdrs = {k.decode().lower(): v.decode() for k, v in start.get("headers", [])}
        return int(start["status"]), hdrs, out

    return asyncio.run(run())


def _write_run(run: Path, summary: Any = None, events: list[dict[str, Any]] | None = None) -> None:
    run.mkdir(parents=True)
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))
    if events is not None:
        (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def _fake_testnet(directory: Path) -> None:
    """A testnet directory whose chain is unreachable (nothing listens on port 9)."""
    directory.mkdir(parents=True)
    spec = {"task": "0x" + "11" * 20, "rpc_url": "http://127.0.0.1:9", "nodes": [], "services": {}}
    (directory / "testnet.json").write_text(json.dumps(spec))


# ----------------------------------------------------------------------------------------
# 1. Framing, cross-site requests, GETs that start work, confirmation
# ----------------------------------------------------------------------------------------


def test_every_response_forbids_framing_and_foreign_content(tmp_path: Path) -> None:
    """Clickjacking: every response (pages, API, static, files, errors) says no frame, no
    foreign script/style/connection."""
    _write_run(tmp_path / "r1", {"rounds_finalized": 1})
    (tmp_path / "r1" / "cells.csv").write_text("a,b\n1,2\n")
    app = create_app(tmp_path)
    for path in ["/", "/control", "/api/runs", "/api/jobs", "/static/dashboard.js",
                 "/file/r1/cells.csv", "/view/nothing-here", "/file/../etc/passwd"]:  # fmt: skip
        status, headers, _ = request(app, "GET", path)
        assert headers.get("x-frame-options") == "DENY", (path, status)
        csp = headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, path
        assert headers.get("x-content-type-options") == "nosniff", path


def test_the_pages_need_no_inline_script_or_style(tmp_path: Path) -> None:
    """The CSP allows only this origin's files: the pages must not rely on inline script,
    inline style attributes or event handlers (they would silently stop working)."""
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "experiment.json").write_text(
        json.dumps({"name": "x", "status": "running", "units_total": 4, "units_done": 1})
    )
    _write_run(tmp_path / "set" / "r", {"rounds_finalized": 1})
    app = create_app(tmp_path)
    for path in ["/", "/control", "/view/exp", "/view/set"]:
        status, _, body = request(app, "GET", path)
        html = body.decode()
        assert status == 200, path
        assert " style=" not in html and "<style" not in html, path
        assert "<script>" not in html and " onclick=" not in html, path


def test_a_cross_site_subresource_request_never_reaches_a_route(tmp_path: Path) -> None:
    """Another site's <img>/fetch/form to the dashboard: 403 before any route runs (no
    page opened, no job started), even with the CSRF header a form cannot set anyway."""
    _fake_testnet(tmp_path / "tn")
    app = create_app(tmp_path)
    dash = app.state.dashboard
    status, _, _ = request(app, "GET", "/view/tn", CROSS_SITE_IMG)
    assert status == 403
    assert dash.pages == {}  # the testnet page was never even opened
    body = json.dumps({"command": "demo", "values": {"rounds": "1"}}).encode()
    headers = {"sec-fetch-site": "same-site", "sec-fetch-mode": "cors", "sec-fetch-dest": "empty",
               "x-fedchain-dashboard": "1", "content-type": "application/json"}  # fmt: skip
    status, _, _ = request(app, "POST", "/api/jobs", headers, body)
    assert status == 403
    assert dash.jobs.jobs == {}


def test_a_cross_site_get_starts_no_chain_thread_until_the_page_itself_asks(
    tmp_path: Path,
) -> None:
    """A testnet view opened by another site (a link followed) renders but starts no
    chain-reading thread (nor the evaluation worker it owns); the page's own same-origin
    load does."""
    _fake_testnet(tmp_path / "tn")
    app = create_app(tmp_path)
    dash = app.state.dashboard
    status, _, body = request(app, "GET", "/view/tn", CROSS_SITE_NAV)
    assert status == 200 and b"Testnet processes" in body
    source = dash.pages["tn"].page.source
    assert source._thread is None
    status, _, _ = request(app, "GET", "/view/tn", SAME_ORIGIN_NAV)
    assert status == 200
    assert source._thread is not None
    dash.pages["tn"].page.close()


def test_destructive_buttons_ask_for_confirmation() -> None:
    """kill -9, stop and restart chain each carry a confirmation question (start does not)."""
    from fedchain.dashboard.pages import views_macro

    processes = {
        "anvil": {"role": "service", "pid": 1, "running": True},
        "aggregator-0": {"role": "aggregator", "pid": 2, "running": True},
        "client-0": {"role": "client", "pid": None, "running": False},
    }
    html = views_macro("nodes", processes, {}, None, "tn", True)
    jobs = views_macro("jobs", [_job_dict()])
    for needle in ["/restart-chain", "/node/aggregator-0/kill", "/api/jobs/1/stop"]:
        button = next(b for b in (html + jobs).split("<button")[1:] if needle in b)
        assert "data-confirm=" in button, needle
    start = next(b for b in html.split("<button")[1:] if "/start" in b)
    assert "data-confirm=" not in start


def _job_dict() -> dict[str, Any]:
    job = Job("1", ["demo", "--name=a b"], 123, time.time(), time.time() + 60, Path("/nonexistent"))
    d = job.as_dict()
    d["run_links"] = []
    return d


# ----------------------------------------------------------------------------------------
# 2. Secrets
# ----------------------------------------------------------------------------------------


def test_a_funding_key_on_the_command_line_is_refused_without_echo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """argv is world-readable (ps): the CLI refuses --funding-key and names the safe ways."""
    assert main(["demo", "--funding-key", SECRET, "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert "--funding-key" in err and "FEDCHAIN_FUNDING_KEY" in err and SECRET not in err


def test_a_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(SECRET + "\n")
    key.chmod(0o644)
    line = check_command(["demo", "--funding-key-file", str(key)])
    assert line is not None and "chmod 600" in line and SECRET not in line
    key.chmod(0o600)
    assert check_command(["demo", "--funding-key-file", str(key)]) is None
    from fedchain.options import demo_config

    args = build_parser().parse_args(["demo", "--funding-key-file", str(key)])
    assert demo_config(args, {}).funding_key == SECRET
    args = build_parser().parse_args(["demo"])
    assert demo_config(args, {"FEDCHAIN_FUNDING_KEY": SECRET}).funding_key == SECRET


def test_testnet_spec_holding_keys_is_written_owner_only(tmp_path: Path) -> None:
    """testnet.json (every node's key, the HE key holder's p and q) is 0600, even when a
    wider file was there before."""
    from fedchain.testnet.cluster import write_private

    path = tmp_path / "testnet.json"
    path.write_text("{}")
    path.chmod(0o644)
    write_private(path, json.dumps({"nodes": [{"key": SECRET}]}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["nodes"][0]["key"] == SECRET
    source = (Path(__file__).parents[2] / "fedchain" / "testnet" / "cluster.py").read_text()
    assert "_spec_path(directory).write_text" not in source


def test_a_secret_field_is_offered_only_where_the_command_takes_a_key(tmp_path: Path) -> None:
    app = create_app(tmp_path)
    body = json.dumps(
        {"command": "run", "values": {"scenarios": ["x.toml"], "funding_key": SECRET}}
    )
    status, _, out = request(app, "POST", "/api/jobs", {"x-fedchain-dashboard": "1"}, body.encode())
    assert status == 400 and b"no option 'funding_key'" in out and SECRET.encode() not in out


def test_key_files_and_job_logs_are_never_served(tmp_path: Path) -> None:
    _fake_testnet(tmp_path / "tn")
    logs = tmp_path / ".dashboard" / "jobs"
    logs.mkdir(parents=True)
    (logs / "1.log").write_text("secret\n")
    app = create_app(tmp_path)
    assert request(app, "GET", "/file/tn/testnet.json")[0] == 404
    assert request(app, "GET", "/file/.dashboard/jobs/1.log")[0] == 404


def _http(url: str, data: Any = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    body = None if data is None else json.dumps(data).encode()
    hdrs = {"X-Fedchain-Dashboard": "1", "Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(url, data=body, headers=hdrs, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _follow_job(dash: DashboardProcess, values: dict[str, str], timeout: float) -> dict[str, Any]:
    """Start ``demo`` from the form with ``values``; while it runs, grep ``ps`` (every
    process, whole command lines) and its ``/proc/PID/cmdline`` for the key; its record."""
    status, text = _http(dash.url + "api/jobs", {"command": "demo", "values": values})
    assert status == 200, text
    assert SECRET not in text
    job = json.loads(text)["job"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ps = subprocess.run(["ps", "-eo", "pid,args", "ww"], capture_output=True, text=True)
        assert SECRET not in ps.stdout
        with (
            contextlib.suppress(FileNotFoundError, ProcessLookupError),
            open(f"/proc/{job['pid']}/cmdline", "rb") as fh,
        ):
            assert SECRET.encode() not in fh.read()
        _, jobs = _http(dash.url + "api/jobs")
        assert SECRET not in jobs
        record: dict[str, Any] = next(j for j in json.loads(jobs) if j["id"] == job["id"])
        if record["state"] != "running":
            return record
        time.sleep(0.1)
    raise AssertionError(f"job {job['id']} still running after {timeout} s")


@pytest.mark.slow
def test_a_funding_key_from_the_form_appears_in_no_argv_log_page_or_file(tmp_path: Path) -> None:
    """The control panel's password field: the key reaches the job through its environment;
    ``ps``, the job's log on disk, every page, API answer and served file are grepped: for
    a job that fails (nothing listens on its RPC port) and one that runs a whole demo."""
    runs = tmp_path / "runs"
    dash = DashboardProcess(runs, max_seconds=600)
    try:
        rpc = f"http://127.0.0.1:{_free_port()}"
        values = {"rounds": "1", "clients": "3", "out": str(runs), "funding_key": SECRET}
        failed = _follow_job(dash, {**values, "rpc_url": rpc}, 120)
        assert failed["state"] == "failed" and "--rpc-url" in (failed["error"] or "")
        finished = _follow_job(dash, values, 400)  # the embedded chain: a complete run
        assert finished["state"] == "finished", finished["log"]
        assert finished["run_dirs"]
        for log in (runs / ".dashboard" / "jobs").glob("*.log"):
            assert SECRET not in log.read_text()
            assert stat.S_IMODE(log.stat().st_mode) == 0o600
        pages = ["", "control", "api/runs", "api/commands", "api/jobs"]
        pages += [f"view/{quote(link)}" for link in _run_links(runs)]
        pages += [f"api/view/{quote(link)}" for link in _run_links(runs)]
        for path in pages:
            status, body = _http(dash.url + path)
            assert status == 200, path
            assert SECRET not in body, path
        served = 0
        for f in runs.rglob("*"):
            if f.is_file():
                assert SECRET.encode() not in f.read_bytes() or ".dashboard" in f.parts, f
                status, body = _http(dash.url + "file/" + quote(f.relative_to(runs).as_posix()))
                served += status == 200
                assert SECRET not in body
        assert served >= 3  # summary.json, rounds.jsonl, events.jsonl at least
    finally:
        dash.stop()
    assert all(SECRET not in line for line in dash.output)


def _run_links(runs: Path) -> list[str]:
    return [p.parent.relative_to(runs).as_posix() for p in runs.rglob("summary.json")]


# ----------------------------------------------------------------------------------------
# 3. Option injection, names, limits, host, containment
# ----------------------------------------------------------------------------------------


def test_list_elements_stay_whole_and_cannot_add_options() -> None:
    """A JSON list element is one argument (a path with a space stays one path); an element
    or positional starting with '-' is refused; an option's value is --option=VALUE."""
    parser = build_parser()
    argv = forms.argv_from_form(parser, "run", {"scenarios": ["my dir/a b.toml", "c.toml"]})
    assert argv == ["run", "my dir/a b.toml", "c.toml"]
    with pytest.raises(ConfigError, match="must not start with '-'"):
        forms.argv_from_form(parser, "run", {"scenarios": ["--json --out /tmp/x"]})
    with pytest.raises(ConfigError, match="must not start with '-'"):
        forms.argv_from_form(parser, "run", {"scenarios": ["a.toml", "--out=/tmp/x"]})
    with pytest.raises(ConfigError, match="must not start with '-'"):
        forms.argv_from_form(parser, "experiment", {"experiment": "--help"})
    argv = forms.argv_from_form(parser, "demo", {"name": "--json", "out": "-x"})
    args = parser.parse_args(argv)
    assert (args.name, args.out, args.json) == ("--json", "-x", False)


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "x\0y", "-rf", ""])
def test_run_names_that_leave_out_are_refused_by_the_cli(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["demo", f"--name={name}", "--out", str(out), "--rounds", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedchain: error: --name")
    assert not any(tmp_path.rglob("*x*")) and not out.exists()


def test_shown_commands_are_shell_quoted() -> None:
    job = Job("1", ["demo", "--name=a b; rm -rf ~"], 1, 0.0, 1.0, Path("/nonexistent"))
    assert job.as_dict()["command"] == "fedchain demo '--name=a b; rm -rf ~'"


def test_experiment_workers_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    line = check_command(["experiment", "clients", "--quick", "--jobs", "500"])
    assert line is not None and "--jobs 500" in line and "at most" in line
    assert check_command(["experiment", "clients", "--quick", "--jobs", "2"]) is None


def test_data_path_with_a_dataset_that_reads_no_files_fails_the_preflight(tmp_path: Path) -> None:
    line = check_command(["demo", "--dataset", "digits", "--data-path", str(tmp_path)])
    assert line is not None and "--data-path" in line and "reads no files" in line


def test_the_preflight_checks_what_the_command_would_refuse_later() -> None:
    """What used to fail only after the process started is refused before it starts."""
    scenario = str(Path(__file__).parents[2] / "scenarios" / "agg-noise.toml")
    line = check_command(["run", scenario, "--seed", "-3"])
    assert line is not None and "seed" in line
    line = check_command(["testnet", "up", "--scenario", "missing.toml"])
    assert line is not None and "missing.toml" in line


def test_the_host_allow_list_matches_the_bound_address(tmp_path: Path) -> None:
    """--host 127.0.0.2 serves requests addressed to it (before: every request got 400)."""
    app = create_app(tmp_path, host="127.0.0.2")
    assert request(app, "GET", "/", host="127.0.0.2:8765")[0] == 200
    assert request(app, "GET", "/", host="evil.example:8765")[0] == 400
    assert request(create_app(tmp_path), "GET", "/", host="127.0.0.2:8765")[0] == 400


@pytest.mark.slow
def test_live_connections_are_bounded(tmp_path: Path) -> None:
    """Beyond --max-streams open event streams the next one gets 503 (and the page backs
    off and retries); a closed stream frees its slot."""
    dash = DashboardProcess(tmp_path, "--max-streams", "1", max_seconds=120)
    try:
        first = urllib.request.urlopen(dash.url + "sse/", timeout=30)
        assert first.status == 200
        first.readline()
        assert _http(dash.url + "sse/")[0] == 503
        first.close()
        wait_for(lambda: _stream_status(dash.url + "sse/") == 200, 30, "a freed slot")
    finally:
        dash.stop()


def _stream_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_live_view_does_not_follow_a_summary_outside_the_runs(tmp_path: Path) -> None:
    """A symlinked summary.json pointing outside --runs is not read (as /file/ refuses it)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "summary.json").write_text(json.dumps({"final_accuracy": 0.123456789}))
    runs = tmp_path / "runs"
    _write_run(runs / "r", events=[{"kind": "run_started", "t": 1.0, "rounds": 1}])
    (runs / "r" / "summary.json").symlink_to(outside / "summary.json")
    app = create_app(runs)
    status, _, body = request(app, "GET", "/api/view/r")
    assert status == 200
    assert "0.123456789" not in body.decode()
    assert request(app, "GET", "/file/r/summary.json")[0] == 404
    _, _, listing = request(app, "GET", "/api/runs")
    assert "0.123456789" not in listing.decode()  # nor does the runs list read it


# ----------------------------------------------------------------------------------------
# 4. Malformed run directories, links
# ----------------------------------------------------------------------------------------

BAD_SUMMARIES = [[1, 2], "text", {"scenario": "x", "faults": 3, "config": []}]


def _bad_runs(root: Path) -> None:
    for i, summary in enumerate(BAD_SUMMARIES):
        _write_run(root / f"bad-{i}", summary)
    _write_run(root / "bad-events", events=[{"kind": "round_opened"}, {"kind": "submitted"},
                                            {"kind": "challenged", "round": "x"}, {}])  # fmt: skip
    _write_run(root / "good", {"rounds_finalized": 2, "rounds_requested": 2})
    (root / "bad-testnet").mkdir()
    (root / "bad-testnet" / "testnet.json").write_text(json.dumps({"nodes": ["x", 3]}))


def test_malformed_run_directories_are_listed_as_unreadable_and_break_nothing(
    tmp_path: Path,
) -> None:
    _bad_runs(tmp_path)
    app = create_app(tmp_path)
    status, _, body = request(app, "GET", "/api/runs")
    assert status == 200
    entries = {e["name"]: e for e in json.loads(body)}
    assert entries["bad-0"]["status"] == "unreadable: summary.json holds a JSON list, not an object"
    assert entries["bad-1"]["status"].startswith("unreadable: ")
    assert entries["bad-2"]["status"].startswith("unreadable: a field has the wrong type")
    assert entries["good"]["status"] == "finished"
    for path in ["/", "/control", "/view/bad-0", "/view/bad-1", "/view/bad-2",
                 "/view/bad-events", "/api/view/bad-events", "/view/bad-testnet"]:  # fmt: skip
        status, _, body = request(app, "GET", path)
        assert status in (200, 422), (path, status, body[:300])
    assert b"unreadable: " in request(app, "GET", "/")[2]
    assert b"unreadable: " in request(app, "GET", "/view/bad-0")[2]
    assert b"unreadable: " in request(app, "GET", "/view/bad-testnet")[2]
    assert entries["bad-testnet"]["kind"] == "unreadable"
    assert request(app, "GET", "/view/no-such-run")[0] == 404  # missing is not unreadable


def test_report_lists_a_malformed_run_as_unreadable_without_a_traceback(tmp_path: Path) -> None:
    _bad_runs(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "fedchain.cli", "report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "3 run directories unreadable" in proc.stderr
    assert "| bad-2 | unreadable: a field has the wrong type (faults is a JSON int" in proc.stdout
    assert "| bad-0 | unreadable: summary.json holds a JSON list" in proc.stdout
    assert "| good |" in proc.stdout


@pytest.mark.parametrize("name", ["a#b", "q?x=1", "50%", "sp ace"])
def test_run_links_are_percent_encoded(name: str, tmp_path: Path) -> None:
    _write_run(tmp_path / name, {"rounds_finalized": 1})
    app = create_app(tmp_path)
    _, _, body = request(app, "GET", "/")
    href = "/view/" + quote(name)
    assert f'href="{href}"' in body.decode()
    status, _, page = request(app, "GET", href)
    assert status == 200 and name.encode() in page


def test_the_testnets_panel_has_its_own_empty_text(tmp_path: Path) -> None:
    _, _, body = request(create_app(tmp_path), "GET", "/control")
    html = body.decode()
    panel = html[html.index('id="panel-testnets"') :]
    assert "no testnets yet" in panel and "no runs yet" not in panel
