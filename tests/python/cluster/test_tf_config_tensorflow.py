"""Differential test: every TF_CONFIG below goes through TensorFlow's reading and through ours.

TensorFlow's reading is ``TFConfigClusterResolver`` plus the checks of the strategy the cluster
calls for (see ``tf_config_reference.py``). Both must agree: accept with the same cluster, task
and rpc_layer, or both refuse. The cases are TF_CONFIG values as real platforms and users write
them; the few places where we deliberately differ are listed in INTENDED_DIFFERENCES with their
reason, and the test fails if one of them stops being a difference (so the list stays true).
"""

import json
import os

import pytest
from tf_config_reference import our_verdict, tensorflow_verdict, tf_config_env, view_of

import tfdistributed as tfd

W = ["10.0.0.1:2222", "10.0.0.2:2222"]
K8S = {  # Kubeflow TFJob operator: one DNS name per replica, "environment": "cloud"
    "chief": ["mnist-chief-0.default.svc:2222"],
    "worker": ["mnist-worker-0.default.svc:2222", "mnist-worker-1.default.svc:2222"],
    "ps": ["mnist-ps-0.default.svc:2222"],
}
VERTEX_JOB = {"python_module": "trainer.task", "worker_pool_specs": [
    {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1},
    {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 2}]}
VERTEX_CLUSTER = {"chief": ["cmle-training-workerpool0-ab12-0:2222"],
                  "worker": ["cmle-training-workerpool1-ab12-0:2222",
                             "cmle-training-workerpool1-ab12-1:2222"]}


def _vertex(task_type, index, **extra):
    task = {"type": task_type, "index": index, "trial": "", "cloud": "cmle-training-ab12"}
    return {"cluster": VERTEX_CLUSTER, "environment": "cloud", "task": task, "job": VERTEX_JOB, **extra}


# name -> TF_CONFIG (a dict, dumped to JSON, or the exact JSON text) and whether we accept it.
CASES = {
    # Kubeflow TFJob operator.
    "kubeflow_worker": ({"cluster": {"worker": K8S["worker"]}, "task": {"type": "worker", "index": 1},
                         "environment": "cloud"}, True),
    "kubeflow_ps_job_chief": ({"cluster": K8S, "task": {"type": "chief", "index": 0},
                               "environment": "cloud"}, True),
    "kubeflow_ps_job_ps": ({"cluster": K8S, "task": {"type": "ps", "index": 0}, "environment": "cloud"}, True),
    "kubeflow_evaluator": ({"cluster": {**K8S, "evaluator": ["mnist-evaluator-0.default.svc:2222"]},
                            "task": {"type": "evaluator", "index": 0}, "environment": "cloud"}, True),
    # Kubeflow with dynamic workers writes a sparse job holding only this worker.
    "kubeflow_sparse_worker_0": ({"cluster": {"worker": {"0": K8S["worker"][0]}, "ps": K8S["ps"]},
                                  "task": {"type": "worker", "index": 0}}, True),
    "kubeflow_sparse_worker_1": ({"cluster": {"worker": {"1": K8S["worker"][1]}, "ps": K8S["ps"]},
                                  "task": {"type": "worker", "index": 1}}, False),
    # Google Vertex AI / AI Platform: extra keys, and the chief may be called "master".
    "vertex_chief": (_vertex("chief", 0), True),
    "vertex_worker_trial": (_vertex("worker", 1, rpc_layer="grpc"), True),
    "vertex_single_replica": ({"cluster": {"chief": VERTEX_CLUSTER["chief"]}, "environment": "cloud",
                               "task": {"type": "chief", "index": 0, "trial": "3"}, "job": VERTEX_JOB}, True),
    "ai_platform_master": ({"cluster": {"master": VERTEX_CLUSTER["chief"], "worker": VERTEX_CLUSTER["worker"]},
                            "task": {"type": "master", "index": 0, "cloud": "c"}, "environment": "cloud",
                            "job": {"scale_tier": "CUSTOM", "master_type": "n1-standard-8"}}, True),
    "ai_platform_master_worker": ({"cluster": {"master": VERTEX_CLUSTER["chief"], "worker": VERTEX_CLUSTER["worker"]},
                                   "task": {"type": "worker", "index": 1}, "environment": "cloud"}, True),
    "master_and_chief": ({"cluster": {"master": ["h:1"], "chief": ["h:2"], "worker": ["h:3"]},
                          "task": {"type": "worker", "index": 0}}, False),
    # Ray Train: workers only.
    "ray_train_worker": ({"cluster": {"worker": ["10.0.0.5:41234", "10.0.0.6:39811"]},
                          "task": {"type": "worker", "index": 0}}, True),
    # R users writing JSON with jsonlite::toJSON(), with and without auto_unbox = TRUE.
    "r_auto_unbox_two_workers": ('{"cluster":{"worker":["h1:2222","h2:2222"]},"task":{"type":"worker","index":1}}', True),
    "r_auto_unbox_one_worker": ('{"cluster":{"worker":"127.0.0.1:2222"},"task":{"type":"worker","index":0}}', True),
    "r_auto_unbox_chief_ps": ('{"cluster":{"chief":"h1:2222","worker":["h2:2222","h3:2222"],"ps":"h4:2222"},'
                              '"task":{"type":"chief","index":0}}', True),
    "r_no_unbox": ('{"cluster":{"worker":["h1:2222","h2:2222"]},"task":{"type":["worker"],"index":[1]}}', True),
    "r_no_unbox_one_worker": ('{"cluster":{"worker":["127.0.0.1:2222"]},"task":{"type":["worker"],"index":[0]}}', True),
    "r_null_role": ('{"cluster":{"worker":["h1:2222","h2:2222"],"ps":{}},"task":{"type":"worker","index":0}}', True),
    "r_index_string": ('{"cluster":{"worker":["h1:2222","h2:2222"]},"task":{"type":"worker","index":"1"}}', True),
    "r_index_double": ('{"cluster":{"worker":["h1:2222","h2:2222"]},"task":{"type":"worker","index":1.0}}', True),
    "json_null_role": ({"cluster": {"worker": W, "ps": None}, "task": {"type": "worker", "index": 0}}, True),
    # TensorFlow's own semantics.
    "unset_is_local": ("{}", True),
    "empty_cluster": ({"cluster": {}}, True),
    "empty_string": ("", False),
    "blank": ("  ", False),
    "not_json": ('{"cluster": {"worker": ["h:1"]}, "task": ', False),
    "array": ("[]", False),
    "string_json": ('"worker"', False),
    "rpc_layer_and_session_master": ({"cluster": {"worker": W}, "task": {"type": "worker", "index": 0},
                                      "rpc_layer": "grpc", "session_master": "grpc://10.0.0.1:2222"}, True),
    "rpc_layer_not_string": ({"cluster": {"worker": W}, "task": {"type": "worker", "index": 0}, "rpc_layer": 5}, False),
    "sparse_dense": ({"cluster": {"worker": {"1": W[1], "0": W[0]}}, "task": {"type": "worker", "index": 1}}, True),
    "sparse_with_gap": ({"cluster": {"worker": {"0": W[0], "2": W[1]}}, "task": {"type": "worker", "index": 0}}, False),
    "evaluator_not_listed": ({"cluster": {"chief": ["h:1"], "worker": W}, "task": {"type": "evaluator", "index": 0}}, True),
    "evaluator_without_cluster": ({"task": {"type": "evaluator", "index": 0}}, True),
    "evaluator_without_index": ({"cluster": {"worker": W}, "task": {"type": "evaluator"}}, True),
    "evaluator_only_cluster": ({"cluster": {"evaluator": ["h:1"]}, "task": {"type": "evaluator", "index": 0}}, True),
    "two_evaluators": ({"cluster": {"worker": W, "evaluator": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 0}}, False),
    "two_chiefs": ({"cluster": {"chief": ["h:1", "h:2"], "worker": W}, "task": {"type": "chief", "index": 0}}, False),
    "ps_coordinator_without_chief": ({"cluster": {"worker": W, "ps": ["h:9"]}}, True),
    "ps_coordinator_empty_task": ({"cluster": {"worker": W, "ps": ["h:9"]}, "task": {}}, True),
    "ps_worker_without_chief": ({"cluster": {"worker": W, "ps": ["h:9"]}, "task": {"type": "worker", "index": 0}}, True),
    "ps_chief_task_without_chief": ({"cluster": {"worker": W, "ps": ["h:9"]}, "task": {"type": "chief", "index": 0}}, False),
    "ps_without_worker": ({"cluster": {"chief": ["h:1"], "ps": ["h:9"]}, "task": {"type": "chief", "index": 0}}, False),
    "ps_task_as_string": ({"cluster": {"worker": W, "ps": ["h:9"]}, "task": "worker"}, False),
    "ps_index_without_type": ({"cluster": {"worker": W, "ps": ["h:9"]}, "task": {"index": 1}}, False),
    "workers_without_task": ({"cluster": {"worker": W}}, False),
    "missing_index": ({"cluster": {"worker": W}, "task": {"type": "worker"}}, False),
    "index_out_of_range": ({"cluster": {"worker": W}, "task": {"type": "worker", "index": 2}}, False),
    "negative_index": ({"cluster": {"worker": W}, "task": {"type": "worker", "index": -1}}, False),
    "fractional_index": ({"cluster": {"worker": W}, "task": {"type": "worker", "index": 1.5}}, False),
    "boolean_index": ({"cluster": {"worker": W}, "task": {"type": "worker", "index": True}}, False),
    "index_not_a_number": ({"cluster": {"worker": W}, "task": {"type": "worker", "index": "one"}}, False),
    "task_type_not_in_cluster": ({"cluster": {"worker": W}, "task": {"type": "chief", "index": 0}}, False),
    "unknown_task_type": ({"cluster": {"worker": W}, "task": {"type": "wroker", "index": 0}}, False),
    "unknown_role": ({"cluster": {"workers": W}, "task": {"type": "worker", "index": 0}}, False),
    "misspelt_cluster_key": ({"clusters": {"worker": W}, "task": {"type": "worker", "index": 0}}, False),
    "address_without_port": ({"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}, False),
    "address_not_string": ({"cluster": {"worker": [2222]}, "task": {"type": "worker", "index": 0}}, False),
    "duplicate_address": ({"cluster": {"worker": [W[0], W[0]]}, "task": {"type": "worker", "index": 0}}, False),
    "task_null": ({"cluster": {"worker": W}, "task": None}, False),
    "cluster_list": ({"cluster": W, "task": {"type": "worker", "index": 0}}, False),
}

# Where we deliberately read TF_CONFIG differently from TensorFlow, and why (one line each).
INTENDED_DIFFERENCES = {
    "ai_platform_master": "AI Platform names the chief 'master', which TF's strategies refuse; we rename it 'chief'",
    "ai_platform_master_worker": "same: the 'master' job of the cluster becomes 'chief' for every task",
    "r_auto_unbox_one_worker": "jsonlite auto_unbox writes a one-task job as a bare string (TF TypeError); we make it a list",
    "r_auto_unbox_chief_ps": "same, for the chief and ps jobs of a parameter-server cluster",
    "r_no_unbox": "jsonlite without auto_unbox writes type/index as 1-element arrays (TF crashes); we unbox them",
    "r_no_unbox_one_worker": "same, for a one-worker cluster",
    "json_null_role": "a null job (R NULL) crashes TF's ClusterSpec; it means 'no such tasks', so we drop it",
    "evaluator_without_index": "TF leaves the evaluator's index None; we write 0 (the evaluator's only index)",
    "array": "TF reads a JSON array as 'no cluster' and trains alone; that is certainly a mistake",
    "string_json": "same for a JSON string such as \"worker\" (TF reads it as 'no cluster')",
    "rpc_layer_not_string": "TF passes a non-string rpc_layer on as the protocol and fails when connecting",
    "sparse_with_gap": "TF accepts gaps in task indices, but its strategies address tasks 0..n-1 and would hang",
    "ps_task_as_string": "TF reads a task that is not an object as 'no task' (the coordinator); certainly a mistake",
    "ps_index_without_type": "TF reads a task without 'type' as 'no task'; an index without a type is a typo",
    "negative_index": "TF's range check has no lower bound; index -1 names no task and fails later",
    "fractional_index": "TF truncates 1.5 to 1, so two tasks could claim the same index",
    "boolean_index": "TF reads true as index 1; no platform writes that, it is a mistake",
    "address_without_port": "TF passes any string on; gRPC fails much later with an obscure error",
    "duplicate_address": "TF passes it on; two tasks cannot listen on one address",
}


def _text(value):
    return value if isinstance(value, str) else json.dumps(value)


@pytest.fixture(scope="module", autouse=True)
def _tensorflow_imported():
    import tensorflow  # noqa: F401  (once, so the first case does not pay for the import)


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_against_tensorflow(name):
    value, we_accept = CASES[name]
    text = _text(value)
    theirs, ours = tensorflow_verdict(text), our_verdict(text)
    assert ours.accepted == we_accept, ours.message
    same = theirs.accepted == ours.accepted and (not ours.accepted or theirs.view == ours.view)
    if name in INTENDED_DIFFERENCES:
        assert not same, f"{name} is listed as a difference but TensorFlow now agrees: remove it"
    else:
        assert same, f"TensorFlow: {theirs}; ours: {ours}"
    if not ours.accepted:
        assert "TF_CONFIG" in ours.message, ours.message


@pytest.mark.parametrize("name", sorted(n for n, (_, ok) in CASES.items() if ok))
def test_what_we_accept_tensorflow_reads_after_write_back(name):
    """Whatever we accept, TensorFlow reads the same way once read_tf_config() has written the
    normalized JSON back to the environment."""
    text = _text(CASES[name][0])
    with tf_config_env(text):
        config = tfd.read_tf_config()
        written = os.environ["TF_CONFIG"]
    expected = view_of(config) if config else view_of({"cluster": {}})
    theirs = tensorflow_verdict(written)
    assert theirs.accepted, theirs.message
    assert theirs.view == expected
    # Keys TensorFlow does not read (Vertex AI's "job", "trial"...) are kept, not dropped.
    raw = json.loads(text)
    assert set(raw) - {"task"} <= set(json.loads(written))


@pytest.mark.parametrize("name", sorted(n for n, (_, ok) in CASES.items()
                                        if ok and "task" in tfd.validate_tf_config(_text(CASES[n][0]))))
def test_is_chief_and_num_workers_are_tensorflows(name):
    from tensorflow.python.distribute import multi_worker_util

    config = tfd.validate_tf_config(_text(CASES[name][0]))
    task = config["task"]
    assert tfd.is_chief(config) == multi_worker_util.is_chief(config["cluster"], task["type"], task["index"])
    if task["type"] in ("chief", "worker") and not config["cluster"].get("ps"):
        assert tfd.num_workers(config) == multi_worker_util.worker_count(config["cluster"], task["type"])


def test_vertex_keys_survive_and_master_becomes_chief(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(CASES["ai_platform_master"][0]))
    config = tfd.read_tf_config()
    written = json.loads(os.environ["TF_CONFIG"])
    assert written == config
    assert config["cluster"]["chief"] == VERTEX_CLUSTER["chief"] and "master" not in config["cluster"]
    assert config["task"] == {"type": "chief", "index": 0, "cloud": "c"}
    assert config["environment"] == "cloud" and config["job"]["scale_tier"] == "CUSTOM"
    assert tfd.is_chief() and tfd.num_workers() == 3


def test_session_master_and_rpc_layer_reach_tensorflow(monkeypatch):
    import tensorflow as tf

    monkeypatch.setenv("TF_CONFIG", json.dumps(CASES["rpc_layer_and_session_master"][0]))
    assert tfd.read_tf_config()["rpc_layer"] == "grpc"
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert resolver.rpc_layer == "grpc" and resolver.master() == "grpc://10.0.0.1:2222"


def test_empty_tf_config_is_our_error_like_tensorflows(monkeypatch):
    """TensorFlow fails with a JSON error on TF_CONFIG=""; we fail first, saying how to unset it."""
    monkeypatch.setenv("TF_CONFIG", "")
    with pytest.raises(tfd.ClusterConfigError, match=r"set but empty.*del os.environ"):
        tfd.read_tf_config()
    with pytest.raises(tfd.ClusterConfigError, match="set but empty"):
        tfd.make_strategy("auto")


def test_evaluator_is_chief_but_never_writes_checkpoints(tmp_path):
    from tfdistributed.training import checkpoints

    config = CASES["kubeflow_evaluator"][0]
    assert tfd.is_chief(config)
    assert not tfd.cluster.is_checkpoint_writer(config)
    target = tmp_path / "model.keras"
    assert checkpoints.write_path(target, config) == str(tmp_path / ".workertemp_evaluator_0" / "model.keras")
    chief = {**config, "task": {"type": "chief", "index": 0}}
    assert checkpoints.write_path(target, chief) == str(target)
    coordinator = CASES["ps_coordinator_without_chief"][0]
    assert checkpoints.write_path(target, coordinator) == str(target)
    # Worker 0 of a chief-less parameter-server cluster is a chief for TensorFlow, but the
    # coordinator writes there: the worker only serves.
    worker0 = CASES["ps_worker_without_chief"][0]
    assert tfd.is_chief(worker0) and not tfd.cluster.is_checkpoint_writer(worker0)


@pytest.mark.parametrize("name,kind", [
    ("vertex_chief", "multi_worker_mirrored"), ("ai_platform_master_worker", "multi_worker_mirrored"),
    ("r_auto_unbox_chief_ps", "parameter_server"), ("ps_coordinator_without_chief", "parameter_server"),
    ("kubeflow_evaluator", "default"), ("evaluator_not_listed", "default"),
    ("vertex_single_replica", "default"), ("unset_is_local", "default"),
])
def test_auto_picks_the_kind_from_tensorflows_reading(monkeypatch, name, kind):
    from tfdistributed.strategies import make as strategies

    monkeypatch.setenv("TF_CONFIG", _text(CASES[name][0]))
    assert strategies._auto_kind() == kind


@pytest.mark.parametrize("name,expected", [
    ("workers_without_task", 'TF_CONFIG has no "task"'),
    ("r_index_string", None),
    ("kubeflow_ps_job_ps", "ps tasks serve variables"),
    ("evaluator_not_listed", "not part of the training cluster"),
])
def test_multi_worker_mirrored_names_tasks_tensorflow_would_crash_on(monkeypatch, name, expected):
    """Refusals happen before TensorFlow is asked; "r_index_string" is a valid 2-worker config,
    checked up to the point where TensorFlow would start connecting (not run here)."""
    from tfdistributed.strategies import make as strategies

    monkeypatch.setenv("TF_CONFIG", _text(CASES[name][0]))
    if expected is None:
        assert strategies._auto_kind() == "multi_worker_mirrored"
        assert json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1
        return
    with pytest.raises((tfd.ClusterConfigError, tfd.StrategyError), match=expected):
        tfd.make_strategy("multi_worker_mirrored")


@pytest.mark.parametrize("name,expected", [
    ("kubeflow_ps_job_ps", "only the chief creates the strategy"),
    ("ps_worker_without_chief", "the coordinator, whose TF_CONFIG has no"),
    ("kubeflow_worker", "needs a cluster with workers and ps tasks"),
])
def test_parameter_server_is_created_only_by_the_coordinator(monkeypatch, name, expected):
    monkeypatch.setenv("TF_CONFIG", _text(CASES[name][0]))
    with pytest.raises(tfd.StrategyError, match=expected):
        tfd.make_strategy("parameter_server")
