"""KIP-932 share groups (Kafka's `coordinator.group.modern.share`, `server.share` and
`share-coordinator`): membership by ShareGroupHeartbeat with a simple server-side assignor
(`share_group`, `share_coordinator`, kept in `__consumer_offsets` by `share_records`); the
share-partitions their members acquire records from and acknowledge them to, with share
sessions and acquisition locks (`share_partition`, `share_fetch`; `share_reader` picks the
batches out of the log); their start offsets for administrators (`share_offsets`); and
their durable state in `__share_group_state`, kept by the broker itself alone
(`share_state`) or in a cluster by the share coordinators (`state_coordinator`), which the
partition leaders read and write (`persister`)."""
