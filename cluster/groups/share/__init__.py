"""KIP-932 share groups (Kafka's `coordinator.group.modern.share` and `server.share`):
membership by ShareGroupHeartbeat with a simple server-side assignor (`share_group`,
`share_coordinator`), and the share-partitions their members acquire records from and
acknowledge them to, with share sessions and acquisition locks (`share_partition`,
`share_fetch`), kept durable in `__share_group_state` (`share_state`)."""
