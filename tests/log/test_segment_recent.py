"""A segment remembers its last appended batches (log/segment.py `_remember`): a consumer a
few batches behind the log end is answered from them, and must get exactly the batches a
scan from the index would find, after truncation, rolls and recovery too."""

from __future__ import annotations

import os

from logtest_helpers import append, make_batch

from trio_broker.log.config import LogConfig
from trio_broker.log.segment import _RECENT
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import iter_batches


class Model:
    """What the log should hold: (base offset, last offset, first value) per batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []

    def append(self, log, *counts: int, tag: bytes) -> None:
        built = [
            make_batch(n, value_size=30 + 7 * i, tag=tag + b"%d." % i) for i, n in enumerate(counts)
        ]
        first = append(log, *built).first_offset
        for i, n in enumerate(counts):
            self.batches.append((first, first + n - 1, tag + b"%d.0-" % i))
            first += n

    def truncate(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b[1] < offset]

    def from_offset(self, offset: int) -> list[tuple[int, int, bytes]]:
        return [b for b in self.batches if b[1] >= offset]


def read_all(log, offset: int) -> list[tuple[int, int, bytes]]:
    """(base, last, first value) of every batch a fetch at `offset` gets."""
    result = log.read(offset, 1 << 20)
    data = b"".join(os.pread(r.fd, r.size, r.position) for r in result.regions)
    out = []
    for pos, header in iter_batches(data):
        value = next(iter(iter_records(data[pos : pos + header.size]))).value
        out.append((header.base_offset, header.last_offset, value[: value.index(b"-") + 1]))
    return out


def check_tail_reads(log, model: Model, behind: int = _RECENT + 3) -> None:
    """Every offset of the last `behind` batches, as a tailing consumer would fetch it."""
    end = log.log_end_offset
    start = model.batches[-behind][0] if len(model.batches) >= behind else 0
    for offset in range(max(start - 1, log.log_start_offset), end):
        assert read_all(log, offset) == model.from_offset(offset), offset
        # One batch only (max_bytes 1): the batch holding the offset, whole.
        one = log.read(offset, 1)
        assert one.first_offset == model.from_offset(offset)[0][0]


def test_a_consumer_a_few_batches_behind_gets_the_right_batches(open_log):
    # A large index interval: without the remembered batches every such read scans.
    log = open_log(LogConfig(index_interval_bytes=1 << 20))
    model = Model()
    for i in range(40):
        model.append(log, 1 + i % 4, tag=b"a%d/" % i)
    segment = log.active_segment
    # The ring answers offsets of the last batches but the oldest remembered one.
    for base, last, _ in model.batches[-(_RECENT - 1) :]:
        for offset in range(base, last + 1):
            found = segment.translate_offset(offset)
            assert found is not None and found[2].base_offset == base
            assert found[2].last_offset == last
    assert segment._recent_position(model.batches[-2][0]) >= 0
    assert segment._recent_position(model.batches[-_RECENT][1]) == -1  # scans instead
    check_tail_reads(log, model)
    # A start position past a remembered batch is respected (the scan's answer).
    base, _, _ = model.batches[-3]
    after = segment.translate_offset(model.batches[-2][0])
    assert after is not None
    found = segment.translate_offset(base, start_position=after[0])
    assert found is not None and found[0] == after[0]


def test_appends_of_several_batches_more_than_remembered(open_log):
    log = open_log(LogConfig(index_interval_bytes=1 << 20))
    model = Model()
    model.append(log, 2, 1, 3, tag=b"x/")
    model.append(log, *([1, 2] * _RECENT), tag=b"y/")  # more than the ring holds at once
    check_tail_reads(log, model)
    model.append(log, 1, tag=b"z/")
    model.append(log, 3, 1, tag=b"w/")
    check_tail_reads(log, model, behind=2 * _RECENT)


def test_after_truncation_and_new_appends(open_log):
    log = open_log(LogConfig(index_interval_bytes=1 << 20))
    model = Model()
    for i in range(30):
        model.append(log, 1 + i % 3, tag=b"old%d/" % i)
    cut = model.batches[-6][0] + 1  # inside a batch: that batch goes too
    log.truncate_to(cut)
    model.truncate(cut)
    assert log.log_end_offset == model.batches[-1][1] + 1
    check_tail_reads(log, model)
    # New batches of other sizes where the old ones were: nothing old may be found.
    for i in range(8):
        model.append(log, 4 - i % 4, tag=b"new%d/" % i)
    check_tail_reads(log, model)
    assert all(not v.startswith(b"old") for _, _, v in read_all(log, model.batches[-9][0])[1:])


def test_across_rolls(open_log):
    log = open_log(LogConfig(segment_bytes=1500, index_interval_bytes=1 << 20))
    model = Model()
    for i in range(60):
        model.append(log, 1 + i % 2, tag=b"r%d/" % i)
    assert len(log.segments) > 4
    check_tail_reads(log, model, behind=3 * _RECENT)
    # Truncation back into an older segment, then appends: the right batches again.
    cut = log.segments[-2].base_offset + 1
    log.truncate_to(cut)
    model.truncate(cut)
    for i in range(10):
        model.append(log, 2, tag=b"s%d/" % i)
    check_tail_reads(log, model, behind=2 * _RECENT)


def test_after_recovery_of_the_active_segment(open_log):
    log = open_log(LogConfig(index_interval_bytes=1 << 20))
    model = Model()
    for i in range(12):
        model.append(log, 2, tag=b"p%d/" % i)
    segment = log.active_segment
    # A torn write at the end: recovery cuts it off, and forgets what it remembered.
    end = segment.size
    with open(segment.log_path, "ab") as f:
        f.write(make_batch(1)[:40])
    segment.size = end + 40
    assert segment.recover() == 40
    assert segment._ring_count == 0
    check_tail_reads(log, model)
    for i in range(5):
        model.append(log, 1, tag=b"q%d/" % i)
    check_tail_reads(log, model)
