"""Where a job runs: :func:`launch` and the engines behind it, one protocol for all of them.

===============  ==========================================================================
module           what it holds
===============  ==========================================================================
``launch``       :func:`~.launch.launch` (checks what it is given into a plan and runs it)
                 and :func:`~.launch.run_server` (a parameter-server task's server)
``options``      what ``launch()`` is given besides the target, as objects: the job's shape
                 (:class:`~.options.Scaling`), :class:`~.options.Restarts`,
                 :class:`~.options.Watch`, the fields every engine has
                 (:class:`~.options.Engine`); and :class:`~.options.JobPlan`, the whole
                 call checked, which the attempt loop runs and every launcher reads
``base``         the protocol (:class:`~.base.Launcher` makes one :class:`~.base.Job` per
                 attempt: ``start()``, ``wait(deadline)``, ``results()``, ``preempt()``,
                 ``stop()``; and ``places()``, ``trainers()``, ``probe()`` for the elastic
                 policy), the result types, how a target is run
``restarts``     the one attempt loop that drives any engine (:func:`~.restarts.run`) and
                 the restart policy (``Restarts(max_restarts=)``)
``output``       what is done with the lines the tasks print, the same on every engine
``gpus``         which GPUs each task gets (``Scaling(gpus_per_task=)``): its share of this
                 machine's in its ``CUDA_VISIBLE_DEVICES``, SLURM's ``--gpus-per-task``,
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

An engine is one folder: its option object (``local/engine.py``'s :class:`Local`...), a
subclass of :class:`~.options.Engine` that checks a job's shape for what the engine can run
and makes the engine's launcher (``plan.engine.launcher(plan, relay)``), and that launcher,
which follows :class:`~.base.Launcher`. The option objects are plain values: a launcher's
module is imported only when a job runs on it, so a process that builds a strategy, or a SLURM
task reading its environment (:mod:`tfdistributed.cluster.from_slurm`), never loads the
``sbatch`` engine. :data:`ENGINES` names them, for the command line.

Layer: the top (beside ``r``). Imports ``cluster``, ``strategies.runtime`` (settings a task
needs before TensorFlow starts) and ``watch`` (the launcher's side of the task-to-launcher
channel); never ``training`` or ``data``: tasks train in their own processes.
"""

from __future__ import annotations

from .local.engine import Local
from .options import Engine, JobPlan, Restarts, Scaling, Watch
from .ray.engine import Ray
from .slurm.engine import Slurm

__all__ = ["ENGINES", "Engine", "JobPlan", "Local", "Ray", "Restarts", "Scaling", "Slurm",
           "Watch"]

#: Each engine's option object by the engine's name (``python -m tfdistributed launch
#: --backend NAME``).
ENGINES = {engine.name: engine for engine in (Local, Slurm, Ray)}
