"""The batch script of a SLURM job (:func:`slurm_script`): what ``launch(engine=Slurm())``
submits, and what a user can print, keep or submit by hand.

A module of its own, below the engine (:mod:`tfdistributed.engines.slurm.launcher`), so that
:mod:`tfdistributed.engines.slurm` can offer it without importing the engine. Every task of the job
runs ``python -m tfdistributed.engines.slurm.task``, which builds its TF_CONFIG with
:mod:`tfdistributed.cluster.from_slurm`.
"""

from __future__ import annotations

import math
import os
import shlex
import sys

from ..._args import as_int
from ...errors import ArgumentTypeError
from ...cluster.from_slurm import CHIEF_VARIABLE, PS_VARIABLE, layout
from ..base import target_argv
from ..gpus import slurm_sbatch_options
from ..options import check_placed, scaling_of, words
from ...watch.channel import PREEMPTED_EXIT_CODE

#: The SLURM job's name (``sbatch --job-name``).
DEFAULT_JOB_NAME = "tfdistributed"


def slurm_script(target, scaling=None, *, workers=None, args=(), env=None, directory=None,
                 job_name=DEFAULT_JOB_NAME, partition=None, time_limit=None, sbatch_args=(),
                 srun_args=(), python=None, rscript=None, argv=None,
                 preemption_notice=120, requeue=True) -> str:
    """The ``sbatch`` script that runs ``target`` as a SLURM job (to print, keep or submit).

    Every task runs the target through ``python -m tfdistributed.engines.slurm.task``, which sets
    its TF_CONFIG from SLURM's environment (see the module docstring), writes its exit code, and in
    parameter-server jobs runs the ``worker``/``ps`` servers until the chief is done. Each task's
    output goes to ``DIRECTORY/task-N.out``.

    Args:
        target: a ``.py`` or ``.R`` script (function targets need
            ``launch(fn, engine=Slurm())``).
        scaling: the job's shape, a :class:`~tfdistributed.Scaling` (default ``Scaling()``):
            its tasks, and ``gpus_per_task``, GPUs of its own for each task (``#SBATCH
            --gpus-per-task=N``; SLURM sets each task's ``CUDA_VISIBLE_DEVICES``); every task
            gets them, ps tasks too.
        workers: the short call's: ``slurm_script(target, workers=4)`` is
            ``slurm_script(target, Scaling(workers=4))``.
        args: command-line arguments for the script.
        env: extra environment variables for every task.
        directory: the job's directory on storage the nodes share; default
            ``tfdistributed-$SLURM_JOB_ID`` in the submission directory.
        job_name, partition: ``sbatch --job-name`` / ``--partition``.
        time_limit: ``sbatch --time`` (SLURM stops the job then): minutes, or SLURM's own
            spelling (``"02:00:00"``).
        preemption_notice: with ``time_limit``, seconds before it at which SLURM sends the tasks
            SIGTERM (``--signal=TERM@N``; SLURM may send it up to a minute early). A training
            script calling ``fit(backup_dir=...)`` then backs up at its next backup step and
            exits with status 75 (:data:`tfdistributed.PREEMPTED_EXIT_CODE`). None: no notice.
        requeue: let SLURM requeue the job when it preempts it or loses a node
            (``--requeue``), and requeue it from the script when the tasks stopped because
            they were told to (status 75), so it resumes from its backup by itself.
            ``launch(engine=Slurm())`` passes False: it resubmits under ``max_restarts``.
        sbatch_args, srun_args: more options, e.g. ``["--constraint=a100"]``,
            ``["--resv-ports"]``.
        python, rscript: interpreters on the nodes (default: this Python, ``Rscript`` on the
            PATH).
        argv: the command each task runs, instead of the one derived from ``target``.

    Returns:
        The batch script, as text.

    Raises:
        ArgumentTypeError: ``target`` is a function, or a shape SLURM cannot run (a
            ``cluster`` of given addresses, ``gpus_per_task="all"``).
        LaunchError: the script does not exist or is neither ``.py`` nor ``.R``.

    Example:
        >>> print(slurm_script("train.R", workers=4, partition="gpu"))   # doctest: +SKIP
    """
    scaling = scaling_of(scaling, workers)
    check_placed(scaling, "slurm")
    # One option given as a string (R's "--gres=gpu:1") is one option, not its characters.
    sbatch_args = words(sbatch_args, "sbatch_args")
    srun_args = words(srun_args, "srun_args")
    roles = layout(scaling.workers, scaling.ps, scaling.chief)
    python = python or sys.executable
    if argv is None:
        if callable(target):
            raise ArgumentTypeError("slurm_script() writes a script for a .py or .R file; to run a "
                                    "Python function on SLURM use launch(fn, engine=Slurm()).",
                                    hints={"python": "E.g. launch(fn, "
                                                     "engine=tfd.engines.Slurm())."})
        argv, _ = target_argv(os.path.abspath(os.fspath(target)), args, python, rscript, None)
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
        limit = time_limit if isinstance(time_limit, str) else int(math.ceil(time_limit))
        lines.append(f"#SBATCH --time={limit}")
        if preemption_notice:
            notice = as_int(preemption_notice, "preemption_notice", minimum=1)
            lines.append(f"#SBATCH --signal=TERM@{notice}")
    if requeue:
        lines.append("#SBATCH --requeue")
    lines += [f"#SBATCH {a}" for a in [*slurm_sbatch_options(scaling.gpus_per_task),
                                        *sbatch_args]]
    exports = {PS_VARIABLE: str(scaling.ps), CHIEF_VARIABLE: str(int(scaling.chief)),
               "PYTHONUNBUFFERED": "1", "TFDISTRIBUTED_LAUNCHED": "1",
               "RETICULATE_PYTHON": os.environ.get("RETICULATE_PYTHON", python)}
    exports.update({str(k): str(v) for k, v in (env or {}).items()})
    # Written in the job, not at submission: the job's own directory name needs its id.
    lines += ["", f'JOBDIR="{directory}"', 'mkdir -p "$JOBDIR"']
    lines += [f"export {k}={q(v)}" for k, v in exports.items()]
    srun = ["srun", "--kill-on-bad-exit=1", '--output="$JOBDIR/task-%t.out"',
            *map(q, srun_args),
            q(python), "-m", "tfdistributed.engines.slurm.task", '"$JOBDIR"', "--", *map(q, argv)]
    lines += ["", " ".join(srun)]
    if requeue:
        # The tasks stopped because they were told to (a preemption notice), with a backup
        # written: back in the queue, the job resumes from it.
        lines += ["status=$?", f'if [ "$status" -eq {PREEMPTED_EXIT_CODE} ]; then',
                  '  scontrol requeue "$SLURM_JOB_ID"', "fi", 'exit "$status"']
    return "\n".join(lines) + "\n"
