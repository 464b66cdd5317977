"""SLURM's environment read by a task of a job step: its TF_CONFIG, with no SLURM code in the
script.

Why a module of its own: every process that builds a strategy reads this
(:mod:`tfdistributed.strategies`), and a task started by ``srun`` reads it to find its cluster
(:mod:`tfdistributed.engines.slurm.task`); neither submits jobs, so neither should import the
``sbatch`` engine (:mod:`tfdistributed.engines.slurm.launcher`). The public face of SLURM is
:mod:`tfdistributed.engines.slurm`, which re-exports these names with
:func:`~tfdistributed.engines.slurm.slurm_script`.

Inside a task
-------------
``srun -n 4 python train.py`` (or ``Rscript train.R``) starts one task per process. Each task
finds its cluster in SLURM's environment, and :func:`tf_config_from_slurm` turns that into the
TF_CONFIG TensorFlow reads; ``make_strategy("auto")`` / ``distribute_strategy("auto")`` does this
by itself when TF_CONFIG is not set and the step has 2 or more tasks, so the training script has
no SLURM code at all. TensorFlow's own ``SlurmClusterResolver`` is not used: it runs
``nvidia-smi`` on every node and fails on CPU-only nodes (``FileNotFoundError``, or
``range() arg 3 must not be zero`` with ``gpus_per_node=0``).

==============================  ===============================================================
TF_CONFIG                       from
==============================  ===============================================================
number of tasks                 ``SLURM_STEP_NUM_TASKS`` (else ``SLURM_NTASKS``)
this task                       ``SLURM_PROCID``
hosts                           ``SLURM_STEP_NODELIST`` (else ``SLURM_JOB_NODELIST``), expanded
                                with ``scontrol show hostnames``; tasks are laid out on them as
                                ``SLURM_STEP_TASKS_PER_NODE`` and ``SLURM_DISTRIBUTION`` say
                                (block, the default, or cyclic), and each task checks that its
                                own place matches ``SLURM_NODEID`` and ``SLURM_LOCALID``;
                                inside a job (``SLURM_JOB_ID``), a node whose address SLURM
                                knows (``NodeAddr`` from ``scontrol show node``) differs from
                                its name is given by that address, since node names need not
                                resolve on the nodes
ports                           SLURM's reserved ports of the step (``SLURM_STEP_RESV_PORTS``,
                                with ``srun --resv-ports`` or ``MpiParams=ports=...``): task with
                                local id ``i`` on a node takes the ``i``-th; without them
                                ``port_base + i``, where ``port_base`` is the argument, else
                                ``TFDISTRIBUTED_SLURM_PORT_BASE``, else 15000. Tasks on one node
                                never collide; two jobs sharing a node need reserved ports or
                                different bases.
roles                           all ``worker`` by default; ``ps=N`` (or
                                ``TFDISTRIBUTED_SLURM_PS``) makes tasks 1..N ``ps`` and task 0
                                the ``chief`` (the parameter-server coordinator);
                                ``chief=True`` (or ``TFDISTRIBUTED_SLURM_CHIEF=1``) makes task 0
                                the chief of a multi-worker job
==============================  ===============================================================

"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess

from .._args import as_int
from .spec import format_address, tf_config
from ..errors import ClusterConfigError

_log = logging.getLogger(__name__)
DEFAULT_PORT_BASE = 15000
PORT_BASE_VARIABLE = "TFDISTRIBUTED_SLURM_PORT_BASE"
PS_VARIABLE = "TFDISTRIBUTED_SLURM_PS"
CHIEF_VARIABLE = "TFDISTRIBUTED_SLURM_CHIEF"


def _env_int(env, name, default=None):
    value = env.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ClusterConfigError(f"{name}={value!r} is not a whole number; SLURM sets it to one, "
                                 f"so check what else set it.") from None


def slurm_tasks(env=None) -> int:
    """How many tasks this SLURM job step has.

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        ``SLURM_STEP_NUM_TASKS`` (else ``SLURM_NTASKS``, else 1) inside a job step (a process
        started by ``srun``), 0 outside one.

    Raises:
        ClusterConfigError: a SLURM variable that is not a whole number.

    Example:
        >>> slurm_tasks({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4"})
        4
        >>> slurm_tasks({})
        0
    """
    env = os.environ if env is None else env
    if "SLURM_PROCID" not in env or "SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env:
        return 0
    return _env_int(env, "SLURM_STEP_NUM_TASKS", _env_int(env, "SLURM_NTASKS", 1))


def expand_hostnames(nodelist: str) -> list:
    """A SLURM node list expanded into host names, with ``scontrol show hostnames``.

    Args:
        nodelist: SLURM's compressed node list, e.g. ``"node[01-03],gpu7"``.

    Returns:
        The host names, e.g. ``["node01", "node02", "node03", "gpu7"]``; a single plain name
        is returned as is, without calling ``scontrol``.

    Raises:
        ClusterConfigError: ``scontrol`` is not on PATH, or it refuses the list.

    Example:
        >>> expand_hostnames("n1")
        ['n1']
    """
    if not re.search(r"[\[,]", nodelist):
        return [nodelist]
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        raise ClusterConfigError(
            f"The SLURM node list {nodelist!r} needs `scontrol show hostnames` to expand, and "
            f"scontrol is not on PATH: run inside the job with SLURM's client tools on PATH.")
    done = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0:
        raise ClusterConfigError(
            f"`scontrol show hostnames {nodelist}` failed: {done.stderr.strip()}")
    return done.stdout.split()


def node_addresses(names, env=None) -> list:
    """Each node's address as SLURM knows it (``NodeAddr``), in place of its name.

    SLURM reaches a node at its ``NodeAddr``; when that differs from the node's name (nodes
    named ``gpu7`` at ``10.1.2.7``, or not in DNS), only the address is sure to work for
    TensorFlow too. Outside a job (no ``SLURM_JOB_ID``) or without ``scontrol`` the names are
    kept, as they are when ``scontrol show node`` fails (with a logged warning).

    Args:
        names: node names, as :func:`expand_hostnames` gives them.
        env: the environment to read (default ``os.environ``).

    Returns:
        The addresses (or names), in the order of ``names``.

    Example:
        >>> node_addresses(["n1", "n2"], {})
        ['n1', 'n2']
    """
    env = os.environ if env is None else env
    scontrol = shutil.which("scontrol")
    if not names or "SLURM_JOB_ID" not in env or scontrol is None:
        return list(names)
    # One request for all nodes: every task asks slurmctld once.
    done = subprocess.run([scontrol, "-o", "show", "node", ",".join(names)], capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0:
        _log.warning("`scontrol show node` failed (%s); the cluster uses the node names %s, which "
                     "must resolve on every node.", done.stderr.strip(), ", ".join(names))
        return list(names)
    known = dict(re.findall(r"NodeName=(\S+)\s.*?NodeAddr=(\S+)", done.stdout))
    return [known.get(name, name) for name in names]


def _tasks_per_node(spec: str, nodes: int) -> list:
    """``"2(x3),1"`` (SLURM's compressed counts) -> ``[2, 2, 2, 1]``."""
    counts = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ClusterConfigError(f"Cannot read SLURM's tasks per node {spec!r}.")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    if len(counts) != nodes:
        raise ClusterConfigError(f"SLURM's tasks per node {spec!r} names {len(counts)} nodes, the "
                                 f"node list has {nodes}.")
    return counts


def _placement(counts: list, distribution: str) -> list:
    """(node index, local id) of every task, in task order, as srun lays them out."""
    kind = (distribution or "block").split(":")[0].split(",")[0]
    if kind in ("block", ""):
        return [(n, i) for n, count in enumerate(counts) for i in range(count)]
    if kind == "cyclic":
        placed, used = [], [0] * len(counts)
        while len(placed) < sum(counts):
            for n, count in enumerate(counts):
                if used[n] < count:
                    placed.append((n, used[n]))
                    used[n] += 1
        return placed
    raise ClusterConfigError(
        f"SLURM_DISTRIBUTION={distribution!r}: tfdistributed works out where the other tasks run "
        f"for the 'block' (the default) and 'cyclic' distributions only. Run srun with "
        f"--distribution=block, or set TF_CONFIG yourself.")


def _ports(env, port_base, per_node: int) -> list:
    reserved = env.get("SLURM_STEP_RESV_PORTS")
    if reserved:
        ports = []
        for part in reserved.split(","):
            low, _, high = part.partition("-")
            ports += list(range(int(low), int(high or low) + 1))
        if len(ports) >= per_node:
            return ports
    if port_base is None:
        port_base = _env_int(env, PORT_BASE_VARIABLE, DEFAULT_PORT_BASE)
    port_base = as_int(port_base, "port_base", minimum=1)
    if port_base + per_node > 65535:
        raise ClusterConfigError(f"port_base {port_base} + {per_node} tasks per node is beyond "
                                 f"port 65535: pick a base such as {DEFAULT_PORT_BASE}.")
    return list(range(port_base, port_base + per_node))


def task_roles(n: int, ps: int, chief: bool) -> list:
    """(role, index) of each task in task order: chief first, then ps, then workers."""
    if ps and n < ps + 2:
        raise ClusterConfigError(
            f"A parameter-server job with {ps} ps task(s) needs at least {ps + 2} SLURM tasks (a "
            f"chief, the ps tasks and one worker); this step has {n}. Start more tasks (srun -n) "
            f"or fewer ps.")
    roles = [("chief", 0)] if (chief or ps) else []
    roles += [("ps", i) for i in range(ps)]
    roles += [("worker", i) for i in range(n - len(roles))]
    return roles


def layout(workers, ps, chief) -> list:
    """(role, index) of each task of a job submitted with these counts, in SLURM task order:
    the order in which :func:`slurm_cluster` will give the tasks their roles."""
    workers = as_int(workers, "workers", minimum=1)
    ps = as_int(ps, "ps", minimum=0)
    return task_roles(workers + ps + int(bool(chief or ps)), ps, bool(chief))


def slurm_cluster(env=None, *, port_base=None, ps=None, chief=None):
    """The cluster dict of this SLURM job step and this task's (role, index).

    See the module docstring for where each part comes from.

    Args:
        env, port_base, ps, chief: as for :func:`tf_config_from_slurm`.

    Returns:
        ``(cluster, (role, index))``: the cluster dict and this task's place in it.

    Raises:
        ClusterConfigError: not inside ``srun``, or a task layout we cannot derive.

    Example:
        >>> env = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "3",
        ...        "SLURM_STEP_NODELIST": "n1", "SLURM_STEP_TASKS_PER_NODE": "3"}
        >>> slurm_cluster(env, ps=1)
        ({'chief': ['n1:15000'], 'ps': ['n1:15001'], 'worker': ['n1:15002']}, ('chief', 0))
    """
    env = os.environ if env is None else env
    n = slurm_tasks(env)
    if n == 0:
        raise ClusterConfigError(
            "This process is not a task of a SLURM job step (SLURM_PROCID and SLURM_STEP_ID are "
            "not set): start it with srun, e.g. `srun -n 2 python train.py`.")
    nodelist = (env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
                or env.get("SLURM_NODELIST"))
    if not nodelist:
        raise ClusterConfigError(
            "SLURM sets no node list (SLURM_STEP_NODELIST / SLURM_JOB_NODELIST) for this task: "
            "run it with srun inside a job.")
    hosts = node_addresses(expand_hostnames(nodelist), env)
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or str(n)
    counts = _tasks_per_node(spec, len(hosts))
    placement = _placement(counts, env.get("SLURM_DISTRIBUTION", ""))
    if len(placement) != n:
        raise ClusterConfigError(f"SLURM's tasks per node {spec!r} add up to {len(placement)} "
                                 f"tasks, the step has {n}.")
    rank = _env_int(env, "SLURM_PROCID")
    mine = (_env_int(env, "SLURM_NODEID", placement[rank][0]),
            _env_int(env, "SLURM_LOCALID", placement[rank][1]))
    if placement[rank] != mine:
        raise ClusterConfigError(
            f"SLURM task {rank} runs on node {mine[0]} as local task {mine[1]}, but the layout "
            f"tfdistributed derived ({spec!r}, distribution "
            f"{env.get('SLURM_DISTRIBUTION') or 'block'!r}) puts it at {placement[rank]}: run srun "
            f"with --distribution=block, or set TF_CONFIG yourself.")
    ports = _ports(env, port_base, max(counts))
    ps = _env_int(env, PS_VARIABLE, 0) if ps is None else as_int(ps, "ps", minimum=0)
    if chief is None:
        chief = env.get(CHIEF_VARIABLE, "").lower() in ("1", "true", "yes")
    roles = task_roles(n, ps, bool(chief))
    cluster: dict = {}
    for (role, _), (node, local) in zip(roles, placement):
        cluster.setdefault(role, []).append(format_address(hosts[node], ports[local]))
    return cluster, roles[rank]


def tf_config_from_slurm(env=None, *, port_base=None, ps=None, chief=None) -> dict:
    """The TF_CONFIG of this task of a SLURM job step (as a dict; it is not set).

    Args:
        env: the environment to read (default ``os.environ``).
        port_base: first port when SLURM reserved none for the step (default
            ``TFDISTRIBUTED_SLURM_PORT_BASE``, else 15000); task ``i`` of a node takes
            ``port_base + i``.
        ps: number of parameter-server tasks (tasks 1..ps; task 0 becomes the chief).
        chief: make task 0 the chief (implied by ``ps``).

    Returns:
        The TF_CONFIG dict (``{"cluster": ..., "task": {"type": ..., "index": ...}}``).

    Raises:
        ClusterConfigError: not inside ``srun``, or a task layout we cannot derive.

    Example:
        >>> env = {"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2",
        ...        "SLURM_STEP_NODELIST": "n1", "SLURM_STEP_TASKS_PER_NODE": "2",
        ...        "SLURM_LOCALID": "1", "SLURM_NODEID": "0"}
        >>> tf_config_from_slurm(env)
        {'cluster': {'worker': ['n1:15000', 'n1:15001']}, 'task': {'type': 'worker', 'index': 1}}
    """
    cluster, (role, index) = slurm_cluster(env, port_base=port_base, ps=ps, chief=chief)
    return tf_config(cluster, role, index)


def set_tf_config_from_slurm_if_needed() -> dict | None:
    """In a SLURM job step of 2+ tasks without TF_CONFIG, set TF_CONFIG from SLURM.

    Called by ``make_strategy`` before it reads TF_CONFIG, so training scripts need no SLURM
    code. An explicit TF_CONFIG always wins.

    Returns:
        The TF_CONFIG dict that was set, or None when nothing was set.

    Raises:
        ClusterConfigError: as :func:`tf_config_from_slurm`.
    """
    if "TF_CONFIG" in os.environ or slurm_tasks() < 2:
        return None
    config = tf_config_from_slurm()
    os.environ["TF_CONFIG"] = json.dumps(config)
    return config
