"""Faults the way networks make them: brokers and ZooKeeper on hosts of the test's own
network (netlab.py, nemesis.py), packets dropped by the kernel rather than connections
closed, so TCP's retransmission backoff plays its part. A history of every
acknowledgement and every read, checked after each run (history.py).

The soak (`--nemesis-soak`, or benchmarks/bench_nemesis.py) runs many more faults; these
are the ones that found bugs, each failing on the code before its fix.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from clustertest_helpers import ZooKeeperView, eventually
from failover_helpers import close_producer, create_topic, wait_for_leaders
from nemesis import (
    NetCluster,
    controller_id,
    converged,
    fill_disk,
    run_scenario,
    save_logs,
    zk_state,
)
from netlab import NetLab, skip_reason
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.create_topics_request import CreatableTopic
from trio_broker.testing import ZOOKEEPER_MISSING, zookeeper_classpath


@pytest.fixture
def lab():
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    if zookeeper_classpath() is None:
        pytest.skip(ZOOKEEPER_MISSING)
    with NetLab() as lab:
        yield lab


CI_FAULTS = [
    "kill-leader",
    "pause-leader",
    "isolate-controller",
    "one-way-leader",
    # The flapping link on the controller (which leads history-0): it gives its
    # leaderships up on its own, ends its live session, and must register again only
    # once a new controller has elected them away (nemesis.registered_before_decided_anew).
    "flapping-controller",
    "zookeeper-restart",
]


def test_a_leader_cut_off_by_dropped_packets_stops_leading_once_it_knows(lab, tmp_path):
    """The leader of history-0 and direct-0 is cut from ZooKeeper and the other brokers
    (not from clients) for 20 s by dropped packets, then healed. Meanwhile another
    leader's ISR shrinks, so the controller sends the cut-off broker an UpdateMetadata
    that never arrives and sits in the controller's connection as TCP retransmits it.

    After the heal the broker finds its session expired and registers again. From then on
    it must not acknowledge anything as the leader it no longer is (it did, until the
    controller's LeaderAndIsr got through behind the stuck UpdateMetadata built for its old
    registration, which it refused with STALE_BROKER_EPOCH: 12 s when first seen)."""
    with NetCluster(lab, tmp_path) as cluster:
        outcome = run_scenario(cluster, lab, "isolate-leader", hold_s=20)
        report = outcome.report
        print(f"\n{outcome}")
        assert outcome.expired_at is not None, "the cut-off broker never registered again"
        assert report.acked_all > 0 and report.acked_one > 0 and report.reads > 0
        assert report.lost_one_after_expiry == 0, (
            f"broker {outcome.target} acknowledged {report.lost_one_after_expiry} records as "
            "leader after it knew its session had expired, all lost"
        )
        stale = [x for x in cluster.lines(outcome.target) if "STALE_BROKER_EPOCH" in x]
        assert not stale, f"requests built for the old registration reached it: {stale}"


@pytest.mark.parametrize("fault", CI_FAULTS)
def test_nothing_acknowledged_is_lost(lab, tmp_path, fault, request):
    """One fault under the workload; the checker's verdict (history.py). With
    `--nemesis-soak N` each fault runs N times."""
    rounds = request.config.getoption("--nemesis-soak") or 1
    for _ in range(rounds):
        with NetCluster(lab, tmp_path / f"run-{time.monotonic_ns()}") as cluster:
            outcome = run_scenario(cluster, lab, fault, hold_s=12)
        print(f"\n{outcome}")
        assert outcome.report.acked_all > 0 and outcome.report.reads > 0
        assert outcome.report.lost_one_after_expiry == 0


def _create_topics(host: str, port: int, name: str, replicas: int) -> tuple[int, str | None]:
    with socket.create_connection((host, port), timeout=40) as sock:
        request = request_of(
            19,
            topics=[CreatableTopic(name=name, num_partitions=1, replication_factor=replicas)],
            timeout_ms=20000,
        )
        (result,) = roundtrip(sock, request, 4).topics
        return result.error_code, result.error_message


def test_create_topics_counts_the_brokers_registered_in_zookeeper(lab, tmp_path):
    """A fourth broker registers while ZooKeeper's packets to broker 1 are dropped, so
    broker 1's watch on /brokers/ids cannot tell it yet; a client that saw four brokers
    (in broker 4's Metadata) asks broker 1 for a topic with four replicas. Broker 1 must
    judge by ZooKeeper, not by its cache (which refused: "only 3 broker(s) are
    registered"); a cluster started by a script that waits for Metadata and then creates
    topics hit this."""
    with NetCluster(lab, tmp_path) as cluster:
        b1 = cluster.brokers[1]
        lab.one_way("zk", "b1")
        b4 = cluster.add_broker(4)
        eventually(
            lambda: len(_metadata_brokers(b4.host, b4.port)) == 4,
            budget_s=10,
            what="broker 4 listing four brokers",
        )
        answer: list[tuple[int, str | None]] = []
        asking = threading.Thread(
            target=lambda: answer.append(_create_topics(b1.host, b1.port, "four", 4))
        )
        asking.start()
        time.sleep(0.5)
        lab.heal("zk")
        asking.join(60)
        assert answer, "no answer to CreateTopics"
        code, message = answer[0]
        assert code == ErrorCode.NONE, message
        wait_for_leaders(cluster.bootstrap, "four", 1, isr_size=4)


def _metadata_brokers(host: str, port: int) -> set[int]:
    with socket.create_connection((host, port), timeout=10) as sock:
        return {b.node_id for b in roundtrip(sock, request_of(3, topics=[]), 1).brokers}


def _commit(host: str, port: int, group: str, offset: int) -> int:
    from trio_broker.protocol._generated.offset_commit_request import (
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )

    with socket.create_connection((host, port), timeout=30) as sock:
        request = request_of(
            8,
            group_id=group,
            generation_id_or_member_epoch=-1,
            topics=[
                OffsetCommitRequestTopic(
                    name="history",
                    partitions=[
                        OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
                    ],
                )
            ],
        )
        return roundtrip(sock, request, 8).topics[0].partitions[0].error_code


def _fetch(host: str, port: int, group: str) -> int:
    from trio_broker.protocol._generated.offset_fetch_request import OffsetFetchRequestTopic

    with socket.create_connection((host, port), timeout=30) as sock:
        request = request_of(
            9,
            group_id=group,
            topics=[OffsetFetchRequestTopic(name="history", partition_indexes=[0])],
        )
        return roundtrip(sock, request, 7).topics[0].partitions[0].committed_offset


def test_an_offset_commit_is_not_read_before_it_is_replicated(lab, tmp_path):
    """The group coordinator is cut from the other brokers (not from clients) while an
    OffsetCommit waits for the ISR it cannot reach. OffsetFetch must answer the offset
    committed before, not the one still waiting: that one is never acknowledged, and the
    next coordinator has not got it, so a reader would see the offset go back (it did:
    2883, then 2763, in the nemesis soak)."""
    with NetCluster(lab, tmp_path, overrides={"offsets.topic.num.partitions": "1"}) as cluster:
        create_topic(cluster.bootstrap, "history", 1)
        group = "watched"
        # The first commit creates __consumer_offsets (RF 3) on the coordinator's choice.
        eventually(lambda: _commit_anywhere(cluster, group, 5), budget_s=60, what="a commit")
        coordinator = zk_state(cluster, "__consumer_offsets", 0)["leader"]
        c = cluster.brokers[coordinator]
        eventually(lambda: _commit(c.host, c.port, group, 5) == 0, budget_s=30, what="commit 5")
        assert _fetch(c.host, c.port, group) == 5
        for other in cluster.brokers:
            if other != coordinator:
                lab.partition(cluster.host(coordinator), cluster.host(other))
        answer: list[int] = []
        waiting = threading.Thread(target=lambda: answer.append(_commit(c.host, c.port, group, 10)))
        waiting.start()
        time.sleep(1)
        seen = _fetch(c.host, c.port, group)
        lab.heal(cluster.host(coordinator))
        waiting.join(60)
        assert seen == 5, f"OffsetFetch read {seen} while its commit waited for the ISR"
        assert answer, "no answer to the OffsetCommit"


def _fetch_answer(host: str, port: int, group: str) -> tuple[int, int, int]:
    """(the answer's error, the partition's error, the committed offset) of OffsetFetch."""
    from trio_broker.protocol._generated.offset_fetch_request import OffsetFetchRequestTopic

    with socket.create_connection((host, port), timeout=30) as sock:
        request = request_of(
            9,
            group_id=group,
            topics=[OffsetFetchRequestTopic(name="history", partition_indexes=[0])],
        )
        answer = roundtrip(sock, request, 7)
        if answer.error_code:
            return answer.error_code, 0, -1
        p = answer.topics[0].partitions[0]
        return 0, p.error_code, p.committed_offset


def test_a_coordinator_cut_from_zookeeper_stops_serving_what_it_no_longer_owns(lab, tmp_path):
    """The group coordinator is cut from ZooKeeper alone (brokers and clients still reach
    it). ZooKeeper expires its session and the controller moves the group's
    __consumer_offsets partition to another broker, where the group commits on. The
    cut-off broker cannot hear of it: it must stop answering OffsetFetch with the offsets
    it had (it served them until the heal, so readers saw committed offsets go back in the
    soak: 36397 -> 36368). Its followers stopped fetching from it: that, with ZooKeeper
    gone for half a session, tells it it was deposed."""
    with NetCluster(lab, tmp_path, overrides={"offsets.topic.num.partitions": "1"}) as cluster:
        create_topic(cluster.bootstrap, "history", 1)
        group = "cut-off"
        eventually(lambda: _commit_anywhere(cluster, group, 5), budget_s=60, what="a commit")
        coordinator = zk_state(cluster, "__consumer_offsets", 0)["leader"]
        c = cluster.brokers[coordinator]
        eventually(lambda: _commit(c.host, c.port, group, 5) == 0, budget_s=30, what="commit 5")
        eventually(
            lambda: len(zk_state(cluster, "__consumer_offsets", 0)["isr"]) == 3,
            budget_s=30,
            what="every replica in the ISR",
        )
        lab.partition(cluster.host(coordinator), "zk")
        new = eventually(
            lambda: (
                zk_state(cluster, "__consumer_offsets", 0)["leader"] not in (coordinator, -1)
                and zk_state(cluster, "__consumer_offsets", 0)["leader"]
            ),
            budget_s=60,
            what="a new leader of __consumer_offsets-0",
        )
        n = cluster.brokers[new]
        eventually(lambda: _commit(n.host, n.port, group, 9) == 0, budget_s=30, what="commit 9")
        # The old coordinator gives the group up: NOT_COORDINATOR sends readers to the new
        # one. (Until then it answers 5; after, never 5 again.)
        code, _, _ = eventually(
            lambda: (a := _fetch_answer(c.host, c.port, group))[0] and a,
            budget_s=60,
            what=f"broker {coordinator} giving the group up",
        )
        assert code == ErrorCode.NOT_COORDINATOR, ErrorCode(code).name
        assert _fetch_answer(c.host, c.port, group)[0] == ErrorCode.NOT_COORDINATOR
        lab.heal(cluster.host(coordinator))
        # Whole again: the broker registers anew and every broker sends readers to 9.
        for node_id, b in cluster.brokers.items():
            eventually(
                lambda b=b: _fetch_answer_anywhere(b, group) == 9,
                budget_s=60,
                what=f"offset 9 through broker {node_id}",
            )


def test_a_coordinator_stopped_past_its_session_does_not_answer_from_before(lab, tmp_path):
    """The group coordinator is stopped (SIGSTOP) for longer than its ZooKeeper session;
    meanwhile the group's __consumer_offsets partition moves to another broker, where the
    group commits on, and a reader's OffsetFetch waits in the stopped broker's socket.
    Resumed, the broker must not answer it with the offset it had (it did, before it
    heard its session had expired: the soak's pause-leader runs saw 9655 -> 9409)."""
    with NetCluster(lab, tmp_path, overrides={"offsets.topic.num.partitions": "1"}) as cluster:
        create_topic(cluster.bootstrap, "history", 1)
        group = "stopped"
        eventually(lambda: _commit_anywhere(cluster, group, 5), budget_s=60, what="a commit")
        coordinator = zk_state(cluster, "__consumer_offsets", 0)["leader"]
        c = cluster.brokers[coordinator]
        eventually(lambda: _commit(c.host, c.port, group, 5) == 0, budget_s=30, what="commit 5")
        eventually(
            lambda: len(zk_state(cluster, "__consumer_offsets", 0)["isr"]) == 3,
            budget_s=30,
            what="every replica in the ISR",
        )
        c.pause()
        try:
            new = eventually(
                lambda: (
                    zk_state(cluster, "__consumer_offsets", 0)["leader"] not in (coordinator, -1)
                    and zk_state(cluster, "__consumer_offsets", 0)["leader"]
                ),
                budget_s=60,
                what="a new leader of __consumer_offsets-0",
            )
            n = cluster.brokers[new]
            eventually(lambda: _commit(n.host, n.port, group, 9) == 0, budget_s=30, what="commit 9")
            answer: list[tuple[int, int, int]] = []
            reader = threading.Thread(
                target=lambda: answer.append(_fetch_answer(c.host, c.port, group))
            )
            reader.start()
            time.sleep(0.5)  # the request is in the stopped broker's socket
        finally:
            c.resume()
        reader.join(60)
        assert answer, "no answer to the OffsetFetch"
        code, _, offset = answer[0]
        assert code == ErrorCode.NOT_COORDINATOR or offset == 9, (
            f"the resumed broker answered {ErrorCode(code).name}, offset {offset}"
        )


def test_a_full_disk_hands_its_leaderships_over(lab, tmp_path):
    """The leader's disk fills up (another file takes the last byte). Alone, a broker keeps
    such a partition and answers KAFKA_STORAGE_ERROR until space is freed; in a cluster
    that left the partition without acknowledgements while two in-sync replicas were
    healthy, for as long as the disk stayed full. Now the controller moves its leadership
    at once, acks=all produces succeed on the new leader while the disk is still full, and
    once it has room the broker's replicas come back (no restart) and catch up."""
    from confluent_kafka import Producer

    with NetCluster(lab, tmp_path) as cluster:
        create_topic(
            cluster.bootstrap,
            "spill",
            replica_assignment=[[3, 1, 2]],
            config={"min.insync.replicas": "2"},
        )
        wait_for_leaders(cluster.bootstrap, "spill", 1, isr_size=3)
        acked: list[int] = []

        def produce(n: int) -> None:
            def delivered(err, msg) -> None:  # noqa: ANN001
                if err is None:
                    acked.append(msg.offset())

            for i in range(n):  # 10 kB each: new pages, which a full disk cannot give
                producer.produce("spill", value=b"%d;" % i + b"x" * 10_000, on_delivery=delivered)
            assert producer.flush(60) == 0

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
        try:
            produce(100)
            filler = fill_disk(cluster, 3)
            try:
                before = len(acked)
                produce(100)  # on broker 3 until a write finds the disk full, then elsewhere
                assert len(acked) == before + 100
                state = zk_state(cluster, "spill", 0)
                assert state["leader"] in (1, 2) and 3 not in state["isr"], state
            finally:
                filler.unlink()
            produce(100)
        finally:
            close_producer(producer)  # before its cluster goes
        eventually(
            lambda: sorted(zk_state(cluster, "spill", 0)["isr"]) == [1, 2, 3],
            budget_s=60,
            what="broker 3 back in the ISR without a restart",
        )
        converged(cluster, {"spill": 1})
        assert len(acked) == 300 and len(set(acked)) == 300


def _fetch_answer_anywhere(b, group: str) -> int:  # noqa: ANN001
    """The committed offset, from the coordinator broker `b` names."""
    with socket.create_connection((b.host, b.port), timeout=10) as sock:
        found = roundtrip(sock, request_of(10, key=group, key_type=0), 3)
    if found.error_code:
        return -1
    code, partition_code, offset = _fetch_answer(found.host, found.port, group)
    return offset if not code and not partition_code else -1


def _commit_anywhere(cluster: NetCluster, group: str, offset: int) -> bool:
    """Commit on whichever broker is the group's coordinator (FindCoordinator first: it
    creates __consumer_offsets)."""
    for b in cluster.brokers.values():
        try:
            with socket.create_connection((b.host, b.port), timeout=10) as sock:
                roundtrip(sock, request_of(10, key=group, key_type=0), 3)
            if _commit(b.host, b.port, group, offset) == 0:
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("victim_is", ["a leader", "the controller"])
def test_a_leader_killed_while_zookeeper_is_down_is_replaced_before_its_session_ends(
    lab, tmp_path, victim_is
):
    """kill -9 of a leader while ZooKeeper is down for 4 s, longer than
    broker.session.timeout.ms (3 s in the nemesis cluster). Its registration outlives
    ZooKeeper's return by a session timeout (6 s); the partition must have its new
    leader, from the ISR, while that registration is still there.
    - A leader that is not the controller: the controller fenced the silent broker.
      Without fencing it is elected only once the registration ends (this case fails so
      on the code before fencing).
    - The controller itself: its /controller outlives ZooKeeper's return as long, and
      nobody else may be controller meanwhile; the other brokers, unheard by it for the
      session timeout, vote it out through ZooKeeper (controller_votes.py) and the new
      controller fences it at once (this case fails so on the code before the votes)."""
    with NetCluster(lab, tmp_path) as cluster:
        assert cluster.zookeeper is not None
        controller = controller_id(cluster)
        if victim_is == "the controller":
            victim = controller
        else:
            victim = next(b for b in sorted(cluster.brokers) if b != controller)
        others = [b for b in sorted(cluster.brokers) if b != victim]
        create_topic(cluster.bootstrap, "zkdown", replica_assignment=[[victim, *others]])
        wait_for_leaders(cluster.bootstrap, "zkdown", 1, isr_size=3)
        before = zk_state(cluster, "zkdown", 0)
        assert before["leader"] == victim

        cluster.zookeeper.kill()
        cluster.brokers[victim].kill()
        time.sleep(4)
        cluster.zookeeper.start_again()

        view = ZooKeeperView(cluster.zookeeper.connect, "/kafka")
        try:
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, "no new leader within 60 s"
                # The state first, then the registration: a new leader read before the
                # registration is seen still there was elected while it was.
                state = view.json("/brokers/topics/zkdown/partitions/0/state")
                registered = view.exists(f"/brokers/ids/{victim}") is not None
                if state["leader"] != victim:
                    break
                assert registered, (
                    f"broker {victim}'s registration ended before its partition was "
                    f"elected away: {state}"
                )
                time.sleep(0.1)
            assert registered, (
                f"the new leader {state['leader']} was not seen before broker {victim}'s "
                "registration ended"
            )
        except AssertionError:
            save_logs(cluster, tmp_path)  # broker-N.log: the log dirs are tmpfs mounts
            raise
        finally:
            view.close()
        assert state["leader"] in others
        assert state["leader_epoch"] > before["leader_epoch"]
        assert victim not in state["isr"] and set(state["isr"]) <= set(others)
