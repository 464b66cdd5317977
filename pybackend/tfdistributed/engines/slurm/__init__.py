"""SLURM, in one folder: the engine that submits a job, its batch script, the wrapper each task
runs under ``srun``, and the public names of SLURM.

==============  ==========================================================================
module          what it holds
==============  ==========================================================================
``engine``      what ``engine=Slurm(...)`` is given (:class:`~.engine.Slurm`), checked, and
                what it refuses of a job's shape; it makes the launcher
``launcher``    the ``sbatch`` engine: ``launch(target, workers=N, engine=Slurm())``
                submits, streams, follows and cancels a job (:class:`~.launcher.SlurmLauncher`)
``script``      the batch script of a job (:func:`~.script.slurm_script`)
``task``        what ``srun`` starts for each task: TF_CONFIG from SLURM, then the target
==============  ==========================================================================

What a task reads to build its TF_CONFIG from SLURM's environment (:func:`tf_config_from_slurm`,
node lists, ports, ``NodeAddr``) is :mod:`tfdistributed.cluster.from_slurm`: every process that
builds a strategy reads it, so it sits with the cluster, below the strategies; this package
re-exports its names. A real SLURM cluster of local daemons, for the tests and tutorials, is
:mod:`tfdistributed.testbeds.slurm`. This package's ``__init__`` imports neither the engine nor
anything that does (``engine`` imports the launcher when a job runs): a training script that
only reads its cluster never loads it.
"""

from __future__ import annotations

from .script import slurm_script
from ...cluster.from_slurm import (CHIEF_VARIABLE, DEFAULT_PORT_BASE, PORT_BASE_VARIABLE,
                                   PS_VARIABLE, expand_hostnames, node_addresses,
                                   set_tf_config_from_slurm_if_needed, slurm_cluster, slurm_tasks,
                                   tf_config_from_slurm)

__all__ = ["CHIEF_VARIABLE", "DEFAULT_PORT_BASE", "PORT_BASE_VARIABLE", "PS_VARIABLE",
           "expand_hostnames", "node_addresses", "set_tf_config_from_slurm_if_needed",
           "slurm_cluster", "slurm_script", "slurm_tasks", "tf_config_from_slurm"]
