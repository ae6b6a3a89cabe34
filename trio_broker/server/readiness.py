"""How far a starting broker has come, for those who watch it from outside: a service
manager (systemd's STATUS= and READY=1, trio_broker/systemd.py) and a load balancer or an
orchestrator (the metrics listener's /health and /ready, trio_broker/metrics_http.py).

The broker's lifecycle (trio_broker/broker.py) sets the flags as it goes; `reasons()` says
why the broker is not ready, from the flags and, once it serves, from its state (its
registration in ZooKeeper, the partitions it leads). Nothing here does I/O: an observer
of `status` does (systemd's notify socket), synchronously, so that a status set before
the blocking log load reaches the service manager before the load starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs

logger = logging.getLogger(__name__)

__all__ = ["Readiness"]

# How many offline partitions /ready names before it only counts them.
_NAMED = 5


@attrs.define(kw_only=True)
class Readiness:
    """A broker's progress from start to serving and back to stopped.

    `registered` is None for a lone broker (nothing to register in), False in a cluster
    until its registration in ZooKeeper is done. `started` is set when `serve()` reports
    started: logs loaded, listeners up, every service running (in a cluster, registered)."""

    status: str = "starting"
    # The logs found at start load while the broker already answers (log/log_loading.py).
    logs_loaded: bool = False
    listening: bool = False
    registered: bool | None = None
    started: bool = False
    stopping: bool = False
    # Called with every new status text (systemd's STATUS=); must not raise or block long.
    observers: list[Callable[[str], None]] = attrs.Factory(list)

    def set_status(self, text: str) -> None:
        self.status = text
        for observer in self.observers:
            try:
                observer(text)
            except Exception:  # an observer's bug must not stop the broker starting
                logger.exception("readiness observer failed")

    def reasons(self, broker: Any = None) -> list[str]:
        """Why the broker is not ready, short and in an operator's words; [] when ready.

        `broker` (once built): the logs found at start count as loaded when none is left
        to load (log/log_loading.py's PendingLogs); in a cluster its registration must be
        among ZooKeeper's live brokers; and no partition whose leader is this broker may
        be offline here (its log dir failed) or not yet hosted (LeaderAndIsr not applied
        yet)."""
        if self.stopping:
            return ["shutting down"]
        out = []
        pending = None if broker is None else broker.log_manager.pending
        if not self.logs_loaded and (pending is None or len(pending)):
            progress = (
                f" ({pending.total - len(pending)} of {pending.total} loaded)" if pending else ""
            )
            out.append(f"logs not loaded yet{progress}")
        if not self.listening:
            out.append("listeners not up yet")
        if self.registered is False:
            out.append("not registered in ZooKeeper yet")
        if out:
            return out
        if not self.started:
            return [f"starting ({self.status})"]
        if broker is not None:
            if broker.zk is not None and broker.node_id not in broker.metadata.brokers:
                out.append("not among ZooKeeper's live brokers (session lost?)")
            offline = offline_partitions_led_here(broker)
            if offline:
                named = ", ".join(offline[:_NAMED])
                more = f" and {len(offline) - _NAMED} more" if len(offline) > _NAMED else ""
                out.append(f"{len(offline)} partition(s) led here are offline: {named}{more}")
        return out


def offline_partitions_led_here(broker: Any) -> list[str]:
    """`topic-partition` of every partition the metadata says this broker leads whose log
    here is missing or in an offline log dir."""
    out = []
    node_id = broker.node_id
    # Never loads a log to answer (get_log would, for one found at start not loaded yet).
    get_log = broker.log_manager.loaded_log
    for topic in list(broker.metadata.topics.values()):
        for state in list(topic.partitions.values()):
            if state.leader != node_id:
                continue
            log = get_log(topic.name, state.partition)
            if log is None or log.offline:
                out.append(f"{topic.name}-{state.partition}")
    return out
