"""A cluster on a network of the test's own (netlab.py): ZooKeeper and three broker
processes, each on its own host, so that the test can drop their packets.

    with NetCluster(lab, tmp_path) as cluster:
        cluster.brokers[3]          a BrokerProcess (kill, pause, stop, start_again)
        cluster.host(3)             its netlab host name ("b3"); "zk" for ZooKeeper
        cluster.bootstrap           every broker's address, for clients on the test's host

Short timeouts, so that faults play out in seconds: a 6 s ZooKeeper session, followers
out of the ISR after 3 s without catching up, their fetches timed out after 3 s, brokers
fenced after 3 s without a heartbeat answered (sent every 0.5 s). Each
broker's log directory is a disk of its own (a tmpfs, where mounting is allowed), so that
one of them can fill up.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
from netlab import NetLab

from trio_broker.testing import BrokerProcess, ZooKeeperServer, wait_all_see

__all__ = ["SESSION_TIMEOUT_S", "NetCluster"]

SESSION_TIMEOUT_S = 6.0
DISK_SIZE = "512m"  # each broker's log directory: a tmpfs (memory only as far as used)

BROKER_DEFAULTS = {
    "zookeeper.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
    "replica.lag.time.max.ms": "3000",
    # The followers' fetches time out after 3 s (+ the fetch wait), not Kafka's 30: a
    # fetch sent into a cut is retransmitted by TCP with a backoff that, after an 8 s cut,
    # next tries 4-5 s after the heal, and with 30 s the follower waited for it (Kafka's
    # followers do too) before the ISR could grow back; timed out, it reconnects.
    "replica.socket.timeout.ms": "3000",
    "controlled.shutdown.retry.backoff.ms": "200",
    # Broker fencing scaled like the sessions (Kafka's 2 s / 9 s against 18 s sessions): a
    # leader cut from the other brokers but not from ZooKeeper is fenced after 3 s.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    # Topics are created by the scenario only: a client of an earlier cluster on the same
    # addresses, not yet collected, asking for a topic's metadata must not create it.
    "auto.create.topics.enable": "false",
}


class NetCluster:
    def __init__(
        self,
        lab: NetLab,
        base_dir: Path,
        *,
        size: int = 3,
        overrides: dict[str, str] | None = None,
        wait_all_see: bool = True,
        together: bool = False,
    ) -> None:
        # `together`: the brokers started at the same moment (a compose file, a CI job),
        # not one after the other.
        self.together = together
        self.wait = wait_all_see
        self.lab = lab
        self.base_dir = base_dir
        self.size = size
        self.overrides = {**BROKER_DEFAULTS, **(overrides or {})}
        self.zookeeper: ZooKeeperServer | None = None
        self.brokers: dict[int, BrokerProcess] = {}
        self.mounts: list[Path] = []  # the brokers' disks, unmounted by close()

    def host(self, node_id: int) -> str:
        return f"b{node_id}"

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def __enter__(self) -> NetCluster:
        try:
            zk_host = self.lab.hosts.get("zk") or self.lab.add_host("zk")
            self.zookeeper = ZooKeeperServer(
                host=zk_host.address, prefix=zk_host.command([])
            ).start()
            if self.together:
                import threading

                for node_id in range(1, self.size + 1):
                    self.lab.hosts.get(self.host(node_id)) or self.lab.add_host(self.host(node_id))
                starting = [
                    threading.Thread(target=self.add_broker, args=(node_id,))
                    for node_id in range(1, self.size + 1)
                ]
                for thread in starting:
                    thread.start()
                for thread in starting:
                    thread.join()
                if len(self.brokers) != self.size:
                    raise RuntimeError(f"only brokers {sorted(self.brokers)} started")
            else:
                for node_id in range(1, self.size + 1):
                    self.add_broker(node_id)
            if self.wait:
                wait_all_see(self.brokers)
        except BaseException:
            self.close()
            raise
        return self

    def add_broker(self, node_id: int, **overrides: str) -> BrokerProcess:
        assert self.zookeeper is not None
        name = self.host(node_id)
        host = self.lab.hosts.get(name) or self.lab.add_host(name)
        log_dir = self.base_dir / f"broker-{node_id}"
        self._mount_disk(log_dir)
        config = {
            "node.id": str(node_id),
            "listeners": f"PLAINTEXT://{host.address}:9092",
            "log.dirs": str(log_dir),
            "zookeeper.connect": f"{self.zookeeper.connect}/kafka",
            **self.overrides,
            **overrides,
        }
        broker = BrokerProcess(config, prefix=host.command([]))
        self.brokers[node_id] = broker
        return broker

    def _mount_disk(self, path: Path) -> None:
        import subprocess

        path.mkdir(parents=True, exist_ok=True)
        if path in self.mounts:
            return
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(path)],
            capture_output=True,
        )
        if done.returncode == 0:
            self.mounts.append(path)

    def log_dirs(self) -> dict[int, Path]:
        return {node_id: b.log_dir for node_id, b in self.brokers.items()}

    def lines(self, node_id: int) -> list[str]:
        return list(self.brokers[node_id].lines)

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        import gc

        gc.collect()  # librdkafka clients of this cluster's workload, gone before the next
        self.lab.heal()
        for node_id in sorted(self.brokers, reverse=True):
            self.brokers.pop(node_id).close()
        if self.zookeeper is not None:
            self.zookeeper.stop()
            self.zookeeper = None
        import subprocess

        for path in self.mounts:
            if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], capture_output=True)
        self.mounts.clear()


# -- the nemesis: faults a scenario injects ------------------------------------------------


def zk_state(cluster: NetCluster, topic: str, partition: int) -> dict[str, Any]:
    """The partition's state znode (leader, leader_epoch, isr): what the controller decided."""
    import json

    from clustertest_helpers import ZooKeeperView

    assert cluster.zookeeper is not None
    view = ZooKeeperView(cluster.zookeeper.connect, "/kafka")
    try:
        return json.loads(view.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])
    finally:
        view.close()


def controller_id(cluster: NetCluster) -> int:
    import json

    from clustertest_helpers import ZooKeeperView

    assert cluster.zookeeper is not None
    view = ZooKeeperView(cluster.zookeeper.connect, "/kafka")
    try:
        return int(json.loads(view.get("/controller")[0])["brokerid"])
    finally:
        view.close()


def _hold(seconds: float) -> None:
    import time

    time.sleep(seconds)


def fault_kill(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """kill -9, then the same broker started again on its data."""
    cluster.brokers[target].kill()
    _hold(hold_s)
    cluster.brokers[target].start_again()


def fault_pause(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """SIGSTOP for longer than the session, then SIGCONT: a long GC pause, a frozen VM."""
    cluster.brokers[target].pause()
    _hold(hold_s)
    cluster.brokers[target].resume()


def fault_isolate(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """Cut from ZooKeeper and the other brokers (clients still reach it)."""
    lab.isolate(cluster.host(target))
    _hold(hold_s)
    lab.heal(cluster.host(target))


def fault_isolate_from_zookeeper(
    cluster: NetCluster, lab: NetLab, target: int, hold_s: float
) -> None:
    """Cut from ZooKeeper only: the other brokers still fetch from it."""
    lab.partition(cluster.host(target), "zk")
    _hold(hold_s)
    lab.heal(cluster.host(target))


def fault_isolate_from_brokers(
    cluster: NetCluster, lab: NetLab, target: int, hold_s: float
) -> None:
    """Cut from the other brokers only: its ZooKeeper session lives on."""
    for other in cluster.brokers:
        if other != target:
            lab.partition(cluster.host(target), cluster.host(other))
    _hold(hold_s)
    lab.heal(cluster.host(target))


def fault_one_way(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """Its packets to every other host dropped; theirs still reach it."""
    for name in lab.hosts:
        if name != cluster.host(target):
            lab.one_way(cluster.host(target), name)
    _hold(hold_s)
    lab.heal(cluster.host(target))


def fault_flap(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """Cut and healed every 2 s."""
    import time

    end = time.monotonic() + hold_s
    while time.monotonic() < end:
        lab.isolate(cluster.host(target))
        _hold(2)
        lab.heal(cluster.host(target))
        _hold(2)


def fault_loss(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """30% of the packets it receives dropped."""
    lab.loss(cluster.host(target), 0.3)
    _hold(hold_s)
    lab.heal(cluster.host(target))


def fault_loss_between_hosts(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """30% of the packets it receives from the other brokers and ZooKeeper dropped; the
    clients' packets reach it (the workload's own link is not the fault's: its TCP
    retransmissions, backed off, are not the cluster's unavailability)."""
    lab.loss(cluster.host(target), 0.3, clients=False)
    _hold(hold_s)
    lab.heal(cluster.host(target))


def fault_zookeeper_restart(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """ZooKeeper killed (kill -9), then started again on its data."""
    assert cluster.zookeeper is not None
    cluster.zookeeper.kill()
    _hold(hold_s)
    cluster.zookeeper.start_again()


def fault_leader_and_zookeeper(
    cluster: NetCluster, lab: NetLab, target: int, hold_s: float
) -> None:
    """Two at once: the leader killed while ZooKeeper is down, both back after."""
    assert cluster.zookeeper is not None
    cluster.zookeeper.kill()
    cluster.brokers[target].kill()
    _hold(hold_s / 2)
    cluster.zookeeper.start_again()
    _hold(hold_s / 2)
    cluster.brokers[target].start_again()


def fault_disk_full(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """Its log directory's disk filled to the last byte by another file, then freed."""
    filler = fill_disk(cluster, target)
    _hold(hold_s)
    filler.unlink()


def fill_disk(cluster: NetCluster, target: int) -> Path:
    """Fill the broker's disk to the last byte; the filler file is returned, to delete."""
    import os

    log_dir = cluster.brokers[target].log_dir
    if log_dir not in cluster.mounts:
        raise RuntimeError(f"{log_dir} is not a disk of its own (tmpfs not mounted)")
    filler = log_dir / "filler"
    with open(filler, "ab", buffering=0) as f:  # unbuffered: nothing left to fail at close
        while True:  # the brokers write too: fill until the disk says no
            st = os.statvfs(log_dir)
            free = st.f_bavail * st.f_frsize
            if free <= 0:
                break
            try:
                f.write(b"\0" * min(free, 64 << 20))
            except OSError:
                break
    return filler


def fault_rolling_restart(cluster: NetCluster, lab: NetLab, target: int, hold_s: float) -> None:
    """Every broker stopped (SIGTERM) and started again, one after another."""
    for node_id in sorted(cluster.brokers):
        cluster.brokers[node_id].stop()
        cluster.brokers[node_id].start_again()


# name -> (fault, whom it hits: "leader" of history-0 or the "controller")
FAULTS = {
    "kill-leader": (fault_kill, "leader"),
    "pause-leader": (fault_pause, "leader"),
    "isolate-leader": (fault_isolate, "leader"),
    "isolate-leader-from-zookeeper": (fault_isolate_from_zookeeper, "leader"),
    "isolate-leader-from-brokers": (fault_isolate_from_brokers, "leader"),
    "isolate-controller": (fault_isolate, "controller"),
    "one-way-leader": (fault_one_way, "leader"),
    "flapping-leader": (fault_flap, "leader"),
    "flapping-controller": (fault_flap, "controller"),
    "lossy-leader": (fault_loss, "leader"),
    "lossy-leader-cluster-links": (fault_loss_between_hosts, "leader"),
    "zookeeper-restart": (fault_zookeeper_restart, "leader"),
    "kill-leader-zookeeper-down": (fault_leader_and_zookeeper, "leader"),
    "rolling-restart": (fault_rolling_restart, "leader"),
    "disk-full-leader": (fault_disk_full, "leader"),
}


# -- a scenario: a workload, one fault, the checker ---------------------------------------


@attrs.frozen
class Outcome:
    fault: str
    target: int
    report: Any  # history.Report
    whole_s: float  # the longest from a fault's end until every replica was in every ISR
    expired_at: float | None  # when the target learned its session had expired, if it did
    injections: int = 1
    # Faults that cut a live broker off: the least time by which a broker deposed by an
    # offline election had stopped leading the partition before the election (see
    # `late_depositions`); None where nothing was so elected or the fault is another kind.
    deposed_ahead_s: float | None = None
    # Each injection: (its victim, when the fault began, when it ended: healed, restarted),
    # wall clock as the brokers' log lines show it, for a timeline against their logs.
    fault_times: tuple[tuple[int, str, str], ...] = ()


# Faults that stop every broker, the direct producer's target included, whoever the
# victim: each injection ends the target's acks=1 window that the checker holds to
# nothing lost (it is stopped last, after the brokers with lower ids, so the window that
# ends 2 s before the injection starts ends before its SIGTERM). Counted only when the
# victim was the target, the acks=1 records it took just before its controlled shutdown
# in a later injection (Kafka's documented window) were reported as lost after it knew.
HITS_EVERY_BROKER = ("rolling-restart",)

# Faults after which a broker that is alive but cut off may be deposed: it must have
# stopped leading before the controller elects another leader in its place (it cannot be
# told, so it must presume). Not `isolate-leader-from-zookeeper`: its followers go on
# fetching from it until the controller's election sends them elsewhere, and only then
# can it tell (as Kafka's broker cannot tell at all).
CUT_OFF_FAULTS = ("isolate-leader", "isolate-controller", "one-way-leader")

_ELECTED = re.compile(r"(\w+) election of (\S+): leader (-?\d+) -> (-?\d+)")
_LEADS = re.compile(r"broker (\d+) leads (\S+) in epoch")
_FOLLOWS = re.compile(r"broker (\d+) follows \d+ in (\S+), epoch")
_RESIGNED = re.compile(r"leads none of (.+?) until|resigned the leadership of (.+)$")
_STALLED = re.compile(r"did not run for ([\d.]+) s")


def late_depositions(cluster: NetCluster) -> tuple[list[str], float | None]:
    """Every offline election that took a partition from a broker, held against that
    broker's own lines: it must have stopped leading the partition (presumed deposed,
    learned its session expired, followed another leader, or its event loop stalled)
    after it last became its leader and before the controller's election, as both logged
    them (one machine, one clock). A broker still leading then served as leader and
    coordinator beside the new one: acks=1 records the new leader never sees, group
    offsets older than the new coordinator's. Returns the violations and the least
    margin (election time minus stop time) among the elections that were in order."""
    from history import log_time

    elections = []  # (time, partition, old leader): offline elections of another leader
    # The controller's elections of any kind, (partition, new leader) -> times: when a
    # broker began leading, as the controller logged it (the broker's own "leads" line is
    # one of those a controller's LeaderAndIsr may have too many of to be logged: the
    # lines a request causes are limited per client address).
    elected: dict[tuple[str, int], list[float]] = {}
    for node_id in cluster.brokers:
        for line in cluster.lines(node_id):
            m = _ELECTED.search(line)
            if m is None:
                continue
            at = log_time(line)
            if at is None:
                continue
            name, old, new = m.group(2), int(m.group(3)), int(m.group(4))
            elected.setdefault((name, new), []).append(at)
            if m.group(1) == "offline" and old != new:
                elections.append((at, name, old))
    violations: list[str] = []
    margin: float | None = None
    for old in {o for _, _, o in elections}:
        if old not in cluster.brokers:
            continue
        leads: dict[str, list[float]] = {}
        stops: dict[str, list[float]] = {}
        stalls: list[float] = []  # when a stall began
        for line in cluster.lines(old):
            at = log_time(line)
            if at is None:
                continue
            if (m := _LEADS.search(line)) and int(m.group(1)) == old:
                leads.setdefault(m.group(2), []).append(at)
            elif (m := _FOLLOWS.search(line)) and int(m.group(1)) == old:
                stops.setdefault(m.group(2), []).append(at)
            elif m := _RESIGNED.search(line):
                for name in (m.group(1) or m.group(2)).split(", "):
                    stops.setdefault(name.strip(), []).append(at)
            elif m := _STALLED.search(line):
                stalls.append(at - float(m.group(1)))
        for at, name, o in elections:
            if o != old:
                continue
            began = [t for t in [*leads.get(name, []), *elected.get((name, old), [])] if t < at]
            since = max(began, default=0.0)  # 0: led since the topic's creation
            stopped = [t for t in [*stops.get(name, []), *stalls] if since <= t <= at]
            if not stopped:
                began_at = _clock_of(since) if since else "its creation"
                violations.append(
                    f"{name}: broker {old} led it from {began_at} and had not stopped "
                    f"when the controller elected another leader at {_clock_of(at)}"
                )
            else:
                ahead = at - min(stopped)
                margin = ahead if margin is None else min(margin, ahead)
    return violations, margin


def _clock_of(at: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(at)) + f",{int(at % 1 * 1000):03d}"


def _given_up_at(cluster: NetCluster, node_id: int, name: str) -> list[float]:
    """When the broker logged giving up the leadership of partition `name` on its own
    (presumed deposed, or its session expired)."""
    from history import log_time

    times = []
    for line in cluster.lines(node_id):
        m = _RESIGNED.search(line)
        if m is None or name not in [n.strip() for n in (m.group(1) or m.group(2)).split(",")]:
            continue
        at = log_time(line)
        if at is not None:
            times.append(at)
    return times


def registered_before_decided_anew(cluster: NetCluster, name: str) -> list[str]:
    """A broker that gave the leadership of partition `name` up on its own must register
    again only once the controller has decided it anew: an election of the partition
    (another leader, or a newer epoch) after the broker last became its leader and before
    the registration, as the brokers logged them (one machine, one clock). Registered
    first, a controller that never saw it gone (a new controller, when it was the
    controller) made it that partition's leader again in the epoch it gave up: it had
    refused a producer's retries (NOT_LEADER_OR_FOLLOWER) and then took the next request
    of the same pipelined round as leader, a gap in the sequence for which librdkafka
    numbers every record not yet acknowledged anew (KIP-360), and a batch it had appended
    and answered NOT_LEADER_OR_FOLLOWER when it gave up was appended twice (the soak's
    flapping-leader read 2 records twice). The other replicas are alive and in the ISR in
    these scenarios, so another leader can always be elected."""
    from history import log_time

    elections: list[tuple[float, int]] = []  # (time, new leader) of `name`
    for node_id in cluster.brokers:
        for line in cluster.lines(node_id):
            m = _ELECTED.search(line)
            if m is not None and m.group(2) == name and (at := log_time(line)) is not None:
                elections.append((at, int(m.group(4))))
    elections.sort()
    violations = []
    for node_id in cluster.brokers:
        registrations = [
            t
            for t in (
                log_time(x)
                for x in cluster.lines(node_id)
                if f"registered broker {node_id} at" in x
            )
            if t is not None
        ]
        for gave in _given_up_at(cluster, node_id, name):
            again = next((t for t in registrations if t > gave), None)
            if again is None:
                continue
            became = max((t for t, new in elections if new == node_id and t < gave), default=0.0)
            if not any(became < t <= again for t, _ in elections):
                violations.append(
                    f"broker {node_id} gave {name} up on its own at {_clock_of(gave)} and "
                    f"registered again at {_clock_of(again)}, before the controller elected "
                    f"its leader anew"
                )
    return violations


def registered_at(lines: list[str], node_id: int, nth: int) -> float | None:
    """When the broker logged its `nth` registration in ZooKeeper (after a restart or an
    expired session, the second)."""
    import re

    from history import log_time

    times = [log_time(x) for x in lines if re.search(rf"registered broker {node_id} at", x)]
    return times[nth - 1] if len(times) >= nth else None


def converged(cluster: NetCluster, topics: dict[str, int], budget_s: float = 60) -> None:
    """Until every replica of every partition holds the same bytes (followers caught up)."""
    from clustertest_helpers import eventually
    from failover_helpers import log_bytes

    def same() -> bool:
        for topic, count in topics.items():
            for p in range(count):
                copies = {
                    log_bytes(d, topic, p)
                    for d in cluster.log_dirs().values()
                    if (d / f"{topic}-{p}").exists()
                }
                if len(copies) != 1:
                    return False
        return True

    eventually(same, budget_s=budget_s, what="replicas with the same bytes")


def whole(cluster: NetCluster, topics: dict[str, int]) -> bool:
    """Every partition led, with every replica in its ISR (ZooKeeper's word)."""
    try:
        return all(
            len(zk_state(cluster, t, p)["isr"]) == cluster.size
            and zk_state(cluster, t, p)["leader"] >= 0
            for t, count in topics.items()
            for p in range(count)
        )
    except Exception:  # ZooKeeper itself may be on its way back
        return False


def run_scenario(
    cluster: NetCluster,
    lab: NetLab,
    fault: str,
    *,
    hold_s: float = 15,
    injections: int = 1,
    producer_debug: str = "eos",
) -> Outcome:
    """See `_run_scenario`. Whatever fails (the checker, or a wait for the cluster to be
    whole or acknowledging again), each broker's whole log is written to the run's
    directory first (broker-N.log): the log dirs are tmpfs mounts, gone with the cluster.
    `producer_debug`: librdkafka's debug contexts for the acks=all producer's log."""
    try:
        return _run_scenario(
            cluster,
            lab,
            fault,
            hold_s=hold_s,
            injections=injections,
            producer_debug=producer_debug,
        )
    except Exception:
        save_logs(cluster, cluster.base_dir)
        raise


def save_logs(cluster: NetCluster, to: Path) -> list[Path]:
    paths = []
    for node_id in sorted(cluster.brokers):
        path = to / f"broker-{node_id}.log"
        path.write_text("".join(cluster.lines(node_id)))
        paths.append(path)
    return paths


@contextlib.contextmanager
def _eos_log(path: Path, debug: str = "eos") -> Iterator[dict[str, Any]]:
    """librdkafka's idempotence debug lines (producer id and epoch changes, epoch bumps,
    sequence errors: `debug=eos`) of the acks=all producer, to `path` in the run's
    directory: whether a record read twice was sent again under a new producer epoch
    (KIP-360) is in them. `debug`: other contexts too (`eos,broker,protocol,msg`: every
    request and response, connection and retry, for an acknowledgement gap's timeline)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log = logging.getLogger(f"nemesis.producer.{path.parent.name}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        yield {"debug": debug, "logger": log}
    finally:
        log.removeHandler(handler)
        handler.close()


def save_batches(cluster: NetCluster, to: Path, topics: dict[str, int]) -> list[Path]:
    """Each replica's batch table (history.batch_table) of every partition of `topics`,
    written to `to` as batches-<topic>-<partition>-broker-N.txt: the log dirs are tmpfs
    mounts, gone with the cluster, and a doubled or lost record is found in them."""
    from history import batch_table

    paths = []
    for node_id, log_dir in sorted(cluster.log_dirs().items()):
        for topic, count in topics.items():
            for p in range(count):
                if not (log_dir / f"{topic}-{p}").exists():
                    continue
                path = to / f"batches-{topic}-{p}-broker-{node_id}.txt"
                try:
                    path.write_text(batch_table(log_dir, topic, p))
                except (OSError, ValueError) as exc:
                    path.write_text(f"unreadable: {exc!r}\n")
                paths.append(path)
    return paths


def _wait_for_acks_on_each(producer: Any, partitions: range, after: float) -> None:
    """Until the acks=all producer has had an acknowledgement on each partition after
    `after` (time.monotonic())."""
    from clustertest_helpers import eventually

    def each() -> bool:
        # The newest first; the two lists are appended together (under the producer's lock,
        # not taken here: an index past the shorter one is not read).
        acked, times = producer.acked, producer.ack_times
        seen = set()
        for i in range(min(len(acked), len(times)) - 1, -1, -1):
            if times[i] <= after:
                break
            seen.add(acked[i][0])
        return seen.issuperset(partitions)

    eventually(each, budget_s=60, what="acks on every partition after the fault")


def _run_scenario(
    cluster: NetCluster,
    lab: NetLab,
    fault: str,
    *,
    hold_s: float = 15,
    injections: int = 1,
    producer_debug: str = "eos",
) -> Outcome:
    """On a started cluster: topics `history` (3 partitions, RF 3, min.insync.replicas 2)
    and `direct` (1 partition, RF 3), both with a partition led by the fault's target; an
    idempotent acks=all producer and a tailing consumer on `history`, acks=1 Produce
    requests straight to the target on `direct`; the fault, `injections` times (each on
    the leader of history-0 or the controller of that moment, once the cluster is whole
    again after the one before); then the checker."""
    import time

    from clustertest_helpers import eventually
    from failover_helpers import CountingProducer, create_topic, wait_for_leaders
    from history import (
        CommittedOffsets,
        DirectProducer,
        TailingConsumer,
        TransactionalProducer,
        check,
    )

    inject, whom = FAULTS[fault]
    controller = controller_id(cluster)
    target = controller if whom == "controller" else (3 if controller != 3 else 2)
    others = [b for b in sorted(cluster.brokers) if b != target]
    bootstrap = cluster.bootstrap
    topics = {"history": 3, "direct": 1, "txn": 3}
    create_topic(
        bootstrap,
        "history",
        replica_assignment=[[target, *others], [*others, target], [others[1], target, others[0]]],
        config={"min.insync.replicas": "2"},
    )
    create_topic(bootstrap, "direct", replica_assignment=[[target, *others]])
    create_topic(
        bootstrap,
        "txn",
        replica_assignment=[[target, *others], [*others, target], [others[1], target, others[0]]],
        config={"min.insync.replicas": "2"},
    )
    wait_for_leaders(bootstrap, "history", 3, isr_size=cluster.size)
    wait_for_leaders(bootstrap, "direct", 1, isr_size=cluster.size)
    wait_for_leaders(bootstrap, "txn", 3, isr_size=cluster.size)
    eventually(lambda: whole(cluster, topics), budget_s=30, what="the ISRs full")
    registrations_before = len(
        [x for x in cluster.lines(target) if f"registered broker {target} at" in x]
    )
    b = cluster.brokers[target]
    with (
        _eos_log(cluster.base_dir / "producer-eos.log", producer_debug) as eos,
        CountingProducer(bootstrap, "history", extra=eos) as producer,
        DirectProducer(b.host, b.port, "direct") as direct,
        TailingConsumer(bootstrap, "history", range(3)) as tail,
        TransactionalProducer(bootstrap, "txn", 3) as txn,
        CommittedOffsets(bootstrap, "history", 3) as offsets,
    ):
        producer.wait_for_acks_after(time.monotonic(), budget_s=30, what="first acks")
        eventually(lambda: txn.ended_after(0), budget_s=60, what="a first transaction")
        start = time.monotonic()
        whole_s = 0.0
        victim = target
        hits: list[float] = []  # when a fault hit the direct producer's broker (wall clock)
        fault_times: list[tuple[int, str, str]] = []
        for i in range(injections):
            if i:
                victim = (
                    controller_id(cluster)
                    if whom == "controller"
                    else zk_state(cluster, "history", 0)["leader"]
                )
            if victim == target or fault in HITS_EVERY_BROKER:
                hits.append(time.time())
            began = time.time()
            inject(cluster, lab, victim, hold_s)
            fault_times.append((victim, _clock_of(began), _clock_of(time.time())))
            restored = time.monotonic()
            eventually(lambda: whole(cluster, topics), budget_s=90, what="every replica in the ISR")
            whole_s = max(whole_s, time.monotonic() - restored)
            # An acknowledgement on every partition, not on any: the next injection must not
            # begin while a partition's requests still wait on this one (a retransmission of
            # the producer's own, its timer backed off during a lossy-leader fault, kept its
            # schedule across the heal and was lost again in the next injection: one gap
            # spanning two faults, 13.8 s in session 22).
            _wait_for_acks_on_each(producer, range(topics["history"]), time.monotonic())
            now = time.monotonic()
            eventually(
                lambda now=now: txn.ended_after(now),
                budget_s=90,
                what="a transaction after the fault",
            )
        end = time.monotonic()
    assert not producer.errors, f"the acks=all producer failed: {producer.errors[:5]}"
    converged(cluster, topics)
    # Each fault that hit the target: from when it registered again after it (it then knew
    # its old session was over) until shortly before the next fault on it, nothing it
    # acknowledged with acks=1 may be lost. What it acknowledged just before a fault may
    # not be on a follower yet: Kafka's acks=1 window (followers fetch continuously, so
    # 2 s is generous).
    registered = [
        t
        for t in (
            registered_at(cluster.lines(target), target, n)
            for n in range(registrations_before + 1, registrations_before + len(hits) + 2)
        )
        if t is not None
    ]
    knew = []
    for i, hit in enumerate(hits):
        after = next((r for r in registered if r > hit), None)
        if after is not None:
            knew.append((after, hits[i + 1] - 2.0 if i + 1 < len(hits) else float("inf")))
    expired_at = knew[0][0] if knew else None
    try:
        report = check(
            bootstrap=bootstrap,
            topic="history",
            partitions=3,
            acked=producer.acked,
            ack_times=producer.ack_times,
            replicas=cluster.log_dirs(),
            direct={"direct": (direct, knew)},
            tail=tail,
            window=(start, end),
            txn=txn,
            offsets=offsets,
        )
        regained = registered_before_decided_anew(cluster, "history-0")
        assert not regained, "; ".join(regained)
        deposed_ahead_s = None
        if fault in CUT_OFF_FAULTS:
            late, deposed_ahead_s = late_depositions(cluster)
            assert not late, (
                f"{len(late)} leaderships still held when the controller elected another "
                f"leader: {'; '.join(late[:5])}"
            )
    except AssertionError as exc:
        # What the brokers said of leaderships, sessions and coordinators: a failure here
        # is rare and timing-bound, and the run's directory is gone by the time anyone looks.
        saved = save_batches(cluster, cluster.base_dir, {"history": 3, "direct": 1})
        raise AssertionError(
            f"{exc}\n{post_mortem(cluster, save_to=cluster.base_dir)}\n"
            f"--- each replica's record batches: {', '.join(str(p) for p in saved)}"
        ) from None
    return Outcome(
        fault,
        target,
        report,
        whole_s,
        expired_at,
        injections,
        deposed_ahead_s,
        tuple(fault_times),
    )


_POST_MORTEM = re.compile(
    r"__consumer_offsets|coordinator|deposed|presum|session|registered|leader of|"
    r"became|resign|stall|LeaderAndIsr|not leading|unload|load",
    re.IGNORECASE,
)


def post_mortem(cluster: NetCluster, per_broker: int = 80, save_to: Path | None = None) -> str:
    """Each broker's last lines about leaderships, sessions and coordinators; with
    `save_to`, each broker's whole log is written there too (broker-N.log, beside the
    tmpfs mounts that go with the cluster), for the lines the filter leaves out."""
    parts = []
    for node_id in sorted(cluster.brokers):
        every = cluster.lines(node_id)
        lines = [x.rstrip() for x in every if _POST_MORTEM.search(x)]
        parts.append(f"--- broker {node_id} ({len(lines)} such lines, the last {per_broker}):")
        parts.extend(lines[-per_broker:])
        if save_to is not None:
            path = save_to / f"broker-{node_id}.log"
            path.write_text("".join(every))
            parts.append(f"--- broker {node_id}'s whole log ({len(every)} lines): {path}")
    return "\n".join(parts)
