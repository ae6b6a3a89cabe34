"""Message formats 0 and 1 for Produce v0-v2 and Fetch v0-v3, converted as Kafka 3.x does.

The log holds format 2 batches only. A produce of an old version carries a message set of
magic 0 or 1: its records become one format 2 batch before validation and append (Kafka's
LogValidator converting to the topic's format 2), compressed with the codec they came
with; magic 0 records have no timestamp (-1). A fetch of an old version cannot read format
2: Fetch v0-v1 gets magic 0 and v2-v3 magic 1 (Kafka's FetchResponse down-conversion),
each format 2 batch becoming its messages, or one compressed wrapper of the same codec.
Control batches are left out (no old client knows them); zstd cannot be written in an old
format, so such a partition answers UNSUPPORTED_COMPRESSION_TYPE, as Kafka does.

Only requests of those versions come here: the v3+ produce and v4+ fetch paths never
import this module, and their record bytes stay as they are (zero-copy on fetch).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from trio_broker.errors import ErrorCode
from trio_broker.protocol.legacy_records import build_message_set, iter_legacy_messages
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import (
    Compression,
    InvalidRecords,
    TimestampType,
    iter_batches,
)

__all__ = ["down_convert_fetch", "fetch_magic", "up_convert_produce"]

logger = logging.getLogger(__name__)


def up_convert_produce(records: memoryview | bytes) -> bytes:
    """A produce v0-v2 message set as one format 2 batch (base offset 0, as a client's).

    Raises InvalidRecords as Kafka answers the message set: CORRUPT_MESSAGE (bad CRC, cut
    short), INVALID_RECORD (a format 2 batch in an old produce),
    UNSUPPORTED_COMPRESSION_TYPE (a codec format 0/1 does not have)."""
    codec = 0
    items = []
    for m in iter_legacy_messages(records):
        if m.codec:
            codec = m.codec  # Kafka's source codec: the last compressed wrapper's
        items.append((m.key, m.value, (), m.timestamp))
    if not items:
        raise InvalidRecords(ErrorCode.INVALID_RECORD, "message set contains no message")
    return build_batch(items, compression=Compression(codec))


def fetch_magic(version: int) -> int:
    """The message format a fetch of `version` (< 4) reads."""
    return 0 if version <= 1 else 1


def _read_records(records: Any) -> bytes:
    """The bytes of a `records` field: bytes, a file region, or several back to back."""
    if isinstance(records, bytes | bytearray | memoryview):
        return bytes(records)
    parts = []
    for region in getattr(records, "regions", (records,)):
        data = os.pread(region.fd, region.size, region.position)
        parts.append(data)
    return b"".join(parts)


def _convert(data: bytes, magic: int) -> bytes:
    out = []
    mv = memoryview(data)
    for pos, header in iter_batches(mv):
        if header.is_control:
            continue
        if header.compression == Compression.ZSTD:
            raise InvalidRecords(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"zstd batch at offset {header.base_offset} cannot be read in message format "
                f"{magic}",
            )
        batch = mv[pos : pos + header.size]
        append_time = (
            header.max_timestamp
            if magic == 1 and header.timestamp_type == TimestampType.LOG_APPEND_TIME
            else None
        )
        messages = [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(batch)]
        if messages:
            out.append(
                build_message_set(
                    messages,
                    magic=magic,
                    codec=int(header.compression),
                    log_append_time=append_time,
                )
            )
    return b"".join(out)


def down_convert_fetch(response: Any, version: int) -> None:
    """Rewrite every partition's records of a fetch v0-v3 response as message sets."""
    magic = fetch_magic(version)
    for topic in response.responses:
        for p in topic.partitions:
            records = p.records
            if not records:
                p.records = b""
                continue
            try:
                p.records = _convert(_read_records(records), magic)
            except InvalidRecords as exc:
                p.records = b""
                p.error_code = exc.code
                logger.info(
                    "fetch v%d of %s-%d: %s", version, topic.topic, p.partition_index, exc.message
                )
            except OSError as exc:
                # The segment went away under the read (retention): the client asks again.
                p.records = b""
                p.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                logger.info("fetch v%d of %s-%d: %s", version, topic.topic, p.partition_index, exc)
