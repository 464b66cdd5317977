"""Watching a launched job while it runs: progress, history, stalls and stragglers.

What goes on while a job runs and is not training itself, on both sides of one channel:

- ``channel``: the task-to-launcher channel, one JSON record per line on the task's standard
  output (every engine already carries those lines to the launcher: local pipes, SLURM's output
  files, Ray's log stream), switched on by the launcher (``TFDISTRIBUTED_TELEMETRY``), and the
  exit codes a task and its launcher agree on;
- ``recorder``: the task side: a Keras callback and a heartbeat thread that count steps, keep the
  epoch logs and publish them (to the channel when launched; to TensorFlow's coordination
  service key-value store in a hand-started job, where every task reaches it);
- ``stall``: which task the others wait for, and where it is, from every task's last record;
- ``collector``, ``progress`` and ``tensorboard``: the launcher side: the job's history, one
  row of figures per task, the straggler, one progress display for the whole job, and its
  curves for TensorBoard (written by the launcher alone).

A task waiting for its peers at the start (the join) is :mod:`tfdistributed.cluster.join`.

Layer: imports ``errors`` and ``_args`` only; ``training`` (the task side) and ``engines``
(the launcher side) import it.
"""
