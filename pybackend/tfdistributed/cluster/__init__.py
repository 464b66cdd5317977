"""Who is in the cluster, and which task this process is.

==================  ============================================================================
module              what it holds
==================  ============================================================================
``spec``            TF_CONFIG built from data, parsed and validated (TensorFlow's contract, with
                    each intended difference), ``host:port`` addresses
``environment``     this process's TF_CONFIG: set, read, kept in step with the process
                    environment; the task's role (chief, checkpoint writer, workers)
``live``            TensorFlow reads the TF_CONFIG the process has *now*; a lone worker refused
``join``            a task waiting for its peers says so, until a join timeout
``leave``           the workers of a multi-worker job leave together, at the end of training
``addresses``       this machine's addresses; a task's own address checked before it serves
``local``           :class:`Cluster` (validated once) and clusters on 127.0.0.1
``from_slurm``      the cluster a SLURM job step's environment describes (a task under ``srun``)
==================  ============================================================================

Layer: the lowest folder. Imports ``errors``, ``_args`` and ``versions`` (its import hook, which
puts ``live`` and ``join`` in place once TensorFlow is imported) only, never TensorFlow at import
time; every other folder may import from it.
"""

from .environment import (clear_tf_config, is_checkpoint_writer, is_chief, num_workers,
                          process_getenv, read_tf_config, set_tf_config, sync_tf_config)
from .addresses import check_own_address, is_loopback, local_addresses
from .local import Cluster, check_loopback, checked_local, free_ports, local_cluster
from .spec import (ROLE_ALIASES, ROLES, cluster_spec, format_address, parse_address, tf_config,
                   validate_cluster, validate_tf_config)

__all__ = ["ROLES", "ROLE_ALIASES", "Cluster", "check_loopback", "check_own_address",
           "checked_local", "clear_tf_config", "cluster_spec", "format_address", "free_ports",
           "is_checkpoint_writer", "is_chief", "is_loopback", "local_addresses", "local_cluster",
           "num_workers", "parse_address", "process_getenv", "read_tf_config", "set_tf_config",
           "sync_tf_config", "tf_config", "validate_cluster", "validate_tf_config"]
