"""PBFT over TCP: length-prefixed frames of the canonical message encoding, asyncio-driven.

One :class:`TcpNode` wraps one replica (any :class:`~consensus.pbft.Node`). It listens on
``listen``, keeps one outbound connection per peer (reconnecting with capped back-off), feeds
every received frame to the replica and carries out the returned actions: sends go to per-peer
bounded queues, timers run on the event loop's clock (``delay * time_unit`` seconds), decisions
are recorded and announced. The replica is only ever touched from the event-loop thread.

Frames are ``uint32 big-endian length ‖ canonical message bytes`` (see
``consensus.messages.encode``); a frame that is too long, truncated, slow or does not decode
closes that connection. No transport authentication is needed: every message carries its
sender's signature, checked by the replica. Lost messages are PBFT's business (retransmission
and view changes), so a full queue or a broken connection simply drops messages.

Timers adapt to the network. Each outbound connection carries a PING control frame (a length
word with the top bit set, then an 8-byte nonce) every ``ping_interval`` seconds; the peer
answers on the same connection with a PONG echoing the nonce. Answered pings feed one
Jacobson/Karels estimator per peer (:mod:`consensus.rtt`), and a replica time unit lasts
``TimerScale.unit(quorum RTO)`` seconds, so the request, view-change and retransmission timers
follow the measured latency (on loopback they stay at ``time_unit``, the floor).

For synchronous code (the aggregator node), :class:`ThreadedTcpNode` runs a ``TcpNode`` on
its own event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from consensus.messages import MAX_MESSAGE_BYTES, Instance, Message, decode, encode
from consensus.pbft import Action, Broadcast, CancelTimer, Decide, Node, Persist, Send, SetTimer
from consensus.rtt import PingBook, TimerScale
from consensus.stable_store import StableStore
from protocol.errors import ConsensusError

__all__ = [
    "DATA",
    "PING",
    "PONG",
    "PeerLink",
    "TcpNode",
    "TcpStats",
    "ThreadedTcpNode",
    "encode_frame",
    "read_any_frame",
    "read_frame",
    "write_frame",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
_HEADER = struct.Struct(">I")
_NONCE = struct.Struct(">Q")
#: Frame kinds: a message (length word below 2**31), or a control frame whose length word has
#: the top bit set and whose body is an 8-byte nonce.
DATA = 0
PING = 0x8000_0001
PONG = 0x8000_0002
_CONTROL_BIT = 0x8000_0000


@dataclass
class TcpStats:
    frames_in: int = 0
    frames_out: int = 0
    bad_frames: int = 0
    dropped_out: int = 0
    connects: int = 0
    connect_failures: int = 0
    pings: int = 0
    pongs: int = 0


async def read_any_frame(
    reader: asyncio.StreamReader, max_size: int = MAX_MESSAGE_BYTES, timeout: float = 10.0
) -> tuple[int, bytes] | None:
    """Read one frame as ``(kind, body)``; ``None`` on a clean EOF before a header. Raises
    ConsensusError on an oversized or empty message, an unknown control frame, a truncated
    body, or a body slower than ``timeout``."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ConsensusError("truncated frame header") from exc
    (word,) = _HEADER.unpack(header)
    if word & _CONTROL_BIT:
        if word not in (PING, PONG):
            raise ConsensusError(f"unknown control frame 0x{word:08x}")
        kind, size = word, _NONCE.size
    elif word == 0 or word > max_size:
        raise ConsensusError(f"frame of {word} bytes refused (limit {max_size})")
    else:
        kind, size = DATA, word
    try:
        return kind, await asyncio.wait_for(reader.readexactly(size), timeout)
    except asyncio.IncompleteReadError as exc:
        raise ConsensusError("truncated frame body") from exc
    except TimeoutError as exc:
        raise ConsensusError("frame body too slow") from exc


async def read_frame(
    reader: asyncio.StreamReader, max_size: int = MAX_MESSAGE_BYTES, timeout: float = 10.0
) -> bytes | None:
    """Read one message frame (see :func:`read_any_frame`; control frames are refused)."""
    frame = await read_any_frame(reader, max_size, timeout)
    if frame is None:
        return None
    if frame[0] != DATA:
        raise ConsensusError("control frame where a message was expected")
    return frame[1]


def encode_frame(kind: int, body: bytes) -> bytes:
    """The bytes of one frame of ``kind`` (``DATA``, ``PING`` or ``PONG``)."""
    return _HEADER.pack(len(body) if kind == DATA else kind) + body


def write_frame(writer: asyncio.StreamWriter, payload: bytes) -> None:
    writer.write(encode_frame(DATA, payload))


class TcpNode:
    """Drive ``replica`` over TCP.

    ``peers`` maps committee index to ``(host, port)``; it may be given later with
    :meth:`set_peers` (e.g. after every node bound port 0). A replica time unit lasts
    ``scale.unit(quorum RTO)`` seconds with ``adaptive`` timers (the default; ``time_unit`` is
    then the floor, ``max_time_unit`` the ceiling), or exactly ``time_unit`` seconds without.
    """

    def __init__(
        self,
        replica: Node,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        peers: Mapping[int, tuple[str, int]] | None = None,
        *,
        time_unit: float = 0.01,
        adaptive: bool = True,
        max_time_unit: float = 1.0,
        rto_units: float = 10.0,
        ping_interval: float = 1.0,
        connect_timeout: float = 2.0,
        io_timeout: float = 5.0,
        max_frame: int = MAX_MESSAGE_BYTES,
        queue_size: int = 1024,
        on_decide: Callable[[Decide], None] | None = None,
        store: StableStore | None = None,
    ) -> None:
        self.replica = replica
        self.store = store
        self.listen = listen
        self.peers: dict[int, tuple[str, int]] = dict(peers or {})
        self.time_unit = time_unit
        self.adaptive = adaptive
        self.scale = TimerScale(rto_units, time_unit, max(time_unit, max_time_unit))
        self.ping_interval = ping_interval
        self.rtt = PingBook()
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self.max_frame = max_frame
        self.queue_size = queue_size
        self.on_decide = on_decide
        self.stats = TcpStats()
        self.decisions: dict[Instance, Decide] = {}
        self.address: tuple[str, int] | None = None
        self._server: asyncio.Server | None = None
        self._links: dict[int, PeerLink] = {}
        self._readers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._waiters: dict[Instance, list[asyncio.Future[Decide]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closing = False

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        """Bind the listening socket; returns the actual ``(host, port)``."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._on_connection, *self.listen)
        sock = self._server.sockets[0].getsockname()
        self.address = (str(sock[0]), int(sock[1]))
        for idx in self.peers:
            self._link(idx)
        return self.address

    def set_peers(self, peers: Mapping[int, tuple[str, int]]) -> None:
        me = self.replica.index
        self.peers = {i: a for i, a in peers.items() if i != me}
        if self._loop is not None:
            for idx in self.peers:
                self._link(idx)

    async def stop(self, timeout: float = 5.0) -> None:
        """Close the server, connections, sender tasks and timers (bounded by ``timeout``)."""
        self.closing = True
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._server is not None:
            self._server.close()
        tasks = [t for link in self._links.values() if (t := link.task) is not None]
        tasks += list(self._readers)
        for t in tasks:
            t.cancel()
        for w in list(self._writers):
            w.close()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), timeout)
        for futs in self._waiters.values():
            for fut in futs:
                if not fut.done():
                    fut.cancel()

    # ---- API ------------------------------------------------------------------------------

    def submit(self, instance: Instance) -> None:
        """The node observed the dispute: hand it to the replica (call on the loop thread)."""
        self._apply(self.replica.start(instance))

    def unit(self) -> float:
        """Seconds per replica time unit right now (see :mod:`consensus.rtt`)."""
        if not self.adaptive:
            return self.time_unit
        return self.scale.unit(self.quorum_rto())

    def quorum_rto(self) -> float | None:
        """The RTO of the slowest peer a quorum needs (None before any answered ping)."""
        return self.rtt.quorum_rto(len(self.peers) + 1)

    def timing(self) -> dict[str, Any]:
        """Per-peer SRTT/RTTVAR/RTO, the quorum RTO and the current unit (seconds)."""
        return {"peers": self.rtt.summary(), "quorum_rto": self.quorum_rto(), "unit": self.unit()}

    async def wait_decided(self, instance: Instance, timeout: float) -> Decide:
        """The replica's decision for ``instance``; raises TimeoutError after ``timeout`` s."""
        if instance in self.decisions:
            return self.decisions[instance]
        fut: asyncio.Future[Decide] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(instance, []).append(fut)
        return await asyncio.wait_for(fut, timeout)

    # ---- inbound --------------------------------------------------------------------------

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._readers.add(task)
        self._writers.add(writer)
        try:
            while not self.closing:
                try:
                    frame = await read_any_frame(reader, self.max_frame, self.io_timeout)
                    if frame is None:
                        break
                    if frame[0] == PING:
                        writer.write(encode_frame(PONG, frame[1]))
                        continue
                    if frame[0] != DATA:
                        raise ConsensusError("unexpected control frame")
                    msg = decode(frame[1])
                except ConsensusError as exc:
                    self.stats.bad_frames += 1
                    log.debug("dropping connection after bad frame: %s", exc)
                    break
                self.stats.frames_in += 1
                self._deliver(msg)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            if task is not None:
                self._readers.discard(task)

    def _deliver(self, msg: Message) -> None:
        if not self.closing:
            self._apply(self.replica.on_message(msg))

    def _fire(self, timer_id: str) -> None:
        self._timers.pop(timer_id, None)
        if not self.closing:
            self._apply(self.replica.on_timer(timer_id))

    # ---- actions --------------------------------------------------------------------------

    def resume(self) -> None:
        """A replica restarted from stable storage: start its timers, re-send its latest."""
        resume = getattr(self.replica, "resume", None)
        if resume is not None and not self.closing:
            self._apply(resume())

    def _apply(self, actions: list[Action]) -> None:
        assert self._loop is not None, "start() the node first"
        for a in actions:
            if isinstance(a, Persist):
                # durable before anything of this batch leaves (an error stops the batch)
                if self.store is not None:
                    self.store.save(a.state)
            elif isinstance(a, Broadcast):
                data = encode(a.msg)
                for idx in self.peers:
                    self._enqueue(idx, data)
            elif isinstance(a, Send):
                if a.to in self.peers:
                    self._enqueue(a.to, encode(a.msg))
            elif isinstance(a, SetTimer):
                old = self._timers.pop(a.timer_id, None)
                if old is not None:
                    old.cancel()
                delay = max(0.0, a.delay * self.unit())
                self._timers[a.timer_id] = self._loop.call_later(delay, self._fire, a.timer_id)
            elif isinstance(a, CancelTimer):
                handle = self._timers.pop(a.timer_id, None)
                if handle is not None:
                    handle.cancel()
            elif isinstance(a, Decide) and a.instance not in self.decisions:
                self.decisions[a.instance] = a
                for fut in self._waiters.pop(a.instance, []):
                    if not fut.done():
                        fut.set_result(a)
                if self.on_decide is not None:
                    self.on_decide(a)

    def _enqueue(self, idx: int, data: bytes) -> None:
        self._link(idx).enqueue(data)

    def _link(self, idx: int) -> PeerLink:
        link = self._links.get(idx)
        if link is None:
            link = self._links[idx] = PeerLink(self, idx)
        link.ensure_running()
        return link


class PeerLink:
    """The outbound side of one peer: a bounded queue of frames and one task that connects
    (reconnecting with capped back-off), writes the frames, sends a PING every
    ``ping_interval`` seconds and reads the PONGs into the node's :class:`PingBook`."""

    def __init__(self, node: TcpNode, idx: int) -> None:
        self.node = node
        self.idx = idx
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(node.queue_size)
        self.task: asyncio.Task[None] | None = None

    def ensure_running(self) -> None:
        if (self.task is None or self.task.done()) and not self.node.closing:
            self.task = asyncio.get_running_loop().create_task(self._run())

    def enqueue(self, data: bytes) -> None:
        if self.queue.full():
            self.node.stats.dropped_out += 1
            return
        self.queue.put_nowait(data)

    async def _run(self) -> None:
        node, stats = self.node, self.node.stats
        loop = asyncio.get_running_loop()
        conn: tuple[asyncio.StreamWriter, asyncio.Task[None]] | None = None
        getter: asyncio.Task[bytes] | None = None
        next_ping = opened = 0.0
        backoff = 0.05
        try:
            while not node.closing:
                if conn is None or conn[1].done():  # never connected, or the peer closed it
                    if conn is not None:
                        conn[0].close()
                        # closed right away (say, a proxy whose target is down): back off
                        short = loop.time() - opened < 1.0
                        backoff = min(backoff * 2, 1.0) if short else 0.05
                        await asyncio.sleep(backoff if short else 0.0)
                    conn = await self._connect()
                    next_ping = opened = loop.time()
                writer, pongs = conn
                if getter is None:
                    getter = loop.create_task(self.queue.get())
                done, _ = await asyncio.wait(
                    {getter, pongs},
                    timeout=max(0.0, next_ping - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if getter in done:
                    kind, body, getter = DATA, getter.result(), None
                elif pongs in done:
                    continue
                else:
                    kind, body = PING, _NONCE.pack(node.rtt.ping(self.idx, loop.time()))
                    next_ping = loop.time() + node.ping_interval
                try:
                    writer.write(encode_frame(kind, body))
                    await asyncio.wait_for(writer.drain(), node.io_timeout)
                except (OSError, TimeoutError):
                    if kind == DATA:
                        stats.dropped_out += 1
                    writer.close()
                    pongs.cancel()
                    conn = None
                    continue
                if kind == DATA:
                    stats.frames_out += 1
                else:
                    stats.pings += 1
        except asyncio.CancelledError:
            pass
        finally:
            if getter is not None:
                getter.cancel()
            if conn is not None:
                conn[1].cancel()
                conn[0].close()

    async def _connect(self) -> tuple[asyncio.StreamWriter, asyncio.Task[None]]:
        """Open a connection to the peer (retrying with capped back-off) and start reading
        its PONGs."""
        node = self.node
        backoff = 0.05
        while not node.closing:
            host, port = node.peers[self.idx]
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                # cancellation that races with a refused connection
                async with asyncio.timeout(node.connect_timeout):
                    reader, writer = await asyncio.open_connection(host, port)
            except (OSError, TimeoutError):
                node.stats.connect_failures += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            node.stats.connects += 1
            return writer, asyncio.get_running_loop().create_task(self._read_pongs(reader))
        raise asyncio.CancelledError

    async def _read_pongs(self, reader: asyncio.StreamReader) -> None:
        """Read PONGs on our outbound connection; returns when it closes. Only answers to
        pings we sent count, so a peer can delay its samples but not forge them."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                frame = await read_any_frame(reader, self.node.max_frame, self.node.io_timeout)
                if frame is None or frame[0] != PONG:
                    return
                (nonce,) = _NONCE.unpack(frame[1])
                if self.node.rtt.pong(self.idx, nonce, loop.time()):
                    self.node.stats.pongs += 1
        except (ConsensusError, ConnectionError):
            return


class ThreadedTcpNode:
    """A :class:`TcpNode` on a private event loop in a daemon thread, for synchronous callers.

    ``start()`` returns the bound address; ``submit``, ``wait_decided`` and ``stop`` are
    thread-safe and bounded in time.
    """

    def __init__(self, replica: Node, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.node = TcpNode(replica, **kwargs)

    def start(self, timeout: float = 5.0) -> tuple[str, int]:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.node.start(), self._loop).result(timeout)

    def set_peers(self, peers: Mapping[int, tuple[str, int]]) -> None:
        self._loop.call_soon_threadsafe(self.node.set_peers, dict(peers))

    def submit(self, instance: Instance) -> None:
        self._loop.call_soon_threadsafe(self.node.submit, instance)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self.node.resume)

    def call(self, fn: Callable[[Node], T], timeout: float = 5.0) -> T:
        """``fn(replica)`` run on the event-loop thread (the only thread that touches the
        replica), its result returned here; bounded by ``timeout`` seconds."""

        async def run() -> T:
            return fn(self.node.replica)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def wait_decided(self, instance: Instance, timeout: float) -> Decide:
        fut = asyncio.run_coroutine_threadsafe(
            self.node.wait_decided(instance, timeout), self._loop
        )
        return fut.result(timeout + 1.0)

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self.node.stop(timeout), self._loop)
            with contextlib.suppress(Exception):
                fut.result(timeout + 1.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()
