"""The broker's metrics, with the names Kafka's JMX exporter gives them in Prometheus.

Imported only when `metrics.listener` is set: a broker without it has `broker.metrics is
None`, and every hook on the hot paths is one `is not None` test.

Counting is plain Python arithmetic on the Trio thread (ints in dicts, fixed-bucket
histograms); nothing on the request path touches prometheus_client, whose `labels()`
takes a lock and hashes a tuple per call. `BrokerCollector.collect()` turns the counts,
and the state the broker already keeps (logs, groups, purgatory, connections, cluster
metadata), into metric families when Prometheus scrapes; the text is prometheus_client's.

A request's life, as Kafka's RequestChannel splits it (all in ms):

    start (frame read) -> dequeue (a handler takes it)          request queue time
    dequeue -> local (the handler returned)                     local time
    local -> response (answered; later for a parked request)    remote time (purgatory)
    response -> response dequeue (the connection has it)        response queue time
    response dequeue -> sent (written, or held to be written)   response send time
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trio_broker.broker import Broker

__all__ = ["BrokerMetrics", "RequestTiming", "HISTOGRAM_BOUNDS_MS"]

# Upper bounds of the latency buckets, in ms (the last bucket is +Inf).
HISTOGRAM_BOUNDS_MS: tuple[float, ...] = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
)

# Kafka's RequestMetrics names, in the order RequestTiming yields them.
TIME_METRICS = (
    "requestqueuetimems",
    "localtimems",
    "remotetimems",
    "responsequeuetimems",
    "responsesendtimems",
    "totaltimems",
)

clock = time.perf_counter


class RequestTiming:
    """Timestamps (perf_counter seconds) of one request's life; see the module docstring."""

    __slots__ = ("start", "dequeue", "local", "response", "response_dequeue")

    def __init__(self, start: float) -> None:
        self.start = start
        self.dequeue = start
        self.local = 0.0
        self.response = 0.0
        self.response_dequeue = 0.0

    def spans_ms(self, sent: float) -> tuple[float, float, float, float, float, float]:
        local = self.local or self.response  # answered from inside the handler
        response = self.response or local
        response_dequeue = self.response_dequeue or sent
        return (
            (self.dequeue - self.start) * 1000,
            (local - self.dequeue) * 1000,
            (response - local) * 1000,
            (response_dequeue - response) * 1000,
            (sent - response_dequeue) * 1000,
            (sent - self.start) * 1000,
        )


class Histogram:
    """Fixed buckets (HISTOGRAM_BOUNDS_MS); `counts[i]` is the count of bucket i alone."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(HISTOGRAM_BOUNDS_MS, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        out = []
        total = 0
        for bound, count in zip((*HISTOGRAM_BOUNDS_MS, None), self.counts, strict=True):
            total += count
            out.append(("+Inf" if bound is None else repr(bound), total))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)


class BrokerMetrics:
    """What the broker counts while metrics are on; read by BrokerCollector."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.messages_in: dict[str, int] = defaultdict(int)
        self.bytes_in: dict[str, int] = defaultdict(int)
        self.bytes_out: dict[str, int] = defaultdict(int)
        # What deleted topics counted (kept in the totals), by metric name.
        self.retired: dict[str, int] = defaultdict(int)
        self.requests: dict[tuple[int, int], int] = defaultdict(int)
        # api key -> one Histogram per TIME_METRICS name
        self.times: dict[int, tuple[Histogram, ...]] = {}
        # Replication increments these (Kafka's IsrShrinksPerSec / IsrExpandsPerSec).
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.flush_times = Histogram()
        self.started = clock()
        # (wall clock, the Trio thread's CPU time, handler busy time) at the last window.
        self._window: tuple[float, float | None, float] = (self.started, None, 0.0)
        self._idle_percent = (1.0, 1.0)

    # -- hooks on the request paths --------------------------------------------------------

    def new_timing(self) -> RequestTiming:
        return RequestTiming(clock())

    def produced(self, topic: str, records: int, nbytes: int) -> None:
        self.messages_in[topic] += records
        self.bytes_in[topic] += nbytes

    def fetched(self, topic: str, nbytes: int) -> None:
        self.bytes_out[topic] += nbytes

    def request_done(self, request: Any, response: Any, request_bytes: int) -> None:
        """The connection has written `request`'s answer (or has none to write)."""
        parsed = request.parsed
        self.observe(parsed.api_key, parsed.api_version, request.timing.spans_ms(clock()))

    def observe(self, api_key: int, api_version: int, spans: tuple[float, ...]) -> None:
        self.requests[(api_key, api_version)] += 1
        hists = self.times.get(api_key)
        if hists is None:
            hists = self.times[api_key] = tuple(Histogram() for _ in TIME_METRICS)
        for hist, value in zip(hists, spans, strict=True):
            hist.observe(value if value > 0 else 0.0)

    # -- derived at scrape time ------------------------------------------------------------

    def idle_percents(self) -> tuple[float, float]:
        """(network processor, request handler) idle fractions over the time since the
        previous scrape (at least a second; a quicker scrape sees the last values).

        Called on the Trio thread, which the processors share: their idle fraction is the
        share of wall time that thread was not on a CPU (its CPU time, per thread, so the
        worker threads' fsyncs are not counted), at no cost per loop iteration. The
        handlers' is one minus their summed local time over wall time times their number.
        """
        now = clock()
        cpu = time.thread_time()
        since, cpu_then, busy_then = self._window
        elapsed = now - since
        busy = sum(h[1].sum for h in self.times.values()) / 1000  # handler local time, s
        if cpu_then is None:
            self._window = (now, cpu, busy)
        elif elapsed >= 1.0:
            handlers = max(self.broker.config.num_io_threads, 1)
            network = 1.0 - min(max((cpu - cpu_then) / elapsed, 0.0), 1.0)
            handler = 1.0 - min(max((busy - busy_then) / (elapsed * handlers), 0.0), 1.0)
            self._idle_percent = (network, handler)
            self._window = (now, cpu, busy)
        return self._idle_percent


def api_names() -> dict[int, str]:
    from trio_broker.apis.registry import API_SPECS

    return {spec.api_key: spec.name for spec in API_SPECS}


class BrokerCollector:
    """A prometheus_client collector over a running broker (see the module docstring)."""

    def __init__(self, broker: Broker, server: Any) -> None:
        self.broker = broker
        self.server = server
        self._names = api_names()

    def collect(self) -> Iterator[Any]:
        yield from self._topic_metrics()
        yield from self._request_metrics()
        yield from self._network_metrics()
        yield from self._log_metrics()
        yield from self._replica_metrics()
        yield from self._group_metrics()

    def _topic_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        m = self.broker.metrics
        topics = self.broker.metadata.topics
        for name, counts, doc in (
            ("messagesin", m.messages_in, "Records appended by producers"),
            ("bytesin", m.bytes_in, "Record batch bytes appended by producers"),
            ("bytesout", m.bytes_out, "Record batch bytes sent to consumers"),
        ):
            # A deleted topic's series go, as Kafka removes its topic metrics; what it
            # counted stays in the total.
            for topic in [t for t in counts if t not in topics]:
                m.retired[name] += counts.pop(topic)
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"]
            )
            # The total without a topic label, as Kafka's topic-less BrokerTopicMetrics.
            total = sum(counts.values()) + m.retired[name]
            family.samples.append(
                _sample(f"kafka_server_brokertopicmetrics_{name}_total", {}, total)
            )
            for topic, value in sorted(counts.items()):
                family.add_metric([topic], value)
            yield family

    def _request_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        m = self.broker.metrics
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by API and version",
            labels=["request", "version"],
        )
        for (key, version), count in sorted(m.requests.items()):
            requests.add_metric([self._name(key), str(version)], count)
        yield requests
        for i, metric in enumerate(TIME_METRICS):
            family = HistogramMetricFamily(
                f"kafka_network_requestmetrics_{metric}",
                f"Kafka's RequestMetrics {metric}, by API (ms)",
                labels=["request"],
            )
            for key, hists in sorted(m.times.items()):
                hist = hists[i]
                family.add_metric([self._name(key)], hist.cumulative(), hist.sum)
            yield family

    def _name(self, key: int) -> str:
        return self._names.get(key, str(key))

    def _network_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

        m = self.broker.metrics
        network, handler = m.idle_percents()
        yield GaugeMetricFamily(
            "kafka_network_socketserver_networkprocessoravgidlepercent",
            "Fraction of time the processors (the event loop) wait for I/O",
            value=network,
        )
        yield GaugeMetricFamily(
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
            "Fraction of time the request handler tasks are idle",
            value=handler,
        )
        connections = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Open connections, by listener and network processor",
            labels=["listener", "networkProcessor"],
        )
        for processor in self.server.processors:
            by_listener: dict[str, int] = defaultdict(int)
            for bound in self.server.bound:
                by_listener[bound.listener.name] = 0
            for connection in processor.connections:
                by_listener[connection.listener] += 1
            for listener, count in sorted(by_listener.items()):
                connections.add_metric([listener, str(processor.index)], count)
        yield connections
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting in a purgatory",
            labels=["delayedOperation"],
        )
        for label, attr in (("Fetch", "fetch_purgatory"), ("Produce", "produce_purgatory")):
            p = getattr(self.broker, attr, None)
            purgatory.add_metric([label], p.delayed if p is not None else 0)
        yield purgatory
        flush = HistogramMetricFamily(
            "kafka_log_logflushstats_logflushrateandtimems",
            "Time of log flushes, by flush.messages and flush.ms (ms)",
        )
        flush.add_metric([], m.flush_times.cumulative(), m.flush_times.sum)
        yield flush

    def _log_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes of a partition's segments", labels=labels
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "A partition's log start offset", labels=labels
        )
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "A partition's log end offset", labels=labels
        )
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "A partition's segment count", labels=labels
        )
        for (topic, partition), log in sorted(self.broker.log_manager.logs.items()):
            tp = [topic, str(partition)]
            size.add_metric(tp, log.size_in_bytes)
            start.add_metric(tp, log.log_start_offset)
            end.add_metric(tp, log.log_end_offset)
            segments.add_metric(tp, len(log.segments))
        yield from (size, start, end, segments)

    def _replica_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        broker = self.broker
        node = broker.node_id
        metadata = broker.metadata
        live = set(metadata.brokers)
        partitions = leaders = under = under_min = offline = 0
        for topic in metadata.topics.values():
            min_isr = int(
                topic.configs.get("min.insync.replicas", broker.config.min_insync_replicas)
            )
            for p in topic.partitions.values():
                if p.leader < 0 or p.leader not in live:
                    offline += 1
                if node in p.replicas or p.leader == node:
                    partitions += 1
                if p.leader == node:
                    leaders += 1
                    if len(p.isr) < len(p.replicas):
                        under += 1
                    if len(p.isr) < min_isr:
                        under_min += 1
        prefix = "kafka_server_replicamanager_"
        for name, value, doc in (
            ("partitioncount", partitions, "Partitions with a replica on this broker"),
            ("leadercount", leaders, "Partitions this broker leads"),
            ("underreplicatedpartitions", under, "Led partitions whose ISR lacks a replica"),
            ("underminisrpartitioncount", under_min, "Led partitions under min.insync.replicas"),
        ):
            yield GaugeMetricFamily(prefix + name, doc, value=value)
        # A cluster's replica manager counts them; a lone broker's ISR never changes.
        counts = getattr(broker, "replica_manager", None) or broker.metrics
        yield CounterMetricFamily(prefix + "isrshrinks", "ISR shrinks", value=counts.isr_shrinks)
        yield CounterMetricFamily(prefix + "isrexpands", "ISR expands", value=counts.isr_expands)
        quotas = getattr(broker, "_replication_quotas", None)
        if quotas is not None:
            # Kafka's LeaderReplication / FollowerReplication / AlterLogDirsReplication
            # byte-rate (the rate each replication quota measures), and the bytes counted.
            for kind, quota in (
                ("leaderreplication", quotas.leader),
                ("followerreplication", quotas.follower),
                ("alterlogdirsreplication", quotas.alter_log_dirs),
            ):
                yield GaugeMetricFamily(
                    f"kafka_server_{kind}_byte_rate",
                    "Bytes per second of throttled replication, as its quota measures them",
                    value=quota.measured_rate(),
                )
                yield CounterMetricFamily(
                    f"kafka_server_{kind}_throttled_bytes",
                    "Bytes counted against this replication quota",
                    value=quota.recorded,
                )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a live leader",
            value=offline,
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the controller",
            value=1 if metadata.controller_id == node else 0,
        )

    def _group_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from trio_broker.cluster.groups.group_metadata import GroupState

        coordinator = getattr(self.broker, "group_coordinator", None)
        groups = dict(coordinator.groups) if coordinator is not None else {}
        by_state = {state: 0 for state in GroupState}
        for group in groups.values():
            by_state[group.state] += 1
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield GaugeMetricFamily(
            prefix + "numgroups", "Groups this coordinator owns", value=len(groups)
        )
        for state, count in by_state.items():
            yield GaugeMetricFamily(
                prefix + "numgroups" + state.value.lower(),
                f"Groups in state {state.value}",
                value=count,
            )
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "A group's committed offset", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus the group's committed offset",
            labels=labels,
        )
        logs = self.broker.log_manager.logs
        for group_id, group in sorted(groups.items()):
            for (topic, partition), committed in sorted(group.offsets.items()):
                key = [group_id, topic, str(partition)]
                current.add_metric(key, committed.offset)
                log = logs.get((topic, partition))
                if log is not None:
                    lag.add_metric(key, max(log.high_watermark - committed.offset, 0))
        yield current
        yield lag


def _sample(name: str, labels: dict[str, str], value: float) -> Any:
    from prometheus_client.samples import Sample

    return Sample(name, labels, value, None, None)


def render(broker: Broker, server: Any) -> tuple[bytes, str]:
    """The text exposition of every metric, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker, server))
    return generate_latest(registry), CONTENT_TYPE_LATEST
