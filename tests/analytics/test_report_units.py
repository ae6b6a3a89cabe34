"""The report's numbers in human units, its axes and its buckets (no Spark, no browser)."""

from __future__ import annotations

import re

import pytest

from trio_broker.analytics.charts import (
    ChartPoint,
    bucket_for_span,
    line_chart,
    nice_axis,
    throughput_range,
    time_ticks,
)
from trio_broker.analytics.units import (
    fmt_axis,
    fmt_byte_rate,
    fmt_bytes,
    fmt_change,
    fmt_count,
    fmt_duration,
    fmt_exact,
    fmt_rate,
)

DAY = 86_400_000
D = 1_714_521_600_000  # 2024-05-01T00:00:00Z
NOON = D + DAY // 2


@pytest.mark.parametrize(
    "text,expected",
    [
        # The examples.
        (fmt_bytes(1_034_004_496), "1.03 GB"),
        (fmt_count(2_000_000, "records"), "2.0 M records"),
        (fmt_rate(3_200), "3.2 k/s"),
        (fmt_duration(250), "4 m 10 s"),
        # Small values stay exact; rounding up to 1000 takes the next prefix.
        (fmt_count(950, "records"), "950 records"),
        (fmt_count(999_960), "1.0 M"),
        (fmt_bytes(512), "512 B"),
        (fmt_bytes(999.7), "1.00 kB"),
        (fmt_bytes(48_321), "48.3 kB"),
        (fmt_rate(10 / 60), "0.17/s"),
        (fmt_rate(0), "0/s"),
        (fmt_byte_rate(1_250_000), "1.25 MB/s"),
        (fmt_duration(0), "0 s"),
        (fmt_duration(2.5), "2.5 s"),
        (fmt_duration(59.6), "1 m"),
        (fmt_duration(5 * 3600 + 61), "5 h 1 m"),
        (fmt_duration(3 * 86_400 + 4 * 3600 + 5), "3 d 4 h"),
        (fmt_duration(None), "–"),
        (fmt_exact(1_034_004_496), "1,034,004,496"),
        (fmt_change(5880, 900), "+553.3 %"),
        (fmt_change(90, 100), "-10.0 %"),
        (fmt_change(7, 7), "no change"),
        (fmt_change(7, 0), "up from 0"),
    ],
)
def test_human_units(text, expected):
    assert text == expected


def test_axis_labels_share_one_prefix_and_one_number_of_decimals():
    assert fmt_axis([0, 0.25, 0.5, 0.75, 1.0], "rate") == [
        "0",
        "0.25/s",
        "0.50/s",
        "0.75/s",
        "1.00/s",
    ]
    assert fmt_axis([0, 2500, 5000, 7500], "rate") == ["0", "2.5 k/s", "5.0 k/s", "7.5 k/s"]
    assert fmt_axis([0, 5000, 10000, 15000], "byte_rate") == ["0", "5 kB/s", "10 kB/s", "15 kB/s"]
    assert fmt_axis([0, 200, 400], "count") == ["0", "200", "400"]
    assert nice_axis(843) == (1000, 250)
    assert nice_axis(0.83) == (1.0, 0.25)
    assert nice_axis(0) == (1.0, 0.25)


def test_a_day_of_traffic_in_one_minute_gets_a_minute_wide_axis_of_one_second_buckets():
    bucket, x0, x1 = throughput_range(NOON, NOON + 59_999, D, D + DAY)
    assert bucket == 1000
    assert (x0, x1) == (NOON - 1000, NOON + 61_000)
    # Traffic within one second is still drawn over a minute.
    bucket, x0, x1 = throughput_range(NOON, NOON + 10, D, D + DAY)
    assert bucket == 1000 and x1 - x0 >= 60_000 and x0 < NOON < NOON + 10 < x1
    # At the window's edge the axis stops at the window.
    assert throughput_range(D, D + 5_000, D, D + DAY)[1] == D


def test_traffic_over_the_day_is_drawn_over_the_day_in_at_most_120_buckets():
    assert throughput_range(D + 3_600_000, D + DAY - 1, D, D + DAY) == (15 * 60_000, D, D + DAY)
    assert throughput_range(None, None, D, D + DAY) == (15 * 60_000, D, D + DAY)
    assert bucket_for_span(10 * 60_000) == 5000
    assert bucket_for_span(7 * DAY) == 2 * 3_600_000


def test_time_ticks_are_round_and_apart():
    step, ticks = time_ticks(D, D + DAY, 1000)
    assert step == 3 * 3_600_000 and ticks[0] == D and ticks[-1] == D + DAY
    step, ticks = time_ticks(NOON - 1000, NOON + 61_000, 1000)
    assert step == 10_000 and ticks[0] == NOON and all(t % 10_000 == 0 for t in ticks)
    assert 1000 * step / 62_000 >= 90  # labels at least 90 units apart


def test_line_chart_draws_empty_buckets_as_zero_and_marks_every_point():
    bucket = 1000
    series = {
        "orders": [
            ChartPoint(x_ms=NOON + 500, y=10.0, count=10, note="12:00:00: 10 records"),
            ChartPoint(x_ms=NOON + 5_500, y=4.0, count=4),
        ]
    }
    svg = line_chart(
        series,
        x_range=(NOON, NOON + 10_000),
        y_kind="rate",
        label="Records per second by topic",
        zero_fill_bucket_ms=bucket,
        width=600,
        height=200,
    )
    (line,) = re.findall(r'<polyline points="([^"]+)"', svg)
    assert len(line.split()) == 10  # every bucket of the range: 2 with traffic, 8 zeros
    points = re.findall(r'<circle class="pt"[^>]*data-x="(\d+)" data-count="(\d+)"', svg)
    assert points == [(str(NOON + 500), "10"), (str(NOON + 5_500), "4")]
    assert "<title>12:00:00: 10 records</title>" in svg
    assert 'viewBox="0 0 600 200" width="100%"' in svg


def test_line_chart_dashes_the_gap_before_a_point_measured_apart():
    series = {
        "quitter": [
            ChartPoint(x_ms=D + 1000, y=5.0, count=5),
            ChartPoint(x_ms=D + 2000, y=10.0, count=10),
            ChartPoint(x_ms=D + 9000, y=85.0, count=85, measured_between=False),
        ]
    }
    svg = line_chart(series, x_range=(D, D + 10_000), y_kind="count", label="lag")
    assert len(re.findall("<polyline", svg)) == 1
    assert len(re.findall('stroke-dasharray="4 3"', svg)) == 1
    assert len(re.findall('<circle class="pt"[^>]*fill="#fff"', svg)) == 1  # hollow
