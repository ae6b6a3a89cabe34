"""Raw Kafka wire helpers for tests: encode a request with our codec, read one response."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

from trio_broker.protocol._generated import request_class, response_class
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol._generated.response_header import ResponseHeader


def _flexible(cls: type, version: int) -> bool:
    return cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION


def encode_request(
    request: Any, version: int, correlation_id: int = 1, client_id: str = "test"
) -> bytes:
    header_version = 2 if _flexible(type(request), version) else 1
    body = bytearray()
    RequestHeader(
        request_api_key=type(request).API_KEY,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    ).encode(header_version, body)
    request.encode(version, body)
    return struct.pack(">i", len(body)) + bytes(body)


def split_frames(buffer: bytearray) -> Iterator[bytes]:
    """Remove and yield every complete size-prefixed frame at the start of `buffer`."""
    while len(buffer) >= 4:
        (size,) = struct.unpack_from(">i", buffer, 0)
        if len(buffer) < 4 + size:
            return
        frame = bytes(buffer[4 : 4 + size])
        del buffer[: 4 + size]
        yield frame


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def read_response(sock: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    frame = recv_exact(sock, size)
    cls = response_class(api_key)
    header_version = 1 if _flexible(cls, version) and api_key != 18 else 0
    header, pos = ResponseHeader.decode(frame, header_version)
    body, end = cls.decode(frame, version, pos)
    assert end == len(frame), (end, len(frame))
    return header.correlation_id, body


def roundtrip(sock: socket.socket, request: Any, version: int, correlation_id: int = 1) -> Any:
    sock.sendall(encode_request(request, version, correlation_id))
    cid, body = read_response(sock, type(request).API_KEY, version)
    assert cid == correlation_id
    return body


def request_of(api_key: int, **fields: Any) -> Any:
    return request_class(api_key)(**fields)


def is_closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the peer closed the connection (reads EOF or a reset) within timeout."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def session_fetch(
    sock: socket.socket,
    session_id: int,
    epoch: int,
    topics: list[tuple[str, int]],
    correlation_id: int,
    version: int = 12,
) -> Any:
    """A Fetch in an incremental fetch session (KIP-227), sent and answered: partition 0
    of each topic at its offset, no wait; `epoch` 0 with `session_id` 0 asks for a new
    session."""
    request = session_fetch_request(session_id, epoch, topics)
    return roundtrip(sock, request, version, correlation_id)


def session_fetch_request(
    session_id: int,
    epoch: int,
    topics: list[tuple[str, int]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    isolation_level: int = 0,
) -> Any:
    """session_fetch's FetchRequest, to send as it is or to leave parked."""
    from trio_broker.protocol._generated.fetch_request import (
        FetchPartition,
        FetchRequest,
        FetchTopic,
    )

    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            FetchTopic(
                topic=t,
                partitions=[
                    FetchPartition(partition=0, fetch_offset=o, partition_max_bytes=1 << 20)
                ],
            )
            for t, o in topics
        ],
    )
