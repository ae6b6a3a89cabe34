"""The admin commands for running a cluster, each run as a subprocess against three
brokers and a real ZooKeeper: `reassign` (kafka-reassign-partitions' JSON files),
`leader-election`, `log-dirs describe` and `topics describe`'s filters for partitions that
need an operator's look. Checked by what the cluster then reports and holds: replicas,
leaders, the records, the bytes on disk."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import cli_json as as_json
from cli_run import run_cli as cli
from clustertest_helpers import eventually
from confluent_kafka import Consumer, Producer
from failover_helpers import (
    create_topic,
    high_watermarks,
    log_bytes,
    partitions,
    read_all,
    wait_for_leaders,
)

from trio_broker.testing import KafkaCluster


def replica_bytes(broker, topic: str, partition: int) -> bytes:
    """The replica's segments, from whichever of the broker's log dirs holds it."""
    return b"".join(log_bytes(Path(d), topic, partition) for d in broker.config.log_dirs)


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        producer.produce(topic, b"r-%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def test_reassign_elect_and_inspect_a_cluster_from_the_command_line(zookeeper, tmp_path):
    overrides = {"auto.leader.rebalance.enable": "false", "offsets.topic.replication.factor": "1"}
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=overrides) as cluster:
        # Two log dirs a broker: a reassignment may also name the dir of a new replica.
        for n in (1, 2, 3):
            dirs = [tmp_path / f"broker-{n}" / d for d in ("a", "b")]
            cluster.add_broker(n, {"log.dirs": ",".join(map(str, dirs))})
        cluster.wait_all_see()
        boot = cluster.brokers[1].bootstrap
        create_topic(boot, "moves", replica_assignment=[[1, 2], [2, 1]])
        wait_for_leaders(boot, "moves", 2, isr_size=2)
        produce(boot, "moves", 300, 2)

        # reassign generate: a plan of the same replication factor over brokers 2 and 3.
        plan = as_json(boot, "reassign", "generate", "--topics", "moves", "--brokers", "2,3")
        current = {
            (e["topic"], e["partition"]): e["replicas"] for e in plan["current"]["partitions"]
        }
        assert current == {("moves", 0): [1, 2], ("moves", 1): [2, 1]}
        proposed = plan["proposed"]["partitions"]
        assert [(e["topic"], e["partition"]) for e in proposed] == [("moves", 0), ("moves", 1)]
        assert all(sorted(e["replicas"]) == [2, 3] for e in proposed)
        assert {e["replicas"][0] for e in proposed} == {2, 3}  # leaders spread

        # execute, then verify until done (exit 1 while in progress).
        dir_b = str(tmp_path / "broker-3" / "b")
        target = {
            "version": 1,
            "partitions": [
                {
                    "topic": "moves",
                    "partition": 0,
                    "replicas": [3, 2],
                    "log_dirs": [dir_b, "any"],
                },
                {"topic": "moves", "partition": 1, "replicas": [2, 3]},
            ],
        }
        path = tmp_path / "reassign.json"
        path.write_text(json.dumps(target))
        out = cli(boot, "reassign", "execute", str(path))
        assert "Successfully started partition reassignments for moves-0,moves-1" in out.stdout
        rollback = json.loads(
            out.stdout.split("Current partition replica assignment")[1].split("Save this")[0]
        )
        assert {(e["partition"], tuple(e["replicas"])) for e in rollback["partitions"]} == {
            (0, (1, 2)),
            (1, (2, 1)),
        }
        eventually(
            lambda: cli(boot, "reassign", "verify", str(path), check=False).returncode == 0,
            budget_s=30,
            what="the reassignment to complete",
        )
        out = cli(boot, "reassign", "verify", str(path))
        assert out.stdout.count("is completed.") == 3
        assert f"Reassignment of replica moves-0 on broker 3 to {dir_b} is completed." in out.stdout
        assert cli(boot, "reassign", "list").stdout.strip() == "No partition reassignments found."
        assert "None of those" in cli(boot, "reassign", "cancel", str(path)).stdout
        moved = partitions(boot, "moves")
        assert (list(moved[0].replicas), list(moved[1].replicas)) == ([3, 2], [2, 3])
        # The records came along: all of them, and the new replica's bytes are the leader's.
        hw = high_watermarks(boot, "moves", [0, 1])
        assert sum(len(v) for v in read_all(boot, "moves", hw).values()) == 300
        for p in (0, 1):
            eventually(
                lambda p=p: (
                    replica_bytes(cluster.brokers[3], "moves", p)
                    == replica_bytes(cluster.brokers[2], "moves", p)
                    != b""
                ),
                budget_s=20,
                what=f"broker 3's copy of moves-{p}",
            )

        # log-dirs describe: where each replica lives now, in kafka-log-dirs' JSON.
        def replicas_by_broker() -> dict[int, set[str]]:
            dirs = as_json(boot, "log-dirs", "describe", "--topics", "moves")
            assert dirs["version"] == 1
            return {
                b["broker"]: {p["partition"] for d in b["logDirs"] for p in d["partitions"]}
                for b in dirs["brokers"]
            }

        eventually(
            lambda: (
                replicas_by_broker()
                == {1: set(), 2: {"moves-0", "moves-1"}, 3: {"moves-0", "moves-1"}}
            ),
            budget_s=20,
            what="the moved replicas in broker 2's and 3's log dirs only",
        )
        dirs = as_json(boot, "log-dirs", "describe", "--brokers", "3", "--topics", "moves")
        [broker3] = dirs["brokers"]
        assert sorted(d["logDir"] for d in broker3["logDirs"]) == [
            str(tmp_path / "broker-3" / d) for d in ("a", "b")
        ]
        assert all(d["error"] is None for d in broker3["logDirs"])
        sizes = {
            p["partition"]: (d["logDir"], p["size"], p["isFuture"])
            for d in broker3["logDirs"]
            for p in d["partitions"]
        }
        size0 = len(replica_bytes(cluster.brokers[3], "moves", 0))
        assert sizes["moves-0"] == (dir_b, size0, False)
        size1 = len(replica_bytes(cluster.brokers[3], "moves", 1))
        assert sizes["moves-1"][1:] == (size1, False)

        # groups list: each broker lists the groups whose __consumer_offsets partition it
        # leads (and answers no error for the partitions led elsewhere).
        consumer = Consumer(
            {"bootstrap.servers": boot, "group.id": "cli-group", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["moves"])
        eventually(lambda: consumer.poll(0.5) is not None, budget_s=30, what="a record")
        consumer.commit(asynchronous=False)
        consumer.close()
        listed = as_json(boot, "groups", "list")
        assert "cli-group" in {g["group"] for g in listed}

        # leader-election: broker 1 restarted hands "elect" to broker 2; preferred brings it back.
        create_topic(boot, "elect", replica_assignment=[[1, 2, 3]])
        wait_for_leaders(boot, "elect", 1, isr_size=3)
        cluster.brokers[1].restart()
        boot = cluster.brokers[2].bootstrap
        wait_for_leaders(boot, "elect", 1, isr_size=3)
        assert partitions(boot, "elect")[0].leader == 2
        # Every partition: only those that needed it are reported (as Kafka's tool does).
        results = as_json(boot, "leader-election", "--all-topic-partitions")
        assert {"topic": "elect", "partition": 0, "result": "NONE"} in results
        assert all(r["result"] == "NONE" for r in results), results
        eventually(lambda: partitions(boot, "elect")[0].leader == 1, budget_s=10, what="leader 1")
        out = cli(
            boot,
            "leader-election",
            "--election-type",
            "PREFERRED",
            "--topic",
            "elect",
            "--partition",
            "0",
        )
        assert out.stdout.strip() == "Valid replica already elected for partitions elect-0"
        elect_file = tmp_path / "elect.json"
        elect_file.write_text(json.dumps({"partitions": [{"topic": "elect", "partition": 0}]}))
        results = as_json(boot, "leader-election", "--path-to-json-file", str(elect_file))
        assert results == [{"topic": "elect", "partition": 0, "result": "ELECTION_NOT_NEEDED"}]
        # An unclean election where a leader exists is not needed either; a partition that
        # does not exist is an error, and the exit code says so.
        out = cli(
            boot,
            "leader-election",
            "--election-type",
            "unclean",
            "--topic",
            "elect",
            "--partition",
            "7",
            check=False,
        )
        assert out.returncode == 1
        assert "elect-7: UNKNOWN_TOPIC_OR_PARTITION" in out.stdout

        # topics describe's filters, with broker 3 gone.
        create_topic(boot, "lonely", replica_assignment=[[3]])
        wait_for_leaders(boot, "lonely", 1)
        cluster.brokers.pop(3).stop()
        under = eventually(
            lambda: (
                {
                    (t["name"], p["partition"])
                    for t in as_json(boot, "topics", "describe", "--under-replicated-partitions")
                    for p in t["partitions"]
                }
                >= {("moves", 0), ("moves", 1), ("elect", 0)}
                and as_json(boot, "topics", "describe", "--under-replicated-partitions")
            ),
            budget_s=20,
            what="under-replicated partitions",
        )
        for t in under:
            for p in t["partitions"]:
                assert len(p["isr"]) < len(p["replicas"]) and 3 in p["offline"]
        unavailable = as_json(
            boot, "topics", "describe", "moves", "elect", "lonely", "--unavailable-partitions"
        )
        assert [(t["name"], [p["partition"] for p in t["partitions"]]) for t in unavailable] == [
            ("lonely", [0])
        ]
        table = cli(boot, "topics", "describe", "moves", "--under-replicated-partitions").stdout
        assert "OFFLINE" in table and "Topic: moves" in table
        assert as_json(boot, "topics", "describe", "moves", "--under-min-isr-partitions") == []
