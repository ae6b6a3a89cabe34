"""The group coordinator (Kafka's `kafka.coordinator.group` and, since 3.x, its
group-coordinator module): consumer groups and their committed offsets.

Owns group membership (`group_coordinator`, `group_metadata`: the classic join/sync
protocol and its state machine), committed offsets and group administration (`offsets`,
`txn_offsets`), the records it keeps in `__consumer_offsets` (`records`, `store`), group
configs (`group_config`) and its timers; KIP-848 consumer groups in `consumer/`
(ConsumerGroupHeartbeat, server-side assignors, their records), beside the classic ones.
It may import `cluster.coordinator_log`, `cluster/replication/` (its writes wait for the
ISR like any acks=all produce), `log/`, `protocol/`; never `cluster/transactions/`,
which completes transactional offset commits through it.
"""
