"""The connection layer against a real in-process trio-broker (and a few fake brokers)."""

from __future__ import annotations

import trio
from client_proxy import start_proxy

import trio_broker
from trio_broker.client.config import ClientConfig
from trio_broker.client.errors import KafkaConnectionError, RequestTimedOutError
from trio_broker.client.metadata import ClusterMetadata
from trio_broker.client.network_client import NetworkClient
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated import REQUEST_VERSIONS
from trio_broker.protocol._generated.api_versions_response import ApiVersion, ApiVersionsResponse
from trio_broker.protocol._generated.create_topics_request import (
    CreatableTopic,
    CreateTopicsRequest,
)
from trio_broker.protocol._generated.metadata_request import MetadataRequest, MetadataRequestTopic
from trio_broker.protocol._generated.metadata_response import MetadataResponse
from trio_broker.protocol.framing import NEED_DATA, FrameReader
from trio_broker.protocol.quirks import encode_response, parse_request
from trio_broker.testing import free_port


def _broker_config(tmp_path, port: int = 0) -> dict[str, str]:
    return {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(tmp_path / "data")}


def _client(bootstrap: str, **kwargs) -> NetworkClient:
    return NetworkClient(ClientConfig.build(bootstrap_servers=bootstrap, **kwargs))


async def test_api_versions_negotiated_on_connect(tmp_path):
    from apis_registry_view import broker_ranges

    async with trio_broker.open_broker(_broker_config(tmp_path)) as bootstrap:
        async with _client(bootstrap) as client:
            connection = await client.connection(bootstrap)
            ranges = broker_ranges()
            assert connection.broker_versions == ranges
            for key, (lo, hi) in ranges.items():
                ours_lo, ours_hi = REQUEST_VERSIONS[key]
                assert connection.api_versions[key] <= min(hi, ours_hi)
                assert connection.api_versions[key] >= max(lo, ours_lo)
            # Metadata goes at the highest common version, a flexible one (header v2).
            assert connection.api_versions[MetadataRequest.API_KEY] == 12
            response = await client.send(bootstrap, MetadataRequest(topics=None))
            assert isinstance(response, MetadataResponse)
            host, port = bootstrap.split(":")
            assert [(b.host, b.port) for b in response.brokers] == [(host, int(port))]
            # An older version on request: non-flexible headers both ways.
            old = await client.send(bootstrap, MetadataRequest(topics=None), version=1)
            assert [(b.host, b.port) for b in old.brokers] == [(host, int(port))]


async def test_pipelined_requests_complete_in_order(tmp_path):
    async with trio_broker.open_broker(_broker_config(tmp_path)) as bootstrap:
        async with _client(bootstrap, max_in_flight_requests_per_connection=5) as client:
            connection = await client.connection(bootstrap)
            names = [f"t{i}" for i in range(5)]
            pending = [
                connection.submit(
                    CreateTopicsRequest(
                        topics=[
                            CreatableTopic(name=name, num_partitions=i + 1, replication_factor=1)
                        ],
                        timeout_ms=5000,
                    )
                )
                for i, name in enumerate(names)
            ]
            # Five queued at once, none answered yet; a sixth has to wait for a slot.
            assert connection.in_flight_count == 5
            assert not connection.can_send
            assert len({p.correlation_id for p in pending}) == 5
            responses = [await p.wait() for p in pending]
            assert [r.topics[0].name for r in responses] == names
            assert all(r.topics[0].error_code == 0 for r in responses)
            assert connection.can_send
            meta = await client.send(
                bootstrap, MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names])
            )
            counts = {t.name: len(t.partitions) for t in meta.topics}
            assert counts == {name: i + 1 for i, name in enumerate(names)}


async def test_request_timeout_closes_the_connection(tmp_path, nursery):
    async with trio_broker.open_broker(_broker_config(tmp_path)) as bootstrap:
        host, port = bootstrap.split(":")
        proxy = await start_proxy(nursery, (host, int(port)))
        where = f"{proxy.address[0]}:{proxy.address[1]}"
        async with _client(where, request_timeout_ms=300) as client:
            await client.send(where, MetadataRequest(topics=None))
            first = await client.connection(where)
            proxy.stall = True  # the broker answers, the answer never arrives
            pending = [first.submit(MetadataRequest(topics=None)) for _ in range(2)]
            try:
                await pending[0].wait()
                raise AssertionError("no timeout")
            except RequestTimedOutError as exc:
                assert exc.code == ErrorCode.REQUEST_TIMED_OUT
                assert "REQUEST_TIMED_OUT" in str(exc)
            try:
                await pending[1].wait()
                raise AssertionError("the second request outlived its connection")
            except KafkaConnectionError as exc:
                assert exc.code == ErrorCode.NETWORK_EXCEPTION
            assert first.closed
            proxy.resume()
            # A new connection replaces it.
            response = await client.send(where, MetadataRequest(topics=None))
            assert response.brokers
            assert (await client.connection(where)) is not first
            assert proxy.connections == 2


async def test_reconnect_after_broker_restart(tmp_path):
    port = free_port()
    config = _broker_config(tmp_path, port)
    where = f"127.0.0.1:{port}"
    async with _client(where, reconnect_backoff_ms=20, reconnect_backoff_max_ms=80) as client:
        async with trio_broker.open_broker(config):
            await client.send(where, MetadataRequest(topics=None))
        # The broker is gone: the connection closed, a request fails, connects are refused.
        for _ in range(3):
            try:
                await client.send(where, MetadataRequest(topics=None))
                raise AssertionError("sent to a stopped broker")
            except KafkaConnectionError as exc:
                assert "NETWORK_EXCEPTION" in str(exc)
        state = client._states[("127.0.0.1", port)]
        assert state.failures >= 2
        async with trio_broker.open_broker(config):
            response = await client.send(where, MetadataRequest(topics=None))
            assert [b.port for b in response.brokers] == [port]
            assert state.failures == 0


async def test_reconnect_backoff_grows_to_its_maximum(autojump_clock):
    port = free_port()  # nothing listens here
    where = f"127.0.0.1:{port}"
    async with _client(where, reconnect_backoff_ms=100, reconnect_backoff_max_ms=400) as client:
        waits = []
        for _ in range(5):
            before = trio.current_time()
            try:
                await client.send(where, MetadataRequest(topics=None))
            except KafkaConnectionError:
                pass
            waits.append(trio.current_time() - before)
            state = client._states[("127.0.0.1", port)]
        # The first attempt is immediate; each next one waits the previous backoff.
        assert waits[0] < 0.05
        expected = [0.1, 0.2, 0.4, 0.4]
        for waited, base in zip(waits[1:], expected, strict=True):
            assert base * 0.8 - 0.01 <= waited <= base * 1.2 + 0.05, waits
        assert state.failures == 5


async def _serve_requests(supported: dict[int, tuple[int, int]], answer, *, task_status):
    """A broker that knows only `supported`: `await answer(stream, request)` for each
    request of each connection, in order."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])

    async def handle(stream):
        reader = FrameReader(max_frame_bytes=1 << 20)
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            reader.receive_data(data)
            while (frame := reader.next_frame()) is not NEED_DATA:
                await answer(stream, parse_request(frame, supported))

    await trio.serve_listeners(handle, listeners)


def _api_versions(req, supported: dict[int, tuple[int, int]]) -> tuple[int, ApiVersionsResponse]:
    """The version and body of an ApiVersions answer listing `supported`."""
    keys = [
        ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in supported.items()
    ]
    code = ErrorCode.UNSUPPORTED_VERSION if req.unsupported_version else 0
    version = 0 if req.unsupported_version else req.api_version
    return version, ApiVersionsResponse(error_code=code, api_keys=keys)


async def _fake_broker(supported: dict[int, tuple[int, int]], seen: list, *, task_status):
    """A broker that knows only `supported` and answers ApiVersions and Metadata."""

    async def answer(stream, req):
        seen.append((req.api_key, req.api_version))
        if req.api_key == 18:
            version, body = _api_versions(req, supported)
        else:
            version, body = req.api_version, MetadataResponse()
        buf, _ = encode_response(req.api_key, version, req.correlation_id, body)
        await stream.send_all(buf)

    await _serve_requests(supported, answer, task_status=task_status)


async def test_api_versions_downgrade_for_an_older_broker(nursery):
    """KIP-511: a broker that does not know our ApiVersions version answers v0 with
    UNSUPPORTED_VERSION and its ranges; the client retries at the broker's highest."""
    seen: list = []
    port = await nursery.start(_fake_broker, {18: (0, 2), 3: (0, 8)}, seen)
    where = f"127.0.0.1:{port}"
    async with _client(where) as client:
        connection = await client.connection(where)
        assert seen == [(18, REQUEST_VERSIONS[18][1]), (18, 2)]
        assert connection.api_versions == {18: 2, 3: 8}
        await client.send(where, MetadataRequest(topics=None))
        assert seen[-1] == (3, 8)


async def test_cluster_metadata_refreshes_on_disconnect_and_age(tmp_path):
    async with trio_broker.open_broker(_broker_config(tmp_path)) as bootstrap:
        async with _client(bootstrap, metadata_max_age_ms=200, retry_backoff_ms=10) as client:
            metadata = ClusterMetadata(client, allow_auto_topic_creation=True)
            client.nursery.start_soon(metadata.run)
            topic = await metadata.wait_for_topic("auto-made", timeout_s=10)
            assert topic.partition_count >= 1
            assert metadata.cluster.leader_for("auto-made", 0) in metadata.cluster.brokers
            seen = metadata.version
            await trio.sleep(0.5)  # max age 200 ms: refreshed without being asked
            assert metadata.version > seen
            seen = metadata.version
            client.close()  # a disconnect asks for a refresh
            with trio.fail_after(5):
                while metadata.version == seen:
                    await trio.sleep(0.01)


async def test_broker_closing_during_api_versions_is_a_connection_error(nursery):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def hang_up(stream):
        await stream.receive_some(65536)
        await stream.aclose()

    nursery.start_soon(trio.serve_listeners, hang_up, listeners)
    where = f"127.0.0.1:{port}"
    async with _client(where) as client:
        try:
            await client.send(where, MetadataRequest(topics=None))
            raise AssertionError("no error")
        except KafkaConnectionError as exc:
            assert "closed" in str(exc)
        assert not client.is_connected(where)


async def test_submit_writes_a_lone_request_itself_and_queues_behind_a_partial_write(tmp_path):
    # With nothing queued, submit() writes the frame to the socket itself (no wake of the
    # writer task). A frame larger than the socket takes at once is finished by the
    # writer, and a request submitted right after it queues behind it: the broker gets
    # both whole and in order, and the records come back byte for byte.
    from trio_broker.protocol._generated.fetch_request import (
        FetchPartition,
        FetchRequest,
        FetchTopic,
    )
    from trio_broker.protocol._generated.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from trio_broker.protocol.record_codec import build_batch, iter_records

    class WriterSteps(trio.abc.Instrument):
        steps = 0

        def before_task_step(self, task):
            # Both of a connection's tasks run _guarded(loop); tell the writer by its loop.
            frame = getattr(task.coro, "cr_frame", None)
            loop = frame.f_locals.get("loop") if frame is not None else None
            if getattr(loop, "__name__", None) == "_write_loop":
                WriterSteps.steps += 1

    config = {**_broker_config(tmp_path), "message.max.bytes": str(16 << 20)}
    async with trio_broker.open_broker(config) as bootstrap:
        async with _client(bootstrap, max_in_flight_requests_per_connection=5) as client:
            connection = await client.connection(bootstrap)
            created = await client.send(
                bootstrap,
                CreateTopicsRequest(
                    topics=[CreatableTopic(name="big", num_partitions=1, replication_factor=1)],
                    timeout_ms=5000,
                ),
            )
            assert created.topics[0].error_code == 0
            # Sequential small requests: the writer task never runs.
            trio.lowlevel.add_instrument(instrument := WriterSteps())
            try:
                for _ in range(20):
                    meta = await client.send(bootstrap, MetadataRequest(topics=None))
                    assert meta.brokers
            finally:
                trio.lowlevel.remove_instrument(instrument)
            assert WriterSteps.steps == 0, WriterSteps.steps

            values = [bytes([i]) * (1 << 20) for i in range(12)]  # 12 MiB in one batch
            batch = build_batch([(None, v, (), 1_700_000_000_000) for v in values])
            produce = connection.submit(
                ProduceRequest(
                    acks=1,
                    timeout_ms=10000,
                    topic_data=[
                        TopicProduceData(
                            name="big",
                            partition_data=[PartitionProduceData(index=0, records=batch)],
                        )
                    ],
                )
            )
            behind = connection.submit(MetadataRequest(topics=[MetadataRequestTopic(name="big")]))
            produced = await produce.wait()
            part = produced.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, 0)
            meta = await behind.wait()
            assert [t.name for t in meta.topics] == ["big"]

            fetched = await client.send(
                bootstrap,
                FetchRequest(
                    max_wait_ms=0,
                    min_bytes=1,
                    max_bytes=64 << 20,
                    session_epoch=-1,
                    topics=[
                        FetchTopic(
                            topic="big",
                            partitions=[
                                FetchPartition(
                                    partition=0, fetch_offset=0, partition_max_bytes=64 << 20
                                )
                            ],
                        )
                    ],
                ),
                version=12,  # topics by name
            )
            data = fetched.responses[0].partitions[0]
            assert data.error_code == 0
            assert [(r.offset, r.value) for r in iter_records(data.records)] == list(
                enumerate(values)
            )


async def _trickling_broker(piece_delays: list[float], *, task_status):
    """A broker that answers ApiVersions at once, then each Metadata request a few bytes
    at a time: its i-th answer in pieces of 7 bytes, `piece_delays[i]` seconds apart."""
    supported = {18: (0, 3), 3: (0, 12)}
    answered = 0

    async def answer(stream, req):
        nonlocal answered
        if req.api_key == 18:
            version, body = _api_versions(req, supported)
            buf, _ = encode_response(18, version, req.correlation_id, body)
            await stream.send_all(buf)
            return
        body = MetadataResponse(cluster_id="c" * 300, controller_id=7)
        buf, _ = encode_response(3, req.api_version, req.correlation_id, body)
        delay = piece_delays[answered]
        answered += 1
        for at in range(0, len(buf), 7):
            await stream.send_all(bytes(buf[at : at + 7]))
            await trio.sleep(delay)

    await _serve_requests(supported, answer, task_status=task_status)


async def test_an_answer_arriving_in_pieces_is_read_whole_and_a_trickle_still_times_out(
    nursery,
):
    # The read loop reads what the kernel holds without a scheduler pass and waits only
    # when nothing is there: an answer in ~50 pieces, each after a pause, comes back
    # whole; one whose pieces outlast the request timeout fails with REQUEST_TIMED_OUT,
    # though bytes keep arriving until then.
    port = await nursery.start(_trickling_broker, [0.001, 0.1])
    where = f"127.0.0.1:{port}"
    async with _client(where, request_timeout_ms=400) as client:
        meta = await client.send(where, MetadataRequest(topics=None))
        assert (meta.cluster_id, meta.controller_id) == ("c" * 300, 7)
        connection = await client.connection(where)
        started = trio.current_time()
        try:
            await client.send(where, MetadataRequest(topics=None))
            raise AssertionError("no timeout")
        except RequestTimedOutError as exc:
            assert exc.code == ErrorCode.REQUEST_TIMED_OUT
        # ~50 pieces 100 ms apart take five seconds; the 400 ms timeout ended it.
        assert trio.current_time() - started < 3
        assert connection.closed


async def test_an_address_no_resolver_takes_is_a_connection_error():
    # A host or port from a broker's metadata may be anything: a label too long for IDNA
    # raised UnicodeError, a port out of range OverflowError, out of the client's tasks.
    async with _client("127.0.0.1:1", reconnect_backoff_ms=1, reconnect_backoff_max_ms=1) as client:
        for where in ("x" * 300 + ".example:9092", "127.0.0.1:70000"):
            try:
                await client.send(where, MetadataRequest(topics=None))
                raise AssertionError("no error")
            except KafkaConnectionError as exc:
                assert "cannot connect" in str(exc)
            assert not client.is_connected(where)


def test_an_error_code_this_client_does_not_know_is_kept_by_number():
    # A newer broker's code (or a peer's bug) must not raise ValueError where an answer is
    # read (a consumer's heartbeat loop died on one, ending the consumer).
    from trio_broker.client.errors import error_for

    code = ErrorCode(32767)
    assert code == 32767 and code.name == "UNKNOWN_ERROR_CODE_32767"
    error = error_for(32767, "InitProducerId")
    assert error.code == 32767 and not error.retriable
    assert "UNKNOWN_ERROR_CODE_32767" in str(error)
    assert ErrorCode(3) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        ErrorCode(1 << 20)  # not an int16: still a ValueError
        raise AssertionError("no error")
    except ValueError:
        pass
