"""The catalogue of bad inputs: every foreseeable mistake gets our error and a message naming
the fix. Each case is bounded by a timeout, so none can hang the suite.

A case is (id, call, error type, text the message must contain). The R side's bad inputs are
tested where each R function is (the expect_error cases under rpkg/tests/testthat/), and
tests/r/test_rpy2.py checks that R shows the backend's message and error class.
"""

import json
import socket

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed import (ArgumentTypeError, ClusterConfigError, LaunchError, ShardingError,
                           StrategyError, TFDistributedError, TrainingError)

pytestmark = pytest.mark.timeout(120)


def _model(strategy_name="mirrored", compiled=True):
    import keras

    with tfd.make_strategy(strategy_name).scope():
        model = keras.Sequential([keras.layers.Input((8, 8, 1)), keras.layers.Flatten(),
                                  keras.layers.Dense(10)])
        if compiled:
            model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


def _xy():
    return np.zeros((16, 8, 8, 1), "float32"), np.zeros(16, "int32")


def _one_file_dataset(tmp_path):
    tfd.write_digits_tfds(tmp_path)
    return tfd.load_tfds("sklearn_digits", "train", tmp_path).batch(32)


def _busy_port_launch(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print(1)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        tfd.launch(str(script),
                   tfd.Scaling(cluster={"worker": [f"127.0.0.1:{s.getsockname()[1]}"]}), timeout=10)


def _fit(**kwargs):
    x, y = _xy()
    return lambda tmp: tfd.fit(_model(), x, y, **kwargs)


def _config(**task):
    return {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": task}


CASES = [
    # strategies
    ("unknown strategy name", lambda t: tfd.make_strategy("mirorred"), StrategyError, "Did you mean 'mirrored'"),
    ("strategy name of wrong type", lambda t: tfd.make_strategy(2), ArgumentTypeError, "must be a string"),
    ("num_cpu_devices as a double", lambda t: tfd.make_strategy("mirrored", num_cpu_devices=2.0), ArgumentTypeError, "num_cpu_devices=2, not 2.0"),
    ("num_cpu_devices too late", lambda t: tfd.make_strategy("mirrored", num_cpu_devices=3), StrategyError, "in a fresh session"),
    ("one_device on two devices", lambda t: tfd.make_strategy("one_device", devices=["/cpu:0", "/cpu:1"]), StrategyError, "Use 'mirrored'"),
    ("unknown strategy option", lambda t: tfd.make_strategy("mirrored", replicas=2), ArgumentTypeError, "Unknown argument"),
    ("tpu without a TPU", lambda t: tfd.make_strategy("tpu"), StrategyError, "tpu='my-tpu'"),
    ("parameter_server without a cluster", lambda t: tfd.make_strategy("parameter_server"), StrategyError, "ps=1"),
    # TF_CONFIG
    ("TF_CONFIG not JSON", lambda t: tfd.read_tf_config("{cluster: }"), ClusterConfigError, "not valid JSON"),
    ("TF_CONFIG without task", lambda t: tfd.validate_tf_config({"cluster": {"worker": ["h:1"]}}), ClusterConfigError, '"task": {"type": "worker"'),
    ("task index out of range", lambda t: tfd.validate_tf_config(_config(type="worker", index=2)), ClusterConfigError, "index must be in 0..1"),
    ("task index not a number", lambda t: tfd.validate_tf_config(_config(type="worker", index="one")), ClusterConfigError, "must be a whole number"),
    ("task type not in the cluster", lambda t: tfd.validate_tf_config(_config(type="ps", index=0)), ClusterConfigError, "no 'ps' task"),
    ("unknown role", lambda t: tfd.validate_cluster({"workers": ["h:1"]}), ClusterConfigError, "unknown role 'workers'"),
    ("duplicate address", lambda t: tfd.cluster_spec(["h:1", "h:1"]), ClusterConfigError, "needs its own host:port"),
    ("address without port", lambda t: tfd.cluster_spec(["10.0.0.1"]), ClusterConfigError, '"host:port"'),
    ("ps without worker", lambda t: tfd.cluster_spec([], ps=["h:2"], chief="h:1"), ClusterConfigError, 'add "worker": ["host:port", ...]'),
    ("set_tf_config without a cluster", lambda t: tfd.set_tf_config(), ArgumentTypeError, "local_cluster(2)"),
    ("non-loopback address in a local cluster", lambda t: tfd.launch("x.py",
                                                                     tfd.Scaling(cluster={"worker": ["10.0.0.1:2222"]})), ClusterConfigError, "127.0.0.1 only"),
    ("local cluster with ps and no chief", lambda t: tfd.local_cluster(2, ps=1), ClusterConfigError, "chief=True"),
    # data
    ("too few files for the workers", lambda t: tfd.check_sharding(_one_file_dataset(t), 2, "file"), ShardingError, "Set the shard policy to 'data'"),
    ("too few batches for the workers", lambda t: tfd.check_sharding(__import__("tensorflow").data.Dataset.range(3).batch(2), 3, "data"), ShardingError, "smaller batch size"),
    ("unknown shard policy", lambda t: tfd.with_shard_policy(__import__("tensorflow").data.Dataset.range(3), "files"), ShardingError, "Did you mean 'file'"),
    ("global batch from a double", lambda t: tfd.global_batch_size(32.0), ArgumentTypeError, "per_replica=32, not 32.0"),
    ("TFDS dataset not prepared", lambda t: tfd.load_tfds("sklearn_digits", "train", t), TFDistributedError, "write_digits_tfds()"),
    ("global batch of a non-strategy", lambda t: tfd.global_batch_size(32, "mirrored"), ArgumentTypeError, "make_strategy('mirrored')"),
    ("shards directory missing", lambda t: tfd.read_shards(t / "missing", "y", batch_size=2), TFDistributedError, "write_shards()"),
    ("x and y of different lengths", lambda t: tfd.make_dataset(np.zeros((4, 2)), np.zeros(3), batch_size=2), ArgumentTypeError, "must match"),
    # training
    ("batch size not divisible by replicas", _fit(batch_size=63), TrainingError, "global_batch_size(31, strategy)"),
    ("batch size as a fractional double", _fit(batch_size=64.5), ArgumentTypeError, "whole number"),
    ("epochs of zero", _fit(epochs=0), ArgumentTypeError, ">= 1"),
    ("model built outside the scope", lambda t: tfd.fit(_model("default"), *_xy(), strategy=tfd.make_strategy("mirrored")), TrainingError, "inside the strategy's scope"),
    ("model not compiled", lambda t: tfd.fit(_model(compiled=False), *_xy()), TrainingError, "model.compile"),
    ("batch_size with a dataset", lambda t: tfd.fit(_model(), __import__("tensorflow").data.Dataset.from_tensor_slices(_xy()).batch(8), batch_size=8), ArgumentTypeError, "global_batch_size(per_replica, strategy)"),
    ("verbose level unknown", _fit(verbose=3), ArgumentTypeError, '"auto", 0, 1 or 2'),
    ("Keras' own fit with a float batch", lambda t: _model().fit(*_xy(), batch_size=8.0), ArgumentTypeError, "batch_size=8, not 8.0"),
    ("model file missing", lambda t: tfd.checkpoints.load_model(t / "none.keras"), TrainingError, "save_model(model, path)"),
    ("not a Keras model", lambda t: tfd.evaluate("model", *_xy()), ArgumentTypeError, "needs a Keras model"),
    # launching
    ("script that does not exist", lambda t: tfd.launch(str(t / "missing.py"), timeout=10), LaunchError, "does not exist"),
    ("script of unknown kind", lambda t: (t / "a.sh").write_text("echo") and tfd.launch(str(t / "a.sh"), timeout=10), LaunchError, ".R scripts with Rscript"),
    ("port already in use", _busy_port_launch, LaunchError, "already in use"),
    ("zero workers", lambda t: tfd.launch(str(t), workers=0, timeout=10), ArgumentTypeError, ">= 1"),
    ("negative timeout", lambda t: tfd.launch(str(t), timeout=-1), ArgumentTypeError, "positive number"),
    ("task not in the cluster", lambda t: tfd.launch(str(t),
                                                     tfd.Scaling(cluster={"worker": ["127.0.0.1:1"]}),
                                                     engine=tfd.engines.Local(tasks=[("worker", 3)])), ClusterConfigError, "not in the cluster"),
]


@pytest.mark.parametrize("case,call,error,fix", CASES, ids=[c[0] for c in CASES])
def test_bad_input(tmp_path, monkeypatch, case, call, error, fix):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(error) as info:
        call(tmp_path)
    assert isinstance(info.value, TFDistributedError)
    assert fix in str(info.value), str(info.value)


def test_catalogue_is_large_enough():
    assert len(CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)


def test_malformed_tf_config_in_environment_reaches_the_strategy(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(_config(type="worker", index=5)))
    with pytest.raises(ClusterConfigError, match="out of range"):
        tfd.make_strategy("auto")
