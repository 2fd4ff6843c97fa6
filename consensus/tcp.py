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
from typing import Any

from consensus.messages import MAX_MESSAGE_BYTES, Instance, Message, decode, encode
from consensus.pbft import Action, Broadcast, CancelTimer, Decide, Node, Send, SetTimer
from protocol.errors import ConsensusError

__all__ = ["TcpNode", "TcpStats", "ThreadedTcpNode", "read_frame", "write_frame"]

log = logging.getLogger(__name__)
_HEADER = struct.Struct(">I")


@dataclass
class TcpStats:
    frames_in: int = 0
    frames_out: int = 0
    bad_frames: int = 0
    dropped_out: int = 0
    connects: int = 0
    connect_failures: int = 0


async def read_frame(
    reader: asyncio.StreamReader, max_size: int = MAX_MESSAGE_BYTES, timeout: float = 10.0
) -> bytes | None:
    """Read one frame; ``None`` on a clean EOF before a header. Raises ConsensusError on an
    oversized or empty frame, a truncated body, or a body slower than ``timeout``."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ConsensusError("truncated frame header") from exc
    (size,) = _HEADER.unpack(header)
    if size == 0 or size > max_size:
        raise ConsensusError(f"frame of {size} bytes refused (limit {max_size})")
    try:
        return await asyncio.wait_for(reader.readexactly(size), timeout)
    except asyncio.IncompleteReadError as exc:
        raise ConsensusError("truncated frame body") from exc
    except TimeoutError as exc:
        raise ConsensusError("frame body too slow") from exc


def write_frame(writer: asyncio.StreamWriter, payload: bytes) -> None:
    writer.write(_HEADER.pack(len(payload)) + payload)


class TcpNode:
    """Drive ``replica`` over TCP.

    ``peers`` maps committee index to ``(host, port)``; it may be given later with
    :meth:`set_peers` (e.g. after every node bound port 0). ``time_unit`` converts the
    replica's abstract timer units to seconds.
    """

    def __init__(
        self,
        replica: Node,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        peers: Mapping[int, tuple[str, int]] | None = None,
        *,
        time_unit: float = 0.01,
        connect_timeout: float = 2.0,
        io_timeout: float = 5.0,
        max_frame: int = MAX_MESSAGE_BYTES,
        queue_size: int = 1024,
        on_decide: Callable[[Decide], None] | None = None,
    ) -> None:
        self.replica = replica
        self.listen = listen
        self.peers: dict[int, tuple[str, int]] = dict(peers or {})
        self.time_unit = time_unit
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self.max_frame = max_frame
        self.queue_size = queue_size
        self.on_decide = on_decide
        self.stats = TcpStats()
        self.decisions: dict[Instance, Decide] = {}
        self.address: tuple[str, int] | None = None
        self._server: asyncio.Server | None = None
        self._queues: dict[int, asyncio.Queue[bytes]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._readers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._waiters: dict[Instance, list[asyncio.Future[Decide]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        """Bind the listening socket; returns the actual ``(host, port)``."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._on_connection, *self.listen)
        sock = self._server.sockets[0].getsockname()
        self.address = (str(sock[0]), int(sock[1]))
        for idx in self.peers:
            self._ensure_sender(idx)
        return self.address

    def set_peers(self, peers: Mapping[int, tuple[str, int]]) -> None:
        me = self.replica.index
        self.peers = {i: a for i, a in peers.items() if i != me}
        if self._loop is not None:
            for idx in self.peers:
                self._ensure_sender(idx)

    async def stop(self, timeout: float = 5.0) -> None:
        """Close the server, connections, sender tasks and timers (bounded by ``timeout``)."""
        self._closing = True
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._server is not None:
            self._server.close()
        tasks = list(self._senders.values()) + list(self._readers)
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
            while not self._closing:
                try:
                    data = await read_frame(reader, self.max_frame, self.io_timeout)
                    if data is None:
                        break
                    msg = decode(data)
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
        if not self._closing:
            self._apply(self.replica.on_message(msg))

    def _fire(self, timer_id: str) -> None:
        self._timers.pop(timer_id, None)
        if not self._closing:
            self._apply(self.replica.on_timer(timer_id))

    # ---- actions --------------------------------------------------------------------------

    def _apply(self, actions: list[Action]) -> None:
        assert self._loop is not None, "start() the node first"
        for a in actions:
            if isinstance(a, Broadcast):
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
                delay = max(0.0, a.delay * self.time_unit)
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
        self._ensure_sender(idx)
        q = self._queues[idx]
        if q.full():
            self.stats.dropped_out += 1
            return
        q.put_nowait(data)

    def _ensure_sender(self, idx: int) -> None:
        if idx not in self._queues:
            self._queues[idx] = asyncio.Queue(self.queue_size)
        task = self._senders.get(idx)
        if (task is None or task.done()) and not self._closing:
            self._senders[idx] = asyncio.get_running_loop().create_task(self._sender(idx))

    async def _sender(self, idx: int) -> None:
        """Connect to peer ``idx`` and write its queued frames; reconnect on failure."""
        q = self._queues[idx]
        backoff = 0.05
        writer: asyncio.StreamWriter | None = None
        try:
            while not self._closing:
                if writer is None:
                    host, port = self.peers[idx]
                    try:
                        _, writer = await asyncio.wait_for(
                            asyncio.open_connection(host, port), self.connect_timeout
                        )
                        self.stats.connects += 1
                        backoff = 0.05
                    except (OSError, TimeoutError):
                        self.stats.connect_failures += 1
                        await asyncio.sleep(backoff)
                        backoff = min(backoff * 2, 1.0)
                        continue
                data = await q.get()
                assert writer is not None
                try:
                    write_frame(writer, data)
                    await asyncio.wait_for(writer.drain(), self.io_timeout)
                    self.stats.frames_out += 1
                except (OSError, TimeoutError):
                    self.stats.dropped_out += 1
                    writer.close()
                    writer = None
        except asyncio.CancelledError:
            pass
        finally:
            if writer is not None:
                writer.close()


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
