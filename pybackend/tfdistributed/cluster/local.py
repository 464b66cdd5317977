"""Clusters the launchers run: :class:`Cluster` (a cluster validated once, as a value),
:func:`local_cluster` (tasks on 127.0.0.1 with free ports) and :func:`checked_local` (only
loopback, or hosts the caller named, since TensorFlow's gRPC servers have no authentication).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._args import as_int
from ..errors import ClusterConfigError
from .addresses import is_loopback
from .spec import field_name, parse_address, validate_cluster


@dataclass(frozen=True)
class Cluster:
    """A cluster validated once (:func:`validate_cluster`), as a value that cannot change.

    Why: the launchers used to pass the cluster dict along, and each task's TF_CONFIG
    (:func:`tf_config`) validated the whole dict again. A :class:`Cluster` is made with
    :meth:`of`, which validates; the launchers plan with it and give each task its TF_CONFIG
    (:meth:`tf_config`) without another check.

    Attributes:
        jobs: ``((role, (address, ...)), ...)``, the roles in TensorFlow's order
            (:data:`ROLES`).

    Example:
        >>> c = Cluster.of({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
        >>> c.tasks(), c.address("worker", 1)
        ([('worker', 0), ('worker', 1)], '127.0.0.1:2')
    """

    jobs: tuple

    @classmethod
    def of(cls, cluster) -> "Cluster":
        """``cluster`` (a dict, or already a :class:`Cluster`) validated, as a value."""
        if isinstance(cluster, Cluster):
            return cluster
        return cls(tuple((role, tuple(addresses))
                         for role, addresses in validate_cluster(cluster).items()))

    def as_dict(self) -> dict:
        """The validated cluster dict (a new one at each call: the value stays unchanged)."""
        return {role: list(addresses) for role, addresses in self.jobs}

    def count(self, role: str) -> int:
        return next((len(addresses) for r, addresses in self.jobs if r == role), 0)

    def address(self, role: str, index: int) -> str:
        return dict(self.jobs)[role][index]

    def tasks(self) -> list:
        """``(role, index)`` of every task, in TensorFlow's role order."""
        return [(role, i) for role, addresses in self.jobs for i in range(len(addresses))]

    @property
    def parameter_server(self) -> bool:
        return self.count("ps") > 0

    def tf_config(self, role: str, index: int) -> dict:
        """The TF_CONFIG of task ``(role, index)`` of this cluster, as :func:`tf_config`
        gives it, without validating the cluster again."""
        if not 0 <= index < self.count(role):
            raise ClusterConfigError(f"task {role} {index} is not in the cluster {self.as_dict()}.")
        return {"cluster": self.as_dict(), "task": {"type": role, "index": index}}


def check_loopback(cluster, hosts=()) -> dict:
    """Refuse any address off this machine: local clusters are unauthenticated gRPC servers.

    Addresses on one of ``hosts`` (host names or IPs, as written in the cluster) are allowed
    too: hosts the caller set up and named explicitly (``launch(hosts=...)``). Also refuses what a
    local cluster cannot run: no task at all, or ps tasks without a chief (TensorFlow allows that,
    the coordinator being outside the cluster, but :func:`launch` runs the program as the chief).
    """
    return checked_local(cluster, hosts).as_dict()


def checked_local(cluster, hosts=()) -> Cluster:
    """:func:`check_loopback`'s checks, giving the :class:`Cluster` value the local launcher
    plans with (a :class:`Cluster` is not validated again)."""
    value = check_launchable(Cluster.of(cluster))
    for role, addresses in value.as_dict().items():
        for i, address in enumerate(addresses):
            if not is_loopback(address) and parse_address(address)[0] not in hosts:
                raise ClusterConfigError(
                    f'{field_name(["cluster", role, i])} = "{address}" is not a loopback address. '
                    f"TensorFlow's gRPC servers have no authentication (and listen on every "
                    f"interface: check_own_address()), so local clusters name 127.0.0.1 only: use "
                    f"local_cluster() to pick addresses (or, for hosts you set up yourself, name "
                    f"each with how to start a task there: hosts=).")
    return value


def check_launchable(value: Cluster) -> Cluster:
    """``value`` if :func:`~tfdistributed.launch` can run it: a worker or a chief, and a chief
    for ps tasks (the program runs as the chief, the coordinator); else a
    :class:`~tfdistributed.errors.ClusterConfigError` naming the fix."""
    cluster = value.as_dict()
    if not cluster.get("chief") and not cluster.get("worker"):
        raise ClusterConfigError(
            f'{field_name(["cluster"])} has no "worker" or "chief" task: list at least one worker.')
    if cluster.get("ps") and not cluster.get("chief"):
        raise ClusterConfigError(
            f'{field_name(["cluster"])} has ps tasks but no "chief": a local parameter-server '
            f'cluster runs your program as the chief (the coordinator); add "chief": '
            f'["127.0.0.1:port"], or let local_cluster() pick it with chief set to true.',
            hints={"python": "E.g. local_cluster(2, ps=1, chief=True).",
                   "r": "E.g. local_cluster(2, ps = 1, chief = TRUE)."})
    return value


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on this machine (portpicker).

    A port is free when picked; a task binds it seconds later. A machine that starts many jobs
    at once (a test suite, a sweep) can run portpicker's port server (``portserver.py``) and set
    ``PORTSERVER_ADDRESS`` for every process: each port then goes to one live process at a time,
    from a range the kernel does not hand out to outgoing connections (this project's test suite
    runs so)."""
    import portpicker

    ports: list[int] = []
    while len(ports) < n:
        port = portpicker.pick_unused_port()
        if port not in ports:
            ports.append(port)
    return ports


def local_cluster(workers=2, ps=0, chief=False, evaluator=False) -> dict:
    """A cluster dict of tasks on 127.0.0.1 with free ports, for running on this one machine.

    Example:
        >>> sorted(local_cluster(workers=2, ps=1, chief=True))
        ['chief', 'ps', 'worker']
    """
    workers = as_int(workers, "workers", minimum=0)
    ps = as_int(ps, "ps", minimum=0)
    if ps and not chief:
        # TensorFlow can also run the coordinator outside the cluster (no chief), but a local
        # cluster is for launch(), which runs the program as the chief task.
        raise ClusterConfigError(
            "local_cluster() with ps tasks needs a chief (chief set to true): launch() runs your "
            "program as the chief, the coordinator of parameter-server training.",
            hints={"python": f"E.g. local_cluster({workers}, ps={ps}, chief=True).",
                   "r": f"E.g. local_cluster({workers}, ps = {ps}, chief = TRUE)."})
    counts = {"chief": int(bool(chief)), "worker": workers, "ps": ps,
              "evaluator": int(bool(evaluator))}
    ports = iter(free_ports(sum(counts.values())))
    cluster = {role: [f"127.0.0.1:{next(ports)}" for _ in range(n)]
               for role, n in counts.items() if n}
    return validate_cluster(cluster)
