"""The kazoo session bridged into Trio, against a real ZooKeeper; Kafka's znode JSON."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio
from kazoo.exceptions import BadVersionError, NodeExistsError, RolledBackError

from trio_broker.cluster.zookeeper import zk_data
from trio_broker.cluster.zookeeper.session import ZkConnect, ZooKeeperSession, ZooKeeperTimeout
from trio_broker.testing import free_port


def test_zookeeper_connect_is_read_as_kafka_reads_it():
    assert ZkConnect.parse("a:2181,b:2181/kafka/prod/") == ZkConnect(
        hosts="a:2181,b:2181", chroot="/kafka/prod"
    )
    assert ZkConnect.parse("a:2181") == ZkConnect(hosts="a:2181", chroot="")
    with pytest.raises(ValueError):
        ZkConnect.parse("/kafka")


def test_broker_registration_json_round_trips_in_kafkas_layout():
    info = zk_data.BrokerInfo(
        broker_id=4,
        endpoints=(zk_data.EndPoint(listener="PLAINTEXT", host="10.0.0.4", port=9092),),
        rack="r1",
        timestamp="1700000000000",
    )
    assert info.encode() == (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://10.0.0.4:9092"],"jmx_port":-1,"port":9092,'
        b'"host":"10.0.0.4","version":5,"timestamp":"1700000000000","rack":"r1"}'
    )
    assert zk_data.BrokerInfo.decode(4, info.encode()) == info
    # What a Kafka 2.x broker registers (version 4, an SSL listener beside PLAINTEXT).
    kafka = (
        b'{"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT","EXTERNAL":"SSL"},'
        b'"endpoints":["INTERNAL://k1:9092","EXTERNAL://[::1]:9093"],"jmx_port":9999,'
        b'"host":"k1","timestamp":"1","port":9092,"version":4}'
    )
    decoded = zk_data.BrokerInfo.decode(1, kafka)
    assert decoded.endpoints == (
        zk_data.EndPoint(listener="INTERNAL", host="k1", port=9092),
        zk_data.EndPoint(listener="EXTERNAL", host="::1", port=9093, security_protocol="SSL"),
    )
    assert (decoded.rack, decoded.jmx_port) == (None, 9999)
    assert zk_data.decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1"}') == 2
    assert zk_data.decode_cluster_id(zk_data.encode_cluster_id("abc")) == "abc"


async def test_calls_watches_and_transactions_through_the_bridge(zookeeper):
    zk = ZooKeeperSession(zookeeper.connect + "/deep/chroot", session_timeout_ms=4000)
    await zk.open()  # creates the chroot, as Kafka does
    try:
        await zk.ensure_path("/brokers/ids")
        send, receive = trio.open_memory_channel(1)
        data_send, data_receive = trio.open_memory_channel(1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(zk.watch_children, "/brokers/ids", send)
            nursery.start_soon(zk.watch_data, "/controller", data_send)
            assert await receive.receive() == []
            assert await data_receive.receive() is None
            await zk.create("/brokers/ids/2", b"two", ephemeral=True)
            await zk.create("/brokers/ids/1", b"one", ephemeral=True)
            seen = await receive.receive()
            while seen != ["1", "2"]:  # two changes may come as one fresh read, or two
                seen = await receive.receive()
            await zk.create("/controller", b"c1", ephemeral=True)
            data, stat = await data_receive.receive()
            assert data == b"c1" and stat.ephemeralOwner == zk.session_id
            await zk.delete("/controller")
            assert await data_receive.receive() is None
            nursery.cancel_scope.cancel()

        # Conditional writes and all-or-nothing multis, the controller's tools.
        await zk.create("/epoch", b"0")
        stat = await zk.set("/epoch", b"1", version=0)
        with pytest.raises(BadVersionError):
            await zk.set("/epoch", b"2", version=0)
        results = await zk.transaction(
            [
                ("create", ("/controller", b"me"), {"ephemeral": True}),
                ("set_data", ("/epoch", b"2"), {"version": 0}),  # stale: all rolled back
            ]
        )
        assert isinstance(results[0], RolledBackError)
        assert isinstance(results[1], BadVersionError)
        assert await zk.exists("/controller") is None
        assert (await zk.get("/epoch"))[0] == b"1"
        assert await zk.create_if_missing("/x/y", b"v") is True
        assert await zk.create_if_missing("/x/y", b"w") is False
        with pytest.raises(NodeExistsError):
            await zk.create("/x/y")
    finally:
        await zk.close()
    # Everything lives under the chroot; the ephemeral znodes went with the session.
    check = ZooKeeperSession(zookeeper.connect, session_timeout_ms=4000)
    await check.open()
    try:
        assert await check.get_children("/deep/chroot/brokers/ids") == []
        assert (await check.get("/deep/chroot/x/y"))[0] == b"v"
    finally:
        await check.close()


async def test_no_zookeeper_times_out_with_a_clear_error():
    zk = ZooKeeperSession(
        f"127.0.0.1:{free_port()}", session_timeout_ms=4000, connection_timeout_ms=500
    )
    with pytest.raises(ZooKeeperTimeout, match="timed out waiting for a connection to ZooKeeper"):
        await zk.open()


def test_serve_exits_when_zookeeper_is_unreachable(tmp_path):
    args = [sys.executable, "-m", "trio_broker", "serve"]
    for key, value in {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "zookeeper.connect": f"127.0.0.1:{free_port()}",
        "zookeeper.connection.timeout.ms": "500",
    }.items():
        args += ["--override", f"{key}={value}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "timed out waiting for a connection to ZooKeeper" in done.stderr
    assert "Traceback" not in done.stderr


async def test_an_expired_session_is_replaced_and_its_work_redone(zookeeper):
    from kazoo.client import KazooClient

    zk = ZooKeeperSession(zookeeper.connect, session_timeout_ms=4000)
    await zk.open()
    registered_send, registered = trio.open_memory_channel(10)
    children_send, children = trio.open_memory_channel(1)

    async def register(session_id: int) -> None:
        await zk.create("/brokers-me", b"", ephemeral=True)
        await registered_send.send(session_id)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(zk.each_session, register)
            first = await registered.receive()
            nursery.start_soon(zk.watch_children, "/", children_send)
            assert "brokers-me" in await children.receive()

            # ZooKeeper's own way to expire a session on purpose: a second client joins it
            # with its id and password, then closes it. The first client learns it is gone.
            def close_from_elsewhere() -> None:
                other = KazooClient(hosts=zookeeper.connect, client_id=zk._client.client_id)
                other.start(timeout=10)
                other.stop()
                other.close()

            await trio.to_thread.run_sync(close_from_elsewhere)
            with trio.fail_after(15):  # a budget, not a timing claim
                second = await registered.receive()
            assert second != first and second == zk.session_id
            assert (await zk.exists("/brokers-me")).ephemeralOwner == second
            # The watch loop came through the expiry and still reports.
            await zk.delete("/brokers-me")
            with trio.fail_after(15):
                while "brokers-me" in await children.receive():
                    pass
            nursery.cancel_scope.cancel()
    finally:
        await zk.close()


async def test_silence_counts_from_the_last_answer_whatever_kazoo_says(zookeeper):
    """Packets dropped on the way (not a closed connection): kazoo finds the connection
    lost only once a ping has gone unanswered through a whole select timeout, and each
    request it sends meanwhile starts that timeout again, so a broker that keeps asking
    ZooKeeper things (watches re-armed, ISR writes) can stay "connected" past the moment
    ZooKeeper may expire its session. `silent_for` counts from when the last answered
    request was sent, a lower bound on ZooKeeper's own count: a cut-off leader times its
    presumed deposition by it (cluster/replication/replica_manager.py). After the heal
    ZooKeeper answers again (the session, or the one replacing it), and the count starts
    again."""
    from netproxy import TcpProxy

    session_s = 4.0
    proxy = TcpProxy((zookeeper.host, zookeeper.port))
    await trio.to_thread.run_sync(proxy.start)  # its calls block: from a thread
    try:
        zk = ZooKeeperSession(proxy.address, session_timeout_ms=int(session_s * 1000))
        await zk.open()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(zk.keep_heard)
                await zk.exists("/")
                assert zk.silent_for() < session_s / 2
                await trio.to_thread.run_sync(lambda: proxy.cut(silent=True))
                cut = trio.current_time()
                while trio.current_time() - cut < session_s:
                    nursery.start_soon(zk.exists, "/")  # not answered while cut
                    await trio.sleep(0.3)
                # Nothing answered since the cut, whether or not kazoo has noticed.
                assert zk.silent_for() >= trio.current_time() - cut >= session_s
                await trio.to_thread.run_sync(proxy.heal)
                # The session, or its successor if ZooKeeper expired it meanwhile (its
                # expiry rounds up to a tick), answers again.
                with trio.fail_after(60):  # a budget, not a timing claim
                    while zk.session_id is None or zk.silent_for() >= session_s / 2:
                        await trio.sleep(0.1)
                nursery.cancel_scope.cancel()
        finally:
            await zk.close()
    finally:
        await trio.to_thread.run_sync(proxy.close)


async def test_a_busy_event_loop_is_not_silence(zookeeper):
    """The event loop held for most of a session (a LeaderAndIsr of thousands of
    partitions, a loaded machine): ZooKeeper went on answering `keep_heard`, whose reads
    go from a thread of their own, so `silent_for` says so at once afterwards. A count
    kept by the loop read the whole stall as silence, and a broker presumed itself
    deposed (and ended a live session) after each such stall."""
    import time

    session_s = 4.0
    zk = ZooKeeperSession(zookeeper.connect, session_timeout_ms=int(session_s * 1000))
    await zk.open()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(zk.keep_heard)
            connected_at = zk.last_heard
            with trio.fail_after(30):  # a budget, not a timing claim: keep_heard's first answer
                while zk.last_heard == connected_at:
                    await trio.sleep(0.05)
            time.sleep(session_s * 0.75)  # the loop does not run; threads do
            assert zk.silent_for() < session_s / 2
            assert zk.connected
            nursery.cancel_scope.cancel()
    finally:
        await zk.close()
