"""Strategies by name: every kind this machine can run, aliases, auto, and every error."""

import json
import re

import pytest

import tfdistributed as tfd
from tfdistributed import ArgumentTypeError, StrategyError
from tfdistributed.strategies.make import _auto_kind


@pytest.mark.parametrize("name,kind,replicas", [
    ("default", "default", 1),
    ("one_device", "one_device", 1),
    ("mirrored", "mirrored", 2),
    ("central_storage", "central_storage", 2),
    # one replica per worker on CPU: MultiWorkerMirrored uses GPUs or a single CPU device
    ("multi_worker_mirrored", "multi_worker_mirrored", 1),
])
def test_each_local_kind(name, kind, replicas):
    strategy = tfd.make_strategy(name)
    info = tfd.strategy_info(strategy)
    assert info["kind"] == kind
    assert info["num_replicas"] == replicas
    assert len(info["devices"]) == replicas


@pytest.mark.parametrize("alias,canonical", [
    ("MirroredStrategy", "mirrored"), ("Mirrored", "mirrored"), ("MIRRORED", "mirrored"),
    ("MultiWorkerMirroredStrategy", "multi_worker_mirrored"), ("multi-worker-mirrored", "multi_worker_mirrored"),
    ("CentralStorageStrategy", "central_storage"), ("OneDeviceStrategy", "one_device"),
    ("ParameterServerStrategy", "parameter_server"), ("TPUStrategy", "tpu"), ("ps", "parameter_server"),
    ("Auto", "auto"), ("default", "default"),
])
def test_aliases(alias, canonical):
    assert tfd.canonical_name(alias) == canonical


def test_devices_can_be_chosen():
    strategy = tfd.make_strategy("one_device", devices="/cpu:1")
    assert tfd.strategy_info(strategy)["devices"][0].endswith("CPU:1")
    strategy = tfd.make_strategy("mirrored", devices=["/cpu:0"])
    assert strategy.num_replicas_in_sync == 1


def test_default_inside_another_scope_is_still_the_default():
    with tfd.make_strategy("mirrored").scope():
        assert tfd.strategy_kind(tfd.make_strategy("default")) == "default"


def test_num_cpu_devices_matching_the_current_split_is_accepted():
    assert tfd.make_strategy("mirrored", num_cpu_devices=2).num_replicas_in_sync == 2


def _config(cluster, role="worker", index=0):
    return json.dumps(tfd.tf_config(cluster, role, index))


@pytest.mark.parametrize("env,expected", [
    (None, "mirrored"),  # 2 logical CPUs set by conftest, but only when asked for
    (_config({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}), "multi_worker_mirrored"),
    (_config({"chief": ["127.0.0.1:3"], "worker": ["127.0.0.1:1"]}), "multi_worker_mirrored"),
    (_config({"chief": ["127.0.0.1:3"], "worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "chief"), "parameter_server"),
    (_config({"worker": ["127.0.0.1:1"]}), "default"),
])
def test_auto_reads_tf_config(monkeypatch, env, expected):
    if env is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
        assert _auto_kind(num_cpu_devices=2) == expected
        assert _auto_kind() == "default"
    else:
        monkeypatch.setenv("TF_CONFIG", env)
        assert _auto_kind() == expected


def test_unknown_name_lists_names_and_closest():
    with pytest.raises(StrategyError) as info:
        tfd.make_strategy("mirorred")
    message = str(info.value)
    assert "Did you mean 'mirrored'?" in message
    for name in tfd.STRATEGY_NAMES:
        assert name in message
    with pytest.raises(StrategyError, match="Did you mean 'multi_worker_mirrored'"):
        tfd.make_strategy("MultiWorkerMirored")
    with pytest.raises(StrategyError, match="Valid names"):
        tfd.make_strategy("banana")


@pytest.mark.parametrize("kwargs,match", [
    (dict(name=3), "must be a string"),
    (dict(name=None), "must be a string"),
    (dict(name="mirrored", num_cpu_devices=2.0), "pass 2 "),
    (dict(name="mirrored", num_cpu_devices=0), ">= 1"),
    (dict(name="mirrored", devices=[0, 1]), "device strings"),
    (dict(name="mirrored", bogus=1), "Unknown argument"),
])
def test_argument_types(kwargs, match):
    with pytest.raises(ArgumentTypeError, match=match) as info:
        tfd.make_strategy(**kwargs)
    if kwargs.get("num_cpu_devices") == 2.0:  # and R users are shown R's way of writing it
        assert "2L" in r_message(info.value)


def r_message(error) -> str:
    """The message the R package shows: with the R hint when the error carries hints."""
    return error.message_for("r") if hasattr(error, "message_for") else str(error)


def test_too_late_to_split_cpu():
    with pytest.raises(StrategyError, match="before anything else uses TensorFlow"):
        tfd.make_strategy("mirrored", num_cpu_devices=4)


def test_one_device_with_two_devices():
    with pytest.raises(StrategyError, match="exactly one device"):
        tfd.make_strategy("one_device", devices=["/cpu:0", "/cpu:1"])


def test_tpu_without_tpu():
    with pytest.raises(StrategyError, match="No TPU could be reached.*tpu='my-tpu'"):
        tfd.make_strategy("tpu")


def test_parameter_server_without_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(StrategyError, match="launch\\(.*Scaling\\(workers=2, ps=1") as info:
        tfd.make_strategy("parameter_server")
    assert re.search(r"launch_cluster\(.*ps = 1", r_message(info.value))


def test_parameter_server_from_a_worker_task(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _config(
        {"chief": ["127.0.0.1:3"], "worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "worker"))
    with pytest.raises(StrategyError, match="only the chief creates the strategy"):
        tfd.make_strategy("parameter_server")


def test_malformed_tf_config_stops_multi_worker(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 2}}')
    with pytest.raises(tfd.ClusterConfigError, match="out of range"):
        tfd.make_strategy("multi_worker_mirrored")
    with pytest.raises(tfd.ClusterConfigError, match="out of range"):
        tfd.make_strategy("auto")


def test_several_mirrored_strategies_in_one_process():
    """A re-run notebook chunk creates a new strategy; models of other shapes must still train."""
    import keras
    import numpy as np

    for n_in, n_out in [(3, 1), (2, 3), (5, 2)]:
        strategy = tfd.make_strategy("mirrored")
        with strategy.scope():
            model = keras.Sequential([keras.layers.Input((n_in,)), keras.layers.Dense(n_out)])
            model.compile(optimizer="sgd", loss="mse")
        history = tfd.fit(model, np.ones((32, n_in), "float32"), np.ones((32, n_out), "float32"),
                          batch_size=16, verbose=0)
        assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("value", ["fp8", "int8", 16, "topk"])
def test_unknown_gradient_compression_names_the_argument(value):
    with pytest.raises(tfd.StrategyError, match=r"`gradient_compression` must be one of 'none', "
                                                r"'fp16', 'bf16'"):
        tfd.make_strategy("multi_worker_mirrored", gradient_compression=value)


@pytest.mark.parametrize("name", ["default", "mirrored", "one_device", "central_storage",
                                  "parameter_server"])
def test_gradient_compression_without_a_cross_worker_all_reduce_is_refused(name):
    with pytest.raises(tfd.StrategyError, match=rf"`gradient_compression` applies to "
                                                rf"'multi_worker_mirrored'.*'{name}' has no"):
        tfd.make_strategy(name, gradient_compression="fp16")


def test_auto_ignores_gradient_compression_on_a_local_strategy_with_a_warning():
    # The same script runs on a laptop and on a cluster, as Horovod's compression on one rank.
    with pytest.warns(UserWarning, match=r"`gradient_compression='bf16'` is ignored: 'auto' "
                                         r"chose 'default'"):
        strategy = tfd.make_strategy("auto", gradient_compression="bf16")
    assert tfd.gradient_compression(strategy) is None


@pytest.mark.parametrize("value,expected", [("FP16", "fp16"), ("bfloat16", "bf16"),
                                            ("none", None), (None, None)])
def test_gradient_compression_spellings(value, expected):
    from tfdistributed.strategies.compression import canonical_compression

    assert canonical_compression(value) == expected


def test_set_gradient_compression_refuses_a_local_strategy():
    strategy = tfd.make_strategy("default")
    with pytest.raises(tfd.StrategyError, match="has no such all-reduce"):
        tfd.set_gradient_compression(strategy, "fp16")
    assert tfd.set_gradient_compression(strategy, None) is strategy
    assert tfd.gradient_compression(strategy) is None
