"""The cluster: what makes one broker part of many (and a lone broker a cluster of one).

    zookeeper/      the ZooKeeper session, Kafka's znode layout, registration, change
                    notifications                                             (kafka.zk)
    controller/     the controller's election, state machines, channels to the brokers,
                    reassignments; the broker's side of controlled shutdown  (kafka.controller)
    replication/    ReplicaManager, Partition, ISR and high watermark, the purgatory, replica
                    fetchers, fetch sessions, replication quotas    (kafka.server, kafka.cluster)
    groups/         the group coordinator and its records in __consumer_offsets
                                                               (kafka.coordinator.group)
    transactions/   the transaction coordinator, markers, verification, producer ids
                                                               (kafka.coordinator.transaction)

Beside them, what every part reads: `metadata` (Kafka's MetadataCache), `topics` and
`zk_topics` (topic management: ZkAdminManager), `topic_config` (LogConfig and the topic
keys), `replica_assignment` (AdminUtils), `dynamic_broker_config` (DynamicBrokerConfig) and
`coordinator_log` (what the two coordinators share about their internal topics).

Layers: `cluster` stands on `client/` (outgoing connections), `server/` (the request
values a delayed operation answers), `log/`, `protocol/`, `config` and `errors`, and beside
`security/`; it never imports `apis/` or the broker's lifecycle (a part that needs the
`Broker` names it for type checking only). Inside, `zookeeper/` and the modules above are
the floor; `replication/` and `controller/` stand on them; `groups/` and `transactions/`
stand on `replication/` and never on each other. tests/test_layering.py keeps all this.
"""
