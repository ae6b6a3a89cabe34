"""Incremental fetch sessions (KIP-227).

A consumer that opens a session (session epoch 0) sends its partition list once; later
fetches (epoch 1, 2, ...) name only partitions that changed, and the broker answers only
partitions with something new: records, a moved high watermark or log start offset, an
error. The broker keeps per session what it last told the client.
"""

from __future__ import annotations

import random
import uuid
from collections import OrderedDict

import attrs

from trio_broker.errors import ErrorCode, KafkaError

__all__ = ["CachedPartition", "FetchSession", "FetchSessionCache"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


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


@attrs.define
class FetchSessionCache:
    max_sessions: int = 1000
    _sessions: OrderedDict[int, FetchSession] = attrs.Factory(OrderedDict)

    def __len__(self) -> int:
        return len(self._sessions)

    def new_session(self, partitions: list[CachedPartition]) -> FetchSession:
        while True:
            session_id = random.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                break
        session = FetchSession(id=session_id, epoch=1)
        for p in partitions:
            session.partitions[(p.topic, p.partition)] = p
        self._sessions[session_id] = session
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)  # least recently used
        return session

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def incremental(self, session_id: int, epoch: int) -> FetchSession:
        session = self._sessions.get(session_id)
        if session is None:
            raise KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.epoch:
            raise KafkaError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        self._sessions.move_to_end(session_id)
        session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return session
