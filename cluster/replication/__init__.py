"""Replication on every broker (Kafka's `kafka.server.ReplicaManager`,
`kafka.cluster.Partition`, ReplicaFetcherThread, DelayedProduce, FetchSession,
ReplicationQuotaManager).

Owns this broker's replicas (`replica_manager`, `partition`: leader or follower, ISR and
high watermark), the followers' fetchers (`replica_fetcher`), the purgatory where an
acks=all produce or a long-polling fetch waits without holding a handler (`purgatory`,
`delayed_produce`, `isr_wait`), consumers' incremental fetch sessions (`fetch_session`)
and the replication quotas. It may import `cluster/zookeeper/` and the cluster modules
beside it, `client/`, `server.requests` and `server.sendfile`, `log/` and `protocol/`;
never the controller or the coordinators, which use it.
"""
