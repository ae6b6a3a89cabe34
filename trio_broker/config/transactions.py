"""The transaction coordinator and producer state: `__transaction_state`, timeouts, expiry.

Kafka's `TransactionStateManagerConfigs` (`transactional.id.expiration.ms`,
`transaction.max.timeout.ms`, the cleanup intervals), `TransactionLogConfigs`
(`transaction.state.log.*`) and `ProducerStateManagerConfig` (`producer.id.expiration.ms`).
"""

from __future__ import annotations

from trio_broker.config.keys import CLUSTER_WIDE, ConfigKey, _at_least, _int, key

__all__ = ["TRANSACTION_CONFIGS"]


# Kafka's other transaction keys: accepted, stored, described, not acted on.
_TRANSACTION_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("transaction.state.log.load.buffer.size", "INT", 5 << 20, _at_least(1),
        "Read buffer used when __transaction_state is loaded."),
    key("transaction.partition.verification.enable", "BOOLEAN", True, None,
        "Verify that a transaction added a partition before accepting its records "
        "(KIP-890).", dynamic=CLUSTER_WIDE),
    key("producer.id.expiration.check.interval.ms", "INT", 600000, _at_least(1),
        "How often expired producer ids are removed.", internal=True),
)  # fmt: skip


TRANSACTION_CONFIGS: tuple[ConfigKey, ...] = (
    # producer ids: transactional and idempotent producers' state
    ConfigKey(
        "transactional.id.expiration.ms",
        "INT",
        604800000,
        _int,
        _at_least(1),
        "Producer id expiry.",
    ),
    ConfigKey(
        "producer.id.expiration.ms",
        "INT",
        86400000,
        _int,
        _at_least(1),
        "Idempotent producer state expiry.",
        dynamic=CLUSTER_WIDE,
    ),
    # transactions (issue 15): the transaction coordinator and `__transaction_state`
    ConfigKey(
        "transaction.state.log.num.partitions",
        "INT",
        50,
        _int,
        _at_least(1),
        "Partitions of __transaction_state (fixed once the topic exists).",
    ),
    ConfigKey(
        "transaction.state.log.replication.factor",
        "SHORT",
        3,
        _int,
        _at_least(1),
        "Replication factor of __transaction_state, as offsets.topic.replication.factor.",
    ),
    ConfigKey(
        "transaction.state.log.segment.bytes",
        "INT",
        104857600,
        _int,
        _at_least(1),
        "Segment size of __transaction_state.",
    ),
    ConfigKey(
        "transaction.state.log.min.isr",
        "INT",
        1,
        _int,
        _at_least(1),
        "min.insync.replicas of __transaction_state.",
    ),
    ConfigKey(
        "transaction.max.timeout.ms",
        "INT",
        900000,
        _int,
        _at_least(1),
        "Largest transaction.timeout.ms a producer may ask for.",
    ),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "INT",
        10000,
        _int,
        _at_least(1),
        "How often transactions open longer than their timeout are aborted.",
    ),
    ConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "INT",
        3600000,
        _int,
        _at_least(1),
        "How often transactional ids past transactional.id.expiration.ms are removed.",
    ),
    *_TRANSACTION_STORED_ONLY,
)
