"""Watching a job: no silent multi-worker job, and a launched job you can see.

One room for what goes on while a job runs and is not training itself:

- ``tfconfig``: TensorFlow reads the TF_CONFIG the process has *now* (R's ``Sys.setenv()``
  after Python started included), and a lone worker is refused at ``fit``;
- ``join``: the moment a multi-worker strategy is built (TensorFlow's own classes too): a task
  that waits for its peers says so, with what the network answers, until a join timeout;
- ``channel``: the task-to-launcher channel, one JSON record per line on the task's standard
  output (every engine already carries those lines to the launcher: local pipes, SLURM's output
  files, Ray's log stream), switched on by the launcher (``TFDISTRIBUTED_TELEMETRY``);
- ``recorder``: the task side: a Keras callback and a heartbeat thread that count steps, keep the
  epoch logs and publish them (to the channel when launched; to TensorFlow's coordination
  service key-value store in a hand-started job, where every task reaches it);
- ``stall``: which task the others wait for, and where it is, from every task's last record;
- ``collector``, ``progress`` and ``tensorboard``: the launcher side: the job's history, one
  row of figures per task, the straggler, one progress display for the whole job, and its
  curves for TensorBoard (written by the launcher alone).
"""
