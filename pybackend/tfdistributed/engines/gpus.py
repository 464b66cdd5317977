"""Which GPUs each task of a job gets: the job's ``Scaling(gpus_per_task=)``
(:class:`~tfdistributed.engines.options.Scaling`), decided here for every engine.

**On this machine** (:class:`~tfdistributed.engines.Local`), the GPUs are those this process may
use: the ``CUDA_VISIBLE_DEVICES`` of the tasks' environment when it is set (this process', or the
``env`` given to ``launch()``), else those ``nvidia-smi -L`` lists (by UUID, which means the same
GPU whatever ``CUDA_DEVICE_ORDER`` says; a GPU split into MIG instances counts as its instances).
TensorFlow is not imported for this: the launcher never starts a TensorFlow runtime of its own. Each
task that trains is given its share in its ``CUDA_VISIBLE_DEVICES``:

- ``gpus_per_task=None`` (the default): the GPUs split evenly among the tasks that train here,
  ``len(gpus) // tasks`` each, the ones left over unused (a multi-worker strategy needs the
  same number of replicas on every worker); with fewer GPUs than tasks, each task gets one and
  tasks share them, GPU ``k`` going to tasks ``k``, ``k + len(gpus)``, ... (TensorFlow's memory
  growth, on by default in :func:`~tfdistributed.make_strategy`, lets two processes share
  one). No GPU found: nothing is set, as before this option existed;
- a number ``n``: ``n`` GPUs each, none shared; more than there are is an error naming the
  fix; ``0`` hides every GPU from every task;
- ``"all"``: every task that trains sees every GPU.

The tasks that train are the chief and the workers of a multi-worker job, and the workers of a
parameter-server job. The ``ps`` tasks (they hold variables) and a parameter-server job's
chief (the coordinator: it sends steps to the workers and computes none) get none: their
``CUDA_VISIBLE_DEVICES`` is ``-1``, because a GPU a process can see is one TensorFlow claims
memory on as it starts, which the workers then lack. Tasks on hosts of the caller's own
(``Local(hosts=)``) are left alone: their GPUs are their host's, not those seen here.

**On SLURM** (:class:`~tfdistributed.engines.Slurm`), ``gpus_per_task=n`` is ``#SBATCH
--gpus-per-task=n``: SLURM gives each task its own ``n`` GPUs (it implies ``--gpu-bind=per_task:n``)
and sets the task's ``CUDA_VISIBLE_DEVICES`` itself. Every task of the job step gets them, ``ps``
tasks too: one ``srun`` starts all the tasks, with one shape.

**On Ray** (:class:`~tfdistributed.engines.Ray`), ``gpus_per_task=n`` is ``num_gpus=n`` in the actor
options of each task that trains (as above); Ray reserves them and sets the actor's
``CUDA_VISIBLE_DEVICES``, which the task inherits.

No GPU run has been measured yet: the machines this project is tested on have none, so what is
checked is the environment and the options each task is given, from a faked list of GPUs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ..errors import ArgumentTypeError

__all__ = ["ALL", "HIDDEN", "VISIBLE_ENV", "check_gpus_per_task", "local_shares",
           "nvidia_smi_gpus", "parse_visible", "ray_actor_options", "slurm_sbatch_options",
           "trains", "visible_gpus"]

#: The variable that says which GPUs a process may use.
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
#: Its value for a task that gets no GPU (CUDA stops at the first invalid index: none).
HIDDEN = "-1"
#: ``gpus_per_task="all"``: every task that trains sees every GPU (the local engine only).
ALL = "all"
#: Seconds ``nvidia-smi -L`` may take.
NVIDIA_SMI_TIMEOUT = 20.0
_GPU_LINE = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[^)\s]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)\s]+)\)")
_TOKEN = re.compile(r"^(\d+|GPU-[\w-]+|MIG-[\w/-]+)$")


def check_gpus_per_task(value, engine: str = "local"):
    """``gpus_per_task`` checked: None, a whole number >= 0, or (local engine) ``"all"``.

    Raises:
        ArgumentTypeError: anything else, naming what the engine takes.
    """
    if value is None:
        return None
    if value == ALL and isinstance(value, str):
        if engine == "local":
            return value
        raise ArgumentTypeError(
            f"`gpus_per_task='all'` is for tasks on this machine; {engine.capitalize()} "
            f"gives each task a number of GPUs: pass that number.",
            hints={"python": "E.g. gpus_per_task=1.", "r": "E.g. gpus_per_task = 1."})
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        choices = "a whole number of GPUs (0 or more)" + (", or 'all'" if engine == "local"
                                                         else "")
        whole = isinstance(value, float) and value.is_integer() and value >= 0
        raise ArgumentTypeError(
            f"`gpus_per_task` must be {choices}, got {type(value).__name__} {value!r}.",
            hints={"python": f"E.g. gpus_per_task={int(value) if whole else 1}.",
                   "r": f"E.g. gpus_per_task = {int(value) if whole else 1}L."})
    return value


def trains(role: str, parameter_server: bool) -> bool:
    """Whether a task of ``role`` holds training replicas: the chief and workers of a
    multi-worker job, the workers of a parameter-server job."""
    return role == "worker" or (role == "chief" and not parameter_server)


def parse_visible(value: str) -> list:
    """The GPUs a ``CUDA_VISIBLE_DEVICES`` value names, as CUDA reads it: up to the first
    entry that is not an index or a UUID (``"-1"`` and ``""`` name none)."""
    gpus = []
    for token in value.split(","):
        token = token.strip()
        if not _TOKEN.match(token):
            break
        gpus.append(token)
    return gpus


def nvidia_smi_gpus(listing: str) -> list:
    """The GPUs of ``nvidia-smi -L``'s output, by UUID; a GPU split into MIG instances as its
    instances."""
    gpus: list = []
    for line in listing.splitlines():
        gpu, mig = _GPU_LINE.match(line), _MIG_LINE.match(line)
        if gpu:
            gpus.append([gpu.group(2)])
        elif mig and gpus:
            if gpus[-1][0].startswith("GPU-"):
                gpus[-1] = []
            gpus[-1].append(mig.group(1))
    return [uuid for instances in gpus for uuid in instances]


def visible_gpus(environ) -> tuple:
    """``(gpus, where they were found)`` for tasks started with the environment ``environ``:
    its ``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L`` (none when it is not installed or
    fails: no driver)."""
    if VISIBLE_ENV in environ:
        value = environ[VISIBLE_ENV]
        return parse_visible(value), f"{VISIBLE_ENV}={value!r}"
    program = shutil.which("nvidia-smi", path=environ.get("PATH", os.defpath))
    if program is None:
        return [], "no nvidia-smi on the PATH"
    try:
        done = subprocess.run([program, "-L"], capture_output=True, text=True,
                              timeout=NVIDIA_SMI_TIMEOUT, env=dict(environ))
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], f"nvidia-smi -L failed ({e})"
    if done.returncode != 0:
        return [], f"nvidia-smi -L failed ({(done.stdout + done.stderr).strip()[:200]})"
    return nvidia_smi_gpus(done.stdout), "nvidia-smi -L"


def local_shares(gpus: list, tasks: list, gpus_per_task=None, found: str = "") -> dict:
    """``{task: CUDA_VISIBLE_DEVICES}`` for the ``tasks`` started on this machine, each a
    ``(role, index, trains)``, from the ``gpus`` found there (``found`` says where, for the
    error); ``{}`` when nothing is to be set (no GPU found, nothing asked). See the module
    docstring for the rules.

    Raises:
        ArgumentTypeError: more GPUs asked for than there are, naming the fix.

    Example:
        >>> local_shares(["0", "1", "2", "3"], [("worker", 0, True), ("worker", 1, True)])
        {('worker', 0, True): '0,1', ('worker', 1, True): '2,3'}
    """
    gpus_per_task = check_gpus_per_task(gpus_per_task)
    trainers = [t for t in tasks if t[2]]
    if not gpus and gpus_per_task in (None, ALL):
        return {}
    if gpus_per_task == ALL:
        given = {t: ",".join(gpus) for t in trainers}
    elif gpus_per_task is None:
        each = len(gpus) // len(trainers) if trainers else 0
        given = {t: (",".join(gpus[n * each:(n + 1) * each]) if each else gpus[n % len(gpus)])
                 for n, t in enumerate(trainers)}
    else:
        wanted = gpus_per_task * len(trainers)
        if wanted > len(gpus):
            raise _too_few(gpus, trainers, gpus_per_task, found)
        given = {t: ",".join(gpus[n * gpus_per_task:(n + 1) * gpus_per_task]) or HIDDEN
                 for n, t in enumerate(trainers)}
    return {t: given.get(t, HIDDEN) for t in tasks}


def _too_few(gpus: list, trainers: list, gpus_per_task: int, found: str) -> ArgumentTypeError:
    where = f" ({found})" if found else ""
    needs = (f"`gpus_per_task={gpus_per_task}` for {len(trainers)} training task(s) needs "
             f"{gpus_per_task * len(trainers)} GPU(s)")
    if not gpus:
        return ArgumentTypeError(
            f"{needs}, and this machine shows none{where}. Run the job where there are GPUs "
            f"(CUDA_VISIBLE_DEVICES naming them, or nvidia-smi listing them), or leave "
            f"gpus_per_task out.")
    fixes = []
    if len(gpus) >= len(trainers):
        fixes.append(f"gpus_per_task={len(gpus) // len(trainers)}")
    if len(gpus) >= gpus_per_task:
        fixes.append(f"at most {len(gpus) // gpus_per_task} training task(s)")
    return ArgumentTypeError(
        f"{needs}, and there are {len(gpus)} here{where}. Ask for "
        f"{' or '.join(fixes) or 'fewer GPUs per task'}; or leave gpus_per_task out (the GPUs "
        f"split evenly, shared when there are fewer than tasks), or give 'all' (every task "
        f"sees every GPU).",
        hints={"python": "E.g. tfd.Scaling(gpus_per_task='all').",
               "r": 'E.g. scaling(gpus_per_task = "all").'})


def slurm_sbatch_options(gpus_per_task) -> list:
    """The ``sbatch`` options of ``Slurm(gpus_per_task=)``: ``["--gpus-per-task=N"]``, or none
    when it is not given (or 0)."""
    gpus_per_task = check_gpus_per_task(gpus_per_task, "slurm")
    return [f"--gpus-per-task={gpus_per_task}"] if gpus_per_task else []


def ray_actor_options(gpus_per_task, role: str, parameter_server: bool) -> dict:
    """The actor options of a task of ``role`` for ``Ray(gpus_per_task=)``: ``{"num_gpus": N}``
    for a task that trains (:func:`trains`), none for the others or when it is not given."""
    gpus_per_task = check_gpus_per_task(gpus_per_task, "ray")
    if gpus_per_task is None or not trains(role, parameter_server):
        return {}
    return {"num_gpus": gpus_per_task}
