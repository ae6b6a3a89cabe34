"""Where an acks=all acknowledgement gap went, from rounds that bench_nemesis.py kept.

    sudo .venv/bin/python benchmarks/bench_nemesis.py --faults lossy-leader --keep --probe \\
        --producer-debug eos,broker,protocol,msg 2> run.err
    .venv/bin/python benchmarks/nemesis_gaps.py run.err [--over 3]

For each injection (its victim and wall-clock span, from the progress lines of `run.err`,
each naming the round's directory) the longest time a partition of `history` went without
a delivery (the producer's debug log: its `MessageSet ... delivered` lines), and for each
gap of `--over` seconds or more the ProduceRequest whose answer ended it, split in two:

- the producer's own link: while that request was sent and the producer's socket to the
  leader still held unacknowledged bytes (`probe.log`'s `ss` samples of the socket with
  the fd librdkafka's `broker` debug named: unacked, TCP's retransmission backoff);
- the broker: from the last such sample (or the send, if there was none) until the answer:
  the request read, appended, and held until the ISR acknowledged it.

The brokers' log lines inside the gap (ISR changes, fetches timed out) follow each gap.
The same clock throughout: the brokers, the producer and the probe are on one machine.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

_LINE = re.compile(r"\S+ (\d\d:\d\d:\d\d,\d\d\d) (\S+) \[[^]]+\] \[thrd:([^\]]+)\]: (.*)")
_DELIVERED = re.compile(r"history \[(\d+)\]: MessageSet .* delivered")


def seconds(clock: str) -> float:
    """HH:MM:SS,mmm (the brokers' log clock) as seconds of the day."""
    h, m, rest = clock.split(":")
    s, ms = rest.split(",")
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def clock(at: float) -> str:
    return f"{int(at // 3600):02d}:{int(at % 3600 // 60):02d}:{at % 60:06.3f}"


def rounds(err: Path) -> list[tuple[Path, list[tuple[int, str, str]]]]:
    found = []
    for line in err.read_text().splitlines():
        m = re.search(r"faults \(victim, began, ended\) (\[.*?\]); kept in (\S+)", line)
        if m:
            found.append((Path(m.group(2)), ast.literal_eval(m.group(1))))
    return found


def producer_events(path: Path) -> list[tuple[float, str, str, str]]:
    """(time, tag, librdkafka thread, message) of each debug line."""
    events = []
    for line in path.read_text().splitlines():
        m = _LINE.match(line)
        if m:
            events.append((seconds(m.group(1)), m.group(2), m.group(3), m.group(4)))
    return events


def probe_blocks(path: Path) -> list[tuple[float, str, str]]:
    blocks = []
    if not path.exists():
        return blocks
    for block in re.split(r"^=== ", path.read_text(), flags=re.M):
        head, _, body = block.partition("\n")
        if head:
            at, kind = head.split(" ", 1)
            blocks.append((seconds(at), kind, body))
    return blocks


def socket_samples(
    blocks: list[tuple[float, str, str]], address: str, fd: int | None, a: float, b: float
) -> list[tuple[float, int, int]]:
    """(time, backoff, unacked) of the test process's socket `fd` to `address`."""
    samples = []
    for at, kind, body in blocks:
        if kind != "ss" or not a <= at <= b:
            continue
        rows = body.split("\n")
        for i, row in enumerate(rows):
            if address in row and f"fd={fd})" in row and i + 1 < len(rows):
                info = dict(x.split(":", 1) for x in rows[i + 1].split() if ":" in x)
                samples.append((at, int(info.get("backoff", 0)), int(info.get("unacked", 0))))
    return samples


def explain(
    events: list[tuple[float, str, str, str]],
    blocks: list[tuple[float, str, str]],
    thread: str,
    t0: float,
    t1: float,
) -> str:
    """The request that ended the gap [t0, t1] on the leader's librdkafka thread, and how
    long it waited on the producer's link and on the broker."""
    address = thread.split("/")[0]
    fd = None
    sent: dict[int, float] = {}
    ender = None
    for at, tag, th, msg in events:
        if th != thread or at > t1 + 0.05:
            continue
        if "with socket" in msg:
            fd = int(re.search(r"with socket (\d+)", msg).group(1))
        m = re.search(r"Sent ProduceRequest \(.*CorrId (\d+)\)", msg)
        if m:
            sent[int(m.group(1))] = at
        if tag == "RECV" and "ProduceResponse" in msg and abs(at - t1) < 0.05 and ender is None:
            corr = int(re.search(r"CorrId (\d+)", msg).group(1))
            ender = (corr, sent.get(corr), at)
    if ender is None or ender[1] is None:
        return "no ProduceRequest answered at its end"
    corr, at_send, answered = ender
    samples = socket_samples(blocks, address, fd, at_send, answered)
    stalled = [s for s in samples if s[1] or s[2]]
    text = (
        f"ended by ProduceRequest {corr} sent {at_send - t0:+.2f} s into it, answered "
        f"{answered - at_send:.2f} s after; producer socket unacked in {len(stalled)} of "
        f"{len(samples)} samples, backoff up to {max((s[1] for s in samples), default=0)}"
    )
    if stalled:
        last = max(s[0] for s in stalled)
        text += f": link {last - at_send:.2f} s or more, broker {answered - last:.2f} s or less"
    else:
        text += f": broker {answered - at_send:.2f} s"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("errs", nargs="+", type=Path, help="bench_nemesis.py's stderr")
    parser.add_argument("--over", type=float, default=3.0, help="explain gaps this long")
    args = parser.parse_args(argv)
    longest = []
    for err in args.errs:
        for run, faults in rounds(err):
            events = producer_events(run / "producer-eos.log")
            blocks = probe_blocks(run / "probe.log")
            logs = {f.name: f.read_text().splitlines() for f in sorted(run.glob("broker-*.log"))}
            deliveries: dict[int, list[tuple[float, str]]] = {}
            for at, _, thread, msg in events:
                m = _DELIVERED.search(msg)
                if m:
                    deliveries.setdefault(int(m.group(1)), []).append((at, thread))
            starts = [seconds(f[1]) for f in faults]
            for i, (victim, began, ended) in enumerate(faults):
                a = starts[i]
                b = starts[i + 1] if i + 1 < len(faults) else seconds(ended) + 10
                best, gaps = (0.0, -1), []
                for p, ds in deliveries.items():
                    for (t0, _), (t1, thread) in zip(ds, ds[1:], strict=False):
                        if (a <= t0 < b or t0 < a < t1) and t1 - t0 > best[0]:
                            best = (t1 - t0, p)
                        if a <= t0 < b and t1 - t0 >= args.over:
                            gaps.append((t1 - t0, p, t0, t1, thread))
                longest.append(best[0])
                print(
                    f"{run.name} #{i + 1}: victim {victim}, {began}-{ended}: longest "
                    f"{best[0]:.2f} s (history-{best[1]})"
                )
                for gap, p, t0, t1, thread in sorted(gaps, reverse=True):
                    print(
                        f"  {gap:.2f} s history-{p} {clock(t0)}-{clock(t1)}, leader "
                        f"{thread.split('/')[0]}: {explain(events, blocks, thread, t0, t1)}"
                    )
                    for name, lines in logs.items():
                        for line in lines:
                            m = re.match(r"\S+ (\d\d:\d\d:\d\d,\d\d\d)", line)
                            if (
                                m
                                and t0 <= seconds(m.group(1)) <= t1
                                and ("ISR" in line or "TIMED_OUT" in line)
                                and "retrying" not in line
                            ):
                                print(f"      {name} {line[11:190]}")
    longest.sort(reverse=True)
    print(
        f"\n{len(longest)} injections; the longest gap of each, descending: "
        f"{[round(x, 1) for x in longest]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
