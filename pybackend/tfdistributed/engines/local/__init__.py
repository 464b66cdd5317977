"""The local engine: a cluster of TensorFlow tasks as separate processes on this machine
(127.0.0.1 only, unless the caller names hosts of its own with
``engine=tfd.engines.Local(hosts=)``, e.g. network namespaces).

``launch("train.py", workers=2)`` starts one OS process per task, each with its own TF_CONFIG on
free loopback ports, streams every line it prints prefixed with its role and index
(``[worker 1] ...``), and returns each task's exit code, output and (for a function target)
return value. On the first failure, or at the timeout, it stops every process it started (each
task runs in its own process group; descendants are found with psutil), so nothing is left behind
and nothing hangs.

With ``ps > 0`` (parameter-server training), ``worker`` and ``ps`` tasks run
``tensorflow.distribute.Server`` (``python -m tfdistributed server``) and the target runs as the
``chief`` (the coordinator); the job is done when the chief exits, and the servers are then
stopped.

How it is built: :class:`~.engine.Local` (the option object) makes
:class:`~.supervisor.LocalLauncher` (the engine's launcher, made from the checked plan), which makes
one :class:`~.supervisor.LocalJob` per attempt, following :mod:`tfdistributed.engines.base`'s
protocol, in three modules:

- ``engine`` (:class:`~.engine.Local`): what ``engine=tfd.engines.Local()`` is given, checked,
  and what it refuses of a job's shape (``hosts`` without a ``cluster``, ``min_workers`` for
  tasks that cannot be lost);
- ``plan`` (:func:`~.plan.plan_launch`): the cluster (a :class:`~tfdistributed.cluster.Cluster`,
  validated once), its ports checked, and each task's argv, environment and TF_CONFIG built
  once, as a :class:`~.plan.TaskPlan`;
- ``supervisor`` (:class:`~.supervisor.LocalJob`): spawns the tasks, streams their output, polls
  them, applies the policy for vital and non-vital tasks, and tears every process down on a
  failure, the timeout or an interrupt; and the diagnosis: which task failed and how, or which
  tasks never joined the cluster.
"""

from .engine import Local
from .plan import LaunchPlan, TaskPlan, plan_launch
from .supervisor import LocalJob, LocalLauncher

__all__ = ["LaunchPlan", "Local", "LocalJob", "LocalLauncher", "TaskPlan", "plan_launch"]
