"""Shared pieces of the dashboard's browser tests: Debian's chromium driven by Playwright,
a ``fedchain dashboard`` process, screenshots as test artifacts.

Chromium is required the way anvil is for the realnet tests: with
``FEDCHAIN_REQUIRE_REALNET=1`` (set by ``.ci/run``) or ``FEDCHAIN_REQUIRE_BROWSER=1`` a
missing browser fails the tests instead of skipping them. Playwright never downloads a
browser here (``executable_path`` points at the system's chromium).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
CHROMIUM = os.environ.get("FEDCHAIN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]
#: Where screenshots go (gitignored): $FEDCHAIN_TEST_ARTIFACTS or ./test-artifacts.
ARTIFACTS = Path(os.environ.get("FEDCHAIN_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"


def require_chromium() -> None:
    """Skip (or, when CI requires the browser tests, fail) without chromium + Playwright."""
    problem = None
    if not os.access(CHROMIUM, os.X_OK):
        problem = f"{CHROMIUM} not found: run scripts/install_browser.sh (make setup)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "playwright is not installed: make setup (requirements.lock)"
    if problem is None:
        return
    if "1" in (
        os.environ.get("FEDCHAIN_REQUIRE_REALNET"),
        os.environ.get("FEDCHAIN_REQUIRE_BROWSER"),
    ):
        pytest.fail(problem)
    pytest.skip(problem)


@contextlib.contextmanager
def browser_context(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A fresh headless chromium profile (Playwright persistent context)."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with (
        tempfile.TemporaryDirectory(prefix="fedchain-chromium-") as profile,
        sync_playwright() as p,
    ):
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height},
        )
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot as a test artifact; returns its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class DashboardProcess:
    """``fedchain dashboard`` as a subprocess on a free loopback port, stopped by PID."""

    def __init__(self, runs: Path, *extra: str, max_seconds: float = 900.0) -> None:
        self.runs = runs
        cmd = [
            sys.executable,
            "-m",
            "fedchain.cli",
            "dashboard",
            "--runs",
            str(runs),
            "--port",
            "0",
            "--max-seconds",
            str(max_seconds),
            *extra,
        ]
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.output: list[str] = []
        self._url: str | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(60) or self._url is None:
            self.stop()
            raise AssertionError("dashboard did not start:\n" + "".join(self.output))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
            if m and self._url is None:
                self._url = m.group(1)
                self._ready.set()
        self._ready.set()

    @property
    def url(self) -> str:
        assert self._url is not None
        return self._url

    def stop(self) -> int | None:
        """SIGTERM (a graceful stop: it stops its jobs), then SIGKILL; the exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
