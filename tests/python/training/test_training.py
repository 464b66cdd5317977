"""fit / evaluate under every single-process strategy, and the mistakes fit() catches."""

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed import TrainingError
from models import digits_model as build_digits_model


@pytest.mark.slow  # 12 epochs: most of this file's CPU
def test_mirrored_on_two_logical_cpus_reaches_090(digits):
    (x, y), (xt, yt) = digits
    strategy = tfd.make_strategy("mirrored", num_cpu_devices=2)
    model = build_digits_model(strategy)
    history = tfd.fit(model, x, y, epochs=12, batch_size=64, seed=0, verbose=0,
                      validation_data=(xt, yt))
    assert strategy.num_replicas_in_sync == 2
    assert len(history.history["loss"]) == 12
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert "val_accuracy" in history.history
    metrics = tfd.evaluate(model, xt, yt, batch_size=64, verbose=0)
    assert set(metrics) == {"loss", "accuracy"}
    assert metrics["accuracy"] >= 0.9, metrics


@pytest.mark.parametrize("name", ["default", "one_device", "central_storage", "multi_worker_mirrored"])
def test_fit_and_evaluate_under_each_kind(digits, name):
    (x, y), (xt, yt) = digits
    strategy = tfd.make_strategy(name)
    model = build_digits_model(strategy)
    history = tfd.fit(model, x, y, epochs=2, batch_size=64, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    metrics = tfd.evaluate(model, xt, yt, batch_size=64, verbose=0)
    assert 0.5 < metrics["accuracy"] <= 1.0


@pytest.mark.slow
def test_tf_dataset_input_with_shard_policy(digits_tfds_dir, digits):
    """A TFDS dataset with a shard policy trains like the same examples as arrays, keeps its
    policy through map/batch, and fit(shard_policy=) sets the policy of what Keras reads."""
    import tensorflow as tf

    from tfdistributed.data.plan import plan_input

    def scaled(split, **kwargs):
        dataset = tfd.load_tfds("sklearn_digits", split, digits_tfds_dir, **kwargs)
        return dataset.map(lambda i, l: (tf.cast(i, tf.float32) / 255.0, l)).batch(64)

    strategy = tfd.make_strategy("mirrored")
    train = scaled("train", shard_policy="data")
    assert tfd.shard_policy(train) == "data"
    from_tfds = build_digits_model(strategy, seed=4)
    history = tfd.fit(from_tfds, train, epochs=2, verbose=0).history["loss"]
    assert len(history) == 2 and history[1] < history[0]
    # Every test example read once: the same numbers as the test arrays (which TFDS stored as
    # uint8, in another order).
    _, (xt, yt) = digits
    test = tfd.evaluate(from_tfds, scaled("test"), verbose=0)
    expected = tfd.evaluate(from_tfds, np.round(xt * 255) / 255, yt, batch_size=64, verbose=0)
    assert test["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-6)
    assert test["loss"] == pytest.approx(expected["loss"], rel=1e-4)
    plan = plan_input("fit", scaled("train"), kind="mirrored", replicas=2, shard_policy="off")
    assert tfd.shard_policy(plan.dataset()) == "off"


def test_global_batch_loss_matches_single_device(digits):
    """Same data, same global batch, same seed: 2 replicas and 1 device give the same losses."""
    (x, y), _ = digits
    # Whole batches only: Keras averages a ragged last batch per replica, which is not the
    # global mean when the replicas get unequal shares.
    x, y = x[:1344], y[:1344]
    losses = {}
    for name in ("one_device", "mirrored"):
        model = build_digits_model(tfd.make_strategy(name), seed=3)
        losses[name] = tfd.fit(model, x, y, epochs=2, batch_size=64, shuffle=False,
                               verbose=0).history["loss"]
    np.testing.assert_allclose(losses["mirrored"], losses["one_device"], rtol=1e-4)


@pytest.mark.parametrize("name", ["one_device", pytest.param("mirrored", marks=pytest.mark.slow)])
def test_validation_data_sample_weights_weight_the_validation_metrics(digits, name):
    """(x_val, y_val, sample_weight_val): the third part is used, on one device and on 2
    replicas, and equals the weighted loss computed from the model's own predictions."""
    import keras

    (x, y), (xt, yt) = digits
    weights = np.linspace(0.2, 2.0, len(yt)).astype("float32")
    model = build_digits_model(tfd.make_strategy(name), seed=2)
    history = tfd.fit(model, x[:640], y[:640], epochs=1, batch_size=64, shuffle=False, verbose=0,
                      validation_data=(xt, yt, weights)).history
    losses = keras.losses.sparse_categorical_crossentropy(
        yt, model(xt).numpy(), from_logits=True).numpy()
    # Keras: per batch, sum(weight x loss) / batch size; batches averaged by their size.
    assert history["val_loss"][0] == pytest.approx(float(np.sum(weights * losses) / len(yt)),
                                                   rel=1e-5)
    unweighted = tfd.evaluate(model, xt, yt, batch_size=64, verbose=0)
    assert abs(history["val_loss"][0] - unweighted["loss"]) > 1e-3
    weighted = tfd.evaluate(model, xt, yt, batch_size=64, sample_weight=weights, verbose=0)
    assert weighted["loss"] == pytest.approx(history["val_loss"][0], rel=1e-5)
    assert weighted["accuracy"] == pytest.approx(history["val_accuracy"][0], rel=1e-6)


def test_model_built_outside_the_scope(digits):
    (x, y), _ = digits
    model = build_digits_model(tfd.make_strategy("default"))
    with pytest.raises(TrainingError, match="outside any strategy scope.*strategy.scope"):
        tfd.fit(model, x, y, strategy=tfd.make_strategy("mirrored"))


def test_model_built_under_another_strategy(digits):
    (x, y), _ = digits
    model = build_digits_model(tfd.make_strategy("one_device"))
    with pytest.raises(TrainingError, match="under another strategy \\(one_device\\)"):
        tfd.fit(model, x, y, strategy=tfd.make_strategy("mirrored"))


def test_model_not_compiled(digits):
    import keras

    (x, y), _ = digits
    with tfd.make_strategy("mirrored").scope():
        model = keras.Sequential([keras.layers.Input((8, 8, 1)), keras.layers.Flatten(),
                                  keras.layers.Dense(10)])
    with pytest.raises(TrainingError, match="not compiled"):
        tfd.fit(model, x, y)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(batch_size=63), TrainingError, "use 62 .*or 64"),
    (dict(batch_size=64.0), tfd.ArgumentTypeError, "pass 64 "),
    (dict(batch_size=0), tfd.ArgumentTypeError, ">= 1"),
    (dict(epochs=1.5), tfd.ArgumentTypeError, "whole number"),
    (dict(epochs=None), tfd.ArgumentTypeError, "required"),
    (dict(shard_policy="bogus"), tfd.ShardingError, "Unknown shard policy"),
])
def test_bad_fit_arguments(digits, kwargs, error, match):
    (x, y), _ = digits
    model = build_digits_model(tfd.make_strategy("mirrored"))
    with pytest.raises(error, match=match) as info:
        tfd.fit(model, x, y, **kwargs)
    if kwargs.get("batch_size") == 64.0:  # and R users are shown R's way of writing it
        assert "64L" in r_message(info.value)


def r_message(error) -> str:
    """The message the R package shows: with the R hint when the error carries hints."""
    return error.message_for("r") if hasattr(error, "message_for") else str(error)


def test_dataset_with_y_or_batch_size(digits):
    import tensorflow as tf

    (x, y), _ = digits
    model = build_digits_model(tfd.make_strategy("mirrored"))
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    with pytest.raises(tfd.ArgumentTypeError, match="already holds the targets"):
        tfd.fit(model, ds, y)
    with pytest.raises(tfd.ArgumentTypeError, match="applies to arrays only"):
        tfd.fit(model, ds, batch_size=64)
    with pytest.raises(tfd.ArgumentTypeError, match="Keras model"):
        tfd.fit("model", ds)


def test_predict_under_a_strategy(digits):
    _, (xt, yt) = digits
    model = build_digits_model(tfd.make_strategy("mirrored"))
    out = tfd.predict(model, xt[:100], batch_size=32)
    assert out.shape == (100, 10)
    np.testing.assert_allclose(out, model(xt[:100]).numpy(), rtol=1e-5, atol=1e-5)


def test_model_saved_under_mirrored_loads_with_and_without_a_strategy(digits, tmp_path):
    import tensorflow as tf

    (x, y), (xt, yt) = digits
    # A model trained under mirrored (one epoch), saved, loaded and exported: never trained
    # further here.
    model = build_digits_model(tfd.make_strategy("mirrored", num_cpu_devices=2))
    tfd.fit(model, x, y, epochs=1, batch_size=64, seed=0, verbose=0)
    expected = tfd.evaluate(model, xt, yt, batch_size=64, verbose=0)
    path = tfd.checkpoints.save_model(model, tmp_path / "digits.keras")

    plain = tfd.checkpoints.load_model(path)
    assert tfd.strategy_kind(plain.distribute_strategy) == "default"
    assert tfd.evaluate(plain, xt, yt, batch_size=64, verbose=0) == pytest.approx(expected, rel=1e-5)

    again = tfd.checkpoints.load_model(path, strategy=tfd.make_strategy("mirrored"))
    assert tfd.evaluate(again, xt, yt, batch_size=64, verbose=0) == pytest.approx(expected, rel=1e-5)
    history = tfd.fit(again, x, y, epochs=1, batch_size=64, verbose=0)  # and it trains on
    assert history.history["loss"][0] < expected["loss"] * 1.5

    exported = tfd.checkpoints.export_saved_model(model, tmp_path / "serving")
    served = tf.saved_model.load(exported)
    np.testing.assert_allclose(served.serve(xt[:8]).numpy(), model(xt[:8]).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["default", pytest.param("mirrored", marks=pytest.mark.slow)])
@pytest.mark.parametrize("examples,steps", [(600, 30), (512, 24)])  # 10 batches (the last
def test_steps_per_execution_epochs_are_keras_epochs(digits, name, examples, steps):  # smaller), 8
    # Blocks of 4 over 10 batches: Keras runs 4 + 4 + 2 steps an epoch on arrays. fit() once
    # repeated the batches and passed steps_per_epoch, where Keras runs whole blocks: 12 steps an
    # epoch, each epoch eating into the next one's batches (36 steps instead of 30).
    import keras

    (x, y), _ = digits
    x, y = x[:examples], y[:examples]
    strategy = tfd.make_strategy(name)
    histories, taken, weights = [], [], []
    for run in (tfd.fit, None):
        model = build_digits_model(strategy, seed=1)
        with strategy.scope():
            model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"],
                          steps_per_execution=4)
        ends = []
        seen = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: ends.append(b))
        if run is None:
            with strategy.scope():
                history = model.fit(x, y, epochs=3, batch_size=64, shuffle=False, verbose=0,
                                    callbacks=[seen])
        else:
            history = run(model, x, y, epochs=3, batch_size=64, shuffle=False, verbose=0,
                          callbacks=[seen])
        histories.append(history.history)
        taken.append((int(model.optimizer.iterations.numpy()), ends))
        weights.append(model.get_weights())
    assert taken[0] == taken[1] and taken[0][0] == steps
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(histories[0][key], histories[1][key], rtol=1e-6)
    assert len(weights[0]) == len(weights[1]) == 4
    for got, want in zip(*weights):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("task", ["chief", "worker", "alone"])
def test_keras_backup_stopped_mid_save_leaves_the_previous_backup_whole(tmp_path, monkeypatch,
                                                                        task):
    """Keras' own BackupAndRestore (keras3's callback_backup_and_restore()) in a multi-worker
    job: a save stopped half-way (here: in the metadata's write, after Keras opened the file)
    leaves the previous backup whole, and a new callback resumes from it. With no TF_CONFIG
    (alone) the callback stays Keras': its file is torn, which shows what the test tells."""
    import json

    import keras
    from keras.src.callbacks import backup_and_restore
    from tfdistributed.training.checkpoints import safe_callbacks

    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    if task != "alone":
        monkeypatch.setenv("TF_CONFIG", json.dumps(
            tfd.tf_config(cluster, "worker", 0 if task == "chief" else 1)))
    backup = tmp_path / "backup"
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    callback = keras.callbacks.BackupAndRestore(str(backup))
    assert safe_callbacks([callback])[0] is callback
    callback.set_model(model)
    callback.on_epoch_end(0)  # a whole backup of epoch 1 (Keras counts the next one)
    written = backup if task != "worker" else next(tmp_path.glob(".workertemp_*/backup"))
    metadata = written / "training_metadata.json"
    assert json.loads(metadata.read_text()) == {"epoch": 1, "batch": 0}

    class Stopped(Exception):
        pass

    def stopped(*args, **kwargs):
        raise Stopped()

    backed_up = model.get_weights()
    model.set_weights([w + 1 for w in backed_up])
    with monkeypatch.context() as patch, pytest.raises(Stopped):
        patch.setattr(backup_and_restore, "json", type("json", (), {"dumps": stopped}))
        callback.on_epoch_end(1)
    if task == "alone":
        assert metadata.read_text() == ""  # Keras' own, torn: what the others are kept from
        return
    assert json.loads(metadata.read_text()) == {"epoch": 1, "batch": 0}
    if task == "chief":  # the chief's backup is the one every worker resumes from
        restored = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        restored.compile(optimizer="sgd", loss="mse")
        again = safe_callbacks([keras.callbacks.BackupAndRestore(str(backup))])[0]
        again.set_model(restored)
        again.on_train_begin()
        assert restored._initial_epoch == 1
        # The stopped save's own files stay beside (the next save writes over them).
        assert sorted(p.name for p in backup.iterdir()) == [
            "latest.weights.h5", "saving.weights.h5", "training_metadata.json",
            "training_metadata.json.saving"]
        # The same bytes written and read back: equal bit for bit on any CPU.
        for a, b in zip(restored.get_weights(), backed_up):
            np.testing.assert_array_equal(a, b)
