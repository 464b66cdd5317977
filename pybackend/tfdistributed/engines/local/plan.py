"""The local engine's plan: the cluster (a :class:`~tfdistributed.cluster.Cluster`, validated
once), its ports checked, and each task's argv, environment and TF_CONFIG built once, as a
:class:`TaskPlan`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

import portpicker

from ...strategies.runtime import prefer_pooled_cpu_allocator
from ...cluster.local import Cluster
from ...cluster.spec import parse_address
from ...errors import ClusterConfigError, LaunchError
from ..base import target_argv
from ..gpus import VISIBLE_ENV, local_shares, trains, visible_gpus


@dataclass
class TaskPlan:
    """One task of a local cluster as it will be started; what ``prepare_task`` receives.

    Attributes:
        task_type, task_index: the task's role and index in the cluster.
        address: its ``"host:port"`` in the cluster.
        position: its place among the started tasks (0, 1, ...), in start order.
        argv: the command it runs.
        env: its whole environment, ``TF_CONFIG`` included.
        server: True for the ``worker``/``ps`` servers of a parameter-server cluster.
        parameter_server: True when the cluster has ``ps`` tasks.
        result_path: where a function target's return value comes back (else None).
        preexec_fn: called in the child process just before it runs ``argv`` (e.g. to pin it to
            a CPU), as :class:`subprocess.Popen`'s ``preexec_fn``.
        gpus: the ``CUDA_VISIBLE_DEVICES`` ``gpus_per_task`` gave it (``"-1"``: none), or None
            when the GPUs were left alone (:mod:`tfdistributed.engines.gpus`).
    """

    task_type: str
    task_index: int
    address: str
    position: int
    argv: list
    env: dict
    server: bool = False
    parameter_server: bool = False
    result_path: str | None = None
    preexec_fn: Callable | None = None
    gpus: str | None = None

    @property
    def name(self) -> str:
        return f"{self.task_type} {self.task_index}"


@dataclass
class LaunchPlan:
    """Everything one attempt starts: the cluster, the tasks started here, and the others."""

    cluster: Cluster
    tasks: list
    elsewhere: list
    workdir: str
    cwd: str | None = None

    @property
    def parameter_server(self) -> bool:
        return self.cluster.parameter_server


def _chosen_tasks(cluster: Cluster, tasks) -> list:
    """``(role, index)`` of the tasks to start here: all of the cluster's, or ``tasks``."""
    wanted = cluster.tasks()
    if tasks is None:
        return wanted
    tasks = [(str(t), int(i)) for t, i in tasks]
    unknown = [t for t in tasks if t not in wanted]
    if unknown:
        raise ClusterConfigError(f"tasks {unknown} are not in the cluster {cluster.as_dict()}.")
    return [t for t in wanted if t in tasks]


def _check_ports(cluster: Cluster, wanted: list) -> None:
    for role, i in wanted:
        address = cluster.address(role, i)
        if not portpicker.is_port_free(parse_address(address)[1]):
            raise LaunchError(f"Port of {role} {i} ({address}) is already in use on this machine. "
                              f"Let launch() pick free ports (don't pass `cluster`), or stop the "
                              f"process holding it.")


def _base_env(env, python: str, is_function: bool) -> dict:
    """The environment every task shares (TF_CONFIG aside)."""
    base = dict(os.environ)
    base.update({str(k): str(v) for k, v in (env or {}).items()})
    # TensorFlow's pooling CPU allocator in every task, unless `env` or ours says otherwise: a
    # script target may import TensorFlow before tfdistributed, or not import us at all.
    prefer_pooled_cpu_allocator(base)
    base["PYTHONUNBUFFERED"] = "1"
    # fit(verbose="auto") prints one line per epoch instead of a redrawn progress bar.
    base["TFDISTRIBUTED_LAUNCHED"] = "1"
    # R targets use reticulate: make it attach to this very Python, with the backend importable.
    base.setdefault("RETICULATE_PYTHON", python)
    if is_function:
        # cloudpickle sends functions of importable modules by reference: the child must be able
        # to import them from where this process does.
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        base["PYTHONPATH"] = os.pathsep.join(
            paths + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p])
    return base


def host_of(address: str) -> str:
    """The host part of a task's ``host:port``."""
    return parse_address(address)[0]


def hosts_of(cluster: Cluster | None, hosts) -> list:
    """The hosts of ``hosts`` that the tasks of ``cluster`` run on, chief and worker 0's first:
    the places of an elastic local job (none for a cluster on this machine alone, or none
    given: it cannot be lost without the launcher)."""
    if not hosts or cluster is None:
        return []
    found = [host_of(cluster.address(r, i)) for r, i in cluster.tasks()]
    return [h for n, h in enumerate(found) if h in hosts and h not in found[:n]]


def on_hosts(cluster: Cluster, hosts) -> Cluster:
    """``cluster`` without its tasks off ``hosts``, each role's tasks numbered again from 0 in
    their order (an elastic job on fewer hosts: a multi-worker job, ``Scaling`` refusing
    ``min_workers`` with ps tasks, whose chief and variables could not move)."""
    hosts = set(hosts)
    jobs = {role: [a for a in cluster.as_dict()[role] if host_of(a) in hosts]
            for role, _ in cluster.jobs}
    return Cluster.of({role: addresses for role, addresses in jobs.items() if addresses})


def plan_launch(target, cluster: Cluster, tasks=None, *, env=None, args=(), python=None,
                rscript=None, cwd=None, prepare_task=None, hosts=None,
                gpus_per_task=None) -> LaunchPlan:
    """Each task's argv, environment and TF_CONFIG, for one attempt to start.

    ``cluster`` was checked already (:func:`~tfdistributed.cluster.checked_local`: loopback
    addresses or ``hosts`` only); here the ports of the tasks to start here must be free. A
    task on one of ``hosts`` (checked by :class:`~tfdistributed.engines.options.Local`) runs
    behind that host's command prefix; the others get their share of this machine's GPUs
    (``gpus_per_task``, :func:`~tfdistributed.engines.gpus.local_shares`). The plan's
    ``workdir`` holds a function target's call and results and is the caller's to remove.
    """
    hosts = hosts or {}
    wanted = _chosen_tasks(cluster, tasks)
    # Ports on the caller's hosts are theirs to check: they are not this machine's.
    _check_ports(cluster, [(r, i) for r, i in wanted
                           if parse_address(cluster.address(r, i))[0] not in hosts])
    python = python or sys.executable
    workdir = tempfile.mkdtemp(prefix="tfdistributed-launch-")
    try:
        argv, is_function = target_argv(target, args, python, rscript, workdir)
        base = _base_env(env, python, is_function)
        planned = [_plan_task(cluster, role, i, n, argv, base, python, workdir, is_function)
                   for n, (role, i) in enumerate(wanted)]
        for task in planned:
            task.argv[:0] = hosts.get(parse_address(task.address)[0], [])
        _share_gpus([t for t in planned if host_of(t.address) not in hosts], base,
                    gpus_per_task)
        for task in planned if prepare_task is not None else ():
            prepare_task(task)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    elsewhere = [t for t in cluster.tasks() if t not in wanted]
    return LaunchPlan(cluster, planned, elsewhere, workdir, cwd)


def _share_gpus(tasks: list, base: dict, gpus_per_task) -> None:
    """Each task's ``CUDA_VISIBLE_DEVICES``: its share of the GPUs found with ``base``, the
    environment the tasks start from."""
    gpus, found = visible_gpus(base)
    keys = [(t.task_type, t.task_index, trains(t.task_type, t.parameter_server)) for t in tasks]
    shares = local_shares(gpus, keys, gpus_per_task, found)
    for task, key in zip(tasks, keys):
        if key in shares:
            task.gpus = task.env[VISIBLE_ENV] = shares[key]


def _plan_task(cluster: Cluster, role, i, position, argv, base, python, workdir,
               is_function) -> TaskPlan:
    """One task: the target (or, in a parameter-server cluster, a server) with its TF_CONFIG."""
    ps_mode = cluster.parameter_server
    server = ps_mode and role in ("worker", "ps")
    task = TaskPlan(role, i, cluster.address(role, i), position,
                    [python, "-m", "tfdistributed", "server"] if server else list(argv),
                    dict(base, TF_CONFIG=json.dumps(cluster.tf_config(role, i))), server, ps_mode)
    if is_function and not server:
        task.result_path = os.path.join(workdir, f"{role}-{i}.result.pkl")
        task.argv.append(task.result_path)
    return task
