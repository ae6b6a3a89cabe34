"""Our client against a broker whose answers are mutated in flight: a proxy decodes a
share of the responses, changes a field by its schema type (tests/fuzz_requests.py's
mutator) and encodes them again. The client may fail, but only with its own errors
(KafkaError and its timeouts), and never hang past its configured timeouts: an odd answer
from a broker (a newer one's error code, a host no resolver takes, a member's unreadable
subscription) must not escape as another exception and end the application's tasks.
"""

from __future__ import annotations

import traceback

import pytest
import trio
from fuzz_requests import MutatingProxy

import trio_broker
from trio_broker.client import Admin, Consumer, Producer
from trio_broker.client.errors import KafkaTimeoutError
from trio_broker.errors import KafkaError


@pytest.mark.parametrize("seed", [9, 16, 18])
async def test_the_client_fails_only_with_its_own_errors_on_odd_answers(tmp_path, seed):
    # The broker advertises the proxy, so every connection the client makes goes through it.
    proxy = MutatingProxy(("127.0.0.1", 0), seed, 0.25)
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
        "offsets.topic.num.partitions": "2",
        "group.initial.rebalance.delay.ms": "0",
    }
    where = f"127.0.0.1:{proxy.port}"
    common = {"request_timeout_ms": 2000, "retry_backoff_ms": 20, "reconnect_backoff_max_ms": 100}
    foreign: list[str] = []
    stuck: list[str] = []

    def judge(step: str, exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                judge(step, inner)
        elif not isinstance(exc, (KafkaError, KafkaTimeoutError, trio.TooSlowError)):
            foreign.append(f"{step}: " + "".join(traceback.format_exception(exc))[-1200:])

    async def step(name: str, run, limit_s: float = 30) -> None:
        with trio.move_on_after(limit_s) as scope:
            try:
                await run()
            except BaseException as exc:  # noqa: BLE001  (judged: only its own errors pass)
                judge(name, exc)
        if scope.cancelled_caught:
            stuck.append(name)

    async def admin() -> None:
        async with Admin(where, **common) as client:
            await client.create_topics({"odd": 2})
            await client.describe_topics(["odd"])
            await client.list_groups()

    async def produce() -> None:
        async with Producer(
            where, linger_ms=2, delivery_timeout_ms=6000, max_block_ms=4000, **common
        ) as producer:
            handles = [
                await producer.send_soon("odd", b"v%d" % i, key=b"k%d" % i) for i in range(30)
            ]
            await producer.flush()
            for handle in handles:
                try:
                    await handle.wait()
                except BaseException as exc:  # noqa: BLE001
                    judge("delivery", exc)

    async def consume() -> None:
        async with Consumer(
            where, group_id="odd-group", auto_offset_reset="earliest", session_timeout_ms=6000,
            **common,
        ) as consumer:  # fmt: skip
            consumer.subscribe(["odd"])
            got = 0
            with trio.move_on_after(6):
                while got < 30:
                    batch = await consumer.getmany(timeout_ms=500)
                    got += sum(len(records) for records in batch.values())
            await consumer.commit()

    try:
        async with trio_broker.open_broker(config) as bootstrap:
            host, port = bootstrap.rsplit(":", 1)
            proxy.target = (host, int(port))
            for name, run in (("admin", admin), ("produce", produce), ("consume", consume)):
                await step(name, run)
    finally:
        proxy.close()
    assert proxy.mutated > 0
    assert foreign == [], "\n".join(foreign)
    assert stuck == []
