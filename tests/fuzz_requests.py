"""A structured fuzzer of Kafka requests, for tests: decodable requests with hostile values.

Byte-level garbage mostly dies in the decoder (the connection is closed, as it should be).
What reaches the handlers is a request that decodes: so this mutates request objects
field by field, by each field's schema type (boundary integers, odd names, empty, null
and grown arrays, new nested structs), and encodes them with our codec. Seeds are every
API and version the broker serves, default-constructed, plus whatever requests the test
adds (real topics, real batches), so mutations start from paths that do something.

`run_fuzz(host, port, seeds, count, seed)` sends `count` mutated requests one at a time
and checks every answer's correlation id; the caller checks the broker's log and health.
`MutatingProxy` does the same to a broker's answers, in flight, for its clients (our
client, another broker's replica fetcher or controller).
"""

from __future__ import annotations

import random
import socket
import struct
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

from wire import encode_request, split_frames

from trio_broker.apis.registry import supported_versions
from trio_broker.protocol import crc
from trio_broker.protocol._generated import request_class, response_class
from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchRequest, FetchTopic
from trio_broker.protocol._generated.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from trio_broker.protocol._generated.metadata_request import MetadataRequest, MetadataRequestTopic
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.response_header import ResponseHeader
from trio_broker.protocol.primitives import Struct
from trio_broker.protocol.record_codec import build_batch

_INTS = {
    "int8": [-128, -1, 0, 1, 2, 127],
    "int16": [-32768, -1, 0, 1, 2, 32767],
    "uint16": [0, 1, 65535],
    "int32": [-(2**31), -2, -1, 0, 1, 2, 3, 100, 1 << 24, 2**31 - 1],
    "uint32": [0, 1, 2**32 - 1],
    "int64": [-(2**63), -2, -1, 0, 1, 2, 10, 1 << 40, 2**63 - 1],
    "float64": [0.0, -1.0, 1e300, float("inf"), float("nan")],
    "bool": [True, False],
}
_STRINGS = [
    None, "", ".", "..", "a/b", "bad\x00name", "\u00e9", "x" * 249, "x" * 300, "*", "-1",
    "__consumer_offsets", "__transaction_state", "fuzz", "fuzz-group", "fuzz-txn",
    "User:ANONYMOUS", "retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicas",
]  # fmt: skip
# Fields whose large values make a request wait (a long poll, a rebalance, a purgatory):
# capped, so that a run of the fuzzer is counted in requests, not in timeouts.
_WAITS = ("timeout_ms", "max_wait_ms", "session_timeout_ms", "rebalance_timeout_ms")
_WAIT_CAP_MS = 200


def seeds(extra: list[tuple[Any, int]] = (), apis: set[int] | None = None) -> list[tuple[Any, int]]:
    """(request, version) for every API (or those in `apis`) and version the broker serves,
    plus `extra`."""
    out = list(extra)
    for key, (low, high) in supported_versions().items():
        if apis is not None and key not in apis:
            continue
        try:
            cls = request_class(key)
        except KeyError:
            continue
        out += [(cls(), version) for version in range(low, high + 1)]
    return out


def realistic_seeds(topic: str) -> list:
    """Requests that reach deep paths before mutation: a real batch, a real fetch."""
    batch = build_batch([(b"k", b"fuzzed value", (), int(time.time() * 1000))])
    produce = ProduceRequest(
        acks=-1,
        timeout_ms=200,
        topic_data=[TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=0, records=batch)])],
    )  # fmt: skip
    fetch = FetchRequest(
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[FetchTopic(topic=topic, partitions=[FetchPartition(partition=0, partition_max_bytes=1 << 20)])],
    )  # fmt: skip
    list_offsets = ListOffsetsRequest(
        topics=[ListOffsetsTopic(name=topic, partitions=[ListOffsetsPartition(partition_index=0, timestamp=-1)])]
    )  # fmt: skip
    metadata = MetadataRequest(topics=[MetadataRequestTopic(name=topic)])
    return [
        (produce, 3),
        (produce, 9),
        (fetch, 4),
        (fetch, 12),
        (list_offsets, 5),
        (metadata, 9),
    ] * 5


def clone(value: Any) -> Any:
    if isinstance(value, Struct):
        copy = object.__new__(type(value))
        for name in type(value).__slots__:
            setattr(copy, name, clone(getattr(value, name)))
        return copy
    if isinstance(value, list):
        return [clone(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


class Mutator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def value(self, owner: Struct, typ: str, current: Any) -> Any:
        rng = self.rng
        if typ in _INTS:
            return rng.choice(_INTS[typ])
        if typ == "string":
            return rng.choice(_STRINGS)
        if typ == "records" and current and len(current) > 61 and rng.random() < 0.7:
            return self.batch(bytes(current))
        if typ in ("bytes", "records"):
            whole = bytes(current) if current else b""
            return rng.choice([None, b"", rng.randbytes(rng.randrange(1, 80)), whole[:-1]])
        if typ == "uuid":
            return rng.choice(
                [uuid.UUID(int=0), uuid.UUID(int=1), uuid.UUID(int=rng.getrandbits(128))]
            )
        if typ.startswith("[]"):
            return self.array(owner, typ[2:], current)
        struct_class = self.struct_class(owner, typ)
        if struct_class is not None:
            return self.mutate(current if isinstance(current, Struct) else struct_class())
        return current

    def batch(self, data: bytes) -> bytes:
        """A record batch with one field or byte changed and its CRC made right again, so
        that it gets past the checksum to the checks behind it."""
        rng = self.rng
        b = bytearray(data)
        # Header fields: (offset, size) of length, magic, attributes, last offset delta,
        # first/max timestamp, producer id/epoch, base sequence, record count.
        fields = [
            (8, 4),
            (16, 1),
            (21, 2),
            (23, 4),
            (27, 8),
            (35, 8),
            (43, 8),
            (51, 2),
            (53, 4),
            (57, 4),
        ]
        if rng.random() < 0.5:
            at, size = rng.choice(fields)
            b[at : at + size] = rng.choice(
                _INTS[{1: "int8", 2: "int16", 4: "int32", 8: "int64"}[size]]
            ).to_bytes(size, "big", signed=True)
        else:
            at = rng.randrange(61, len(b))
            b[at] = rng.randrange(256)
        if rng.random() < 0.2:
            b += b[61:]  # trailing bytes the length does not cover
        b[17:21] = crc.crc32c(bytes(b[21:])).to_bytes(4, "big")
        return bytes(b)

    def array(self, owner: Struct, element: str, current: list | None) -> list | None:
        rng = self.rng
        items = list(current or [])
        choice = rng.randrange(5)
        if choice == 0:
            return []
        if choice == 1:
            return None
        if choice == 2 and items:
            return items + [clone(rng.choice(items)) for _ in range(rng.choice([1, 2, 40]))]
        if choice == 3 and items:
            i = rng.randrange(len(items))
            items[i] = self.value(owner, element, items[i])
            return items
        struct_class = self.struct_class(owner, element)
        if struct_class is not None:
            return items + [self.mutate(struct_class()) for _ in range(rng.choice([1, 1, 2]))]
        return items + [self.value(owner, element, None)]

    @staticmethod
    def struct_class(owner: Struct, name: str) -> type | None:
        found = getattr(sys.modules[type(owner).__module__], name, None)
        return found if isinstance(found, type) and issubclass(found, Struct) else None

    def mutate(self, obj: Struct) -> Struct:
        rng = self.rng
        schema = type(obj)._SCHEMA
        for _ in range(rng.choice([1, 1, 2, 3])):
            name, typ = rng.choice(schema)[:2]
            setattr(obj, name, self.value(obj, typ, getattr(obj, name)))
        for name, *_ in schema:  # and sometimes deeper
            current = getattr(obj, name)
            if isinstance(current, Struct) and rng.random() < 0.3:
                self.mutate(current)
            elif isinstance(current, list) and current and isinstance(current[0], Struct):
                if rng.random() < 0.5:
                    self.mutate(rng.choice(current))
        return obj


def _cap_waits(obj: Any) -> None:
    if isinstance(obj, Struct):
        for name in type(obj).__slots__:
            value = getattr(obj, name)
            if name in _WAITS and isinstance(value, int) and value > _WAIT_CAP_MS:
                setattr(obj, name, _WAIT_CAP_MS)
            else:
                _cap_waits(value)
    elif isinstance(obj, list):
        for item in obj:
            _cap_waits(item)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(min(1 << 20, size - len(body)))
        if not chunk:
            return None
        body += chunk
    return bytes(body)


def run_fuzz(
    host: str, port: int, seed_requests: list[tuple[Any, int]], count: int, seed: int
) -> Counter:
    """Send `count` mutated requests; returns what happened to them (answered, closed,
    no answer expected, unencodable, slow). Raises AssertionError on an answer to another
    request (a wrong correlation id)."""
    rng = random.Random(seed)
    mutator = Mutator(rng)
    outcome: Counter = Counter()
    sock: socket.socket | None = None
    try:
        for correlation_id in range(1, count + 1):
            request, version = rng.choice(seed_requests)
            request = mutator.mutate(clone(request))
            _cap_waits(request)
            try:
                frame = encode_request(request, version, correlation_id, client_id="fuzz")
            except (struct.error, ValueError, TypeError, AttributeError, OverflowError):
                outcome["unencodable"] += 1  # a value the field's type cannot carry
                continue
            if sock is None:
                sock = socket.create_connection((host, port), timeout=10)
            acks_0 = type(request).API_KEY == 0 and request.acks == 0
            started = time.monotonic()
            try:
                sock.sendall(frame)
                sock.settimeout(0.1 if acks_0 else 5)
                answer = _read_frame(sock)
            except TimeoutError:
                if acks_0:
                    outcome["no answer (acks=0)"] += 1
                else:
                    outcome["slow"] += 1
                    outcome[f"slow api {type(request).API_KEY}"] += 1
                sock.close()
                sock = None
                continue
            except (ConnectionResetError, BrokenPipeError):
                answer = None
            if answer is None:
                outcome["closed"] += 1
                sock.close()
                sock = None
                continue
            (answered_id,) = struct.unpack_from(">i", answer)
            assert answered_id == correlation_id, (answered_id, correlation_id, request)
            outcome["answered"] += 1
            outcome["seconds"] += time.monotonic() - started
    finally:
        if sock is not None:
            sock.close()
    return outcome


# --- answers mutated in flight ------------------------------------------------------------

API_VERSIONS = 18


def _frames(sock: socket.socket):
    buf = bytearray()
    while data := sock.recv(1 << 20):
        buf += data
        yield from split_frames(buf)


class MutatingProxy:
    """Forwards to a broker; mutates a `share` of its answers (never ApiVersions)."""

    def __init__(self, target: tuple[str, int], seed: int, share: float) -> None:
        self.target = target
        self.rng = random.Random(seed)
        self.mutator = Mutator(self.rng)
        self.share = share
        self.mutated = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    @staticmethod
    def _shut(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        asked: dict[int, tuple[int, int]] = {}

        def up() -> None:
            try:
                for frame in _frames(client):
                    key, version, correlation_id = struct.unpack_from(">hhi", frame)
                    asked[correlation_id] = (key, version)
                    upstream.sendall(struct.pack(">i", len(frame)) + frame)
            except OSError:
                pass
            finally:
                self._shut(client, upstream)

        threading.Thread(target=up, daemon=True).start()
        try:
            for frame in _frames(upstream):
                (correlation_id,) = struct.unpack_from(">i", frame)
                key, version = asked.pop(correlation_id, (API_VERSIONS, 0))
                with self.lock:
                    if key != API_VERSIONS and self.rng.random() < self.share:
                        frame = self._mutate(frame, key, version)
                client.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass
        finally:
            self._shut(client, upstream)

    def _mutate(self, frame: bytes, key: int, version: int) -> bytes:
        cls = response_class(key)
        flexible = cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION
        header_version = 1 if flexible else 0
        header, pos = ResponseHeader.decode(frame, header_version)
        body, _ = cls.decode(frame, version, pos)
        body = self.mutator.mutate(clone(body))
        out = bytearray()
        header.encode(header_version, out)
        try:
            body.encode(version, out)
        except (struct.error, ValueError, TypeError, AttributeError, OverflowError):
            return frame  # a value the field cannot carry: sent as it was
        self.mutated += 1
        return bytes(out)
