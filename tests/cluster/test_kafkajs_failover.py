"""KafkaJS (npm `kafkajs`, tests/kafkajs) through a leader's kill -9 in a three-broker
cluster: its own retry and metadata code against the cluster's failover."""

from __future__ import annotations

import json
import subprocess
import threading

from clustertest_helpers import FAST_SESSION, eventually
from failover_helpers import (
    assert_every_ack_read_once,
    create_topic,
    high_watermarks,
    leader_of,
    read_all,
    wait_for_leaders,
)

from trio_broker.testing import KafkaCluster


def test_kafkajs_producer_rides_out_a_killed_leader(kafkajs, zookeeper, tmp_path):
    """kill -9 of the partition's leader while KafkaJS's idempotent producer streams with
    acks=all (replication factor 3, min.insync.replicas=2): it goes on with the new
    leader, and every record it was told was written is read back once, at its offset."""
    node, scripts = kafkajs
    overrides = {**FAST_SESSION, "zookeeper.session.timeout.ms": "3000"}
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "js-kills", 1, 3, config={"min.insync.replicas": "2"})
        wait_for_leaders(bootstrap, "js-kills", 1, isr_size=3)
        proc = subprocess.Popen(
            [node, str(scripts / "failover.js"), bootstrap, "js-kills"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        acks = [0]  # the latest `acked N` the script printed
        errors: list[str] = []

        def follow() -> None:
            for line in proc.stderr:
                if line.startswith("acked "):
                    acks[0] = int(line.split()[1])
                else:
                    errors.append(line)

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        try:
            eventually(lambda: acks[0] >= 30, budget_s=30, what="first acks")
            leader = leader_of(bootstrap, "js-kills")
            cluster.brokers[leader].kill()
            at_kill = acks[0]
            survivor = next(b for n, b in cluster.brokers.items() if n != leader)
            eventually(
                lambda: leader_of(survivor.bootstrap, "js-kills") not in (leader, -1),
                budget_s=30,
                what="a new leader",
            )
            # The producer goes on with the new leader (its retries span the election).
            eventually(lambda: acks[0] >= at_kill + 100, budget_s=60, what="acks after the kill")
        finally:
            proc.stdin.close()
            out = proc.stdout.read()
            proc.wait(timeout=120)
            reader.join(10)
        assert proc.returncode == 0, "".join(errors)[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        acked = [(p, o, v.encode()) for v, p, o in result["acked"]]
        assert not result["failed"], result.get("lastError")
        assert len(acked) == acks[0]
        hw = high_watermarks(survivor.bootstrap, "js-kills", [0])
        assert_every_ack_read_once(acked, read_all(survivor.bootstrap, "js-kills", hw))
