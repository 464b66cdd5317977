"""Where a user's program makes its model, its optimizer and calls ``compile``, ``fit``,
``evaluate``, ``predict`` and ``save``, relative to ``with strategy.scope()``: the placement
table of CONFORMANCE.md, as programs (Python; the R programs are
tests/r/scripts/keras3_placements.R).

Every placement trains the same small model from the same seed, on the same data, so each can be
compared weight for weight with the program that does everything inside the scope. Test files
import it as ``placement``; launched tasks do too (tests/python/support is on their path).
"""

from __future__ import annotations

import os

import numpy as np

# How each program places its steps: where the model object is made ("in"/"out" of the scope),
# where its layers (its variables) are made, where compile and its optimizer object are made,
# and where fit/evaluate/predict/save are called.
PLACEMENTS = {
    "all_inside": dict(model="in", layers="in", optimizer="in", compile="in", calls="in"),
    "compile_outside": dict(model="in", layers="in", optimizer="name", compile="out",
                            calls="out"),
    "optimizer_made_outside": dict(model="in", layers="in", optimizer="out", compile="in",
                                   calls="out"),
    "object_outside_compile_inside": dict(model="out", layers="in", optimizer="in",
                                          compile="in", calls="out"),
    # The R tutorial's shape: keras_model_sequential() before the scope, the layers piped in it,
    # compile() with optimizer_rmsprop() and fit() after it.
    "object_outside_compile_outside": dict(model="out", layers="in", optimizer="out",
                                           compile="out", calls="out"),
    "calls_inside": dict(model="out", layers="in", optimizer="out", compile="out", calls="in"),
}
# Mistakes a program can make that no repair can mend: each must be the package's
# PlacementError, naming what was made where.
MISTAKES = ("weights_outside_used_inside", "layers_in_two_scopes", "compile_in_another_scope",
            "optimizer_made_in_another_scope")
SEED = 3
EPOCHS = 3
BATCH_SIZE = 32


def data():
    """256 digits (8x8x1) and their labels, and 64 to predict."""
    import tfdistributed as tfd

    (x, y), (xt, _) = tfd.digits_arrays()
    return x[:256], y[:256], xt[:64]


def _scope(strategy, where):
    import contextlib

    return strategy.scope() if where == "in" else contextlib.nullcontext()


def _add_layers(model):
    import keras

    model.add(keras.Input((8, 8, 1)))
    model.add(keras.layers.Flatten())
    model.add(keras.layers.Dense(32, activation="relu"))
    model.add(keras.layers.Dense(10))


def _compile(model, optimizer):
    import keras

    model.compile(optimizer=optimizer, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def build(strategy, placement):
    """The compiled model of ``placement`` (a key of :data:`PLACEMENTS`) under ``strategy``."""
    import keras

    where = PLACEMENTS[placement]
    keras.utils.set_random_seed(SEED)
    with _scope(strategy, where["model"]):
        model = keras.Sequential()
    with _scope(strategy, where["layers"]):
        _add_layers(model)
    optimizer = "adam"
    if where["optimizer"] != "name":
        with _scope(strategy, where["optimizer"]):
            optimizer = keras.optimizers.Adam()  # as "adam"
    with _scope(strategy, where["compile"]):
        _compile(model, optimizer)
    return model


def run(strategy, placement, workdir):
    """Build, fit (``validation_split``, early stopping and a checkpoint), evaluate, predict,
    save and load ``placement`` under ``strategy``; what came out, as plain values."""
    import keras

    x, y, x_new = data()
    model = build(strategy, placement)
    path = os.path.join(workdir, f"{placement}.keras")
    with _scope(strategy, PLACEMENTS[placement]["calls"]):
        callbacks = [keras.callbacks.EarlyStopping(monitor="val_loss", patience=5),
                     keras.callbacks.ModelCheckpoint(os.path.join(workdir, f"{placement}.ckpt.keras"))]
        history = model.fit(x, y, epochs=EPOCHS, batch_size=BATCH_SIZE, validation_split=0.25,
                            shuffle=False, callbacks=callbacks, verbose=0)
        evaluated = model.evaluate(x, y, batch_size=BATCH_SIZE, return_dict=True, verbose=0)
        predicted = model.predict(x_new, batch_size=BATCH_SIZE, verbose=0)
        model.save(path)
    loaded = keras.models.load_model(path)
    return {"weights": [w.numpy() for w in model.weights],
            "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
            "evaluate": {k: float(v) for k, v in evaluated.items()},
            "predict": np.asarray(predicted),
            "loaded_predict": np.asarray(loaded.predict(x_new, verbose=0)),
            "replicas": int(model.distribute_strategy.num_replicas_in_sync)}


def one_device(workdir):
    """:func:`run` of the program with everything inside the scope on one device (TensorFlow's
    default strategy): what every placement, strategy and the R programs are compared with."""
    import tfdistributed as tfd

    return run(tfd.make_strategy("default"), "all_inside", workdir)


def attempt(strategy, placement, workdir):
    """:func:`run`, or ``{"error": type name, "message": ...}`` where it raised."""
    try:
        return run(strategy, placement, workdir)
    except Exception as e:  # noqa: BLE001 - what the program met is the result
        return {"error": type(e).__name__, "message": str(e)}


def mistake(strategy, other, name):
    """Make mistake ``name`` (one of :data:`MISTAKES`) with ``strategy`` and a second strategy
    ``other``, then fit; the exception met, or None where it trained."""
    import keras

    x, y, _ = data()
    keras.utils.set_random_seed(SEED)
    try:
        model = keras.Sequential()
        if name == "weights_outside_used_inside":
            _add_layers(model)
            _compile(model, "adam")
        elif name == "layers_in_two_scopes":
            with strategy.scope():
                model.add(keras.Input((8, 8, 1)))
                model.add(keras.layers.Flatten())
                model.add(keras.layers.Dense(32, activation="relu"))
            with other.scope():
                model.add(keras.layers.Dense(10))
            _compile(model, "adam")
        elif name == "compile_in_another_scope":
            with strategy.scope():
                _add_layers(model)
            with other.scope():
                _compile(model, "adam")
        else:
            with other.scope():
                optimizer = keras.optimizers.Adam()  # as "adam"
            with strategy.scope():
                _add_layers(model)
            _compile(model, optimizer)
        with strategy.scope():
            model.fit(x, y, epochs=1, batch_size=BATCH_SIZE, verbose=0)
    except Exception as e:  # noqa: BLE001 - what the program met is the result
        return e
    return None


def run_all(strategy, workdir, placements=tuple(PLACEMENTS)):
    """:func:`attempt` of each placement under ``strategy``: ``{placement: result}``."""
    return {name: attempt(strategy, name, workdir) for name in placements}


def run_launched(workdir, placements=tuple(PLACEMENTS)):
    """In a launched task: :func:`run_all` (of ``placements``) under the strategy TF_CONFIG
    describes, each task's files below ``workdir/<task type>-<index>``."""
    import json

    import tfdistributed as tfd

    task = json.loads(os.environ["TF_CONFIG"])["task"]
    where = os.path.join(workdir, f"{task['type']}-{task['index']}")
    os.makedirs(where, exist_ok=True)
    return run_all(tfd.make_strategy("auto"), where, placements)


def run_without_repairs(placements):
    """In a task whose placement repairs are switched off (TFDISTRIBUTED_DISABLE_COMPAT):
    ``placements`` under a 2-device mirrored strategy, as :func:`attempt` gives them."""
    import tempfile

    import tfdistributed as tfd

    tfd.configure_cpu_devices(2)
    strategy = tfd.make_strategy("mirrored")
    return {name: attempt(strategy, name, tempfile.mkdtemp()) for name in placements}
