"""ISR shrink and expansion by the leader, min.insync.replicas, and a leader change that
makes the old leader truncate its divergent tail (the test is the controller)."""

from __future__ import annotations

import json

from clustertest_helpers import metadata
from replication_helpers import (
    NO_CONTROLLED_SHUTDOWN,
    ControllerStub,
    eventually,
    list_offset,
    produce,
    raw,
    segment_bytes,
    take_controller,
    values_by_offset,
)
from wire import request_of

from trio_broker.errors import ErrorCode
from trio_broker.testing import KafkaCluster

OVERRIDES = NO_CONTROLLED_SHUTDOWN | {
    "auto.create.topics.enable": "false",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
}


def _isr_notifications(zk_view) -> list[list[tuple[str, int]]]:
    root = zk_view.root + "/isr_change_notification"
    out = []
    for child in sorted(zk_view.client.get_children(root)):
        assert child.startswith("isr_change_")
        data = json.loads(zk_view.client.get(f"{root}/{child}")[0])
        out.append([(e["topic"], e["partition"]) for e in data["partitions"]])
    return out


def test_isr_shrinks_on_stopped_followers_then_min_isr_then_grows_back(
    zookeeper, tmp_path, zk_view
):
    overrides = OVERRIDES | {"replica.lag.time.max.ms": "1500"}
    take_controller(zk_view)
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        ctl = ControllerStub(cluster, zk_view)
        ctl.create_topic("isr", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        ctl.send([("isr", 0)])
        leader = cluster.brokers[1].bootstrap
        assert produce(leader, "isr", 0, [b"a", b"b"]).error_code == 0

        # A stopped follower: the next acks=all produce waits until the leader drops it
        # from the ISR (replica.lag.time.max.ms), then is acknowledged.
        cluster.brokers[3].stop()
        answer = produce(leader, "isr", 0, [b"c"])
        assert (answer.error_code, answer.base_offset) == (0, 2)
        state, version = ctl.state_znode("isr", 0)
        assert (state.leader, state.leader_epoch, sorted(state.isr)) == (1, 0, [1, 2])
        assert version >= 1
        assert ("isr", 0) in [tp for n in _isr_notifications(zk_view) for tp in n]
        md = metadata(leader).topics[0].partitions[0]
        assert sorted(md.isr_nodes) == [1, 2]
        # An UpdateMetadata from before the shrink (older znode version, same leader epoch)
        # does not take the leader's newer ISR away from its cache.
        ctl.update_metadata()
        md = metadata(leader).topics[0].partitions[0]
        assert sorted(md.isr_nodes) == [1, 2]

        # Two of three stopped: the waiting produce fails after the append, the next one
        # before it; acks=1 still works.
        cluster.brokers[2].stop()
        answer = produce(leader, "isr", 0, [b"d"])
        assert answer.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert ctl.state_znode("isr", 0)[0].isr == (1,)
        answer = produce(leader, "isr", 0, [b"e"])
        assert answer.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert produce(leader, "isr", 0, [b"f"], acks=1).error_code == 0
        hw = list_offset(leader, "isr", 0).offset
        assert hw == 5  # a, b, c, d (appended, not acknowledged), f

        # Back again: they catch up and the leader adds them to the ISR.
        cluster.brokers[2].restart()
        cluster.brokers[3].restart()
        ctl.refresh("isr", 0)
        ctl.send([("isr", 0)], to=[2, 3])
        eventually(
            lambda: sorted(ctl.state_znode("isr", 0)[0].isr) == [1, 2, 3],
            budget_s=20,
            what="ISR grows back",
        )
        assert produce(leader, "isr", 0, [b"g"]).error_code == 0
        leader_bytes = segment_bytes(cluster.brokers[1].log_dir, "isr", 0)
        for node in (2, 3):
            eventually(
                lambda n=node, b=leader_bytes: (
                    segment_bytes(cluster.brokers[n].log_dir, "isr", 0) == b
                ),
                budget_s=20,
                what=f"replica {node} caught up",
            )


def test_leader_change_makes_the_old_leader_truncate_its_divergent_tail(
    zookeeper, tmp_path, zk_view
):
    take_controller(zk_view)
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=OVERRIDES) as cluster:
        ctl = ControllerStub(cluster, zk_view)
        ctl.create_topic("div", {0: [1, 2]})
        ctl.send([("div", 0)])
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        values = [f"v{i}".encode() for i in range(10)]
        assert produce(b1.bootstrap, "div", 0, values).error_code == 0
        common = segment_bytes(b1.log_dir, "div", 0)
        eventually(
            lambda: segment_bytes(b2.log_dir, "div", 0) == common, budget_s=20, what="follower"
        )

        # The controller elects broker 2 (epoch 1) and tells only broker 2 so far: broker 1
        # still leads epoch 0 and takes acks=1 records the new leader never sees.
        ctl.elect("div", 0, 2, [2])
        ctl.send([("div", 0)], to=[2])
        old = produce(b1.bootstrap, "div", 0, [b"lost-0", b"lost-1", b"lost-2"], acks=1)
        assert (old.error_code, old.base_offset) == (0, 10)
        new = produce(b2.bootstrap, "div", 0, [b"new-0", b"new-1"])
        assert (new.error_code, new.base_offset) == (0, 10)

        # Now broker 1 hears of epoch 1: a follower, it truncates to where epoch 0 ended
        # on the new leader (OffsetForLeaderEpoch), not to its HW, and copies the rest.
        ctl.send([("div", 0)], to=[1])
        leader_bytes = segment_bytes(b2.log_dir, "div", 0)
        eventually(
            lambda: segment_bytes(b1.log_dir, "div", 0) == leader_bytes,
            budget_s=20,
            what="old leader truncated and caught up",
        )
        got = values_by_offset(segment_bytes(b1.log_dir, "div", 0))
        assert [got[o] for o in range(12)] == [*values, b"new-0", b"new-1"]
        # Both replicas' leader epoch checkpoints, written by their log managers within
        # a moment of the change (together with others, off the event loop).
        eventually(
            lambda: (
                _text(b1.log_dir / "div-0" / "leader-epoch-checkpoint")
                == _text(b2.log_dir / "div-0" / "leader-epoch-checkpoint")
                == "0\n2\n0 0\n1 10\n"
            ),
            budget_s=10,
            what="both leader epoch checkpoints say epoch 1 starts at 10",
        )
        # The new leader takes it back into the ISR once it has caught up.
        eventually(
            lambda: sorted(ctl.state_znode("div", 0)[0].isr) == [1, 2],
            budget_s=20,
            what="ISR expansion",
        )
        # The old leader now refuses produce and names the new one.
        refused = produce(b1.bootstrap, "div", 0, [b"x"], version=10)
        assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert refused.current_leader.leader_id == 2
        # A consumer's fetch before v11 is refused too; from v11 on (KIP-392) the old
        # leader serves it as a follower, from its own log up to its high watermark.
        from trio_broker.protocol._generated.fetch_request import (
            FetchPartition,
            FetchRequest,
            FetchTopic,
        )

        fetch = FetchRequest(
            max_wait_ms=0,
            topics=[
                FetchTopic(
                    topic_id=ctl.topic_ids["div"],
                    partitions=[FetchPartition(partition=0, partition_max_bytes=1 << 20)],
                )
            ],
        )
        by_name = FetchRequest(
            max_wait_ms=0,
            topics=[
                FetchTopic(
                    topic="div",
                    partitions=[FetchPartition(partition=0, partition_max_bytes=1 << 20)],
                )
            ],
        )
        answer = raw(b1.bootstrap, by_name, 10)
        assert answer.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        answer = raw(b1.bootstrap, fetch, 16)
        data = answer.responses[0].partitions[0]
        assert (data.error_code, data.high_watermark) == (0, 12)
        assert bytes(data.records) == leader_bytes
        # A fetch in the old epoch is fenced, and told where the leader is now (KIP-951).
        fetch.topics[0].partitions[0].current_leader_epoch = 0
        answer = raw(b1.bootstrap, fetch, 16)
        data = answer.responses[0].partitions[0]
        assert data.error_code == ErrorCode.FENCED_LEADER_EPOCH
        assert (data.current_leader.leader_id, data.current_leader.leader_epoch) == (2, 1)
        assert [(n.node_id, n.port) for n in answer.node_endpoints] == [(2, b2.port)]


def test_a_new_follower_starts_at_the_leaders_log_start_even_inside_a_batch(
    zookeeper, tmp_path, zk_view
):
    take_controller(zk_view)
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=OVERRIDES) as cluster:
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        ctl = ControllerStub(cluster, zk_view)
        ctl.create_topic("start", {0: [1, 2]})
        ctl.states[("start", 0)]["isr"] = [1]
        ctl.send([("start", 0)], to=[1])  # the follower hears nothing yet
        values = [f"v{i}".encode() for i in range(10)]
        assert produce(b1.bootstrap, "start", 0, values).error_code == 0  # one batch
        assert produce(b1.bootstrap, "start", 0, [b"w"]).error_code == 0
        from trio_broker.protocol._generated.delete_records_request import (
            DeleteRecordsPartition,
            DeleteRecordsTopic,
        )

        deleted = raw(
            b1.bootstrap,
            request_of(
                21,
                topics=[
                    DeleteRecordsTopic(
                        name="start",
                        partitions=[DeleteRecordsPartition(partition_index=0, offset=5)],
                    )
                ],
                timeout_ms=5000,
            ),
            2,
        )
        assert deleted.topics[0].partitions[0].low_watermark == 5

        # The follower (empty) asks for offset 0, below the leader's log start 5: it starts
        # over at 5, then takes the whole batch holding offset 5, as stored by the leader.
        ctl.send([("start", 0)], to=[2])
        leader_bytes = segment_bytes(b1.log_dir, "start", 0)
        eventually(
            lambda: segment_bytes(b2.log_dir, "start", 0) == leader_bytes,
            budget_s=20,
            what="the follower copied the leader's batches",
        )
        got = values_by_offset(segment_bytes(b2.log_dir, "start", 0))
        assert got[10] == b"w" and got[5] == b"v5"
        eventually(
            lambda: sorted(ctl.state_znode("start", 0)[0].isr) == [1, 2],
            budget_s=20,
            what="the follower joins the ISR",
        )


def _text(path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
