"""Chief of a parameter-server cluster for tests/python/training/test_ps.py.

    ps_train.py OUTDIR train                 digits through tfdistributed.fit/evaluate/predict,
                                             then one epoch with weighted validation data
    ps_train.py OUTDIR partition             2 ps tasks: a big Embedding split over both; then
                                             digits from a tf.data.Dataset and a dataset function
    ps_train.py OUTDIR kill                  SIGKILL worker 1 as epoch 2 begins, wait until it
                                             is dead, then schedule the epoch; training goes on

Writes OUTDIR/result.json (and OUTDIR/weights.npz for ``train``) for the test to check.
"""

import json
import os
import signal
import sys

import numpy as np

import tfdistributed as tfd
from tfdistributed.training import ps
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from enginesupport import task_pid  # noqa: E402  (tests/python/support/enginesupport.py)
from models import digits_model as build_model  # noqa: E402  (tests/python/support/models.py)

EPOCHS = 12
BATCH = 64


def digits_model(strategy):
    return build_model(strategy, seed=None, learning_rate=0.01)


def epoch_recorder(seen):
    import keras

    class Recorder(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(epoch)

    return Recorder()


def train(outdir):
    import keras

    strategy = tfd.make_strategy("auto")
    (x_train, y_train), (x_test, y_test) = tfd.digits_arrays()
    model = digits_model(strategy)
    seen = []
    history = tfd.fit(model, x_train, y_train, epochs=EPOCHS, batch_size=BATCH, seed=0,
                      validation_data=(x_test, y_test),
                      callbacks=[epoch_recorder(seen),
                                 keras.callbacks.ModelCheckpoint(
                                     os.path.join(outdir, "keras.weights.h5"),
                                     save_weights_only=True)],
                      checkpoint_dir=os.path.join(outdir, "ckpt"))
    result = tfd.evaluate(model, x_test, y_test, batch_size=BATCH)
    predictions = ps.predict(model, x_test[:50])
    np.savez(os.path.join(outdir, "weights.npz"), *model.get_weights())
    with strategy.scope():
        iterations = int(model.optimizer.iterations.numpy())
    return {"strategy": tfd.strategy_kind(strategy), "history": history.history,
            "epochs_seen": seen, "evaluate": result, "iterations": iterations,
            "steps_per_epoch": len(x_train) // BATCH,
            "predict_shape": list(predictions.shape),
            "predict_accuracy": float(np.mean(predictions.argmax(-1) == y_test[:50])),
            **weighted_validation(model, x_train, y_train, x_test, y_test)}


def weighted_validation(model, x_train, y_train, x_test, y_test):
    """One more epoch with (x_val, y_val, sample_weight_val): its validation numbers and the
    chief's evaluation of the same weights, with and without those weights."""
    # A ramp, so each example must get its own weight (the hand computation checks that), with
    # a mean of 2, so the weighted loss stays about twice the unweighted one: a ramp around 1
    # can cancel out against how the losses fall along the test set (seen: 0.1097 vs 0.1104).
    weights = np.linspace(1.0, 3.0, len(y_test)).astype("float32")
    history = tfd.fit(model, x_train, y_train, epochs=1, batch_size=BATCH, seed=0,
                      validation_data=(x_test, y_test, weights))
    return {"weighted_val_loss": history.history["val_loss"][0],
            "weighted_evaluate": tfd.evaluate(model, x_test, y_test, batch_size=BATCH,
                                              sample_weight=weights),
            "unweighted_evaluate": tfd.evaluate(model, x_test, y_test, batch_size=BATCH),
            "weighted_evaluate_by_hand": weighted_loss_by_hand(model, x_test, y_test, weights)}


def weighted_loss_by_hand(model, x, y, weights):
    """Keras' weighted loss computed from the model's own predictions: per batch, the sum of
    weight x loss over the batch size, averaged over batches weighted by their size."""
    import keras

    logits = ps.predict(model, x)
    losses = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True).numpy()
    per_batch = [(np.sum(weights[i:i + BATCH] * losses[i:i + BATCH]), len(losses[i:i + BATCH]))
                 for i in range(0, len(y), BATCH)]
    return float(sum(total for total, _ in per_batch) / sum(n for _, n in per_batch))


def partition(outdir):
    import keras
    import tensorflow as tf

    strategy = tfd.make_strategy("parameter_server",
                                 variable_partitioner=ps.partitioner("min_size"))
    vocab, dim = 5000, 32  # 640 KB: at least 2 shards of MinSizePartitioner's 256 KB
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((4,), dtype="int32"),
            keras.layers.Embedding(vocab, dim),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(2),
        ])
        model.compile(optimizer=keras.optimizers.Adam(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    embedding = model.layers[0].embeddings
    variable = getattr(embedding, "value", embedding)
    shards = list(getattr(variable, "variables", [variable]))
    rng = np.random.default_rng(0)
    x = rng.integers(0, vocab, size=(512, 4)).astype(np.int32)
    y = (x[:, 0] % 2).astype(np.int32)
    history = tfd.fit(model, x, y, epochs=3, batch_size=64)
    return {"type": type(variable).__name__, "devices": [s.device for s in shards],
            "shapes": [list(s.shape) for s in shards], "loss": history.history["loss"],
            "is_sharded": isinstance(variable, tf.__internal__.distribute.ShardedVariable),
            **other_inputs(strategy)}


def other_inputs(strategy):
    """Digits from a tf.data.Dataset, then from a dataset function, on the same cluster."""
    import keras
    import tensorflow as tf

    (x_train, y_train), (x_test, y_test) = tfd.digits_arrays()
    model = digits_model(strategy)
    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2000, seed=0)
    from_dataset = tfd.fit(model, dataset.batch(BATCH), epochs=4).history["loss"]

    def dataset_fn(context):
        # Each worker keeps its own shard of the examples.
        return (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                .shard(context.num_input_pipelines, context.input_pipeline_id)
                .batch(context.get_per_replica_batch_size(BATCH)))

    # Asks for 5 epochs; no epoch can improve the loss by 10, so the second one stops it.
    stop = keras.callbacks.EarlyStopping(monitor="loss", min_delta=10.0, patience=1)
    from_function = tfd.fit(model, dataset_fn, epochs=5, steps_per_epoch=10,
                            callbacks=[stop]).history["loss"]
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH)
    predictions = ps.predict(model, test)
    return {"dataset_loss": from_dataset, "dataset_fn_loss": from_function,
            "dataset_evaluate": tfd.evaluate(model, test),
            "dataset_predict_accuracy": float(np.mean(predictions.argmax(-1) == y_test))}


def kill(outdir, pid):
    import keras
    import psutil

    strategy = tfd.make_strategy("parameter_server")
    (x_train, y_train), (x_test, y_test) = tfd.digits_arrays()
    model = digits_model(strategy)
    killed = []
    victim = psutil.Process(pid)

    class KillWorker(keras.callbacks.Callback):
        # At a known point: as epoch 2 begins, before its steps are scheduled. The worker is
        # dead before the coordinator hands it any of them, so every step it is given fails and
        # must be run by the other worker for the epoch to finish.
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1:
                os.kill(pid, signal.SIGKILL)
                victim.wait(timeout=60)  # raises psutil.TimeoutExpired if it does not die
                killed.append(epoch)

    history = tfd.fit(model, x_train, y_train, epochs=6, batch_size=BATCH, seed=0,
                      callbacks=[KillWorker()])
    result = tfd.evaluate(model, x_test, y_test, batch_size=BATCH)
    with strategy.scope():
        iterations = int(model.optimizer.iterations.numpy())
    return {"killed_during_epoch": killed, "epochs": len(history.history["loss"]),
            "evaluate": result, "iterations": iterations,
            "steps_per_epoch": len(x_train) // BATCH}


def main(argv):
    outdir, mode, *rest = argv
    if mode == "train":
        result = train(outdir)
    elif mode == "partition":
        result = partition(outdir)
    elif mode == "kill":
        result = kill(outdir, task_pid("worker", 1))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    with open(os.path.join(outdir, "result.json"), "w") as f:
        json.dump(result, f)
    print("ps_train done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
