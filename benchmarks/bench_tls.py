"""TLS and SASL benchmark: produce and consume MB/s over TLS beside plaintext, in one run,
and SCRAM handshakes per second.

    .venv/bin/python benchmarks/bench_tls.py [--smoke] [--mb 200] [--record-size 16384]
        [--repeats 3] [--handshake-seconds 3]

One broker process (`python -m trio_broker serve`) listens on PLAINTEXT, SSL (a CA and a
key made for the run with trustme) and SASL_PLAINTEXT (PLAIN and SCRAM users). Figures:

    produce   confluent-kafka producer, --record-size records, 1 MiB batches, acks=1, one
              partition: MB of record values per second until flush() returns
    consume   confluent-kafka consumer reading that topic back from offset 0 (plaintext
              goes by os.sendfile; TLS reads the segment and encrypts it)
    handshake connections per second that open, authenticate and close, one at a time,
              with a Python SCRAM client (its PBKDF2 done once, as a real client caches it)
    CPU s/GB  the broker process's CPU seconds per GB moved, for produce and consume: the
              client (a Python loop over librdkafka) may be what limits MB/s, and this
              says what TLS costs the broker itself

Each throughput figure is the median of --repeats runs on fresh topics. Progress goes to
stderr, one table to stdout.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import secrets
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from wire import read_response, request_of, roundtrip  # noqa: E402

from trio_broker.testing import BrokerProcess, free_port  # noqa: E402

PASSWORD = "bench-secret"


def cpu_seconds(pid: int) -> float:
    """CPU seconds process `pid` has used so far (user + system), from /proc."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def progress(text: str) -> None:
    print(f"[bench-tls] {text}", file=sys.stderr, flush=True)


def make_pki(directory: Path) -> tuple[Path, Path]:
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    key = directory / "server.pem"
    server.private_key_and_cert_chain_pem.write_to_path(str(key))
    cafile = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    return key, cafile


def produce(conf: dict, topic: str, n: int, size: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            **conf,
            "linger.ms": 5,
            "batch.size": 1_048_576,
            "acks": 1,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    value = secrets.token_bytes(size)
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise RuntimeError("produce did not finish")
    return n * size / (time.perf_counter() - start) / 1e6


def consume(conf: dict, topic: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {**conf, "group.id": f"bench-{secrets.token_hex(4)}", "enable.auto.commit": False,
         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 52_428_800}
    )  # fmt: skip
    got = nbytes = 0
    # From the assignment: the connection, the TLS handshake and every fetch count.
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + 600
    while got < n and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                continue
            got += 1
            nbytes += len(msg.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < n:
        raise RuntimeError(f"consumed {got} of {n}")
    return nbytes / elapsed / 1e6


_salted: dict[tuple[str, bytes, int], bytes] = {}


def scram_login(address: tuple[str, int], mechanism: str, user: str) -> None:
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    with socket.create_connection(address, timeout=10) as sock:
        assert roundtrip(sock, request_of(17, mechanism=mechanism), 1).error_code == 0
        nonce = secrets.token_urlsafe(18)
        first_bare = f"n={user},r={nonce}"
        answer = roundtrip(sock, request_of(36, auth_bytes=f"n,,{first_bare}".encode()), 2, 2)
        assert answer.error_code == 0, answer
        server_first = answer.auth_bytes.decode()
        fields = dict(p.split("=", 1) for p in server_first.split(","))
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        key = (mechanism, salt, iterations)
        if key not in _salted:
            _salted[key] = hashlib.pbkdf2_hmac(name, PASSWORD.encode(), salt, iterations)
        salted = _salted[key]
        client_key = hmac.digest(salted, b"Client Key", name)
        stored_key = hashlib.new(name, client_key).digest()
        final_bare = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{final_bare}".encode()
        signature = hmac.digest(stored_key, auth_message, name)
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
        final = f"{final_bare},p={proof.decode()}".encode()
        sock.sendall(_request(request_of(36, auth_bytes=final), 2, 3))
        _, answer = read_response(sock, 36, 2)
        assert answer.error_code == 0, answer


def _request(request: object, version: int, correlation_id: int) -> bytes:
    from wire import encode_request

    return encode_request(request, version, correlation_id)


def handshakes(address: tuple[str, int], mechanism: str, seconds: float) -> float:
    scram_login(address, mechanism, "bench")  # warm: the client's PBKDF2, the broker's import
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        scram_login(address, mechanism, "bench")
        count += 1
    return count / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat")
    parser.add_argument("--mb", type=float, default=200, help="MB produced per run")
    # 16 KiB records (as benchmarks/run.py's consume workload): with 1 KiB ones a Python
    # consumer loop, not the broker, is what a consume figure would measure.
    parser.add_argument("--record-size", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--handshake-seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    if args.smoke:
        args.mb, args.repeats, args.handshake_seconds = 4, 1, 0.5
    n = int(args.mb * 1e6 / args.record_size)
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        key, cafile = make_pki(Path(tmp))
        ports = [free_port() for _ in range(3)]
        jaas = f'PlainLoginModule required user_bench="{PASSWORD}";'
        broker = BrokerProcess(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{ports[0]},SSL://127.0.0.1:{ports[1]},"
                f"SASL_PLAINTEXT://127.0.0.1:{ports[2]}",
                "ssl.keystore.location": str(key),
                "sasl.jaas.config": jaas,
                "log.dirs": str(Path(tmp) / "data"),
            }
        )
        try:
            plain = {"bootstrap.servers": f"127.0.0.1:{ports[0]}"}
            tls = {
                "bootstrap.servers": f"127.0.0.1:{ports[1]}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(cafile),
            }
            results: dict[str, list[float]] = {}
            for run in range(args.repeats):
                for label, conf in (("plaintext", plain), ("TLS", tls)):
                    topic = f"bench-{label.lower()}-{run}"
                    gb = n * args.record_size / 1e9
                    cpu = cpu_seconds(broker.proc.pid)
                    mbps = produce(conf, topic, n, args.record_size)
                    results.setdefault(f"produce {label}", []).append(mbps)
                    cpu_gb = (cpu_seconds(broker.proc.pid) - cpu) / gb
                    results.setdefault(f"produce {label} cpu", []).append(cpu_gb)
                    progress(
                        f"run {run + 1}: produce over {label}: {mbps:.1f} MB/s, {cpu_gb:.1f} CPU s/GB"
                    )
                    cpu = cpu_seconds(broker.proc.pid)
                    mbps = consume(conf, topic, n)
                    results.setdefault(f"consume {label}", []).append(mbps)
                    cpu_gb = (cpu_seconds(broker.proc.pid) - cpu) / gb
                    results.setdefault(f"consume {label} cpu", []).append(cpu_gb)
                    progress(
                        f"run {run + 1}: consume over {label}: {mbps:.1f} MB/s, {cpu_gb:.1f} CPU s/GB"
                    )
            admin = AdminClient(plain)
            upserts = [
                UserScramCredentialUpsertion(
                    "bench", ScramCredentialInfo(m, 4096), PASSWORD.encode()
                )
                for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
            ]
            for future in admin.alter_user_scram_credentials(upserts).values():
                future.result(30)
            rates = {}
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                rates[mechanism] = handshakes(
                    ("127.0.0.1", ports[2]), mechanism, args.handshake_seconds
                )
                progress(f"{mechanism}: {rates[mechanism]:.0f} handshakes/s")
        finally:
            broker.stop()
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"{'figure':<34}{'value':>12}")
    for kind in ("produce", "consume"):
        p, t = med[f"{kind} plaintext"], med[f"{kind} TLS"]
        print(f"{kind + ' plaintext (MB/s)':<34}{p:>12.1f}")
        print(f"{kind + ' TLS (MB/s)':<34}{t:>12.1f}")
        print(f"{kind + ' TLS / plaintext':<34}{t / p:>12.2f}")
        pc, tc = med[f"{kind} plaintext cpu"], med[f"{kind} TLS cpu"]
        print(f"{kind + ' plaintext (broker CPU s/GB)':<34}{pc:>12.2f}")
        print(f"{kind + ' TLS (broker CPU s/GB)':<34}{tc:>12.2f}")
    for mechanism, rate in rates.items():
        print(f"{mechanism + ' handshakes/s':<34}{rate:>12.0f}")
    print(f"({n} records of {args.record_size} B per run, median of {args.repeats})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
