"""A network partition: the leader cut off from ZooKeeper and the other brokers, then healed.

Three broker processes and a real ZooKeeper. Broker 3 leads both topics, once as a plain
broker and once as the controller too. Every link between it and the rest goes through
TCP proxies of the test's own (netproxy.py), which the test cuts: its ZooKeeper session,
the others' connections to its inter-broker listener, and its connections to theirs (it
uses a listener name of its own for that, which the others advertise at the proxies).
Clients reach every broker directly on a CLIENT listener, so they still reach the
isolated leader, as clients on its side of a real partition would. What Kafka promises, checked here:

- cut: the isolated leader cannot shrink its ISR without ZooKeeper, so its acks=all
  produces fail (REQUEST_TIMED_OUT, or NOT_ENOUGH_REPLICAS); its session expires, the
  controller elects a new leader on the majority side, and producers carry on there;
- heal: the old leader finds its session expired, registers again, is made a follower
  by LeaderAndIsr and truncates to the new leader's log (OffsetForLeaderEpoch);
- nothing acknowledged with acks=all is lost or duplicated, every replica ends with the
  same bytes, and acks=1 records the isolated leader acknowledged are lost (Kafka's
  documented trade-off: counted and printed, not asserted).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from clustertest_helpers import FAST_SESSION, all_see, eventually, view
from failover_helpers import (
    CountingProducer,
    assert_every_ack_read_once,
    create_topic,
    high_watermarks,
    leader_of,
    log_bytes,
    read_all,
    wait_for_leaders,
)
from netproxy import TcpProxy
from wire import is_closed, request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import KafkaCluster, free_port

ISOLATED = 3


class RawProducer:
    """Produce requests on one socket to one broker: no client-side retries or leader
    discovery, so an acknowledgement is this broker's own."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.cid = 0

    def produce(
        self, topic: str, value: bytes, *, acks: int, timeout_ms: int = 5000
    ) -> tuple[int, int]:
        """(error code, base offset) of one record to partition 0."""
        self.cid += 1
        batch = build_batch([(None, value, (), int(time.time() * 1000))])
        data = [
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=0, records=batch)]
            )
        ]
        request = request_of(0, acks=acks, timeout_ms=timeout_ms, topic_data=data)
        response = roundtrip(self.sock, request, 9, correlation_id=self.cid)
        part = response.responses[0].partition_responses[0]
        return part.error_code, part.base_offset

    def close(self) -> None:
        self.sock.close()


def test_proxy_forwards_cuts_and_heals():
    with socket.create_server(("127.0.0.1", 0)) as server:
        with TcpProxy(server.getsockname()) as proxy:
            client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            upstream, _ = server.accept()
            client.sendall(b"ping")
            assert upstream.recv(4) == b"ping"
            upstream.sendall(b"pong")
            assert client.recv(4) == b"pong"

            proxy.cut()
            assert client.recv(4) == b""  # the forwarded connection is closed
            upstream.close()
            silent = socket.create_connection(("127.0.0.1", proxy.port), timeout=0.5)
            silent.sendall(b"anyone?")
            with pytest.raises(TimeoutError):
                silent.recv(1)  # accepted, and nothing ever comes back
            server.settimeout(0.5)
            with pytest.raises(TimeoutError):
                server.accept()  # nothing reached the target

            proxy.heal()
            # Closed at the heal (reset: what it sent was never read), so its peer
            # reconnects.
            assert is_closed(silent, 5)
            server.settimeout(5)
            again = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            upstream, _ = server.accept()
            again.sendall(b"back")
            assert upstream.recv(4) == b"back"
            for s in (client, silent, again, upstream):
                s.close()


def test_proxy_silent_cut_stalls_and_heal_delivers():
    with socket.create_server(("127.0.0.1", 0)) as server:
        with TcpProxy(server.getsockname()) as proxy:
            client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            upstream, _ = server.accept()
            proxy.cut(silent=True)
            client.sendall(b"ping")
            upstream.settimeout(0.5)
            with pytest.raises(TimeoutError):
                upstream.recv(4)  # stalled, not closed
            late = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            late.sendall(b"late")
            server.settimeout(0.5)
            with pytest.raises(TimeoutError):
                server.accept()  # not connected onward during the cut

            proxy.heal()
            upstream.settimeout(5)
            assert upstream.recv(4) == b"ping"  # what was sent during the cut arrives
            server.settimeout(5)
            late_upstream, _ = server.accept()
            late_upstream.settimeout(5)
            assert late_upstream.recv(4) == b"late"
            upstream.sendall(b"pong")
            assert client.recv(4) == b"pong"
            for s in (client, upstream, late, late_upstream):
                s.close()


def test_the_controller_reaches_brokers_on_the_inter_broker_listener(zookeeper, tmp_path):
    """Broker 2 lists its CLIENT listener first, and that address goes nowhere (a cut
    proxy): the controller must send its LeaderAndIsr to INTERNAL, the inter-broker
    listener, for broker 2 to lead what it was assigned."""
    common = {
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    }
    internal = {n: free_port() for n in (1, 2)}
    client = {n: free_port() for n in (1, 2)}
    with (
        TcpProxy(("127.0.0.1", client[2])) as nowhere,
        KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=common) as cluster,
    ):
        nowhere.cut()
        for n in (1, 2):
            listeners = f"CLIENT://127.0.0.1:{client[n]},INTERNAL://127.0.0.1:{internal[n]}"
            overrides = {"listeners": listeners}
            if n == 2:
                overrides["advertised.listeners"] = (
                    f"CLIENT://127.0.0.1:{nowhere.port},INTERNAL://127.0.0.1:{internal[n]}"
                )
            cluster.add_broker(n, overrides)
        on_internal = f"127.0.0.1:{internal[1]}"
        eventually(
            lambda: [n for n, _, _ in view(on_internal)[2]] == [1, 2],
            budget_s=15,
            what="broker 1 sees broker 2",
        )
        create_topic(on_internal, "via-internal", replica_assignment=[[2]], replication_factor=1)
        wait_for_leaders(on_internal, "via-internal", 1)
        producer = RawProducer(internal[2])
        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        deadline = time.monotonic() + 20
        while code != 0 and time.monotonic() < deadline:
            code, _ = producer.produce("via-internal", b"x", acks=-1)
            time.sleep(0.05)
        producer.close()
        assert code == 0, ErrorCode(code)
        assert nowhere.forwarded == 0


class IsolatedBroker:
    """Broker ISOLATED's every link to the others through a proxy: its ZooKeeper session,
    the others' connections to it (its INTERNAL listener, advertised at a proxy) and its
    connections to them (it reaches brokers on a listener of its own, TO_ISOLATED, which
    the others advertise at proxies). Clients reach all three directly on CLIENT."""

    def __init__(self, zookeeper: Any) -> None:
        self.ports = {
            n: {name: free_port() for name in ("INTERNAL", "TO_ISOLATED", "CLIENT")}
            for n in (1, 2, 3)
        }
        self.zk = TcpProxy(("127.0.0.1", zookeeper.port))
        self.to_me = TcpProxy(("127.0.0.1", self.ports[ISOLATED]["INTERNAL"]))
        self.from_me = {n: TcpProxy(("127.0.0.1", self.ports[n]["TO_ISOLATED"])) for n in (1, 2)}
        self.proxies = [self.zk, self.to_me, *self.from_me.values()]
        for proxy in self.proxies:
            proxy.start()

    def overrides(self, n: int) -> dict[str, str]:
        ports = self.ports[n]
        # CLIENT last: BrokerProcess.bootstrap names the last listener's port.
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
        if n == ISOLATED:
            return {
                "listeners": listeners,
                "advertised.listeners": (
                    f"INTERNAL://127.0.0.1:{self.to_me.port},"
                    f"TO_ISOLATED://127.0.0.1:{ports['TO_ISOLATED']},"
                    f"CLIENT://127.0.0.1:{ports['CLIENT']}"
                ),
                "inter.broker.listener.name": "TO_ISOLATED",
                "zookeeper.connect": self.zk.address + "/kafka",
            }
        return {
            "listeners": listeners,
            "advertised.listeners": (
                f"INTERNAL://127.0.0.1:{ports['INTERNAL']},"
                f"TO_ISOLATED://127.0.0.1:{self.from_me[n].port},"
                f"CLIENT://127.0.0.1:{ports['CLIENT']}"
            ),
            "inter.broker.listener.name": "INTERNAL",
        }

    def cut(self, *, silent: bool = False) -> None:
        for proxy in self.proxies:
            proxy.cut(silent=silent)

    def heal(self) -> None:
        for proxy in self.proxies:
            proxy.heal()

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()


def _assert_acks_all_refused(isolated: RawProducer, value: bytes, *, timeout_ms: int) -> None:
    """The cut-off leader cannot reach its followers, and without ZooKeeper its ISR cannot
    shrink: an acks=all produce times out or finds too few replicas; or, once ZooKeeper
    has been gone for half a session and the followers have stopped fetching, the broker
    presumes itself deposed and answers NOT_LEADER_OR_FOLLOWER. Never acknowledged."""
    code, _ = isolated.produce("split", value, acks=-1, timeout_ms=timeout_ms)
    assert code in (
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ), ErrorCode(code)


def _assert_clients_told_client_ports(brokers: dict) -> None:
    """Metadata on the CLIENT listener names every broker's CLIENT address (the others
    lead through the proxies, where a client must never be sent)."""
    want = sorted((n, "127.0.0.1", b.port) for n, b in brokers.items())
    for b in brokers.values():
        assert view(b.bootstrap)[2] == want, b.bootstrap


def _keep_logs(cluster: KafkaCluster, tmp_path: Any) -> None:
    """Each broker's log lines beside its log dir, for a look after a failure."""
    for n, broker in cluster.brokers.items():
        (tmp_path / f"broker-{n}.stderr").write_text("".join(broker.lines))


def _cluster_overrides(session_ms: int, lag_ms: int) -> dict[str, str]:
    return {
        **FAST_SESSION,
        "zookeeper.session.timeout.ms": str(session_ms),
        "listener.security.protocol.map": (
            "INTERNAL:PLAINTEXT,TO_ISOLATED:PLAINTEXT,CLIENT:PLAINTEXT"
        ),
        "replica.lag.time.max.ms": str(lag_ms),
        "replica.fetch.backoff.ms": "200",
        # Broker 3 is the preferred leader: it must not take leadership back by itself
        # while the test reads.
        "auto.leader.rebalance.enable": "false",
    }


def _start(cluster: KafkaCluster, net: IsolatedBroker, zk_view: Any, controller: int) -> None:
    # The first broker to start becomes the controller.
    for n in sorted((1, 2, 3), key=lambda n: n != controller):
        cluster.add_broker(n, net.overrides(n))
    assert zk_view.controller() == controller
    all_see(cluster.brokers)


@pytest.mark.parametrize(
    ("controller", "silent"),
    [(1, False), (ISOLATED, True)],
    ids=["leader-connections-closed", "leader-and-controller-packets-dropped"],
)
def test_isolated_leader_loses_leadership_and_truncates_after_the_heal(
    zookeeper, tmp_path, zk_view, controller, silent
):
    # The isolated leader tries to shrink its ISR during the cut (and cannot).
    common = _cluster_overrides(session_ms=3000, lag_ms=3000)
    net = IsolatedBroker(zookeeper)
    cluster = KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=common, processes=True)
    try:
        _start(cluster, net, zk_view, controller)
        brokers = cluster.brokers
        bootstrap = cluster.bootstrap
        majority = brokers[1].bootstrap
        create_topic(
            bootstrap,
            "split",
            replica_assignment=[[ISOLATED, 1, 2]],
            config={"min.insync.replicas": "2"},
        )
        create_topic(bootstrap, "split-acks1", replica_assignment=[[ISOLATED, 1, 2]])
        for topic in ("split", "split-acks1"):
            wait_for_leaders(bootstrap, topic, 1, isr_size=3)
            assert leader_of(majority, topic) == ISOLATED
        _assert_clients_told_client_ports(brokers)
        isolated = RawProducer(brokers[ISOLATED].port)
        acks1: list[tuple[int, bytes]] = []  # (offset, value) the isolated leader acked

        # The produce timeout librdkafka sends: how long a produce parked on the isolated
        # leader waits before the client retries.
        extra = {"request.timeout.ms": 4000, "topic.metadata.refresh.interval.ms": 500}
        with CountingProducer(bootstrap, "split", extra=extra) as producer:
            eventually(lambda: len(producer.acked) > 300, budget_s=30, what="first acks")
            for i in range(20):
                code, offset = isolated.produce("split-acks1", b"before-%d" % i, acks=1)
                assert code == 0
                acks1.append((offset, b"before-%d" % i))
            old_registration = zk_view.owner(f"/brokers/ids/{ISOLATED}")

            cut_at = time.monotonic()
            net.cut(silent=silent)

            # The isolated side: acks=1 is still acknowledged (by the leader alone) ...
            for i in range(50):
                code, offset = isolated.produce("split-acks1", b"cut-%d" % i, acks=1)
                assert code == 0, ErrorCode(code)
                acks1.append((offset, b"cut-%d" % i))
            # ... acks=all is not: the followers are out of reach and the ISR cannot
            # shrink without ZooKeeper.
            _assert_acks_all_refused(isolated, b"isolated-all", timeout_ms=3000)

            # The majority side: the session expires, a new leader is elected.
            eventually(
                lambda: zk_view.owner(f"/brokers/ids/{ISOLATED}") is None,
                budget_s=20,
                what="the isolated broker's session expired",
            )
            for topic in ("split", "split-acks1"):
                eventually(
                    lambda t=topic: leader_of(majority, t) not in (ISOLATED, -1),
                    budget_s=20,
                    what=f"a new leader of {topic}",
                )
            moved_at = time.monotonic()
            # A producer that starts on the majority side learns the new leader there
            # and is acknowledged. (The first producer may stay with the isolated leader,
            # whose metadata still names itself, as a ZooKeeper-era Kafka broker's does
            # until it hears of its expired session: librdkafka asks its least idle
            # broker. It carries on after the heal at the latest.)
            with CountingProducer(
                f"{brokers[1].bootstrap},{brokers[2].bootstrap}", "split", extra=extra, prefix=b"m"
            ) as majority_producer:
                majority_producer.wait_for_acks_after(
                    moved_at, budget_s=30, what="acks on the majority"
                )
                # Records at the offsets the isolated leader acknowledged alone.
                new_leader = RawProducer(brokers[leader_of(majority, "split-acks1")].port)
                for i in range(10):
                    code, _ = new_leader.produce("split-acks1", b"majority-%d" % i, acks=1)
                    assert code == 0, ErrorCode(code)
                new_leader.close()
                # Still cut off, the old leader still refuses acks=all.
                _assert_acks_all_refused(isolated, b"isolated-all-2", timeout_ms=2000)
                isolated.close()
                stalled = producer.acks_after(cut_at + 5)

                healed_at = time.monotonic()
                net.heal()
                # A new session, a new registration; the ISRs grow back to all three.
                eventually(
                    lambda: (
                        zk_view.owner(f"/brokers/ids/{ISOLATED}") not in (None, old_registration)
                    ),
                    budget_s=20,
                    what="the isolated broker registered again",
                )
                for topic in ("split", "split-acks1"):
                    wait_for_leaders(majority, topic, 1, isr_size=3, budget_s=30)
                back_at = time.monotonic()
                # The first producer, told NOT_LEADER_OR_FOLLOWER by the old leader now
                # a follower, moves to the new leader.
                for p in (producer, majority_producer):
                    eventually(lambda p=p: p.acks_after(back_at) > 100, budget_s=30, what="acks")
            assert not majority_producer.errors, majority_producer.errors[:5]
        assert not producer.errors, producer.errors[:5]

        lines = "".join(brokers[ISOLATED].lines)
        assert "truncating from" in lines, lines[-3000:]

        # Every acks=all acknowledgement, exactly once, at its offset.
        hw = high_watermarks(majority, "split", [0])
        read = read_all(majority, "split", hw)
        assert_every_ack_read_once(producer.acked + majority_producer.acked, read)
        assert not {b"isolated-all", b"isolated-all-2"} & {v for _, v in read[0]}

        # Every replica holds the same batches, byte for byte.
        for topic in ("split", "split-acks1"):

            def same(topic: str = topic) -> bool:
                copies = {log_bytes(b.log_dir, topic, 0) for b in brokers.values()}
                return len(copies) == 1

            eventually(same, budget_s=30, what=f"identical replicas of {topic}")
            assert log_bytes(brokers[1].log_dir, topic, 0)

        _assert_clients_told_client_ports(brokers)

        # acks=1 on the isolated side: the trade-off Kafka documents.
        hw1 = high_watermarks(majority, "split-acks1", [0])
        at = dict(read_all(majority, "split-acks1", hw1)[0])
        lost = [(o, v) for o, v in acks1 if at.get(o) != v]
        lost_in_cut = [v for _, v in lost if v.startswith(b"cut-")]
        print(
            f"network partition: {len(producer.acked) + len(majority_producer.acked)} acks=all "
            f"records, none lost (the first producer's acks from 5 s after the cut to the heal: {stalled}); "
            f"acks=1 acknowledged by the isolated leader: {len(acks1)}, lost {len(lost)} "
            f"({len(lost_in_cut)} of them during the cut); new leader "
            f"{moved_at - cut_at:.1f} s after the cut, ISR whole "
            f"{back_at - healed_at:.1f} s after the heal"
        )
    finally:
        _keep_logs(cluster, tmp_path)
        net.heal()  # a failed test's brokers stop quickly (controlled shutdown included)
        cluster.stop()
        net.close()


def test_a_cut_shorter_than_the_session_shrinks_the_isr_and_it_grows_back(
    zookeeper, tmp_path, zk_view
):
    """The leader cut off for less than its session timeout keeps its session and its
    leadership: acks=all fails meanwhile (min.insync.replicas=2, followers out of reach),
    the ISR change it decided is written once ZooKeeper answers again, the followers
    catch up and rejoin the ISR, and the producer carries on with nothing lost."""
    common = {
        **_cluster_overrides(session_ms=20000, lag_ms=2000),
        # Heartbeats answered within 20 s give the leader its ISR lease through the blip
        # (cluster/replication/heartbeats.py): it decides the shrink, whose write waits for
        # ZooKeeper. With Kafka's 2 s it may lose the lease first and keep the ISR.
        "broker.heartbeat.interval.ms": "10000",
        "broker.session.timeout.ms": "60000",
    }
    net = IsolatedBroker(zookeeper)
    cluster = KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=common, processes=True)
    try:
        _start(cluster, net, zk_view, controller=1)
        brokers = cluster.brokers
        majority = brokers[1].bootstrap
        create_topic(
            cluster.bootstrap,
            "brief",
            replica_assignment=[[ISOLATED, 1, 2]],
            config={"min.insync.replicas": "2"},
        )
        wait_for_leaders(cluster.bootstrap, "brief", 1, isr_size=3)
        state = "/brokers/topics/brief/partitions/0/state"
        registration = zk_view.owner(f"/brokers/ids/{ISOLATED}")
        epoch = zk_view.json(state)["leader_epoch"]
        extra = {"request.timeout.ms": 4000}
        leader = RawProducer(brokers[ISOLATED].port)
        with CountingProducer(cluster.bootstrap, "brief", extra=extra) as producer:
            eventually(lambda: len(producer.acked) > 300, budget_s=30, what="first acks")
            seen = len(brokers[ISOLATED].lines)
            version = zk_view.get(state)[1].version
            net.cut(silent=True)  # a blip: packets dropped, nothing closed
            # Longer than replica.lag.time.max.ms: the leader decides an ISR shrink, whose
            # write waits for ZooKeeper.
            code, _ = leader.produce("brief", b"cut-off", acks=-1, timeout_ms=3000)
            assert code in (
                ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            ), ErrorCode(code)
            net.heal()
            back = time.monotonic()

            def isr_back() -> bool:
                data, stat = zk_view.get(state)
                return stat.version > version and sorted(json.loads(data)["isr"]) == [1, 2, 3]

            eventually(isr_back, budget_s=30, what="the ISR written, then whole again")
            eventually(lambda: producer.acks_after(back) > 300, budget_s=30, what="more acks")
        leader.close()
        assert not producer.errors, producer.errors[:5]
        # The same session and leader epoch throughout.
        assert zk_view.owner(f"/brokers/ids/{ISOLATED}") == registration
        assert zk_view.json(state)["leader"] == ISOLATED
        assert zk_view.json(state)["leader_epoch"] == epoch
        since_cut = "".join(brokers[ISOLATED].lines[seen:])
        print(
            "brief cut: the ISR went down to the leader alone:",
            "ISR of brief-0 is now [3] " in since_cut,
        )
        hw = high_watermarks(majority, "brief", [0])
        assert_every_ack_read_once(producer.acked, read_all(majority, "brief", hw))
        eventually(
            lambda: len({log_bytes(b.log_dir, "brief", 0) for b in brokers.values()}) == 1,
            budget_s=30,
            what="identical replicas",
        )
    finally:
        _keep_logs(cluster, tmp_path)
        net.heal()  # a failed test's brokers stop quickly (controlled shutdown included)
        cluster.stop()
        net.close()


def _metadata_leader(port: int, topic: str) -> tuple[int, int]:
    """(leader, leader epoch) of `topic`-0 in the Metadata one broker answers."""
    from trio_broker.protocol._generated.metadata_request import MetadataRequestTopic

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        request = request_of(3, topics=[MetadataRequestTopic(name=topic)])
        (found,) = roundtrip(sock, request, 9).topics
        (part,) = found.partitions
        return part.leader_id, part.leader_epoch


@pytest.mark.parametrize("controller", [1, ISOLATED], ids=["leader", "leader-and-controller"])
def test_a_leader_cut_from_the_brokers_only_is_fenced_and_comes_back(
    zookeeper, tmp_path, zk_view, controller
):
    """Broker 3 leads `fenced-0` and is cut from the other brokers (the controller
    included) by dropped packets, but not from ZooKeeper nor from clients: its session
    lives on, so nothing but its missing heartbeats can tell. The controller fences it:
    another member of the ISR leads, and the ISR is the other two, not shrunk to the cut
    leader alone (which, before, refused acks=all for the whole cut). The cut-off leader
    learns it from the partition's state znode: it answers produces
    NOT_LEADER_OR_FOLLOWER and its Metadata names the new leader. After the heal it is
    unfenced in the same registration (same session) and back in the ISR.

    When the cut-off leader is the controller too, it hears no majority's heartbeats: it
    resigns (deletes /controller), a broker of the majority takes over and fences it."""
    common = {
        **_cluster_overrides(session_ms=6000, lag_ms=3000),
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "3000",
    }
    net = IsolatedBroker(zookeeper)
    cluster = KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=common, processes=True)
    try:
        _start(cluster, net, zk_view, controller)
        brokers = cluster.brokers
        create_topic(
            cluster.bootstrap,
            "fenced",
            replica_assignment=[[ISOLATED, 1, 2]],
            config={"min.insync.replicas": "2"},
        )
        wait_for_leaders(cluster.bootstrap, "fenced", 1, isr_size=3)
        state = "/brokers/topics/fenced/partitions/0/state"
        registration = zk_view.owner(f"/brokers/ids/{ISOLATED}")
        epoch = zk_view.json(state)["leader_epoch"]
        isolated = RawProducer(brokers[ISOLATED].port)
        code, _ = isolated.produce("fenced", b"before", acks=-1)
        assert code == ErrorCode.NONE, ErrorCode(code)

        # Cut from the brokers only: ZooKeeper's proxy stays open.
        net.to_me.cut(silent=True)
        for proxy in net.from_me.values():
            proxy.cut(silent=True)

        def moved() -> dict | None:
            now = zk_view.json(state)
            return now if now["leader"] not in (ISOLATED, -1) else None

        now = eventually(moved, budget_s=30, what="another leader of fenced-0")
        assert now["leader_epoch"] > epoch
        assert sorted(now["isr"]) == [1, 2], now
        new_leader = now["leader"]

        def told() -> int | None:
            code, _ = isolated.produce("fenced", b"cut-off", acks=-1, timeout_ms=1000)
            return code if code == ErrorCode.NOT_LEADER_OR_FOLLOWER else None

        eventually(told, budget_s=30, what="NOT_LEADER_OR_FOLLOWER from the cut-off leader")
        told_leader = (new_leader, now["leader_epoch"])
        eventually(
            lambda: _metadata_leader(brokers[ISOLATED].port, "fenced") == told_leader,
            budget_s=30,
            what="the cut-off leader's Metadata naming the new leader",
        )
        code, _ = RawProducer(brokers[new_leader].port).produce("fenced", b"majority", acks=-1)
        assert code == ErrorCode.NONE, ErrorCode(code)

        net.heal()
        eventually(
            lambda: sorted(zk_view.json(state)["isr"]) == [1, 2, 3],
            budget_s=30,
            what="broker 3 back in the ISR",
        )
        assert zk_view.owner(f"/brokers/ids/{ISOLATED}") == registration
        assert zk_view.json(state)["leader"] == new_leader
        assert zk_view.controller() != ISOLATED
        isolated.close()
    finally:
        _keep_logs(cluster, tmp_path)
        net.heal()
        cluster.stop()
        net.close()
