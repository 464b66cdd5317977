"""tfdistributed: distributed TensorFlow/Keras 3 training, one call each.

    import tfdistributed as tfd
    strategy = tfd.make_strategy("mirrored", num_cpu_devices=2)
    with strategy.scope():
        model = ...; model.compile(...)
    tfd.fit(model, x, y, epochs=5, batch_size=64)

Modules: strategies (by name), compression (gradients all-reduced in 16 bits), packing (the
gradient all-reduce in packs that overlap the backward pass), cluster
(TF_CONFIG), data (the input plan every fit/evaluate/predict follows, TFDS), sharding (shard
policies and the pre-flight every entry point runs), training (fit, evaluate and predict under
any strategy), ps
(parameter-server training on ClusterCoordinator), loops (custom training loops), generators
(R generators served from R's main thread), served (training on a thread that R's main thread
feeds), rcallbacks (datasets whose callbacks call R, refused where they would hang), shards
(sharded TFRecord/CSV files), checkpoints (multi-worker-safe saving and BackupAndRestore),
compat (the Keras 3 repairs, one module each in repairs), routing (plain model.fit under
parameter-server strategies, and its shard pre-flight), launch (clusters of processes, ``python -m tfdistributed launch``;
its engines are the launchers package), errors, demo_data (scikit-learn's digits as arrays or
TFDS), rvalues (R values in Keras' own calls made from R: one table of rules), hostbed (a test
bed of hosts), demo (``make demo``).
TensorFlow is imported lazily: ``import tfdistributed`` is cheap, so TF_CONFIG and logical
devices can still be set up after it.
"""

from . import _runtime

# Before anything can import TensorFlow: its pooling CPU allocator, unless the user chose
# (_runtime.py says why: without it a multi-worker step page-faults its tensors in every step).
_runtime.prefer_pooled_cpu_allocator()

from . import (checkpoints, data, generators, loops, ray_backend, rcallbacks,  # noqa: E402
               rvalues, served, sharding, shards, slurm)
from ._args import KERAS_COUNT_ARGUMENTS
from .cluster import (ROLES, check_loopback, clear_tf_config, cluster_spec, is_checkpoint_writer,
                      is_chief, local_cluster, num_workers, read_tf_config, set_tf_config, tf_config,
                      validate_cluster, validate_tf_config)
from .data import global_batch_size, load_tfds, make_dataset
from .compression import gradient_compression, set_gradient_compression
from .packing import set_bytes_per_pack
from .demo_data import digits_arrays, write_digits_tfds
from .errors import (ArgumentTypeError, ClusterConfigError, GeneratorError, JoinTimeoutError,
                     LaunchError, LaunchTimeoutError, ShardingError, ShardingWarning, StrategyError,
                     TFDistributedError, TrainingError)
from .launch import PREEMPTED_EXIT_CODE, LaunchResult, TaskResult, launch, run_server
from .shards import read_shards, write_shards
from .sharding import SHARD_POLICIES, check_sharding, shard_policy, with_shard_policy
from .slurm import slurm_script, tf_config_from_slurm
from .strategies import (STRATEGY_NAMES, canonical_name, configure_cpu_devices, make_strategy,
                         strategy_info, strategy_kind)
from .training import evaluate, fit, predict

__version__ = "0.1.0"

# Keras repairs in place for any Keras use in this process, plain model.fit included, from now
# on or as soon as Keras is imported (TensorFlow itself is still not imported here); with them
# training's routing of plain model.fit/evaluate/predict (strategy_aware_fit, routing.py).
from . import compat as _compat, training as _training  # noqa: E402

_compat.install(_training.STRATEGY_AWARE_FIT)

# TensorFlow reads the TF_CONFIG the process has now (R's Sys.setenv() after Python started
# included) and a task waiting for its peers says so, until a join timeout (watch/join.py):
# in place from now on, or as soon as TensorFlow is imported.
from .watch import join as _join  # noqa: E402

_join.install()

__all__ = [
    "KERAS_COUNT_ARGUMENTS", "PREEMPTED_EXIT_CODE", "ROLES", "SHARD_POLICIES", "STRATEGY_NAMES",
    "checkpoints", "loops",
    "ArgumentTypeError", "ClusterConfigError", "JoinTimeoutError", "LaunchError",
    "LaunchTimeoutError", "GeneratorError", "ShardingError", "ShardingWarning", "StrategyError",
    "TFDistributedError", "TrainingError",
    "LaunchResult", "TaskResult",
    "canonical_name", "check_loopback", "check_sharding", "clear_tf_config", "cluster_spec",
    "configure_cpu_devices", "digits_arrays", "gradient_compression", "set_gradient_compression",
    "set_bytes_per_pack", "evaluate", "fit", "global_batch_size",
    "is_checkpoint_writer", "is_chief",
    "launch", "load_tfds", "local_cluster", "make_dataset", "make_strategy", "num_workers", "predict",
    "read_shards", "read_tf_config", "run_server", "set_tf_config", "shard_policy", "strategy_info",
    "strategy_kind", "tf_config", "validate_cluster", "validate_tf_config", "with_shard_policy",
    "write_digits_tfds", "write_shards", "generators", "rcallbacks", "rvalues", "served", "sharding",
    "shards",
    "ray_backend", "slurm", "slurm_script", "tf_config_from_slurm",
]
