"""Security: listeners' protocols (TLS, SASL), credentials, ACLs, client quotas.

Nothing here is imported by a broker whose listeners are all PLAINTEXT and which has no
authorizer: start-up and the plaintext hot paths do not pay for it.

Its modules sit in three layers (tests/test_layering.py):

- mechanisms, which the Trio client uses too and which know no broker: `sasl`, `tls`,
  `acl`, `credentials`, `principal_rules`, `rate` (Kafka's common.security);
- the security of connections, beside the socket server (`server/`): a listener's TLS and
  SASL handshake (`listener`, `connection`; Kafka's ChannelBuilders and
  SaslServerAuthenticator) and the client config of the broker's own outgoing
  connections (`inter_broker`);
- broker services beside `cluster/`: the authorizer and its checks per API
  (`authorizer`, `authorize_*`; Kafka's AclAuthorizer), client quotas, and the ZooKeeper
  stores of credentials, ACLs and quotas (`zk_*`), which stand on `cluster/zookeeper/`.
"""
