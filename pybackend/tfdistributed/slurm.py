"""SLURM, the public face: TF_CONFIG from a job step's own environment, and the batch script
of a job (:func:`slurm_script`).

What a task running under ``srun`` reads to build its TF_CONFIG (:func:`tf_config_from_slurm`,
:func:`slurm_cluster`, node-list expansion, ports, ``NodeAddr``) is
:mod:`tfdistributed.slurm_env`; its docstring says where each part of TF_CONFIG comes from. The
batch script is :mod:`tfdistributed.launchers.slurm_script`. Submitting and following a job
(``launch(target, workers=N, backend="slurm")``) is the engine
:mod:`tfdistributed.launchers.slurm` (:func:`~tfdistributed.launchers.slurm.launch_slurm`). This
module gathers the first two under the names they always had, and imports neither the engine nor
anything that does: a training script that only reads its cluster never loads it.
"""

from __future__ import annotations

from .launchers.slurm_script import slurm_script
from .slurm_env import (CHIEF_VARIABLE, DEFAULT_PORT_BASE, PORT_BASE_VARIABLE, PS_VARIABLE,
                        expand_hostnames, node_addresses, set_tf_config_from_slurm_if_needed,
                        slurm_cluster, slurm_tasks, tf_config_from_slurm)

__all__ = ["CHIEF_VARIABLE", "DEFAULT_PORT_BASE", "PORT_BASE_VARIABLE", "PS_VARIABLE",
           "expand_hostnames", "node_addresses", "set_tf_config_from_slurm_if_needed",
           "slurm_cluster", "slurm_script", "slurm_tasks", "tf_config_from_slurm"]
