"""The report's HTML as an operator opens it: in Chromium, 1,280 px wide.

Three reports over one log (topics produced through a real broker with confluent-kafka,
offset commits appended to `__consumer_offsets` with the broker's log code):

- 2024-04-30, "the day before": `clicks` and `orders`, all within one minute (12:00), and
  no consumer group yet;
- 2024-05-01, into the same `--out`: `orders` every 5 minutes all day, `clicks` every
  minute from 08:00 to 09:00, six groups (two ERR, two WARN, two OK; one with a very long
  name);
- 2024-04-29, into another `--out`: a day with nothing in it.

Each page is rendered by headless Chromium (one browser for all three, driven over its
DevTools pipe) with a measuring script added to a copy (the report itself has none); the
screenshots are kept under the test's tmp dir and their paths printed (and copied to
$REPORT_ARTIFACTS when it is set). Every number the page shows is checked against the
Parquet tables.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (extra 'analytics')")
if shutil.which("java") is None:
    pytest.skip("Java 17 is needed for Spark and is not installed", allow_module_level=True)

from test_report_job import _append, _commit_record  # noqa: E402

from trio_broker.analytics.job import ReportOptions, run_report  # noqa: E402
from trio_broker.analytics.units import fmt_bytes, fmt_change, fmt_count, fmt_exact  # noqa: E402
from trio_broker.log import LogManager  # noqa: E402
from trio_broker.protocol.record_codec import build_batch  # noqa: E402

DAY = 86_400_000
MIN = 60_000
D = 1_714_521_600_000  # 2024-05-01T00:00:00Z
PREV = D - DAY  # 2024-04-30
EMPTY = D - 2 * DAY  # 2024-04-29
LONG_GROUP = "payments-settlement-reconciliation-service-eu-west-1-primary-consumer-group-v2"
WIDTH = 1280
FIRST_SCREEN = 800  # a laptop's first screen, in CSS px


def _traffic() -> list[tuple[str, int, int, int]]:
    """(topic, first record's timestamp, records, value bytes) for each batch, in order."""
    batches = []
    for s in range(60):  # the day before: one minute of traffic, a batch a second
        batches.append(("clicks", PREV + 12 * 3_600_000 + s * 1000, 10, 1000))
        batches.append(("orders", PREV + 12 * 3_600_000 + s * 1000 + 500, 5, 200))
    for j in range(288):  # orders all day, every 5 minutes
        batches.append(("orders", D + j * 5 * MIN, 10, 200))
    for m in range(60):  # clicks for one hour
        batches.append(("clicks", D + 8 * 3_600_000 + m * MIN, 50, 1000))
    return sorted(batches, key=lambda b: b[1])


def _produce(broker_dir: Path) -> None:
    """Each batch of `_traffic` produced through the broker (one flush per batch)."""
    from confluent_kafka import Producer

    from trio_broker.testing import BrokerThread

    with BrokerThread({"log.dirs": str(broker_dir), "num.partitions": "1"}) as broker:
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "linger.ms": 50,
                "compression.type": "none",
                "enable.idempotence": False,
            }
        )
        failures = []

        def on_delivery(err, msg):
            if err is not None:
                failures.append(err)

        for topic, start, records, size in _traffic():
            for i in range(records):
                producer.produce(
                    topic,
                    value=b"x" * size,
                    partition=0,
                    timestamp=start + 10 * i,
                    on_delivery=on_delivery,
                )
            assert producer.flush(10) == 0
        assert failures == []


def _commits() -> list[tuple[int, str, str, int]]:
    """(commit time, group, topic, committed offset) on 2024-05-01."""
    out = []
    for k in range(144):  # orders: 10 records every 5 minutes; log end 300 + 20(k+1) at +7 min
        t = D + k * 10 * MIN + 7 * MIN
        out.append((t, "orders-audit", "orders", 20 * (k + 1) + 300))  # keeps up: OK
        out.append((t, "orders-slow", "orders", 10 * (k + 1) + 300))  # lag grows: WARN
        out.append((t, LONG_GROUP, "orders", 15 * (k + 1) + 300))  # lag grows: WARN
        out.append((t, "orders-stuck", "orders", 100))  # never moves: STALL, ERR
    for m in range(60):  # clicks: 50 records a minute from 08:00; log end 600 + 50(m+1)
        t = D + 8 * 3_600_000 + m * MIN + 30_000
        out.append((t, "clicks-live", "clicks", 600 + 50 * (m + 1)))  # OK
        if m < 30:  # one batch behind, then quits: STOP, ERR
            out.append((t, "clicks-etl", "clicks", 600 + 50 * m))
    return sorted(out)


def _write_commits(log_dir: Path) -> None:
    manager = LogManager([log_dir], node_id=1, cluster_id="report-page-test")
    manager.open()
    offsets = manager.create_log("__consumer_offsets", 0)
    for ts, group, topic, offset in _commits():
        _append(offsets, build_batch([_commit_record(group, topic, 0, offset, ts)]))
    manager.checkpoint()
    manager.close()


@pytest.fixture(scope="module")
def reports(spark, tmp_path_factory):
    """name -> ReportResult for the three reports (see the module's docstring)."""
    root = tmp_path_factory.mktemp("page")
    _produce(root / "broker")
    _write_commits(root / "logs")
    dirs = (str(root / "broker"), str(root / "logs"))
    out = {}
    for name, since, out_dir in (
        ("before", PREV, root / "out"),
        ("day", D, root / "out"),
        ("empty", EMPTY, root / "out-empty"),
    ):
        options = ReportOptions(
            log_dirs=dirs, out=str(out_dir), since_ms=since, until_ms=since + DAY
        )
        out[name] = run_report(spark, options)
    return out


def _parquet(spark, result, table: str, day: int) -> list[dict]:
    date = dt.datetime.fromtimestamp(day / 1000, dt.UTC).date()
    rows = spark.read.parquet(str(result.out / table)).collect()
    return [r.asDict() for r in rows if r["date"] == date]


# -- rendering in Chromium -------------------------------------------------------------------

# Added to a copy of the page: measures what the browser laid out and writes it, as JSON,
# into the DOM, where the test reads it.
_MEASURE = """<script>
(function () {
  const rect = (el) => el.getBoundingClientRect();
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5 &&
    Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5;
  const de = document.documentElement;
  const m = {scrollWidth: de.scrollWidth, clientWidth: de.clientWidth,
             scrollHeight: de.scrollHeight, values: {}, charts: [], sections: {}, boxes: {}};
  for (const el of document.querySelectorAll("[id][data-value]")) {
    m.values[el.id] = {value: el.dataset.value, text: el.textContent.trim(),
                       bottom: rect(el).bottom, date: el.dataset.date || null};
  }
  m.attention = [...document.querySelectorAll("#attention li[data-group]")]
    .map((li) => li.dataset.group);
  m.attentionBottom = document.getElementById("attention") ?
    rect(document.getElementById("attention")).bottom : null;
  m.busiest = [...document.querySelectorAll("#busiest li")].map((li) =>
    ({topic: li.dataset.topic, records: li.dataset.records, bytes: li.dataset.bytes}));
  for (const box of document.querySelectorAll(".table-box")) {
    const t = box.querySelector("table");
    m.boxes[t.id] = {scrollWidth: box.scrollWidth, clientWidth: box.clientWidth};
  }
  m.numbersRight = [...document.querySelectorAll("td.num, th.num")]
    .filter((c) => getComputedStyle(c).textAlign !== "right").length;
  m.numbers = document.querySelectorAll("td.num").length;
  for (const s of document.querySelectorAll("section")) {
    m.sections[s.id] = [...s.querySelectorAll(".empty")]
      .filter((e) => rect(e).height > 0).map((e) => e.textContent.trim());
  }
  for (const fig of document.querySelectorAll("figure.chart")) {
    const svg = fig.querySelector("svg");
    const box = rect(svg);
    // No axis label on another, none on the title.
    const texts = [...svg.querySelectorAll("text"), fig.querySelector("figcaption")].map(rect);
    let overlaps = 0;
    for (let i = 0; i < texts.length; i++)
      for (let j = i + 1; j < texts.length; j++) if (overlap(texts[i], texts[j])) overlaps++;
    const fontSizes = [...svg.querySelectorAll("text")].map((t) => rect(t).height);
    m.charts.push({id: fig.id, kind: fig.dataset.kind, group: fig.dataset.group || null,
      bucket: Number(fig.dataset.bucketMs), width: box.width, left: box.left,
      right: box.right, overlaps: overlaps, minTextHeight: Math.min(...fontSizes),
      points: [...svg.querySelectorAll("circle.pt")].map((c) => {
        const r = rect(c);
        return {series: c.dataset.series, x: Number(c.dataset.x),
                count: c.dataset.count === undefined ? null : Number(c.dataset.count),
                inside: r.left >= box.left - 1 && r.right <= box.right + 1 &&
                        r.top >= box.top - 1 && r.bottom <= box.bottom + 1};
      })});
  }
  const pre = document.createElement("pre");
  pre.id = "measurements";
  pre.textContent = JSON.stringify(m);
  document.body.appendChild(pre);
})();
</script>"""

_CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return path


class _Browser:
    """One headless Chromium for every page, driven over the DevTools protocol on a pipe
    (`--remote-debugging-pipe`: JSON messages ended by a NUL byte, commands to the browser
    on its fd 3, answers and events from it on its fd 4). Starting Chromium costs seconds;
    the pages are loaded one after another in it, each in a window of its own."""

    def __init__(self, binary: str, profile: Path) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self._log = profile.parent / "chromium.log"
        to_browser, self._commands = os.pipe()
        self._events, from_browser = os.pipe()
        # bash (dash takes fds 0-9 only) puts the pipe ends on the fds Chromium uses.
        script = f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}'
        with open(self._log, "wb") as log:
            self._process = subprocess.Popen(
                ["bash", "-c", script, binary, *_CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                 f"--window-size={WIDTH},900", "--remote-debugging-pipe", "about:blank"],
                pass_fds=(to_browser, from_browser),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self._seen: list[dict] = []

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            # The deadline bounds a hung browser; no assertion depends on how long it takes.
            wait = deadline - time.monotonic()
            assert wait > 0 and select.select([self._events], [], [], wait)[0], "Chromium hung"
            chunk = os.read(self._events, 1 << 20)
            assert chunk, "Chromium exited: " + self._log.read_text(errors="replace")[-2000:]
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send a command; its result (events that come first are left behind)."""
        self._next_id += 1
        command = {"id": self._next_id, "method": method, "params": params}
        if session:
            command["sessionId"] = session
        os.write(self._commands, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + 180
        while True:
            message = self._receive(deadline)
            if message.get("id") == self._next_id:
                assert "error" not in message, (method, message["error"])
                return message["result"]
            self._seen.append(message)

    def open(self, url: str, height: int, *, scrollbars: bool = True) -> str:
        """A new window `WIDTH` x `height` px showing `url`, loaded: its session id."""
        target = self.call(
            "Target.createTarget", url="about:blank", width=WIDTH, height=height, newWindow=True
        )["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session)
        if not scrollbars:
            self.call("Emulation.setScrollbarsHidden", session, hidden=True)
        self._seen = []
        self.call("Page.navigate", session, url=url)
        deadline = time.monotonic() + 180
        while not any(
            m.get("method") == "Page.loadEventFired" and m.get("sessionId") == session
            for m in self._seen
        ):
            self._seen.append(self._receive(deadline))
        return session

    def close(self) -> None:
        os.close(self._commands)  # the browser exits when its pipe closes
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(30)
        os.close(self._events)


def _render(browser: _Browser, page: Path, work: Path) -> tuple[dict, Path]:
    """(measurements, screenshot) of `page` in Chromium at 1,280 px."""
    work.mkdir(parents=True, exist_ok=True)
    measured = work / "measured.html"
    measured.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
    tab = browser.open(measured.as_uri(), 900)
    found = browser.call(
        "Runtime.evaluate",
        tab,
        expression='document.getElementById("measurements")?.textContent',
        returnByValue=True,
    )
    assert "value" in found["result"], found
    measurements = json.loads(found["result"]["value"])
    # The whole page in one picture: a window as tall as the page. (The measurements are
    # taken with the scrollbar showing, which leaves the page less than 1,280 px.)
    png = work / f"{page.stem}.png"
    height = min(measurements["scrollHeight"], 12_000)
    tab = browser.open(page.as_uri(), height, scrollbars=False)
    png.write_bytes(
        base64.b64decode(browser.call("Page.captureScreenshot", tab, format="png")["data"])
    )
    assert png.stat().st_size > 0
    print(f"screenshot of {page.name} at {WIDTH} px: {png}")
    # pytest keeps only its last three tmp dirs; CI (or a person) can keep them elsewhere.
    keep = os.environ.get("REPORT_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        print(f"  kept as {shutil.copy(png, Path(keep) / png.name)}")
    return measurements, png


@pytest.fixture(scope="module")
def pages(reports, chromium, tmp_path_factory):
    """name -> (measurements, screenshot path) for each report's HTML, all in one Chromium."""
    root = tmp_path_factory.mktemp("screenshots")
    browser = _Browser(chromium, root / "profile")
    try:
        return {
            name: _render(browser, result.html_path, root / name)
            for name, result in reports.items()
        }
    finally:
        browser.close()


# -- the page in the browser ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["day", "before", "empty"])
def test_page_fits_1280_px_and_numbers_are_right_aligned(pages, name):
    m, png = pages[name]
    assert png.exists()
    assert m["scrollWidth"] <= WIDTH and m["scrollWidth"] <= m["clientWidth"], m["scrollWidth"]
    # The group table, long group name and all, fits without scrolling in its box.
    if "group-table" in m["boxes"]:
        box = m["boxes"]["group-table"]
        assert box["scrollWidth"] <= box["clientWidth"]
    assert m["numbersRight"] == 0
    for chart in m["charts"]:
        assert chart["overlaps"] == 0, chart["id"]  # no label on a label or a title
        assert chart["left"] >= 0 and chart["right"] <= WIDTH, chart["id"]
        assert chart["minTextHeight"] >= 11, chart["id"]  # legible axis labels
        assert all(p["inside"] for p in chart["points"]), chart["id"]
    big = [c for c in m["charts"] if c["kind"] in ("records", "bytes")]
    assert all(c["width"] >= 1000 for c in big)  # as wide as the page's column


def test_summary_numbers_are_the_parquet_tables(spark, reports, pages):
    m, _ = pages["day"]
    result = reports["day"]
    throughput = _parquet(spark, result, "topic_throughput", D)
    records = sum(r["records"] for r in throughput)
    size = sum(r["bytes"] for r in throughput)
    assert records == 288 * 10 + 60 * 50
    assert int(m["values"]["total-records"]["value"]) == records
    assert int(m["values"]["total-bytes"]["value"]) == size
    assert m["values"]["total-records"]["text"] == fmt_count(records)
    assert m["values"]["total-bytes"]["text"] == fmt_bytes(size)
    assert m["values"]["exact-records"]["text"] == f"{records:,} records"
    assert m["values"]["exact-bytes"]["text"] == f"{size:,} bytes"
    before = _parquet(spark, result, "topic_throughput", PREV)
    prev_records = sum(r["records"] for r in before)
    prev_bytes = sum(r["bytes"] for r in before)
    assert prev_records == 60 * 10 + 60 * 5
    for key, now, then in (("records", records, prev_records), ("bytes", size, prev_bytes)):
        shown = m["values"][f"previous-{key}"]
        assert (int(shown["value"]), shown["date"]) == (then, "2024-04-30")
        assert shown["text"].startswith(fmt_change(now, then))

    summary = _parquet(spark, result, "group_summary", D)
    status = {r["group"]: r["status"] for r in summary}
    assert status == {
        "orders-audit": "OK",
        "orders-slow": "WARN",
        LONG_GROUP: "WARN",
        "orders-stuck": "ERR",
        "clicks-live": "OK",
        "clicks-etl": "ERR",
    }
    for s in ("ERR", "WARN", "OK"):
        assert int(m["values"][f"groups-{s}"]["value"]) == list(status.values()).count(s)
    # The groups needing attention, worst first, named in the first screen.
    worst = sorted(
        (r for r in summary if r["status"] != "OK"),
        key=lambda r: ({"ERR": 0, "WARN": 1}[r["status"]], -r["max_lag_seconds"]),
    )
    assert m["attention"] == [r["group"] for r in worst]
    assert m["attention"][:2] == ["orders-stuck", "clicks-etl"]
    assert m["attentionBottom"] <= FIRST_SCREEN
    for s, column in (("STOP", "stopped_partitions"), ("STALL", "stalled_partitions"),
                      ("WARN", "warn_partitions")):  # fmt: skip
        assert int(m["values"][f"partitions-{s}"]["value"]) == sum(r[column] for r in summary)
    by_topic: dict[str, list[int]] = {}
    for r in throughput:
        by_topic.setdefault(r["topic"], [0, 0])
        by_topic[r["topic"]][0] += r["records"]
        by_topic[r["topic"]][1] += r["bytes"]
    busiest = sorted(by_topic.items(), key=lambda kv: -kv[1][1])
    assert [(b["topic"], int(b["records"]), int(b["bytes"])) for b in m["busiest"]] == [
        (t, rec, byt) for t, (rec, byt) in busiest
    ]


def _covered(points: list[dict], bucket: int, start_ms: int, width_ms: int) -> bool:
    """A point with data whose bucket overlaps [start_ms, start_ms + width_ms)."""
    return any(
        p["count"]
        and p["x"] - bucket // 2 < start_ms + width_ms
        and start_ms < p["x"] + bucket // 2
        for p in points
    )


@pytest.mark.parametrize("name,day", [("day", D), ("before", PREV)])
def test_throughput_charts_have_points_where_the_table_has_rows(spark, reports, pages, name, day):
    m, _ = pages[name]
    rows = _parquet(spark, reports[name], "topic_throughput", day)
    assert rows
    table_bucket = 60_000
    for kind in ("records", "bytes"):
        (chart,) = [c for c in m["charts"] if c["kind"] == kind]
        for topic in {r["topic"] for r in rows}:
            points = [p for p in chart["points"] if p["series"] == topic]
            mine = [r for r in rows if r["topic"] == topic]
            # The chart's buckets add up to the table's, to the record and the byte.
            assert sum(p["count"] for p in points) == sum(r[kind] for r in mine), (kind, topic)
            for r in mine:
                start = int(r["bucket_start"].timestamp() * 1000)
                assert _covered(points, chart["bucket"], start, table_bucket), (kind, topic, start)
    if name == "before":
        # A day whose traffic all came in one minute: a line over that minute per topic,
        # not one dot at 12:00 on a day-wide axis.
        (chart,) = [c for c in m["charts"] if c["kind"] == "records"]
        assert chart["bucket"] <= 2000
        for topic in ("clicks", "orders"):
            assert len([p for p in chart["points"] if p["series"] == topic and p["count"]]) >= 20


def test_lag_charts_one_per_group_in_err_or_warn(spark, reports, pages):
    m, _ = pages["day"]
    result = reports["day"]
    summary = {r["group"]: r for r in _parquet(spark, result, "group_summary", D)}
    lag = [r for r in _parquet(spark, result, "group_partition_lag", D) if r["kind"] == "commit"]
    charts = {c["group"]: c for c in m["charts"] if c["kind"] == "lag"}
    assert set(charts) == {g for g, r in summary.items() if r["status"] != "OK"}
    for group, chart in charts.items():
        bucket = chart["bucket"]
        # Each group reads one partition: a bucket's point is its last commit's lag.
        expected: dict[int, tuple] = {}
        for r in sorted((r for r in lag if r["group"] == group), key=lambda r: r["timestamp"]):
            t = int(r["timestamp"].timestamp() * 1000)
            expected[t // bucket * bucket + bucket // 2] = r["lag_records"]
        points = {p["x"]: p["count"] for p in chart["points"]}
        report_point = points.pop(D + DAY)  # at report time: the summary's total
        assert report_point == summary[group]["total_lag_records"]
        assert points == expected, group


def test_every_section_says_when_it_is_empty(pages):
    empty, _ = pages["empty"]
    for section in ("summary", "groups", "lag", "worst", "throughput"):
        assert empty["sections"][section], section
    assert empty["charts"] == []
    assert int(empty["values"]["total-records"]["value"]) == 0
    # No groups yet, but traffic: the group sections say so; throughput is drawn.
    before, _ = pages["before"]
    for section in ("groups", "lag", "worst"):
        assert before["sections"][section], section
    assert any("No consumer groups" in text for text in before["sections"]["summary"])
    assert not before["sections"]["throughput"]
    assert {c["kind"] for c in before["charts"]} == {"records", "bytes"}


# -- the file itself -----------------------------------------------------------------------


def test_report_is_one_self_contained_file_with_exact_values(spark, reports):
    for result in reports.values():
        page = result.html_path.read_text()
        assert "<script" not in page.lower()
        # Nothing fetched: no URL but the SVG namespace, no src, no @import or url().
        assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"] * len(
            re.findall("<svg", page)
        )
        assert " src=" not in page and "@import" not in page and "url(" not in page
    page = reports["day"].html_path.read_text()
    # Rounded numbers keep the exact value beside them.
    summary = {r["group"]: r for r in _parquet(spark, reports["day"], "group_summary", D)}
    stuck = summary["orders-stuck"]["total_lag_records"]
    assert f'data-value="{stuck}" title="{fmt_exact(stuck)}"' in page
    md = reports["day"].markdown_path.read_text()
    assert "records: 5880" in md and "against 2024-04-30" in md
