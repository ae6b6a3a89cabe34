"""ZooKeeper, as Kafka used it for a decade (Kafka's `kafka.zk`: KafkaZkClient, ZkData,
AdminZkClient, ZkNodeChangeNotificationListener).

Owns the kazoo session bridged into Trio (`session`), the znode layout and its JSON
(`zk_data`), the broker's registration and its epoch (`membership`, `broker_epoch`),
topic writes any broker may make (`admin_zk_client`), change notifications
(`change_notifications`) and the dynamic broker configs kept under /config
(`broker_configs`). It may import `cluster.metadata`, `config`, `errors`, `protocol/` and
`security.inter_broker`; never the controller, replication or the coordinators, which stand
on it (the controller election is handed to membership, not imported by it).
"""
