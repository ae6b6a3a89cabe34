"""Apache Kafka 3.9's config keys, as facts to test against: every broker key (with its
ConfigDef type), the ones Kafka defines as internal, the ones it changes at runtime (and of
those, the ones it changes per broker only), and every topic key.

Read from Kafka 3.9's source (`AbstractKafkaConfig.CONFIG_DEF` and the config classes it
merges, `DynamicConfig.Broker`, `DynamicBrokerConfig`, `LogConfig`) and kept here apart from
the broker's own table (trio_broker/config/), so a test compares the two.
"""

from __future__ import annotations


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Broker keys by ConfigDef type.
BROKER_KEY_TYPES: dict[str, frozenset[str]] = {
    "BOOLEAN": _names(
        """
    auto.create.topics.enable auto.include.jmx.reporter auto.leader.rebalance.enable
    broker.id.generation.enable controlled.shutdown.enable delete.topic.enable
    eligible.leader.replicas.enable group.coordinator.new.enable group.share.enable
    log.cleaner.enable log.message.downconversion.enable log.preallocate
    remote.log.storage.system.enable ssl.allow.dn.changes ssl.allow.san.changes
    transaction.partition.verification.enable unclean.leader.election.enable
    unstable.api.versions.enable unstable.feature.versions.enable
    zookeeper.metadata.migration.enable zookeeper.set.acl zookeeper.ssl.client.enable
    zookeeper.ssl.crl.enable zookeeper.ssl.ocsp.enable
"""
    ),
    "CLASS": _names(
        """
    alter.config.policy.class.name client.quota.callback.class
    create.topic.policy.class.name principal.builder.class
    sasl.client.callback.handler.class sasl.login.callback.handler.class sasl.login.class
    sasl.server.callback.handler.class ssl.engine.factory.class
"""
    ),
    "DOUBLE": _names(
        """
    log.cleaner.io.buffer.load.factor log.cleaner.io.max.bytes.per.second
    log.cleaner.min.cleanable.ratio remote.log.manager.task.retry.jitter
    sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor
    sasl.login.refresh.window.factor sasl.login.refresh.window.jitter
"""
    ),
    "INT": _names(
        """
    alter.log.dirs.replication.quota.window.num
    alter.log.dirs.replication.quota.window.size.seconds background.threads
    broker.heartbeat.interval.ms broker.id broker.session.timeout.ms compression.gzip.level
    compression.lz4.level compression.zstd.level connection.failed.authentication.delay.ms
    controlled.shutdown.max.retries controller.quorum.append.linger.ms
    controller.quorum.election.backoff.max.ms controller.quorum.election.timeout.ms
    controller.quorum.fetch.timeout.ms controller.quorum.request.timeout.ms
    controller.quorum.retry.backoff.ms controller.quota.window.num
    controller.quota.window.size.seconds controller.socket.timeout.ms
    default.replication.factor delete.records.purgatory.purge.interval.requests
    fetch.max.bytes fetch.purgatory.purge.interval.requests
    group.consumer.heartbeat.interval.ms group.consumer.max.heartbeat.interval.ms
    group.consumer.max.session.timeout.ms group.consumer.max.size
    group.consumer.min.heartbeat.interval.ms group.consumer.min.session.timeout.ms
    group.consumer.session.timeout.ms group.coordinator.append.linger.ms
    group.coordinator.threads group.initial.rebalance.delay.ms group.max.session.timeout.ms
    group.max.size group.min.session.timeout.ms group.share.delivery.count.limit
    group.share.heartbeat.interval.ms group.share.max.heartbeat.interval.ms
    group.share.max.record.lock.duration.ms group.share.max.session.timeout.ms
    group.share.min.heartbeat.interval.ms group.share.min.record.lock.duration.ms
    group.share.min.session.timeout.ms group.share.partition.max.record.locks
    group.share.record.lock.duration.ms group.share.session.timeout.ms
    initial.broker.registration.timeout.ms kafka.metrics.polling.interval.secs
    leader.imbalance.per.broker.percentage log.cleaner.io.buffer.size log.cleaner.threads
    log.flush.offset.checkpoint.interval.ms log.flush.start.offset.checkpoint.interval.ms
    log.index.interval.bytes log.index.size.max.bytes log.retention.hours
    log.retention.minutes log.roll.hours log.roll.jitter.hours log.segment.bytes
    max.connection.creation.rate max.connections max.connections.per.ip
    max.incremental.fetch.session.cache.slots max.request.partition.size.limit
    message.max.bytes metadata.log.segment.bytes metadata.log.segment.min.bytes
    metadata.max.idle.interval.ms metrics.num.samples min.insync.replicas node.id
    num.io.threads num.network.threads num.partitions num.recovery.threads.per.data.dir
    num.replica.alter.log.dirs.threads num.replica.fetchers offset.metadata.max.bytes
    offsets.commit.timeout.ms offsets.load.buffer.size offsets.retention.minutes
    offsets.topic.compression.codec offsets.topic.num.partitions offsets.topic.segment.bytes
    password.encoder.iterations password.encoder.key.length
    producer.id.expiration.check.interval.ms producer.id.expiration.ms
    producer.purgatory.purge.interval.requests queued.max.requests quota.window.num
    quota.window.size.seconds remote.fetch.max.wait.ms
    remote.log.manager.copier.thread.pool.size remote.log.manager.copy.quota.window.num
    remote.log.manager.copy.quota.window.size.seconds
    remote.log.manager.expiration.thread.pool.size remote.log.manager.fetch.quota.window.num
    remote.log.manager.fetch.quota.window.size.seconds remote.log.manager.thread.pool.size
    remote.log.metadata.custom.metadata.max.bytes remote.log.reader.max.pending.tasks
    remote.log.reader.threads replica.fetch.backoff.ms replica.fetch.max.bytes
    replica.fetch.min.bytes replica.fetch.response.max.bytes replica.fetch.wait.max.ms
    replica.socket.receive.buffer.bytes replica.socket.timeout.ms
    replication.quota.window.num replication.quota.window.size.seconds request.timeout.ms
    reserved.broker.max.id sasl.login.connect.timeout.ms sasl.login.read.timeout.ms
    sasl.oauthbearer.clock.skew.seconds sasl.server.max.receive.size
    socket.listen.backlog.size socket.receive.buffer.bytes socket.request.max.bytes
    socket.send.buffer.bytes telemetry.max.bytes
    transaction.abort.timed.out.transaction.cleanup.interval.ms transaction.max.timeout.ms
    transaction.remove.expired.transaction.cleanup.interval.ms
    transaction.state.log.load.buffer.size transaction.state.log.min.isr
    transaction.state.log.num.partitions transaction.state.log.segment.bytes
    transactional.id.expiration.ms zookeeper.connection.timeout.ms
    zookeeper.max.in.flight.requests zookeeper.metadata.migration.min.batch.size
    zookeeper.session.timeout.ms
"""
    ),
    "LIST": _names(
        """
    controller.quorum.bootstrap.servers controller.quorum.voters group.consumer.assignors
    group.coordinator.rebalance.protocols kafka.metrics.reporters log.cleanup.policy
    metric.reporters process.roles sasl.enabled.mechanisms
    sasl.kerberos.principal.to.local.rules sasl.oauthbearer.expected.audience
    ssl.cipher.suites ssl.enabled.protocols zookeeper.ssl.cipher.suites
    zookeeper.ssl.enabled.protocols
"""
    ),
    "LONG": _names(
        """
    connections.max.idle.ms connections.max.reauth.ms controlled.shutdown.retry.backoff.ms
    delegation.token.expiry.check.interval.ms delegation.token.expiry.time.ms
    delegation.token.max.lifetime.ms follower.replication.throttled.rate
    leader.imbalance.check.interval.seconds leader.replication.throttled.rate
    log.cleaner.backoff.ms log.cleaner.dedupe.buffer.size log.cleaner.delete.retention.ms
    log.cleaner.max.compaction.lag.ms log.cleaner.min.compaction.lag.ms
    log.dir.failure.timeout.ms log.flush.interval.messages log.flush.interval.ms
    log.flush.scheduler.interval.ms log.initial.task.delay.ms log.local.retention.bytes
    log.local.retention.ms log.message.timestamp.after.max.ms
    log.message.timestamp.before.max.ms log.message.timestamp.difference.max.ms
    log.retention.bytes log.retention.check.interval.ms log.retention.ms log.roll.jitter.ms
    log.roll.ms log.segment.delete.delay.ms metadata.log.max.record.bytes.between.snapshots
    metadata.log.max.snapshot.interval.ms metadata.log.segment.ms
    metadata.max.retention.bytes metadata.max.retention.ms metrics.sample.window.ms
    offsets.retention.check.interval.ms queued.max.request.bytes
    remote.log.index.file.cache.total.size.bytes
    remote.log.manager.copy.max.bytes.per.second
    remote.log.manager.fetch.max.bytes.per.second remote.log.manager.task.interval.ms
    remote.log.manager.task.retry.backoff.max.ms remote.log.manager.task.retry.backoff.ms
    replica.alter.log.dirs.io.max.bytes.per.second
    replica.high.watermark.checkpoint.interval.ms replica.lag.time.max.ms
    sasl.kerberos.min.time.before.relogin sasl.login.retry.backoff.max.ms
    sasl.login.retry.backoff.ms sasl.oauthbearer.jwks.endpoint.refresh.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.ms server.max.startup.time.ms
    socket.connection.setup.timeout.max.ms socket.connection.setup.timeout.ms
    unclean.leader.election.interval.ms
"""
    ),
    "PASSWORD": _names(
        """
    delegation.token.master.key delegation.token.secret.key password.encoder.old.secret
    password.encoder.secret sasl.jaas.config ssl.key.password ssl.keystore.certificate.chain
    ssl.keystore.key ssl.keystore.password ssl.truststore.certificates
    ssl.truststore.password zookeeper.ssl.keystore.password
    zookeeper.ssl.truststore.password
"""
    ),
    "SHORT": _names(
        """
    group.share.max.groups group.share.max.size offsets.commit.required.acks
    offsets.topic.replication.factor sasl.login.refresh.buffer.seconds
    sasl.login.refresh.min.period.seconds transaction.state.log.replication.factor
"""
    ),
    "STRING": _names(
        """
    advertised.listeners authorizer.class.name broker.rack compression.type
    control.plane.listener.name controller.listener.names early.start.listeners
    group.consumer.migration.policy inter.broker.listener.name inter.broker.protocol.version
    listener.security.protocol.map listeners log.dir log.dirs log.message.format.version
    log.message.timestamp.type max.connections.per.ip.overrides metadata.log.dir
    metrics.recording.level password.encoder.cipher.algorithm
    password.encoder.keyfactory.algorithm remote.log.metadata.manager.class.name
    remote.log.metadata.manager.class.path remote.log.metadata.manager.impl.prefix
    remote.log.metadata.manager.listener.name remote.log.storage.manager.class.name
    remote.log.storage.manager.class.path remote.log.storage.manager.impl.prefix
    replica.selector.class sasl.kerberos.kinit.cmd sasl.kerberos.service.name
    sasl.mechanism.controller.protocol sasl.mechanism.inter.broker.protocol
    sasl.oauthbearer.expected.issuer sasl.oauthbearer.jwks.endpoint.url
    sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
    sasl.oauthbearer.token.endpoint.url security.inter.broker.protocol security.providers
    ssl.client.auth ssl.endpoint.identification.algorithm ssl.keymanager.algorithm
    ssl.keystore.location ssl.keystore.type ssl.principal.mapping.rules ssl.protocol
    ssl.provider ssl.secure.random.implementation ssl.trustmanager.algorithm
    ssl.truststore.location ssl.truststore.type zookeeper.clientCnxnSocket zookeeper.connect
    zookeeper.ssl.endpoint.identification.algorithm zookeeper.ssl.keystore.location
    zookeeper.ssl.keystore.type zookeeper.ssl.protocol zookeeper.ssl.truststore.location
    zookeeper.ssl.truststore.type
"""
    ),
}
BROKER_KEYS: dict[str, str] = {n: t for t, names in BROKER_KEY_TYPES.items() for n in names}

# Kafka defines these with defineInternal: accepted, described only when set.
INTERNAL_BROKER_KEYS = _names(
    """
    group.consumer.migration.policy group.coordinator.new.enable group.share.enable
    log.initial.task.delay.ms metadata.log.segment.min.bytes
    producer.id.expiration.check.interval.ms remote.log.manager.task.retry.backoff.max.ms
    remote.log.manager.task.retry.backoff.ms remote.log.manager.task.retry.jitter
    server.max.startup.time.ms unclean.leader.election.interval.ms
    unstable.api.versions.enable unstable.feature.versions.enable
    zookeeper.metadata.migration.min.batch.size
"""
)

# Kafka changes these at runtime (DescribeConfigs: read_only=false).
DYNAMIC_BROKER_KEYS = _names(
    """
    advertised.listeners background.threads compression.gzip.level compression.lz4.level
    compression.type compression.zstd.level follower.replication.throttled.rate
    leader.replication.throttled.rate listener.security.protocol.map listeners
    log.cleaner.backoff.ms log.cleaner.dedupe.buffer.size log.cleaner.delete.retention.ms
    log.cleaner.io.buffer.load.factor log.cleaner.io.buffer.size
    log.cleaner.io.max.bytes.per.second log.cleaner.max.compaction.lag.ms
    log.cleaner.min.cleanable.ratio log.cleaner.min.compaction.lag.ms log.cleaner.threads
    log.cleanup.policy log.flush.interval.messages log.flush.interval.ms
    log.flush.scheduler.interval.ms log.index.interval.bytes log.index.size.max.bytes
    log.local.retention.bytes log.local.retention.ms log.message.downconversion.enable
    log.message.timestamp.after.max.ms log.message.timestamp.before.max.ms
    log.message.timestamp.difference.max.ms log.message.timestamp.type log.preallocate
    log.retention.bytes log.retention.hours log.retention.minutes log.retention.ms
    log.roll.hours log.roll.jitter.hours log.roll.jitter.ms log.roll.ms log.segment.bytes
    log.segment.delete.delay.ms max.connection.creation.rate max.connections
    max.connections.per.ip max.connections.per.ip.overrides message.max.bytes
    metric.reporters min.insync.replicas num.io.threads num.network.threads
    num.recovery.threads.per.data.dir num.replica.fetchers principal.builder.class
    producer.id.expiration.ms remote.fetch.max.wait.ms
    remote.log.index.file.cache.total.size.bytes
    remote.log.manager.copy.max.bytes.per.second
    remote.log.manager.fetch.max.bytes.per.second
    replica.alter.log.dirs.io.max.bytes.per.second sasl.enabled.mechanisms sasl.jaas.config
    sasl.kerberos.kinit.cmd sasl.kerberos.min.time.before.relogin
    sasl.kerberos.principal.to.local.rules sasl.kerberos.service.name
    sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor
    sasl.login.refresh.buffer.seconds sasl.login.refresh.min.period.seconds
    sasl.login.refresh.window.factor sasl.login.refresh.window.jitter
    sasl.mechanism.inter.broker.protocol ssl.cipher.suites ssl.client.auth
    ssl.enabled.protocols ssl.endpoint.identification.algorithm ssl.engine.factory.class
    ssl.key.password ssl.keymanager.algorithm ssl.keystore.certificate.chain
    ssl.keystore.key ssl.keystore.location ssl.keystore.password ssl.keystore.type
    ssl.protocol ssl.provider ssl.secure.random.implementation ssl.trustmanager.algorithm
    ssl.truststore.certificates ssl.truststore.location ssl.truststore.password
    ssl.truststore.type transaction.partition.verification.enable
    unclean.leader.election.enable
"""
)

# ... and of those, these only per broker (not at the cluster default).
PER_BROKER_KEYS = _names(
    """
    advertised.listeners listener.security.protocol.map listeners principal.builder.class
    sasl.enabled.mechanisms sasl.jaas.config sasl.kerberos.kinit.cmd
    sasl.kerberos.min.time.before.relogin sasl.kerberos.principal.to.local.rules
    sasl.kerberos.service.name sasl.kerberos.ticket.renew.jitter
    sasl.kerberos.ticket.renew.window.factor sasl.login.refresh.buffer.seconds
    sasl.login.refresh.min.period.seconds sasl.login.refresh.window.factor
    sasl.login.refresh.window.jitter sasl.mechanism.inter.broker.protocol ssl.cipher.suites
    ssl.client.auth ssl.enabled.protocols ssl.endpoint.identification.algorithm
    ssl.engine.factory.class ssl.key.password ssl.keymanager.algorithm
    ssl.keystore.certificate.chain ssl.keystore.key ssl.keystore.location
    ssl.keystore.password ssl.keystore.type ssl.protocol ssl.provider
    ssl.secure.random.implementation ssl.trustmanager.algorithm ssl.truststore.certificates
    ssl.truststore.location ssl.truststore.password ssl.truststore.type
"""
)

# Topic keys by ConfigDef type.
TOPIC_KEY_TYPES: dict[str, frozenset[str]] = {
    "BOOLEAN": _names(
        """
    message.downconversion.enable preallocate remote.log.copy.disable
    remote.log.delete.on.disable remote.storage.enable unclean.leader.election.enable
"""
    ),
    "DOUBLE": _names(
        """
    min.cleanable.dirty.ratio
"""
    ),
    "INT": _names(
        """
    compression.gzip.level compression.lz4.level compression.zstd.level index.interval.bytes
    max.message.bytes min.insync.replicas segment.bytes segment.index.bytes
"""
    ),
    "LIST": _names(
        """
    cleanup.policy follower.replication.throttled.replicas
    leader.replication.throttled.replicas
"""
    ),
    "LONG": _names(
        """
    delete.retention.ms file.delete.delay.ms flush.messages flush.ms local.retention.bytes
    local.retention.ms max.compaction.lag.ms message.timestamp.after.max.ms
    message.timestamp.before.max.ms message.timestamp.difference.max.ms
    min.compaction.lag.ms retention.bytes retention.ms segment.jitter.ms segment.ms
"""
    ),
    "STRING": _names(
        """
    compression.type message.format.version message.timestamp.type
"""
    ),
}
TOPIC_KEYS: dict[str, str] = {n: t for t, names in TOPIC_KEY_TYPES.items() for n in names}
