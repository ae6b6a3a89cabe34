"""Operations: the Prometheus endpoint and the request log, both off unless set.

Kafka serves its metrics over JMX (`MetricConfigs`, `metric.reporters`) and logs requests
through log4j's kafka.request.logger; these two keys are this broker's own switches for the
same things (trio_broker/metrics_http.py, trio_broker/request_log.py).
"""

from __future__ import annotations

import re

from trio_broker.config.keys import ConfigKey, _bool, _str

__all__ = ["OPERATIONS_CONFIGS"]


def _metrics_listener(v: str) -> None:
    m = re.fullmatch(r"http://(\[[^\]]*\]|[^:/]*):(\d+)/?", v)
    if v and (not m or int(m.group(2)) > 65535):
        raise ValueError(f"expected http://host:port, got {v!r}")


# operations (issue 17)
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
)
