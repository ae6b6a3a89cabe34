"""Kafka's znode layout and the JSON in it (Kafka's ZkData), so that anyone who knows a
ZooKeeper-era Kafka cluster can read ours with zkCli.sh.

Only the layout and the encodings live here; no I/O. Paths are relative to the chroot of
`zookeeper.connect`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import attrs

__all__ = [
    "CLUSTER_ID_PATH",
    "CONTROLLER_EPOCH_PATH",
    "CONTROLLER_PATH",
    "BROKER_IDS_PATH",
    "PERSISTENT_PATHS",
    "BrokerInfo",
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
    "/log_dir_event_notification",
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


def endpoints_of(listeners: Sequence[object]) -> tuple[EndPoint, ...]:
    """EndPoints of the broker's advertised `Listener`s (name, host, port); the listener
    name is its security protocol until listener.security.protocol.map exists here."""
    return tuple(
        EndPoint(listener=lst.name, host=lst.host, port=lst.port, security_protocol=lst.name)  # type: ignore[attr-defined]
        for lst in listeners
    )
