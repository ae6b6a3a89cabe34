"""The controller (Kafka's `kafka.controller`, ZooKeeper era): KafkaController,
ControllerContext, ControllerChannelManager, PartitionStateMachine, reassignments.

Runs only on the broker holding /controller: it elects (`kafka_controller`), keeps what it
knows in `context`, moves partitions through `partition_state_machine`, acts on requests
and timers (`actions`, `reassignment`) and tells brokers with LeaderAndIsr, UpdateMetadata
and StopReplica over `channel_manager`. `controlled_shutdown` is the other side: a broker
asking the controller to move its leaderships before it stops. It may import
`cluster/zookeeper/`, the cluster modules beside it (`metadata`, `replica_assignment`),
`client/` for its connections and `security.inter_broker`; not replication or the
coordinators.
"""
