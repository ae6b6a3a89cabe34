"""Kafka's znode layout and the JSON in it (Kafka's ZkData), so that anyone who knows a
ZooKeeper-era Kafka cluster can read ours with zkCli.sh.

Only the layout and the encodings live here; no I/O. Paths are relative to the chroot of
`zookeeper.connect`.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Sequence

import attrs

__all__ = [
    "CLUSTER_ID_PATH",
    "CONTROLLER_EPOCH_PATH",
    "CONTROLLER_PATH",
    "BROKER_IDS_PATH",
    "PERSISTENT_PATHS",
    "BrokerInfo",
    "LeaderIsrState",
    "ProducerIdBlock",
    "TopicAssignment",
    "broker_path",
    "decode_cluster_id",
    "decode_controller",
    "encode_cluster_id",
    "encode_controller",
]

CLUSTER_ID_PATH = "/cluster/id"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
DELETE_TOPICS_PATH = "/admin/delete_topics"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"

# What Kafka's KafkaZkClient.createTopLevelPaths makes sure exists (persistent, empty) when a
# broker starts, whoever starts first: ZkData.PersistentZkPaths and one path per config type.
PERSISTENT_PATHS: tuple[str, ...] = (
    "/consumers",
    BROKER_IDS_PATH,
    TOPICS_PATH,
    "/config/changes",
    DELETE_TOPICS_PATH,
    "/brokers/seqid",
    ISR_CHANGE_NOTIFICATION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    "/config/topics",
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
)

# The version of /controller_epoch a first controller starts from (Kafka's
# KafkaController.InitialControllerEpoch); the first elected controller has epoch 1.
INITIAL_CONTROLLER_EPOCH = 0


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# --- /cluster/id: {"version":"1","id":"..."} (the version is a string in Kafka's) ----------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return json.loads(data)["id"]


# --- /controller: {"version":1,"brokerid":N,"timestamp":"ms"} --------------------------------


def encode_controller(broker_id: int) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    return int(json.loads(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# --- /brokers/ids/<id> -----------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


@attrs.frozen(kw_only=True)
class EndPoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@attrs.frozen(kw_only=True)
class BrokerInfo:
    """A broker's registration, Kafka's BrokerIdZNode version 5 (with `features`)."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp: str = attrs.field(factory=_now_ms)

    def encode(self) -> bytes:
        # host/port are the first PLAINTEXT endpoint, for clients older than endpoints.
        plaintext = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        value: dict[str, object] = {
            "features": {},
            "listener_security_protocol_map": {
                e.listener: e.security_protocol for e in self.endpoints
            },
            "endpoints": [str(e) for e in self.endpoints],
            "jmx_port": self.jmx_port,
            "port": plaintext.port if plaintext else -1,
            "host": plaintext.host if plaintext else None,
            "version": 5,
            "timestamp": self.timestamp,
        }
        if self.rack is not None:
            value["rack"] = self.rack
        return _dumps(value)

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerInfo:
        value = json.loads(data)
        protocols = value.get("listener_security_protocol_map") or {}
        endpoints: list[EndPoint] = []
        for text in value.get("endpoints") or ():
            listener, _, address = text.partition("://")
            host, _, port = address.rpartition(":")
            endpoints.append(
                EndPoint(
                    listener=listener,
                    host=host.strip("[]"),
                    port=int(port),
                    security_protocol=protocols.get(listener, listener),
                )
            )
        if not endpoints and value.get("host"):  # versions 1-2: host and port only
            endpoints.append(EndPoint(listener="PLAINTEXT", host=value["host"], port=value["port"]))
        return cls(
            broker_id=broker_id,
            endpoints=tuple(endpoints),
            rack=value.get("rack"),
            jmx_port=int(value.get("jmx_port", -1)),
            timestamp=str(value.get("timestamp", "")),
        )

    def endpoint(self, listener: str | None = None) -> EndPoint | None:
        """The endpoint of `listener`, or the first one."""
        for e in self.endpoints:
            if listener is None or e.listener == listener:
                return e
        return None


def endpoints_of(
    listeners: Sequence[object], protocol_of: Callable[[str], str] | None = None
) -> tuple[EndPoint, ...]:
    """EndPoints of the broker's advertised `Listener`s (name, host, port), each with its
    security protocol (`protocol_of(name)`, listener.security.protocol.map; without it
    the listener name)."""
    return tuple(
        EndPoint(
            listener=lst.name,  # type: ignore[attr-defined]
            host=lst.host,  # type: ignore[attr-defined]
            port=lst.port,  # type: ignore[attr-defined]
            security_protocol=protocol_of(lst.name) if protocol_of else lst.name,  # type: ignore[attr-defined]
        )
        for lst in listeners
    )


# --- /brokers/topics/<topic>: the replica assignment and the topic id ------------------------
# {"version":3,"topic_id":"<base64 uuid>","partitions":{"0":[1,2,3]},
#  "adding_replicas":{},"removing_replicas":{}}   (Kafka's TopicZNode, version 3)


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"/config/topics/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def _uuid_to_kafka(topic_id: uuid.UUID) -> str:
    # Kafka writes Uuid.toString(): URL-safe base64 of the 16 bytes, no padding.
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def _uuid_from_kafka(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


@attrs.frozen(kw_only=True)
class TopicAssignment:
    """The content of /brokers/topics/<topic>."""

    topic_id: uuid.UUID
    partitions: dict[int, tuple[int, ...]]  # partition -> replicas, preferred leader first
    adding_replicas: dict[int, tuple[int, ...]] = attrs.field(factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = attrs.field(factory=dict)

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": 3,
                "topic_id": _uuid_to_kafka(self.topic_id),
                "partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())},
                "adding_replicas": {
                    str(p): list(r) for p, r in sorted(self.adding_replicas.items())
                },
                "removing_replicas": {
                    str(p): list(r) for p, r in sorted(self.removing_replicas.items())
                },
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> TopicAssignment:
        d = json.loads(data)
        raw_id = d.get("topic_id")
        return cls(
            topic_id=_uuid_from_kafka(raw_id) if raw_id else uuid.UUID(int=0),
            partitions={int(p): tuple(int(b) for b in r) for p, r in d["partitions"].items()},
            adding_replicas={
                int(p): tuple(int(b) for b in r)
                for p, r in (d.get("adding_replicas") or {}).items()
            },
            removing_replicas={
                int(p): tuple(int(b) for b in r)
                for p, r in (d.get("removing_replicas") or {}).items()
            },
        )


# --- /brokers/topics/<topic>/partitions/<p>/state: leader, epoch, ISR ------------------------
# {"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2,3]}
# Changed only by conditional writes on the znode's version (Kafka's LeaderAndIsr + zkVersion):
# by the controller (elections) and by the partition's leader (ISR shrink and expand).


@attrs.frozen(kw_only=True)
class LeaderIsrState:
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        return _dumps(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> LeaderIsrState:
        d = json.loads(data)
        return cls(
            leader=int(d["leader"]),
            leader_epoch=int(d["leader_epoch"]),
            isr=tuple(int(b) for b in d["isr"]),
            controller_epoch=int(d["controller_epoch"]),
        )


# --- /config/topics/<topic>: {"version":1,"config":{"retention.ms":"1000"}} -------------------


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(sorted(configs.items()))})


def decode_topic_config(data: bytes) -> dict[str, str]:
    if not data:
        return {}
    return {k: str(v) for k, v in (json.loads(data).get("config") or {}).items()}


# --- /isr_change_notification/isr_change_<seq> ------------------------------------------------
# {"version":1,"partitions":[{"topic":"t","partition":0}]}: written (sequential) by a leader
# whose ISR changed, so that the controller sends UpdateMetadata to every broker.

ISR_CHANGE_PREFIX = "isr_change_"


def encode_isr_change(partitions: Sequence[tuple[str, int]]) -> bytes:
    return _dumps(
        {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
    )


def decode_isr_change(data: bytes) -> list[tuple[str, int]]:
    return [(e["topic"], int(e["partition"])) for e in json.loads(data)["partitions"]]


# --- /log_dir_event_notification/log_dir_event_<seq> -------------------------------------------
# {"version":1,"broker":2,"event":1}: written (sequential) by a broker one of whose log dirs
# went offline (event 1, Kafka's LogDirFailure), so that the controller finds out which of
# its replicas are offline (LeaderAndIsr answers KAFKA_STORAGE_ERROR for them) and moves
# their leaderships.

LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE = 1


def encode_log_dir_event(broker_id: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE})


def decode_log_dir_event(data: bytes) -> tuple[int, int]:
    """(broker id, event)."""
    value = json.loads(data)
    return int(value["broker"]), int(value.get("event", LOG_DIR_FAILURE))


# --- /latest_producer_id_block: {"version":1,"broker":1,"block_start":"0","block_end":"999"} --


@attrs.frozen(kw_only=True)
class ProducerIdBlock:
    broker: int
    block_start: int
    block_end: int  # inclusive

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": 1,
                "broker": self.broker,
                "block_start": str(self.block_start),
                "block_end": str(self.block_end),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        d = json.loads(data)
        return cls(
            broker=int(d["broker"]),
            block_start=int(d["block_start"]),
            block_end=int(d["block_end"]),
        )
