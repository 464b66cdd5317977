"""The conformance matrix: Keras features x strategies, each cell run the way users write Keras.

``run_cells(strategy_name, workdir)`` trains one small seeded model per feature under the named
strategy (in this process, or as a task of a launched cluster with ``"auto"``) and returns, per
feature, what a user would look at: the history, ``evaluate``, the accuracy computed from the
model's own predictions, the final weights and the files callbacks wrote; or the error raised.
``test_conformance.py`` compares every cell with the default strategy and renders the table.
"""

from __future__ import annotations

import os
import time
import traceback

import numpy as np

SEED = 7
N_TRAIN = 640  # 10 global batches of 64: every replica and worker gets whole batches
BATCH = 64
EPOCHS = 2

# How a cell is compared with the default strategy:
#   "exact"  same history, evaluation and weights (no randomness in the model);
#   "trains" random layers draw other numbers per replica: finite, improving, global metrics.
EXACT, TRAINS = "exact", "trains"


TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))), "CONFORMANCE.md")


def write_section(heading, text) -> bool:
    """Put ``text`` in CONFORMANCE.md as the section that starts with the line ``heading``
    (``"## ..."``; ``None``: the part before the first section), keeping the others in their
    order (a new section goes last). Each section is made by the test that checks it.

    Returns:
        Whether the file already held ``text`` there (the test fails when it did not).
    """
    current = open(TABLE).read() if os.path.exists(TABLE) else ""
    parts = current.split("\n## ")
    head, sections = parts[0] + "\n", ["## " + p.rstrip("\n") + "\n" for p in parts[1:]]
    if heading is None:
        head = text
    else:
        found = [i for i, section in enumerate(sections) if section.startswith(heading + "\n")]
        if found:
            sections[found[0]] = text
        else:
            sections.append(text)
    new = "\n".join([head.rstrip("\n") + "\n", *sections])
    if new != current:
        with open(TABLE, "w") as f:
            f.write(new)
    return new == current


def _data():
    import tfdistributed as tfd

    (x, y), (xt, yt) = tfd.digits_arrays()
    return x[:N_TRAIN], y[:N_TRAIN], xt, yt


def _dense_body():
    import keras

    return [keras.layers.Flatten(), keras.layers.Dense(32, activation="relu")]


def _sequential(body, *, optimizer=None, metrics=("accuracy",), loss=None, dtype_policy=None,
                activation=None, steps_per_execution=1, **compile_options):
    """``body()`` (a function: layers must be created after the dtype policy is set) between
    the digits input and a 10-way float32 output layer, compiled (with ``compile_options``:
    ``jit_compile``, ``run_eagerly``)."""
    import keras

    if dtype_policy:
        keras.mixed_precision.set_dtype_policy(dtype_policy)
    try:
        model = keras.Sequential([keras.layers.Input((8, 8, 1)), *body(),
                                  keras.layers.Dense(10, activation=activation, dtype="float32")])
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    model.compile(optimizer=optimizer or keras.optimizers.Adam(0.01),
                  loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=list(metrics), steps_per_execution=steps_per_execution,
                  **compile_options)
    return model


class PrecisionHigh:
    """A user-written Metric (one-hot targets): precision of predicting a digit >= 5. Its denominator differs
    between replicas, so averaging per-replica values would not give the global value."""

    @staticmethod
    def make():
        import keras
        from keras import ops

        class HighDigitPrecision(keras.metrics.Metric):
            def __init__(self, name="high_precision", **kwargs):
                super().__init__(name=name, **kwargs)
                self.hits = self.add_weight(name="hits", initializer="zeros")
                self.predicted = self.add_weight(name="predicted", initializer="zeros")

            def update_state(self, y_true, y_pred, sample_weight=None):
                high = ops.cast(ops.argmax(y_pred, axis=-1) >= 5, "float32")
                right = ops.cast(ops.equal(ops.argmax(y_pred, axis=-1),
                                           ops.argmax(y_true, axis=-1)), "float32")
                self.hits.assign_add(ops.sum(high * right))
                self.predicted.assign_add(ops.sum(high))

            def result(self):
                return self.hits / ops.maximum(self.predicted, 1.0)

        return HighDigitPrecision()


def _metrics_model():
    import keras

    return _sequential(_dense_body, loss=keras.losses.CategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy", keras.metrics.AUC(name="auc", from_logits=True),
                                keras.metrics.Precision(name="precision", thresholds=0.0),
                                keras.metrics.Recall(name="recall", thresholds=0.0),
                                PrecisionHigh.make()])


def _dict_model():
    import keras

    a = keras.Input((32,), name="top")
    b = keras.Input((32,), name="bottom")
    h = keras.layers.Concatenate()([keras.layers.Dense(16, activation="relu")(a),
                                    keras.layers.Dense(16, activation="relu")(b)])
    model = keras.Model({"top": a, "bottom": b}, keras.layers.Dense(10)(h))
    model.compile(optimizer=keras.optimizers.Adam(0.01), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _embedding_model():
    import keras

    model = keras.Sequential([keras.layers.Input((64,), dtype="int32"),
                              keras.layers.Embedding(17, 4), keras.layers.Flatten(),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _rnn_model():
    import keras

    model = keras.Sequential([keras.layers.Input((8, 8)), keras.layers.LSTM(16, return_sequences=True),
                              keras.layers.GRU(16), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _clipped_schedule_optimizer():
    import keras

    schedule = keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps=10, decay_rate=0.5)
    return keras.optimizers.SGD(schedule, momentum=0.9, global_clipnorm=0.5)


def _random_body():
    import keras

    return [keras.layers.RandomTranslation(0.1, 0.1, seed=1), keras.layers.GaussianNoise(0.05),
            keras.layers.Reshape((8, 8)), keras.layers.SpatialDropout1D(0.1),
            keras.layers.Flatten(), keras.layers.Dense(32, activation="relu"),
            keras.layers.Dropout(0.2)]


def _tutorial_body():
    import keras

    return [keras.layers.Flatten(), keras.layers.Dense(256, activation="relu"),
            keras.layers.Dropout(0.4), keras.layers.Dense(128, activation="relu"),
            keras.layers.Dropout(0.3)]


def _batchnorm_body(synchronized):
    import keras

    # No bias before batch normalization: it cancels out, so its gradient is rounding noise.
    return [keras.layers.Flatten(), keras.layers.Dense(32, use_bias=False),
            keras.layers.BatchNormalization(synchronized=synchronized),
            keras.layers.Activation("relu")]


#: Gradient accumulation's cell: this many steps of ACCUMULATED_BATCH examples per update, with
#: an optimizer linear in the gradients (Adam's per-element scaling would turn the rounding of
#: near-zero gradients, summed in another order, into steps of the learning rate's size), so
#: that it can be compared with one step of LARGE_BATCH on one device (:func:`one_large_batch`).
ACCUMULATION_STEPS, ACCUMULATED_BATCH = 4, 32
LARGE_BATCH = ACCUMULATION_STEPS * ACCUMULATED_BATCH


def _sgd(accumulation=None):
    import keras

    return keras.optimizers.SGD(0.1, momentum=0.9, gradient_accumulation_steps=accumulation)


def _option_features():
    """Keras' compile and optimizer options on the baseline's model: a row each, or for two that
    do not meet (the moving averages and clipping by norm; loss scaling and clipping by value)."""
    import keras

    flat = _dense_body
    return {
        "gradient_accumulation": (
            lambda: _sequential(flat, optimizer=_sgd(ACCUMULATION_STEPS)),
            lambda d: {"batch_size": ACCUMULATED_BATCH}, EXACT, "keras"),
        "steps_per_execution_auto": (lambda: _sequential(flat, steps_per_execution="auto"),
                                     lambda d: {}, EXACT, "keras"),
        "jit_compile": (lambda: _sequential(flat, jit_compile=True), lambda d: {}, EXACT, "keras"),
        # Two options a row where they are independent: a row's cells cost its tracing.
        "ema_clipnorm": (lambda: _sequential(flat, optimizer=keras.optimizers.Adam(
            0.01, use_ema=True, ema_overwrite_frequency=5, clipnorm=0.5)), lambda d: {}, EXACT,
            "tfd"),
        "loss_scale_clipvalue": (
            lambda: _sequential(flat, optimizer=keras.optimizers.LossScaleOptimizer(
                keras.optimizers.SGD(0.1, clipvalue=0.02))), lambda d: {}, EXACT, "tfd"),
        "run_eagerly": (lambda: _sequential(flat, run_eagerly=True), lambda d: {}, EXACT,
                        "keras"),
    }


def one_large_batch():
    """The weights of the gradient accumulation cell's model trained on one device with one
    step of LARGE_BATCH per update instead (same data, epochs and optimizer)."""
    import keras

    import tfdistributed as tfd

    x, y, _, _ = _data()
    keras.utils.set_random_seed(SEED)
    with tfd.make_strategy("default").scope():
        model = _sequential(_dense_body, optimizer=_sgd())
    model.fit(x, y, batch_size=LARGE_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return _weights(model)


# name: (build the model, fit arguments (x, y, xt, yt, workdir) -> kwargs, comparison, how)
def _features():
    import keras

    flat = _dense_body
    return {
        "baseline": (lambda: _sequential(flat), lambda d: {}, EXACT, "tfd"),
        "validation_split": (lambda: _sequential(flat), lambda d: {"validation_split": 0.2},
                             EXACT, "tfd"),
        "validation_data_weighted": (
            lambda: _sequential(flat),
            lambda d: {"validation_data": (d["xt"], d["yt"], np.linspace(0.5, 1.5, len(d["yt"]),
                                                                          dtype="float32"))},
            EXACT, "tfd"),
        "validation_freq_steps": (
            lambda: _sequential(flat),
            lambda d: {"validation_data": (d["xt"], d["yt"]), "validation_freq": 2,
                       "validation_steps": 3, "epochs": 4}, EXACT, "tfd"),
        "class_and_sample_weight": (
            lambda: _sequential(flat),
            lambda d: {"class_weight": {i: 1.0 + i / 5 for i in range(10)},
                       "sample_weight": np.linspace(0.2, 2.0, N_TRAIN, dtype="float32")},
            EXACT, "tfd"),
        "steps_and_initial_epoch": (
            lambda: _sequential(flat),
            lambda d: {"steps_per_epoch": 4, "epochs": 4, "initial_epoch": 1}, EXACT, "tfd"),
        # A seeded shuffle draws a new order each time an iterator is made, and strategies make
        # different numbers of iterators (Keras probes a batch to build the model): the order is
        # random per strategy, the same on every worker.
        "shuffle_seeded": (lambda: _sequential(flat), lambda d: {"shuffle": True, "seed": 3},
                           TRAINS, "tfd"),
        "schedule_and_clipping": (lambda: _sequential(flat, optimizer=_clipped_schedule_optimizer()),
                                  lambda d: {}, EXACT, "tfd"),
        "metrics": (_metrics_model, lambda d: {"y": _one_hot(d["y"]), "test_y": _one_hot(d["yt"])},
                    EXACT, "tfd"),
        "dict_inputs": (_dict_model, lambda d: {"x": _halves(d["x"]), "test_x": _halves(d["xt"])},
                        EXACT, "tfd"),
        "embedding": (_embedding_model, lambda d: {"x": _tokens(d["x"]), "test_x": _tokens(d["xt"])},
                      EXACT, "tfd"),
        "lstm_gru": (_rnn_model, lambda d: {"x": d["x"].reshape(-1, 8, 8),
                                            "test_x": d["xt"].reshape(-1, 8, 8)}, EXACT, "tfd"),
        "sync_batchnorm": (lambda: _sequential(lambda: _batchnorm_body(True)), lambda d: {}, EXACT, "tfd"),
        "mixed_bfloat16": (lambda: _sequential(flat, dtype_policy="mixed_bfloat16"),
                           lambda d: {}, TRAINS, "tfd"),
        "batchnorm": (lambda: _sequential(lambda: _batchnorm_body(False)), lambda d: {}, TRAINS, "tfd"),
        "random_layers": (lambda: _sequential(_random_body), lambda d: {}, TRAINS, "tfd"),
        "tutorial_mlp_rmsprop": (
            lambda: _sequential(_tutorial_body, optimizer=keras.optimizers.RMSprop(),
                                loss=keras.losses.CategoricalCrossentropy(), activation="softmax"),
            lambda d: {"y": _one_hot(d["y"]), "test_y": _one_hot(d["yt"]), "validation_split": 0.2,
                       "batch_size": 64}, TRAINS, "tfd"),
        "callbacks": (lambda: _sequential(flat), _callbacks, EXACT, "tfd"),
        # Blocks of 4 steps over 10 batches: 4 + 4 + 2 an epoch; validation: 8 batches.
        "steps_per_execution": (lambda: _sequential(flat, steps_per_execution=4),
                                lambda d: {"validation_data": (d["xt"], d["yt"])}, EXACT, "tfd"),
        "plain_model_fit": (lambda: _sequential(flat),
                            lambda d: {"validation_split": 0.2, "callbacks": _callbacks(d)["callbacks"]},
                            EXACT, "keras"),
        "plain_model_fit_blocks": (lambda: _sequential(flat, steps_per_execution=4),
                                   lambda d: {"validation_data": (d["xt"], d["yt"])},
                                   EXACT, "keras"),
        **_option_features(),
    }


def _callbacks(d):
    import keras

    workdir = d["workdir"]
    epochs_seen = []
    d["epochs_seen"] = epochs_seen
    return {"callbacks": [
        keras.callbacks.EarlyStopping(monitor="loss", patience=3),
        keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=3),
        keras.callbacks.ModelCheckpoint(os.path.join(workdir, "model.keras")),
        keras.callbacks.CSVLogger(os.path.join(workdir, "log.csv")),
        keras.callbacks.TensorBoard(os.path.join(workdir, "tensorboard")),
        keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epochs_seen.append(epoch)),
        keras.callbacks.BackupAndRestore(os.path.join(workdir, "backup")),
    ]}


def _weights(model):
    return [np.asarray(w) for w in model.get_weights()]


def _files(workdir):
    if not os.path.isdir(workdir):
        return []
    return sorted(name for name in os.listdir(workdir))


def _csv_losses(workdir):
    path = os.path.join(workdir, "log.csv")
    if not os.path.exists(path):
        return None
    import csv

    with open(path) as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def run_cell(name, strategy, workdir):
    """One feature under ``strategy``: a dict of results, or of the error raised."""
    import keras

    import tfdistributed as tfd

    cpu = time.process_time()
    build, fit_args, _, how = _features()[name]
    x, y, xt, yt = _data()
    data = {"x": x, "y": y, "xt": xt, "yt": yt, "workdir": os.path.join(workdir, name)}
    os.makedirs(data["workdir"], exist_ok=True)
    try:
        keras.utils.set_random_seed(SEED)
        with strategy.scope():
            model = build()
        kwargs = {"epochs": EPOCHS, "batch_size": BATCH, "shuffle": False, "verbose": 0}
        kwargs.update(fit_args(data))
        fx, fy = kwargs.pop("x", x), kwargs.pop("y", y)
        test_x, test_y = kwargs.pop("test_x", xt), kwargs.pop("test_y", yt)
        if how == "keras":
            history = model.fit(fx, fy, **kwargs)
        else:
            history = tfd.fit(model, fx, fy, **kwargs)
        if how == "keras":
            evaluation = model.evaluate(test_x, test_y, batch_size=BATCH, verbose=0, return_dict=True)
            evaluation = {k: float(v) for k, v in evaluation.items()}
            predictions = model.predict(test_x, batch_size=BATCH, verbose=0)
        else:
            evaluation = tfd.evaluate(model, test_x, test_y, batch_size=BATCH, verbose=0)
            predictions = tfd.predict(model, test_x, batch_size=BATCH)
        return {"status": "ok",
                "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
                "epochs": list(history.epoch), "evaluate": evaluation,
                "true_accuracy": float(np.mean(np.argmax(predictions, -1) == yt)),
                "weights": _weights(model),
                "trainable_weights": [np.asarray(w) for w in model.trainable_weights],
                "files": _files(data["workdir"]),
                "csv_losses": _csv_losses(data["workdir"]),
                "callback_epochs": data.get("epochs_seen"),
                "cpu_seconds": time.process_time() - cpu}
    except Exception as e:  # a cell reports its error; the test decides whether it is ours
        return {"status": "error", "type": type(e).__name__, "module": type(e).__module__,
                "message": str(e), "traceback": traceback.format_exc()[-3000:],
                "cpu_seconds": time.process_time() - cpu}


def _one_hot(labels):
    return np.eye(10, dtype="float32")[labels]


def _halves(images):
    flat = images.reshape(-1, 64)
    return {"top": flat[:, :32], "bottom": flat[:, 32:]}


def _tokens(images):
    return np.round(images.reshape(-1, 64) * 16).astype("int32")


def run_cells(strategy_name, workdir, names=None, gradient_compression=None):
    """Every feature (or ``names``) under ``strategy_name``: ``{feature: result}``.

    In a launched task (``strategy_name="auto"``) the strategy comes from TF_CONFIG; each task
    writes below its own ``workdir`` only what the callbacks write (the chief's real files).
    ``gradient_compression``: make_strategy's (the compressed multi-worker column).
    """
    import tfdistributed as tfd

    strategy = tfd.make_strategy(strategy_name, gradient_compression=gradient_compression)
    names = list(names or _features())
    return {name: run_cell(name, strategy, workdir) for name in names}


#: The two in-process columns that run a part of the rows, as the compressed columns do: each
#: runs the features whose path under its strategy differs from that of a column that runs every
#: row, and says why (PARTIAL_COLUMNS: for each column, and for each feature it runs); the others
#: are "not run" in the table (the rest of the matrix runs them).
ONE_DEVICE_FEATURES = {
    "baseline": "the train step through the strategy's own run(), on its one replica",
    "plain_model_fit": "Keras' own `fit()` under a strategy's scope",
    "dict_inputs": "a distributed dataset of a dict of inputs",
    "validation_data_weighted": "a second distributed dataset, with sample weights",
    "callbacks": "the callbacks' files written under a strategy",
    "steps_per_execution": "several steps in one call of the strategy's function",
    "steps_per_execution_auto": "Keras' option refused under every strategy",
    "gradient_accumulation": "the optimizer's accumulators made as the strategy's variables",
    "jit_compile": "XLA, which one_device honours and the multi-replica strategies refuse",
    "run_eagerly": "the eager step calling the strategy's run() itself",
}
CENTRAL_STORAGE_FEATURES = {
    "baseline": "the aggregated update of one central copy of each weight",
    "plain_model_fit": "Keras' own `fit()` and train step",
    "schedule_and_clipping": "clipping of the aggregated gradients",
    "ema_clipnorm": "the moving-average copies of the weights, updated and overwritten",
    "loss_scale_clipvalue": "the loss scale's own variables, updated in the step",
    "gradient_accumulation": "the accumulators, updated every step, applied every 4th",
    "embedding": "sparse updates (IndexedSlices) of one central table",
    "batchnorm": "moving statistics assigned from each replica",
    "sync_batchnorm": "moving statistics from the replicas' all-reduced sums",
    "mixed_bfloat16": "float32 central weights read as bfloat16 by each replica",
    "metrics": "the metrics' variables, summed over the replicas",
    "steps_per_execution": "several aggregated updates in one call",
    "steps_per_execution_auto": "Keras' option refused under every strategy",
    "jit_compile": "XLA, refused under a strategy of several replicas",
    "run_eagerly": "the eager step's updates of the central weights",
}
#: column -> (the features it runs, the column that runs the rest as its path would, why: the
#: table's legend)
PARTIAL_COLUMNS = {
    "one_device": (ONE_DEVICE_FEATURES, "default",
                   "one replica under a real strategy: the features run are those the strategy "
                   "object itself reaches (its distributed input, its step, the options it "
                   "honours, the files written under it); a layer, optimizer, precision or "
                   "metric computes on that replica as on one device"),
    "central_storage": (CENTRAL_STORAGE_FEATURES, "mirrored",
                        "the same two replicas and input split as `mirrored`, each weight one "
                        "copy on the CPU: the features run are those with variables or updates "
                        "of their own"),
}


def column_features(column):
    """The features an in-process column runs: all (None) or those of PARTIAL_COLUMNS."""
    return list(PARTIAL_COLUMNS[column][0]) if column in PARTIAL_COLUMNS else None


#: The multi-worker columns, made in one job (one cluster's start-up, not one per column): 32
#: bits, fp16, then PowerSGD with a warm-up of half a cell's 20 steps (both of its phases, and
#: the switch between them, in every cell).
COMPRESSIONS = (None, "fp16", "powersgd")
POWERSGD = {"rank": 4, "warmup_steps": 10}
#: The features the compressed columns run: those whose gradients or all-reduce take another
#: path than the baseline's. Compression changes only the all-reduce of the gradients, so every
#: other feature (validation, weights, metrics, callbacks, inputs, random layers...) reaches it
#: as the baseline does: "same path as 32 bits" in the table, not run again.
COMPRESSED_FEATURES = {
    "baseline": "the compressed all-reduce itself",
    "schedule_and_clipping": "clipping applied to the gradients once all-reduced and decompressed",
    "embedding": "sparse gradients, IndexedSlices, all-reduced otherwise than dense ones",
    "sync_batchnorm": "a second collective, of the batch statistics, beside the gradients'",
    "mixed_bfloat16": "gradients in another dtype than the float32 the compression expects",
    "steps_per_execution": "the all-reduce inside a loop of several steps in one call",
    "plain_model_fit": "Keras' own `fit()` and train step, not `tfdistributed.fit()`",
    "gradient_accumulation": "the all-reduce of the accumulated gradients, once per update",
}


def run_multi_worker_cells(workdir, names=None, compressions=COMPRESSIONS):
    """Every feature (or ``names``) under each of ``compressions`` in turn, on the one
    multi-worker strategy of a launched task: ``{compression or "none": {feature: result}}``,
    each compression's files below ``workdir/<compression or "none">``; a compression runs only
    the features of :data:`COMPRESSED_FEATURES`."""
    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    names = list(names or _features())
    out = {}
    for compression in compressions:
        mark = tfd.powersgd(**POWERSGD) if compression == "powersgd" else compression
        tfd.set_gradient_compression(strategy, mark)
        where = os.path.join(workdir, compression or "none")
        chosen = [n for n in names if compression is None or n in COMPRESSED_FEATURES]
        out[compression or "none"] = {name: run_cell(name, strategy, where) for name in chosen}
    return out


def features():
    """Feature names with their comparison kind, in table order."""
    return {name: spec[2] for name, spec in _features().items()}
