"""Transactions in a 3-broker cluster (real ZooKeeper, broker processes, confluent-kafka).

A transactional producer commits and aborts in turn across six partitions led by the three
brokers, so its coordinator sends most markers to other brokers (WriteTxnMarkers); the
coordinator's broker is killed (kill -9) mid-stream and the new leader of its
`__transaction_state` partition completes or aborts what was left. A read_committed
consumer then reads every committed record once, in order per partition, and nothing that
was aborted.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from clustertest_helpers import FAST_SESSION, eventually
from confluent_kafka import KafkaException, Producer
from failover_helpers import create_topic, partitions, read_committed, wait_for_leaders

from trio_broker.cluster.transactions.records import partition_for
from trio_broker.testing import KafkaCluster

TOPIC = "payments"
PARTITIONS = 6
STATE_PARTITIONS = 3
TXN_ID = "payments-writer"
PER_PARTITION = 3  # records of each transaction in each partition
KILL_DELAY_S = 0.01  # after the records are in: EndTxn is on its way


class TransactionalRunner:
    """Transactions on a thread, committing the even ones and aborting the odd ones. What
    commit_transaction acknowledged is `committed`; what abort_transaction acknowledged is
    `aborted`; a transaction whose outcome the client could not learn is `uncertain`."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []
        self.uncertain: list[bytes] = []
        self.finished = 0  # transactions with a known outcome
        self.finish_times: list[float] = []
        self.restarts = 0
        self.failure: BaseException | None = None
        # Set by the test: the runner sets `committing` just before its next commit.
        self.arm = threading.Event()
        self.committing = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": TXN_ID,
                "transaction.timeout.ms": 10000,
                "linger.ms": 5,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        producer.init_transactions(60)
        return producer

    def _finish(self, producer: Producer, commit: bool) -> bool:
        """True if the transaction ended as asked, False if it had to be aborted instead;
        raises when its outcome is unknown."""
        for _attempt in range(20):
            try:
                if commit:
                    producer.commit_transaction(30)
                else:
                    producer.abort_transaction(30)
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
        try:
            producer = self._producer()
            k = 0
            while not self._stop.is_set():
                commit = k % 2 == 0
                values = [
                    (p, b"t%05d-p%d-%d" % (k, p, i))
                    for i in range(PER_PARTITION)
                    for p in range(PARTITIONS)
                ]
                k += 1
                try:
                    producer.begin_transaction()
                    for p, value in values:
                        producer.produce(TOPIC, value, partition=p)
                    if commit and self.arm.is_set():
                        producer.flush(30)  # the records are in; EndTxn goes next
                        self.arm.clear()
                        self.committing.set()
                    ended = self._finish(producer, commit)
                except KafkaException:
                    # Fatal (or the abort itself failed): a new producer with the same id
                    # fences the old one, and the coordinator aborts what it left open.
                    self.uncertain.extend(v for _, v in values)
                    self.restarts += 1
                    producer = self._producer()
                    continue
                (self.committed if commit and ended else self.aborted).extend(v for _, v in values)
                self.finished += 1
                self.finish_times.append(time.monotonic())
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def __enter__(self) -> TransactionalRunner:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(120)


def test_coordinator_killed_mid_stream_every_committed_record_read_once(zookeeper, tmp_path):
    overrides = {
        **FAST_SESSION,
        "zookeeper.session.timeout.ms": "3000",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
        "transaction.state.log.min.isr": "2",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    }
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})
        leaders = wait_for_leaders(bootstrap, TOPIC, PARTITIONS, isr_size=3)
        assert {p.leader for p in leaders.values()} == {1, 2, 3}

        with TransactionalRunner(bootstrap) as runner:
            eventually(
                lambda: runner.failure or runner.finished >= 6,
                budget_s=60,
                what="the first transactions",
            )
            assert runner.failure is None, runner.failure
            state = partitions(bootstrap, "__transaction_state")
            assert len(state) == STATE_PARTITIONS
            coordinator = state[partition_for(TXN_ID, STATE_PARTITIONS)]
            assert len(coordinator.replicas) == 3
            runner.arm.set()
            assert runner.committing.wait(30)
            time.sleep(KILL_DELAY_S)
            before = runner.finished
            killed_at = time.monotonic()
            cluster.brokers[coordinator.leader].kill()  # as EndTxn reaches it
            eventually(
                lambda: runner.failure or runner.finished >= before + 6,
                budget_s=60,
                what="transactions under the new coordinator",
            )
        assert runner.failure is None, runner.failure

        live = next(b for b in cluster.brokers.values() if b.alive)
        moved = partitions(live.bootstrap, "__transaction_state")[
            partition_for(TXN_ID, STATE_PARTITIONS)
        ]
        assert moved.leader not in (-1, coordinator.leader)

        committed = set(runner.committed)
        read = read_committed(live.bootstrap, TOPIC, PARTITIONS, committed)
        values = [v for records in read.values() for v in records]
        missing = committed - set(values)
        assert not missing, f"{len(missing)} committed records lost: {sorted(missing)[:5]}"
        assert len(values) == len(set(values)), "a committed record was read twice"
        assert not set(values) & set(runner.aborted), "aborted records were read"
        unexplained = set(values) - committed - set(runner.uncertain)
        assert not unexplained, sorted(unexplained)[:5]
        for p, records in read.items():
            assert records == sorted(records), f"partition {p} out of order"
            assert all(b"-p%d-" % p in v for v in records)
        times = runner.finish_times
        rate = (before - 1) / (times[before - 1] - times[0])
        gap = min(t for t in times if t > killed_at) - killed_at
        print(
            f"{rate:.1f} transactions/s before the kill; the first one ended {gap:.2f} s "
            f"after it; "
            f"{runner.finished} transactions ({len(committed)} committed records, "
            f"{len(runner.aborted)} aborted, {len(runner.uncertain)} uncertain), "
            f"{runner.restarts} producer restarts; coordinator {coordinator.leader} killed, "
            f"{moved.leader} took over"
        )
