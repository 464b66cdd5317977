"""Where a job runs: :func:`launch` and the engines behind it, one protocol for all of them.

=============  ==========================================================================
module         what it holds
=============  ==========================================================================
``launch``     :func:`~.launch.launch` (picks the engine by name, plans the job, watches
               it) and :func:`~.launch.run_server` (a parameter-server task's server)
``base``       the protocol (:class:`~.base.Launcher` makes one :class:`~.base.Job` per
               attempt: ``start()``, ``wait(deadline)``, ``results()``, ``stop()``), the
               result types, how a target is run
``restarts``   the one attempt loop that drives any engine (:func:`~.restarts.run`) and
               the restart policy (``max_restarts=``)
``output``     what is done with the lines the tasks print, the same on every engine
``local/``     processes on this machine, or on hosts the caller names (``backend="local"``)
``slurm/``     SLURM: the ``sbatch`` engine (``backend="slurm"``), its batch script, the
               task-side wrapper ``srun`` starts; the public names of SLURM
``ray/``       Ray actors (``backend="ray"``)
``elastic/``   hosts that come and go: which places each attempt runs on, a job that
               shrinks when a host is gone for good (``min_workers``) and grows when it is
               back, every engine alike
``warm/``      warm starts for the local engine (``warm_start=True``): Python tasks forked
               from a server that imported TensorFlow once, instead of importing it each
=============  ==========================================================================

:data:`ENGINES` maps each backend name to its engine. An engine's module is imported only when
that backend is asked for (:func:`engine`): a process that builds a strategy, or a SLURM task
reading its environment (:mod:`tfdistributed.cluster.from_slurm`), never loads the ``sbatch``
engine.

Layer: the top (beside ``r``). Imports ``cluster``, ``strategies.runtime`` (settings a task
needs before TensorFlow starts) and ``watch`` (the launcher's side of the task-to-launcher
channel); never ``training`` or ``data``: tasks train in their own processes.
"""

from __future__ import annotations

import importlib

from ..errors import ArgumentTypeError, did_you_mean

#: backend name -> (module of this package, its launcher class).
ENGINES = {"local": ("local.supervisor", "LocalLauncher"),
           "slurm": ("slurm.launcher", "SlurmLauncher"),
           "ray": ("ray.launcher", "RayLauncher")}


def engine(backend) -> type:
    """The launcher class of ``backend`` (``"local"``, ``"slurm"`` or ``"ray"``).

    Raises:
        ArgumentTypeError: an unknown backend (naming the closest one).

    Example:
        >>> engine("local").__name__
        'LocalLauncher'
    """
    if not isinstance(backend, str) or backend not in ENGINES:
        raise ArgumentTypeError(f"`backend` must be 'local', 'slurm' or 'ray', got {backend!r}."
                                f"{did_you_mean(str(backend), tuple(ENGINES))}")
    module, name = ENGINES[backend]
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
