"""The request log (Kafka's `kafka.request.logger`): one line per completed request.

Off unless `request.log.enable=true`. Each line names the API and version, correlation
id, client id, peer, listener and principal, the request and response sizes (frames as
on the wire, with their 4-byte size prefix; 0 for a request answered by nothing), and the
five times of the request's life (trio_broker/metrics.py) plus the total, in ms. The
lines go to the logger `kafka.request.logger` at INFO, so logging configuration can send
them elsewhere, as log4j does for Kafka's.
"""

from __future__ import annotations

import logging
from typing import Any

from trio_broker.metrics import RequestTiming, api_names, clock

__all__ = ["RequestLog"]

logger = logging.getLogger("kafka.request.logger")


def _response_bytes(response: Any) -> int:
    size = len(response.buf)
    for _at, region in response.regions:
        size += region.size
    return size


class RequestLog:
    """The connections' request observer when the request log is on; hands each request
    to the metrics too when they are on."""

    def __init__(self, metrics: Any = None) -> None:
        self.metrics = metrics
        self._names = api_names()

    def new_timing(self) -> RequestTiming:
        return RequestTiming(clock())

    def request_done(self, request: Any, response: Any, request_bytes: int) -> None:
        parsed = request.parsed
        spans = request.timing.spans_ms(clock())
        if self.metrics is not None:
            self.metrics.observe(parsed.api_key, parsed.api_version, spans)
        connection = request.connection
        queue, local, remote, response_queue, send, total = spans
        logger.info(
            "Completed request: api=%s version=%d correlation_id=%d client_id=%s peer=%s "
            "listener=%s principal=%s request_bytes=%d response_bytes=%d totalTime=%.3f "
            "requestQueueTime=%.3f localTime=%.3f remoteTime=%.3f responseQueueTime=%.3f "
            "sendTime=%.3f",
            self._names.get(parsed.api_key, parsed.api_key),
            parsed.api_version,
            parsed.correlation_id,
            parsed.client_id,
            connection.peer,
            connection.listener,
            getattr(connection, "principal", None) or "User:ANONYMOUS",
            request_bytes + 4,  # both sizes as on the wire, with their size prefix
            _response_bytes(response),
            total,
            queue,
            local,
            remote,
            response_queue,
            send,
        )
