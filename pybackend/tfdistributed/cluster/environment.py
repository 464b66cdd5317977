"""The TF_CONFIG of this process: set, read (validated and normalized), kept in step with the
process environment (R's ``Sys.setenv()`` after Python started), and what it says of this task:
how many workers train (:func:`num_workers`), whether it is the chief (:func:`is_chief`) and
whether it writes checkpoints (:func:`is_checkpoint_writer`).

Roles, as TensorFlow defines them: :func:`is_chief` is ``multi_worker_util.is_chief`` (the chief,
worker 0 without a chief, and the evaluator), plus the coordinator of a parameter-server cluster
without a chief, which has no task. :func:`is_checkpoint_writer` is who writes training
checkpoints: the same minus the evaluator, which evaluates but never trains, and minus worker 0
of a parameter-server cluster without a chief, which only serves (the coordinator writes).
"""

from __future__ import annotations

import json
import logging
import os

from ..errors import ArgumentTypeError
from .spec import cluster_or_none, tf_config, validate_tf_config

_log = logging.getLogger(__name__)


def set_tf_config(config=None, *, cluster=None, task_type="worker", task_index=0) -> dict:
    """Validate and export TF_CONFIG for this process; returns the dict that was set.

    Pass a whole config (dict or JSON text), or ``cluster`` + ``task_type`` + ``task_index``
    (worker 0 by default; ``task_type=None``: the coordinator of a parameter-server cluster
    without a chief, as :func:`~tfdistributed.cluster.spec.tf_config`).
    Must run before the strategy is created: TensorFlow reads TF_CONFIG when the strategy's
    cluster resolver is built.

    Raises:
        ClusterConfigError: the config is malformed (the message names the field).
        ArgumentTypeError: neither ``config`` nor ``cluster`` was given, or both were.

    Example:
        >>> set_tf_config(cluster=local_cluster(2), task_type="worker",
        ...               task_index=0)  # doctest: +SKIP
    """
    if config is not None and cluster is not None:
        raise ArgumentTypeError(
            "set_tf_config() was given both a whole `config` and a `cluster`: pass one of them "
            "(a `cluster` with `task_type` and `task_index`, or a whole `config`), not both.")
    if config is None:
        if cluster is None:
            raise ArgumentTypeError(
                "set_tf_config() needs either a whole `config` or a `cluster` with `task_type` "
                "and `task_index`.",
                hints={"python": "E.g. set_tf_config(cluster=local_cluster(2), task_type='worker', "
                                 "task_index=0).",
                       "r": 'E.g. set_tf_config(local_cluster(2), "worker", 0).'})
        config = tf_config(cluster, task_type, task_index)
    else:
        config = validate_tf_config(config)
    os.environ["TF_CONFIG"] = json.dumps(config)
    return config


def read_tf_config(value=None) -> dict | None:
    """The validated TF_CONFIG of this process (or of ``value``), or None when there is no cluster.

    Reading the environment also writes the normalized JSON back to it when normalizing changed
    anything TensorFlow reads (see the module docstring), so TensorFlow never sees the raw shape.

    Raises:
        ClusterConfigError: TF_CONFIG is set but malformed (including set to "").
    """
    if value is not None:
        return cluster_or_none(validate_tf_config(value))
    raw = sync_tf_config()
    if raw is None:
        return None
    config = validate_tf_config(raw)
    if config != json.loads(raw):
        _log.debug("TF_CONFIG normalized for TensorFlow: %s", json.dumps(config))
        os.environ["TF_CONFIG"] = json.dumps(config)
    return cluster_or_none(config)


def process_getenv(name: str) -> str | None:
    """``name`` in the process environment as it is now (``getenv(3)``), not Python's copy
    (which R's ``Sys.setenv()`` after Python started never reaches)."""
    try:
        import ctypes

        getenv = ctypes.CDLL(None).getenv
        getenv.restype, getenv.argtypes = ctypes.c_char_p, [ctypes.c_char_p]
    except (OSError, TypeError, AttributeError):  # no C library to ask (e.g. Windows)
        return os.environ.get(name)
    value = getenv(os.fsencode(name))
    return None if value is None else os.fsdecode(value)


def sync_tf_config() -> str | None:
    """Bring ``os.environ["TF_CONFIG"]`` up to date with the process environment; return it.

    TF_CONFIG has one store: the process environment variable, which TensorFlow, every
    language in the process and every child process read. Python's ``os.environ`` is a copy
    taken when Python started (setting it also sets the variable), so a TF_CONFIG set later by
    other code in the same process, such as R's ``Sys.setenv()``, is copied into it here,
    before TensorFlow reads it. Called by :func:`read_tf_config` and :func:`make_strategy`.
    """
    value = process_getenv("TF_CONFIG")
    if value is None:
        os.environ.pop("TF_CONFIG", None)
    elif os.environ.get("TF_CONFIG") != value:
        os.environ["TF_CONFIG"] = value
    return value


def clear_tf_config() -> None:
    """Remove TF_CONFIG from this process's environment."""
    os.environ.pop("TF_CONFIG", None)


def _config(config):
    return read_tf_config() if config is None else cluster_or_none(validate_tf_config(config))


def num_workers(config=None) -> int:
    """How many tasks hold training replicas: the hosts a training step runs on.

    - multi-worker clusters: chief + workers (the chief trains too; TensorFlow's
      ``multi_worker_util.worker_count`` says the same);
    - parameter-server clusters: the workers only. TensorFlow's ``worker_count`` counts the
      chief there too, but the chief only coordinates: it runs no step and reads no data;
    - the evaluator: 1 (it evaluates alone, outside the training cluster); no cluster: 1.

    For a global batch, multiply the per-replica batch by ``strategy.num_replicas_in_sync``
    (:func:`tfdistributed.global_batch_size`), which counts each host's devices too; under
    ``parameter_server`` every step runs on one worker, so its global batch is one worker's.

    Example:
        >>> num_workers({"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]},
        ...              "task": {"type": "chief", "index": 0}})
        2
    """
    config = _config(config)
    if not config or not config["cluster"] or config.get("task", {}).get("type") == "evaluator":
        return 1
    cluster = config["cluster"]
    if cluster.get("ps"):
        return len(cluster["worker"])
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def is_chief(config=None) -> bool:
    """Is this task a chief as TensorFlow defines it (``multi_worker_util.is_chief``)?

    True for the chief, for worker 0 when the cluster has no chief, for the evaluator (its own
    one-task cluster), for the coordinator of a parameter-server cluster without a chief (it has
    no task), and without a cluster. For "may I write training checkpoints?" use
    :func:`is_checkpoint_writer`, which is False for the evaluator.
    """
    config = _config(config)
    if not config or "task" not in config:
        return True
    task = config["task"]
    if task["type"] in ("chief", "evaluator"):
        return True
    return "chief" not in config["cluster"] and task["type"] == "worker" and task["index"] == 0


def is_checkpoint_writer(config=None) -> bool:
    """Does this task write training checkpoints and saved models to the real path?

    :func:`is_chief` except for the evaluator, which evaluates what the chief wrote and must
    never overwrite it, and except for worker 0 of a parameter-server cluster without a chief:
    there the coordinator writes.
    """
    config = _config(config)
    if not config or "task" not in config:
        return True
    if config["cluster"].get("ps"):
        # In parameter-server training the program runs on the chief (or on the coordinator,
        # which has no task); workers and ps tasks only serve, whatever is_chief() says.
        return config["task"]["type"] == "chief"
    return config["task"]["type"] != "evaluator" and is_chief(config)
