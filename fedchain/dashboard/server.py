"""``fedchain dashboard``: the application under uvicorn, on a loopback address only.

:func:`serve` checks the options (one-line errors, exit status 2, nothing started), binds
the socket itself (so port 0 or a taken default port still prints the real URL before the
first request), runs uvicorn until Ctrl-C, SIGTERM or ``--max-seconds``, and on the way out
stops every process the control panel started.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from pathlib import Path

from protocol.errors import ConfigError

#: Where the shipped scenario files are when running from a source checkout.
SCENARIOS_DIR = Path(__file__).resolve().parents[2] / "scenarios"


def check_host(host: str) -> str:
    """``host`` if it is a loopback address or ``localhost``, else ConfigError."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError as exc:
        raise ConfigError(
            f"--host {host!r}: not an IP address (use 127.0.0.1, ::1 or localhost)"
        ) from exc
    if not address.is_loopback:
        raise ConfigError(
            f"--host {host!r}: the dashboard binds loopback addresses only (127.0.0.1, ::1): "
            "it starts and stops processes on this machine"
        )
    return str(address)


def bind(host: str, port: int, *, fallback: bool) -> socket.socket:
    """A listening socket on (host, port); with ``fallback`` a taken port becomes any."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        if not fallback:
            sock.close()
            raise ConfigError(
                f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}); "
                "try --port 0 for any free port"
            ) from exc
        sock.bind((host, 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def serve(
    runs: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    max_seconds: float | None = None,
    job_timeout: float = 3600.0,
    max_jobs: int = 2,
    default_port: int = 8765,
    max_streams: int = 32,
) -> int:
    """Run the dashboard until interrupted (or ``max_seconds``); the exit status."""
    import uvicorn

    from fedchain.dashboard.app import create_app

    host = check_host(host)
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: must be in 0..65535")
    if max_seconds is not None and not max_seconds > 0:
        raise ConfigError(f"--max-seconds {max_seconds}: must be positive")
    if not job_timeout > 0:
        raise ConfigError(f"--job-timeout {job_timeout}: must be positive")
    if max_jobs < 1:
        raise ConfigError(f"--max-jobs {max_jobs}: must be at least 1")
    if not 1 <= max_streams <= 1024:
        raise ConfigError(f"--max-streams {max_streams}: must be in 1..1024")
    try:
        runs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--runs {str(runs)!r}: cannot create it ({exc.strerror})") from exc
    if not runs.is_dir():
        raise ConfigError(f"--runs {str(runs)!r}: not a directory")
    sock = bind(host, port, fallback=port == default_port)
    app = create_app(
        runs.resolve(),
        job_timeout=job_timeout,
        max_jobs=max_jobs,
        scenarios_dir=SCENARIOS_DIR if SCENARIOS_DIR.is_dir() else None,
        host=host,
        max_streams=max_streams,
    )
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=3,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    timer = None
    if max_seconds is not None:

        def stop() -> None:
            server.should_exit = True

        timer = threading.Timer(max_seconds, stop)
        timer.daemon = True
        timer.start()
    print(
        f"fedchain dashboard: {url_of(sock)}  (runs in {runs.resolve()}; Ctrl-C stops it)",
        flush=True,
    )
    try:
        server.run(sockets=[sock])
    finally:
        if timer is not None:
            timer.cancel()
        sock.close()
    return 0
