"""The transaction coordinator (Kafka's `kafka.coordinator.transaction`):
TransactionCoordinator, TransactionMetadata, TransactionStateManager,
TransactionMarkerChannelManager, ProducerIdManager, and KIP-890's verification.

Owns transactional ids and their state machine (`transaction_coordinator`,
`transaction_metadata`), their records in `__transaction_state` (`records`, `store`),
writing markers (`markers`) and sending them to other leaders (`marker_channel_manager`),
a leader's check that a batch belongs to an ongoing transaction (`verification`) and
producer id blocks, on disk or in ZooKeeper (`producer_id_manager`,
`zk_producer_id_manager`). It may import `cluster.coordinator_log`, `cluster/zookeeper/`,
`cluster/replication/`, `client/`, `log/`, `protocol/`; never `cluster/groups/` (the broker
hands offsets to the group coordinator).
"""
