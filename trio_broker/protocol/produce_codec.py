"""Produce's common shape, decoded and encoded in one step: one topic, one partition.

A producer sending small requests (librdkafka with `linger.ms=0`, many producers each
sending little) sends Produce requests of one topic and one partition, and each is
answered with one partition's offsets. The generated codec reads and writes them through
a dozen small functions each; here the same bytes are read and written in one. Anything
else (more topics or partitions, tagged fields, a length in more than one varint byte
where one is usual, an answer with record errors, a message, a leader or endpoints) goes
to the generated codec, which also says what is wrong with bad bytes: these functions
never raise for a shape they do not take, they hand it over. The generated codec stays
the definition: tests/protocol/test_produce_codec.py checks that both give the same
result for every version.
"""

from __future__ import annotations

import struct
from typing import Any

from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.produce_response import ProduceResponse

__all__ = ["produce_request_decoder", "produce_response_encoder"]

_HI = struct.Struct(">hi")  # acks, timeout_ms
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_ONE = b"\x00\x00\x00\x01"  # an int32 array length of 1


def _decode_flexible(data: memoryview, pos: int) -> tuple[Any, int] | None:
    """v9+: the body at `pos`, or None for anything but the common shape."""
    n = data[pos]  # transactional id, a compact nullable string
    if n == 0:
        transactional_id = None
        pos += 1
    elif n < 0x80:
        end = pos + n
        if end > len(data):
            return None
        transactional_id = str(data[pos + 1 : end], "utf-8")
        pos = end
    else:
        return None
    acks, timeout_ms = _HI.unpack_from(data, pos)
    pos += 6
    if data[pos] != 2:  # one topic
        return None
    n = data[pos + 1]  # its name: a compact string
    if not 0 < n < 0x80:
        return None
    end = pos + 1 + n
    if end >= len(data):
        return None
    name = str(data[pos + 2 : end], "utf-8")
    if data[end] != 2:  # one partition
        return None
    (index,) = _I.unpack_from(data, end + 1)
    pos = end + 5
    n = data[pos]  # records: compact nullable bytes, usually of a two-byte varint length
    if n < 0x80:
        size, pos = n - 1, pos + 1
    else:
        n2 = data[pos + 1]
        if n2 >= 0x80:
            return None
        size, pos = ((n & 0x7F) | (n2 << 7)) - 1, pos + 2
    if size < 0:
        records = None
    else:
        end = pos + size
        if end > len(data):
            return None
        records = data[pos:end]
        pos = end
    # No tagged fields: the partition's, the topic's and the request's.
    if data[pos] or data[pos + 1] or data[pos + 2]:
        return None
    return _request(transactional_id, acks, timeout_ms, name, index, records), pos + 3


def _request(
    transactional_id: str | None, acks: int, timeout_ms: int, name: str, index: int, records: Any
) -> Any:
    """The request of one topic and one partition, as the generated decoder makes it."""
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            TopicProduceData(
                name=name, partition_data=[PartitionProduceData(index=index, records=records)]
            )
        ],
    )


def _decode_classic(data: memoryview, pos: int, transactional: bool) -> tuple[Any, int] | None:
    """v0-v8 (a transactional id from v3): the body at `pos`, or None."""
    transactional_id = None
    if transactional:
        (n,) = _H.unpack_from(data, pos)
        pos += 2
        if n >= 0:
            end = pos + n
            if end > len(data):
                return None
            transactional_id = str(data[pos:end], "utf-8")
            pos = end
        elif n != -1:
            return None
    acks, timeout_ms = _HI.unpack_from(data, pos)
    pos += 6
    if data[pos : pos + 4] != _ONE:  # one topic
        return None
    (n,) = _H.unpack_from(data, pos + 4)
    pos += 6
    end = pos + n
    if n < 0 or end > len(data):
        return None
    name = str(data[pos:end], "utf-8")
    if data[end : end + 4] != _ONE:  # one partition
        return None
    (index,) = _I.unpack_from(data, end + 4)
    (size,) = _I.unpack_from(data, end + 8)
    pos = end + 12
    if size == -1:
        records = None
    else:
        end = pos + size
        if size < 0 or end > len(data):
            return None
        records = data[pos:end]
        pos = end
    return _request(transactional_id, acks, timeout_ms, name, index, records), pos


def produce_request_decoder(version: int) -> Any:
    """The decoder of ProduceRequest `version` (the generated one's signature and result):
    the common shape here, anything else by the generated decoder."""
    generated = ProduceRequest._DECODERS[version]
    if version >= 9:

        def decode(data: memoryview, pos: int) -> tuple[Any, int]:
            try:
                result = _decode_flexible(data, pos)
            except (IndexError, struct.error, ValueError):
                result = None
            return generated(data, pos) if result is None else result

    else:
        transactional = version >= 3

        def decode(data: memoryview, pos: int) -> tuple[Any, int]:
            try:
                result = _decode_classic(data, pos, transactional)
            except (IndexError, struct.error, ValueError):
                result = None
            return generated(data, pos) if result is None else result

    return decode


# The partition's fields: index, error code, base offset, then the log append time (v2+)
# and the log start offset (v5+); an older version's are the first bytes of these.
_FIELDS = struct.Struct(">ihqqq")


def _fields_size(version: int) -> int:
    return 30 if version >= 5 else 22 if version >= 2 else 14


# What comes after them, when there are no record errors, no message (v8+), no current
# leader (v10+): the record errors' and the message's lengths, then the tagged fields of
# the partition and the topic (v9+).
def _after_fields(version: int) -> bytes:
    if version >= 9:
        return b"\x01\x00\x00\x00"  # empty compact array, null compact string, no tags x2
    if version >= 8:
        return b"\x00\x00\x00\x00\xff\xff"  # empty array, null string
    return b""


# (version, topic name) -> the body's bytes before the partition's fields. Bounded: topic
# names are the clients' to choose (an unknown one is answered too).
_PREFIXES: dict[tuple[int, str], bytes] = {}
_PREFIXES_MAX = 4096


def _prefix(version: int, name: str) -> bytes | None:
    """None for a name of 126 bytes or more (left to the generated encoder)."""
    raw = name.encode("utf-8")
    if len(raw) + 1 >= 0x80:
        return None
    if version >= 9:
        prefix = b"\x02" + bytes([len(raw) + 1]) + raw + b"\x02"
    else:
        prefix = _ONE + _H.pack(len(raw)) + raw + _ONE
    if len(_PREFIXES) >= _PREFIXES_MAX:
        _PREFIXES.clear()
    _PREFIXES[(version, name)] = prefix
    return prefix


def produce_response_encoder(version: int) -> Any:
    """The encoder of ProduceResponse `version` (the generated one's signature and bytes):
    one topic with one partition and nothing but offsets here, anything else by the
    generated encoder."""
    generated = ProduceResponse._ENCODERS[version]
    pack_fields = _FIELDS.pack
    size = _fields_size(version)
    whole = size == _FIELDS.size
    after = _after_fields(version)
    pack_throttle = _I.pack if version >= 1 else None
    flexible = version >= 9

    def encode(o: Any, buf: bytearray, regions: list) -> None:
        responses = o.responses
        if len(responses) == 1 and not o.node_endpoints:
            topic = responses[0]
            partitions = topic.partition_responses
            if len(partitions) == 1:
                p = partitions[0]
                leader = p.current_leader
                if (
                    not p.record_errors
                    and p.error_message is None
                    and leader.leader_id == -1
                    and leader.leader_epoch == -1
                ):
                    name = topic.name
                    prefix = _PREFIXES.get((version, name)) or _prefix(version, name)
                    if prefix is None:
                        generated(o, buf, regions)
                        return
                    buf += prefix
                    fields = pack_fields(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                    )
                    buf += fields if whole else fields[:size]
                    buf += after
                    if pack_throttle is not None:
                        buf += pack_throttle(o.throttle_time_ms)
                    if flexible:
                        buf.append(0)  # no tagged fields
                    return
        generated(o, buf, regions)

    return encode
