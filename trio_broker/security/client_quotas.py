"""Client quotas the Kafka way: produce and fetch byte rates and the share of handler
time (request_percentage) per user and client id.

Quotas live on entities, a user, a client id, or both, each named or the default (None),
set with AlterClientQuotas and read with DescribeClientQuotas; they are kept in
`<first log dir>/client-quotas.json`. A connection's quota is the first entity in Kafka's
order that sets the key (user+client, user+default client, user, default user+client,
default user+default client, default user, client, default client), and every connection
matching that entity shares one rate.

The rate is Kafka's sampled rate: bytes over `quota.window.num` windows of
`quota.window.size.seconds`, divided by the time they span. Kafka counts that span as at
least all windows but one, which lets a new client send ten seconds' worth at once and
then holds it back for as long; here it is at least one window, so a client is held to
its rate from its first second (over any ten seconds, within a window's worth). A client
over its rate gets `throttle_time_ms` = (rate - quota) / quota * that span in its
response, which is sent at once (KIP-219), and its connection then reads nothing for that
long.

Nothing here is loaded, and no request pays for it, until a quota exists.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.security.credentials import atomic_write
from trio_broker.security.rate import Rate
from trio_broker.server.requests import DELAYED, Request

if TYPE_CHECKING:
    from trio_broker.server.connection import Connection

logger = logging.getLogger(__name__)

__all__ = ["ClientQuotas", "install"]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCE_KEY, FETCH_KEY = "producer_byte_rate", "consumer_byte_rate"
# request_percentage: the share of one handler's time a client may use, in percent; its
# rate is handler milliseconds per second, so a percentage is a bound of 10x that in ms/s.
REQUEST_KEY = "request_percentage"
_SCALE = {REQUEST_KEY: 10.0}
# Never throttled by request time (Kafka's exempt APIs): ApiVersions and SASL.
_REQUEST_EXEMPT = frozenset({17, 18, 36})
QUOTA_KEYS = {
    USER: {PRODUCE_KEY, FETCH_KEY, "request_percentage", "controller_mutation_rate"},
    CLIENT_ID: {PRODUCE_KEY, FETCH_KEY, "request_percentage", "controller_mutation_rate"},
    IP: {"connection_creation_rate"},
}
Entity = tuple[tuple[str, str | None], ...]  # sorted (type, name-or-None-for-default)


class ClientQuotas:
    def __init__(self, path: Path | None, *, samples: int = 11, window_s: float = 1.0) -> None:
        self.path = path  # None in a cluster: ZooKeeper holds them (security/zk_quotas.py)
        self.zk: Any = None
        self.samples = samples
        self.window_s = window_s
        self.entities: dict[Entity, dict[str, float]] = {}
        self._rates: dict[tuple[str, Entity], Rate] = {}
        self.request_quotas = False  # whether any entity has a request_percentage
        if path is not None and path.exists():
            try:
                for entry in json.loads(path.read_text())["quotas"]:
                    entity = tuple(sorted((t, n) for t, n in entry["entity"]))
                    self.entities[entity] = {k: float(v) for k, v in entry["values"].items()}
            except (ValueError, KeyError, TypeError, OSError) as exc:
                raise RuntimeError(f"cannot read client quotas from {path}: {exc}") from exc

    def alter(self, entity: Entity, ops: list[tuple[str, float | None]]) -> None:
        values = self.entities.setdefault(entity, {})
        for key, value in ops:
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        if not values:
            self.entities.pop(entity, None)
        # A changed quota starts its rate afresh, as Kafka's sensors do.
        self._rates = {k: r for k, r in self._rates.items() if k[1] != entity}
        self.request_quotas = any(REQUEST_KEY in v for v in self.entities.values())

    def save(self) -> None:
        if self.path is None:
            return
        doc = {
            "version": 1,
            "quotas": [
                {"entity": [list(e) for e in entity], "values": values}
                for entity, values in sorted(self.entities.items(), key=lambda kv: str(kv[0]))
            ],
        }
        atomic_write(self.path, json.dumps(doc, indent=1))

    def quota_for(self, key: str, user: str, client_id: str) -> tuple[Entity, float] | None:
        """The entity whose `key` applies to this user and client id, and its value."""
        entities = self.entities
        for entity in (
            ((CLIENT_ID, client_id), (USER, user)),
            ((CLIENT_ID, None), (USER, user)),
            ((USER, user),),
            ((CLIENT_ID, client_id), (USER, None)),
            ((CLIENT_ID, None), (USER, None)),
            ((USER, None),),
            ((CLIENT_ID, client_id),),
            ((CLIENT_ID, None),),
        ):
            values = entities.get(entity)
            if values is not None and key in values:
                return entity, values[key]
        return None

    def record(self, key: str, connection: Connection, nbytes: int) -> int:
        """Account `nbytes` to the connection's quota; the throttle time in ms (0: none)."""
        user = connection.principal.partition(":")[2]
        found = self.quota_for(key, user, connection.client_id or "")
        if found is None:
            return 0
        entity, bound = found
        bound *= _SCALE.get(key, 1.0)
        rate = self._rates.get((key, entity))
        if rate is None:
            rate = self._rates[(key, entity)] = Rate(self.samples, self.window_s)
        now = trio.current_time()
        rate.record(nbytes, now)
        observed, span = rate.measure(now)
        if observed <= bound or bound <= 0:
            return 0
        return int((observed - bound) / bound * span * 1000)


def _produce_bytes(body: Any) -> int:
    total = 0
    for t in body.topic_data:
        for p in t.partition_data:
            if p.records is not None:
                total += len(p.records)
    return total


def _fetch_bytes(response: Any) -> int:
    total = 0
    for t in response.responses:
        for p in t.partitions:
            r = p.records
            if r is not None:
                total += r.size if hasattr(r, "size") else len(r)
    return total


class _MeteredRequest(Request):
    """A Produce or Fetch whose response is counted against the client's byte rate."""

    __slots__ = ()

    async def respond(self, response: Any) -> None:
        if response is not None:
            connection = self.connection
            quotas = connection.client_quotas
            if self.api_key == 0:
                throttle = quotas.record(PRODUCE_KEY, connection, _produce_bytes(self.body))
            else:
                throttle = quotas.record(FETCH_KEY, connection, _fetch_bytes(response))
            if throttle > 0:
                response.throttle_time_ms = max(response.throttle_time_ms, throttle)
                connection.throttle(throttle / 1000)
        await super().respond(response)


def install(broker: Any) -> ClientQuotas:
    """Give the broker its quotas (once) and meter its produce and fetch requests."""
    if broker.client_quotas is not None:
        return broker.client_quotas
    config = broker.config
    quotas = ClientQuotas(
        Path(config.log_dirs[0]) / "client-quotas.json" if broker.zk is None else None,
        samples=config.quota_window_num,
        window_s=config.quota_window_size_seconds,
    )
    quotas.zk = getattr(broker, "zk_quotas", None)
    broker.client_quotas = quotas
    inner = broker._dispatch

    async def dispatch(broker_: Any, request: Request) -> Any:
        if not quotas.entities:
            return await inner(broker_, request)
        connection = request.connection
        connection.client_quotas = quotas
        if request.api_key in (0, 1):
            request.__class__ = _MeteredRequest
        if not quotas.request_quotas or request.api_key in _REQUEST_EXEMPT:
            return await inner(broker_, request)
        start = time.perf_counter()
        response = await inner(broker_, request)
        # A delayed request's wait in the purgatory is not handler time.
        throttle = quotas.record(REQUEST_KEY, connection, (time.perf_counter() - start) * 1000)
        if throttle > 0 and response is not None and response is not DELAYED:
            if hasattr(response, "throttle_time_ms"):
                response.throttle_time_ms = max(response.throttle_time_ms, throttle)
            connection.throttle(throttle / 1000)
        return response

    broker._dispatch = dispatch
    return quotas
