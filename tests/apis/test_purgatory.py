"""The purgatory on trio's autojump clock: operations answer once, when woken and ready or
when their deadline passes, whichever comes first; none holds a task while it waits."""

from __future__ import annotations

import pytest
import trio

from trio_broker.cluster.replication.purgatory import DelayedOperation, Purgatory


@pytest.fixture
async def purgatory(nursery):
    p = Purgatory("test")
    await nursery.start(p.run)
    return p


class Op:
    """A parked request: ready once `available` reaches `needed`; records its answers."""

    def __init__(self, purgatory, keys, wait_s, needed=1):
        self.available = 0
        self.needed = needed
        self.answers: list[tuple[float, int]] = []
        self.op = DelayedOperation(
            keys=keys,
            deadline=trio.current_time() + wait_s,
            try_complete=lambda: self.available >= self.needed,
            complete=self._complete,
        )
        purgatory.park(self.op)

    async def _complete(self):
        self.answers.append((trio.current_time(), self.available))


async def test_woken_and_ready_answers_at_once_and_only_once(purgatory, autojump_clock):
    op = Op(purgatory, (("t", 0),), wait_s=10)
    await trio.sleep(1)
    op.available = 1
    purgatory.wake([("t", 0)])
    await trio.sleep(0.001)
    assert op.answers == [(pytest.approx(1, abs=0.01), 1)]
    await trio.sleep(20)  # its deadline passes: no second answer
    assert len(op.answers) == 1
    assert purgatory.delayed == 0


async def test_woken_but_not_ready_waits_again(purgatory, autojump_clock):
    op = Op(purgatory, (("t", 0), ("t", 1)), wait_s=10, needed=2)
    op.available = 1
    purgatory.wake([("t", 0), ("t", 1)])  # woken under both keys, still short
    await trio.sleep(1)
    assert op.answers == []
    op.available = 2
    purgatory.wake([("t", 1)])  # it is watched again under its keys
    await trio.sleep(0.001)
    assert [a for _, a in op.answers] == [2]


async def test_deadline_answers_what_is_there(purgatory, autojump_clock):
    late = Op(purgatory, (("t", 0),), wait_s=5)
    early = Op(purgatory, (("t", 1),), wait_s=0.5)  # parked later, due sooner
    await trio.sleep(0.6)
    assert early.answers == [(pytest.approx(0.5, abs=0.01), 0)]
    assert late.answers == []
    await trio.sleep(5)
    assert late.answers == [(pytest.approx(5, abs=0.01), 0)]
    # Expired operations are no longer watched: a wake finds nothing.
    purgatory.wake([("t", 0), ("t", 1)])
    await trio.sleep(0.001)
    assert len(late.answers) == len(early.answers) == 1


async def test_many_parked_then_answered_keep_nothing(purgatory, autojump_clock):
    ops = [Op(purgatory, (("t", i % 3),), wait_s=30) for i in range(3000)]
    assert purgatory.delayed == 3000
    for op in ops:
        op.available = 1
    purgatory.wake([("t", 0), ("t", 1), ("t", 2)])
    await trio.sleep(0.001)
    assert all(len(op.answers) == 1 for op in ops)
    assert purgatory.delayed == 0
    # New operations after many answered ones still expire on time.
    again = Op(purgatory, (("t", 0),), wait_s=2)
    await trio.sleep(2.5)
    assert [a for _, a in again.answers] == [0]


async def test_answered_operation_lets_go_of_its_request(purgatory, autojump_clock):
    # An answered operation stays in the expiry heap until its deadline (30 s for a
    # produce); what it answered (a produce's request, its megabyte frame) must not.
    import gc
    import weakref

    class Frame:  # stands for a request's frame buffer
        pass

    frame = Frame()
    held = weakref.ref(frame)
    answers = []

    async def complete(frame=frame):
        answers.append(frame)

    purgatory.park(
        DelayedOperation(
            keys=(("t", 0),),
            deadline=trio.current_time() + 30,
            try_complete=lambda: True,
            complete=complete,
        )
    )
    del frame, complete
    purgatory.wake([("t", 0)])
    await trio.sleep(0.001)
    assert len(answers) == 1
    answers.clear()
    gc.collect()
    assert held() is None


async def test_answered_operations_do_not_wake_the_reaper(purgatory, autojump_clock):
    # A follower's or a tailing consumer's fetch is parked for up to its max wait and
    # nearly always answered by the next append: the reaper (a task that sleeps until the
    # earliest deadline) must not wake at the deadline of each one already answered.
    class ReaperSteps(trio.abc.Instrument):
        steps = 0

        def before_task_step(self, task):
            if task.name.endswith("Purgatory._reap"):
                ReaperSteps.steps += 1

    trio.lowlevel.add_instrument(instrument := ReaperSteps())
    try:
        ops = []
        for _ in range(200):
            op = Op(purgatory, (("t", 0),), wait_s=0.5)
            await trio.sleep(0.01)
            op.available = 1
            purgatory.wake([("t", 0)])
            await trio.sleep(0.001)
            ops.append(op)
        await trio.sleep(1)  # every deadline has passed
    finally:
        trio.lowlevel.remove_instrument(instrument)
    assert all(len(op.answers) == 1 for op in ops)
    assert ReaperSteps.steps <= 5, ReaperSteps.steps
    # And one that is not answered still expires on time.
    late = Op(purgatory, (("t", 1),), wait_s=0.5)
    await trio.sleep(0.6)
    assert late.answers == [(pytest.approx(trio.current_time() - 0.1, abs=0.01), 0)]


async def test_a_handler_answers_the_fetches_its_produce_wakes(tmp_path):
    # Kafka's action queue: a tailing consumer's fetch, parked until the next append, is
    # answered by the handler task that appended, right after it answered the produce; the
    # purgatory's own task is not scheduled for it (one scheduler pass less per record).
    import socket
    import threading
    import time

    from test_produce_raw import batch, create_topic, fetch, produce

    from trio_broker import serve
    from trio_broker.protocol.record_codec import iter_records

    class CompleterSteps(trio.abc.Instrument):
        steps = 0

        def before_task_step(self, task):
            if task.name.endswith("Purgatory._complete_woken"):
                CompleterSteps.steps += 1

    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    async with trio.open_nursery() as nursery:
        host, port = (await nursery.start(serve, config))[0][:2]

        def tail_and_produce():
            producer = socket.create_connection((host, port), timeout=20)
            consumer = socket.create_connection((host, port), timeout=20)
            create_topic(producer, "tail")
            waited, values = [], []
            for i in range(10):
                started = time.monotonic()
                result = {}

                def parked_fetch(offset=i, result=result):
                    result["data"] = fetch(consumer, "tail", offset, max_wait_ms=20000, min_bytes=1)

                reader = threading.Thread(target=parked_fetch)
                reader.start()
                time.sleep(0.2)  # the fetch finds nothing and is parked
                assert produce(producer, "tail", batch([b"record %d" % i])).base_offset == i
                reader.join(20)
                waited.append(time.monotonic() - started)
                data = result["data"]
                assert data.error_code == 0
                values += [(r.offset, r.value) for r in iter_records(data.records)]
            return waited, values

        trio.lowlevel.add_instrument(instrument := CompleterSteps())
        try:
            waited, values = await trio.to_thread.run_sync(tail_and_produce)
        finally:
            trio.lowlevel.remove_instrument(instrument)
        nursery.cancel_scope.cancel()
    assert values == [(i, b"record %d" % i) for i in range(10)]
    # Each fetch waited for its produce (it was parked, not answered at once)...
    assert all(0.15 < w < 15 for w in waited), waited
    # ...and the handler answered it: the purgatory's task never ran.
    assert CompleterSteps.steps == 0, CompleterSteps.steps


async def test_expire_all_answers_everything_now_and_what_parks_after(purgatory, autojump_clock):
    """Shutdown: what waits answers at once, as at its deadline, and so does what parks
    after; a woken operation is not answered twice."""
    ops = [Op(purgatory, (("t", i),), wait_s=60) for i in range(3)]
    await trio.sleep(1)
    purgatory.expire_all()
    await trio.sleep(0.001)
    assert [len(op.answers) for op in ops] == [1, 1, 1]
    assert all(t == pytest.approx(1, abs=0.01) for op in ops for t, _ in op.answers)
    late = Op(purgatory, (("t", 9),), wait_s=60)
    await trio.sleep(0.001)
    assert [t for t, _ in late.answers] == [pytest.approx(1, abs=0.01)]
    late.available = 1
    purgatory.wake([("t", 9), ("t", 0)])
    await trio.sleep(120)
    assert [len(op.answers) for op in [*ops, late]] == [1, 1, 1, 1]
    assert purgatory.delayed == 0
