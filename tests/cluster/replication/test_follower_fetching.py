"""Consumers reading from the closest replica (Kafka's KIP-392), on three brokers in racks
r1, r2 and r3 with `replica.selector.class` set to Kafka's RackAwareReplicaSelector.

The leader answers a consumer that names another rack (Fetch v11+ `rack_id`, librdkafka's
`client.rack`) with that rack's in-sync replica as `preferred_read_replica` and no
records; the follower then serves the consumer, up to its own high watermark. Checked
with raw requests, and with confluent-kafka reading every record while the followers'
bytes-out metrics show who served it.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
import urllib.request

from clustertest_helpers import eventually, metadata
from confluent_kafka import Consumer, Producer, TopicPartition
from failover_helpers import create_topic, wait_for_leaders
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchTopic
from trio_broker.testing import KafkaCluster, free_port

TOPIC = "near"
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
N = 500


def fetch(port: int, version: int, rack: str = "", offset: int = 0, topic_id=None, full=False):
    """One consumer Fetch of TOPIC-0 from `offset` (by `topic_id` from v13); returns its
    PartitionData, or with `full` the whole response."""
    request = request_of(
        1,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        topics=[
            FetchTopic(
                topic=TOPIC,
                topic_id=topic_id,
                partitions=[
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
        rack_id=rack,
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        response = roundtrip(sock, request, version)
    if full:
        return response
    [topic] = response.responses
    [data] = topic.partitions
    return data


def bytes_out(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    found = re.search(
        rf'kafka_server_brokertopicmetrics_bytesout_total{{topic="{TOPIC}"}} (\S+)', text.decode()
    )
    return float(found.group(1)) if found else 0.0


@contextlib.contextmanager
def racked_cluster(zookeeper, tmp_path, overrides=None):
    """Brokers 1-3 in racks r1-r3 with the rack-aware selector and a metrics endpoint
    each, and TOPIC led by broker 1 with all three in its ISR: (cluster, metrics ports)."""
    metrics = {n: free_port() for n in (1, 2, 3)}
    common = {
        "replica.selector.class": RACK_AWARE,
        "offsets.topic.replication.factor": "1",
        **(overrides or {}),
    }
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=common) as cluster:
        for n in (1, 2, 3):
            cluster.add_broker(
                n,
                {"broker.rack": f"r{n}", "metrics.listener": f"http://127.0.0.1:{metrics[n]}"},
            )
        cluster.wait_all_see()
        boot = cluster.brokers[1].bootstrap
        create_topic(boot, TOPIC, replica_assignment=[[1, 2, 3]])
        wait_for_leaders(boot, TOPIC, 1, isr_size=3)
        yield cluster, metrics


def test_consumers_read_from_a_replica_in_their_rack(zookeeper, tmp_path):
    with racked_cluster(zookeeper, tmp_path) as (cluster, metrics):
        boot = cluster.brokers[1].bootstrap
        producer = Producer({"bootstrap.servers": boot, "acks": "all"})
        for i in range(N):
            producer.produce(TOPIC, b"v-%d" % i, partition=0)
        assert producer.flush(30) == 0
        port = {n: b.port for n, b in cluster.brokers.items()}
        # Every follower has every record (and knows the high watermark).
        for n in (2, 3):
            eventually(
                lambda n=n: fetch(port[n], 11).high_watermark == N,
                budget_s=20,
                what=f"broker {n}'s high watermark",
            )

        # The leader names the consumer's rack's replica, and sends no records...
        near = fetch(port[1], 11, rack="r2")
        assert (near.error_code, near.preferred_read_replica, near.high_watermark) == (0, 2, N)
        assert not near.records
        # ...unless the consumer is in its own rack, names none, or is in no broker's rack.
        for rack in ("r1", "", "r9"):
            data = fetch(port[1], 11, rack=rack)
            assert (data.preferred_read_replica, data.error_code) == (-1, 0) and data.records
        # A follower serves consumer fetches from v11 on; before v11 only leaders do.
        assert fetch(port[3], 11).records
        assert fetch(port[3], 10).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert fetch(port[3], 11, offset=N + 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        # A broker without a replica still refuses, and names the leader (v16, KIP-951).
        create_topic(boot, "far", replica_assignment=[[1]])
        wait_for_leaders(boot, "far", 1)
        far_id = next(t.topic_id for t in metadata(boot).topics if t.name == "far")
        eventually(
            lambda: any(t.name == "far" for t in metadata(cluster.brokers[3].bootstrap).topics),
            budget_s=10,
            what="broker 3 knows topic far",
        )
        answer = fetch(port[3], 16, topic_id=far_id, full=True)
        data = answer.responses[0].partitions[0]
        assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (data.current_leader.leader_id, data.current_leader.leader_epoch) == (1, 0)
        assert [(e.node_id, e.port) for e in answer.node_endpoints] == [(1, port[1])]

        # confluent-kafka in rack r2: every record, read from broker 2.
        before = {n: bytes_out(metrics[n]) for n in (2, 3)}
        consumer = Consumer(
            {
                "bootstrap.servers": boot,
                "group.id": "near-readers",
                "client.rack": "r2",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            values = []
            deadline = time.monotonic() + 30
            while len(values) < N and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    values.append(msg.value())
        finally:
            consumer.close()
        assert values == [b"v-%d" % i for i in range(N)]
        served = {n: bytes_out(metrics[n]) - before[n] for n in (2, 3)}
        assert served[2] > N * 3 and served[3] == 0, served


def test_a_read_committed_consumer_reading_a_follower_sees_only_committed_records(
    zookeeper, tmp_path
):
    """Transactions read from a follower (KIP-392): the follower's last stable offset and
    aborted-transaction index follow the leader's, so a read_committed consumer in the
    follower's rack reads the committed records only, in order, from that follower."""
    transactions = {
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
    }
    with racked_cluster(zookeeper, tmp_path, transactions) as (cluster, metrics):
        boot = cluster.brokers[1].bootstrap
        producer = Producer({"bootstrap.servers": boot, "transactional.id": "near-txn"})
        producer.init_transactions(30)
        committed = []
        for round_ in range(6):
            producer.begin_transaction()
            values = [b"t%d-%d" % (round_, i) for i in range(50)]
            for value in values:
                producer.produce(TOPIC, value, partition=0)
            if round_ % 2:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
                committed += values
        producer.flush(10)

        before = bytes_out(metrics[3])
        consumer = Consumer(
            {
                "bootstrap.servers": boot,
                "group.id": "near-committed",
                "client.rack": "r3",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            values = []
            deadline = time.monotonic() + 30
            quiet_since = None
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    values.append(msg.value())
                    quiet_since = None
                elif len(values) >= len(committed):
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 2:
                        break
        finally:
            consumer.close()
        assert values == committed
        assert bytes_out(metrics[3]) - before > 0  # read from broker 3, the r3 replica
