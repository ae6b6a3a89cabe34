"""Hosts on a network of the test's own, whose links break the way networks break.

Each host is a Linux network namespace with one veth link to a bridge in the test's own
namespace; the test process reaches every host at its address through the bridge, as a
client on the same network would. Faults are the kernel's own, made with `iptables` inside
a host's namespace:

    lab.partition(a, b)      packets between a and b dropped, both ways (nothing is closed:
                             TCP retransmits with its backoff until the link heals)
    lab.one_way(a, b)        packets from a to b dropped; b's still reach a
    lab.isolate(a)           a cut from every other host (clients keep reaching it, as
                             clients on its side of a real partition would; `clients=True`
                             cuts them too)
    lab.loss(a, 0.3)         30% of the packets a receives dropped (`clients=False`: only
                             those from the other hosts)
    lab.heal(a) / heal()     every rule of a host (or of all) removed

Needs root, `ip` (iproute2) and `iptables`; `skip_reason()` says why not where it cannot
run. Delays (`tc netem`) need the sch_netem kernel module, which these machines lack, so
slow links are not modelled here.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
from collections.abc import Sequence

import attrs

__all__ = ["Host", "NetLab", "skip_reason"]

_LAB_NUMBERS = itertools.count(random.randrange(100))


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


def skip_reason() -> str | None:
    """Why namespaces and packet filters cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 iptables)"
    probe = f"tbprobe{os.getpid()}"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    try:
        rule = _run(
            "ip", "netns", "exec", probe, "iptables", "-A", "INPUT", "-s", "10.0.0.1", "-j",
            "DROP", check=False,
        )  # fmt: skip
        if rule.returncode != 0:
            return f"iptables does not work in a namespace: {rule.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


@attrs.define
class Host:
    name: str
    namespace: str
    address: str

    def command(self, args: Sequence[str]) -> list[str]:
        """`args` run inside this host's namespace (`ip netns exec` execs them: same pid)."""
        return ["ip", "netns", "exec", self.namespace, *args]

    def iptables(self, *args: str) -> None:
        _run(*self.command(["iptables", "-w", *args]))


class NetLab:
    """See the module docstring. `with NetLab() as lab:` removes everything on exit."""

    def __init__(self) -> None:
        # A lab of its own per NetLab of this process: names drawn at random here once
        # collided with the lab before, whose veth pairs the kernel was still removing
        # (`ip netns del` returns before they go): "File exists".
        tag = f"{os.getpid() % 100000:05d}{next(_LAB_NUMBERS) % 100:02d}"
        self.prefix = f"tb{tag}"[:9]  # interface names are at most 15 characters
        # A /24 of our own in 10.200-249.x: concurrent runs pick different ones.
        self.net = f"10.{200 + random.randrange(50)}.{random.randrange(256)}"
        self.bridge = f"{self.prefix}br"
        self.gateway = f"{self.net}.1"  # the test process's own address on the bridge
        self.hosts: dict[str, Host] = {}

    def __enter__(self) -> NetLab:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self, name: str) -> Host:
        index = len(self.hosts) + 1
        host = Host(name, f"{self.prefix}-{name}", f"{self.net}.{10 + index}")
        outer, inner = f"{self.prefix}v{index}", f"{self.prefix}p{index}"
        _run("ip", "netns", "add", host.namespace)
        self.hosts[name] = host  # close() removes its namespace even if a step below fails
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        _run("ip", "link", "set", outer, "master", self.bridge)
        _run("ip", "link", "set", outer, "up")
        _run("ip", "link", "set", inner, "netns", host.namespace)
        ns = ["ip", "netns", "exec", host.namespace]
        _run(*ns, "ip", "addr", "add", f"{host.address}/24", "dev", inner)
        _run(*ns, "ip", "link", "set", inner, "up")
        _run(*ns, "ip", "link", "set", "lo", "up")
        return host

    # -- faults ----------------------------------------------------------------------------

    def partition(self, a: str, b: str) -> None:
        """Packets between hosts a and b dropped both ways (rules in a's namespace)."""
        host, other = self.hosts[a], self.hosts[b].address
        host.iptables("-A", "OUTPUT", "-d", other, "-j", "DROP")
        host.iptables("-A", "INPUT", "-s", other, "-j", "DROP")

    def one_way(self, a: str, b: str) -> None:
        """Packets from a to b dropped; b's packets still reach a."""
        self.hosts[a].iptables("-A", "OUTPUT", "-d", self.hosts[b].address, "-j", "DROP")

    def isolate(self, a: str, *, clients: bool = False) -> None:
        """a cut from every other host (and from the test's clients with `clients`)."""
        for name in self.hosts:
            if name != a:
                self.partition(a, name)
        if clients:
            host = self.hosts[a]
            host.iptables("-A", "OUTPUT", "-d", self.gateway, "-j", "DROP")
            host.iptables("-A", "INPUT", "-s", self.gateway, "-j", "DROP")

    def loss(self, a: str, probability: float, *, clients: bool = True) -> None:
        """A share of the packets host a receives dropped at random; with `clients=False`
        only those from the other hosts (the test's clients spared, as `isolate` spares
        them)."""
        spare = [] if clients else ["!", "-s", self.gateway]
        self.hosts[a].iptables(
            "-A", "INPUT", *spare, "-m", "statistic", "--mode", "random", "--probability",
            f"{probability:.3f}", "-j", "DROP",
        )  # fmt: skip

    def heal(self, a: str | None = None) -> None:
        for name in [a] if a is not None else list(self.hosts):
            self.hosts[name].iptables("-F")

    def rules(self, a: str) -> str:
        return _run(*self.hosts[a].command(["iptables", "-S"])).stdout

    def close(self) -> None:
        for host in self.hosts.values():
            # Whatever still runs in the namespace keeps it alive; the caller stops its
            # processes first. Deleting the namespace removes its end of the veth pair.
            _run("ip", "netns", "del", host.namespace, check=False)
        self.hosts.clear()
        _run("ip", "link", "del", self.bridge, check=False)
