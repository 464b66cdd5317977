"""TF_CONFIG: build, round-trip, and every validation error names the field and the fix."""

import json
import logging
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tfdistributed as tfd
from tfdistributed import ClusterConfigError
from tf_config_reference import intended_refusal, our_verdict, tensorflow_verdict, view_of


def test_round_trip_build_json_parse():
    cluster = tfd.cluster_spec(["10.0.0.1:2222", "10.0.0.2:2222"], ps=["10.0.0.3:2222"],
                               chief="10.0.0.4:2222")
    config = tfd.tf_config(cluster, "worker", 1)
    text = json.dumps(config)
    assert tfd.read_tf_config(text) == config
    assert config == {"cluster": {"chief": ["10.0.0.4:2222"],
                                  "worker": ["10.0.0.1:2222", "10.0.0.2:2222"],
                                  "ps": ["10.0.0.3:2222"]},
                      "task": {"type": "worker", "index": 1}}


def test_set_and_read_from_environment(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert tfd.read_tf_config() is None
    cluster = tfd.local_cluster(2)
    set_ = tfd.set_tf_config(cluster=cluster, task_type="worker", task_index=1)
    assert json.loads(__import__("os").environ["TF_CONFIG"]) == set_
    assert tfd.read_tf_config() == set_
    assert tfd.num_workers() == 2 and not tfd.is_chief()
    tfd.clear_tf_config()
    assert tfd.read_tf_config() is None and tfd.is_chief()


def test_tensorflow_reads_what_we_write(monkeypatch):
    import tensorflow as tf

    cluster = tfd.cluster_spec(["127.0.0.1:5000", "127.0.0.1:5001"], chief="127.0.0.1:5002")
    tfd.set_tf_config(cluster=cluster, task_type="worker", task_index=1)
    try:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        assert resolver.task_type == "worker" and resolver.task_id == 1
        assert resolver.cluster_spec().as_dict() == cluster
    finally:
        tfd.clear_tf_config()


def test_local_cluster_is_loopback_with_distinct_free_ports():
    cluster = tfd.local_cluster(workers=3, ps=2, chief=True)
    addresses = [a for role in cluster.values() for a in role]
    assert len(addresses) == 6 == len(set(addresses))
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    assert list(cluster) == ["chief", "worker", "ps"]
    tfd.check_loopback(cluster)


BAD_CONFIGS = [
    ('{"cluster": {"worker": ["a:1"]}, "task": ', "not valid JSON"),
    ("", "set but empty"),
    ("[1, 2]", "must be a JSON object"),
    ({"task": {"type": "worker", "index": 0}}, 'has no "cluster"'),
    ({"cluster": {"worker": ["h:1"]}}, 'has no "task"'),
    ({"clusters": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}, 'did you mean "cluster"'),
    ({"cluster": {"workers": ["h:1"]}, "task": {"type": "worker", "index": 0}}, "Did you mean 'worker'"),
    ({"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}, 'TF_CONFIG["cluster"]["worker"][0]'),
    ({"cluster": {"worker": ["h:1", "h:99999"]}, "task": {"type": "worker", "index": 0}}, "outside 1-65535"),
    ({"cluster": {"worker": [5]}, "task": {"type": "worker", "index": 0}}, '"host:port" string'),
    ({"cluster": {"worker": ["h:1", "h:1"]}, "task": {"type": "worker", "index": 0}}, 'is also TF_CONFIG["cluster"]["worker"][0]'),
    ({"cluster": {"chief": ["h:1"], "worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}, "its own host:port"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1}}, "index must be in 0..0"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": -1}}, "out of range"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": "one"}}, "must be a whole number"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1.5}}, "must be a whole number"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker"}}, 'has no "index"'),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "chief", "index": 0}}, "no 'chief' task"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "wroker", "index": 0}}, "Did you mean 'worker'"),
    ({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "chief", "index": 0}},
     'the coordinator of a parameter-server cluster without a chief has no "task"'),
    ({"cluster": {"chief": ["h:1"], "ps": ["h:2"]}, "task": {"type": "chief", "index": 0}}, 'no "worker"'),
    ({"cluster": {"chief": ["h:1", "h:2"]}, "task": {"type": "chief", "index": 0}}, "at most one"),
    ({"cluster": {"master": ["h:1"], "chief": ["h:2"]}, "task": {"type": "chief", "index": 0}}, "two names for the chief"),
    ({"cluster": {"ps": []}, "task": {"type": "ps", "index": 0}}, "there is no 'ps' task"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "idx": 0}}, 'did you mean "index"'),
    ({"cluster": {"worker": {"0": "h:1", "2": "h:2"}}, "task": {"type": "worker", "index": 0}}, "lists task indices [0, 2]"),
    ({"cluster": {"worker": {"a": "h:1"}}, "task": {"type": "worker", "index": 0}}, "'a' is not an index"),
    ({"cluster": {"worker": ["h:1"]}, "task": "worker"}, 'TF_CONFIG["task"] must be an object'),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}, "rpc_layer": 1}, "protocol name"),
]


@pytest.mark.parametrize("config,expected", BAD_CONFIGS)
def test_bad_tf_config_names_the_field(config, expected):
    with pytest.raises(ClusterConfigError) as info:
        tfd.validate_tf_config(config)
    assert expected in str(info.value)


def test_bad_config_in_environment_is_reported(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}}')
    with pytest.raises(ClusterConfigError, match="out of range"):
        tfd.read_tf_config()


def test_non_loopback_address_refused_for_local_clusters():
    with pytest.raises(ClusterConfigError, match="not a loopback address"):
        tfd.check_loopback({"worker": ["127.0.0.1:1", "10.1.2.3:2222"]})
    tfd.check_loopback({"worker": ["localhost:1", "[::1]:2", "127.0.0.5:3"]})


def test_local_clusters_need_what_launch_runs():
    with pytest.raises(ClusterConfigError, match='no "worker" or "chief"'):
        tfd.check_loopback({})
    # Valid TF_CONFIG for TensorFlow, but launch() runs the program as the chief.
    with pytest.raises(ClusterConfigError, match="runs your program as the chief"):
        tfd.check_loopback({"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]})



def test_local_cluster_argument_errors():
    with pytest.raises(tfd.ArgumentTypeError, match="pass 2 as an integer. E.g. workers=2, not 2.0") as e:
        tfd.local_cluster(workers=2.0)
    # The message is language-neutral; each language adds its own hint (R: in the R package).
    assert "2L" not in str(e.value) and e.value.message_for("r").endswith("E.g. workers = 2L.")
    with pytest.raises(ClusterConfigError, match="chief=True") as e:
        tfd.local_cluster(workers=2, ps=1)
    assert "chief = TRUE" in e.value.message_for("r") and "chief=True" not in e.value.message_for("r")


def test_normalized_shapes():
    """What platforms and R write, as TensorFlow's strategies need it (module docstring)."""
    config = tfd.validate_tf_config(
        '{"cluster": {"master": "h:1", "worker": {"1": " h:3", "0": "h:2"}, "ps": null, "evaluator": []},'
        ' "task": {"type": ["master"], "index": ["0"], "trial": "7"}, "job": {"x": [1]},'
        ' "environment": "cloud", "rpc_layer": ["grpc"], "session_master": "grpc://h:1"}')
    assert config == {"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"]},
                      "task": {"type": "chief", "index": 0, "trial": "7"}, "rpc_layer": "grpc",
                      "job": {"x": [1]}, "environment": "cloud", "session_master": "grpc://h:1"}
    assert tfd.validate_tf_config(json.dumps(config)) == config
    assert tfd.validate_tf_config({"cluster": {"worker": ["h:1", "h:2"]},
                                   "task": {"type": "worker", "index": 1.0}})["task"]["index"] == 1


def test_read_tf_config_writes_the_normalized_json_back(monkeypatch):
    raw = '{"cluster":{"worker":"127.0.0.1:2222"},"task":{"type":"worker","index":"0"},"job":{}}'
    monkeypatch.setenv("TF_CONFIG", raw)
    config = tfd.read_tf_config()
    assert json.loads(os.environ["TF_CONFIG"]) == config
    assert config["cluster"] == {"worker": ["127.0.0.1:2222"]} and config["job"] == {}
    canonical = json.dumps(config, indent=1)
    monkeypatch.setenv("TF_CONFIG", canonical)
    tfd.read_tf_config()
    assert os.environ["TF_CONFIG"] == canonical  # nothing to fix: left exactly as written


def test_no_cluster_reads_as_none(monkeypatch):
    for text in ("{}", '{"cluster": {}}', '{"environment": "cloud", "task": {}}', '{"cluster": {"worker": []}}'):
        monkeypatch.setenv("TF_CONFIG", text)
        assert tfd.read_tf_config() is None and tfd.is_chief() and tfd.num_workers() == 1


def test_unknown_keys_are_reported_not_fatal(caplog):
    caplog.set_level(logging.DEBUG, logger="tfdistributed.cluster")
    tfd.validate_tf_config({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0, "cloudy": 1},
                            "taks": {}, "jobb": {}})
    messages = {r.getMessage(): r.levelno for r in caplog.records}
    assert messages['TF_CONFIG["taks"] is not a key TensorFlow reads; ignored. Did you mean \'task\'?'] == logging.WARNING
    assert messages['TF_CONFIG["jobb"] is not a key TensorFlow reads; ignored.'] == logging.DEBUG
    assert 'TF_CONFIG["task"]["cloudy"] is not a key TensorFlow reads; ignored.' in messages


def test_parameter_server_cluster_without_chief():
    cluster = tfd.cluster_spec(["h:1", "h:2"], ps=["h:3"])
    coordinator = tfd.tf_config(cluster, None)
    assert coordinator == {"cluster": cluster}
    assert tfd.is_chief(coordinator) and tfd.num_workers(coordinator) == 2
    assert tfd.is_chief(tfd.tf_config(cluster, "worker", 0))  # TensorFlow's definition
    assert not tfd.cluster.is_checkpoint_writer(tfd.tf_config(cluster, "worker", 0))
    with pytest.raises(ClusterConfigError, match='no "worker" or "chief"'):
        tfd.cluster_spec([])


def test_roles_as_tensorflow_defines_them():
    from tensorflow.python.distribute import multi_worker_util

    cluster = {"chief": ["h:10"], "worker": ["h:1", "h:2"], "evaluator": ["h:9"]}
    for role, index in [("chief", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)]:
        config = tfd.tf_config(cluster, role, index)
        assert tfd.is_chief(config) == multi_worker_util.is_chief(cluster, role, index)
        if role != "evaluator":
            assert tfd.num_workers(config) == multi_worker_util.worker_count(cluster, role) == 3
    evaluator = tfd.tf_config(cluster, "evaluator", 0)
    assert tfd.is_chief(evaluator) and not tfd.cluster.is_checkpoint_writer(evaluator)
    assert tfd.num_workers(evaluator) == 1


def test_num_workers_counts_the_hosts_of_training_replicas_not_a_coordinating_chief():
    """A global batch computed from num_workers() must not count the parameter-server chief,
    which runs no step (TensorFlow's worker_count counts it)."""
    from tensorflow.python.distribute import multi_worker_util

    cluster = {"chief": ["h:10"], "worker": ["h:1", "h:2"], "ps": ["h:3"]}
    for role, index in [("chief", 0), ("worker", 1), ("ps", 0)]:
        assert tfd.num_workers(tfd.tf_config(cluster, role, index)) == 2
    assert multi_worker_util.worker_count(cluster, "chief") == 3


# No NUL: a bare string is set as the TF_CONFIG text itself, and no environment variable can
# hold one (os.environ refuses it before any reader sees it).
_text = st.one_of(st.text(st.characters(exclude_characters="\x00"), max_size=8),
                  st.sampled_from(["worker", "chief", "ps", "evaluator", "127.0.0.1:80", "h:1",
                                   "cluster", "task"]))
_json = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 70000), _text),
                     lambda children: st.lists(children, max_size=4) |
                     st.dictionaries(_text, children, max_size=4), max_leaves=20)

# TF_CONFIG-shaped values, mostly plausible, with every kind of mistake and platform extra.
_address = st.sampled_from(["127.0.0.1:2222", "10.0.0.2:2222", "h:1", "h:2", "[::1]:5", " h:3 ",
                            "localhost", "", "h:0", "h:99999", 7, None])
_job = st.one_of(st.lists(_address, max_size=3), _address,
                 st.dictionaries(st.sampled_from(["0", "1", "2", " 1", "-1", "x", "01"]), _address, max_size=3),
                 st.just({}), st.integers(0, 3))
_role = st.sampled_from(["chief", "worker", "worker", "ps", "evaluator", "master", "workers", ""])
_index = st.one_of(st.integers(-2, 3), st.sampled_from(["0", "1", " 1", "x", "1.0", 1.0, 1.5, True, None,
                                                        [0], [1], [[0]], float("nan"), 1e20]))
_task = st.one_of(
    st.fixed_dictionaries({}, optional={
        "type": st.one_of(_role, st.sampled_from([None, 5, ["worker"], ["chief", "ps"]])),
        "index": _index, "trial": st.sampled_from(["", "3"]), "cloud": st.just("c")}),
    st.sampled_from([None, "worker", [], "", "type", 3]))
_tf_config_like = st.fixed_dictionaries({}, optional={
    "cluster": st.one_of(st.dictionaries(_role, _job, max_size=4), st.sampled_from([None, [], "h:1"])),
    "task": _task,
    "rpc_layer": st.sampled_from(["grpc", "", None, 5, ["grpc"]]),
    "session_master": st.sampled_from(["", "grpc://h:1", 3]),
    "environment": st.sampled_from(["cloud", "google", 1]),
    "job": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
    "clusters": st.just({}),
})


def _against_tensorflow(value):
    """Our reading of ``value`` must never crash, must agree with TensorFlow's once written back,
    and may refuse what TensorFlow accepts only as one of the listed intended differences."""
    ours = our_verdict(value)
    if isinstance(value, (dict, list)):
        assert our_verdict(json.dumps(value)).outcome == ours.outcome
    text = value if isinstance(value, str) else json.dumps(value)
    if ours.accepted:
        assert tfd.validate_tf_config(ours.message) == json.loads(ours.message)
        theirs = tensorflow_verdict(ours.message)
        assert theirs.accepted, f"we accept {text!r} as {ours.message}, TensorFlow: {theirs.message}"
        assert theirs.view == ours.view
    elif tensorflow_verdict(text).accepted:
        assert intended_refusal(ours.message), f"TensorFlow accepts {text!r}; we say: {ours.message}"


@settings(max_examples=300, deadline=None)
@given(_json)
def test_any_json_is_read_as_tensorflow_reads_it(value):
    _against_tensorflow(value)


@settings(max_examples=500, deadline=None)
@given(_tf_config_like)
def test_any_tf_config_shape_is_read_as_tensorflow_reads_it(value):
    _against_tensorflow(value)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(0, 3), st.booleans(), st.data())
def test_every_task_of_a_valid_cluster_round_trips(workers, ps, chief, data):
    cluster = {"worker": [f"127.0.0.1:{2000 + i}" for i in range(workers)]}
    if ps:
        cluster["ps"] = [f"127.0.0.1:{3000 + i}" for i in range(ps)]
    if chief:
        cluster["chief"] = ["127.0.0.1:4000"]
    role = data.draw(st.sampled_from(sorted(cluster) + (["coordinator"] if ps and not chief else [])))
    if role == "coordinator":
        config = tfd.tf_config(cluster, None)
    else:
        config = tfd.tf_config(cluster, role, data.draw(st.integers(0, len(cluster[role]) - 1)))
    text = json.dumps(config)
    assert tfd.read_tf_config(text) == config
    assert tensorflow_verdict(text).view == view_of(config)
