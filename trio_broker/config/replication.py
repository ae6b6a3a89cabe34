"""Replication and the controller: leader election, leader balance, followers' fetching, the ISR.

Kafka's `ReplicationConfigs` (`replica.*`, `num.replica.fetchers`, `replica.selector.class`,
`unclean.leader.election.enable`, `auto.leader.rebalance.enable`, `leader.imbalance.*`,
`controller.socket.timeout.ms`) and the broker's part in the controller's work,
`controlled.shutdown.*` from `ServerConfigs`. `offsets.commit.timeout.ms`
(`GroupCoordinatorConfig`) and `request.timeout.ms` (`ServerConfigs`) are here too: what
they time is a wait for the ISR. The controller moves leaderships, followers fetch from
leaders (`ReplicaFetcher`), and leaders keep the ISR and the high watermark (`Partition`).
"""

from __future__ import annotations

from trio_broker.config.keys import (
    CLUSTER_WIDE,
    ConfigKey,
    _at_least,
    _bool,
    _int,
    _metadata_version,
    _one_of,
    _str,
    key,
)

__all__ = ["LEADER_SELECTOR", "RACK_AWARE_REPLICA_SELECTOR", "REPLICATION_CONFIGS"]


# Kafka's replica.selector.class values (KIP-392), by their Java class names.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"


# Kafka's other ReplicationConfigs keys: accepted, stored, described, not acted on.
_REPLICATION_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("replica.socket.receive.buffer.bytes", "INT", 64 * 1024, None,
        "SO_RCVBUF of the followers' connections to leaders."),
    key("fetch.purgatory.purge.interval.requests", "INT", 1000, None,
        "Fetches parked between purges of the fetch purgatory."),
    key("producer.purgatory.purge.interval.requests", "INT", 1000, None,
        "Produces parked between purges of the produce purgatory."),
    key("delete.records.purgatory.purge.interval.requests", "INT", 1, None,
        "DeleteRecords requests parked between purges of their purgatory."),
    key("unclean.leader.election.interval.ms", "LONG", 300000, _at_least(1),
        "How often a KRaft controller looks for unclean elections to run.", internal=True),
    key("inter.broker.protocol.version", "STRING", "3.9-IV0", _metadata_version,
        "The protocol version brokers speak to each other during a rolling upgrade."),
)  # fmt: skip


REPLICATION_CONFIGS: tuple[ConfigKey, ...] = (
    # where consumers read from
    ConfigKey(
        "replica.selector.class",
        "STRING",
        None,
        _str,
        _one_of(RACK_AWARE_REPLICA_SELECTOR, LEADER_SELECTOR),
        "Which replica a consumer reads from (KIP-392). RackAwareReplicaSelector sends a "
        "consumer that names its rack (client.rack) to an in-sync replica in that rack; "
        "unset, or LeaderSelector, every consumer reads from the leader.",
    ),
    # the controller and the broker's part in it
    ConfigKey(
        "unclean.leader.election.enable",
        "BOOLEAN",
        False,
        _bool,
        None,
        "Whether a replica outside the ISR may become leader when no ISR member is alive "
        "(data loss); topics may override it.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "controlled.shutdown.enable",
        "BOOLEAN",
        True,
        _bool,
        None,
        "On a graceful stop, ask the controller to move this broker's leaderships first.",
    ),
    ConfigKey(
        "controlled.shutdown.max.retries",
        "INT",
        3,
        _int,
        _at_least(0),
        "Controlled shutdown attempts after the first, before stopping anyway.",
    ),
    ConfigKey(
        "controlled.shutdown.retry.backoff.ms",
        "LONG",
        5000,
        _int,
        _at_least(0),
        "Wait between controlled shutdown attempts.",
    ),
    ConfigKey(
        "auto.leader.rebalance.enable",
        "BOOLEAN",
        True,
        _bool,
        None,
        "The controller moves leadership back to preferred replicas (the first of each "
        "assignment) when a broker's share of lost leaderships passes "
        "leader.imbalance.per.broker.percentage.",
    ),
    ConfigKey(
        "leader.imbalance.check.interval.seconds",
        "LONG",
        300,
        _int,
        _at_least(1),
        "How often the controller checks leader imbalance.",
    ),
    ConfigKey(
        "leader.imbalance.per.broker.percentage",
        "INT",
        10,
        _int,
        _at_least(0),
        "Percentage of a broker's preferred leaderships held elsewhere before a rebalance.",
    ),
    ConfigKey(
        "controller.socket.timeout.ms",
        "INT",
        30000,
        _int,
        _at_least(1),
        "Timeout of the controller's requests to brokers (and of ControlledShutdown).",
    ),
    # Broker fencing (KRaft's, here in a ZooKeeper cluster: cluster/controller/fencing.py):
    # every broker heartbeats the controller; one silent for the session timeout, while the
    # controller hears a majority, loses its leaderships and leaves the ISRs.
    ConfigKey(
        "broker.heartbeat.interval.ms",
        "INT",
        2000,
        _int,
        _at_least(1),
        "Interval of each broker's heartbeats to the controller (BrokerHeartbeat).",
    ),
    ConfigKey(
        "broker.session.timeout.ms",
        "INT",
        9000,
        _int,
        _at_least(1),
        "A broker whose heartbeats the controller has not had for this long is fenced.",
    ),
    # replication: followers fetch from leaders; leaders keep the ISR and the high watermark
    ConfigKey(
        "num.replica.fetchers",
        "INT",
        1,
        _int,
        _at_least(1),
        "Fetcher tasks per source broker that copy its partitions to this one.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "replica.fetch.max.bytes",
        "INT",
        1048576,
        _int,
        _at_least(0),
        "Bytes of one partition a follower asks for in a fetch.",
    ),
    ConfigKey(
        "replica.fetch.response.max.bytes",
        "INT",
        10485760,
        _int,
        _at_least(0),
        "Bytes a follower asks for in one fetch, over all its partitions.",
    ),
    ConfigKey(
        "replica.fetch.wait.max.ms",
        "INT",
        500,
        _int,
        _at_least(0),
        "How long a follower's fetch may wait at the leader for replica.fetch.min.bytes.",
    ),
    ConfigKey(
        "replica.fetch.min.bytes",
        "INT",
        1,
        _int,
        _at_least(1),
        "Bytes a follower's fetch waits for at the leader.",
    ),
    ConfigKey(
        "replica.fetch.backoff.ms",
        "INT",
        1000,
        _int,
        _at_least(0),
        "How long a follower waits after a failed fetch before the next.",
    ),
    ConfigKey(
        "replica.lag.time.max.ms",
        "LONG",
        30000,
        _int,
        _at_least(1),
        "A follower not caught up with the leader for this long leaves the ISR.",
    ),
    ConfigKey(
        "replica.high.watermark.checkpoint.interval.ms",
        "LONG",
        5000,
        _int,
        _at_least(1),
        "How often high watermarks are written to replication-offset-checkpoint.",
    ),
    ConfigKey(
        "offsets.commit.timeout.ms",
        "INT",
        5000,
        _int,
        _at_least(1),
        "How long an offset commit waits for the ISR of its __consumer_offsets partition.",
    ),
    ConfigKey(
        "request.timeout.ms",
        "INT",
        30000,
        _int,
        _at_least(1),
        "How long the transaction coordinator's appends and markers wait for the ISR, and "
        "its WriteTxnMarkers requests for an answer.",
    ),
    ConfigKey(
        "replica.socket.timeout.ms",
        "INT",
        30000,
        _int,
        _at_least(1),
        "Request timeout of the replica fetchers' requests.",
    ),
    *_REPLICATION_STORED_ONLY,
)
