"""KIP-345 fencing of a replaced static member, as librdkafka's test 0102
(`do_test_fenced_member_classic`) checks it against Kafka.

Two consumers with `group.instance.id` "consumer1" and "consumer2" form a group; a third
joins with "consumer2" too. The broker must fence the old "consumer2" with
FENCED_INSTANCE_ID, which librdkafka raises as a fatal error, and the other two go on.
Answering UNKNOWN_MEMBER_ID instead makes the old one rejoin and take the slot back, and
the two alternate for ever.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError
from grouptest_helpers import create_topic


def _consumer(bootstrap: str, instance: str, client: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fenced-g",
            "group.instance.id": instance,
            "client.id": client,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            "auto.offset.reset": "earliest",
        }
    )


def _poll_until(consumers: list[Consumer], done, limit_s: float = 30.0) -> list:
    """Poll every consumer until `done()`; the errors seen, per consumer index."""
    errors: list = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msg = c.poll(0.1)
            if msg is not None and msg.error():
                errors.append((i, msg.error()))
        if done(errors):
            return errors
    raise AssertionError(f"condition not reached; errors seen: {errors}")


def test_replaced_static_member_is_fenced_fatally(broker):
    create_topic(broker.bootstrap, "fenced", 3)
    c1 = _consumer(broker.bootstrap, "consumer1", "consumer1")
    c2a = _consumer(broker.bootstrap, "consumer2", "consumer2a")
    c1.subscribe(["fenced"])
    c2a.subscribe(["fenced"])
    _poll_until([c1, c2a], lambda _: c1.assignment() and c2a.assignment())

    c2b = _consumer(broker.bootstrap, "consumer2", "consumer2b")
    c2b.subscribe(["fenced"])
    errors = _poll_until(
        [c1, c2a, c2b], lambda errs: any(e.code() == KafkaError._FATAL for _, e in errs)
    )
    fatal = [(i, e) for i, e in errors if e.code() == KafkaError._FATAL]
    assert [i for i, _ in fatal] == [1], errors  # consumer2a alone is fenced
    # The fatal error underneath is the broker's FENCED_INSTANCE_ID.
    assert "fenced" in fatal[0][1].str().lower(), fatal
    print(fatal)
    c2a.close()

    # consumer1 and consumer2b share the three partitions, and keep them (no alternation).
    def settled(_errs) -> bool:
        owned = [tp.partition for c in (c1, c2b) for tp in c.assignment()]
        return sorted(owned) == [0, 1, 2] and bool(c1.assignment()) and bool(c2b.assignment())

    _poll_until([c1, c2b], settled)
    before = {id(c): sorted(tp.partition for tp in c.assignment()) for c in (c1, c2b)}
    # A few session-timeout-free seconds: the alternation took 1-3 s per swap.
    until = time.monotonic() + 4
    later = _poll_until([c1, c2b], lambda _e: time.monotonic() > until)
    assert not [e for _, e in later if e.fatal()], later
    assert {id(c): sorted(tp.partition for tp in c.assignment()) for c in (c1, c2b)} == before
    c1.close()
    c2b.close()
