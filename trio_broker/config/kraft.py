"""KRaft: process roles, the controller quorum and the metadata log.

Kafka's `KRaftConfigs` and `QuorumConfig`. This broker runs the ZooKeeper-era protocol (a lone
broker is its own controller; a cluster keeps its metadata in ZooKeeper), so it accepts these
keys, checks their values as Kafka does, stores and describes them, and acts on none of them.
"""

from __future__ import annotations

from trio_broker.config.keys import (
    _DAY_MS,
    ConfigKey,
    _at_least,
    _bootstrap_servers,
    _each_of,
    _quorum_voters,
    key,
)

__all__ = ["KRAFT_CONFIGS"]

# Kafka's Records.LOG_OVERHEAD: the smallest metadata log segment holds one batch header.
_LOG_OVERHEAD = 12


KRAFT_CONFIGS: tuple[ConfigKey, ...] = (
    key("process.roles", "LIST", (), _each_of("broker", "controller"),
        "KRaft roles of this node (broker, controller or both); empty runs ZooKeeper-style."),
    key("initial.broker.registration.timeout.ms", "INT", 60000, None,
        "How long a KRaft broker waits to register with the controller quorum at start."),
    key("controller.listener.names", "STRING", None, None,
        "Listener names the KRaft controllers use, comma separated."),
    key("sasl.mechanism.controller.protocol", "STRING", "GSSAPI", None,
        "SASL mechanism for connections to KRaft controllers."),
    key("metadata.log.dir", "STRING", None, None,
        "Directory of the KRaft metadata log; unset, the first log dir."),
    key("metadata.log.segment.bytes", "INT", 1 << 30, _at_least(_LOG_OVERHEAD),
        "Segment size of the KRaft metadata log."),
    key("metadata.log.segment.min.bytes", "INT", 8 << 20, _at_least(_LOG_OVERHEAD),
        "Smallest metadata log segment (a test knob in Kafka).", internal=True),
    key("metadata.log.segment.ms", "LONG", 7 * _DAY_MS, None,
        "Age at which a KRaft metadata log segment is rolled."),
    key("metadata.max.retention.bytes", "LONG", 100 << 20, None,
        "Metadata log and snapshot bytes kept before old snapshots are deleted."),
    key("metadata.max.retention.ms", "LONG", 7 * _DAY_MS, None,
        "How long metadata log segments and snapshots are kept."),
    key("metadata.max.idle.interval.ms", "INT", 500, _at_least(0),
        "How often the active controller writes a no-op record to the metadata log (0: never)."),
    key("metadata.log.max.record.bytes.between.snapshots", "LONG", 20 << 20, _at_least(1),
        "Bytes of metadata records after which a new snapshot is written."),
    key("metadata.log.max.snapshot.interval.ms", "LONG", 3600000, _at_least(0),
        "Longest time between metadata snapshots while records arrive (0: no time limit)."),
    key("server.max.startup.time.ms", "LONG", (1 << 63) - 1, _at_least(0),
        "How long a KRaft node may take to catch up with the metadata log at start.",
        internal=True),
    key("eligible.leader.replicas.enable", "BOOLEAN", False, None,
        "Whether the KRaft controller keeps eligible leader replicas (KIP-966)."),
    key("controller.quorum.voters", "LIST", (), _quorum_voters,
        "The static controller quorum: id@host:port, comma separated."),
    key("controller.quorum.bootstrap.servers", "LIST", (), _bootstrap_servers,
        "Addresses to discover the dynamic controller quorum from: host:port, comma separated."),
    key("controller.quorum.election.timeout.ms", "INT", 1000, None,
        "Time without a leader after which a voter starts an election."),
    key("controller.quorum.fetch.timeout.ms", "INT", 2000, None,
        "Time without a fetch from the leader after which a voter suspects it."),
    key("controller.quorum.election.backoff.max.ms", "INT", 1000, None,
        "Longest wait before a voter starts a new election."),
    key("controller.quorum.append.linger.ms", "INT", 25, None,
        "How long the quorum leader waits to batch metadata writes."),
    key("controller.quorum.request.timeout.ms", "INT", 2000, None,
        "Timeout of requests between controller quorum members."),
    key("controller.quorum.retry.backoff.ms", "INT", 20, None,
        "Wait before a failed quorum request is retried."),
)  # fmt: skip
