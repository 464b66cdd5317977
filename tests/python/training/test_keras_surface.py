"""Users' own Keras programs under strategies: each repair is needed (the defect shows without
it), the official multi-worker tutorial runs unchanged, and launched jobs print readable lines.
(That the repairs are in place from `import tfdistributed`, whichever of it and Keras came
first, is tests/python/package/test_import_hook.py's.)

A fresh process costs a TensorFlow start-up, so what can run in this one does; the others
cannot share one, and each says why: a repair is switched off from the start of a process (TFDISTRIBUTED_DISABLE_COMPAT is read as Keras is repaired),
and a user's multi-worker program builds its strategy once per process."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tfdistributed as tfd
from models import digits_model as build_digits_model
from tfdistributed.training import compat

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIAL = os.path.join(HERE, "scripts", "keras_mwms_tutorial.py")
R_TUTORIAL = os.path.join(HERE, "scripts", "keras_mwms_tutorial.R")
ROOT = os.path.dirname(os.path.dirname(HERE))


def _without_repairs():
    """Runs in a fresh process with the single-process repairs switched off."""
    import conformance
    import tfdistributed as tfd

    tfd.configure_cpu_devices(2)
    default, css = tfd.make_strategy("default"), tfd.make_strategy("central_storage")
    out = {"css_random": conformance.run_cell("random_layers", css, "/tmp"),
           "css_metrics": conformance.run_cell("metrics", css, "/tmp"),
           "default_metrics": conformance.run_cell("metrics", default, "/tmp"),
           "default_clip": conformance.run_cell("schedule_and_clipping", default, "/tmp"),
           "mirrored_clip": conformance.run_cell("schedule_and_clipping", tfd.make_strategy("mirrored"),
                                                 "/tmp")}
    for cell in out.values():
        cell.pop("weights", None)
        cell.pop("trainable_weights", None)
    return out


@pytest.mark.cluster
def test_each_single_process_repair_is_needed():
    """The same cells the conformance matrix passes fail or report wrong numbers without them."""
    # Its own process: these repairs off from its start, and only these (the uneven batches'
    # test switches another one off).
    disabled = "central_storage_updates,central_storage_metric_assign,clip_after_all_reduce"
    job = tfd.launch(_without_repairs, workers=1, timeout=300,
                     env={"TFDISTRIBUTED_DISABLE_COMPAT": disabled}, watch=tfd.Watch(echo=False))
    out = job.values[0]
    assert out["css_random"]["status"] == "error"
    assert "must specify an aggregation method" in out["css_random"]["message"]
    css, default = out["css_metrics"], out["default_metrics"]
    assert css["status"] == default["status"] == "ok"
    # atomic_assign_add (still on) keeps the mean-style metrics right; AUC's assign is not.
    np.testing.assert_allclose(css["history"]["loss"], default["history"]["loss"], rtol=1e-5)
    assert abs(css["evaluate"]["auc"] - default["evaluate"]["auc"]) > 1e-3, (css, default)
    assert not np.allclose(out["mirrored_clip"]["history"]["loss"],
                           out["default_clip"]["history"]["loss"], rtol=1e-3)


def _plain_fit_under_ps():
    import conformance
    import tfdistributed as tfd

    cell = conformance.run_cell("plain_model_fit", tfd.make_strategy("auto"), "/tmp/tfd-ps-plain")
    cell.pop("weights", None)
    cell.pop("trainable_weights", None)
    return cell


@pytest.mark.cluster
def test_plain_model_fit_under_parameter_server_needs_the_routing():
    # Its own job: a parameter-server cluster, with the routing off from the start.
    job = tfd.launch(_plain_fit_under_ps, tfd.Scaling(workers=1, ps=1, chief=True), timeout=300,
                     env={"TFDISTRIBUTED_DISABLE_COMPAT": "strategy_aware_fit"},
                     watch=tfd.Watch(echo=False))
    cell = job.values[0]
    assert cell["status"] == "error" and "create_per_worker_dataset" in cell["message"], cell


@pytest.mark.cluster
def test_official_multi_worker_tutorial_runs_unchanged(tmp_path):
    # Its own job: the user's program, unchanged, builds its strategy (one per process).
    result = tfd.launch(TUTORIAL, workers=2, args=[str(tmp_path)], timeout=300,
                        watch=tfd.Watch(echo=False))
    assert [t.returncode for t in result.tasks] == [0, 0]
    with np.load(tmp_path / "worker-0.npz") as a, np.load(tmp_path / "worker-1.npz") as b:
        assert len(a.files) == len(b.files) == 6
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])
    histories = [json.loads((tmp_path / f"worker-{i}.json").read_text()) for i in (0, 1)]
    assert histories[0] == histories[1]
    # The user's metric counts right predictions over the whole global batch of every step.
    accuracy, correct = histories[0]["accuracy"], histories[0]["correct"]
    np.testing.assert_allclose(correct, np.array(accuracy) * 20 * 64, rtol=1e-5)
    with open(tmp_path / "log.csv") as f:
        rows = list(csv.DictReader(f))
    np.testing.assert_allclose([float(r["loss"]) for r in rows], histories[0]["loss"], rtol=1e-6)
    assert sorted(os.listdir(tmp_path)) == ["log.csv", "worker-0.json", "worker-0.npz",
                                            "worker-1.json", "worker-1.npz"]
    # Keras' progress bar (redrawn with carriage returns) arrives as one readable line per update.
    for task in result.tasks:
        assert task.output and all("\r" not in line and "\x1b" not in line and len(line) < 500
                                   for line in task.output)
    assert any(line.startswith("20/20") for line in result.task("worker", 0).output)


@pytest.mark.cluster
def test_r_script_with_its_own_strategy_and_model_fit(tmp_path):
    """From R: raw tf$distribute$MultiWorkerMirroredStrategy() and Keras' own model$fit()."""
    # Its own job: Rscript workers, each building its strategy (one per process).
    result = tfd.launch(R_TUTORIAL, workers=2, args=[str(tmp_path)], timeout=300,
                        env={"R_LIBS": os.path.join(ROOT, ".rlib"), "RETICULATE_PYTHON": sys.executable},
                        watch=tfd.Watch(echo=False))
    assert [t.returncode for t in result.tasks] == [0, 0]
    reports = [json.loads((tmp_path / f"worker-{i}.json").read_text()) for i in (0, 1)]
    assert reports[0] == reports[1] and len(reports[0]["weights"]) == 4
    assert reports[0]["loss"][-1] < reports[0]["loss"][0]


@pytest.mark.cluster
def test_a_failed_task_names_its_error_even_after_a_long_dump(tmp_path):
    script = tmp_path / "dies.py"
    script.write_text(textwrap.dedent("""
        import sys
        print("starting", flush=True)
        try:
            raise ValueError("the real cause")
        except ValueError as e:
            import traceback; traceback.print_exc()
        print("[" + ", ".join(["0.123456"] * 5000) + "]", flush=True)
        for i in range(60):
            print(f"array row {i}: " + " ".join(["1.0"] * 50), flush=True)
        sys.exit(3)
    """))
    with pytest.raises(tfd.LaunchError) as info:
        tfd.launch(str(script), workers=1, timeout=60, watch=tfd.Watch(echo=False))
    message = str(info.value)
    assert "Its error: ValueError: the real cause" in message
    assert max(len(line) for line in message.splitlines()) < 500


def test_dataset_with_batch_size_is_named_before_the_replica_rule(digits):
    import tensorflow as tf

    from models import digits_model as build_model

    (x, y), _ = digits
    model = build_model(tfd.make_strategy("mirrored"))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    with pytest.raises(tfd.ArgumentTypeError, match="applies to arrays only"):
        tfd.fit(model, dataset, batch_size=5)
    with pytest.raises(tfd.ArgumentTypeError, match="validation_split works with arrays only"):
        tfd.fit(model, dataset, validation_split=0.2)
    with pytest.raises(tfd.ArgumentTypeError, match="fraction between 0 and 1"):
        tfd.fit(model, x, y, validation_split=1.0, batch_size=64)
    with pytest.raises(tfd.ArgumentTypeError, match="validation_data must be"):
        tfd.fit(model, x, y, validation_data=(x,), batch_size=64)


def test_validation_split_holds_out_the_last_rows_as_keras_does(digits):
    """Same split, same numbers as Keras' own fit on arrays (which shuffles after splitting)."""
    from models import digits_model as build_model

    (x, y), _ = digits
    x, y = x[:640], y[:640]
    ours = build_model(tfd.make_strategy("default"), seed=5)
    theirs = build_model(tfd.make_strategy("default"), seed=5)
    h1 = tfd.fit(ours, x, y, epochs=2, batch_size=64, shuffle=False, validation_split=0.25, verbose=0)
    h2 = compat.keras_method(theirs, "fit")(x, y, epochs=2, batch_size=64, shuffle=False,
                                            validation_split=0.25, verbose=0)
    for key in ("loss", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(h1.history[key], h2.history[key], rtol=1e-6)


def _uneven_fits():
    """Each strategy's losses and weights, fitting the same seeded model on 1345 examples."""
    import tfdistributed as tfd
    from models import digits_model

    (x, y), _ = tfd.digits_arrays()
    out = {}
    for name in ("default", "mirrored", "central_storage"):
        model = digits_model(tfd.make_strategy(name), seed=1, learning_rate=0.01)
        # 1345 = 21 global batches of 64 and one of 1: the last one splits 1 + 0 over 2 replicas.
        history = tfd.fit(model, x[:1345], y[:1345], epochs=2, batch_size=64, shuffle=False,
                          verbose=0)
        out[name] = {"loss": history.history["loss"],
                     "weights": [w.tolist() for w in model.get_weights()]}
    return out


# The same fits in a fresh process, whose repairs are as TFDISTRIBUTED_DISABLE_COMPAT says.
_UNEVEN = """
import json, sys
sys.path[:0] = {paths!r}
import tfdistributed as tfd
tfd.configure_cpu_devices(2)
from test_keras_surface import _uneven_fits
print(json.dumps(_uneven_fits()))
"""


def _uneven_fits_without_the_repair():
    code = _UNEVEN.format(paths=[os.path.join(HERE, "support"),
                                 os.path.dirname(os.path.abspath(__file__))])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300,
                          env={**os.environ, "TFDISTRIBUTED_DISABLE_COMPAT": "uneven_batches"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh Python without the repair beside this one
def test_an_uneven_last_batch_updates_as_one_device_and_needs_the_repair():
    # With the repair: in this process, which has every repair and 2 CPU devices (a fresh one
    # cost a TensorFlow start-up). Without it: a fresh process, the repair off from the start.
    assert compat.status()["uneven_batches"]["applied"]
    runs = {"on": _uneven_fits(), "off": _uneven_fits_without_the_repair()}
    for state, run in runs.items():
        one = run["default"]
        for name in ("mirrored", "central_storage"):
            got = run[name]
            assert len(got["weights"]) == len(one["weights"]) > 0
            same = (np.allclose(got["loss"], one["loss"], rtol=2e-5) and all(
                np.allclose(a, b, rtol=2e-5, atol=1e-6)
                for a, b in zip(got["weights"], one["weights"])))
            # Without the repair the last step's update is halved: epoch 2 differs visibly.
            assert same == (state == "on"), (state, name, got["loss"], one["loss"])


# What Keras would fail on deep inside (a TensorFlow op error for batch_size=8.0, "Unrecognized
# data type" and a page of numbers for a list, an IndexError for a list of labels) is refused
# first, by name, under every strategy; what Keras takes is unchanged.
KERAS_CALL_MISTAKES = {
    "fit_float_batch": (lambda m, x, y: m.fit(x, y, batch_size=8.0, verbose=0),
                        "`batch_size` must be an integer"),
    "fit_float_epochs_positional": (lambda m, x, y: m.fit(x, y, 32, 2.0, 0),
                                    "`epochs` must be an integer"),
    "fit_list_labels": (lambda m, x, y: m.fit(x, y.tolist(), verbose=0), "`y` is a list of numbers"),
    "fit_list_inputs": (lambda m, x, y: m.fit(x.tolist(), y, verbose=0), "`x` is a list of numbers"),
    "fit_validation_list": (lambda m, x, y: m.fit(x, y, validation_data=(x, y.tolist()), verbose=0),
                            r"`validation_data\[1\]` is a list of numbers"),
    "evaluate_float_steps": (lambda m, x, y: m.evaluate(x, y, steps=2.0, verbose=0),
                             "`steps` must be an integer"),
    "predict_float_batch": (lambda m, x, y: m.predict(x, batch_size=16.0, verbose=0),
                            "`batch_size` must be an integer"),
}


@pytest.mark.parametrize("strategy_name", ["default", "mirrored"])
@pytest.mark.parametrize("case", list(KERAS_CALL_MISTAKES))
def test_keras_calls_name_the_argument_keras_would_fail_on(digits, strategy_name, case):
    from models import digits_model

    (x, y), _ = digits
    model = digits_model(tfd.make_strategy(strategy_name))
    call, expected = KERAS_CALL_MISTAKES[case]
    with pytest.raises(tfd.ArgumentTypeError, match=expected):
        call(model, x[:64], y[:64])


def test_keras_calls_keep_what_keras_takes(digits):
    """Integer counts of any integer type, arrays, lists of arrays (several inputs) and the
    signature (help(), positional arguments) are Keras' own."""
    import inspect

    import keras

    from models import digits_model

    (x, y), _ = digits
    model = digits_model(tfd.make_strategy("default"))
    history = model.fit(x[:128], y[:128], np.int64(64), np.int32(2), 0, shuffle=False)
    assert len(history.history["loss"]) == 2
    assert list(inspect.signature(model.fit).parameters)[:4] == ["x", "y", "batch_size", "epochs"]
    a, b = keras.Input((2,)), keras.Input((3,))
    two = keras.Model([a, b], keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
    two.compile("sgd", "mse")
    two.fit([np.ones((8, 2)), np.ones((8, 3))], np.ones((8, 1)), batch_size=4, verbose=0)


def _iterators_made(monkeypatch):
    """The distributed input iterators made from now on, each named by the call that made it
    (``probe``: Keras' shape probe)."""
    import traceback

    from tensorflow.python.distribute import input_lib

    made = []
    make = input_lib.DistributedDataset.__iter__

    def counted(self):
        stack = [f.name for f in traceback.extract_stack(limit=20)]
        made.append("probe" if "_maybe_symbolic_build" in stack else
                    next(n for n in reversed(stack) if n in ("fit", "evaluate", "predict")))
        return make(self)

    monkeypatch.setattr(input_lib.DistributedDataset, "__iter__", counted)
    return made


@pytest.mark.slow
@pytest.mark.parametrize("how", ["tfd", "keras"])
def test_keras_shape_probe_makes_no_iterator_and_changes_no_number(digits, how, monkeypatch):
    """Under 2 replicas every input iterator is a distributed one (its input functions traced,
    its pipeline started: ~0.05-0.1 s of CPU each). Keras makes one for its shape probe at every
    fit, evaluate and validation pass, only to read shapes and dtypes; with the symbolic_build
    repair the probe reads them from the dataset's element spec, every iterator is one Keras
    trains, validates, evaluates or predicts with, and the numbers are Keras' own, bit for
    bit."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    from tfdistributed.training.repairs.common import original

    (x, y), (xt, yt) = digits
    x, y = x[:320], y[:320]
    strategy = tfd.make_strategy("mirrored")
    results = []
    for repaired in (True, False):
        if not repaired:  # Keras' own probe (under one process it works)
            monkeypatch.setattr(TensorFlowTrainer, "_maybe_symbolic_build",
                                original(TensorFlowTrainer._maybe_symbolic_build))
        made = _iterators_made(monkeypatch)
        model = build_digits_model(strategy, seed=3)
        fit_args = dict(epochs=3, batch_size=64, shuffle=False, verbose=0,
                        validation_data=(xt, yt))
        if how == "tfd":
            history = tfd.fit(model, x, y, **fit_args)
            evaluation = tfd.evaluate(model, xt, yt, batch_size=64, verbose=0)
            predictions = tfd.predict(model, xt, batch_size=64)
        else:
            with strategy.scope():
                history = model.fit(x, y, **fit_args)
                evaluation = model.evaluate(xt, yt, batch_size=64, verbose=0, return_dict=True)
                predictions = model.predict(xt, batch_size=64, verbose=0)
        results.append((history.history, evaluation, predictions, model.get_weights(),
                        list(made)))
        monkeypatch.undo()
    (history, evaluation, predictions, weights, made), keras_own = results
    assert history == keras_own[0] and evaluation == keras_own[1]
    np.testing.assert_array_equal(predictions, keras_own[2])
    for got, want in zip(weights, keras_own[3]):
        np.testing.assert_array_equal(got, want)
    # Keras alone probes at the fit, at each of the 3 validation passes and at evaluate.
    assert keras_own[4].count("probe") == 5
    assert made == [m for m in keras_own[4] if m != "probe"]


@pytest.mark.slow  # ~12 s of training: make test
def test_a_seeded_shuffled_fit_under_a_strategy_sees_the_batches_of_one_device(digits,
                                                                               monkeypatch):
    """A reshuffling input draws a new order each time an iterator is made from it. Keras'
    shape probe made one under a strategy and dropped it, so a seeded strategy's first epoch saw
    the second order, and no seeded run could be compared with one device. With the repair the
    two replicas train on one device's batches: equal losses but for the sum's rounding."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    from tfdistributed.training.repairs.common import original

    (x, y), _ = digits
    x, y = x[:320], y[:320]

    def losses(strategy):
        model = build_digits_model(strategy, seed=3)
        return tfd.fit(model, x, y, epochs=2, batch_size=64, shuffle=True,
                       verbose=0).history["loss"]

    one_device = losses(tf_default_strategy())
    mirrored = tfd.make_strategy("mirrored")
    repaired = losses(mirrored)
    monkeypatch.setattr(TensorFlowTrainer, "_maybe_symbolic_build",
                        original(TensorFlowTrainer._maybe_symbolic_build))
    keras_own = losses(mirrored)
    np.testing.assert_allclose(repaired, one_device, rtol=1e-5)
    # Keras' own probe: the same seed, another order.
    assert abs(keras_own[0] - one_device[0]) > 1e-3


def tf_default_strategy():
    import tensorflow as tf

    return tf.distribute.get_strategy()
