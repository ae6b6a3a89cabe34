"""The cache of open segment files (log/file_cache.py): a bounded number of descriptors,
whatever the number of segments, and a fetch's file region that outlives its eviction."""

from __future__ import annotations

import errno
import os

import pytest
from logtest_helpers import append, make_batch

from trio_broker.log.config import LogConfig
from trio_broker.log.file_cache import segment_files
from trio_broker.protocol.records import read_header

CAPACITY = 16


@pytest.fixture
def small_cache():
    before = segment_files.capacity
    segment_files.configure(CAPACITY)
    yield segment_files
    segment_files.configure(before)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_descriptors_stay_within_the_cache_and_regions_outlive_eviction(open_log, small_cache):
    log = open_log(LogConfig(segment_bytes=300, index_interval_bytes=1))
    for i in range(60):
        append(log, make_batch(1, value_size=200, tag=b"r%02d-" % i))
    assert len(log.segments) > 3 * CAPACITY
    baseline = open_fds()
    # A fetch of the first record holds its segment's file...
    region = log.read(0, 1 << 20).regions[0]
    expected = os.pread(region.fd, region.size, region.position)
    # ...while reading every other segment evicts that file from the cache.
    for offset in range(1, log.log_end_offset):
        assert log.read(offset, 1 << 20).regions
    assert len(small_cache) <= CAPACITY
    assert open_fds() <= baseline + CAPACITY
    assert log.segments[0]._file is None  # evicted...
    assert os.pread(region.fd, region.size, region.position) == expected  # ...still open
    assert read_header(expected).base_offset == 0
    fd = region.fd
    del region
    with pytest.raises(OSError) as closed:
        os.fstat(fd)  # the last holder let go: closed
    assert closed.value.errno == errno.EBADF
    # An evicted segment opens again on demand: every record reads back, in order.
    data = b"".join(os.pread(r.fd, r.size, r.position) for r in log.read(0, 1 << 30).regions)
    assert data.count(b"-xxx") == 60
