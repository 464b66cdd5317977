"""Warm starts: the local engine's tasks forked from a Python (or, for ``.R`` scripts, an R)
that has imported TensorFlow already, instead of each task importing it (~3 s of CPU per Python
task on a laptop-class core, ~5 s per R task: R, reticulate and Python start too).

``launch(..., engine=Local(warm_start=True))`` (or ``TFDISTRIBUTED_WARM_START=1`` in the
environment) starts, once per launching process, a *warm server*: ``python -m
tfdistributed.engines.warm.server``, run with the tasks' environment, imports TensorFlow, Keras
and tfdistributed and waits on a Unix socket in a private directory. For each task the launcher
sends the task's argv, environment and working directory, and the write end of the pipe its
output goes to; the server forks, and the child becomes the task as ``python argv...`` would
have run it (its own session and process group, stdin from ``/dev/null``, ``sys.argv``,
``sys.path[0]``, ``__main__``, the exit status of an uncaught exception or ``sys.exit``,
``atexit`` handlers, NumPy's global random state drawn afresh). The server reaps it and sends
its exit status (or the signal that killed it, as a negative code, as :class:`subprocess.Popen`
does) back to the launcher. The task is a separate process like any other: its own TensorFlow
runtime (TensorFlow starts its threads and runtime lazily, after the fork), its own gRPC server,
killed, signalled and inspected (``py-spy``) by pid as before.

What is not the same as a fresh interpreter, and so when a task starts the usual way:

- the modules the server imported are imported already: a script that sets an environment
  variable read at import time (``KERAS_BACKEND``, ``TF_CPP_MIN_LOG_LEVEL``) before importing
  them gets the server's values. So a server serves the tasks whose variables read at import are
  its own: those of :data:`~.client.IMPORT_TIME_PREFIXES` (``TF_``, ``KERAS_``, ``CUDA_``,
  ``PYTHON``, ``OMP_``...) and :data:`~.client.IMPORT_TIME_NAMES` (``HOME``, ``PATH``,
  ``TMPDIR``, ``LANG``...), ``TF_CONFIG`` aside, and ``TFDISTRIBUTED_DISABLE_COMPAT``; tasks
  whose values differ get a server of their own (up to :data:`~.client.MAX_SERVERS` of each
  kind, Python and R, live at once). Every other variable (the task's ``TF_CONFIG``, its
  attempt, a user's own) is set in the child, whose ``os.environ`` is the task's whole
  environment;
- a task run through a command prefix (``Local(hosts=)``: another network namespace), by
  another interpreter (``Local(python=)``), with a ``preexec_fn`` (``prepare_task``), or
  given its GPUs by ``gpus_per_task`` (:mod:`tfdistributed.engines.gpus`: on a machine with
  GPUs, every task by default) always starts the usual way;
- TensorFlow's own start-up lines (oneDNN, CUDA) are printed once by the server, not by each
  task;
- seen from outside, a task's command line and environment (``ps``, ``/proc/PID/cmdline``
  and ``environ``, psutil's ``cmdline()`` and ``environ()``) are the server's, as the kernel
  kept them from its start; the task's own ``os.environ`` and ``sys.argv`` are the task's.
  Find a task by its port (the process listening on its TF_CONFIG address) or its pid
  (``launch()`` output, ``job$workers``), not by its command line.

An ``.R`` script (``Rscript [--options] script.R args``) is forked from an *R server*
(:mod:`.rtask`): ``Rscript [--options] serve.R`` started in the task's working directory (where
R reads ``.Rprofile`` and ``.Renviron``) with the task's values of the variables above and of
those R and reticulate read as they start (``R_*``, ``RETICULATE_*``...), which loads the
tfdistributed R package, reticulate, Python and the modules above, then forks per task. A task
gets what R's start-up set in the server on top of its own environment; where that start-up
set a variable the task has a value of its own for (a ``.Renviron`` line), a server started with
the task's value serves it. The child runs the script with R's own REPL, as Rscript does
(output, warnings, errors, exit status), with the task's ``commandArgs()``, its own
``tempdir()`` and random seed; reticulate's event-loop thread and the ``cli`` package's timer
thread are stopped in the server and started again in each task. What differs from a fresh
``Rscript``: the tfdistributed namespace is loaded before the script's first line (attached only
by its ``library()``), and what R prints while starting (a ``.Rprofile``'s messages) goes to the
server's log. A server that finds another R package's thread running (a fork would not copy it)
does not start.

If the server cannot start (or dies), tasks start the usual way and the job's output says why.

Modules: ``server`` (the warm process: imports, listens, forks, reaps), ``child`` (what a forked
child does to become the task), ``rtask`` (the same for R: the server's side in R and what a
forked R task does) and ``client`` (the launcher's side: :class:`~.client.WarmProcess`, shaped
as the :class:`subprocess.Popen` the supervisor uses, and :func:`~.client.start_task`).

Layer: inside ``engines``; imports nothing of the package above ``errors`` and
``cluster.environment`` (and the server process imports the package whole).
"""

from .client import (WARM_START_ENV, WarmProcess, server_pids, shutdown, start_task,
                     warm_start_wanted)

__all__ = ["WARM_START_ENV", "WarmProcess", "server_pids", "shutdown", "start_task",
           "warm_start_wanted"]
