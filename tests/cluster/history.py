"""A Jepsen-style history: what clients were told and what they read, and a checker.

The workload, each part on its own thread, recording with wall-clock times:

    acks=all   an idempotent confluent-kafka producer (failover_helpers.CountingProducer)
    acks=1     `DirectProducer`: one record per Produce request on one socket to one
               broker, no retries and no leader discovery, so each acknowledgement is that
               broker's own word
    reads      `TailingConsumer`: a read_uncommitted consumer following every partition
               from the start, recording (partition, offset, value) as it goes
    txns       `TransactionalProducer`: transactions over every partition of a topic of
               their own, committed and aborted in turn
    offsets    `CommittedOffsets`: a group member committing every 100 ms, and an observer
               reading the group's committed offsets

`check(...)` then proves, on the final state read from the cluster:

- every acks=all acknowledgement is read back exactly once, at its acknowledged offset;
- each partition's offsets are contiguous from its start (no gap a client was not told of);
- the tailing consumer never saw an offset go back, and everything it read is still there
  (it reads below the high watermark: nothing it saw may be truncated);
- every replica of a partition holds the same bytes;
- read_committed sees every committed transaction whole, no aborted one, and of each
  transaction whose end the client never learned, all of it or nothing;
- the group's committed offsets never went back, unless the member itself committed the
  older offset again after the newer one was read (its async commits, retried);
- acks=1 records that were lost, and how many of them a broker acknowledged after it had
  logged that its ZooKeeper session expired (Kafka's documented window ends there: none).

It returns the figures (losses, acknowledgement gaps) for the test to assert or print.
"""

from __future__ import annotations

import datetime
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
from confluent_kafka import Consumer, TopicPartition
from failover_helpers import close_producer, log_bytes, read_all
from wire import request_of, roundtrip

from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch

__all__ = [
    "CommittedOffsets",
    "DirectProducer",
    "Report",
    "TailingConsumer",
    "TransactionalProducer",
    "batch_table",
    "check",
    "log_time",
]


class _Worker:
    """A part of the workload on a thread of its own: `with` starts it, leaving stops it."""

    join_s = 60.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.join_s)

    def _run(self) -> None:
        raise NotImplementedError


class DirectProducer(_Worker):
    """acks=1 (or 0, or -1) Produce requests of one record each to partition `partition`
    of `topic`, on one socket to one broker, every `interval_s`; records
    (time, error code, offset, value) for every answer. A broken or silent socket is
    opened again (a timeout counts as no answer)."""

    def __init__(
        self,
        host: str,
        port: int,
        topic: str,
        *,
        partition: int = 0,
        acks: int = 1,
        interval_s: float = 0.005,
        prefix: bytes = b"a1",
    ) -> None:
        self.address = (host, port)
        self.topic, self.partition, self.acks = topic, partition, acks
        self.interval_s = interval_s
        self.prefix = prefix
        self.answers: list[tuple[float, int, int, bytes]] = []
        super().__init__()

    @property
    def acked(self) -> list[tuple[float, int, bytes]]:
        """(time, offset, value) of every acknowledged record."""
        return [(t, o, v) for t, code, o, v in self.answers if code == 0]

    def _run(self) -> None:
        sock: socket.socket | None = None
        n = cid = 0
        while not self._stop.is_set():
            try:
                if sock is None:
                    sock = socket.create_connection(self.address, timeout=2)
                value = b"%s-%d" % (self.prefix, n)
                n += 1
                cid += 1
                batch = build_batch([(None, value, (), int(time.time() * 1000))])
                data = [
                    TopicProduceData(
                        name=self.topic,
                        partition_data=[PartitionProduceData(index=self.partition, records=batch)],
                    )
                ]
                request = request_of(0, acks=self.acks, timeout_ms=2000, topic_data=data)
                response = roundtrip(sock, request, 9, correlation_id=cid)
                part = response.responses[0].partition_responses[0]
                self.answers.append((time.time(), part.error_code, part.base_offset, value))
            except (OSError, AssertionError, ValueError):
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.05)
                continue
            time.sleep(self.interval_s)
        if sock is not None:
            sock.close()


class TailingConsumer(_Worker):
    """A read_uncommitted consumer following `partitions` of `topic` from offset 0."""

    def __init__(self, bootstrap: str, topic: str, partitions: Iterable[int]) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.partitions = list(partitions)
        self.reads: list[tuple[int, int, bytes]] = []
        super().__init__()

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tail-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        try:
            consumer.assign([TopicPartition(self.topic, p, 0) for p in self.partitions])
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                self.reads.append((msg.partition(), msg.offset(), msg.value()))
        finally:
            consumer.close()


class TransactionalProducer(_Worker):
    """Transactions on a thread, each writing `per_partition` records to every partition of
    `topic`, committing the even ones and aborting the odd ones. What commit_transaction
    acknowledged goes to `committed`, what abort_transaction acknowledged to `aborted`, a
    transaction whose end the client could not learn to `uncertain` (a list per
    transaction: all of it or none may be visible, never part)."""

    join_s = 180.0  # a transaction's end may take its timeout

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, per_partition: int = 2):
        self.bootstrap, self.topic = bootstrap, topic
        self.partitions, self.per_partition = partitions, per_partition
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []
        self.uncertain: list[list[bytes]] = []
        self.ended: list[float] = []  # time.monotonic() of each end the client learned
        self.failure: BaseException | None = None
        super().__init__()

    def ended_after(self, moment: float) -> bool:
        return self.failure is not None or any(x > moment for x in self.ended)

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"{self.topic}-writer",
                "transaction.timeout.ms": 10000,
                "linger.ms": 5,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        try:
            producer.init_transactions(120)
        except BaseException:
            close_producer(producer)
            raise
        return producer

    def _end(self, producer: Any, commit: bool) -> bool:
        """True if the transaction ended as asked, False if it had to be aborted."""
        from confluent_kafka import KafkaException

        for _attempt in range(30):
            try:
                (producer.commit_transaction if commit else producer.abort_transaction)(30)
                return True
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable():
                    continue  # librdkafka: call the same method again
                if err.txn_requires_abort():
                    producer.abort_transaction(30)
                    return False
                raise
        raise RuntimeError("the transaction never ended")

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        producer = None
        try:
            producer = self._producer()
            k = 0
            while not self._stop.is_set():
                commit = k % 2 == 0
                values = [
                    (p, b"t%d-p%d-%d" % (k, p, i))
                    for i in range(self.per_partition)
                    for p in range(self.partitions)
                ]
                k += 1
                try:
                    producer.begin_transaction()
                    for p, value in values:
                        producer.produce(self.topic, value, partition=p)
                    ended = self._end(producer, commit)
                except KafkaException:
                    # Fatal, or the end itself failed: a new producer with the same id
                    # fences this one, and the coordinator aborts what it left open.
                    self.uncertain.append([v for _, v in values])
                    # Closed, not just dropped: the exception's frames may outlive it.
                    close_producer(producer)
                    producer = None
                    producer = self._producer()
                    continue
                (self.committed if commit and ended else self.aborted).extend(v for _, v in values)
                self.ended.append(time.monotonic())
        except BaseException as exc:  # reported by the checker
            self.failure = exc.with_traceback(None)
        finally:
            if producer is not None:
                close_producer(producer)


class CommittedOffsets:
    """A consumer group member on `topic` committing its position every 100 ms, and an
    observer reading the group's committed offsets (OffsetFetch) every 100 ms: `seen`
    keeps every (time, partition, offset) the observer was told, `acked` every (time,
    partition, offset) of a commit the member was told succeeded.

    The member commits asynchronously, as many applications do, and librdkafka retries
    an async commit that failed with a retriable error (NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT) on the coordinator of the moment, so a
    commit of an older position can reach the new coordinator after a newer one and
    overwrite it (Kafka's broker takes any commit of the member's generation; Java's
    consumer does not retry async commits for this reason). `acked` lets the checker
    tell that apart from a coordinator that served an offset it no longer owned."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.group = f"committer-{time.monotonic_ns()}"
        self.seen: list[tuple[float, int, int]] = []
        self.acked: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._member, daemon=True),
            threading.Thread(target=self._observer, daemon=True),
        ]

    def __enter__(self) -> CommittedOffsets:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _member(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
                "on_commit": self._on_commit,
            }
        )
        try:
            consumer.subscribe([self.topic])
            last = time.monotonic()
            while not self._stop.is_set():
                consumer.poll(0.05)
                if time.monotonic() - last > 0.1:
                    last = time.monotonic()
                    try:
                        consumer.commit(asynchronous=True)
                    except Exception:  # nothing consumed yet, or no coordinator now
                        pass
        finally:
            consumer.close()

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        # On the member's thread, from poll(): soon after the answer, never before it.
        now = time.time()
        if err is None:
            self.acked.extend(
                (now, tp.partition, tp.offset)
                for tp in partitions
                if tp.error is None and tp.offset >= 0
            )

    def _observer(self) -> None:
        observer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group})
        try:
            while not self._stop.is_set():
                try:
                    got = observer.committed(
                        [TopicPartition(self.topic, p) for p in range(self.partitions)], 5
                    )
                except Exception:  # the coordinator moving: asked again
                    got = []
                now = time.time()
                self.seen.extend((now, tp.partition, tp.offset) for tp in got if tp.offset >= 0)
                time.sleep(0.1)
        finally:
            observer.close()


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def batch_table(log_dir: Path, topic: str, partition: int) -> str:
    """One line per record batch of a replica's segment files, in offset order: offsets,
    partition leader epoch, producer id, epoch and sequences, and its first and last
    values (uncompressed batches), for a post-mortem of a lost or doubled record."""
    from trio_broker.protocol.record_codec import iter_records
    from trio_broker.protocol.records import iter_batches

    lines = []
    data = log_bytes(log_dir, topic, partition)
    for pos, h in iter_batches(data):
        values = ""
        try:
            records = list(iter_records(memoryview(data)[pos : pos + h.size]))
            if records:
                values = f" values {records[0].value!r}..{records[-1].value!r}"
        except Exception as exc:  # noqa: BLE001 - a post-mortem shows what it can
            values = f" values unreadable: {exc}"
        last_seq = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
        lines.append(
            f"{h.base_offset}-{h.base_offset + h.last_offset_delta} epoch "
            f"{h.partition_leader_epoch} pid {h.producer_id} pepoch {h.producer_epoch} "
            f"seq {h.base_sequence}-{last_seq} count {h.record_count}{values}"
        )
    return "\n".join(lines) + "\n"


def log_time(line: str) -> float | None:
    """The wall-clock time (time.time()) of a broker log line."""
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    moment = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return moment.timestamp()


def first_line_time(lines: Iterable[str], pattern: str) -> float | None:
    for line in lines:
        if re.search(pattern, line):
            return log_time(line)
    return None


@attrs.frozen
class Report:
    acked_all: int  # acks=all acknowledgements, all read back once at their offsets
    acked_one: int  # acks=1 acknowledgements
    lost_one: int  # acks=1 acknowledged, then gone from the log
    lost_one_after_expiry: int  # of those, acknowledged after the broker knew
    longest_gap_s: float  # the longest a partition went without an acks=all acknowledgement
    reads: int  # records the tailing consumer read during the run
    transactions: int = 0  # transactions whose end the client learned
    offsets_seen: int = 0  # committed offsets the observer read
    # reads of a committed offset older than the read before, explained by the member's
    # own commit of that older offset acknowledged after the earlier read
    offsets_rewritten: int = 0
    rewrites: tuple[str, ...] = ()  # each of those: the reads and the commit's acknowledgement
    # the longest gap's partition and its two ends as wall-clock times (the brokers' log
    # lines' clock), for a timeline against the brokers' logs; None without acknowledgements
    gap_at: tuple[int, str, str] | None = None
    # every gap of 4 s or more: (partition, start, end, seconds), wall clock as above
    long_gaps: tuple[tuple[int, str, str, float], ...] = ()


def check(
    *,
    bootstrap: str,
    topic: str,
    partitions: int,
    acked: list[tuple[int, int, bytes]],
    ack_times: list[float],
    replicas: Mapping[int, Path],
    direct: Mapping[str, tuple[DirectProducer, list[tuple[float, float]]]] = {},  # noqa: B006
    tail: TailingConsumer | None = None,
    window: tuple[float, float] | None = None,
    txn: TransactionalProducer | None = None,
    offsets: CommittedOffsets | None = None,
) -> Report:
    """See the module docstring. `replicas`: broker id -> its log dir (every replica of
    every partition of `topic` and of the direct producers' topics is compared);
    `direct`: topic -> (its DirectProducer, the spans (wall clock) in which its broker knew
    its last session had ended: from registering again after a fault until the next fault
    on it); `window`: (start, end) in time.monotonic() for the longest gap."""
    from failover_helpers import high_watermarks

    ends = high_watermarks(bootstrap, topic, range(partitions))
    final = read_all(bootstrap, topic, ends)
    at = {(p, o): v for p, records in final.items() for o, v in records}

    # librdkafka reports some deliveries without their offset: a batch answered with an
    # error that may follow its append (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    # while the next batch in flight then succeeds is "implicitly acked" by that success,
    # offset unknown (failover_helpers.assert_every_ack_read_once). Those must be somewhere
    # in their partition (and, below, only once).
    where = {(p, v) for (p, _), v in at.items()}
    missing = [
        (p, o, v)
        for p, o, v in acked
        if (at.get((p, o)) != v if o is not None else (p, v) not in where)
    ]
    assert not missing, f"{len(missing)} of {len(acked)} acks=all records lost: {missing[:5]}"
    counts: dict[bytes, int] = {}
    for v in at.values():
        counts[v] = counts.get(v, 0) + 1
    doubled = [v for _, _, v in acked if counts.get(v, 0) != 1]
    if doubled:
        # Where each copy sits (partition/offset) and where it was acknowledged: with the
        # replicas' batch tables (`batch_table`), which batches, leader epochs and producer
        # sequences the copies are.
        copies = {v: sorted(po for po, w in at.items() if w == v) for v in doubled[:5]}
        told = {v: (p, o) for p, o, v in acked if v in copies}
        raise AssertionError(
            f"{len(doubled)} acks=all records read more than once: "
            + "; ".join(f"{v!r} at {copies[v]}, acknowledged at {told[v]}" for v in copies)
        )

    for p, records in final.items():
        read_offsets = [o for o, _ in records]
        gaps = [(a, b) for a, b in zip(read_offsets, read_offsets[1:], strict=False) if b != a + 1]
        assert not gaps, f"partition {p} skips offsets: {gaps[:5]}"

    if tail is not None:
        last: dict[int, int] = {}
        for p, o, v in tail.reads:
            assert o > last.get(p, -1), f"partition {p} went back from {last[p]} to {o}"
            last[p] = o
            assert at.get((p, o)) == v, f"read {v!r} at {p}/{o} during the run, then it was gone"

    lost_one = lost_after = acked_one = 0
    for direct_topic, (producer, knew) in direct.items():
        acks = producer.acked
        acked_one += len(acks)
        d_ends = high_watermarks(bootstrap, direct_topic, [producer.partition])
        d_final = read_all(bootstrap, direct_topic, d_ends)[producer.partition]
        d_at = dict(d_final)
        for t, o, v in acks:
            if d_at.get(o) != v:
                lost_one += 1
                if any(start < t < end for start, end in knew):
                    lost_after += 1

    counts_of = {topic: partitions, **dict.fromkeys(direct, 1)}
    if txn is not None:
        counts_of[txn.topic] = txn.partitions
    for t, count in counts_of.items():
        for p in range(count):
            copies = {
                b: log_bytes(d, t, p) for b, d in replicas.items() if (d / f"{t}-{p}").exists()
            }
            first = next(iter(copies.values()), b"")
            differ = [b for b, data in copies.items() if data != first]
            assert not differ, (
                f"{t}-{p}: replicas {sorted(copies)} differ ({differ} from the first)"
            )

    transactions = 0
    if txn is not None:
        assert txn.failure is None, f"the transactional producer failed: {txn.failure!r}"
        from failover_helpers import read_committed

        visible = read_committed(bootstrap, txn.topic, txn.partitions, set(txn.committed))
        values = [v for vs in visible.values() for v in vs]
        seen = set(values)
        assert len(values) == len(seen), "a transactional record was read twice"
        missing = [v for v in txn.committed if v not in seen]
        assert not missing, f"{len(missing)} committed records invisible: {missing[:5]}"
        shown = [v for v in txn.aborted if v in seen]
        assert not shown, f"{len(shown)} aborted records visible: {shown[:5]}"
        for values_of_one in txn.uncertain:
            inside = sum(1 for v in values_of_one if v in seen)
            assert inside in (0, len(values_of_one)), f"a transaction half visible: {values_of_one}"
        transactions = (len(txn.committed) + len(txn.aborted)) // (
            txn.partitions * txn.per_partition
        )
        assert transactions > 0, "no transaction ended"

    rewrites: list[str] = []
    if offsets is not None:
        # A committed offset is a register the member writes: a read may return an older
        # value than a read before it only if the member itself wrote that value again
        # in between, i.e. a commit of exactly it was acknowledged after the earlier read
        # and by the later one (librdkafka's retried async commit, see CommittedOffsets).
        # Anything else is a coordinator serving what it no longer owns, or a lost commit
        # (the member's fresh commits are of its position, past the newer offset).
        acks_of: dict[tuple[int, int], list[float]] = {}
        for at, p, o in offsets.acked:
            acks_of.setdefault((p, o), []).append(at)
        last_offset: dict[int, tuple[float, int]] = {}
        for at, p, o in offsets.seen:
            before_at, before = last_offset.get(p, (0.0, -1))
            if o < before:
                # Acknowledged after the first read, and by the time of the second (its
                # callback runs on the member's next poll: a second of slack).
                rewritten = [t for t in acks_of.get((p, o), []) if before_at < t < at + 1.0]
                assert rewritten, (
                    f"group {offsets.group}: offset of {p} went back: {before} (read at "
                    f"{_clock(before_at)}) -> {o} (read at {_clock(at)}), and the member "
                    f"committed {o} again after the first read in none of its acknowledged "
                    f"commits; acknowledged around then: "
                    + ", ".join(
                        f"{c} at {_clock(t)}"
                        for t, q, c in offsets.acked
                        if q == p and before_at - 2 <= t <= at + 2
                    )
                )
                rewrites.append(
                    f"{p}: {before} (read at {_clock(before_at)}) -> {o} (read at "
                    f"{_clock(at)}; committed again at {_clock(rewritten[0])})"
                )
            last_offset[p] = (at, o)

    # The longest time a partition went without an acks=all acknowledgement.
    by_partition: dict[int, list[float]] = {}
    for (p, _, _), at_time in zip(acked, ack_times, strict=False):
        by_partition.setdefault(p, []).append(at_time)
    gap = 0.0
    gap_at = None
    long_gaps: list[tuple[int, str, str, float]] = []
    wall = time.time() - time.monotonic()  # ack_times are monotonic; logs are wall clock
    for p, times in sorted(by_partition.items()):
        times.sort()
        if window is not None:
            start, end = window
            times = [start, *(x for x in times if start <= x <= end), end]
        for a, b in zip(times, times[1:], strict=False):
            if b - a >= 4.0:
                long_gaps.append((p, _clock(a + wall), _clock(b + wall), round(b - a, 2)))
            if b - a > gap:
                gap, gap_at = b - a, (p, _clock(a + wall), _clock(b + wall))
    return Report(
        acked_all=len(acked),
        acked_one=acked_one,
        lost_one=lost_one,
        lost_one_after_expiry=lost_after,
        longest_gap_s=gap,
        gap_at=gap_at,
        long_gaps=tuple(sorted(long_gaps, key=lambda g: g[1])),
        reads=len(tail.reads) if tail is not None else 0,
        transactions=transactions,
        offsets_seen=len(offsets.seen) if offsets is not None else 0,
        offsets_rewritten=len(rewrites),
        rewrites=tuple(rewrites),
    )


def _clock(at: float) -> str:
    """A wall-clock time as the brokers' log lines show it."""
    return time.strftime("%H:%M:%S", time.localtime(at)) + f",{int(at % 1 * 1000):03d}"
