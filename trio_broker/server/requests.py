"""Requests in flight, and the handler tasks that answer them.

Channel contract (Kafka's RequestChannel, as trio memory channels):

- one request channel, capacity `queued.max.requests`: connection tasks send `Request`s,
  `num.io.threads` handler tasks receive them. A full channel blocks the sending
  connection, which stops reading its socket: backpressure, never a drop.
- one response channel per processor: whoever completes a request (a handler task, or
  later the purgatory for a delayed one) sends `(connection, Response)` there, and the
  processor's response task hands it to the connection, the only writer of its socket.
- a delayed request that a Produce or Fetch makes answerable is answered by that
  request's handler task once it has answered its own (Kafka's action queue, below).
- several requests of one connection that were already read together (a pipelining
  client's small produces) may travel as one item: the first `Request` carries a `Batch`
  of them all. One handler task answers them in order, and their answers go to the
  processor as one list, once the last is made: one wakeup of a handler, of the response
  task and of the connection for the lot instead of one each per request. The channel's
  capacity then counts batches; each is bounded (server/connection.py `_BATCH_MAX`).
  Where nothing wraps the dispatch, the broker answers such a batch whole (`AnswerBatch`:
  on a lone broker the produces to one partition are appended as one write).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.protocol.quirks import ParsedRequest, encode_response
from trio_broker.server.log_safe import CLIENT_ADDRESS

if TYPE_CHECKING:
    from trio_broker.server.connection import Connection

logger = logging.getLogger(__name__)

__all__ = [
    "NOT_NOW",
    "NO_RESPONSE",
    "AnswerBatch",
    "Batch",
    "Request",
    "Response",
    "handle_one",
    "run_handler",
]


class Response:
    """An encoded response frame; `regions` are file regions spliced in at their offsets."""

    __slots__ = ("buf", "regions")

    def __init__(self, buf: bytearray, regions: list[tuple[int, Any]]) -> None:
        self.buf = buf
        self.regions = regions

    def __repr__(self) -> str:
        return f"Response({len(self.buf)} bytes, {len(self.regions)} regions)"


# What a request that gets no answer (Produce with acks=0) completes with: the connection
# then reads its next request without writing anything.
NO_RESPONSE = Response(bytearray(), [])


class Batch:
    """Requests of one connection answered by one handler task, in order, and delivered to
    the connection together (a list of `Response`s, in request order) once all are made.
    An answer made later (a request the purgatory parked) holds back the whole list."""

    __slots__ = ("remaining", "requests", "responses")

    def __init__(self, requests: list[Request]) -> None:
        self.requests = requests
        self.responses: list[Response | None] = [None] * len(requests)
        self.remaining = len(requests)
        for i, request in enumerate(requests):
            request.batch = self
            request.slot = i


class Request:
    """A request in flight: its decoded frame, its connection, and what answering it needs.
    (A plain slotted class, one per request; the header fields handlers read most are
    copied in rather than reached through `parsed`.)"""

    __slots__ = (
        "_done",
        "api_key",
        "api_version",
        "batch",
        "body",
        "connection",
        "parsed",
        "slot",
        "timing",
    )

    def __init__(self, parsed: ParsedRequest, connection: Connection) -> None:
        self.parsed = parsed
        self.connection = connection
        self.api_key = parsed.api_key
        self.api_version = parsed.api_version
        self.body = parsed.body
        self._done = False
        # A metrics.RequestTiming when metrics are on (the connection sets it), else None.
        self.timing: Any = None
        # When read together with others and sent as one item (see Batch): its batch, and
        # its place there. Only the batch's first request is sent on the request channel.
        self.batch: Batch | None = None
        self.slot = 0

    def __repr__(self) -> str:
        return (
            f"<Request api {self.api_key} v{self.api_version} "
            f"correlation {self.parsed.correlation_id} on {self.connection!r}>"
        )

    async def respond(self, response: Any) -> None:
        """Encode `response` (a generated response message, or None for no answer) and
        send it to this request's processor. Called exactly once per request."""
        frame = self.answer(response)
        if frame is not None:
            processor = self.connection.processor
            if not processor.deliver_now(self.connection, frame):
                await processor.deliver(self.connection, frame)

    def answer(self, response: Any) -> Response | list[Response] | None:
        """respond() without the delivery: encode `response`, and return what is to go to
        the processor now (this answer, or its batch's list once the last is in), or None."""
        if self._done:
            raise RuntimeError(f"request {self.parsed.correlation_id} answered twice")
        self._done = True
        if self.timing is not None:
            self.timing.response = time.perf_counter()
        if response is None:
            frame = NO_RESPONSE
        else:
            # KIP-511: an unsupported ApiVersions is answered as v0; any other unsupported
            # version in its own layout (protocol/quirks.py, quirks 3 and 5).
            parsed = self.parsed
            version = (
                0 if parsed.unsupported_version and parsed.api_key == 18 else parsed.api_version
            )
            try:
                buf, regions = encode_response(
                    self.api_key, version, parsed.correlation_id, response
                )
            except Exception:
                # A handler bug (a value the schema cannot carry). The client cannot get
                # an answer; it can get a closed connection, and the broker goes on.
                self.connection.log_client(
                    "encode",
                    logging.ERROR,
                    "[conn %s] cannot encode response to api %d v%d; closing",
                    self.connection.id,
                    self.api_key,
                    version,
                    exc_info=True,
                )
                self.connection.close()
                return None
            frame = Response(buf, regions)
        batch = self.batch
        if batch is None:
            return frame
        batch.responses[self.slot] = frame
        batch.remaining -= 1
        if not batch.remaining:
            return batch.responses  # type: ignore[return-value]
        return None


# A handler returns the response, or DELAYED when it handed the request to the purgatory,
# which will call request.respond() itself later.
DELAYED: Any = object()

# Kafka's action queue. The delayed operations a Produce or Fetch makes answerable (the
# fetches its append can fill, the acks=all produces its follower's progress commits) are
# answered by the same handler task right after it answers its own request, rather than
# handed to the purgatory's task for a later scheduler pass. Only for these two APIs: their
# handlers never wait after waking others, so nothing they wake waits for them to return
# (an OffsetCommit, say, may append and then wait for the followers it would be holding
# back). A wake in any other task goes to the purgatory's task as before.
# Handler task -> [(complete, operation)], while that task handles a Produce or a Fetch.
_ACTIONS: dict[Any, list[tuple[Callable[[Any], Awaitable[None]], Any]]] = {}
_DEFERRING_APIS = frozenset({0, 1})  # Produce, Fetch


def action_queue() -> list[tuple[Callable[[Any], Awaitable[None]], Any]] | None:
    """The action queue of the current task if it is handling a Produce or Fetch, else
    None: what is appended here is run by that task once it has answered."""
    return _ACTIONS.get(trio.lowlevel.current_task()) if _ACTIONS else None


Dispatch = Callable[[Request], Awaitable[Any]]
# The handler's answer made without a wait (the broker's answer_now: a Produce's, when no
# authorizer or quota wraps the dispatch), or NOT_NOW: then `Dispatch` answers it.
AnswerNow = Callable[[Request], Any]
NOT_NOW: Any = object()
# The answers to a batch of produces, in order, made without a wait (the broker's
# answer_batch: consecutive appends to one partition made as one), or None: then each is
# answered as above.
AnswerBatch = Callable[[list[Request]], "list[Any] | None"]


async def run_handler(
    index: int,
    requests: trio.MemoryReceiveChannel[Request],
    dispatch: Dispatch,
    answer_now: AnswerNow | None = None,
) -> None:
    """One of the `num.io.threads` handler tasks (Kafka's KafkaRequestHandler)."""
    async with requests:
        async for request in requests:
            await handle_one(index, request, dispatch, answer_now)


async def handle_one(
    index: int,
    request: Request,
    dispatch: Dispatch,
    answer_now: AnswerNow | None = None,
    answer_batch: AnswerBatch | None = None,
) -> None:
    """Run one request's handler and send its answer (unless the purgatory will); for the
    first request of a batch, each of the batch's in turn."""
    batch = request.batch
    if batch is None:
        await _handle_one(index, request, dispatch, answer_now)
        return
    # Its requests refer to the batch: no reference cycle may keep their frames alive.
    members, batch.requests = batch.requests, []
    await _handle_batch(index, members, dispatch, answer_now, answer_batch)


async def _handle_batch(
    index: int,
    members: list[Request],
    dispatch: Dispatch,
    answer_now: AnswerNow | None,
    answer_batch: AnswerBatch | None = None,
) -> None:
    # _handle_one for each of a batch's produces, in order, with what is the same for all
    # of them (the client address, the action queue) set once: the answers of the delayed
    # operations one of them makes answerable are still run right after it is answered.
    # Or, when `answer_batch` takes the batch whole (its appends made together), after it.
    connection = members[0].connection
    processor = connection.processor
    scope = connection.scope
    peer_host = connection.peer_host
    task = trio.lowlevel.current_task()
    token = CLIENT_ADDRESS.set(peer_host)
    actions = _ACTIONS[task] = []
    try:
        if answer_batch is not None and all(m.__class__ is Request for m in members):
            answered = await _answer_batch(index, members, answer_batch)
            if answered:
                return
        for member in members:
            if scope.cancel_called:
                return  # a failed one closed the connection: nobody waits for the rest
            timing = member.timing
            if timing is not None:
                timing.dequeue = time.perf_counter()
            try:
                response = NOT_NOW if answer_now is None else answer_now(member)
                if response is NOT_NOW:
                    response = await dispatch(member)
            except Exception:
                _log_failed(index, member)
                connection.close()
                return
            if timing is not None:
                timing.local = time.perf_counter()
            if response is not DELAYED:
                if member.__class__ is Request:
                    frame = member.answer(response)
                    if frame is not None and not processor.deliver_now(connection, frame):
                        await processor.deliver(connection, frame)
                else:
                    await member.respond(response)
            if actions:
                # As _handle_one runs them: on no client's behalf, with no action queue.
                del _ACTIONS[task]
                CLIENT_ADDRESS.reset(token)
                try:
                    for complete, operation in actions:
                        await complete(operation)
                finally:
                    token = CLIENT_ADDRESS.set(peer_host)
                    actions = _ACTIONS[task] = []
    finally:
        CLIENT_ADDRESS.reset(token)
        del _ACTIONS[task]
        for complete, operation in actions:
            await complete(operation)


async def _answer_batch(index: int, members: list[Request], answer_batch: AnswerBatch) -> bool:
    """A batch answered whole by `answer_batch` (False: it declined, nothing was done).
    The delayed operations its appends make answerable run after it (_handle_batch)."""
    timings = [m.timing for m in members if m.timing is not None]
    now = time.perf_counter() if timings else 0.0
    for timing in timings:
        timing.dequeue = now
    try:
        responses = answer_batch(members)
    except Exception:
        _log_failed(index, members[0])
        members[0].connection.close()
        return True
    if responses is None:
        return False
    now = time.perf_counter() if timings else 0.0
    for timing in timings:
        timing.local = now
    connection = members[0].connection
    processor = connection.processor
    for member, response in zip(members, responses, strict=True):
        if response is not DELAYED:
            frame = member.answer(response)
            if frame is not None and not processor.deliver_now(connection, frame):
                await processor.deliver(connection, frame)
    return True


async def _handle_one(
    index: int, request: Request, dispatch: Dispatch, answer_now: AnswerNow | None
) -> None:
    # One coroutine per request on the hot path: a Produce answered by answer_now() awaits
    # nothing here but the delivery of its answer (or its batch's).
    timing = request.timing
    if timing is not None:
        timing.dequeue = time.perf_counter()
    connection = request.connection
    # What is logged while answering this request is on its client's behalf (rate-limited
    # by its address: server/log_safe.py); the other requests answered afterwards are not.
    token = CLIENT_ADDRESS.set(connection.peer_host)
    deferring = request.api_key in _DEFERRING_APIS
    if deferring:
        task = trio.lowlevel.current_task()
        actions = _ACTIONS[task] = []
    try:
        try:
            response = NOT_NOW if answer_now is None else answer_now(request)
            if response is NOT_NOW:
                response = await dispatch(request)
        except Exception:
            _log_failed(index, request)
            connection.close()
            return
        if timing is not None:
            timing.local = time.perf_counter()
        if response is not DELAYED:
            if request.__class__ is Request:
                frame = request.answer(response)
                if frame is not None:
                    processor = connection.processor
                    if not processor.deliver_now(connection, frame):
                        await processor.deliver(connection, frame)
            else:
                # A subclass (security/client_quotas.py's metering) answers in its own way.
                await request.respond(response)
    finally:
        CLIENT_ADDRESS.reset(token)
        if deferring:
            del _ACTIONS[task]
            # Other requests' answers: run even when this one failed.
            for complete, operation in actions:
                await complete(operation)


def _log_failed(index: int, request: Request) -> None:
    # A bug, not a client error (those are error codes). Kafka answers what it can; the
    # one safe thing for any API is to close that connection (the caller does).
    connection = request.connection
    connection.log_client(
        "handler",
        logging.ERROR,
        "[conn %s] handler %d failed on api %d v%d from client %r; closing",
        connection.id,
        index,
        request.api_key,
        request.api_version,
        request.parsed.client_id,
        exc_info=True,
    )
