"""Operations: the Prometheus endpoint and the request log, both off unless set.

Kafka serves its metrics over JMX (`MetricConfigs`, `metric.reporters`) and logs requests
through log4j's kafka.request.logger; these two keys are this broker's own switches for the
same things (trio_broker/metrics_http.py, trio_broker/request_log.py).
"""

from __future__ import annotations

import re

from trio_broker.config.keys import CLUSTER_WIDE, ConfigKey, _at_least, _bool, _str, key

__all__ = ["OPERATIONS_CONFIGS"]


def _metrics_listener(v: str) -> None:
    m = re.fullmatch(r"http://(\[[^\]]*\]|[^:/]*):(\d+)/?", v)
    if v and (not m or int(m.group(2)) > 65535):
        raise ValueError(f"expected http://host:port, got {v!r}")


# operations (issue 17)

# Kafka's MetricConfigs: accepted, stored, described, not acted on (this broker's metrics
# are the Prometheus endpoint above).
_OPERATIONS_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("metrics.num.samples", "INT", 2, _at_least(1),
        "Samples kept to compute a metric."),
    key("metrics.sample.window.ms", "LONG", 30000, _at_least(1),
        "Length of one metrics sample."),
    key("metric.reporters", "LIST", (), None,
        "MetricsReporter classes to load.", dynamic=CLUSTER_WIDE),
    key("metrics.recording.level", "STRING", "INFO", None,
        "Highest level of metrics recorded."),
    key("auto.include.jmx.reporter", "BOOLEAN", True, None,
        "Deprecated: add the JMX reporter to metric.reporters."),
    key("kafka.metrics.reporters", "LIST", (), None,
        "Yammer metrics reporter classes to load."),
    key("kafka.metrics.polling.interval.secs", "INT", 10, _at_least(1),
        "Polling interval of the Yammer metrics reporters."),
    key("telemetry.max.bytes", "INT", 1 << 20, _at_least(1),
        "Largest client telemetry push (KIP-714)."),
)  # fmt: skip


OPERATIONS_CONFIGS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "metrics.listener",
        "STRING",
        "",
        _str,
        _metrics_listener,
        "Where the broker serves Prometheus metrics, http://host:port (path /metrics); "
        "empty for none.",
    ),
    ConfigKey(
        "request.log.enable",
        "BOOLEAN",
        False,
        _bool,
        None,
        "Log every completed request (API, client, sizes, the times of its life) to the "
        "logger kafka.request.logger, as Kafka's request logger does.",
    ),
    *_OPERATIONS_STORED_ONLY,
)
