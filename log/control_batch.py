"""Control batches: the COMMIT and ABORT markers that end a transaction in a partition.

A control batch has attributes bit 5 (control) and bit 4 (transactional) set, the
producer's id and epoch, no sequence, and one record (Kafka's EndTransactionMarker):

    key   = version int16 (0) | type int16 (0 ABORT, 1 COMMIT)
    value = version int16 (0) | coordinator_epoch int32

The broker writes them; clients never may (`validate_batches` refuses them from a client).
"""

from __future__ import annotations

import enum
import struct

from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import InvalidRecords

__all__ = ["ControlType", "build_marker_batch", "control_type"]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_VERSION = 0


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


def build_marker_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    control: ControlType,
    timestamp_ms: int,
) -> bytes:
    """One control batch holding one end-transaction marker, base offset 0."""
    key = _KEY.pack(_VERSION, int(control))
    value = _VALUE.pack(_VERSION, coordinator_epoch)
    return build_batch(
        [(key, value, (), timestamp_ms)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def control_type(batch: bytes | bytearray | memoryview) -> ControlType | None:
    """The marker type of a control batch's first record; None for another control record
    (Kafka has leader-change and snapshot ones) or a record that does not parse."""
    try:
        for record in iter_records(batch):
            if record.key is None or len(record.key) < _KEY.size:
                return None
            _, kind = _KEY.unpack_from(record.key)
            return ControlType(kind) if kind in (0, 1) else None
    except InvalidRecords:
        return None
    return None
