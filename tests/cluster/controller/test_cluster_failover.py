"""The controller reacting to brokers: a broker dying or stopping moves its leaderships
within seconds, a returning broker brings its offline partitions back, a controlled
shutdown moves leaderships before the broker stops, and a new controller takes over."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

from clustertest_helpers import (
    FAST_SESSION,
    KAFKA_SHUTDOWN_RETRIES,
    all_see,
    eventually,
    metadata,
)
from confluent_kafka.admin import AdminClient, NewTopic
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.testing import BrokerProcess, KafkaCluster

NO_CONTROLLED_SHUTDOWN = {**FAST_SESSION, "controlled.shutdown.enable": "false"}


def _create(bootstrap: str, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([topic], operation_timeout=15)[topic.topic].result()


def _states(zk_view, topic: str) -> dict[int, dict]:
    parts = zk_view.json(f"/brokers/topics/{topic}")["partitions"]
    return {int(p): zk_view.json(f"/brokers/topics/{topic}/partitions/{p}/state") for p in parts}


def _described(bootstrap: str, topic: str) -> dict[int, tuple]:
    """partition -> (error, leader, epoch, isr, offline) as one broker describes it."""
    for t in metadata(bootstrap).topics:
        if t.name == topic:
            return {
                p.partition_index: (
                    p.error_code,
                    p.leader_id,
                    p.leader_epoch,
                    p.isr_nodes,
                    p.offline_replicas,
                )
                for p in t.partitions
            }
    return {}


def test_a_killed_broker_loses_its_leaderships_within_seconds(zookeeper, tmp_path, zk_view):
    cluster = KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=FAST_SESSION)
    with cluster:
        config = cluster.broker_config(3)
        del config["listeners"]
        process = BrokerProcess(config)
        try:
            everyone = {**cluster.brokers, 3: process}
            all_see(everyone)
            _create(cluster.bootstrap, NewTopic("t", 6, 3))
            before = _states(zk_view, "t")
            led_by_3 = sorted(p for p, s in before.items() if s["leader"] == 3)
            assert len(led_by_3) == 2

            process.kill()  # kill -9: ZooKeeper notices when its 4 s session expires
            after = eventually(
                lambda: (
                    (s := _states(zk_view, "t"))
                    and all(x["leader"] in (1, 2) and 3 not in x["isr"] for x in s.values())
                    and s
                ),
                budget_s=20,
                what="leaders and ISRs without broker 3",
            )
            for p, state in after.items():
                # Each partition changed once: a new leader for broker 3's, the ISR shrunk
                # for the others (Kafka bumps the leader epoch for both).
                assert state["leader_epoch"] == 1, (p, state)
                assert state["isr"] == [r for r in before[p]["isr"] if r != 3]
                if p not in led_by_3:
                    assert state["leader"] == before[p]["leader"]
            # Both live brokers describe it: new leaders, broker 3 offline.
            expected = {p: (0, s["leader"], 1, s["isr"], [3]) for p, s in after.items()}
            for broker in cluster.brokers.values():
                eventually(
                    lambda b=broker: _described(b.bootstrap, "t") == expected,
                    budget_s=10,
                    what=f"{broker.bootstrap} describes the new leaders",
                )

            # Broker 3 comes back: every broker lists it again, no replica is offline, and
            # once its (empty) logs have caught up it is back in every ISR, the leaders and
            # their epochs unchanged (an ISR expansion is no new leader epoch, as in Kafka).
            # The new broker itself learns everything from the controller's UpdateMetadata.
            # (Checking for the ISRs without it raced with that expansion.)
            process = BrokerProcess(config | {"listeners": f"PLAINTEXT://127.0.0.1:{process.port}"})
            everyone[3] = process
            all_see(everyone)
            expected = {p: (0, s["leader"], 1, s["isr"] + [3], []) for p, s in after.items()}
            for broker in everyone.values():
                eventually(
                    lambda b=broker: _described(b.bootstrap, "t") == expected,
                    budget_s=30,  # a budget for a loaded machine, not a timing claim
                    what=f"{broker.bootstrap} describes broker 3 back in the ISRs",
                )
            # SIGTERM: a controlled shutdown first (it leads nothing; the controller takes
            # it out of the ISRs it is in), then exit 0.
            assert process.stop() == 0
            assert any("controlled shutdown of broker 3 done" in line for line in process.lines)
            eventually(
                lambda: all(3 not in x["isr"] for x in _states(zk_view, "t").values()),
                budget_s=20,
                what="ISRs without broker 3 after its controlled shutdown",
            )
        finally:
            if process.proc.poll() is None:
                process.kill()


def test_an_offline_partition_comes_back_with_its_broker(zookeeper, tmp_path, zk_view):
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=NO_CONTROLLED_SHUTDOWN
    ) as cluster:
        all_see(cluster.brokers)
        _create(cluster.bootstrap, NewTopic("solo", 1, replica_assignment=[[3]]))
        assert _states(zk_view, "solo")[0]["leader"] == 3
        broker = cluster.brokers[3]
        broker.stop()
        # No other replica: no leader, and the ISR keeps its last member (never empty).
        eventually(lambda: _states(zk_view, "solo")[0]["leader"] == -1, budget_s=15, what="offline")
        assert _states(zk_view, "solo")[0]["isr"] == [3]
        eventually(
            lambda: (
                _described(cluster.brokers[1].bootstrap, "solo")
                == {0: (ErrorCode.LEADER_NOT_AVAILABLE, -1, 1, [3], [3])}
            ),
            budget_s=10,
            what="solo described offline",
        )
        broker.restart()  # same port and log dir
        state = eventually(
            lambda: (s := _states(zk_view, "solo")[0])["leader"] == 3 and s,
            budget_s=15,
            what="solo led by broker 3 again",
        )
        assert (state["leader_epoch"], state["isr"]) == (2, [3])
        for b in cluster.brokers.values():
            eventually(
                lambda b=b: _described(b.bootstrap, "solo") == {0: (0, 3, 2, [3], [])},
                budget_s=10,
                what=f"{b.bootstrap} describes solo online",
            )


def test_controlled_shutdown_moves_leaderships_before_the_broker_stops(
    zookeeper, tmp_path, zk_view, caplog
):
    overrides = {**FAST_SESSION, "controlled.shutdown.retry.backoff.ms": "200"}
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        all_see(cluster.brokers)
        _create(cluster.bootstrap, NewTopic("moving", 6, 3))
        led_by_2 = sorted(p for p, s in _states(zk_view, "moving").items() if s["leader"] == 2)
        assert len(led_by_2) == 2
        caplog.set_level(logging.INFO)
        cluster.brokers.pop(2).stop()
        messages = [r.getMessage() for r in caplog.records]
        shutting_down = messages.index("broker 2 shutting down")
        done = messages.index(
            next(m for m in messages if "controlled shutdown of broker 2 done" in m)
        )
        assert done < shutting_down  # the broker asked, and was done, before stopping
        moved = [m for m in messages[:done] if m.startswith("controlled shutdown election of")]
        assert len(moved) == 6  # 2 leaderships moved, 4 ISRs shrunk
        for state in _states(zk_view, "moving").values():
            assert state["leader"] in (1, 3) and 2 not in state["isr"]
        # The other brokers were told at once; they need no session expiry to know.
        for b in cluster.brokers.values():
            described = _described(b.bootstrap, "moving")
            assert all(
                leader in (1, 3) and 2 not in isr for _, leader, _, isr, _ in described.values()
            )


def test_a_new_controller_takes_over_and_topics_still_work(zookeeper, tmp_path, zk_view):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=FAST_SESSION) as cluster:
        all_see(cluster.brokers)
        _create(cluster.bootstrap, NewTopic("before", 3, 3))
        first = zk_view.controller()
        cluster.brokers.pop(first).stop()
        second = eventually(
            lambda: zk_view.controller() not in (None, first) and zk_view.controller(),
            budget_s=15,
            what="a new controller",
        )
        assert zk_view.controller_epoch() == 2
        all_see(cluster.brokers)
        for state in _states(zk_view, "before").values():
            assert state["leader"] != first and first not in state["isr"]

        # The new controller makes new partitions, with its epoch in their state.
        survivor = next(b for n, b in cluster.brokers.items() if n != second)
        _create(survivor.bootstrap, NewTopic("after", 2, 2))
        for state in _states(zk_view, "after").values():
            assert state["controller_epoch"] == 2 and state["leader"] in cluster.brokers
        for b in cluster.brokers.values():
            m = metadata(b.bootstrap)
            assert m.controller_id == second
            assert {t.name for t in m.topics} == {"before", "after"}


def test_isr_changes_by_leaders_reach_every_broker(shared_cluster, shared_zk_view):
    """What a leader does when its ISR changes (the replica half): a conditional write of
    the state znode, then an /isr_change_notification znode; the controller re-reads the
    state and sends UpdateMetadata to everyone."""
    brokers = shared_cluster.brokers
    all_see(brokers)
    _create(shared_cluster.bootstrap, NewTopic("isr", 1, 3))
    path = shared_zk_view.root + "/brokers/topics/isr/partitions/0/state"
    data, stat = shared_zk_view.client.get(path)
    state = shared_zk_view.json("/brokers/topics/isr/partitions/0/state")
    shrunk = state | {"isr": [state["leader"]]}

    shared_zk_view.client.set(path, json.dumps(shrunk).encode(), version=stat.version)
    shared_zk_view.client.create(
        shared_zk_view.root + "/isr_change_notification/isr_change_",
        b'{"version":1,"partitions":[{"topic":"isr","partition":0}]}',
        sequence=True,
    )
    for b in brokers.values():
        eventually(
            lambda b=b: _described(b.bootstrap, "isr")[0][3] == [state["leader"]],
            budget_s=10,
            what=f"{b.bootstrap} sees the shrunk ISR",
        )
    eventually(
        lambda: (
            shared_zk_view.client.get_children(shared_zk_view.root + "/isr_change_notification")
            == []
        ),
        budget_s=10,
        what="the notification deleted",
    )
    # And back (the followers caught up): every broker sees the whole ISR again.
    data, stat = shared_zk_view.client.get(path)
    shared_zk_view.client.set(path, json.dumps(state).encode(), version=stat.version)
    shared_zk_view.client.create(
        shared_zk_view.root + "/isr_change_notification/isr_change_",
        b'{"version":1,"partitions":[{"topic":"isr","partition":0}]}',
        sequence=True,
    )
    for b in brokers.values():
        eventually(
            lambda b=b: _described(b.bootstrap, "isr")[0][3] == state["isr"],
            budget_s=10,
            what=f"{b.bootstrap} sees the ISR grown back",
        )


def test_a_stale_controller_epoch_is_refused(shared_cluster, shared_zk_view):
    all_see(shared_cluster.brokers)
    epoch = shared_zk_view.controller_epoch()
    host, port = shared_cluster.brokers[1].bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        stale = request_of(6, controller_id=2, controller_epoch=epoch - 1, live_brokers=[])
        assert roundtrip(sock, stale, 8).error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    # And the cache is untouched: every broker is still listed.
    assert len(metadata(shared_cluster.brokers[1].bootstrap).brokers) == 3


def test_requests_for_an_earlier_registration_are_refused(shared_cluster, shared_zk_view):
    # KIP-380: a broker's epoch is the czxid of its registration; the controller's requests
    # carry it, and one built for an earlier registration (smaller) is STALE_BROKER_EPOCH.
    from trio_broker.protocol._generated.leader_and_isr_request import (
        LeaderAndIsrPartitionState,
        LeaderAndIsrTopicState,
    )

    all_see(shared_cluster.brokers)
    controller_epoch = shared_zk_view.controller_epoch()
    controller_id = shared_zk_view.controller()
    target = next(n for n in shared_cluster.brokers if n != controller_id)
    epoch = shared_zk_view.client.exists(f"{shared_zk_view.root}/brokers/ids/{target}").czxid
    stale = epoch - 1

    def call(node: int, request, version: int):
        host, port = shared_cluster.brokers[node].bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            return roundtrip(sock, request, version)

    ghost = LeaderAndIsrPartitionState(
        partition_index=0, controller_epoch=controller_epoch, leader=target, leader_epoch=0,
        isr=[target], partition_epoch=0, replicas=[target], is_new=True,
    )  # fmt: skip
    leader_and_isr = request_of(
        4, controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=stale,
        topic_states=[LeaderAndIsrTopicState(topic_name="ghost", partition_states=[ghost])],
        live_leaders=[],
    )  # fmt: skip
    assert call(target, leader_and_isr, 4).error_code == ErrorCode.STALE_BROKER_EPOCH
    update = request_of(
        6, controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=stale,
        live_brokers=[],
    )  # fmt: skip
    assert call(target, update, 8).error_code == ErrorCode.STALE_BROKER_EPOCH
    stop = request_of(
        5, controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=stale,
        delete_partitions=True, topic_states=[],
    )  # fmt: skip
    assert call(target, stop, 3).error_code == ErrorCode.STALE_BROKER_EPOCH
    shutdown = request_of(7, broker_id=target, broker_epoch=stale)
    assert call(controller_id, shutdown, 3).error_code == ErrorCode.STALE_BROKER_EPOCH
    # None of them applied: no ghost partition, every broker still listed.
    log_dir = shared_cluster.brokers[target].config.log_dirs[0]
    assert not (Path(log_dir) / "ghost-0").exists()
    assert len(metadata(shared_cluster.brokers[target].bootstrap).brokers) == 3
    # (The current epoch is what the controller's own requests carry: every cluster test.)


def test_controlled_shutdown_keeps_a_leadership_nobody_can_take(
    zookeeper, tmp_path, zk_view, caplog
):
    overrides = {
        **FAST_SESSION,
        "controlled.shutdown.retry.backoff.ms": "100",
        "controlled.shutdown.max.retries": "1",
    }
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        all_see(cluster.brokers)
        _create(cluster.bootstrap, NewTopic("lonely", 1, replica_assignment=[[2, 1, 3]]))
        # Its leader alone in the ISR (the followers fell behind, as a leader would write).
        path = zk_view.root + "/brokers/topics/lonely/partitions/0/state"
        data, stat = zk_view.client.get(path)
        state = json.loads(data) | {"isr": [2]}
        zk_view.client.set(path, json.dumps(state).encode(), version=stat.version)
        caplog.set_level(logging.INFO)
        cluster.brokers.pop(2).stop()
        messages = [r.getMessage() for r in caplog.records]
        # Asked twice, told twice it still leads lonely-0 (no ISR member to hand over to),
        # then stopped anyway; only then did the partition go offline.
        assert sum("still leading lonely-0" in m for m in messages) == 2
        assert any("controlled shutdown of broker 2 did not complete" in m for m in messages)
        after = eventually(
            lambda: (s := _states(zk_view, "lonely")[0])["leader"] == -1 and s,
            budget_s=15,
            what="lonely offline",
        )
        assert after["isr"] == [2]


def _stop_broker_1(cluster, caplog) -> tuple[list[str], list[str]]:
    """Stop broker 1: its controlled shutdown's "still leading" answers, and every message
    logged."""
    caplog.set_level(logging.INFO)
    cluster.brokers.pop(1).stop()
    messages = [r.getMessage() for r in caplog.records]
    asked = [m for m in messages if m.startswith("controlled shutdown of broker 1: still")]
    return asked, messages


def test_the_last_broker_of_a_cluster_stops_without_asking_again(zookeeper, tmp_path, caplog):
    """Brokers 3 and 2 stopped: broker 1 leads every replica of `everywhere` and nobody else
    is alive to take them. Its controlled shutdown asks once and stops, instead of asking
    again controlled.shutdown.max.retries times, 5 s apart (Kafka's defaults)."""
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=KAFKA_SHUTDOWN_RETRIES
    ) as cluster:
        all_see(cluster.brokers)
        _create(cluster.bootstrap, NewTopic("everywhere", 2, 3))
        cluster.brokers.pop(3).stop()
        cluster.brokers.pop(2).stop()
        last = cluster.brokers[1]
        # Broker 1 knows it is alone (else it asks again, as when another may take over).
        eventually(
            lambda: [b.node_id for b in metadata(last.bootstrap).brokers] == [1],
            budget_s=15,
            what="broker 1 alone in its metadata",
        )
        asked, messages = _stop_broker_1(cluster, caplog)
        assert len(asked) == 1 and "everywhere-0" in asked[0] and "everywhere-1" in asked[0]
        assert any("broker 1: no other broker is alive; stopping" in m for m in messages)


def test_a_broker_whose_partners_are_down_stops_without_asking_again(zookeeper, tmp_path, caplog):
    """Broker 3 alive, but every partition broker 1 leads has its other replica on broker
    2, which is down: nobody can take them, so the controlled shutdown asks once."""
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=KAFKA_SHUTDOWN_RETRIES
    ) as cluster:
        all_see(cluster.brokers)
        _create(cluster.bootstrap, NewTopic("pair", 2, replica_assignment=[[1, 2], [1, 2]]))
        cluster.brokers.pop(2).stop()
        first = cluster.brokers[1]
        eventually(
            lambda: [b.node_id for b in metadata(first.bootstrap).brokers] == [1, 3],
            budget_s=15,
            what="broker 1 sees broker 2 gone",
        )
        asked, messages = _stop_broker_1(cluster, caplog)
        assert len(asked) == 1 and "pair-0" in asked[0] and "pair-1" in asked[0]
        assert any(
            "broker 1: no live broker holds another replica of what it leads; stopping" in m
            for m in messages
        )


def test_unclean_election_only_when_the_topic_allows_it(zookeeper, tmp_path, zk_view):
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=NO_CONTROLLED_SHUTDOWN
    ) as cluster:
        all_see(cluster.brokers)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topics = [
            NewTopic("clean", 1, replica_assignment=[[3, 2]]),
            NewTopic(
                "unclean",
                1,
                replica_assignment=[[3, 2]],
                config={"unclean.leader.election.enable": "true"},
            ),
        ]
        for f in admin.create_topics(topics, operation_timeout=15).values():
            f.result()
        for topic in ("clean", "unclean"):
            # Broker 2 fell out of the ISR (its leader wrote so).
            path = f"{zk_view.root}/brokers/topics/{topic}/partitions/0/state"
            data, stat = zk_view.client.get(path)
            state = json.loads(data) | {"isr": [3]}
            zk_view.client.set(path, json.dumps(state).encode(), version=stat.version)
        cluster.brokers.pop(3).stop()
        unclean = eventually(
            lambda: (s := _states(zk_view, "unclean")[0])["leader"] == 2 and s,
            budget_s=15,
            what="the unclean election",
        )
        assert (unclean["isr"], unclean["leader_epoch"]) == ([2], 1)
        clean = _states(zk_view, "clean")[0]
        assert (clean["leader"], clean["isr"], clean["leader_epoch"]) == (-1, [3], 1)
