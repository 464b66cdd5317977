"""TensorFlow's own reading of a TF_CONFIG, next to ours, for the differential tests.

Not a test module: ``test_tf_config_tensorflow.py`` (the table of platform shapes) and the
hypothesis fuzz in ``test_cluster.py`` both use it.

TensorFlow's verdict comes from TensorFlow's code: ``TFConfigClusterResolver`` reads the
environment variable, then the checks of the consumer the cluster calls for run on what it
read: ``ParameterServerStrategy``'s own argument check when the cluster has ps tasks,
``multi_worker_util``'s checks otherwise (the ones ``MultiWorkerMirroredStrategy`` runs first).
No strategy is created: that needs servers, and these are unit tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field

import tfdistributed as tfd

#: Our messages for the inputs TensorFlow accepts and we refuse, each an intended difference
#: (the reasons are in INTENDED_DIFFERENCES of test_tf_config_tensorflow.py). Any other refusal
#: of an input TensorFlow accepts is a bug.
INTENDED_REFUSALS = {
    "address": r'is not "host:port"|must be a "host:port" string|is outside 1-65535',
    "duplicate address": r"every task needs its own host:port",
    "negative index": r'\["index"\] = -\d+ is out of range',
    "index not whole": r'\["index"\] = .* must be a whole number',
    "sparse job with gaps": r"lists task indices|gives task index \d+ twice",
    "not an object": r"TF_CONFIG must be a JSON object",
    "task not an object": r'TF_CONFIG\["task"\] must be an object',
    "index without type": r'has an "index" but no "type"',
    "rpc_layer not a string": r'TF_CONFIG\["rpc_layer"\] = .* must be a protocol name',
}


@dataclass
class Verdict:
    """``outcome``: "accept", "reject" (a ValueError from TensorFlow's checks, or our
    ClusterConfigError) or "crash" (any other exception); ``view``: what was read."""

    outcome: str
    view: dict = field(default_factory=dict)
    message: str = ""

    @property
    def accepted(self) -> bool:
        return self.outcome == "accept"


@contextlib.contextmanager
def tf_config_env(text):
    """TF_CONFIG set to ``text`` (unset for None) inside the block, restored after."""
    saved = os.environ.get("TF_CONFIG")
    try:
        if text is None:
            os.environ.pop("TF_CONFIG", None)
        else:
            os.environ["TF_CONFIG"] = text
        yield
    finally:
        if saved is None:
            os.environ.pop("TF_CONFIG", None)
        else:
            os.environ["TF_CONFIG"] = saved


def _tensorflow_checks(spec, task_type, task_id, resolver) -> None:
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.distribute.parameter_server_strategy_v2 import ParameterServerStrategyV2

    if multi_worker_util.task_count(spec, "ps") > 0:
        # The check ParameterServerStrategy.__init__ runs before connecting (it uses no `self`).
        ParameterServerStrategyV2._verify_args_and_config(None, resolver)
    elif spec.jobs and task_type != "evaluator":
        # What CollectiveAllReduceExtended._initialize_multi_worker (MultiWorkerMirroredStrategy)
        # does first with a non-empty cluster: its None check, restated, then its TF calls.
        if task_type is None or task_id is None:
            raise ValueError("When `cluster_spec` is given, you must also specify `task_type` "
                             "and `task_id`.")
        multi_worker_util.id_in_cluster(spec, task_type, task_id)
        if not multi_worker_util.worker_count(spec, task_type):
            raise ValueError("No `worker`, `chief` or `evaluator` tasks can be found.")
    else:
        # No cluster, or the evaluator (TensorFlow: not part of the training cluster).
        multi_worker_util._validate_cluster_spec(spec, task_type, task_id)


def tensorflow_verdict(text: str) -> Verdict:
    """How TensorFlow reads TF_CONFIG=``text``."""
    import tensorflow as tf

    with tf_config_env(text):
        try:
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            spec = resolver.cluster_spec()
            task_type, task_id, rpc_layer = resolver.task_type, resolver.task_id, resolver.rpc_layer
        except Exception as e:  # noqa: BLE001 - any exception here is TensorFlow crashing
            return Verdict("crash", message=f"{type(e).__name__}: {e}")
        try:
            _tensorflow_checks(spec, task_type, task_id, resolver)
        except ValueError as e:
            return Verdict("reject", message=str(e))
        except Exception as e:  # noqa: BLE001
            return Verdict("crash", message=f"{type(e).__name__}: {e}")
    # as_dict() gives {} for a job without tasks; such a job has no task to address.
    cluster = {job: tasks for job, tasks in spec.as_dict().items() if tasks}
    return Verdict("accept", {"cluster": cluster, "task_type": task_type, "task_id": task_id,
                              "rpc_layer": rpc_layer})


def view_of(config: dict) -> dict:
    """Our parsed TF_CONFIG in the shape of TensorFlow's view."""
    task = config.get("task") or {}
    return {"cluster": config["cluster"], "task_type": task.get("type"),
            "task_id": task.get("index"), "rpc_layer": config.get("rpc_layer")}


def our_verdict(value) -> Verdict:
    """How tfdistributed reads ``value`` (a dict or JSON text); any exception other than
    ClusterConfigError propagates, since that would be a bug."""
    try:
        config = tfd.validate_tf_config(value)
    except tfd.ClusterConfigError as e:
        return Verdict("reject", message=str(e))
    return Verdict("accept", view_of(config), json.dumps(config))


def intended_refusal(message: str) -> str | None:
    """Which intended difference a refusal of ours is, or None."""
    for name, pattern in INTENDED_REFUSALS.items():
        if re.search(pattern, message):
            return name
    return None
