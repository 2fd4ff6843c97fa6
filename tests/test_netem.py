"""WAN emulation for PBFT: the user-space proxy delays and loses whole frames, PBFT decides
through lossy proxies, and timers follow the measured round-trip time.

No timing upper bounds are asserted (the machine may be slow); lower bounds are safe: a proxy
that must hold a frame for 50 ms cannot deliver it sooner however fast the machine is.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from eth_utils import keccak

from consensus import messages as M
from consensus.memnet import SIM_DOMAIN, simulation_accounts
from consensus.pbft import Replica, ReplicaConfig
from consensus.quorums import commit_quorum
from consensus.rtt import RttEstimator, TimerScale, quorum_rto
from consensus.tcp import DATA, PING, TcpNode, encode_frame, read_any_frame
from fedchain.testnet.netem import (
    Link,
    LinkProfile,
    LinkProxy,
    mesh_links,
    parse_duration,
    parse_loss,
    pbft_peers,
    serve,
    spawn_netem,
    start_pbft_proxies,
    stop_netem,
)
from protocol.errors import ConfigError

ACCOUNTS = simulation_accounts(4)
MEMBERS = [a.address for a in ACCOUNTS]


def inst(r: int) -> M.Instance:
    return M.Instance(
        SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, r, 0, keccak(text=f"wan{r}")
    )


def truth(i: M.Instance) -> bool:
    return i.round % 2 == 1


class Sink:
    """A loopback server that records every frame it receives with its arrival time."""

    def __init__(self) -> None:
        self.frames: list[tuple[float, int, bytes]] = []
        self.server: asyncio.Server | None = None
        self.connections = 0

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._on, "127.0.0.1", 0)
        host, port = self.server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def _on(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        loop = asyncio.get_running_loop()
        try:
            while (got := await read_any_frame(reader)) is not None:
                self.frames.append((loop.time(), *got))
        except (ConnectionError, Exception):
            pass
        writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


async def _send_frames(address: tuple[str, int], count: int) -> dict[int, float]:
    """Send ``count`` numbered message frames on one connection (until the connection is
    reset); return their send times."""
    loop = asyncio.get_running_loop()
    _, writer = await asyncio.open_connection(*address)
    sent: dict[int, float] = {}
    try:
        for k in range(count):
            sent[k] = loop.time()
            writer.write(encode_frame(DATA, struct.pack(">I", k)))
            await writer.drain()
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.3)
    except ConnectionError:
        pass
    writer.close()
    return sent


# ---- the proxy ---------------------------------------------------------------------------


def test_proxy_delays_every_frame_and_keeps_order() -> None:
    async def main() -> None:
        sink = Sink()
        target = await sink.start()
        proxy = LinkProxy(target, LinkProfile(latency=0.05, jitter=0.01), seed=1)
        address = await proxy.start()
        try:
            sent = await _send_frames(address, 40)
            for _ in range(200):
                if len(sink.frames) == 40:
                    break
                await asyncio.sleep(0.02)
        finally:
            await proxy.stop()
            await sink.stop()
        got = [struct.unpack(">I", body)[0] for _, kind, body in sink.frames if kind == DATA]
        assert got == list(range(40))  # nothing lost, FIFO like one TCP flow
        for (arrived, _, _), k in zip(sink.frames, got, strict=True):
            assert arrived - sent[k] >= 0.04  # latency - jitter, at least
        assert proxy.stats.frames == proxy.stats.forwarded == 40
        assert proxy.stats.dropped == 0 and proxy.stats.delay_total >= 40 * 0.04

    asyncio.run(asyncio.wait_for(main(), 30))


def test_proxy_drops_whole_frames() -> None:
    async def main() -> None:
        sink = Sink()
        target = await sink.start()
        proxy = LinkProxy(target, LinkProfile(loss=0.3), seed=7)
        address = await proxy.start()
        try:
            await _send_frames(address, 200)
        finally:
            await proxy.stop()
            await sink.stop()
        s = proxy.stats
        assert s.frames == 200 and s.dropped > 0 and s.forwarded == 200 - s.dropped
        assert len(sink.frames) == s.forwarded  # every frame arrives whole or not at all
        got = [struct.unpack(">I", body)[0] for _, _, body in sink.frames]
        assert got == sorted(got) and len(set(got)) == len(got)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_proxy_reset_and_retransmit_modes() -> None:
    async def main() -> None:
        sink = Sink()
        target = await sink.start()
        reset = LinkProxy(target, LinkProfile(loss=0.2, loss_mode="reset"), seed=3)
        retx = LinkProxy(target, LinkProfile(latency=0.001, loss=0.2, loss_mode="retransmit"))
        try:
            await _send_frames(await reset.start(), 50)
            before = len(sink.frames)
            await _send_frames(await retx.start(), 30)
            for _ in range(200):
                if len(sink.frames) - before == 30:
                    break
                await asyncio.sleep(0.05)
        finally:
            await reset.stop()
            await retx.stop()
            await sink.stop()
        assert reset.stats.resets == 1 and reset.stats.forwarded < 50  # the flow was cut
        assert retx.stats.retransmitted > 0 and retx.stats.dropped == 0
        assert len(sink.frames) - before == 30  # TCP-style loss: late, never lost

    asyncio.run(asyncio.wait_for(main(), 60))


def test_proxy_refuses_non_loopback_targets_and_bad_values() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        LinkProxy(("10.0.0.1", 80), LinkProfile())
    with pytest.raises(ConfigError, match="loss"):
        LinkProfile(loss=1.0)
    assert parse_duration("150ms", "--x") == pytest.approx(0.15)
    assert parse_duration("0.3s", "--x") == pytest.approx(0.3)
    assert parse_loss("5%", "--x") == pytest.approx(0.05)
    for bad in ("150", "fast", "-1ms"):
        with pytest.raises(ConfigError, match="--pbft-latency"):
            parse_duration(bad, "--pbft-latency")
    with pytest.raises(ConfigError, match="--loss"):
        parse_loss("2", "--loss")


# ---- PBFT through lossy proxies ----------------------------------------------------------


def test_pbft_decides_through_lossy_proxies_and_timers_follow_rtt() -> None:
    latency, jitter = 0.02, 0.005
    profile = LinkProfile(latency=latency, jitter=jitter, loss=0.1)

    async def main() -> None:
        cfg = ReplicaConfig()  # default units: request/view-change timeout = 4 RTO
        nodes = [
            TcpNode(Replica(i, MEMBERS, ACCOUNTS[i], SIM_DOMAIN, truth, cfg), ping_interval=0.2)
            for i in range(4)
        ]
        listen = {i: await n.start() for i, n in enumerate(nodes)}
        addresses: dict[str, list[object]] = {}
        stop = asyncio.Event()
        links = mesh_links(listen, profile, seed=5)
        proxies = asyncio.create_task(
            serve(links, stop=stop, max_seconds=120, on_ready=addresses.update)
        )
        while not addresses:
            await asyncio.sleep(0.01)
        try:
            for i, n in enumerate(nodes):
                routes = {
                    j: (str(addresses[f"{i}->{j}"][0]), int(addresses[f"{i}->{j}"][1]))
                    for j in range(4)
                    if j != i
                }
                n.set_peers(routes)
            await asyncio.sleep(1.0)  # a few pings each way
            for r in (1, 2, 3):
                for n in nodes:
                    n.submit(inst(r))
                decided = await asyncio.wait_for(
                    asyncio.gather(*(n.wait_decided(inst(r), 60) for n in nodes)), 70
                )
                for d in decided:
                    assert d.faulty == truth(d.instance)
                    d.certificate.verify(MEMBERS, SIM_DOMAIN, instance=d.instance)
            for n in nodes:
                rto = n.quorum_rto()
                # a round trip crosses two proxies: at least 2 * (latency - jitter)
                assert rto is not None and rto >= 2 * (latency - jitter)
                assert n.unit() == pytest.approx(max(0.01, min(1.0, rto / 10)))
                assert n.stats.pongs > 0
        finally:
            stop.set()
            stats = await proxies
            await asyncio.gather(*(n.stop() for n in nodes))
        assert sum(s.dropped for s in stats.values()) > 0  # messages really were lost
        assert all(s.connections >= 1 for s in stats.values())

    asyncio.run(asyncio.wait_for(main(), 150))


# ---- the estimator and the timer scale ----------------------------------------------------


def test_rtt_estimator_follows_rfc6298() -> None:
    e = RttEstimator()
    assert e.rto is None
    e.sample(0.3)
    assert (e.srtt, e.rttvar, e.rto) == (0.3, 0.15, pytest.approx(0.3 + 4 * 0.15))
    e.sample(0.5)
    # RTTVAR <- 3/4 * 0.15 + 1/4 * |0.3 - 0.5|; SRTT <- 7/8 * 0.3 + 1/8 * 0.5
    assert e.rttvar == pytest.approx(0.1625) and e.srtt == pytest.approx(0.325)
    assert e.rto == pytest.approx(0.325 + 4 * 0.1625)
    with pytest.raises(Exception, match="round-trip"):
        e.sample(-1.0)


def test_timeouts_adapt_to_latency() -> None:
    """A steady 100 ms link settles near 100 ms; when the link slows to 600 ms the RTO and
    with it every replica timer follow within a few samples."""
    e = RttEstimator()
    for _ in range(50):
        e.sample(0.1)
    assert e.rto is not None and 0.1 <= e.rto < 0.11
    scale = TimerScale()
    fast = scale.unit(e.rto)
    for _ in range(8):
        e.sample(0.6)
    assert e.rto is not None and e.rto > 0.6
    slow = scale.unit(e.rto)
    assert slow > 5 * fast  # request timeout 40 units: ~0.4 s before, > 2.4 s now
    # clamped: loopback stays at the floor, a huge RTO at the ceiling
    assert scale.unit(0.0005) == scale.min_unit and scale.unit(1000.0) == scale.max_unit
    assert scale.unit(None) == scale.min_unit


def test_quorum_rto_ignores_f_slow_or_silent_peers() -> None:
    n = 4
    needed = commit_quorum(n) - 1  # peers a quorum must hear from
    honest = [0.10, 0.12]
    byzantine = [9.0]  # delays its pongs: may not stretch everyone's timers
    assert quorum_rto(honest + byzantine, needed) == 0.12
    assert quorum_rto([*honest, None], needed) == 0.12  # a crashed peer has no samples
    assert quorum_rto([None, None, None], needed) is None
    assert quorum_rto([0.3], needed) == 0.3  # fewer known than needed: the largest known


def test_tcp_node_timers_use_the_measured_unit() -> None:
    async def main() -> None:
        node = TcpNode(Replica(0, MEMBERS, ACCOUNTS[0], SIM_DOMAIN, truth), ping_interval=60)
        node.peers = {1: ("127.0.0.1", 9), 2: ("127.0.0.1", 9), 3: ("127.0.0.1", 9)}
        await node.start()
        try:
            assert node.unit() == 0.01  # nothing measured yet: the floor
            for peer, rtt in ((1, 4.0), (2, 5.0), (3, 50.0)):
                for k in range(30):
                    nonce = node.rtt.ping(peer, 100.0 * k)
                    assert node.rtt.pong(peer, nonce, 100.0 * k + rtt)
                    assert not node.rtt.pong(peer, nonce, 100.0 * k + rtt)  # answered already
            assert not node.rtt.pong(1, 10_000, 1.0)  # never sent: no sample
            # quorum of 3 needs 2 peers: the second-fastest RTO (~5 s) -> 0.5 s per unit
            assert 0.5 <= node.unit() < 0.55
            loop = asyncio.get_running_loop()
            node.submit(inst(1))  # the primary proposes and arms its request timer
            handle = next(h for t, h in node._timers.items() if t.startswith("request"))
            assert 19.0 < handle.when() - loop.time() <= 40 * node.unit() + 1e-6
            fixed = TcpNode(node.replica, adaptive=False, time_unit=0.02)
            fixed.rtt = node.rtt
            assert fixed.unit() == 0.02
        finally:
            await node.stop()

    asyncio.run(asyncio.wait_for(main(), 30))


# ---- the proxy as a process, and the testnet routes ----------------------------------------


def test_netem_process_is_started_and_stopped_by_pid(tmp_path: Path) -> None:
    received: list[bytes] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        target = server.getsockname()
        link = Link("a->b", target, LinkProfile(latency=0.02), seed=1)
        pid, pid_file, addresses = spawn_netem([link], tmp_path, max_seconds=60)
        try:
            assert pid_file.exists() and int(pid_file.read_text().split()[0]) == pid
            with socket.create_connection(addresses["a->b"], timeout=10) as client:
                client.sendall(encode_frame(DATA, b"hello") + encode_frame(PING, b"\0" * 8))
                conn, _ = server.accept()
                conn.settimeout(10)
                with conn:
                    while len(b"".join(received)) < 9 + 12:
                        received.append(conn.recv(100))
        finally:
            assert stop_netem(pid_file)
    assert b"".join(received) == encode_frame(DATA, b"hello") + encode_frame(PING, b"\0" * 8)
    assert not pid_file.exists()
    log = (tmp_path / "netem.log").read_text()
    stats = json.loads(log.strip().splitlines()[-1])["netem_stats"]["a->b"]
    assert stats["forwarded"] == 2 and stats["dropped"] == 0


def test_netem_cli_bad_input_is_one_line_and_exit_2() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedchain.cli",
            "netem",
            "--target",
            "127.0.0.1:9",
            "--latency",
            "150",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--latency '150'" in out.stderr


def test_pbft_peers_follow_the_testnet_routes() -> None:
    spec = {
        "nodes": [{"role": "aggregator", "index": i, "pbft_port": 5000 + i} for i in range(3)]
        + [{"role": "client", "index": 0}],
        "pbft_routes": {"1": {"0": ["127.0.0.1", 6010], "2": ["127.0.0.1", 6012]}},
    }
    assert pbft_peers(spec, 1) == {
        0: ("127.0.0.1", 6010),
        1: ("127.0.0.1", 5001),  # its own listening address
        2: ("127.0.0.1", 6012),
    }
    assert pbft_peers(spec, 0) == {i: ("127.0.0.1", 5000 + i) for i in range(3)}  # direct


def test_testnet_mesh_routes_every_link_through_its_proxy(tmp_path: Path) -> None:
    """``start_pbft_proxies`` (what ``testnet up --pbft-latency`` runs): one proxy process,
    a route for every ordered pair, each relaying to the right member, stopped by PID."""
    servers = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        s.settimeout(10)
        servers.append(s)
    spec: dict = {
        "nodes": [
            {"role": "aggregator", "index": i, "pbft_port": s.getsockname()[1]}
            for i, s in enumerate(servers)
        ]
    }
    start_pbft_proxies(spec, tmp_path, LinkProfile(latency=0.001), max_seconds=60)
    pid_file = Path(spec["services"]["netem"]["pid_file"])
    try:
        assert sorted(spec["pbft_routes"]) == ["0", "1", "2"]
        for i in range(3):
            peers = pbft_peers(spec, i)
            assert peers[i] == ("127.0.0.1", servers[i].getsockname()[1])
            for j in range(3):
                if j == i:
                    continue
                assert peers[j] != ("127.0.0.1", servers[j].getsockname()[1])  # via a proxy
                with socket.create_connection(peers[j], timeout=10) as c:
                    c.sendall(encode_frame(DATA, f"{i}->{j}".encode()))
                    conn, _ = servers[j].accept()
                    with conn:
                        conn.settimeout(10)
                        data = b""
                        while len(data) < 8:
                            data += conn.recv(64)
                assert data == encode_frame(DATA, f"{i}->{j}".encode())
    finally:
        assert stop_netem(pid_file)
        for s in servers:
            s.close()


@pytest.mark.slow
@pytest.mark.realnet
def test_testnet_dispute_through_wan_proxies(tmp_path: Path) -> None:
    """``testnet up --pbft-latency``: aggregator processes decide a dispute over lossy proxies
    (the faulty aggregate of round 1 is rejected and its submitter slashed)."""
    from dataclasses import replace

    from adapters.chain import Chain
    from adapters.contract import TaskContract
    from adapters.services import find_anvil
    from fedchain.sim.scenario import load_scenario
    from fedchain.testnet import cluster as testnet
    from protocol.errors import FedchainError

    try:
        find_anvil()
    except FedchainError:
        pytest.skip("anvil not installed: run scripts/install_tools.sh (make setup)")
    from web3 import Web3

    scenario = load_scenario(Path(__file__).resolve().parent.parent / "scenarios/agg-noise.toml")
    cfg = replace(scenario.config, rounds=1, out=str(tmp_path / "runs"))
    directory = tmp_path / "tn"
    wan = LinkProfile(latency=0.05, jitter=0.01, loss=0.05)
    try:
        spec = testnet.up(
            cfg,
            directory,
            use_ipfs=False,
            block_time=0.5,
            scenario=scenario,
            max_seconds=600,
            pbft_netem=wan,
        )
        assert spec["pbft_netem"]["latency"] == 0.05 and len(spec["pbft_routes"]) == 4
        final = testnet.wait(directory, timeout=500)["chain"]
        assert final["completed"]
        logs = [
            json.loads(line)
            for n in spec["nodes"]
            for line in (directory / "logs" / f"{n['name']}.log").read_text().splitlines()
            if line.startswith("{")
        ]
        assert any(e["action"] == "pbft-decided" and e["verdict"] == "faulty" for e in logs)
        assert any(e["action"] == "resolveDispute" for e in logs)
        task = TaskContract.at(Chain(Web3(Web3.HTTPProvider(spec["rpc_url"])), []), spec["task"])
        assert task.aggregator_info(spec["nodes"][0]["address"]).slashed
    finally:
        stopped = testnet.down(directory)
    assert "netem" in stopped
    log = (directory / "netem" / "netem.log").read_text().strip().splitlines()
    stats = json.loads(log[-1])["netem_stats"]
    assert len(stats) == 12 and sum(s["forwarded"] for s in stats.values()) > 0
