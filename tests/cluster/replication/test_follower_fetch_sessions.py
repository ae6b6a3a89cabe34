"""Followers fetch in incremental fetch sessions (KIP-227), as Kafka's replica fetchers do.

A follower's first fetch from a leader names every partition it follows and opens a
session; later fetches name only partitions whose fetch offset, log start or epoch
changed, and the leader answers only partitions with news. The leader still counts every
partition of the session as fetched at the offset last named (its ISR), so an idle
partition keeps its followers in sync. A leader that restarts has lost the session: the
followers fetch in full again and replication goes on.

Checked on three real brokers (the test is the controller), and on the wire by the test
acting as a follower (replica 4, a broker that never runs) to see exactly what the leader
answers.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable

import pytest
from clustertest_helpers import isr_held
from replication_helpers import (
    NO_CONTROLLED_SHUTDOWN,
    ControllerStub,
    eventually,
    list_offset,
    produce,
    segment_bytes,
    take_controller,
    values_by_offset,
)
from wire import encode_request, read_response, request_of

from trio_broker.cluster.replication.fetch_session import (
    CachedPartition,
    FetchSessionCache,
    FetchSessionHandler,
)
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchTopic
from trio_broker.testing import KafkaCluster

LAG_MS = 2000
OVERRIDES = NO_CONTROLLED_SHUTDOWN | {
    "auto.create.topics.enable": "false",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "replica.lag.time.max.ms": str(LAG_MS),
}
FETCHER_LOGGER = "trio_broker.cluster.replication.replica_fetcher"
FAKE = 4  # the replica id the test fetches as


class FakeFollower:
    """Fetch v12 as replica FAKE, on one connection to the leader, in one session."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.session_id = 0
        self.epoch = 0
        self.correlation = 0

    def fetch(
        self,
        topic: str,
        offsets: dict[int, int],
        *,
        epoch: int | None = None,
        leader_epoch: int = -1,
        max_wait_ms: int = 0,
        meanwhile: Callable[[], None] | None = None,
    ) -> tuple[object, dict[int, object]]:
        """Names `offsets` (partition -> fetch offset, each with `leader_epoch`); returns
        the response and its partitions by index. The session's epoch advances on
        success. `meanwhile` runs once the request is sent, before its answer is read."""
        self.correlation += 1
        request = request_of(
            1,
            replica_id=FAKE,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=1 << 20,
            session_id=self.session_id,
            session_epoch=self.epoch if epoch is None else epoch,
            topics=[
                FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchPartition(
                            partition=p,
                            fetch_offset=o,
                            current_leader_epoch=leader_epoch,
                            partition_max_bytes=1 << 20,
                        )
                        for p, o in offsets.items()
                    ],
                )
            ]
            if offsets
            else [],
        )
        self.sock.sendall(encode_request(request, 12, self.correlation))
        if meanwhile is not None:
            meanwhile()
        correlation, response = read_response(self.sock, 1, 12)
        assert correlation == self.correlation
        if response.error_code == 0 and epoch is None:
            if self.epoch == 0:
                self.session_id = response.session_id
            self.epoch += 1
        parts = {p.partition_index: p for t in response.responses for p in t.partitions}
        return response, parts

    def close(self) -> None:
        self.sock.close()


def _count(data: object) -> int:
    return len(values_by_offset(bytes(data.records))) if data.records else 0


def _full_fetches(caplog, follower: int, leader: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == FETCHER_LOGGER
        and r.getMessage().startswith(f"follower {follower}: full fetch")
        and f"from broker {leader} " in r.getMessage()
    ]


@pytest.fixture
def cluster(zookeeper, tmp_path, zk_view):
    take_controller(zk_view)
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=OVERRIDES) as c:
        yield c


def test_followers_replicate_in_sessions_and_fetch_in_full_after_the_leader_restarts(
    cluster, zk_view, caplog
):
    caplog.set_level(logging.INFO, logger=FETCHER_LOGGER)
    ctl = ControllerStub(cluster, zk_view)

    # -- the leader's side, seen by a follower on the wire -------------------------------
    # replicas [1, 4]: broker 1 leads, "broker 4" is the test; the ISR starts as [1].
    ctl.create_topic("wire", {0: [1, FAKE], 1: [1, FAKE]})
    for p in (0, 1):
        ctl.elect("wire", p, 1, [1])
    ctl.send([("wire", 0), ("wire", 1)], to=[1])
    leader = cluster.brokers[1].bootstrap
    for p in (0, 1):
        assert produce(leader, "wire", p, [b"a", b"b", b"c"], acks=1).error_code == 0

    def isr(p: int) -> list[int]:
        return sorted(ctl.state_znode("wire", p)[0].isr)

    def joined(p: int) -> bool:
        # The leader's ISR, not only the znode: a record produced before the leader takes
        # the ISR it wrote would move the HW without 4.
        return isr(p) == isr_held(leader, "wire", p) == [1, FAKE]

    follower = FakeFollower(leader)
    try:
        # The full fetch opens a session and answers every partition named.
        response, parts = follower.fetch("wire", {0: 0, 1: 0})
        assert response.error_code == 0 and response.session_id != 0
        assert {p: _count(d) for p, d in parts.items()} == {0: 3, 1: 3}
        assert {p: d.high_watermark for p, d in parts.items()} == {0: 3, 1: 3}

        # Naming wire-0 only, at its end: 4 joins its ISR. wire-1, not named, is still
        # fetched at offset 0: its records come again, and 4 does not join there.
        response, parts = follower.fetch("wire", {0: 3})
        assert set(parts) == {1} and _count(parts[1]) == 3
        eventually(lambda: joined(0), budget_s=20, what="4 joins wire-0's ISR")
        assert isr(1) == [1]
        follower.fetch("wire", {1: 3})
        eventually(lambda: joined(1), budget_s=20, what="4 joins wire-1's ISR")

        # Nothing new: an incremental answer names no partition.
        response, parts = follower.fetch("wire", {})
        assert response.error_code == 0 and parts == {}

        # Records on wire-1: the next fetch, naming nothing, brings them from the offset
        # the session holds (the HW waits for 4); naming the new end moves the HW, which
        # the answer after carries alone. wire-0 has no news and is never answered.
        assert produce(leader, "wire", 1, [b"d", b"e"], acks=1).error_code == 0
        _, parts = follower.fetch("wire", {})
        assert set(parts) == {1}
        assert (_count(parts[1]), parts[1].high_watermark) == (2, 3)
        assert values_by_offset(bytes(parts[1].records)) == {3: b"d", 4: b"e"}
        _, parts = follower.fetch("wire", {1: 5})
        assert set(parts) == {1}
        assert (_count(parts[1]), parts[1].high_watermark) == (0, 5)
        assert list_offset(leader, "wire", 1).offset == 5

        # Fetching in the session, naming nothing, for longer than replica.lag.time.max.ms:
        # each fetch counts as one at the offset the session holds for every partition (as
        # Kafka's leader reads a session), so 4 has been caught up on wire-0 until now,
        # although it last named wire-0 long ago. So a record produced now leaves it a
        # whole replica.lag.time.max.ms to fetch it before it leaves the ISR, not none.
        deadline = time.monotonic() + 1.2 * LAG_MS / 1000
        while time.monotonic() < deadline:
            response, parts = follower.fetch("wire", {})
            assert (response.error_code, parts) == (0, {})
            time.sleep(0.1)
        assert isr(0) == isr(1) == [1, FAKE]
        assert produce(leader, "wire", 0, [b"f"], acks=1).error_code == 0
        produced = time.monotonic()
        while time.monotonic() < produced + 0.6 * LAG_MS / 1000:
            _, parts = follower.fetch("wire", {})
            assert set(parts) == {0} and _count(parts[0]) == 1  # offered until named
            assert isr(0) == [1, FAKE]
            time.sleep(0.1)
        _, parts = follower.fetch("wire", {0: 4})
        assert (set(parts), parts[0].high_watermark) == ({0}, 4)
        assert isr(0) == isr(1) == [1, FAKE]

        # A fetch that may wait, at the log end of every partition of its session, waits
        # (no answer before a produce), and a produce to one of them answers it.
        def no_answer_then_produce() -> None:
            follower.sock.settimeout(1.0)
            with pytest.raises(TimeoutError):
                follower.sock.recv(1, socket.MSG_PEEK)
            follower.sock.settimeout(30)
            assert produce(leader, "wire", 1, [b"g"], acks=1).error_code == 0

        _, parts = follower.fetch("wire", {}, max_wait_ms=25_000, meanwhile=no_answer_then_produce)
        assert set(parts) == {1}
        assert values_by_offset(bytes(parts[1].records)) == {5: b"g"}

        # Every partition's leader epoch is checked, answered at once: an older one is
        # fenced, a newer one unknown, the current one reads.
        current = ctl.states[("wire", 0)]["leader_epoch"]
        for named, error in [
            (current + 1, ErrorCode.UNKNOWN_LEADER_EPOCH),
            (current - 1, ErrorCode.FENCED_LEADER_EPOCH),
        ]:
            if named < 0:
                continue  # -1 names no epoch
            _, parts = follower.fetch("wire", {0: 4}, leader_epoch=named, max_wait_ms=25_000)
            assert parts[0].error_code == error, named
            if error == ErrorCode.FENCED_LEADER_EPOCH:
                assert parts[0].current_leader.leader_id == 1  # KIP-951 (fetch v12+)
        _, parts = follower.fetch("wire", {0: 3}, leader_epoch=current)
        assert parts[0].error_code == 0
        assert values_by_offset(bytes(parts[0].records)) == {3: b"f"}

        # A wrong epoch and an unknown session are refused, and nothing else is said.
        response, _ = follower.fetch("wire", {}, epoch=follower.epoch + 5)
        assert response.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        follower.session_id += 1
        response, _ = follower.fetch("wire", {})
        assert response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    finally:
        follower.close()
    # The follower gone, it leaves both ISRs once it is behind (a replica at the leader's
    # log end is in sync, fetching or not, as in Kafka).
    for p in (0, 1):
        assert produce(leader, "wire", p, [b"z"], acks=1).error_code == 0
    eventually(lambda: isr(0) == isr(1) == [1], budget_s=20, what="4 leaves the ISRs")

    # -- real followers --------------------------------------------------------------------
    ctl.create_topic("fs", {0: [1, 2, 3], 1: [1, 3, 2]}, {"min.insync.replicas": "2"})
    ctl.send([("fs", 0), ("fs", 1)])
    for node in (2, 3):
        eventually(
            lambda n=node: _full_fetches(caplog, n, 1), budget_s=20, what=f"{node}'s session"
        )
    opened = {n: len(_full_fetches(caplog, n, 1)) for n in (2, 3)}

    # Records produced once the sessions are open reach both followers byte for byte.
    for i in range(5):
        answer = produce(leader, "fs", 0, [f"r{i}-{j}".encode() for j in range(10)])
        assert (answer.error_code, answer.base_offset) == (0, 10 * i)
    leader_bytes = segment_bytes(cluster.brokers[1].log_dir, "fs", 0)
    assert len(values_by_offset(leader_bytes)) == 50
    for node in (2, 3):
        eventually(
            lambda n=node: segment_bytes(cluster.brokers[n].log_dir, "fs", 0) == leader_bytes,
            budget_s=20,
            what=f"replica {node} of fs-0",
        )
    # Neither ISR changed, and the followers went on in their sessions (no fetch in full
    # since the first).
    for p in (0, 1):
        state, version = ctl.state_znode("fs", p)
        assert (sorted(state.isr), version) == ([1, 2, 3], ctl.states[("fs", p)]["zk_version"])
    assert {n: len(_full_fetches(caplog, n, 1)) for n in (2, 3)} == opened

    # The leader restarts: its sessions are gone. The followers fetch in full again and
    # replicate what is produced after.
    cluster.brokers[1].restart()
    ctl.send([("fs", 0), ("fs", 1)], to=[1])
    for node in (2, 3):
        eventually(
            lambda n=node: len(_full_fetches(caplog, n, 1)) > opened[n],
            budget_s=30,
            what=f"{node} fetches in full from the restarted leader",
        )
    for p in (0, 1):
        answer = produce(leader, "fs", p, [b"after-1", b"after-2"])
        assert answer.error_code == 0, (p, answer)
    for p in (0, 1):
        leader_bytes = segment_bytes(cluster.brokers[1].log_dir, "fs", p)
        assert set(values_by_offset(leader_bytes).values()) >= {b"after-1", b"after-2"}
        for node in (2, 3):
            eventually(
                lambda n=node, p=p, b=leader_bytes: (
                    segment_bytes(cluster.brokers[n].log_dir, "fs", p) == b
                ),
                budget_s=30,
                what=f"replica {node} of fs-{p} after the restart",
            )


# -- the follower's session handler and the leader's cache, alone ---------------------------


def test_the_handler_sends_what_changed_and_starts_over_when_the_session_is_lost():
    h = FetchSessionHandler()
    first = h.build({"a": (0,), "b": (0,), "c": (0,)})
    assert (first.session_id, first.epoch, first.full) == (0, 0, True)
    assert list(first.to_send) == ["a", "b", "c"] and first.forgotten == []
    assert h.handle_response(0, 77)

    # Changed, added, gone, the same.
    inc = h.build({"a": (5,), "b": (0,), "d": (0,)})
    assert (inc.session_id, inc.epoch, inc.full) == (77, 1, False)
    assert inc.to_send == {"a": (5,), "d": (0,)} and inc.forgotten == ["c"]
    assert set(inc.session) == {"a", "b", "d"}
    assert h.handle_response(0, 77)
    idle = h.build({"a": (5,), "b": (0,), "d": (0,)})
    assert (idle.epoch, idle.to_send, idle.forgotten) == (2, {}, [])

    # No answer: close the session and open another, in full.
    h.handle_error()
    again = h.build({"a": (5,), "b": (0,)})
    assert (again.session_id, again.epoch, again.full) == (77, 0, True)
    assert again.to_send == {"a": (5,), "b": (0,)}
    assert h.handle_response(0, 78)
    assert h.build({"a": (5,), "b": (0,)}).epoch == 1

    # A wrong epoch: close and open again; an unknown session: open a new one.
    assert not h.handle_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    assert (h.session_id, h.epoch) == (78, 0)
    h.build({"a": (5,)})
    assert not h.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert (h.session_id, h.epoch) == (0, 0)
    # A leader that keeps no session: every fetch is full.
    h.build({"a": (5,)})
    assert h.handle_response(0, 0)
    assert h.build({"a": (5,)}).full


def test_consumer_sessions_never_evict_a_followers():
    cache = FetchSessionCache(max_sessions=3)

    def part() -> list[CachedPartition]:
        return [
            CachedPartition(
                topic="t", partition=0, topic_id=None, fetch_offset=0, partition_max_bytes=1
            )
        ]

    follower = cache.new_session(part(), privileged=True)
    consumers = [cache.new_session(part()) for _ in range(2)]
    for _ in range(5):
        consumers.append(cache.new_session(part()))
    assert cache.incremental(follower.id, 1) is follower
    assert len(cache) == 3
    # Only followers' sessions left: the least recently used goes.
    cache = FetchSessionCache(max_sessions=1)
    old = cache.new_session(part(), privileged=True)
    new = cache.new_session(part(), privileged=True)
    with pytest.raises(KafkaError) as refused:
        cache.incremental(old.id, 1)
    assert refused.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.incremental(new.id, 1) is new


def test_a_joining_follower_counts_for_the_hw_before_zookeeper_answers_its_isr_write(
    cluster, zk_view, zookeeper
):
    """The leader writes ISR [1, 4] once 4 has caught up, and takes it when ZooKeeper
    answers. Until then the znode may name 4, and a controller may elect it, so the HW
    waits for 4 as well (Kafka's maximal ISR): a record 4 lacks is not acknowledged to
    acks=all nor readable. ZooKeeper is stopped (SIGSTOP) across that window."""
    ctl = ControllerStub(cluster, zk_view)
    ctl.create_topic("join", {0: [1, FAKE]})
    ctl.elect("join", 0, 1, [1])
    ctl.send([("join", 0)], to=[1])
    leader = cluster.brokers[1].bootstrap
    assert produce(leader, "join", 0, [b"a", b"b", b"c"], acks=1).error_code == 0

    follower = FakeFollower(leader)
    try:
        follower.fetch("join", {0: 0})
        os.kill(zookeeper.proc.pid, signal.SIGSTOP)
        try:
            # At the log end: 4 may join, and the leader writes the ISR (unanswered).
            follower.fetch("join", {0: 3})
            assert produce(leader, "join", 0, [b"d", b"e"], acks=1).error_code == 0
            assert list_offset(leader, "join", 0).offset == 3  # 4 lacks 3-4
            waited = produce(leader, "join", 0, [b"f"], acks=-1, timeout_ms=1000)
            assert (waited.error_code, waited.base_offset) == (ErrorCode.REQUEST_TIMED_OUT, 5)
            # 4 fetches them: they are committed.
            _, parts = follower.fetch("join", {0: 6})
            assert parts[0].high_watermark == 6
            assert list_offset(leader, "join", 0).offset == 6
        finally:
            os.kill(zookeeper.proc.pid, signal.SIGCONT)
        eventually(
            lambda: (
                sorted(ctl.state_znode("join", 0)[0].isr)
                == isr_held(leader, "join", 0)
                == [1, FAKE]
            ),
            budget_s=20,
            what="the ISR written and taken",
        )
        assert produce(leader, "join", 0, [b"g"], acks=1).error_code == 0
        _, parts = follower.fetch("join", {0: 7})
        assert parts[0].high_watermark == 7
    finally:
        follower.close()
