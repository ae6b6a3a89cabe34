"""Hostile requests that decode, sent to one broker of a cluster: besides the client APIs,
the controller's own (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown) and
the admin requests that become ZooKeeper paths. None may fail a handler or stop a broker.

Like Kafka without an authorizer, the cluster obeys controller requests whose epochs are
new enough, so its state afterwards is whatever they asked for; this test checks that each
request got its answer and that every broker still serves. A fixed seed reproduces a run.
"""

from __future__ import annotations

import logging
import socket

from confluent_kafka.admin import AdminClient, NewTopic
from fuzz_requests import realistic_seeds, run_fuzz, seeds
from wire import encode_request, read_response

from trio_broker.protocol._generated.api_versions_request import ApiVersionsRequest
from trio_broker.testing import KafkaCluster

# Where a cluster differs from a lone broker (tests/server/test_fuzz_requests.py sends
# every API): the controller's RPCs, AlterPartition, admin requests that become ZooKeeper
# paths and writes, leader epochs, coordinators and producer id blocks.
CLUSTER_APIS = {1, 3, 4, 5, 6, 7, 10, 19, 20, 22, 23, 33, 37, 43, 44, 45, 46, 56}
OVERRIDES = {
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
}


def test_hostile_requests_to_a_cluster_never_fail_a_handler(zookeeper, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="trio_broker")
    with KafkaCluster(zookeeper, base_dir=tmp_path, overrides=OVERRIDES) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("fuzz", 3, 3)])["fuzz"].result(30)
        target = cluster.brokers[1]

        outcome = run_fuzz(
            target.host, target.port, seeds(realistic_seeds("fuzz"), CLUSTER_APIS), 1000, seed=1
        )

        failures = [r.getMessage() for r in caplog.records if "failed on api" in r.getMessage()]
        unencodable = [r.getMessage() for r in caplog.records if "cannot encode" in r.getMessage()]
        assert failures == [] and unencodable == []
        assert outcome["answered"] > 700, outcome
        for broker in cluster.brokers.values():
            with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
                sock.sendall(encode_request(ApiVersionsRequest(), 3))
                _, answer = read_response(sock, 18, 3)
                assert answer.error_code == 0 and answer.api_keys
