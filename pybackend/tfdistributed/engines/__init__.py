"""Where a job runs: :func:`launch` and the engines behind it, one protocol for all of them.

===============  ==========================================================================
module           what it holds
===============  ==========================================================================
``launch``       :func:`~.launch.launch` (checks what it is given into a plan, makes the
                 plan's engine, watches the job) and :func:`~.launch.run_server` (a
                 parameter-server task's server)
``options``      what ``launch()`` is given besides the target and the cluster's shape, as
                 objects: the engines (:class:`Local`, :class:`Slurm`, :class:`Ray`),
                 :class:`~.options.Restarts`, :class:`~.options.Watch`; and
                 :class:`~.options.JobPlan`, the whole call checked, from which every engine's
                 launcher is made
``deprecated``   ``launch()``'s keyword arguments of before the option objects, folded into
                 them for one release, with a warning
``base``         the protocol (:class:`~.base.Launcher` makes one :class:`~.base.Job` per
                 attempt: ``start()``, ``wait(deadline)``, ``results()``, ``stop()``), the
                 result types, how a target is run
``restarts``     the one attempt loop that drives any engine (:func:`~.restarts.run`) and
                 the restart policy (``Restarts(max_restarts=)``)
``output``       what is done with the lines the tasks print, the same on every engine
``gpus``         which GPUs each task gets (``gpus_per_task`` of every engine): its share of
                 this machine's in its ``CUDA_VISIBLE_DEVICES``, SLURM's ``--gpus-per-task``,
                 Ray's ``num_gpus``
``attribution``  which task's end caused a failed attempt: by each end's time and kind (a
                 peer's "lost contact" is never the cause of a kill), every engine alike
``local/``       processes on this machine, or on hosts the caller names (:class:`Local`)
``slurm/``       SLURM: the ``sbatch`` engine (:class:`Slurm`), its batch script, the
                 task-side wrapper ``srun`` starts; the public names of SLURM
``ray/``         Ray actors (:class:`Ray`)
``elastic/``     hosts that come and go: which places each attempt runs on, a job that
                 shrinks when a host is gone for good (``min_workers``) and grows when it is
                 back, every engine alike
``warm/``        warm starts for the local engine (``Local(warm_start=True)``): tasks forked
                 from a server that imported TensorFlow once, instead of importing it each
===============  ==========================================================================

:data:`ENGINES` maps each engine's name to its launcher. A launcher's module is imported only
when a job runs on it (:func:`engine`), the option objects being plain values: a process that
builds a strategy, or a SLURM task reading its environment
(:mod:`tfdistributed.cluster.from_slurm`), never loads the ``sbatch`` engine.

Layer: the top (beside ``r``). Imports ``cluster``, ``strategies.runtime`` (settings a task
needs before TensorFlow starts) and ``watch`` (the launcher's side of the task-to-launcher
channel); never ``training`` or ``data``: tasks train in their own processes.
"""

from __future__ import annotations

import importlib

from ..errors import ArgumentTypeError, did_you_mean
from .deprecated import regroup
from .options import Engine, JobPlan, Local, Ray, Slurm

__all__ = ["ENGINES", "Engine", "JobPlan", "Local", "Ray", "Slurm", "engine", "regroup"]

#: engine name (``Local.name``...) -> (module of this package, its launcher class).
ENGINES = {"local": ("local.supervisor", "LocalLauncher"),
           "slurm": ("slurm.launcher", "SlurmLauncher"),
           "ray": ("ray.launcher", "RayLauncher")}


def engine(backend) -> type:
    """The launcher class of the engine named ``backend`` (``"local"``, ``"slurm"`` or
    ``"ray"``), made with ``(plan, watch)``.

    Raises:
        ArgumentTypeError: an unknown engine (naming the closest one).

    Example:
        >>> engine("local").__name__
        'LocalLauncher'
    """
    if not isinstance(backend, str) or backend not in ENGINES:
        raise ArgumentTypeError(f"`backend` must be 'local', 'slurm' or 'ray', got {backend!r}."
                                f"{did_you_mean(str(backend), tuple(ENGINES))}")
    module, name = ENGINES[backend]
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
