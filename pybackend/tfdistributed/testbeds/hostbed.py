"""A test bed of hosts on one machine: network namespaces joined by a bridge, torn down whole.

A developer's tool, like :mod:`tfdistributed.testbeds.slurm`: the tests, the benchmarks and the
"Running on a cluster" vignette build their hosts with it. Nothing in training uses it.

Multi-host behaviour (tasks at their own addresses, what binds where, bandwidth) cannot be seen
on 127.0.0.1, and the project has one machine. Linux network namespaces give each "host" its own
interfaces, addresses and port space; processes started with ``ip netns exec NS`` share the
filesystem (venv, temporary directories), so a job runs unchanged.

Layout for ``HostBed(2, rate="1gbit")`` (``P`` is the bed's prefix, ``tfdh-<pid>-<n>-``)::

    namespace P h0            namespace P br                  namespace P h1
    lo 127.0.0.1              br0 (bridge, no address)        lo 127.0.0.1
    eth0 10.77.0.2/24 <-veth-> p0 --- br0 --- p1 <-veth-> eth0 10.77.0.3/24

Everything, the bridge included, lives inside namespaces this module creates: nothing gets an
address in the machine's own namespace, and no traffic leaves the bed. Each veth is created
straight into its namespaces, so deleting the namespaces deletes every link; :meth:`HostBed.down`
does that on every exit path (the context manager, an ``atexit`` hook, SIGTERM made an exit
that runs both, the CLI's ``down``); a bed left by a process killed with SIGKILL is deleted by
the next :meth:`HostBed.up` on this machine (its prefix names a process that no longer exists).
With a ``rate``, a ``tc tbf`` qdisc caps each link in both directions: on the host's ``eth0``
(host to bridge) and on the bridge's port (bridge to host). ``netem`` is not available here, so
latency is not emulated.

Needs root and ``ip``/``tc`` (Debian's iproute2); without them :meth:`HostBed.up` raises
:class:`HostBedError` saying so, and the tests fail with that reason.

CLI::

    python -m tfdistributed.testbeds.hostbed up 2 [RATE]   # prints the hosts; the bed stays up
    python -m tfdistributed.testbeds.hostbed down PREFIX   # deletes that bed's namespaces (the
                                                           # prefix `up` printed, e.g. tfdh-123-0-)
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from ..errors import TFDistributedError

#: Every name this module creates starts with this.
PREFIX = "tfdh-"
SUBNET = "10.77.0"
_counter = itertools.count()


class HostBedError(TFDistributedError, RuntimeError):
    """The test bed cannot be built here (not root, no ``ip``/``tc``, a command failed)."""


@dataclass(frozen=True)
class Host:
    """One host of the bed.

    Attributes:
        name: its network namespace.
        address: its IPv4 address on the bed's network.
    """

    name: str
    address: str

    @property
    def prefix(self) -> list:
        """The command prefix that runs a process on this host."""
        return ["ip", "netns", "exec", self.name]


def _ip(*args, timeout=20) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise HostBedError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def _tc(namespace, *args) -> None:
    done = subprocess.run(["ip", "netns", "exec", namespace, "tc", *args], capture_output=True,
                          text=True, timeout=20)
    if done.returncode != 0:
        raise HostBedError(f"`tc {' '.join(args)}` in {namespace} failed: {done.stderr.strip()}")


def check_can_build() -> None:
    """Raise :class:`HostBedError` with the reason when namespaces cannot be made here."""
    if os.geteuid() != 0:
        raise HostBedError("network namespaces need root: run the host tests as root.")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise HostBedError(f"{' and '.join(missing)} not found: install Debian's iproute2 "
                           f"(scripts/setup.sh does).")


def namespaces(prefix: str = PREFIX) -> list:
    """The network namespaces whose name starts with ``prefix``."""
    return [line.split()[0] for line in _ip("netns", "list").splitlines()
            if line.strip() and line.split()[0].startswith(prefix)]


def links(prefix: str = PREFIX) -> list:
    """The links of the machine's own namespace whose name starts with ``prefix``."""
    names = [line.split(":")[1].strip().split("@")[0]
             for line in _ip("-o", "link").splitlines() if ":" in line]
    return [n for n in names if n.startswith(prefix)]


def delete_namespaces(prefix: str) -> None:
    """Delete every namespace named ``prefix...`` (their veths and bridge go with them)."""
    for name in namespaces(prefix):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)


def delete_stale() -> None:
    """Delete the beds of processes that no longer exist (killed before they could clean up)."""
    import psutil

    for name in namespaces(PREFIX):
        pid = name[len(PREFIX):].split("-")[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            delete_namespaces(f"{PREFIX}{pid}-")


def _exit_on_sigterm() -> None:
    """Make SIGTERM (``timeout``, a supervisor) an exit that runs ``finally`` and ``atexit``."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


class HostBed:
    """``n`` hosts joined by a bridge, each link optionally capped at ``rate`` both ways.

    Args:
        n: number of hosts (1-250); host ``i`` has address ``10.77.0.{i + 2}``.
        rate: a ``tc`` rate such as ``"100mbit"`` or ``"1gbit"``, or None for no cap.

    Example:
        >>> with HostBed(2, rate="1gbit") as bed:                  # doctest: +SKIP
        ...     subprocess.run([*bed.hosts[0].prefix, "python", "-c", "print(1)"], timeout=30)
    """

    def __init__(self, n: int, rate: str | None = None):
        if not 1 <= int(n) <= 250:
            raise ValueError(f"a bed has 1 to 250 hosts, not {n}.")
        self.n, self.rate = int(n), rate
        self.prefix = f"{PREFIX}{os.getpid()}-{next(_counter)}-"
        self.bridge = self.prefix + "br"
        self.hosts = [Host(f"{self.prefix}h{i}", f"{SUBNET}.{i + 2}") for i in range(self.n)]

    def up(self) -> "HostBed":
        """Build the bed; on any failure, delete what was built and raise :class:`HostBedError`."""
        check_can_build()
        delete_stale()
        _exit_on_sigterm()
        atexit.register(self.down)
        try:
            _ip("netns", "add", self.bridge)
            _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge, "link", "set", "br0", "up")
            for i, host in enumerate(self.hosts):
                self._add_host(i, host)
        except BaseException:
            self.down()
            raise
        return self

    def _add_host(self, i: int, host: Host) -> None:
        _ip("netns", "add", host.name)
        _ip("-n", host.name, "link", "set", "lo", "up")
        # Made inside the host's namespace, its peer moved at once: never a link in ours.
        _ip("-n", host.name, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}",
            "netns", self.bridge)
        _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.name, "link", "set", "eth0", "up")
        _ip("-n", self.bridge, "link", "set", f"p{i}", "master", "br0")
        _ip("-n", self.bridge, "link", "set", f"p{i}", "up")
        if self.rate:
            for namespace, dev in ((host.name, "eth0"), (self.bridge, f"p{i}")):
                _tc(namespace, "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
                    "burst", "256kbit", "latency", "400ms")

    def down(self) -> None:
        """Delete every namespace of this bed (idempotent)."""
        delete_namespaces(self.prefix)

    def __enter__(self) -> "HostBed":
        return self.up()

    def __exit__(self, *exc) -> bool:
        self.down()
        return False

    def launch_hosts(self) -> dict:
        """``{address: command prefix}`` of every host: ``Local(hosts=...)`` takes it."""
        return {h.address: h.prefix for h in self.hosts}

    def cluster(self, workers: int, port: int = 2222) -> dict:
        """A cluster of ``workers`` workers, worker ``i`` on host ``i``; each host has its own
        ports, so all may use the same one."""
        return {"worker": [f"{h.address}:{port}" for h in self.hosts[:workers]]}


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["up"] and len(args) in (2, 3):
        bed = HostBed(int(args[1]), args[2] if len(args) == 3 else None).up()
        atexit.unregister(bed.down)  # the CLI's bed outlives this process, until `down`
        print(f"prefix {bed.prefix}")
        for host in bed.hosts:
            print(f"{host.name} {host.address}")
        return 0
    if args[:1] == ["down"] and len(args) == 2 and args[1].startswith(PREFIX):
        check_can_build()
        delete_namespaces(args[1])
        return 0
    print(f"usage: python -m tfdistributed.testbeds.hostbed up N [RATE] | down PREFIX "
          f"(a bed's prefix, {PREFIX}...)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
