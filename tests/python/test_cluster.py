"""TF_CONFIG: build, round-trip, and every validation error names the field and the fix."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tfdistributed as tfd
from tfdistributed import ClusterConfigError


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
    ("[1, 2]", "must be a JSON object"),
    ({"task": {"type": "worker", "index": 0}}, 'has no "cluster"'),
    ({"cluster": {"worker": ["h:1"]}}, 'has no "task"'),
    ({"clusters": {"worker": ["h:1"]}, "task": {}}, "Did you mean 'cluster'"),
    ({"cluster": {"workers": ["h:1"]}, "task": {"type": "worker"}}, "Did you mean 'worker'"),
    ({"cluster": {"worker": ["localhost"]}, "task": {"type": "worker"}}, 'TF_CONFIG["cluster"]["worker"][0]'),
    ({"cluster": {"worker": ["h:1", "h:99999"]}, "task": {"type": "worker"}}, "outside 1-65535"),
    ({"cluster": {"worker": [5]}, "task": {"type": "worker"}}, '"host:port" string'),
    ({"cluster": {"worker": ["h:1", "h:1"]}, "task": {"type": "worker"}}, 'is also TF_CONFIG["cluster"]["worker"][0]'),
    ({"cluster": {"chief": ["h:1"], "worker": ["h:1"]}, "task": {"type": "worker"}}, "its own host:port"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1}}, "index must be in 0..0"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": -1}}, "out of range"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": "0"}}, "must be an integer"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "chief"}}, "no 'chief' task"),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "wroker"}}, "Did you mean 'worker'"),
    ({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "worker"}}, 'no "chief"'),
    ({"cluster": {"chief": ["h:1"], "ps": ["h:2"]}, "task": {"type": "chief"}}, 'no "worker"'),
    ({"cluster": {"chief": ["h:1", "h:2"]}, "task": {"type": "chief"}}, "at most one"),
    ({"cluster": {"ps": []}, "task": {"type": "ps"}}, 'no "worker" or "chief"'),
    ({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "idx": 0}}, "Did you mean 'index'"),
    ({"cluster": {"worker": {"0": "h:1"}}, "task": {"type": "worker"}}, "sparse task indices"),
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


def test_local_cluster_argument_errors():
    with pytest.raises(tfd.ArgumentTypeError, match="2L"):
        tfd.local_cluster(workers=2.0)
    with pytest.raises(ClusterConfigError, match="chief=True"):
        tfd.local_cluster(workers=2, ps=1)


_text = st.one_of(st.text(max_size=8), st.sampled_from(["worker", "chief", "ps", "evaluator",
                                                        "127.0.0.1:80", "h:1", "cluster", "task"]))
_json = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 70000), _text),
                     lambda children: st.lists(children, max_size=4) |
                     st.dictionaries(_text, children, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_parser_never_fails_with_anything_but_our_error(value):
    """Any JSON value either validates (and then TF can read it) or raises ClusterConfigError."""
    for candidate in (value, json.dumps(value)):
        try:
            config = tfd.validate_tf_config(candidate)
        except ClusterConfigError:
            continue
        assert tfd.validate_tf_config(json.dumps(config)) == config


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(0, 3), st.booleans(), st.data())
def test_every_task_of_a_valid_cluster_round_trips(workers, ps, chief, data):
    chief = chief or ps > 0
    cluster = {"worker": [f"127.0.0.1:{2000 + i}" for i in range(workers)]}
    if ps:
        cluster["ps"] = [f"127.0.0.1:{3000 + i}" for i in range(ps)]
    if chief:
        cluster["chief"] = ["127.0.0.1:4000"]
    role = data.draw(st.sampled_from(sorted(cluster)))
    index = data.draw(st.integers(0, len(cluster[role]) - 1))
    config = tfd.tf_config(cluster, role, index)
    assert tfd.read_tf_config(json.dumps(config)) == config
