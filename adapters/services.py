"""Real backends as project-local services: an anvil chain and a js-ipfs daemon.

Both run from binaries installed inside the project by ``scripts/install_tools.sh`` (called by
``make setup``): anvil from the root ``node_modules`` (npm ``@foundry-rs/anvil-linux-amd64``),
js-ipfs from ``tools/ipfs/node_modules`` (npm ``ipfs``, a daemon with the Kubo-compatible HTTP
RPC API). Nothing is downloaded at run time.

Every service

* binds 127.0.0.1 only; port 0 (the default) lets the server pick a free port itself and the
  service reads back the port it got (anvil's ``Listening on`` line, js-ipfs's ``api`` file),
  so two services started at once never race for a port;
* runs in its own process group (``setsid``), logs to a file in its data directory and
  records itself in a pid file there;
* is waited for until it answers a real request (``eth_chainId``; ``POST /api/v0/id``),
  bounded in time, and reported with the tail of its log if it fails to come up;
* is stopped by signalling its process group: SIGTERM, then SIGKILL after a grace period.

Typical use::

    with AnvilService(run_dir) as anvil, IpfsService(run_dir) as ipfs:
        chain = Chain.connect(anvil.url, funding_key=anvil.funding_key)
        store = IpfsStore(ipfs.api_multiaddr)

A service started by one process can be stopped by another from its pid file alone
(:func:`stop_pidfile`). The pid file's first line is the pid (so ``kill $(head -1 FILE)``
works); its second line is JSON with the process group, the process start time (to refuse
to signal a recycled pid) and the service's address.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from protocol.errors import FedchainError

__all__ = [
    "ANVIL_FUNDING_KEY",
    "AnvilService",
    "IpfsService",
    "PidRecord",
    "ServiceError",
    "find_anvil",
    "find_jsipfs",
    "find_node",
    "is_running",
    "port_free",
    "read_pidfile",
    "stop_pidfile",
]

#: The project root (``fedchain/`` lives directly in it; the package is installed editable).
PROJECT_ROOT = Path(__file__).resolve().parent.parent
ANVIL_PATH = PROJECT_ROOT / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"
JSIPFS_PATH = PROJECT_ROOT / "tools" / "ipfs" / "node_modules" / "ipfs" / "src" / "cli.js"

#: anvil's first dev account key (mnemonic "test test ... junk"); test value only, public.
ANVIL_FUNDING_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

_INSTALL_HINT = "run scripts/install_tools.sh (or make setup)"
_LOOPBACK = "127.0.0.1"


class ServiceError(FedchainError):
    """A real-backend service could not be found, started or stopped."""


# ----------------------------------------------------------------------------------------
# Finding the tools
# ----------------------------------------------------------------------------------------


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_anvil() -> Path:
    """The anvil binary: ``$FEDCHAIN_ANVIL``, else the project's, else ``anvil`` on PATH."""
    override = os.environ.get("FEDCHAIN_ANVIL")
    if override:
        if not _executable(Path(override)):
            raise ServiceError(f"FEDCHAIN_ANVIL={override} is not an executable file")
        return Path(override)
    if _executable(ANVIL_PATH):
        return ANVIL_PATH
    on_path = shutil.which("anvil")
    if on_path:
        return Path(on_path)
    raise ServiceError(
        f"anvil not found (expected {ANVIL_PATH.relative_to(PROJECT_ROOT)}): {_INSTALL_HINT}"
    )


def find_node() -> Path:
    """The ``node`` executable (Node.js runs js-ipfs)."""
    node = shutil.which("node")
    if node is None:
        raise ServiceError("node (Node.js 20) not found on PATH: js-ipfs needs it")
    return Path(node)


def find_jsipfs() -> Path:
    """The js-ipfs CLI entry point (a JavaScript file run with ``node``).

    ``$FEDCHAIN_JSIPFS`` overrides it; otherwise it is the copy installed under
    ``tools/ipfs/node_modules``.
    """
    override = os.environ.get("FEDCHAIN_JSIPFS")
    candidate = Path(override) if override else JSIPFS_PATH
    if candidate.is_file():
        return candidate.resolve()
    if override:
        raise ServiceError(f"FEDCHAIN_JSIPFS={override} does not exist")
    raise ServiceError(
        f"js-ipfs not found (expected {JSIPFS_PATH.relative_to(PROJECT_ROOT)}): {_INSTALL_HINT}"
    )


# ----------------------------------------------------------------------------------------
# Processes and pid files
# ----------------------------------------------------------------------------------------


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name, or None (gone, or not Linux)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces or parentheses itself.
    return text[text.rfind(")") + 2 :].split()


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, Linux), to tell a recycled pid apart."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    fields = _proc_stat(pid)
    return not (fields and fields[0] == "Z")


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still alive (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _proc_stat(int(entry.name))
        if fields and len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@dataclass(frozen=True)
class PidRecord:
    """What a pid file says about a running service."""

    pid: int
    pgid: int
    start_ticks: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def matches_process(self) -> bool:
        """True if ``pid`` is running and is the very process recorded (not a recycled pid)."""
        if not is_running(self.pid):
            return False
        if self.start_ticks is None:
            return True
        return _start_ticks(self.pid) in (None, self.start_ticks)


def write_pidfile(path: Path, pid: int, info: dict[str, Any]) -> PidRecord:
    """Record ``pid`` (leader of its own process group) and ``info`` in ``path`` atomically."""
    record = PidRecord(pid, pid, _start_ticks(pid), dict(info))
    meta = {"pgid": record.pgid, "start_ticks": record.start_ticks, **record.info}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{pid}\n{json.dumps(meta, sort_keys=True)}\n")
    os.replace(tmp, path)
    return record


def read_pidfile(path: str | os.PathLike[str]) -> PidRecord | None:
    """Parse a pid file (ours, or a bare pid); None if it is missing or unreadable."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    try:
        pid = int(lines[0].strip())
    except (IndexError, ValueError):
        return None
    meta: dict[str, Any] = {}
    if len(lines) > 1:
        with contextlib.suppress(ValueError):
            loaded = json.loads(lines[1])
            if isinstance(loaded, dict):
                meta = loaded
    pgid = int(meta.pop("pgid", pid))
    ticks = meta.pop("start_ticks", None)
    return PidRecord(pid, pgid, int(ticks) if ticks is not None else None, meta)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_group_gone(pgid: int, timeout: float, proc: subprocess.Popen[bytes] | None) -> bool:
    """Wait up to ``timeout`` s for group ``pgid`` to die (reaping ``proc`` if it is ours)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.05)
        else:
            time.sleep(0.05)
        if not _group_alive(pgid):
            return True
    return False


def _terminate_group(
    pgid: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """SIGTERM process group ``pgid``, then SIGKILL it if still alive after ``timeout`` s."""
    _signal_group(pgid, signal.SIGTERM)
    if _wait_group_gone(pgid, timeout, proc):
        return
    _signal_group(pgid, signal.SIGKILL)
    if not _wait_group_gone(pgid, 5.0, proc):
        raise ServiceError(f"process group {pgid} survived SIGKILL")


def stop_pidfile(path: str | os.PathLike[str], timeout: float = 10.0) -> bool:
    """Stop the service recorded in pid file ``path`` and remove the file.

    The whole process group is sent SIGTERM, then SIGKILL after ``timeout`` seconds. Nothing
    is signalled if the pid is gone or now belongs to another process (a recycled pid, told
    apart by its start time), or if it is not the leader of the recorded group; a stale pid
    file is just removed. Returns True if a running service was stopped.
    """
    path = Path(path)
    record = read_pidfile(path)
    stopped = False
    if record is not None and record.matches_process():
        try:
            actual_pgid = os.getpgid(record.pid)
        except ProcessLookupError:
            actual_pgid = -1
        if actual_pgid == record.pgid == record.pid:
            _terminate_group(record.pgid, timeout)
            stopped = True
        elif actual_pgid != -1:
            # Not a group we created (setsid makes the service its group's leader): signal
            # only the recorded process itself, never a group we did not start.
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while is_running(record.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if is_running(record.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, signal.SIGKILL)
            stopped = True
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return stopped


def _pdeathsig_wrapper() -> list[str]:
    """A command prefix that makes the service get SIGTERM when its parent dies.

    util-linux ``setpriv --pdeathsig`` sets it between fork and exec without running Python
    in the child (``preexec_fn`` is unsafe in a threaded parent); without setpriv, the
    caller falls back to :func:`_set_pdeathsig` as ``preexec_fn``.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _load_prctl() -> Any:
    """libc's prctl, resolved in the parent (never dlopen in a forked child)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL: Any = None


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` (SO_REUSEADDR, as servers bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_LOOPBACK, port))
        except OSError:
            return False
    return True


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _post(url: str, body: bytes | None, timeout: float, headers: dict[str, str]) -> bytes:
    req = urllib.request.Request(url, data=body or b"", headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        data: bytes = resp.read()
        return data


# ----------------------------------------------------------------------------------------
# Service base
# ----------------------------------------------------------------------------------------


class _Service:
    """Common life cycle: spawn in its own process group, wait until ready, stop by group."""

    name = "service"
    start_timeout = 15.0
    stop_timeout = 10.0

    def __init__(self, data_dir: str | os.PathLike[str], *, die_with_parent: bool = False) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.started_in: float | None = None  #: seconds from spawn to ready (last start)

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"{self.name}.log"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / f"{self.name}.pid"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- to provide in subclasses ------------------------------------------------------

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def _prepare(self) -> None:
        """Anything to do before spawning (e.g. init a repository)."""

    def _discover_port(self) -> int | None:
        """The port the server listens on once known, else None (keep waiting)."""
        raise NotImplementedError

    def _probe(self) -> bool:
        """One readiness request; True once the server answers it correctly."""
        raise NotImplementedError

    def _info(self) -> dict[str, Any]:
        return {"service": self.name}

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the server and wait until it answers (bounded by ``start_timeout``)."""
        if self.is_running():
            raise ServiceError(f"{self.name} already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        existing = read_pidfile(self.pid_path)
        if existing is not None and existing.matches_process():
            raise ServiceError(
                f"{self.name} already running from {self.data_dir} (pid {existing.pid}); "
                f"stop it first (adapters.services.stop_pidfile({str(self.pid_path)!r}))"
            )
        self.pid_path.unlink(missing_ok=True)
        self._prepare()
        command = self._command()
        preexec = None
        if self.die_with_parent:
            wrapper = _pdeathsig_wrapper()
            if wrapper:
                command = wrapper + command
            else:
                global _PRCTL
                _PRCTL = _PRCTL or _load_prctl()
                preexec = _set_pdeathsig
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n".encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._env(),
                    cwd=self.data_dir,
                    start_new_session=True,
                    preexec_fn=preexec,
                )
            except OSError as exc:
                raise ServiceError(f"cannot start {self.name} ({command[0]}): {exc}") from exc
        try:
            self._wait_ready(t0)
        except BaseException:
            self._kill_now()
            raise
        self.started_in = time.monotonic() - t0
        write_pidfile(self.pid_path, self._proc.pid, self._info())

    def _wait_ready(self, t0: float) -> None:
        assert self._proc is not None
        deadline = t0 + self.start_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ServiceError(
                    f"{self.name} exited with status {code} while starting; "
                    f"log {self.log_path}:\n{_tail(self.log_path)}"
                )
            if self.port is None:
                self.port = self._discover_port()
            if self.port is not None and self._probe():
                return
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"{self.name} did not answer within {self.start_timeout:.0f} s; "
                    f"log {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.05)

    def _kill_now(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                with contextlib.suppress(ServiceError):
                    _terminate_group(self._proc.pid, 2.0, self._proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=1.0)
        self._proc = None

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the service's process group, SIGKILL it after ``timeout`` s; idempotent."""
        timeout = self.stop_timeout if timeout is None else timeout
        if self._proc is not None:
            if self._proc.poll() is None or _group_alive(self._proc.pid):
                _terminate_group(self._proc.pid, timeout, self._proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=1.0)
            self._proc = None
            self.pid_path.unlink(missing_ok=True)
        else:
            stop_pidfile(self.pid_path, timeout)
        self._after_stop()

    def _after_stop(self) -> None:
        pass

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def detach(self) -> None:
        """Leave the service running after this object is gone (stop it later by pid file)."""
        if self._proc is not None:
            _DETACHED.append(self._proc)  # keep the Popen alive: no "still running" warning
            self._proc = None


#: Processes handed over to their pid files by :meth:`_Service.detach`.
_DETACHED: list[subprocess.Popen[bytes]] = []


# ----------------------------------------------------------------------------------------
# anvil
# ----------------------------------------------------------------------------------------

_LISTENING = re.compile(rb"Listening on 127\.0\.0\.1:(\d+)")


class AnvilService(_Service):
    """A local anvil chain (foundry), bound to 127.0.0.1.

    ``block_time=None`` (default) is anvil's automine: every transaction is mined at once in
    its own block (asynchronously: wait for receipts). ``block_time=S`` switches to interval
    mining (``anvil --block-time S``; fractions allowed, e.g. 0.5; automine off: transactions
    wait for the next block); ``mixed_mining=True`` adds ``--mixed-mining`` (automine *and*
    a block every S seconds). ``anvil_mine`` (``Chain.mine``) works in every mode.

    ``accounts`` dev accounts are created with ``balance`` ether each (default one million,
    not anvil's 10000: ``Chain.connect`` tops every derived account up to 1000 ether, so one
    run of 10 clients + 4 aggregators takes 15000); :attr:`funding_key` is the first one's
    key, for ``Chain.connect(url, funding_key=...)``.

    ``state_path``: anvil keeps its chain (blocks, accounts, contract storage) in that file
    (``--state``: loaded at start if present, written on shutdown and every second), so a
    stopped or crashed anvil restarted with the same path and port resumes the same chain.
    """

    name = "anvil"
    start_timeout = 15.0

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int = 0,
        block_time: float | None = None,
        accounts: int = 10,
        *,
        mixed_mining: bool = False,
        balance: int = 1_000_000,
        chain_id: int | None = None,
        die_with_parent: bool = False,
        extra_args: tuple[str, ...] = (),
        state_path: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(data_dir, die_with_parent=die_with_parent)
        self.state_path = Path(state_path) if state_path is not None else None
        if block_time is not None and block_time <= 0:
            raise ServiceError("block_time must be > 0 seconds (None means automine)")
        if mixed_mining and block_time is None:
            raise ServiceError("mixed_mining needs a block_time")
        if accounts < 1:
            raise ServiceError("anvil needs at least one account (the funding key)")
        self.requested_port = port
        self.block_time = block_time
        self.accounts = accounts
        self.mixed_mining = mixed_mining
        self.balance = balance
        self.chain_id = chain_id
        self.extra_args = tuple(extra_args)
        self.binary = find_anvil()
        self._log_offset = 0

    @property
    def url(self) -> str:
        if self.port is None:
            raise ServiceError("anvil is not started")
        return f"http://{_LOOPBACK}:{self.port}"

    @property
    def funding_key(self) -> str:
        return ANVIL_FUNDING_KEY

    def _prepare(self) -> None:
        self.port = None
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        if self.requested_port and not port_free(self.requested_port):
            raise ServiceError(f"port {self.requested_port} on {_LOOPBACK} is already in use")

    def _command(self) -> list[str]:
        cmd = [
            str(self.binary),
            "--host",
            _LOOPBACK,
            "--port",
            str(self.requested_port),
            "--accounts",
            str(self.accounts),
            "--balance",
            str(self.balance),
        ]
        if self.block_time is not None:
            cmd += ["--block-time", f"{self.block_time:g}"]
        if self.mixed_mining:
            cmd.append("--mixed-mining")
        if self.chain_id is not None:
            cmd += ["--chain-id", str(self.chain_id)]
        if self.state_path is not None:
            cmd += ["--state", str(self.state_path), "--state-interval", "1"]
        return cmd + list(self.extra_args)

    def _discover_port(self) -> int | None:
        if self.requested_port:
            return self.requested_port
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                match = _LISTENING.search(fh.read())
        except OSError:
            return None
        return int(match.group(1)) if match else None

    def _probe(self) -> bool:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []})
        try:
            reply = json.loads(
                _post(self.url, body.encode(), 1.0, {"Content-Type": "application/json"})
            )
        except (OSError, ValueError):
            return False
        return isinstance(reply, dict) and "result" in reply

    def _info(self) -> dict[str, Any]:
        return {"service": self.name, "url": self.url, "port": self.port}

    def __repr__(self) -> str:
        where = self.url if self.port else "not started"
        return f"AnvilService({str(self.data_dir)!r}, {where})"


# ----------------------------------------------------------------------------------------
# js-ipfs
# ----------------------------------------------------------------------------------------


def ipfs_loopback_config(config: dict[str, Any], api_port: int) -> dict[str, Any]:
    """``config`` (a js-ipfs repo config) made loopback-only and isolated.

    API on 127.0.0.1:``api_port`` (0: the daemon picks one), no gateway, no gRPC, no swarm
    listener, no bootstrap peers, no delegate routers, no MDNS / WebRTC-star discovery, no
    DHT, no pubsub, no NAT port mapping, no relay. Preloading is turned off on the daemon's
    command line. Other keys (identity, datastore, keychain) are kept.
    """
    cfg: dict[str, Any] = json.loads(json.dumps(config))
    cfg["Addresses"] = {
        "Swarm": [],
        "Announce": [],
        "NoAnnounce": [],
        "API": f"/ip4/{_LOOPBACK}/tcp/{api_port}",
        "Gateway": "",
        "RPC": "",
        "Delegates": [],
    }
    cfg["Bootstrap"] = []
    cfg["Discovery"] = {
        "MDNS": {"Enabled": False, "Interval": 10},
        "webRTCStar": {"Enabled": False},
    }
    cfg["Pubsub"] = {"Router": "gossipsub", "Enabled": False}
    swarm = cfg.setdefault("Swarm", {})
    swarm["DisableNatPortMap"] = True
    cfg["Routing"] = {"Type": "none"}
    cfg["relay"] = {"enabled": False, "hop": {"enabled": False, "active": False}}
    return cfg


class IpfsService(_Service):
    """A js-ipfs daemon (Kubo-compatible HTTP RPC API) with its repository in ``data_dir/ipfs``.

    The repository is created by the daemon on first start (``jsipfs daemon --init-config``
    with the settings of :func:`ipfs_loopback_config`) and kept across restarts; every later
    start rewrites its config to those loopback-only, isolated settings again. Point
    :class:`adapters.storage.IpfsStore` at :attr:`api_multiaddr` (or pass ``--store``
    :attr:`store_spec` to the CLI).
    """

    name = "ipfs"
    start_timeout = 60.0  # js-ipfs loads ~1000 modules: 3-6 s on 2 cores, more under load

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        api_port: int = 0,
        *,
        die_with_parent: bool = False,
    ) -> None:
        super().__init__(data_dir, die_with_parent=die_with_parent)
        self.requested_port = api_port
        self._init_config: Path | None = None
        self.node = find_node()
        self.jsipfs = find_jsipfs()

    @property
    def repo_path(self) -> Path:
        return self.data_dir / "ipfs"

    @property
    def api_multiaddr(self) -> str:
        if self.port is None:
            raise ServiceError("ipfs is not started")
        return f"/ip4/{_LOOPBACK}/tcp/{self.port}/http"

    @property
    def api_url(self) -> str:
        if self.port is None:
            raise ServiceError("ipfs is not started")
        return f"http://{_LOOPBACK}:{self.port}"

    @property
    def store_spec(self) -> str:
        """What ``--store`` / :func:`adapters.storage.open_store` take for this node."""
        return f"ipfs:{self.api_multiaddr}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["IPFS_PATH"] = str(self.repo_path)
        env.pop("IPFS_API", None)
        return env

    def _prepare(self) -> None:
        self.port = None
        if self.requested_port and not port_free(self.requested_port):
            raise ServiceError(f"port {self.requested_port} on {_LOOPBACK} is already in use")
        config_path = self.repo_path / "config"
        self._init_config = None
        if not config_path.exists():
            # A new repository: the daemon creates it itself from our settings (one node
            # process instead of `jsipfs init` + `jsipfs daemon`: ~4 s less on first start).
            if self.repo_path.exists() and any(self.repo_path.iterdir()):
                raise ServiceError(
                    f"{self.repo_path} exists but holds no js-ipfs repository (an interrupted "
                    "init?): remove it to create a fresh one"
                )
            self._init_config = self.data_dir / "ipfs-init-config.json"
            self._init_config.write_text(
                json.dumps(ipfs_loopback_config({}, self.requested_port), indent=2)
            )
        else:
            try:
                config = json.loads(config_path.read_text())
            except (OSError, ValueError) as exc:
                raise ServiceError(f"unreadable js-ipfs config {config_path}: {exc}") from exc
            new = ipfs_loopback_config(config, self.requested_port)
            tmp = config_path.with_name("config.tmp")
            tmp.write_text(json.dumps(new, indent=2))
            os.replace(tmp, config_path)
        # No daemon of ours is running (checked by start()): an `api` file is stale, and the
        # port is read back from a fresh one.
        (self.repo_path / "api").unlink(missing_ok=True)
        self._clear_stale_lock()

    def _clear_stale_lock(self) -> None:
        """Remove the ``repo.lock`` a killed daemon left behind (js-ipfs refuses to start
        for 20 s otherwise), but only if no live process holds the repository's datastore:
        LevelDB keeps an fcntl lock on ``datastore/LOCK`` while a daemon runs."""
        lock_dir = self.repo_path / "repo.lock"
        if not lock_dir.exists():
            return
        ldb_lock = self.repo_path / "datastore" / "LOCK"
        if ldb_lock.exists():
            import fcntl

            with open(ldb_lock, "r+b") as fh:
                try:
                    fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    raise ServiceError(
                        f"the js-ipfs repository {self.repo_path} is in use by another process"
                    ) from exc
                fcntl.lockf(fh, fcntl.LOCK_UN)
        if lock_dir.is_dir():
            shutil.rmtree(lock_dir, ignore_errors=True)
        else:
            lock_dir.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(b"--- removed a stale repo.lock (previous daemon did not shut down)\n")

    def _command(self) -> list[str]:
        cmd = [str(self.node), str(self.jsipfs), "daemon", "--enable-preload=false"]
        if self._init_config is not None:
            cmd += ["--init-config", str(self._init_config)]
        return cmd

    def _discover_port(self) -> int | None:
        if self.requested_port:
            return self.requested_port
        try:
            text = (self.repo_path / "api").read_text().strip()
        except OSError:
            return None
        match = re.fullmatch(r"/ip4/127\.0\.0\.1/tcp/(\d+)(/http)?", text)
        return int(match.group(1)) if match else None

    def _probe(self) -> bool:
        try:
            reply = json.loads(_post(f"{self.api_url}/api/v0/id", None, 2.0, {}))
        except (OSError, ValueError):
            return False
        return isinstance(reply, dict) and "ID" in reply

    def _info(self) -> dict[str, Any]:
        return {
            "service": self.name,
            "api": self.api_multiaddr,
            "url": self.api_url,
            "port": self.port,
            "repo": str(self.repo_path),
        }

    def _after_stop(self) -> None:
        (self.repo_path / "api").unlink(missing_ok=True)

    def __repr__(self) -> str:
        where = self.api_multiaddr if self.port else "not started"
        return f"IpfsService({str(self.data_dir)!r}, {where})"


def _main(argv: list[str] | None = None) -> int:  # pragma: no cover - manual helper
    """``python -m adapters.services [DIR]``: run anvil and js-ipfs in DIR until Ctrl-C or
    SIGTERM (both stop with this process, even if it is killed)."""
    args = sys.argv[1:] if argv is None else argv
    data_dir = Path(args[0] if args else "runs/services")

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        with (
            AnvilService(data_dir, die_with_parent=True) as anvil,
            IpfsService(data_dir, die_with_parent=True) as ipfs,
        ):
            print(f"anvil  {anvil.url}  (pid {anvil.pid}, {anvil.started_in:.2f} s)")
            print(f"ipfs   {ipfs.api_multiaddr}  (pid {ipfs.pid}, {ipfs.started_in:.2f} s)")
            print(
                f"FEDCHAIN_FUNDING_KEY={anvil.funding_key} "
                f"fedchain demo --rpc-url {anvil.url} --store {ipfs.store_spec}",
                flush=True,
            )
            while anvil.is_running() and ipfs.is_running():
                time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
