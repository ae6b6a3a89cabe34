"""Hand-assembled frames: each decodes to the expected message and re-encodes identically.

Every frame is written field by field with Kafka's encoding spelled out, so a reader
can check the bytes against the protocol guide without running anything.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from trio_broker.protocol._generated.api_versions_request import ApiVersionsRequest
from trio_broker.protocol._generated.api_versions_response import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
)
from trio_broker.protocol._generated.consumer_group_heartbeat_response import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
)
from trio_broker.protocol._generated.fetch_request import FetchRequest, ReplicaState
from trio_broker.protocol._generated.metadata_request import MetadataRequest, MetadataRequestTopic
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.request_header import RequestHeader

# A stand-in record batch: the codec treats records as opaque bytes.
RECORDS = bytes(range(61)) + b"payload"
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def roundtrip(cls: type, frame: bytes, version: int) -> object:
    msg, end = cls.decode(frame, version)
    assert end == len(frame)
    assert bytes(msg.encode(version)) == frame
    return msg


def test_api_versions_request_v3() -> None:
    frame = (
        b"\x05" + b"kcat"  # ClientSoftwareName: compact string, uvarint len+1 = 5
        + b"\x06" + b"1.7.0"  # ClientSoftwareVersion: compact string, len+1 = 6
        + b"\x00"  # no tagged fields
    )  # fmt: skip
    msg = roundtrip(ApiVersionsRequest, frame, 3)
    assert msg == ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7.0")


def test_metadata_request_v1() -> None:
    frame = (
        b"\x00\x00\x00\x02"  # Topics: int32 array length 2
        + b"\x00\x03" + b"foo"  # Name: int16-length string
        + b"\x00\x03" + b"bar"
    )  # fmt: skip
    msg = roundtrip(MetadataRequest, frame, 1)
    assert [t.name for t in msg.topics] == ["foo", "bar"]
    # v1 has no topic ids and no auto-creation flag: they keep their defaults.
    assert msg.topics[0].topic_id == uuid.UUID(int=0)
    assert msg.allow_auto_topic_creation is True


def test_metadata_request_v1_all_topics_is_a_null_array() -> None:
    frame = b"\xff\xff\xff\xff"  # Topics: null (-1) means every topic, from v1 on
    assert roundtrip(MetadataRequest, frame, 1) == MetadataRequest(topics=None)


def test_metadata_request_v12() -> None:
    frame = (
        b"\x03"  # Topics: compact nullable array, 2 elements + 1
        + TOPIC_ID.bytes  # [0] TopicId: 16 raw bytes
        + b"\x00"  # [0] Name: compact nullable string, null (looked up by id)
        + b"\x00"  # [0] no tagged fields
        + b"\x00" * 16  # [1] TopicId: the zero uuid
        + b"\x04" + b"foo"  # [1] Name: compact string, 3 + 1
        + b"\x00"  # [1] no tagged fields
        + b"\x00"  # AllowAutoTopicCreation: false
        + b"\x01"  # IncludeTopicAuthorizedOperations: true
        + b"\x00"  # no tagged fields
    )  # fmt: skip
    msg = roundtrip(MetadataRequest, frame, 12)
    assert msg == MetadataRequest(
        topics=[
            MetadataRequestTopic(topic_id=TOPIC_ID, name=None),
            MetadataRequestTopic(name="foo"),
        ],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )


def test_produce_request_v3() -> None:
    frame = (
        b"\xff\xff"  # TransactionalId: nullable int16-length string, null
        + b"\xff\xff"  # Acks: int16 -1 (all in-sync replicas)
        + b"\x00\x00\x75\x30"  # TimeoutMs: int32 30000
        + b"\x00\x00\x00\x01"  # TopicData: int32 array length 1
        + b"\x00\x06" + b"events"  # Name
        + b"\x00\x00\x00\x01"  # PartitionData: 1 element
        + b"\x00\x00\x00\x02"  # Index: partition 2
        + struct.pack(">i", len(RECORDS)) + RECORDS  # Records: int32 length + batch
    )  # fmt: skip
    msg = roundtrip(ProduceRequest, frame, 3)
    assert msg.transactional_id is None
    assert (msg.acks, msg.timeout_ms) == (-1, 30000)
    partition = msg.topic_data[0].partition_data[0]
    assert (msg.topic_data[0].name, partition.index) == ("events", 2)
    assert bytes(partition.records) == RECORDS


def test_produce_request_v9_records_are_a_zero_copy_view() -> None:
    frame = (
        b"\x04" + b"txn"  # TransactionalId: compact nullable string, 3 + 1
        + b"\x00\x01"  # Acks: 1
        + b"\x00\x00\x03\xe8"  # TimeoutMs: 1000
        + b"\x02"  # TopicData: compact array, 1 + 1
        + b"\x07" + b"events"  # Name: compact string, 6 + 1
        + b"\x02"  # PartitionData: 1 + 1
        + b"\x00\x00\x00\x00"  # Index: partition 0
        + bytes([len(RECORDS) + 1]) + RECORDS  # Records: compact, uvarint len + 1
        + b"\x00"  # partition: no tagged fields
        + b"\x00"  # topic: no tagged fields
        + b"\x00"  # request: no tagged fields
    )  # fmt: skip
    msg = roundtrip(ProduceRequest, frame, 9)
    assert msg.transactional_id == "txn"
    records = msg.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame  # a slice of the input, not a copy
    assert records == RECORDS


def test_produce_request_null_records() -> None:
    msg = ProduceRequest(
        topic_data=[TopicProduceData(name="t", partition_data=[PartitionProduceData()])]
    )
    data = bytes(msg.encode(3))
    assert data.endswith(b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff")  # index 0, records null
    assert ProduceRequest.decode(data, 3)[0].topic_data[0].partition_data[0].records is None


def test_request_header_v1_and_v2_client_id_is_never_compact() -> None:
    common = (
        b"\x00\x12"  # RequestApiKey: 18 (ApiVersions)
        + b"\x00\x03"  # RequestApiVersion: 3
        + b"\x00\x00\x00\x07"  # CorrelationId: 7
        + b"\x00\x04" + b"kcat"  # ClientId: int16 length even in v2 ("flexibleVersions": "none")
    )  # fmt: skip
    expected = RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=7, client_id="kcat"
    )
    assert roundtrip(RequestHeader, common, 1) == expected
    assert roundtrip(RequestHeader, common + b"\x00", 2) == expected  # v2: + tagged fields
    # A null client id is int16 -1 in both.
    assert roundtrip(RequestHeader, common[:8] + b"\xff\xff\x00", 2).client_id is None


def test_request_header_v0_has_no_client_id() -> None:
    frame = b"\x00\x07" + b"\x00\x00" + b"\x00\x00\x00\x01"
    assert roundtrip(RequestHeader, frame, 0).client_id == ""


def test_api_versions_response_v3_tagged_fields_sorted_and_only_when_set() -> None:
    msg = ApiVersionsResponse(
        api_keys=[ApiVersion(api_key=0, min_version=0, max_version=11)],
        finalized_features_epoch=5,
        finalized_features=[
            FinalizedFeatureKey(name="mv", max_version_level=1, min_version_level=1)
        ],
    )
    frame = (
        b"\x00\x00"  # ErrorCode: 0
        + b"\x02"  # ApiKeys: 1 + 1
        + b"\x00\x00" + b"\x00\x00" + b"\x00\x0b" + b"\x00"  # Produce 0-11, no tags
        + b"\x00\x00\x00\x00"  # ThrottleTimeMs: 0
        + b"\x02"  # two tagged fields; SupportedFeatures (tag 0) is empty, so absent
        + b"\x01" + b"\x08" + b"\x00\x00\x00\x00\x00\x00\x00\x05"  # tag 1, 8 bytes: epoch 5
        + b"\x02" + b"\x09"  # tag 2, 9 bytes: FinalizedFeatures
        + b"\x02" + b"\x03mv" + b"\x00\x01" + b"\x00\x01" + b"\x00"
    )  # fmt: skip
    assert bytes(msg.encode(3)) == frame
    assert roundtrip(ApiVersionsResponse, frame, 3) == msg
    # v0 carries neither the tagged fields nor the throttle time.
    assert bytes(msg.encode(0)) == b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00\x00\x0b"


def test_unknown_tagged_fields_are_skipped() -> None:
    frame = (
        b"\x05kcat" + b"\x06" + b"1.7.0"
        + b"\x01"  # one tagged field
        + b"\x63" + b"\x03" + b"abc"  # tag 99, 3 bytes this version does not know
    )  # fmt: skip
    msg, end = ApiVersionsRequest.decode(frame, 3)
    assert end == len(frame)
    assert msg.client_software_name == "kcat"


def test_tagged_struct_written_when_not_default() -> None:
    req = FetchRequest(replica_state=ReplicaState(replica_id=1, replica_epoch=2))
    data = bytes(req.encode(15))
    # replica state is tag 1 (ClusterId, tag 0, is null so absent): 4 + 8 + 1 bytes.
    assert data.endswith(
        b"\x01" + b"\x01\x0d" + b"\x00\x00\x00\x01" + b"\x00" * 7 + b"\x02" + b"\x00"
    )
    assert FetchRequest.decode(data, 15)[0] == req
    assert bytes(FetchRequest().encode(15)).endswith(b"\x00")  # default: no tagged fields


def test_nullable_struct_marker() -> None:
    base = ConsumerGroupHeartbeatResponse(member_id="m", member_epoch=1, heartbeat_interval_ms=5)
    null_tail = bytes(base.encode(0))
    assert null_tail.endswith(b"\xff" + b"\x00")  # Assignment: int8 -1 = null, then tags
    assert ConsumerGroupHeartbeatResponse.decode(null_tail, 0)[0].assignment is None
    base.assignment = Assignment()
    present = bytes(base.encode(0))
    assert present.endswith(b"\x01" + b"\x01" + b"\x00" + b"\x00")  # present, empty list, tags
    assert ConsumerGroupHeartbeatResponse.decode(present, 0)[0].assignment == Assignment()


@pytest.mark.parametrize("version", [0, 3, 9])
def test_records_file_region_is_spliced_not_copied(version: int) -> None:
    class Region:
        size = 1000

    region = Region()
    req = ProduceRequest(
        topic_data=[
            TopicProduceData(name="t", partition_data=[PartitionProduceData(records=region)])
        ]
    )
    regions: list = []
    buf = bytearray(b"HDR")
    out = req.encode(version, buf, regions)
    assert out is buf
    assert regions == [(len(buf) - (3 if version >= 9 else 0), region)]  # 3 tag sections follow
    # The length prefix announces the region's bytes, which the buffer does not hold.
    offset = regions[0][0]
    if version >= 9:
        assert buf[offset - 2 : offset] == bytes([0xE9, 0x07])  # uvarint 1001
    else:
        assert buf[offset - 4 : offset] == struct.pack(">i", 1000)


def test_file_region_without_regions_list_is_an_error() -> None:
    class Region:
        size = 10

    req = ProduceRequest(
        topic_data=[
            TopicProduceData(name="t", partition_data=[PartitionProduceData(records=Region())])
        ]
    )
    with pytest.raises(ValueError, match="regions"):
        req.encode(3)
