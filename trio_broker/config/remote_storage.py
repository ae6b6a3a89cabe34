"""Tiered storage: the remote log manager and local retention (KIP-405).

Kafka's `RemoteLogManagerConfig` with `log.local.retention.*` from `ServerLogConfigs`. This
broker keeps every segment on local disk and has no remote storage, so it accepts these keys,
checks their values as Kafka does, stores and describes them, and acts on none of them; a
topic may not turn `remote.storage.enable` on while `remote.log.storage.system.enable` is off,
as in Kafka.
"""

from __future__ import annotations

from trio_broker.config.keys import (
    CLUSTER_WIDE,
    ConfigKey,
    _at_least,
    _between,
    _non_empty,
    _pool_size,
    key,
)

__all__ = ["REMOTE_STORAGE_CONFIGS"]

_MAX_LONG = (1 << 63) - 1
_TOPIC_BASED_RLMM = (
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
)


REMOTE_STORAGE_CONFIGS: tuple[ConfigKey, ...] = (
    key("remote.log.storage.system.enable", "BOOLEAN", False, None,
        "Turns tiered storage on for the broker; topics opt in with remote.storage.enable."),
    key("remote.log.storage.manager.impl.prefix", "STRING", "rsm.config.", _non_empty,
        "Prefix of the keys handed to the remote storage manager."),
    key("remote.log.metadata.manager.impl.prefix", "STRING", "rlmm.config.", _non_empty,
        "Prefix of the keys handed to the remote log metadata manager."),
    key("remote.log.storage.manager.class.name", "STRING", None, _non_empty,
        "Class of the remote storage manager (RemoteStorageManager)."),
    key("remote.log.storage.manager.class.path", "STRING", None, None,
        "Class path of the remote storage manager."),
    key("remote.log.metadata.manager.class.name", "STRING", _TOPIC_BASED_RLMM, _non_empty,
        "Class of the remote log metadata manager."),
    key("remote.log.metadata.manager.class.path", "STRING", None, None,
        "Class path of the remote log metadata manager."),
    key("remote.log.metadata.manager.listener.name", "STRING", None, _non_empty,
        "Listener the remote log metadata manager's clients connect to."),
    key("remote.log.metadata.custom.metadata.max.bytes", "INT", 128, _at_least(0),
        "Largest custom metadata a remote storage manager may attach to a segment."),
    key("remote.log.index.file.cache.total.size.bytes", "LONG", 1 << 30, _at_least(1),
        "Disk space for cached indexes of remote segments.", dynamic=CLUSTER_WIDE),
    key("remote.log.manager.thread.pool.size", "INT", 10, _at_least(1),
        "Threads scheduling copies to and deletions from remote storage."),
    key("remote.log.manager.copier.thread.pool.size", "INT", -1, _pool_size,
        "Threads copying segments to remote storage (-1: the thread pool size)."),
    key("remote.log.manager.expiration.thread.pool.size", "INT", -1, _pool_size,
        "Threads expiring remote segments (-1: the thread pool size)."),
    key("remote.log.manager.task.interval.ms", "LONG", 30000, _at_least(1),
        "Interval of the remote log manager's copy and expiry tasks."),
    key("remote.log.manager.task.retry.backoff.ms", "LONG", 500, _at_least(1),
        "First wait before a failed remote log task is retried.", internal=True),
    key("remote.log.manager.task.retry.backoff.max.ms", "LONG", 30000, _at_least(1),
        "Longest wait before a failed remote log task is retried.", internal=True),
    key("remote.log.manager.task.retry.jitter", "DOUBLE", 0.2, _between(0, 0.5),
        "Random share added to the retry wait of remote log tasks.", internal=True),
    key("remote.log.reader.threads", "INT", 10, _at_least(1),
        "Threads serving fetches from remote storage."),
    key("remote.log.reader.max.pending.tasks", "INT", 100, _at_least(1),
        "Remote fetches that may wait for a reader thread."),
    key("log.local.retention.ms", "LONG", -2, _at_least(-2),
        "How long segments stay on local disk once copied to remote storage (-2: retention.ms).",
        dynamic=CLUSTER_WIDE),
    key("log.local.retention.bytes", "LONG", -2, _at_least(-2),
        "Local bytes kept per partition once copied to remote storage (-2: retention.bytes).",
        dynamic=CLUSTER_WIDE),
    key("remote.log.manager.copy.max.bytes.per.second", "LONG", _MAX_LONG, _at_least(1),
        "Bytes per second copied to remote storage.", dynamic=CLUSTER_WIDE),
    key("remote.log.manager.copy.quota.window.num", "INT", 11, _at_least(1),
        "Windows over which the remote copy rate is measured."),
    key("remote.log.manager.copy.quota.window.size.seconds", "INT", 1, _at_least(1),
        "Length of one remote copy quota window."),
    key("remote.log.manager.fetch.max.bytes.per.second", "LONG", _MAX_LONG, _at_least(1),
        "Bytes per second read from remote storage.", dynamic=CLUSTER_WIDE),
    key("remote.log.manager.fetch.quota.window.num", "INT", 11, _at_least(1),
        "Windows over which the remote fetch rate is measured."),
    key("remote.log.manager.fetch.quota.window.size.seconds", "INT", 1, _at_least(1),
        "Length of one remote fetch quota window."),
    key("remote.fetch.max.wait.ms", "INT", 500, _at_least(1),
        "How long a fetch that reads remote data may wait for it.", dynamic=CLUSTER_WIDE),
)  # fmt: skip
