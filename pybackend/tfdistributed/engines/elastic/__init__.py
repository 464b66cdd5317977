"""Elastic jobs: hosts that come and go (``launch(..., Scaling(workers=MAX,
min_workers=MIN))``).

TensorFlow's ``MultiWorkerMirroredStrategy`` has a fixed membership: a new size is a new job,
new processes with a new TF_CONFIG, resumed from a backup (``fit(backup_dir=...)``). This
folder decides, between attempts, which places (hosts of a local job, SLURM nodes, Ray nodes)
the next attempt runs on, as torchrun's ``--nnodes=MIN:MAX`` and Ray Train's
``num_workers=(min, max)`` do:

==================  ============================================================================
module              what it holds
==================  ============================================================================
``membership``      who is in: every place the job may use, the ones it runs on, the lost ones
                    (since when, from which step), the size it runs at and why it changed;
                    the size a global batch can be split over
``probes``          does a host answer? Its start command runs and it reaches the others; the
                    largest group of hosts that reach each other goes on
``policy``          :class:`~.policy.Elastic`: after a failure, a place that does not answer
                    within the grace (the join timeout) is lost: the job shrinks (or ends, below
                    ``min_workers``, naming it); a lost place that answers again, probed in the
                    background, grows the job back at its next backup (a planned stop, as a
                    preemption notice); every change announced and recorded
==================  ============================================================================

An engine takes part through the protocol every launcher follows
(:class:`~tfdistributed.engines.base.Launcher`): ``places()``, ``probe(places, active)``,
``trainers(places)``, ``place_word`` and ``job(attempt, deadline, places)``, and its jobs'
``preempt()``; the attempt loop
(:mod:`tfdistributed.engines.restarts`) asks :class:`~.policy.Elastic` before each restart.
Restarts caused by a membership change do not spend ``max_restarts``: each shrink removes a
place that does not answer, and a grow waits for the backup to advance since the last change,
so a flapping host cannot keep the job from training; the job's ``timeout`` bounds the rest.

Layer: inside ``engines`` (imports ``errors``, ``_args`` and the engines' ``base``/``output``).
"""
