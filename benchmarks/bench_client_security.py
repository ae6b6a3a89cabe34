"""Our Trio client over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), same broker, one run.

    .venv/bin/python benchmarks/bench_client_security.py [--smoke] [--mb 100] [--repeats 3]

One broker process (`python -m trio_broker serve`) listens on PLAINTEXT, SSL and SASL_SSL
(a CA and a key made for the run with trustme; a SCRAM-SHA-512 user). For each protocol,
in a child process of its own (so its CPU seconds are its own):

    produce   our Producer, 1 KiB keyless records, acks=1, linger 5 ms, 64 KiB batches,
              one 4-partition topic: MB of values per second until flush() returns
    consume   our Consumer reading that topic back from offset 0 (assign, no group)
    CPU s/GB  the client process's CPU seconds per GB produced and consumed
    connects  new connections per second (TCP, TLS handshake, ApiVersions, SCRAM), one
              at a time

Each figure is the median of --repeats runs. Progress goes to stderr, a table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from trio_broker.testing import BrokerProcess, free_port

PASSWORD = "bench-secret"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
RECORD = 1024
PARTITIONS = 4


def progress(text: str) -> None:
    print(f"[bench-client-security] {text}", file=sys.stderr, flush=True)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def child(spec: dict) -> dict:
    """One protocol's figures, in this (child) process."""
    import trio

    from trio_broker.client import Consumer, Producer, TopicPartition
    from trio_broker.client.admin import Admin
    from trio_broker.client.network_client import NetworkClient

    config, bootstrap, count = spec["config"], spec["bootstrap"], spec["count"]
    value = os.urandom(RECORD)

    async def run() -> dict:
        topic = spec["topic"]
        async with Admin(bootstrap, config=config) as admin:
            await admin.create_topics({topic: PARTITIONS})
        cpu, start = _cpu(), time.perf_counter()
        async with Producer(
            bootstrap, config=config, acks=1, linger_ms=5, batch_size=65536
        ) as producer:
            for _ in range(count):
                await producer.send_soon(topic, value)
            await producer.flush()
        produce_s, produce_cpu = time.perf_counter() - start, _cpu() - cpu
        cpu, start = _cpu(), time.perf_counter()
        got = 0
        async with Consumer(bootstrap, config=config, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            while got < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += len(records)
        consume_s, consume_cpu = time.perf_counter() - start, _cpu() - cpu
        connects, start = 0, time.perf_counter()
        while time.perf_counter() - start < spec["connect_seconds"]:
            async with NetworkClient(bootstrap_servers=bootstrap, **_underscored(config)) as c:
                await c.connection(bootstrap)
            connects += 1
        connect_s = time.perf_counter() - start
        gb = count * RECORD / 1e9
        return {
            "produce": count * RECORD / 1e6 / produce_s,
            "consume": count * RECORD / 1e6 / consume_s,
            "produce_cpu_gb": produce_cpu / gb,
            "consume_cpu_gb": consume_cpu / gb,
            "connects": connects / connect_s,
        }

    return trio.run(run)


def _underscored(config: dict) -> dict:
    return {k.replace(".", "_"): v for k, v in config.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat")
    parser.add_argument("--mb", type=int, default=100, help="MB produced per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--connect-seconds", type=float, default=3.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.smoke:
        args.mb, args.repeats, args.connect_seconds = 2, 1, 0.5
    import trustme

    with tempfile.TemporaryDirectory(prefix="bench-client-security-") as tmp:
        work = Path(tmp)
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(work / "ca.pem"))
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
            str(work / "server.pem")
        )
        ports = [free_port() for _ in PROTOCOLS]
        broker = BrokerProcess(
            {
                "listeners": ",".join(
                    f"{p}://127.0.0.1:{port}" for p, port in zip(PROTOCOLS, ports, strict=True)
                ),
                "log.dirs": str(work / "data"),
                "ssl.keystore.location": str(work / "server.pem"),
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            }
        )
        try:
            _add_scram_user(f"127.0.0.1:{ports[0]}")
            results: dict[str, list[dict]] = {p: [] for p in PROTOCOLS}
            count = args.mb * 1_000_000 // RECORD
            for repeat in range(args.repeats):
                for protocol, port in zip(PROTOCOLS, ports, strict=True):
                    config: dict = {"security.protocol": protocol}
                    if protocol != "PLAINTEXT":
                        config["ssl.ca.location"] = str(work / "ca.pem")
                    if protocol == "SASL_SSL":
                        config.update(
                            {
                                "sasl.mechanism": "SCRAM-SHA-512",
                                "sasl.username": "bench",
                                "sasl.password": PASSWORD,
                            }
                        )
                    spec = {
                        "config": config,
                        "bootstrap": f"127.0.0.1:{port}",
                        "count": count,
                        "topic": f"t-{protocol.lower()}-{repeat}",
                        "connect_seconds": args.connect_seconds,
                    }
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", json.dumps(spec)],
                        capture_output=True,
                        text=True,
                        timeout=600,
                        check=True,
                    )
                    results[protocol].append(json.loads(out.stdout.strip().splitlines()[-1]))
                    progress(f"{protocol} run {repeat + 1}: {results[protocol][-1]}")
        finally:
            broker.close()
    rows = (
        ("produce", "produce {} (MB/s)", "{:.1f}"),
        ("consume", "consume {} (MB/s)", "{:.1f}"),
        ("produce_cpu_gb", "produce {} (client CPU s/GB)", "{:.1f}"),
        ("consume_cpu_gb", "consume {} (client CPU s/GB)", "{:.1f}"),
        ("connects", "connects {} (/s)", "{:.0f}"),
    )
    for key, label, fmt in rows:
        for protocol in PROTOCOLS:
            median = statistics.median(r[key] for r in results[protocol])
            print(f"{label.format(protocol):40s}{fmt.format(median)}")
    return 0


def _add_scram_user(bootstrap: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(
        "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
    )
    admin.alter_user_scram_credentials([upsert])["bench"].result(30)


if __name__ == "__main__":
    sys.exit(main())
