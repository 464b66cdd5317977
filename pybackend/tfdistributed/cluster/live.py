"""TF_CONFIG as the process has it, and a lone worker refused at ``fit``.

Python's ``os.environ`` is a copy of the process environment taken when Python started. R's
``Sys.setenv(TF_CONFIG = ...)`` after that (any earlier reticulate call: ``tf$version``,
``digits_data()``) changes the process environment (``setenv(3)``) but not the copy, and
TensorFlow reads the copy (``TFConfigClusterResolver``, behind ``MultiWorkerMirroredStrategy``,
``ParameterServerStrategy`` and Keras): every worker then silently builds a 1-replica strategy,
trains its own model and exits 0. Python's own ``os.environ[...] = ...`` sets the process
environment too, so the process environment is always the truth.

:func:`patch` makes TensorFlow's one reader of TF_CONFIG (``tfconfig_cluster_resolver.
_load_tf_config``, which every resolver method calls each time) first bring ``os.environ``'s
TF_CONFIG up to date with the process (:func:`tfdistributed.cluster.sync_tf_config`; a TF_CONFIG
removed with ``Sys.unsetenv()`` disappears too). It is installed with the join watch
(:func:`tfdistributed.cluster.join.install`, run by ``import tfdistributed``).

:func:`check_not_alone` is the fit-time check, for a strategy built before TF_CONFIG was set
(or from another one): ``tfdistributed.fit`` and plain ``model.fit`` both call it.
"""

from __future__ import annotations

import json
import warnings

from .environment import sync_tf_config
from ..errors import ClusterConfigError

TRAINING_JOBS = ("chief", "worker")  # the tasks whose replicas train together under MWMS


def live_load_tf_config(original):
    """TensorFlow's ``_load_tf_config``, reading the TF_CONFIG the process has now."""
    if getattr(original, "__tfdistributed_original__", None) is not None:
        return original

    def _load_tf_config():
        sync_tf_config()
        return original()

    _load_tf_config.__tfdistributed_original__ = original
    _load_tf_config.__doc__ = original.__doc__
    return _load_tf_config


def reads_stale_copy(module) -> bool:
    """Whether TensorFlow's resolver still reads TF_CONFIG from ``os.environ`` alone, unpatched."""
    import inspect

    function = getattr(module, "_load_tf_config", None)
    if function is None or getattr(function, "__tfdistributed_original__", None) is not None:
        return False
    return "os.environ" in inspect.getsource(function)


def patch() -> bool:
    """Make TensorFlow's TF_CONFIG reader read the process's TF_CONFIG; whether it was needed."""
    from tensorflow.python.distribute.cluster_resolver import tfconfig_cluster_resolver as module

    if not reads_stale_copy(module):
        return False
    module._load_tf_config = live_load_tf_config(module._load_tf_config)
    return True


def _training_tasks(config: dict) -> list[str]:
    """``"worker 1 at host:port"`` for each chief/worker task of a raw TF_CONFIG dict."""
    tasks = []
    for job in TRAINING_JOBS:
        addresses = (config.get("cluster") or {}).get(job) or []
        items = addresses.items() if isinstance(addresses, dict) else enumerate(addresses)
        tasks += [f"{job} {index} at {address}" for index, address in items]
    return tasks


def _live_config() -> tuple[str | None, dict]:
    raw = sync_tf_config()
    try:
        config = json.loads(raw) if raw else {}
    except ValueError:
        return raw, {}  # a malformed TF_CONFIG is read_tf_config()'s to report, by field
    return raw, config if isinstance(config, dict) else {}


def check_not_alone(strategy, what: str = "fit") -> None:
    """Refuse to train one worker alone when this process's TF_CONFIG names several.

    A ``MultiWorkerMirroredStrategy`` built for 1 worker (before TF_CONFIG was set, e.g. R's
    ``Sys.setenv()`` after the strategy) in a task whose TF_CONFIG now names several training
    tasks is an error; any other strategy but a parameter-server one gets a warning (training
    one task's own model there may be meant, but rarely is).

    Raises:
        ClusterConfigError: the multi-worker strategy would train this worker alone.
    """
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return
    raw, config = _live_config()
    task = config.get("task") or {}
    tasks = _training_tasks(config)
    if len(tasks) < 2 or task.get("type") not in TRAINING_JOBS:
        return
    # TensorFlow's own count of the workers the strategy was built for (1 when it saw no
    # cluster); strategy.cluster_resolver would re-read TF_CONFIG now, not what was used then.
    built_for = getattr(strategy.extended, "_num_workers", 1)
    if built_for >= len(tasks):
        return
    seen = f"This process's TF_CONFIG names {len(tasks)} training tasks ({', '.join(tasks)}): {raw}"
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        raise ClusterConfigError(
            f"{what}: {seen}; but the MultiWorkerMirroredStrategy was built for {built_for} "
            f"worker (it saw {'no multi-worker TF_CONFIG' if built_for == 1 else 'another one'} "
            "when it was created), so this worker would train its own model alone. Create the "
            "strategy after TF_CONFIG is set, then build and compile the model in its scope.",
            hints={"python": "E.g. set os.environ['TF_CONFIG'] first, then "
                             "strategy = tfdistributed.make_strategy('auto').",
                   "r": 'E.g. Sys.setenv(TF_CONFIG = ...) first, then '
                        'strategy <- distribute_strategy("auto").'})
    warnings.warn(f"{what}: {seen}; but the model's strategy "
                  f"({type(strategy).__name__}) trains this task alone, with "
                  f"{strategy.num_replicas_in_sync} replica(s). Use a multi-worker strategy "
                  "(make_strategy('auto') / distribute_strategy(\"auto\")) to train together.",
                  RuntimeWarning, stacklevel=3)
