"""SLURM: TF_CONFIG from a job step's own environment, and jobs submitted with ``sbatch``.

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

Submitting
----------
:func:`launch_slurm` (``launch(target, workers=N, backend="slurm")``) writes a batch script
(:func:`slurm_script`, also for printing and keeping), submits it with ``sbatch``, streams each
task's output file with its role (``[worker 1] ...``), waits up to the timeout, and returns a
:class:`~tfdistributed.launch.LaunchResult`; on a failed task, the timeout, or an interrupt it
cancels the job with ``scancel``. The job's directory (script, per-task output, exit codes and
function results) must be on storage the submitting machine and the nodes share.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from ._args import as_int
from ._job import ATTEMPT_ENV, PREEMPTED_EXIT_CODE
from ._output import Relay, error_summary, how_it_ended
from ._restarts import Restarts, failure_of, restarting
from .cluster import format_address, tf_config
from .errors import ArgumentTypeError, ClusterConfigError, LaunchError, LaunchTimeoutError

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
        raise ClusterConfigError(f"`scontrol show hostnames {nodelist}` failed: {done.stderr.strip()}")
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
        raise ClusterConfigError(f"port_base {port_base} + {per_node} tasks per node is beyond port "
                                 f"65535: pick a base such as {DEFAULT_PORT_BASE}.")
    return list(range(port_base, port_base + per_node))


def _roles(n: int, ps: int, chief: bool) -> list:
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
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise ClusterConfigError("SLURM sets no node list (SLURM_STEP_NODELIST / SLURM_JOB_NODELIST) "
                                 "for this task: run it with srun inside a job.")
    hosts = node_addresses(expand_hostnames(nodelist), env)
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or str(n)
    counts = _tasks_per_node(spec, len(hosts))
    placement = _placement(counts, env.get("SLURM_DISTRIBUTION", ""))
    if len(placement) != n:
        raise ClusterConfigError(f"SLURM's tasks per node {spec!r} add up to {len(placement)} tasks, "
                                 f"the step has {n}.")
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
    roles = _roles(n, ps, bool(chief))
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


def _layout(workers, ps, chief) -> list:
    workers = as_int(workers, "workers", minimum=1)
    ps = as_int(ps, "ps", minimum=0)
    return _roles(workers + ps + int(bool(chief or ps)), ps, bool(chief))


def slurm_script(target, workers=2, ps=0, chief=False, *, args=(), env=None, directory=None,
                 job_name="tfdistributed", partition=None, time_limit=None, sbatch_args=(),
                 srun_args=(), python=None, rscript="Rscript", argv=None,
                 preemption_notice=120, requeue=True) -> str:
    """The ``sbatch`` script that runs ``target`` as a SLURM job (to print, keep or submit).

    Every task runs the target through ``python -m tfdistributed._slurm_task``, which sets its
    TF_CONFIG from SLURM's environment (see the module docstring), writes its exit code, and in
    parameter-server jobs runs the ``worker``/``ps`` servers until the chief is done. Each task's
    output goes to ``DIRECTORY/task-N.out``.

    Args:
        target: a ``.py`` or ``.R`` script (function targets need :func:`launch_slurm`).
        workers, ps, chief: the tasks; ``ps > 0`` adds the chief (the coordinator).
        args: command-line arguments for the script.
        env: extra environment variables for every task.
        directory: the job's directory on storage the nodes share; default
            ``tfdistributed-$SLURM_JOB_ID`` in the submission directory.
        job_name, partition: ``sbatch --job-name`` / ``--partition``.
        time_limit: minutes for ``sbatch --time`` (SLURM stops the job then).
        preemption_notice: with ``time_limit``, seconds before it at which SLURM sends the tasks
            SIGTERM (``--signal=TERM@N``; SLURM may send it up to a minute early). A training
            script calling ``fit(backup_dir=...)`` then backs up at its next backup step and
            exits with status 75 (:data:`tfdistributed.PREEMPTED_EXIT_CODE`). None: no notice.
        requeue: let SLURM requeue the job when it preempts it or loses a node
            (``--requeue``), and requeue it from the script when the tasks stopped because
            they were told to (status 75), so it resumes from its backup by itself.
            ``launch(backend="slurm")`` passes False: it resubmits under ``max_restarts``.
        sbatch_args, srun_args: more options, e.g. ``["--gres=gpu:1"]``, ``["--resv-ports"]``.
        python, rscript: interpreters on the nodes (default: this Python, ``Rscript``).
        argv: the command each task runs, instead of the one derived from ``target``.

    Returns:
        The batch script, as text.

    Raises:
        ArgumentTypeError: ``target`` is a function, or a wrong count.
        LaunchError: the script does not exist or is neither ``.py`` nor ``.R``.

    Example:
        >>> print(slurm_script("train.R", workers=4, partition="gpu"))   # doctest: +SKIP
    """
    roles = _layout(workers, ps, chief)
    python = python or sys.executable
    # One option given as a string (R's "--gres=gpu:1") is one option, not its characters.
    sbatch_args = [sbatch_args] if isinstance(sbatch_args, str) else list(sbatch_args)
    srun_args = [srun_args] if isinstance(srun_args, str) else list(srun_args)
    if argv is None:
        from ._job import _target_argv

        if callable(target):
            raise ArgumentTypeError("slurm_script() writes a script for a .py or .R file; to run a "
                                    "Python function on SLURM use launch(fn, backend='slurm').")
        argv, _ = _target_argv(os.path.abspath(os.fspath(target)), args, python, rscript, None)
    # SLURM opens the batch output file before the script runs, so it cannot go into a
    # directory the script creates.
    batch_out = f"{directory}/job.out" if directory else "tfdistributed-%j.out"
    directory = directory or "tfdistributed-$SLURM_JOB_ID"
    q = shlex.quote
    lines = ["#!/bin/bash",
             f"# Written by tfdistributed: {len(roles)} tasks "
             f"({', '.join(f'{r} {i}' for r, i in roles)}), one TensorFlow process each.",
             f"#SBATCH --job-name={job_name}", f"#SBATCH --ntasks={len(roles)}",
             f"#SBATCH --output={batch_out}"]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time_limit:
        lines.append(f"#SBATCH --time={int(math.ceil(time_limit))}")
        if preemption_notice:
            notice = as_int(preemption_notice, "preemption_notice", minimum=1)
            lines.append(f"#SBATCH --signal=TERM@{notice}")
    if requeue:
        lines.append("#SBATCH --requeue")
    lines += [f"#SBATCH {a}" for a in sbatch_args]
    exports = {PS_VARIABLE: str(int(ps)), CHIEF_VARIABLE: str(int(bool(chief or ps))),
               "PYTHONUNBUFFERED": "1", "TFDISTRIBUTED_LAUNCHED": "1",
               "RETICULATE_PYTHON": os.environ.get("RETICULATE_PYTHON", python)}
    exports.update({str(k): str(v) for k, v in (env or {}).items()})
    # Written in the job, not at submission: the job's own directory name needs its id.
    lines += ["", f'JOBDIR="{directory}"', 'mkdir -p "$JOBDIR"']
    lines += [f"export {k}={q(v)}" for k, v in exports.items()]
    srun = ["srun", "--kill-on-bad-exit=1", '--output="$JOBDIR/task-%t.out"', *map(q, srun_args),
            q(python), "-m", "tfdistributed._slurm_task", '"$JOBDIR"', "--", *map(q, argv)]
    lines += ["", " ".join(srun)]
    if requeue:
        # The tasks stopped because they were told to (a preemption notice), with a backup
        # written: back in the queue, the job resumes from it.
        lines += ["status=$?", f'if [ "$status" -eq {PREEMPTED_EXIT_CODE} ]; then',
                  '  scontrol requeue "$SLURM_JOB_ID"', "fi", 'exit "$status"']
    return "\n".join(lines) + "\n"


class _Tail:
    """New complete lines of a file that another machine (a SLURM task) is writing."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self, final=False) -> list:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        return [line.decode(errors="replace") for line in lines]


def _slurm(argv, timeout=30.0) -> subprocess.CompletedProcess:
    tool = shutil.which(argv[0])
    if tool is None:
        raise LaunchError(f"{argv[0]} is not on PATH: launch(..., backend='slurm') submits with "
                          f"SLURM's client tools (Debian: slurm-client); run it on a machine that "
                          f"can submit jobs.")
    return subprocess.run([tool, *argv[1:]], capture_output=True, text=True, timeout=timeout)


def _job_state(job_id: str) -> tuple:
    """(state, reason) of a job SLURM still knows, else ("", "")."""
    done = _slurm(["squeue", "-h", "-j", job_id, "-o", "%T|%r"])
    if done.returncode != 0 or not done.stdout.strip():
        return "", ""
    state, _, reason = done.stdout.strip().partition("|")
    return state, reason


def _cancel(job_id: str, wait: float = 30.0) -> None:
    """scancel the job and wait until SLURM has let go of it (so its CPUs are free again)."""
    _slurm(["scancel", job_id])
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _job_state(job_id)[0]:
        time.sleep(0.3)


def _write_job(target, workers, ps, chief, *, jobdir, base, timeout, env, args, python, rscript,
               job_name, partition, sbatch_args, srun_args):
    """The plan: the job's batch script, written into ``jobdir``; its path, and whether the
    target is a function (whose call and results go through ``jobdir`` too)."""
    from ._job import _target_argv

    sbatch_args = [sbatch_args] if isinstance(sbatch_args, str) else list(sbatch_args)
    python = python or sys.executable
    argv, is_function = _target_argv(target, args, python, rscript, jobdir)
    task_env = dict(env or {})
    if is_function:
        argv = [*argv, os.path.join(jobdir, "result-{task}.pkl")]
        # The function may live in a module importable only from this process's sys.path.
        task_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    script = slurm_script(target, workers, ps, chief, env=task_env, directory=jobdir,
                          job_name=job_name, partition=partition, requeue=False,
                          preemption_notice=None,
                          time_limit=timeout / 60 + 1, sbatch_args=[f"--chdir={base}", *sbatch_args],
                          srun_args=srun_args, python=python, rscript=rscript, argv=argv)
    script_path = os.path.join(jobdir, "job.sh")
    with open(script_path, "w") as f:
        f.write(script)
    return script_path, is_function


class _SlurmJob:
    """The supervisor of a submitted job: follows each task's output file and exit code (the
    only channels from the nodes), fails on the first failed task, and cancels the job."""

    def __init__(self, jobdir: str, roles: list, ps_mode: bool, relay: Relay):
        self.jobdir = jobdir
        self.roles = roles
        self.ps_mode = ps_mode
        self.relay = relay
        self.names = [f"{r} {i}" for r, i in roles]
        self.tails = [_Tail(os.path.join(jobdir, f"task-{i}.out")) for i in range(len(roles))]
        self.lines = [[] for _ in roles]
        self.job_id = None
        self.state, self.reason = "PENDING", ""
        self.finished = False
        self.t0 = time.monotonic()

    def submit(self, script_path: str, on_output) -> None:
        done = _slurm(["sbatch", "--parsable", script_path])
        if done.returncode != 0:
            raise LaunchError(f"sbatch refused the job: {done.stderr.strip() or done.stdout.strip()}. "
                              f"The script is {script_path}.")
        self.job_id = done.stdout.strip().split(";")[0]
        if on_output is not None:
            on_output(f"[launch] submitted SLURM job {self.job_id} ({len(self.roles)} tasks)")
        self.t0 = time.monotonic()

    def emit(self, final=False) -> None:
        for i, name in enumerate(self.names):
            self.relay.emit(name, self.tails[i].read(final), self.lines[i])

    def codes(self) -> list:
        out = []
        for i in range(len(self.roles)):
            try:
                with open(os.path.join(self.jobdir, f"task-{i}.rc")) as f:
                    out.append(int(f.read().strip()))
            except (FileNotFoundError, ValueError):
                out.append(None)
        return out

    def results(self, rcs) -> list:
        from ._job import TaskResult

        self.emit(final=True)
        return [TaskResult(r, i, rc, list(out), None, self.ps_mode and r != "chief")
                for (r, i), rc, out in zip(self.roles, rcs, self.lines)]

    def wait(self, timeout: float, poll: float) -> None:
        """Until the tasks that run the target are done (and the step has ended), or raise."""
        last_state_check = 0.0
        while True:
            self.emit()
            rcs = self.codes()
            if any(rc not in (None, 0) for rc in rcs):
                self._fail()
            primaries = [rc for (r, _), rc in zip(self.roles, rcs) if not self.ps_mode or r == "chief"]
            if all(rc == 0 for rc in primaries):
                if all(rc is not None for rc in rcs) or not _job_state(self.job_id)[0]:
                    break
            if time.monotonic() - last_state_check > 1.0:
                last_state_check = time.monotonic()
                self.state, self.reason = _job_state(self.job_id)
                if not self.state and self._ended():
                    break
            if time.monotonic() - self.t0 > timeout:
                self._time_out(timeout)
            time.sleep(poll)
        # The step ends once every task has; wait for it so the CPUs are free for the next job.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _job_state(self.job_id)[0]:
            time.sleep(poll)
        self.finished = True

    def _fail(self):
        # SLURM kills the other tasks at once (--kill-on-bad-exit), and their exit codes can
        # land first: name the task that failed, not one killed because of it.
        time.sleep(0.5)
        rcs = self.codes()
        bad = [i for i, rc in enumerate(rcs) if rc not in (None, 0)]
        i = min(bad, key=lambda i: (rcs[i] < 0, _mtime(self.jobdir, i)))
        _cancel(self.job_id)
        rcs = self.codes()
        raise LaunchError(f"Task {self.names[i]} {how_it_ended(rcs[i])} (SLURM job {self.job_id}, "
                          f"task {i}); the job was cancelled. {error_summary(self.lines[i])}",
                          self.results(rcs),
                          failure=failure_of(self.names[i], rcs[i], self.lines[i]))

    def _ended(self) -> bool:
        """SLURM no longer knows the job: True if every task succeeded, else raise."""
        self.emit(final=True)
        rcs = self.codes()
        if all(rc == 0 for rc in rcs):
            return True
        missing = [self.names[i] for i, rc in enumerate(rcs) if rc is None]
        raise LaunchError(f"SLURM job {self.job_id} ended before task(s) {', '.join(missing)} "
                          f"reported an exit code. {_job_end(self.job_id, self.jobdir)}",
                          self.results(rcs))

    def _time_out(self, timeout: float):
        rcs = self.codes()
        running = [self.names[i] for i, rc in enumerate(rcs) if rc is None]
        _cancel(self.job_id)
        where = (f"It was still waiting in the queue ({self.reason or self.state}): free the "
                 f"partition or ask for fewer tasks." if self.state == "PENDING" else
                 f"Still running at the timeout: {', '.join(running) or 'none'}.")
        raise LaunchTimeoutError(f"SLURM job {self.job_id} did not finish within {timeout:g} s "
                                 f"and was cancelled. {where}", self.results(self.codes()))

    def collect(self, is_function: bool):
        """The cluster the tasks ran as, and every task's result (a function's return value)."""
        out = self.results(self.codes())
        try:
            with open(os.path.join(self.jobdir, "cluster.json")) as f:
                cluster = json.load(f)
        except (OSError, ValueError):
            cluster = {}
        if is_function:
            for n, res in enumerate(out):
                path = os.path.join(self.jobdir, f"result-{n}.pkl")
                if not res.server and os.path.exists(path):
                    with open(path, "rb") as f:
                        res.value = pickle.load(f)
        return cluster, out


def launch_slurm(target, workers=2, ps=0, chief=False, *, timeout=900.0, max_restarts=0,
                 env=None, args=(), on_output=None, echo=True, python=None, rscript="Rscript",
                 cwd=None, show_all=False, directory=None, keep_files=False, partition=None,
                 sbatch_args=(), srun_args=(), job_name="tfdistributed", poll=0.25):
    """Run ``target`` as a SLURM job; returns a :class:`~tfdistributed.launch.LaunchResult`.

    Also reached as ``launch(target, workers=N, backend="slurm", ...)``. The job runs the
    script of :func:`slurm_script` (``.py``, ``.R`` or a Python function, as :func:`launch`).

    Args:
        timeout: seconds from submission until the job is cancelled (queue time included,
            restarts too); also given to SLURM (``--time``) in case this process dies.
        max_restarts: submit the whole job again up to this many times after a failed task, as
            :func:`launch` restarts a local job (announced, ``TFDISTRIBUTED_ATTEMPT`` in every
            task, the same failure twice in a row ends it).
        directory: the job's directory, on storage this machine and the nodes share; default a
            new directory under ``cwd`` (or the working directory), removed afterwards unless
            ``keep_files``. A restarted job's later attempts use ``attempt-<n>`` in it.
        partition, sbatch_args, srun_args, job_name: passed to ``sbatch`` / ``srun``.
        env, args, on_output, echo, python, rscript, show_all: as for :func:`launch`.

    Returns:
        A :class:`~tfdistributed.launch.LaunchResult`, as :func:`launch`'s; its ``job_id`` is
        the SLURM job id (of the last attempt) and its ``cluster`` the cluster the tasks ran as.

    Raises:
        LaunchError: a task failed (the job is cancelled; on the last attempt) or the job ended
            without its tasks; ``.results`` has every task's outcome.
        LaunchTimeoutError: the job did not finish in time (it is cancelled).

    Example:
        >>> result = launch_slurm("train.py", workers=4, partition="gpu")   # doctest: +SKIP
        >>> [t.returncode for t in result.tasks]                              # doctest: +SKIP
        [0, 0, 0, 0]
    """
    timeout = float(timeout)
    restarts = Restarts(as_int(max_restarts, "max_restarts", minimum=0),
                        Relay(echo=echo, on_output=on_output, show_all=show_all))
    roles = _layout(workers, ps, chief)
    job = dict(target=target, workers=workers, ps=ps, chief=chief, roles=roles,
               base=os.path.abspath(cwd or os.getcwd()), directory=directory,
               keep_files=keep_files, on_output=on_output, poll=poll, timeout=timeout,
               started=time.monotonic())
    options = dict(args=args, python=python, rscript=rscript, job_name=job_name,
                   partition=partition, sbatch_args=sbatch_args, srun_args=srun_args)
    return restarting(lambda attempt: _run_job(
        **job, relay=restarts.relay, options=dict(options, env=dict(
            env or {}, **{ATTEMPT_ENV: str(attempt)})), attempt=attempt), restarts)


def _run_job(target, workers, ps, chief, *, roles, base, directory, keep_files, on_output, poll,
             timeout, started, relay, options, attempt):
    """One attempt: the job written to a directory of its own, submitted, followed until
    ``started + timeout`` and collected; its result, or the error (the job cancelled)."""
    from ._job import LaunchResult

    own_dir = directory is None
    jobdir = tempfile.mkdtemp(prefix="tfdistributed-slurm-", dir=base) if own_dir else \
        os.path.join(directory, f"attempt-{attempt}") if attempt else directory
    os.makedirs(jobdir, exist_ok=True)
    job = _SlurmJob(jobdir, roles, as_int(ps, "ps", minimum=0) > 0, relay)
    try:
        script_path, is_function = _write_job(
            target, workers, ps, chief, jobdir=jobdir, base=base,
            timeout=max(1.0, timeout - (time.monotonic() - started)), **options)
    except BaseException:
        if own_dir:
            shutil.rmtree(jobdir, ignore_errors=True)
        raise
    # Refused by sbatch: the directory stays, for the script the error names.
    job.submit(script_path, on_output)
    job.t0 = started
    try:
        job.wait(timeout, poll)
        cluster, out = job.collect(is_function)
    except BaseException:
        if not job.finished:
            _cancel(job.job_id)
        raise
    finally:
        if own_dir and not keep_files:
            shutil.rmtree(jobdir, ignore_errors=True)
    result = LaunchResult(cluster=cluster, tasks=out, seconds=time.monotonic() - started)
    result.job_id = job.job_id
    return result


def _mtime(jobdir: str, task: int) -> float:
    try:
        return os.path.getmtime(os.path.join(jobdir, f"task-{task}.rc"))
    except OSError:
        return float("inf")


def _job_end(job_id: str, jobdir: str) -> str:
    done = _slurm(["scontrol", "show", "job", job_id])
    found = dict(re.findall(r"(JobState|Reason|ExitCode)=(\S+)", done.stdout))
    try:
        with open(os.path.join(jobdir, "job.out"), errors="replace") as f:
            said = f.read().strip()[-1500:]
    except OSError:
        said = ""
    state = ", ".join(f"{k}={v}" for k, v in found.items()) or "unknown (SLURM forgot it)"
    return f"SLURM says: {state}." + (f" The batch script printed:\n{said}" if said else "")

