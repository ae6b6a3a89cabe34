"""Incremental fetch sessions (KIP-227): the leader's cache and the follower's handler.

A client that opens a session (session epoch 0) sends its partition list once; later
fetches (epoch 1, 2, ...) name only partitions that changed, and the broker answers only
partitions with something new: records, a moved high watermark or log start offset, an
error. The broker keeps per session what it last told the client (`FetchSessionCache`);
the client keeps what it last sent (`FetchSessionHandler`, Kafka's client class of that
name, used by the replica fetchers).
"""

from __future__ import annotations

import random
import uuid
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import attrs

from trio_broker.errors import ErrorCode, KafkaError

__all__ = [
    "CachedPartition",
    "FetchSession",
    "FetchSessionCache",
    "FetchSessionHandler",
    "SessionRequest",
]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    return epoch + 1 if epoch < MAX_EPOCH else 1


@attrs.define(kw_only=True)
class CachedPartition:
    topic: str
    partition: int
    topic_id: uuid.UUID
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    # What the last response said, so an incremental response can leave it out if unchanged.
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1


@attrs.define(kw_only=True)
class FetchSession:
    id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[tuple[str, int], CachedPartition] = attrs.Factory(dict)
    # A follower's session (Kafka's privileged sessions): a consumer's new session never
    # evicts it, so that replication does not fall back to full fetches when many
    # consumers open sessions.
    privileged: bool = False


@attrs.define
class FetchSessionCache:
    max_sessions: int = 1000
    _sessions: OrderedDict[int, FetchSession] = attrs.Factory(OrderedDict)

    def __len__(self) -> int:
        return len(self._sessions)

    def new_session(
        self, partitions: list[CachedPartition], *, privileged: bool = False
    ) -> FetchSession | None:
        """A new session, or None with no slots at all (max.incremental.fetch.session.cache
        .slots=0: every fetch is answered without a session, session id 0, as Kafka's)."""
        if self.max_sessions <= 0:
            return None
        while True:
            session_id = random.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                break
        session = FetchSession(id=session_id, epoch=1, privileged=privileged)
        for p in partitions:
            session.partitions[(p.topic, p.partition)] = p
        if len(self._sessions) >= self.max_sessions:
            self._evict(privileged)
        self._sessions[session_id] = session
        return session

    def _evict(self, privileged: bool) -> None:
        """Room for one more: the least recently used consumer session goes, or with none
        left, the least recently used session of all (Kafka also evicts a follower's
        session once it is stale, its follower gone)."""
        while len(self._sessions) >= self.max_sessions:
            victim = next((s for s in self._sessions.values() if not s.privileged), None)
            if victim is None:
                self._sessions.popitem(last=False)
            else:
                del self._sessions[victim.id]

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def incremental(self, session_id: int, epoch: int) -> FetchSession:
        session = self._sessions.get(session_id)
        if session is None:
            raise KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.epoch:
            raise KafkaError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        self._sessions.move_to_end(session_id)
        session.epoch = next_epoch(epoch)
        return session


@attrs.frozen
class SessionRequest:
    """What one fetch sends: `to_send` (every partition in a full fetch; in an incremental
    one, those added or whose data changed), `forgotten` (left the session), and the
    session id and epoch to put in the request."""

    session_id: int
    epoch: int
    to_send: dict[Hashable, Any]
    forgotten: list[Hashable]
    # Everything the session holds after this request: what an answer may name.
    session: dict[Hashable, Any]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """The client side of one fetch session, to one broker (Kafka's FetchSessionHandler).

    `build(next)` takes every partition the client wants now, each with its fetch data
    (any comparable value: the replica fetcher's is a tuple of fetch offset, log start,
    leader epoch, last fetched epoch); a full fetch sends them all and opens a session,
    an incremental one sends what was added or changed and forgets what is gone. Then
    `handle_response` with the answer's error code and session id, or `handle_error` when
    no answer came: either way the next fetch is right for the broker's state (a session
    it lost or never made is opened again by a full fetch).
    """

    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[Hashable, Any] = {}
        # Counts, for logs and tests: how often each kind went out.
        self.full_fetches = 0
        self.incremental_fetches = 0

    def __repr__(self) -> str:
        return (
            f"<FetchSessionHandler session {self.session_id} epoch {self.epoch}, "
            f"{len(self.partitions)} partitions>"
        )

    def build(self, next: dict[Hashable, Any]) -> SessionRequest:
        if self.epoch == INITIAL_EPOCH:
            self.partitions = dict(next)
            self.full_fetches += 1
            return SessionRequest(self.session_id, self.epoch, next, [], self.partitions)
        session = self.partitions
        forgotten = [key for key in session if key not in next]
        for key in forgotten:
            del session[key]
        to_send = {}
        for key, data in next.items():
            if session.get(key, to_send) != data:  # added, or changed
                session[key] = data
                to_send[key] = data
        self.incremental_fetches += 1
        return SessionRequest(self.session_id, self.epoch, to_send, forgotten, session)

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """The broker answered the request `build` made; False when the answer carries a
        top-level error (nothing in it applies), after which the next fetch is full."""
        if error_code:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = NO_SESSION
            self.epoch = INITIAL_EPOCH  # with a session id: close it, open another
            return False
        if self.epoch == INITIAL_EPOCH:
            # A full answer: the session it opened, or none (the broker keeps no more).
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == NO_SESSION else 1
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """No answer (a lost connection, a timeout): the broker may or may not have
        applied the request, so the next fetch closes the session and opens another."""
        self.epoch = INITIAL_EPOCH
