"""The broker's error registry: Kafka error code, name, and whether a client retries it.

Handlers answer with error codes; exceptions are for bugs and broken connections. A
`KafkaError` raised inside a handler is turned into its code by the API layer.
"""

from __future__ import annotations

from trio_broker.protocol._generated.error_codes import ErrorCode

__all__ = ["ErrorCode", "FatalBrokerError", "KafkaError", "is_retriable"]

# The codes whose Java exception extends RetriableException in Apache Kafka's client
# (org.apache.kafka.common.errors); errors.csv does not carry this, so it lives here.
_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
        ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE,
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
        ErrorCode.TELEMETRY_TOO_LARGE,
    }
)


def is_retriable(code: int) -> bool:
    """Whether a client retries a request that failed with `code`."""
    return code in _RETRIABLE


class KafkaError(Exception):
    """An error a handler answers with a Kafka error code rather than a closed connection."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = ErrorCode(code)
        self.message = message

    @property
    def retriable(self) -> bool:
        return is_retriable(self.code)


class FatalBrokerError(Exception):
    """The broker cannot run (it is in the wrong cluster, its node.id is taken, ZooKeeper is
    unreachable): the message says why; `trio-broker serve` logs it and exits with 1."""
