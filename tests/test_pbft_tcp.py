"""PBFT over real TCP on loopback: four replicas in one process, bounded in time."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest
from eth_utils import keccak

from consensus import messages as M
from consensus.memnet import SIM_DOMAIN, simulation_accounts
from consensus.pbft import Node, Replica, ReplicaConfig, SilentReplica
from consensus.tcp import TcpNode, ThreadedTcpNode, read_frame

CFG = ReplicaConfig(request_timeout=25.0, view_change_timeout=25.0, retransmit_interval=10.0)
TIME_UNIT = 0.01  # 1 unit = 10 ms: request timeout 250 ms
ACCOUNTS = simulation_accounts(4)
MEMBERS = [a.address for a in ACCOUNTS]


def inst(r: int) -> M.Instance:
    return M.Instance(
        SIM_DOMAIN.verifying_contract, SIM_DOMAIN.chain_id, r, 0, keccak(text=f"t{r}")
    )


def truth(i: M.Instance) -> bool:
    return i.round % 2 == 0


def replicas(silent: set[int] = frozenset()) -> list[Node]:  # type: ignore[assignment]
    return [
        SilentReplica(i)
        if i in silent
        else Replica(i, MEMBERS, ACCOUNTS[i], SIM_DOMAIN, truth, CFG)
        for i in range(4)
    ]


async def start_all(nodes: list[TcpNode]) -> None:
    addrs = {i: await n.start() for i, n in enumerate(nodes)}
    for n in nodes:
        n.set_peers(addrs)


def test_four_replicas_decide_over_loopback() -> None:
    async def main() -> None:
        nodes = [TcpNode(r, time_unit=TIME_UNIT) for r in replicas()]
        await start_all(nodes)
        try:
            for n in nodes:
                for r in (1, 2, 3):
                    n.submit(inst(r))
            decisions = await asyncio.wait_for(
                asyncio.gather(*(n.wait_decided(inst(r), 10) for n in nodes for r in (1, 2, 3))),
                15,
            )
            for d in decisions:
                assert d.faulty == truth(d.instance)
                d.certificate.verify(MEMBERS, SIM_DOMAIN, instance=d.instance)
            assert all(n.address is not None and n.address[0] == "127.0.0.1" for n in nodes)
            assert sum(n.stats.frames_in for n in nodes) > 0
            assert sum(n.stats.bad_frames for n in nodes) == 0
        finally:
            await asyncio.wait_for(asyncio.gather(*(n.stop() for n in nodes)), 10)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_crashed_primary_over_tcp() -> None:
    """Replica 0 (primary of view 0) never comes up: its peers cannot even connect to it."""

    async def main() -> None:
        nodes = [TcpNode(r, time_unit=TIME_UNIT) for r in replicas()]
        addrs = {i: await n.start() for i, n in enumerate(nodes)}
        await nodes[0].stop()  # the port is now closed: connections are refused
        live = nodes[1:]
        for n in live:
            n.set_peers(addrs)
        try:
            for n in live:
                n.submit(inst(1))
            ds = await asyncio.wait_for(
                asyncio.gather(*(n.wait_decided(inst(1), 20) for n in live)), 25
            )
            assert {d.faulty for d in ds} == {False}
            assert all(d.certificate.view >= 1 for d in ds)
            assert sum(n.stats.connect_failures for n in live) > 0
        finally:
            await asyncio.wait_for(asyncio.gather(*(n.stop() for n in live)), 10)

    asyncio.run(asyncio.wait_for(main(), 40))


def test_malformed_frames_close_the_connection() -> None:
    async def main() -> None:
        node = TcpNode(replicas()[1], time_unit=TIME_UNIT, io_timeout=0.5, max_frame=4096)
        host, port = await node.start()
        try:
            cases = [
                struct.pack(">I", 0),  # empty frame
                struct.pack(">I", 10_000),  # over max_frame
                struct.pack(">I", 5) + b"hello",  # not a message
                struct.pack(">I", 50) + b"{",  # truncated body, then EOF
            ]
            for raw in cases:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(raw)
                await writer.drain()
                if raw.endswith(b"{"):
                    writer.write_eof()
                closed = await asyncio.wait_for(reader.read(), 5)
                assert closed == b""
                writer.close()
            # a slow-loris body is cut off by the I/O timeout
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(struct.pack(">I", 100) + b"{")
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            assert node.stats.bad_frames == 5
            # a valid frame from a forged sender is decoded, then rejected by the replica
            forged = M.sign(M.PrePrepare(0, 1, *inst(1).key, False, 0), ACCOUNTS[2], SIM_DOMAIN)
            data = M.encode(forged)
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(struct.pack(">I", len(data)) + data)
            await writer.drain()
            for _ in range(100):
                if node.stats.frames_in:
                    break
                await asyncio.sleep(0.01)
            writer.close()
            replica = node.replica
            assert isinstance(replica, Replica) and replica.stats["rejected"] == 1
        finally:
            await node.stop()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_read_frame_eof() -> None:
    async def main() -> None:
        reader = asyncio.StreamReader()
        reader.feed_eof()
        assert await read_frame(reader) is None

    asyncio.run(main())


def test_threaded_nodes_for_synchronous_callers() -> None:
    nodes = [ThreadedTcpNode(r, time_unit=TIME_UNIT) for r in replicas(silent={3})]
    try:
        addrs = {i: n.start() for i, n in enumerate(nodes)}
        for n in nodes:
            n.set_peers(addrs)
        for n in nodes[:3]:
            n.submit(inst(2))
        for n in nodes[:3]:
            d = n.wait_decided(inst(2), timeout=15)
            assert d.faulty is True
        with pytest.raises(TimeoutError):
            nodes[3].wait_decided(inst(2), timeout=0.3)
    finally:
        for n in nodes:
            n.stop()


def test_late_commits_complete_a_certificate_without_a_slashed_signer() -> None:
    """The testnet's certificate pool (fedchain/testnet/pbft_service.py): a decision carries exactly
    n - f commits; if one of those signers is slashed on-chain before ``resolveDispute`` runs,
    the commits that reached the replica after it decided (every member broadcasts its commit)
    replace it, read from the replica's log on the transport's own thread."""
    from dataclasses import replace

    from consensus.certificate import eligible_certificate

    nodes = [ThreadedTcpNode(r, time_unit=TIME_UNIT) for r in replicas()]
    try:
        addrs = {i: n.start() for i, n in enumerate(nodes)}
        for n in nodes:
            n.set_peers(addrs)
        for n in nodes:
            n.submit(inst(4))
        decisions = [n.wait_decided(inst(4), timeout=15) for n in nodes]
        decided = decisions[0].certificate
        assert len(decided.signatures) == 3  # n - f: the cheapest certificate
        key = inst(4).key

        def late(n: ThreadedTcpNode) -> dict[str, bytes]:
            def read(replica: Node) -> tuple[tuple[str, bytes], ...]:
                assert isinstance(replica, Replica)
                return replica.matching_commits(key, decided.faulty, decided.view)

            return dict(n.call(read))

        # Every member's commit eventually reaches node 0 (bounded wait, no timing assert).
        pool = late(nodes[0])
        for _ in range(200):
            if len(pool) == 4:
                break
            time.sleep(0.02)
            pool = late(nodes[0])
        assert set(pool) == set(MEMBERS)
        assert set(dict(decided.signatures)) <= set(pool)
        slashed = decided.signatures[0][0]  # a signer of the decided certificate is slashed
        alone = eligible_certificate(decided, dict(decided.signatures), lambda a: a != slashed, 3)
        assert alone is None  # the decision's own certificate is now short
        cert = eligible_certificate(decided, pool, lambda a: a != slashed, 3)
        assert cert is not None and slashed not in dict(cert.signatures)
        assert cert.is_valid(MEMBERS, SIM_DOMAIN)
        assert cert == replace(decided, signatures=cert.signatures)  # same verdict and view
    finally:
        for n in nodes:
            n.stop()
