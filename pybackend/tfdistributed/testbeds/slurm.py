"""A real SLURM cluster on this machine, one node or several, everything in one temporary directory.

For trying the SLURM engine (``launch(..., engine=Slurm())``, ``srun -n2 Rscript train.R``)
without a cluster, and for the test suite and the tutorial: it starts ``munged``,
``slurmctld`` and ``slurmd`` from the installed Debian packages (``slurmd slurmctld
slurm-client munge``) with their own key, socket, configuration, state, spool, pid and log files
and non-default ports in a temporary directory, so nothing in ``/etc/slurm`` or ``/etc/munge``
is read or changed, and stops them afterwards::

    with LocalSlurm() as slurm:               # sets SLURM_CONF for this process and its children
        subprocess.run(["srun", "-n2", "hostname"], env=slurm.env())

Every daemon runs as the current user, which must be root (``SlurmUser=root``: slurmd starts
job steps as the submitting user and needs root to do so).

Several nodes
-------------
A job across hosts cannot be seen on one node: tasks must find each other at their nodes'
addresses. ``LocalSlurm(hosts=bed.hosts)`` (the network namespaces of
:mod:`tfdistributed.testbeds.hostbed`, or any objects with a namespace ``name`` under ``/run/netns``
and an ``address``) makes node ``h<i>`` of host ``i``, with ``NodeAddr`` the host's address and its
own slurmd in that namespace, started with ``nsenter --net`` (``ip netns exec`` remounts ``/sys``,
where slurmd looks for cgroups). slurmctld runs in the first host's namespace, so every address
SLURM uses is inside the bed; client commands must run there too: :attr:`LocalSlurm.prefix` is the
command prefix that does, and :meth:`LocalSlurm.run` uses it::

    with HostBed(2) as bed, LocalSlurm(hosts=bed.hosts) as slurm:
        slurm.run(["srun", "-N2", "hostname"])  # = [*slurm.prefix, "srun", ...], slurm.env()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from ..cluster.local import free_ports
from ..errors import LaunchError

_DAEMONS = ("munged", "slurmctld", "slurmd")


def _port_range_free(first: int, count: int) -> bool:
    import portpicker

    return all(portpicker.is_port_free(port) for port in range(first, first + count))


def _reserved_port_range(count: int = 100) -> int:
    """First port of ``count`` consecutive free ports for SLURM's reserved step ports."""
    for first in range(21000, 30000, count):
        if _port_range_free(first, count):
            return first
    raise LaunchError(f"No {count} consecutive free ports between 21000 and 30000 for SLURM's "
                      f"reserved step ports (MpiParams=ports=...): free some ports and retry.")


def _netns_prefix(namespace: str) -> list:
    """The command prefix that runs a program in the network namespace ``namespace``."""
    return ["nsenter", f"--net=/run/netns/{namespace}"]


class LocalSlurm:
    """A SLURM cluster (munged + slurmctld + one slurmd per node) in a temporary directory.

    Args:
        cpus: CPUs SLURM may hand out on each node (tasks of a job step each take one).
        directory: where to put everything; default a new temporary directory, removed by
            :meth:`stop`.
        start_timeout: seconds to wait for the nodes to become idle in ``sinfo``.
        hosts: None for one node, this machine; else a node per host (``h0``, ``h1``...), each
            with ``name``, its network namespace, and ``address``, the node's ``NodeAddr``
            (see the module docstring).

    Raises:
        LaunchError: a program is missing, this is not root, or a daemon did not start (the
            message quotes its log).

    Example:
        >>> with LocalSlurm() as slurm:                        # doctest: +SKIP
        ...     print(slurm.run(["sinfo"]).stdout)
        >>> with LocalSlurm(hosts=bed.hosts) as slurm:         # doctest: +SKIP
        ...     print(slurm.run(["srun", "-N2", "hostname"]).stdout)
    """

    def __init__(self, cpus: int = 2, directory: str | None = None, start_timeout: float = 60.0,
                 hosts=None):
        self.hosts = list(hosts or [])
        self.cpus = int(cpus)
        self.start_timeout = float(start_timeout)
        self._own_dir = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="tfdistributed-slurm-")
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.hostname = socket.gethostname().split(".")[0]
        self.nodes = [f"h{i}" for i in range(len(self.hosts))] or [self.hostname]
        self.node = self.nodes[0]
        #: Runs a client command where slurmctld is reachable: in the first host's namespace.
        self.prefix = _netns_prefix(self.hosts[0].name) if self.hosts else []
        self.partition = "tfd"
        self._previous_conf = None
        self._procs: dict[str, subprocess.Popen] = {}

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def env(self, base=None) -> dict:
        """An environment for SLURM commands that talk to this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = self.conf
        return env

    def run(self, argv, timeout=30.0, check=True, env=None) -> subprocess.CompletedProcess:
        """Run a SLURM client command (``sinfo``, ``srun``...) against this cluster, in ``env``
        (default: this process's environment) with the cluster's ``SLURM_CONF``.

        Its output is decoded with undecodable bytes replaced: ``srun --label`` relays a task's
        output in 1024-byte pieces, each labelled, so a long line is cut inside a character.
        """
        done = subprocess.run([*self.prefix, *argv], env=self.env(env), capture_output=True,
                              text=True, errors="replace", timeout=timeout)
        if check and done.returncode != 0:
            raise LaunchError(f"{' '.join(argv)} failed with status {done.returncode}: "
                              f"{done.stderr.strip() or done.stdout.strip()}")
        return done

    def _check_tools(self) -> None:
        needed = (*_DAEMONS, *(["nsenter"] if self.hosts else []), "srun", "sbatch", "sinfo",
                  "scontrol")
        missing = [p for p in needed
                   if shutil.which(p) is None and not os.path.exists(f"/usr/sbin/{p}")]
        if missing:
            raise LaunchError(
                f"Cannot start a local SLURM cluster: {', '.join(missing)} not found. Install the "
                f"Debian packages slurmd slurmctld slurm-client munge (scripts/setup.sh does).")
        if os.geteuid() != 0:
            raise LaunchError(
                "A local SLURM cluster runs its daemons as root (slurmd starts job steps as the "
                "submitting user), and this process is not root: run it as root.")

    def _write_config(self) -> None:
        # munged refuses a socket in a directory that not everyone may traverse.
        os.chmod(self.dir, 0o711)
        for sub, mode in (("munge", 0o711), ("key", 0o700), ("state", 0o700), ("spool", 0o700),
                          ("log", 0o700)):
            os.makedirs(self.path(sub), exist_ok=True)
            os.chmod(self.path(sub), mode)
        key = self.path("key/munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        ctld_port, slurmd_port = free_ports(2)
        first = _reserved_port_range()
        d = self.dir
        # slurmctld knows its host by this machine's name (namespaces share it); clients and
        # slurmds reach it at the first host's address when there are hosts.
        controller = f"{self.hostname}({self.hosts[0].address})" if self.hosts else self.hostname
        lines = [
            "ClusterName=tfdistributed",
            f"SlurmctldHost={controller}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={d}/munge/munge.socket",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            # Reserved ports for `srun --resv-ports`: SLURM hands each step its own ports.
            f"MpiParams=ports={first}-{first + 99}",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            f"StateSaveLocation={d}/state",
            # %n: each node's slurmd has its own spool, pid and log files.
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "ReturnToService=2",
            # A node whose slurmd stops answering is marked down within about 10 s (default
            # 300 s): an elastic job's tests lose a node and must see SLURM say so.
            "SlurmdTimeout=10",
            # scancel: SIGTERM, then SIGKILL after 5 s (default 30 s).
            "KillWait=5",
            *self._node_lines(),
            f"PartitionName={self.partition} Nodes={','.join(self.nodes)} Default=YES "
            f"MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _node_lines(self) -> list:
        if not self.hosts:
            return [f"NodeName={self.node} CPUs={self.cpus} State=UNKNOWN"]
        return [f"NodeName={node} NodeAddr={host.address} "
                f"CPUs={self.cpus} State=UNKNOWN" for node, host in zip(self.nodes, self.hosts)]

    def _log_tail(self, name: str, n: int = 15) -> str:
        try:
            with open(self.path(f"log/{name}.log"), errors="replace") as f:
                return "".join(f.readlines()[-n:]).strip() or "(empty)"
        except OSError:
            return "(no log)"

    def _start(self, name: str, argv: list, ready) -> None:
        """Run a daemon in the foreground as our child (so we reap it: this machine's init does
        not reap orphans) and wait until ``ready()``. ``nsenter`` execs the daemon, so the child
        is the daemon itself."""
        with open(self.path(f"log/{name}.out"), "wb") as out:
            proc = subprocess.Popen(argv, env=self.env(), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, preexec_fn=_stop_with_parent)
        self._procs[name] = proc
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(self.path(f"log/{name}.out"), errors="replace") as f:
                    said = f.read().strip()[-2000:]
                how = (f"exited with status {proc.returncode}" if proc.poll() is not None
                       else f"was not ready within {self.start_timeout:g} s")
                raise LaunchError(f"{name} {how}: {said or '(no output)'}\n"
                                  f"Its log:\n{self._log_tail(name)}")
            time.sleep(0.1)

    def start(self) -> "LocalSlurm":
        """Start the daemons and wait until the node is idle; returns ``self``."""
        self._check_tools()
        self._write_config()
        d = self.dir
        try:
            socket_path = f"{d}/munge/munge.socket"
            self._start("munged", ["munged", "--foreground", f"--key-file={d}/key/munge.key",
                                   f"--socket={socket_path}", f"--pid-file={d}/munged.pid",
                                   f"--log-file={d}/log/munged.log", f"--seed-file={d}/key/seed"],
                        lambda: os.path.exists(socket_path))
            self._start("slurmctld", [*self.prefix, "slurmctld", "-D", "-f", self.conf],
                        lambda: self.run(["scontrol", "ping"], check=False).returncode == 0)
            for node in self.nodes:
                self._start_slurmd(node)
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        self._previous_conf = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = self.conf
        return self

    def _start_slurmd(self, node: str) -> None:
        here = _netns_prefix(self.hosts[self.nodes.index(node)].name) if self.hosts else []
        self._start(f"slurmd-{node}", [*here, "slurmd", "-D", "-N", node, "-f", self.conf],
                    lambda: os.path.exists(self.path(f"slurmd-{node}.pid")))

    def reboot_node(self, node: str, timeout: float = 20.0) -> None:
        """Stop ``node``'s slurmd and start it again, as when the node reboots: it registers
        with slurmctld, which gives a node that was down back to service
        (``ReturnToService=2``). Call it from a thread that outlives the node: Linux ends a
        daemon when the thread that started it ends (``PR_SET_PDEATHSIG``, which keeps a
        killed test run from leaving daemons behind)."""
        _end(self._procs.pop(f"slurmd-{node}"), timeout)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path(f"slurmd-{node}.pid"))
        self._start_slurmd(node)

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        state = ""
        while time.monotonic() < deadline:
            done = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False)
            state = (done.stdout or done.stderr).strip()
            if done.returncode == 0 and state.split()[1::2] == ["idle"] * len(self.nodes):
                return
            time.sleep(0.5)
        slurmd_logs = "".join(f"\nslurmd log of {node}:\n{self._log_tail(f'slurmd-{node}')}"
                              for node in self.nodes)
        raise LaunchError(
            f"The local SLURM node(s) {', '.join(self.nodes)} did not become idle within "
            f"{self.start_timeout:g} s (sinfo says: {state or 'nothing'}).\nslurmctld log:\n"
            f"{self._log_tail('slurmctld')}{slurmd_logs}")

    def stop(self, timeout: float = 20.0) -> None:
        """Cancel every job, stop the daemons (slurmds, slurmctld, munged), remove the directory."""
        if "slurmctld" in self._procs:
            self.run(["scancel", "--full", f"--partition={self.partition}"], check=False)
        # In the reverse of their start order: the slurmds, slurmctld, then munged.
        for name in reversed(list(self._procs)):
            _end(self._procs.pop(name), timeout)
        if self._previous_conf is None:
            if os.environ.get("SLURM_CONF") == self.conf:
                os.environ.pop("SLURM_CONF")
        else:
            os.environ["SLURM_CONF"] = self._previous_conf
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalSlurm":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _end(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM a daemon, SIGKILL it if it has not ended within ``timeout``, and reap it."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def _stop_with_parent() -> None:
    """In the daemon before it starts: its own session (a Ctrl-C of ours is not its), and
    SIGTERM when the process that started it dies, even by SIGKILL, so no daemon outlives a
    killed test run or R session."""
    import ctypes

    os.setsid()
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
