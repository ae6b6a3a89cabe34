"""Controller election through ZooKeeper: one controller, a higher epoch after each loss,
and a broker whose session expired registers again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from clustertest_helpers import FAST_SESSION, eventually, view

from trio_broker.testing import BrokerProcess, KafkaCluster


def _all_agree(brokers, controller: int) -> bool:
    """Every broker in `brokers` lists exactly them, and `controller`."""
    expected = sorted((b_id, "127.0.0.1", b.port) for b_id, b in brokers.items())
    return all(view(b.bootstrap)[1:] == (controller, expected) for b in brokers.values())


def test_stopping_the_controller_elects_another_with_a_higher_epoch(zookeeper, tmp_path, zk_view):
    with KafkaCluster(zookeeper, base_dir=tmp_path, overrides=FAST_SESSION) as cluster:
        first = zk_view.controller()
        assert zk_view.controller_epoch() == 1
        cluster.brokers.pop(first).stop()  # cancels its serve(): a graceful stop

        second = eventually(
            lambda: zk_view.controller() not in (None, first) and zk_view.controller(),
            budget_s=15,
            what="a new controller",
        )
        assert second in cluster.brokers
        assert zk_view.controller_epoch() == 2
        eventually(
            lambda: _all_agree(cluster.brokers, second),
            budget_s=10,
            what="the remaining brokers' Metadata",
        )

        # And again: the last broker standing becomes the controller, epoch 3.
        cluster.brokers.pop(second).stop()
        (last,) = cluster.brokers
        eventually(lambda: zk_view.controller() == last, budget_s=15, what="the last controller")
        assert zk_view.controller_epoch() == 3
        eventually(lambda: _all_agree(cluster.brokers, last), budget_s=10, what="Metadata")


def _controller_in_a_process(zookeeper, tmp_path, zk_view, overrides):  # noqa: ANN001, ANN202
    """Broker 1 in a process of its own (to kill or stop), started first: the controller;
    and a cluster, not started yet, for brokers 2 and 3."""
    cluster = KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=overrides)
    config = cluster.broker_config(1)
    del config["listeners"]  # BrokerProcess picks a free port of its own
    process = BrokerProcess(config)
    try:
        eventually(lambda: zk_view.controller() == 1, budget_s=10, what="broker 1 controller")
    except BaseException:
        process.kill()
        raise
    return cluster, process


def test_a_killed_controller_is_replaced_when_its_session_expires(zookeeper, tmp_path, zk_view):
    cluster, process = _controller_in_a_process(zookeeper, tmp_path, zk_view, FAST_SESSION)
    try:
        with cluster:
            cluster.add_broker(2)
            cluster.add_broker(3)
            assert zk_view.broker_ids() == [1, 2, 3]
            process.kill()  # kill -9: no goodbye; ZooKeeper notices when the session expires

            new = eventually(
                lambda: zk_view.controller() in (2, 3) and zk_view.controller(),
                budget_s=20,  # the 4 s session timeout, then an election
                what="a controller after kill -9",
            )
            assert zk_view.controller_epoch() == 2
            assert zk_view.broker_ids() == [2, 3]
            eventually(lambda: _all_agree(cluster.brokers, new), budget_s=10, what="Metadata")
    finally:
        if process.proc.poll() is None:
            process.kill()


def test_a_broker_whose_session_expired_registers_again(zookeeper, tmp_path, zk_view):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=FAST_SESSION) as cluster:
        config = cluster.broker_config(3, {"zookeeper.session.timeout.ms": "2000"})
        del config["listeners"]
        process = BrokerProcess(config)
        try:
            eventually(lambda: 3 in zk_view.broker_ids(), budget_s=10, what="broker 3 joined")
            old_session = zk_view.owner("/brokers/ids/3")
            controller = zk_view.controller()
            assert controller in (1, 2)

            # Frozen past its session timeout, the broker is dropped by ZooKeeper...
            os.kill(process.proc.pid, signal.SIGSTOP)
            try:
                eventually(
                    lambda: zk_view.broker_ids() == [1, 2], budget_s=15, what="broker 3 expired"
                )
                eventually(
                    lambda: _all_agree(cluster.brokers, controller),
                    budget_s=10,
                    what="brokers 1 and 2 see broker 3 gone",
                )
            finally:
                os.kill(process.proc.pid, signal.SIGCONT)

            # ...and once running again, it finds its session expired and registers anew.
            eventually(lambda: 3 in zk_view.broker_ids(), budget_s=15, what="re-registration")
            assert zk_view.owner("/brokers/ids/3") not in (None, old_session)
            assert zk_view.json("/brokers/ids/3")["port"] == process.port
            everyone = {1: cluster.brokers[1], 2: cluster.brokers[2], 3: process}
            eventually(lambda: _all_agree(everyone, controller), budget_s=10, what="Metadata")
            assert zk_view.controller_epoch() == 1  # the controller never changed
            registrations = [line for line in process.lines if "registered broker 3 at" in line]
            assert len(registrations) == 2, registrations
            assert process.stop() == 0
        finally:
            if process.proc.poll() is None:
                process.kill()


def test_a_lone_broker_never_imports_kazoo(tmp_path):
    code = (
        "import sys, trio, trio_broker\n"
        "async def main():\n"
        f"    async with trio_broker.open_broker({{'listeners': 'PLAINTEXT://127.0.0.1:0',"
        f" 'log.dirs': {str(tmp_path)!r}}}):\n"
        "        pass\n"
        "trio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith('kazoo')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_a_stopped_controller_is_voted_out_before_its_session_ends(zookeeper, tmp_path, zk_view):
    """SIGSTOP of the controller for longer than broker.session.timeout.ms, shorter than its
    ZooKeeper session: the other two brokers, unheard by it, vote it out
    (cluster/zookeeper/controller_votes.py) and one of them is controller while broker 1's
    session (and registration) still stands. Running again, broker 1 finds /controller
    gone from under it and stands aside instead of winning it back: one more epoch, not
    two, and every broker agrees."""
    fast = {
        "zookeeper.session.timeout.ms": "12000",
        "broker.heartbeat.interval.ms": "300",
        "broker.session.timeout.ms": "1500",
    }
    cluster, process = _controller_in_a_process(zookeeper, tmp_path, zk_view, fast)
    try:
        with cluster:
            cluster.add_broker(2)
            cluster.add_broker(3)
            eventually(lambda: zk_view.broker_ids() == [1, 2, 3], budget_s=10, what="3 brokers")
            session = zk_view.owner("/brokers/ids/1")
            os.kill(process.proc.pid, signal.SIGSTOP)
            try:
                new = eventually(
                    lambda: zk_view.controller() in (2, 3) and zk_view.controller(),
                    budget_s=9,  # within broker 1's 12 s session
                    what="a controller voted in while broker 1 is stopped",
                )
                assert zk_view.owner("/brokers/ids/1") == session  # its session lives on
                assert zk_view.controller_epoch() == 2
            finally:
                os.kill(process.proc.pid, signal.SIGCONT)
            eventually(
                lambda: any("not standing again" in line for line in process.lines),
                budget_s=10,
                what="broker 1 standing aside",
            )
            everyone = {1: process, **cluster.brokers}
            eventually(lambda: _all_agree(everyone, new), budget_s=15, what="Metadata")
            assert zk_view.controller() == new
            assert zk_view.controller_epoch() == 2
            assert zk_view.owner("/brokers/ids/1") == session
    finally:
        if process.proc.poll() is None:
            process.kill()
