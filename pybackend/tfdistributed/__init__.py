"""tfdistributed: distributed TensorFlow/Keras 3 training, one call each.

    import tfdistributed as tfd
    strategy = tfd.make_strategy("mirrored", num_cpu_devices=2)
    with strategy.scope():
        model = ...; model.compile(...)
    tfd.fit(model, x, y, epochs=5, batch_size=64)

The package, one folder per concern, lowest layer first (each folder's docstring lists its
modules and what it may import; ``tests/python/package/test_architecture.py`` checks the layers):

- ``errors``, ``_args``: one error family with per-language hints; argument coercion;
- ``versions``: the TensorFlow/Keras releases supported and installed (metadata only);
- ``cluster/``: TF_CONFIG built, parsed and validated; this process's TF_CONFIG; joining peers;
  the cluster SLURM's environment describes;
- ``strategies/``: strategies by name; how gradients cross the network (16 bits, low-rank,
  packs);
- ``data/``: the input plan, shard policies and their pre-flight, files on disk, demo data;
- ``watch/``: the task-to-launcher channel: progress, history, stalls, stragglers;
- ``training/``: fit/evaluate/predict under every strategy, plain ``model.fit`` routing, the
  Keras repairs, parameter-server training, custom loops, checkpoints;
- ``engines/``: :func:`launch`, its options (the job's shape, :class:`Scaling`; where it runs,
  ``tfd.engines.Local``/``Slurm``/``Ray``; :class:`Restarts`, :class:`Watch`) and its engines,
  the attempt loop;
- ``r/``: what exists only for R (R values, R generators served from R's main thread);
- ``testbeds/``: the host bed and a local SLURM cluster (tests, benchmarks, tutorials);
- ``demo`` (``make demo``), ``__main__`` (``python -m tfdistributed launch ...``).

TensorFlow is imported lazily: ``import tfdistributed`` is cheap, so TF_CONFIG and logical
devices can still be set up after it.
"""

from .strategies import runtime as _runtime

# Before anything can import TensorFlow: its pooling CPU allocator, unless the user chose
# (strategies/runtime.py says why: without it a multi-worker step page-faults its tensors in
# every step).
_runtime.prefer_pooled_cpu_allocator()

# TensorFlow missing, or it or Keras outside the supported releases: said now, in one warning
# (metadata only: TensorFlow is not imported here).
from .versions import warn_if_unsupported as _warn_if_unsupported  # noqa: E402

_warn_if_unsupported()

# The subpackages, for their attributes (tfd.cluster.free_ports, R's tfd$r$values): left out of
# __all__, which lists the public names (each subpackage's own __all__ lists its).
from . import cluster, data, engines, r, strategies, testbeds, training, versions  # noqa: E402, F401
from ._args import KERAS_COUNT_ARGUMENTS  # noqa: E402
from .cluster import (ROLES, check_loopback, clear_tf_config, cluster_spec,  # noqa: E402
                      is_checkpoint_writer, is_chief, local_cluster, num_workers, read_tf_config,
                      set_tf_config, tf_config, validate_cluster, validate_tf_config)
from .data import global_batch_size, load_tfds, make_dataset  # noqa: E402
from .data.digits import digits_arrays, write_digits_tfds  # noqa: E402
from .data.sharding import (SHARD_POLICIES, check_sharding, shard_policy,  # noqa: E402
                            with_shard_policy)
from .data.shards import read_shards, write_shards  # noqa: E402
from .errors import (ArgumentTypeError, ClusterConfigError, GeneratorError, HostLostError,
                     JoinTimeoutError,
                     LaunchError, LaunchTimeoutError, PlacementError, ShardingError,
                     ShardingWarning, StrategyError, TFDistributedError, TrainingError)
from .engines import slurm  # noqa: E402
from .engines.launch import (PREEMPTED_EXIT_CODE, LaunchResult, TaskResult, launch,  # noqa: E402
                             run_server)
from .engines.options import Restarts, Scaling, Watch  # noqa: E402
from .engines.slurm import slurm_script, tf_config_from_slurm  # noqa: E402
from .strategies import (STRATEGY_NAMES, PowerSGD, canonical_name,  # noqa: E402
                         configure_cpu_devices, gradient_compression, make_strategy, powersgd,
                         set_bytes_per_pack, set_gradient_compression, strategy_info,
                         strategy_kind)
from .training import checkpoints, loops, ps  # noqa: E402
from .training.trainer import evaluate, fit, predict  # noqa: E402

__version__ = "0.1.0"

# Keras repairs in place for any Keras use in this process, plain model.fit included, from now
# on or as soon as Keras is imported (TensorFlow itself is still not imported here); with them
# training's routing of plain model.fit/evaluate/predict (strategy_aware_fit, training/routing.py).
from .training import compat as _compat, trainer as _trainer  # noqa: E402

_compat.install(_trainer.STRATEGY_AWARE_FIT)

# TensorFlow reads the TF_CONFIG the process has now (R's Sys.setenv() after Python started
# included) and a task waiting for its peers says so, until a join timeout (cluster/join.py):
# in place from now on, or as soon as TensorFlow is imported.
from .cluster import join as _join  # noqa: E402

_join.install()

__all__ = [
    "KERAS_COUNT_ARGUMENTS", "PREEMPTED_EXIT_CODE", "ROLES", "SHARD_POLICIES", "STRATEGY_NAMES",
    "checkpoints", "loops", "ps", "slurm",
    "ArgumentTypeError", "ClusterConfigError", "JoinTimeoutError", "LaunchError",
    "LaunchTimeoutError", "HostLostError", "GeneratorError", "PlacementError", "ShardingError",
    "ShardingWarning", "StrategyError", "TFDistributedError", "TrainingError",
    "LaunchResult", "PowerSGD", "Restarts", "Scaling", "TaskResult", "Watch",
    "canonical_name", "check_loopback", "check_sharding", "clear_tf_config", "cluster_spec",
    "configure_cpu_devices", "digits_arrays", "gradient_compression", "set_gradient_compression",
    "set_bytes_per_pack", "evaluate", "fit", "global_batch_size",
    "is_checkpoint_writer", "is_chief",
    "launch", "load_tfds", "local_cluster", "make_dataset", "make_strategy", "num_workers",
    "predict", "powersgd", "read_shards", "read_tf_config", "run_server", "set_tf_config",
    "shard_policy", "strategy_info", "strategy_kind", "tf_config", "validate_cluster",
    "validate_tf_config", "with_shard_policy", "write_digits_tfds", "write_shards", "slurm_script",
    "tf_config_from_slurm",
]
