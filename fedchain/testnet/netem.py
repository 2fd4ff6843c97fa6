"""WAN conditions for PBFT without touching the machine's network: a user-space TCP proxy.

The kernel here has no ``netem`` qdisc, and the machine's own network settings are never
changed. Instead every PBFT link (aggregator ``i`` to aggregator ``j``) can go through a
:class:`LinkProxy` on 127.0.0.1 that holds each frame for a one-way ``latency`` plus uniform
``jitter`` in ``[-jitter, +jitter]`` and loses a fraction ``loss`` of them. The proxy reads PBFT's
frames (``uint32 length ‖ message``, and the transport's 8-byte PING/PONG control frames, see
:mod:`consensus.tcp`), so delay and loss apply to whole messages, in both directions.

Loss over TCP (``loss_mode``):

* ``drop`` (default): the frame is discarded and the connection stays up. Kernel TCP never
  loses a message inside a live connection, so this is the pessimistic model: a message is
  gone as if a connection had broken under it, and PBFT's own retransmission, commit proofs and
  view changes have to recover it. This is what the 5 % figures measure.
* ``reset``: the proxy aborts both sides of the connection; the frame and every frame it still
  holds for that connection are lost, and the sender reconnects (a middlebox or NAT dropping
  the flow).
* ``retransmit``: what kernel TCP does with segment loss: the frame arrives, one
  retransmission timeout late (``max(200 ms, 2·latency + 4·jitter)``, repeated while the coin
  keeps coming up lost), and holds up the frames behind it (head-of-line blocking).

Within one connection frames leave in the order they arrived (a frame's departure time is
``max(previous departure, arrival + delay)``), as on one TCP flow. Everything is bounded: the
proxy binds and connects to loopback only, accepts ``max_connections``, holds at most
``max_queue_bytes`` per direction (beyond that frames are dropped and counted), and a process
running proxies (``fedchain netem``, ``python -m fedchain.testnet.netem``) exits after
``--max-seconds``; ``spawn_netem`` records its pid file so ``fedchain testnet down`` (or
:func:`adapters.services.stop_pidfile`) stops it by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adapters.services import stop_pidfile, write_pidfile
from consensus.messages import MAX_MESSAGE_BYTES
from consensus.tcp import encode_frame, read_any_frame
from protocol.errors import ConfigError, ConsensusError, FedchainError

__all__ = [
    "LOSS_MODES",
    "Link",
    "LinkProfile",
    "LinkProxy",
    "ProxyStats",
    "mesh_links",
    "parse_duration",
    "parse_loss",
    "pbft_peers",
    "serve",
    "spawn_netem",
    "start_pbft_proxies",
    "stop_netem",
]

LOSS_MODES = ("drop", "reset", "retransmit")
LOOPBACK = "127.0.0.1"
#: A proxy process started without --max-seconds stops after this long.
DEFAULT_MAX_SECONDS = 4 * 3600.0
#: Linux's minimum TCP retransmission timeout, used by the ``retransmit`` loss mode.
TCP_MIN_RTO = 0.2

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|ms|s)\s*$")


def parse_duration(text: str, option: str) -> float:
    """``"150ms"``, ``"0.15s"``, ``"500us"`` -> seconds; anything else is a ConfigError naming
    ``option`` (a bare number is refused: tc reads it as microseconds, people as ms)."""
    m = _DURATION.match(str(text))
    if m is None:
        raise ConfigError(
            f"{option} {text!r}: expected a duration with a unit, e.g. 150ms or 0.15s"
        )
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def parse_loss(text: str, option: str) -> float:
    """``"0.05"`` or ``"5%"`` -> 0.05; must lie in [0, 1)."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ConfigError(
            f"{option} {text!r}: expected a fraction (0.05) or a percentage (5%)"
        ) from None
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{option} {text!r}: loss must be in [0, 1)")
    return value


@dataclass(frozen=True)
class LinkProfile:
    """One-way conditions of a link (seconds; ``loss`` a probability per frame)."""

    latency: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    loss_mode: str = "drop"

    def __post_init__(self) -> None:
        if not 0.0 <= self.latency <= 60.0:
            raise ConfigError(f"latency {self.latency!r} s: must be in [0, 60]")
        if not 0.0 <= self.jitter <= 60.0:
            raise ConfigError(f"jitter {self.jitter!r} s: must be in [0, 60]")
        if not 0.0 <= self.loss < 1.0:
            raise ConfigError(f"loss {self.loss!r}: must be in [0, 1)")
        if self.loss_mode not in LOSS_MODES:
            raise ConfigError(f"loss mode {self.loss_mode!r}: expected one of {LOSS_MODES}")

    @property
    def active(self) -> bool:
        return bool(self.latency or self.jitter or self.loss)

    def delay(self, rng: random.Random) -> float:
        """One frame's transit time: ``latency`` plus uniform jitter, never negative."""
        jitter = rng.uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        return max(0.0, self.latency + jitter)

    def retransmission_timeout(self) -> float:
        return max(TCP_MIN_RTO, 2 * self.latency + 4 * self.jitter)

    def describe(self) -> str:
        text = f"{self.latency * 1e3:g} ms ± {self.jitter * 1e3:g} ms"
        return text + (f", loss {self.loss:.1%} ({self.loss_mode})" if self.loss else "")


@dataclass
class ProxyStats:
    """What a proxy did (frames count PBFT messages and PING/PONG control frames)."""

    connections: int = 0
    refused: int = 0
    frames: int = 0
    forwarded: int = 0
    dropped: int = 0
    resets: int = 0
    retransmitted: int = 0
    overflow: int = 0
    bytes: int = 0
    delay_total: float = 0.0  # seconds frames spent in the proxy (forwarded ones)


def _loopback_target(target: tuple[str, int]) -> tuple[str, int]:
    host, port = target
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok or not 0 < int(port) < 65536:
        raise ConfigError(f"proxy target {host}:{port}: only loopback addresses are allowed")
    return host, int(port)


class LinkProxy:
    """Listen on 127.0.0.1 and relay each accepted connection to ``target`` under ``profile``.

    ``seed`` makes the per-frame draws (delay, loss) reproducible for a given arrival order.
    """

    def __init__(
        self,
        target: tuple[str, int],
        profile: LinkProfile,
        *,
        listen_port: int = 0,
        seed: int | None = None,
        max_connections: int = 64,
        max_queue_bytes: int = 16 * 1024 * 1024,
        connect_timeout: float = 2.0,
        io_timeout: float = 10.0,
    ) -> None:
        self.target = _loopback_target(target)
        self.profile = profile
        self.listen_port = listen_port
        self.rng = random.Random(seed)
        self.max_connections = max_connections
        self.max_queue_bytes = max_queue_bytes
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self.stats = ProxyStats()
        self.address: tuple[str, int] | None = None
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._on_client, LOOPBACK, self.listen_port)
        sock = self._server.sockets[0].getsockname()
        self.address = (str(sock[0]), int(sock[1]))
        return self.address

    async def stop(self, timeout: float = 5.0) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.wait(list(self._conns), timeout=timeout)

    async def _on_client(
        self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if len(self._conns) >= self.max_connections or task is None:
            self.stats.refused += 1
            cwriter.transport.abort()
            return
        self._conns.add(task)
        try:
            async with asyncio.timeout(self.connect_timeout):
                ureader, uwriter = await asyncio.open_connection(*self.target)
        except (OSError, TimeoutError):
            self.stats.refused += 1
            cwriter.transport.abort()
            self._conns.discard(task)
            return
        self.stats.connections += 1
        pair = (cwriter, uwriter)
        self._writers.update(pair)
        try:
            await asyncio.gather(
                self._pipe(creader, uwriter, pair), self._pipe(ureader, cwriter, pair)
            )
        except asyncio.CancelledError:
            pass
        finally:
            for w in pair:
                w.transport.abort()
                self._writers.discard(w)
            self._conns.discard(task)

    def _fate(self) -> str | float:
        """A frame's fate: ``"drop"``, ``"reset"``, or the extra delay (seconds) of the TCP
        retransmissions it needed (0.0: not lost; the timeout doubles on each repeat)."""
        p = self.profile
        extra, tries = 0.0, 0
        while p.loss and self.rng.random() < p.loss:
            if p.loss_mode != "retransmit":
                return p.loss_mode
            extra += p.retransmission_timeout() * 2**tries
            tries += 1
            self.stats.retransmitted += 1
        return extra

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        """Relay one direction: read frames, lose or delay each, write them in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, float, bytes] | None] = asyncio.Queue()
        held = [0]  # bytes waiting in ``queue``

        async def deliver() -> None:
            while (item := await queue.get()) is not None:
                arrived, due, frame = item
                await asyncio.sleep(max(0.0, due - loop.time()))
                held[0] -= len(frame)
                writer.write(frame)
                await asyncio.wait_for(writer.drain(), self.io_timeout)
                self.stats.forwarded += 1
                self.stats.bytes += len(frame)
                self.stats.delay_total += loop.time() - arrived

        sender = loop.create_task(deliver())
        last_due = 0.0
        try:
            while not sender.done():
                got = await read_any_frame(reader, MAX_MESSAGE_BYTES, self.io_timeout)
                if got is None:
                    break
                self.stats.frames += 1
                frame = encode_frame(*got)
                now = loop.time()
                fate = self._fate()
                if fate == "drop":
                    self.stats.dropped += 1
                    continue
                if fate == "reset":
                    self.stats.resets += 1
                    return
                if held[0] + len(frame) > self.max_queue_bytes:
                    self.stats.overflow += 1
                    continue
                last_due = max(last_due, now + self.profile.delay(self.rng) + float(fate))
                held[0] += len(frame)
                queue.put_nowait((now, last_due, frame))
            queue.put_nowait(None)
            await sender
        except (ConsensusError, ConnectionError, TimeoutError, OSError):
            pass
        finally:
            sender.cancel()
            for w in pair:
                w.transport.abort()


# ---- many links in one process ---------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A named proxied link: the proxy listens on ``listen_port`` (0: any) and relays to
    ``target``."""

    name: str
    target: tuple[str, int]
    profile: LinkProfile
    listen_port: int = 0
    seed: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target": list(self.target),
            "listen_port": self.listen_port,
            "seed": self.seed,
            **asdict(self.profile),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Link:
        try:
            profile = LinkProfile(
                float(d.get("latency", 0.0)),
                float(d.get("jitter", 0.0)),
                float(d.get("loss", 0.0)),
                str(d.get("loss_mode", "drop")),
            )
            target = (str(d["target"][0]), int(d["target"][1]))
            seed = None if d.get("seed") is None else int(d["seed"])
            return cls(str(d["name"]), target, profile, int(d.get("listen_port", 0)), seed)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"netem link {d!r}: {exc}") from exc


def mesh_links(
    targets: dict[int, tuple[str, int]], profile: LinkProfile, seed: int = 0
) -> list[Link]:
    """One link per ordered pair ``i -> j`` (``i != j``) of PBFT members, relaying to ``j``'s
    listening address; named ``"i->j"``, each with its own seed."""
    return [
        Link(f"{i}->{j}", targets[j], profile, seed=seed * 1_000_003 + i * 1009 + j)
        for i in sorted(targets)
        for j in sorted(targets)
        if i != j
    ]


async def serve(
    links: Sequence[Link],
    *,
    ready: Path | None = None,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    stop: asyncio.Event | None = None,
    on_ready: Any = None,
) -> dict[str, ProxyStats]:
    """Run one proxy per link until ``stop`` is set or ``max_seconds`` pass; returns stats.

    Once every proxy listens, their addresses are written to ``ready`` as JSON
    ``{name: [host, port]}`` (atomically), and passed to ``on_ready`` if given.
    """
    proxies = {
        link.name: LinkProxy(
            link.target, link.profile, listen_port=link.listen_port, seed=link.seed
        )
        for link in links
    }
    addresses: dict[str, list[Any]] = {}
    try:
        for name, proxy in proxies.items():
            host, port = await proxy.start()
            addresses[name] = [host, port]
        if ready is not None:
            tmp = ready.with_name(ready.name + ".tmp")
            tmp.write_text(json.dumps(addresses, sort_keys=True))
            os.replace(tmp, ready)
        if on_ready is not None:
            on_ready(addresses)
        stop = stop or asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max_seconds)
    finally:
        await asyncio.gather(*(p.stop() for p in proxies.values()))
    return {name: p.stats for name, p in proxies.items()}


def _run(links: Sequence[Link], ready: Path | None, max_seconds: float, quiet: bool) -> int:
    async def main() -> dict[str, ProxyStats]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def announce(addresses: dict[str, list[Any]]) -> None:
            if quiet:
                return
            for link in links:
                host, port = addresses[link.name]
                print(
                    f"netem {link.name}: {host}:{port} -> {link.target[0]}:{link.target[1]} "
                    f"({link.profile.describe()})",
                    flush=True,
                )

        return await serve(
            links, ready=ready, max_seconds=max_seconds, stop=stop, on_ready=announce
        )

    stats = asyncio.run(main())
    print(json.dumps({"netem_stats": {k: asdict(v) for k, v in stats.items()}}), flush=True)
    return 0


# ---- a proxy process, stopped by PID -------------------------------------------------------


def spawn_netem(
    links: Sequence[Link], directory: Path, *, max_seconds: float = DEFAULT_MAX_SECONDS
) -> tuple[int, Path, dict[str, tuple[str, int]]]:
    """Start ``python -m fedchain.testnet.netem`` for ``links`` in its own process group
    (log and pid file in ``directory``); wait until every proxy listens. Returns ``(pid, pid_file,
    {link name: (host, port)})``. Stop it with :func:`adapters.services.stop_pidfile`."""
    directory.mkdir(parents=True, exist_ok=True)
    spec, ready = directory / "netem.json", directory / "netem.ready"
    pid_file, log_path = directory / "netem.pid", directory / "netem.log"
    spec.write_text(json.dumps({"links": [link.to_json() for link in links]}, indent=2))
    ready.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "fedchain.testnet.netem",
        "--links",
        str(spec),
        "--ready",
        str(ready),
    ]
    cmd += ["--max-seconds", str(max_seconds)]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    deadline = time.monotonic() + 20.0
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            tail = log_path.read_text(errors="replace")[-2000:]
            raise FedchainError(f"netem proxy process did not come up; log {log_path}:\n{tail}")
        time.sleep(0.05)
    write_pidfile(pid_file, proc.pid, {"service": "netem", "links": len(links)})
    addresses = {k: (str(v[0]), int(v[1])) for k, v in json.loads(ready.read_text()).items()}
    return proc.pid, pid_file, addresses


def stop_netem(pid_file: Path) -> bool:
    """Stop a proxy process by its pid file (SIGTERM: it prints its stats and exits)."""
    return stop_pidfile(pid_file)


# ---- the testnet's PBFT mesh ---------------------------------------------------------------


def start_pbft_proxies(
    spec: dict[str, Any],
    directory: Path,
    profile: LinkProfile,
    seed: int = 0,
    max_seconds: float | None = None,
) -> None:
    """Put a proxy on every directed link between the testnet's aggregators (one process,
    ``directory``/netem.*, exiting after ``max_seconds``, default 4 h), and record in ``spec``
    the routes (``pbft_routes``), the profile (``pbft_netem``) and the process
    (``services.netem``, so ``testnet down`` stops it)."""
    targets = {
        int(n["index"]): (LOOPBACK, int(n["pbft_port"]))
        for n in spec["nodes"]
        if n["role"] == "aggregator"
    }
    links = mesh_links(targets, profile, seed)
    pid, pid_file, addresses = spawn_netem(
        links, directory, max_seconds=max_seconds or DEFAULT_MAX_SECONDS
    )
    routes: dict[str, dict[str, list[Any]]] = {}
    for link in links:
        i, j = link.name.split("->")
        routes.setdefault(i, {})[j] = list(addresses[link.name])
    spec["pbft_routes"] = routes
    spec["pbft_netem"] = asdict(profile)
    spec.setdefault("services", {})["netem"] = {"pid": pid, "pid_file": str(pid_file)}


def pbft_peers(spec: dict[str, Any], index: int) -> dict[int, tuple[str, int]]:
    """Where aggregator ``index`` reaches each PBFT member: itself at its listening address,
    the others directly or, when the testnet emulates a WAN, through the proxy of the link
    ``index -> j`` (``spec["pbft_routes"]``)."""
    peers = {
        int(n["index"]): (LOOPBACK, int(n["pbft_port"]))
        for n in spec["nodes"]
        if n["role"] == "aggregator"
    }
    for j, (host, port) in spec.get("pbft_routes", {}).get(str(index), {}).items():
        if int(j) != index:
            peers[int(j)] = (str(host), int(port))
    return peers


# ---- command line ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``fedchain netem`` (and ``python -m fedchain.testnet.netem``)."""
    p.add_argument("--target", metavar="HOST:PORT", help="where to relay (loopback only)")
    p.add_argument("--listen-port", type=int, default=0, help="port on 127.0.0.1 (0: any)")
    p.add_argument("--latency", default="0ms", help="one-way delay, e.g. 150ms (%(default)s)")
    p.add_argument("--jitter", default="0ms", help="uniform ± jitter, e.g. 30ms (%(default)s)")
    p.add_argument("--loss", default="0", help="fraction of frames lost, e.g. 0.05 or 5%% (0)")
    p.add_argument("--loss-mode", default="drop", choices=LOSS_MODES, help="(%(default)s)")
    p.add_argument("--seed", type=int, default=None, help="seed of the delay/loss draws")
    p.add_argument("--links", metavar="FILE.json", help='many links: {"links": [...]}')
    p.add_argument("--ready", metavar="FILE", help="write {link: [host, port]} here when up")
    p.add_argument(
        "--max-seconds", type=float, default=DEFAULT_MAX_SECONDS, help="exit after (%(default)s)"
    )
    p.add_argument("--quiet", action="store_true", help="no address lines")


def profile_from_args(
    latency: str, jitter: str, loss: str, loss_mode: str, prefix: str = "--"
) -> LinkProfile:
    """A LinkProfile from CLI strings; errors name the option (``prefix`` + name)."""
    lat = parse_duration(latency, f"{prefix}latency")
    jit = parse_duration(jitter, f"{prefix}jitter")
    los = parse_loss(loss, f"{prefix}loss")
    if jit > lat:
        raise ConfigError(f"{prefix}jitter {jitter!r}: larger than {prefix}latency {latency!r}")
    if loss_mode not in LOSS_MODES:
        raise ConfigError(f"{prefix}loss-mode {loss_mode!r}: expected one of {LOSS_MODES}")
    return LinkProfile(lat, jit, los, loss_mode)


def command(args: argparse.Namespace) -> int:
    """Run the proxies ``args`` describe in the foreground until SIGTERM or --max-seconds."""
    if not args.max_seconds > 0:
        raise ConfigError(f"--max-seconds {args.max_seconds!r}: must be > 0")
    if args.links:
        try:
            doc = json.loads(Path(args.links).read_text())
            links = [Link.from_json(d) for d in doc["links"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"--links {args.links!r}: {exc}") from exc
    elif args.target:
        host, _, port = str(args.target).rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--target {args.target!r}: expected HOST:PORT")
        profile = profile_from_args(args.latency, args.jitter, args.loss, args.loss_mode)
        links = [
            Link("link", _loopback_target((host, int(port))), profile, args.listen_port, args.seed)
        ]
    else:
        raise ConfigError("netem needs --target HOST:PORT or --links FILE.json")
    ready = Path(args.ready) if args.ready else None
    return _run(links, ready, args.max_seconds, args.quiet)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedchain.testnet.netem",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return command(args)
    except FedchainError as exc:
        print(f"netem: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
