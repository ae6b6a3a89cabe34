"""Fetch's common shape in one step: one topic, one partition (issue 38 (d)).

A consumer tailing one partition is answered a FetchResponse of one topic with one
partition for every record produced, and the generated encoder spends a dozen calls on
it (a function per nesting level, three tagged-field default comparisons, the records'
length helpers). `fetch_response_encoder(version)` has the generated encoder's signature
and writes the same bytes for that shape in one function: the topic's bytes up to its
partition are cached per (version, topic), the partition's fixed fields are one pack.
Anything else (several topics or partitions, aborted transactions listed, a diverging
epoch, a current leader, a snapshot id, node endpoints, fetch v0-v3) goes to the
generated encoder, which stays the definition: tests/protocol/test_fetch_codec.py checks
for every version that both write the same bytes and file regions.

`fetch_request_decoder(version)` reads such a consumer's request (v13+: topic ids; no
topic, or one topic of one partition, nothing forgotten, no tagged fields) in one
function; anything else, bad bytes included, is read by the generated decoder, which says
what is wrong with them.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from trio_broker.protocol import primitives as _p
from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchRequest, FetchTopic
from trio_broker.protocol._generated.fetch_response import FetchResponse

__all__ = ["fetch_request_decoder", "fetch_response_encoder"]

# The first version written here: v0-v3 answers are down-converted and rare.
FIRST_VERSION = 4

_I = struct.Struct(">i")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log start offset
_HEAD_V1 = struct.Struct(">i")  # throttle
_HEAD_V7 = struct.Struct(">ihi")  # throttle, error, session id

# (version, topic name or topic id) -> the body's bytes from the topics' count to the
# partitions' count. Bounded: names are the clients' to choose.
_PREFIXES: dict[tuple[int, Any], bytes] = {}
_PREFIXES_MAX = 4096


def _prefix(version: int, topic: Any) -> bytes:
    buf = bytearray()
    if version >= 13:
        buf.append(2)  # one topic (compact array)
        buf += topic.bytes  # topic id
        buf.append(2)  # one partition
    elif version >= 12:
        buf.append(2)
        _p.write_compact_string(buf, topic)
        buf.append(2)
    else:
        buf += _I.pack(1)
        _p.write_string(buf, topic)
        buf += _I.pack(1)
    if len(_PREFIXES) >= _PREFIXES_MAX:
        _PREFIXES.clear()
    prefix = _PREFIXES[(version, topic)] = bytes(buf)
    return prefix


def fetch_response_encoder(version: int) -> Any:
    """The encoder of FetchResponse `version` (the generated one's signature and bytes):
    one topic with one partition and no tagged news here, anything else by the generated
    encoder."""
    generated = FetchResponse._ENCODERS[version]
    if version < FIRST_VERSION:
        return generated
    pack_head = _HEAD_V7.pack if version >= 7 else _HEAD_V1.pack
    head_v7 = version >= 7
    pack_partition = _PARTITION_V5.pack if version >= 5 else _PARTITION_V4.pack
    log_start = version >= 5
    by_id = version >= 13
    flexible = version >= 12
    replica = version >= 11
    pack_i = _I.pack
    records_size = _p._records_size
    write_uvarint = _p.write_uvarint
    append_records = _p._append_records
    # Aborted transactions: null or none listed (anything listed: the generated encoder).
    null_aborted = b"\x00" if flexible else b"\xff\xff\xff\xff"
    no_aborted = b"\x01" if flexible else b"\x00\x00\x00\x00"
    # Tagged fields of the partition, of the topic, of the response: none.
    tail = b"\x00\x00\x00" if flexible else b""
    prefixes = _PREFIXES

    def encode(o: Any, buf: bytearray, regions: list) -> None:
        responses = o.responses
        if len(responses) != 1 or o.node_endpoints:
            generated(o, buf, regions)
            return
        topic = responses[0]
        partitions = topic.partitions
        if len(partitions) != 1:
            generated(o, buf, regions)
            return
        p = partitions[0]
        aborted = p.aborted_transactions
        if aborted:
            generated(o, buf, regions)
            return
        if flexible:
            d = p.diverging_epoch
            c = p.current_leader
            s = p.snapshot_id
            if (
                d.epoch != -1
                or d.end_offset != -1
                or c.leader_id != -1
                or c.leader_epoch != -1
                or s.end_offset != -1
                or s.epoch != -1
            ):
                generated(o, buf, regions)
                return
        key = topic.topic_id if by_id else topic.topic
        prefix = prefixes.get((version, key)) or _prefix(version, key)
        if head_v7:
            buf += pack_head(o.throttle_time_ms, o.error_code, o.session_id)
        else:
            buf += pack_head(o.throttle_time_ms)
        buf += prefix
        if log_start:
            buf += pack_partition(
                p.partition_index,
                p.error_code,
                p.high_watermark,
                p.last_stable_offset,
                p.log_start_offset,
            )
        else:
            buf += pack_partition(
                p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
            )
        buf += null_aborted if aborted is None else no_aborted
        if replica:
            buf += pack_i(p.preferred_read_replica)
        records = p.records
        if records is None:
            buf += b"\x00" if flexible else b"\xff\xff\xff\xff"
        else:
            if records.__class__ is bytes or records.__class__ is bytearray:
                if flexible:
                    write_uvarint(buf, len(records) + 1)
                else:
                    buf += pack_i(len(records))
                buf += records
            else:
                size = records_size(records)
                if flexible:
                    write_uvarint(buf, size + 1)
                else:
                    buf += pack_i(size)
                append_records(buf, records, regions)
        buf += tail

    return encode


# Requests: the fixed fields before the topics (v13-14 with the replica id first).
_REQUEST_V13 = struct.Struct(">iiiibii")  # replica id, max wait, min bytes, max bytes,
# isolation level, session id, session epoch
_REQUEST_V15 = struct.Struct(">iiibii")
_PARTITION = struct.Struct(">iiqiqi")  # partition, current leader epoch, fetch offset,
# last fetched epoch, log start offset, partition max bytes
# Topic ids as read: the same few every request, and uuid.UUID(bytes=) is slow. Bounded.
_TOPIC_IDS: dict[bytes, uuid.UUID] = {}
_TOPIC_IDS_MAX = 4096


def _topic_id(raw: bytes) -> uuid.UUID:
    if len(_TOPIC_IDS) >= _TOPIC_IDS_MAX:
        _TOPIC_IDS.clear()
    topic_id = _TOPIC_IDS[raw] = uuid.UUID(bytes=raw)
    return topic_id


def fetch_request_decoder(version: int) -> Any:
    """The decoder of FetchRequest `version` (the generated one's signature and result):
    the common shape here (v13+), anything else by the generated decoder."""
    generated = FetchRequest._DECODERS[version]
    if version < 13:
        return generated
    head = _REQUEST_V15 if version >= 15 else _REQUEST_V13
    head_size = head.size
    unpack_head = head.unpack_from
    with_replica = version < 15
    unpack_partition = _PARTITION.unpack_from
    topic_ids = _TOPIC_IDS

    def fast(data: memoryview, pos: int) -> tuple[Any, int] | None:
        fields = unpack_head(data, pos)
        pos += head_size
        count = data[pos]
        pos += 1
        if count == 2:  # one topic
            if data[pos + 16] != 2:  # of one partition
                return None
            raw = bytes(data[pos : pos + 16])
            topic_id = topic_ids.get(raw) or _topic_id(raw)
            p = unpack_partition(data, pos + 17)
            pos += 49
            if data[pos] != 0 or data[pos + 1] != 0:  # tagged fields of both
                return None
            pos += 2
            topics = [
                FetchTopic(
                    topic_id=topic_id,
                    partitions=[
                        FetchPartition(
                            partition=p[0],
                            current_leader_epoch=p[1],
                            fetch_offset=p[2],
                            last_fetched_epoch=p[3],
                            log_start_offset=p[4],
                            partition_max_bytes=p[5],
                        )
                    ],
                )
            ]
        elif count == 1:  # none (an incremental fetch with nothing new to say)
            topics = []
        else:
            return None
        if data[pos] != 1:  # nothing forgotten
            return None
        n = data[pos + 1]  # the rack id, a compact string
        if not 0 < n < 0x80:
            return None
        end = pos + 1 + n
        if end >= len(data) or data[end] != 0:  # no tagged fields
            return None
        rack_id = str(data[pos + 2 : end], "utf-8")
        if with_replica:
            replica_id, max_wait, min_bytes, max_bytes, isolation, session, epoch = fields
        else:
            max_wait, min_bytes, max_bytes, isolation, session, epoch = fields
            replica_id = -1
        request = FetchRequest(
            replica_id=replica_id,
            max_wait_ms=max_wait,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation,
            session_id=session,
            session_epoch=epoch,
            topics=topics,
            forgotten_topics_data=[],
            rack_id=rack_id,
        )
        return request, end + 1

    def decode(data: memoryview, pos: int) -> tuple[Any, int]:
        try:
            result = fast(data, pos)
        except (IndexError, struct.error, ValueError):
            result = None
        return generated(data, pos) if result is None else result

    return decode
