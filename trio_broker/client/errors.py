"""The client's exceptions: Kafka's error registry, plus what only a client can hit.

A broker's error code becomes a `KafkaError` naming it (`error_for`); a broken or silent
connection becomes NETWORK_EXCEPTION or REQUEST_TIMED_OUT, as Kafka's client reports them;
running out of buffer memory is Kafka's BufferExhaustedException, a timeout.
"""

from __future__ import annotations

from trio_broker.errors import ErrorCode, KafkaError, is_retriable

__all__ = [
    "AuthenticationError",
    "BufferExhaustedError",
    "ErrorCode",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "RecordTooLargeError",
    "RequestTimedOutError",
    "SaslAuthenticationFailedError",
    "SslAuthenticationError",
    "error_for",
    "is_retriable",
]


def _message(code: ErrorCode, detail: str | None) -> str:
    return f"{code.name}: {detail}" if detail else code.name


def error_for(code: int, detail: str | None = None) -> KafkaError:
    """The exception for a broker's error code, its message starting with the code's name."""
    code = ErrorCode(code)
    return KafkaError(code, _message(code, detail))


class KafkaConnectionError(KafkaError):
    """The connection to a broker failed or was closed (Kafka's NetworkException)."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, _message(ErrorCode.NETWORK_EXCEPTION, detail))


class RequestTimedOutError(KafkaError):
    """No response within request.timeout.ms; the connection was closed (as Kafka does)."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, _message(ErrorCode.REQUEST_TIMED_OUT, detail))


class RecordTooLargeError(KafkaError):
    """A record larger than max.request.size or buffer.memory (Kafka's RecordTooLargeException)."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.MESSAGE_TOO_LARGE, _message(ErrorCode.MESSAGE_TOO_LARGE, detail))


class AuthenticationError(KafkaError):
    """Client and broker could not authenticate each other (Kafka's AuthenticationException):
    not retriable, so the producer, consumer and admin raise it instead of waiting."""

    @property
    def retriable(self) -> bool:
        return False


class SaslAuthenticationFailedError(AuthenticationError):
    """SASL failed: a wrong password, an unknown user, a mechanism the broker does not offer."""

    def __init__(self, detail: str, code: int = ErrorCode.SASL_AUTHENTICATION_FAILED) -> None:
        code = ErrorCode(code)
        super().__init__(code, _message(code, detail))


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: most often a broker certificate this client does not trust
    (or whose name does not match), or a client certificate the broker refused."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, f"SSL handshake failed: {detail}")


class KafkaTimeoutError(Exception):
    """A client-side wait ran past its limit (Kafka's TimeoutException)."""


class BufferExhaustedError(KafkaTimeoutError):
    """No buffer memory within max.block.ms (Kafka's BufferExhaustedException)."""
