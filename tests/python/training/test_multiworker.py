"""Real 2-process MultiWorkerMirroredStrategy jobs on 127.0.0.1 with Keras 3 fit/evaluate.

Each job is two OS processes with their own TF_CONFIG, started by tfdistributed.launch. The
same job without our Keras 3 repairs fails: that is what proves the repairs are what make it
work (and tells us when upstream fixes the defects).

A job costs each of its workers seconds of CPU to import TensorFlow and Keras and to join the
cluster, more than most of the training it runs. So the jobs that succeed with every repair
run as the variants of one job (``shared_job``: the script trains them in turn in the same
two processes, each written apart, see mwms_digits.py), and each test asserts on its variant.
A job keeps its own processes when it needs them: a repair switched off
(``TFDISTRIBUTED_DISABLE_COMPAT`` is read when Keras is imported), or a failure that ends the
job (the test asserts the launcher's LaunchError, and what the tasks printed before it).
"""

import json
import os

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed.training import compat

pytestmark = pytest.mark.cluster
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "mwms_digits.py")
TIMEOUT = 240
# The shared job trains 16 models in turn, each of which had a job (and TIMEOUT) of its own.
SHARED_TIMEOUT = 900
VARIANT_MARK = "mwms_digits variant"  # the script's lines around each variant's output


def run_job(outdir, *args, env=None, workers=2, timeout=TIMEOUT):
    return tfd.launch(SCRIPT, workers=workers, args=[str(outdir), *args], timeout=timeout, env=env,
                      watch=tfd.Watch(echo=False))


def read_outputs(outdir):
    out = {}
    for name in sorted(os.listdir(outdir)):
        if name.endswith(".json"):
            task = name[:-5]
            with open(os.path.join(outdir, name)) as f:
                report = json.load(f)
            with np.load(os.path.join(outdir, task + ".npz")) as weights:
                report["weights"] = [weights[k] for k in sorted(weights.files, key=lambda k: int(k.split("_")[1]))]
            out[task] = report
    return out


# The busy model's job (busy_jobs): one variant of the shared job, and two jobs of their own.
BUSY = ["--model", "busy", "--epochs", "2", "--examples", "1000", "--validation-split", "0.2"]


def shared_variants(digits_tfds_dir):
    """The shared job's variants, in the order it trains them: {name: the script's options}."""
    tfds = ["--source", "tfds", "--data-dir", digits_tfds_dir]
    return {
        # First, as in a job of its own: busy_jobs compares it with the apart and read_back
        # jobs, which run it alone, down to the number of eager all-reduces.
        "busy": BUSY,
        "three_epochs": ["--epochs", "3"],
        "tfds-data": [*tfds, "--policy", "data", "--epochs", "2"],
        "tfds-auto": [*tfds, "--policy", "auto", "--epochs", "2"],
        "last_batch": ["--epochs", "2", "--examples", "1345"],
        **{f"spe-{examples}-{keras_fit}": [
            "--epochs", "2", "--examples", str(examples), "--steps-per-execution", "4",
            *(["--keras-fit"] if keras_fit else [])] for examples, keras_fit in SPE_VARIANTS},
        "float64": ["--epochs", "2", "--examples", "1345", "--floatx", "float64"],
        **{f"{compression}-{keras_fit}": [
            "--epochs", "2", "--examples", "1345", "--compression", compression,
            *(["--keras-fit"] if keras_fit else [])] for compression, keras_fit in COMPRESSED},
        "packs": ["--epochs", "2", "--examples", "1345", "--bytes-per-pack", "1024"],
        "shuffled": ["--epochs", "2", "--examples", "1345", "--shuffle"],
        "seed_per_worker": ["--epochs", "1", "--examples", "1345", "--shuffle",
                            "--seed-per-worker"],
        "powersgd": ["--epochs", "2", "--examples", "1345", "--compression", "powersgd",
                     "--powersgd", "2,5", "--dtype-policy", "mixed_float16"],
    }


@pytest.fixture(scope="module")
def shared_job(tmp_path_factory, digits_tfds_dir):
    """One 2-worker job that trains every variant of :func:`shared_variants` in turn, with
    every repair: ``(outdir, launch result, launch error)``; each variant's outputs are in
    ``outdir/<name>``, read by :func:`shared_variant`."""
    outdir = tmp_path_factory.mktemp("shared")
    variants = outdir / "variants.json"
    variants.write_text(json.dumps(shared_variants(str(digits_tfds_dir))))
    try:
        return outdir, run_job(outdir, "--variants", str(variants), timeout=SHARED_TIMEOUT), None
    except tfd.LaunchError as e:
        return outdir, None, e


def shared_variant(shared_job, name):
    """The shared job's launch result and variant ``name``'s outputs (as :func:`read_outputs`);
    the test fails with the variant's own error when a worker raised one in it, else with the
    job's when the job failed."""
    outdir, result, error = shared_job
    variant = outdir / name
    for failed in sorted(variant.glob("*.error")):
        pytest.fail(f"Variant {name!r} of the shared job failed on {failed.stem}:\n"
                    f"{failed.read_text()}", pytrace=False)
    if error is not None:
        written = sorted(p.name for p in variant.glob("*.json")) if variant.exists() else []
        pytest.fail(f"The shared job failed (variant {name!r} wrote {written or 'nothing'}): "
                    f"{error}", pytrace=False)
    return result, read_outputs(variant)


def section(lines, name):
    """The lines a task printed while it trained variant ``name`` of the shared job."""
    lines = list(lines)
    begin = [i for i, line in enumerate(lines) if line.strip() == f"{VARIANT_MARK} {name} begins"]
    end = [i for i, line in enumerate(lines) if line.strip() == f"{VARIANT_MARK} {name} ends"]
    assert len(begin) == len(end) == 1 and begin[0] < end[0], (name, begin, end)
    return lines[begin[0] + 1:end[0]]


@pytest.fixture
def two_worker_job(shared_job):
    return shared_variant(shared_job, "three_epochs")


def test_fit_then_evaluate_succeed_on_both_workers(two_worker_job):
    result, outputs = two_worker_job
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert sorted(outputs) == ["worker-0", "worker-1"]
    for report in outputs.values():
        assert report["info"]["kind"] == "multi_worker_mirrored"
        assert report["info"]["num_workers"] == 2
        losses = report["history"]["loss"]
        assert len(losses) == 3 and losses[-1] < losses[0]
        assert report["metrics"]["accuracy"] > 0.85
    # Both workers print their own progress, prefixed by the launcher.
    assert any("Epoch 3/3" in line for line in section(result.task("worker", 1).output,
                                                          "three_epochs"))


def test_workers_end_with_identical_weights(two_worker_job):
    _, outputs = two_worker_job
    assert len(outputs["worker-0"]["weights"]) == len(outputs["worker-1"]["weights"]) == 4
    for a, b in zip(outputs["worker-0"]["weights"], outputs["worker-1"]["weights"]):
        np.testing.assert_array_equal(a, b)
    assert outputs["worker-0"]["metrics"] == outputs["worker-1"]["metrics"]


@pytest.mark.parametrize("name", compat.REPAIRS)
def test_installed_keras_still_has_the_defect(name):
    """If this fails, upstream fixed the defect: our repair switches itself off; drop it."""
    compat.apply()
    compat.apply()  # idempotent
    assert compat.defect_present(name)
    assert compat.status()[name] == {"defect_present": True, "applied": True}


@pytest.mark.parametrize("disabled,symptom", [
    ("symbolic_build", "Attempt to convert a value (PerReplica"),
    ("reduce_per_replica", "Invalid reduction dimension 0 for input with 0 dimensions"),
])
def test_same_job_fails_without_the_repair(tmp_path, disabled, symptom):
    # A job of its own: the repair is switched off when Keras is imported, and the job fails.
    with pytest.raises(tfd.LaunchError) as info:
        run_job(tmp_path, "--epochs", "1", env={"TFDISTRIBUTED_DISABLE_COMPAT": disabled})
    output = "\n".join(line for t in info.value.results for line in t.output)
    assert symptom in output


def test_one_file_split_file_policy_fails_fast_with_our_message(tmp_path, digits_tfds_dir):
    # A job of its own: the failure ends the job, before any epoch of any task.
    with pytest.raises(tfd.LaunchError) as info:
        run_job(tmp_path, "--source", "tfds", "--data-dir", digits_tfds_dir, "--policy", "file")
    message = str(info.value)
    assert "ShardingError" in message and "Set the shard policy to 'data'" in message
    # Caught before training: no epoch ever started.
    assert not any("Epoch 1" in line for t in info.value.results for line in t.output)


@pytest.mark.parametrize("policy", ["data", "auto"])
def test_one_file_split_trains_with_data_policy(shared_job, policy):
    """Under "auto" (TensorFlow's default) too: too few files to shard by file means sharding
    by data, said once on each worker; an explicit "data" says nothing."""
    result, outputs = shared_variant(shared_job, f"tfds-{policy}")
    assert [t.returncode for t in result.tasks] == [0, 0]
    assert outputs["worker-0"]["metrics"]["accuracy"] > 0.8
    for a, b in zip(outputs["worker-0"]["weights"], outputs["worker-1"]["weights"]):
        np.testing.assert_array_equal(a, b)
    notices = [sum("too few to shard by file: sharded by data" in line
                   for line in section(task.output, f"tfds-{policy}"))
               for task in result.tasks]
    assert notices == ([1, 1] if policy == "auto" else [0, 0])


def test_a_last_batch_smaller_than_the_replicas_trains_as_on_one_device(shared_job):
    # 1345 = 21 global batches of 64 and one of a single example: one worker's share of the
    # last batch is empty. Both workers must still take the same steps and end where one
    # device ends (loss, accuracy, weights), without NaNs from the empty share.
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "support"))
    from models import digits_model

    result, outputs = shared_variant(shared_job, "last_batch")
    assert [t.returncode for t in result.tasks] == [0, 0]
    (x, y), _ = tfd.digits_arrays()
    model = digits_model(tfd.make_strategy("default"), seed=1, learning_rate=0.01)
    history = tfd.fit(model, x[:1345], y[:1345], epochs=2, batch_size=64, shuffle=False,
                      verbose=0)
    expected = model.get_weights()
    assert sorted(outputs) == ["worker-0", "worker-1"]
    for report in outputs.values():
        for key in ("loss", "accuracy"):
            np.testing.assert_allclose(report["history"][key], history.history[key], rtol=2e-5)
        assert len(report["weights"]) == len(expected) > 0
        for got, want in zip(report["weights"], expected):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


SPE_VARIANTS = [
    (1280, False),  # 20 batches of 64: whole blocks of 4, the batches repeat (one iterator)
    # 21 batches, the last of 3 examples split 2 and 1: each epoch ends on a block of 1, read
    # from a finite input. (Not the 1347 digits: there, two replicas' sums in another order move
    # a few weights whose gradient is near zero, which Adam divides by a near-zero second moment
    # (epsilon 1e-7): 4e-3 apart after 2 epochs under in-process `mirrored` too, and 6e-8 with
    # SGD or Adam(epsilon=1e-3). A property of Adam, not of the distribution.)
    (1283, False),
    (1283, True),   # the user's own model.fit on the arrays
]


@pytest.mark.parametrize("examples,keras_fit", SPE_VARIANTS)
def test_steps_per_execution_trains_as_on_one_device(shared_job, examples, keras_fit):
    # Keras alone cannot run this on several workers (see the last test). The same number of
    # optimizer steps matters: a step counted but not taken changes Adam's bias correction.
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "support"))
    from models import digits_model

    result, outputs = shared_variant(shared_job, f"spe-{examples}-{keras_fit}")
    assert [t.returncode for t in result.tasks] == [0, 0]
    (x, y), (xt, yt) = tfd.digits_arrays()
    model = digits_model(tfd.make_strategy("default"), seed=1, learning_rate=0.01)
    model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"],
                  steps_per_execution=4)
    history = model.fit(x[:examples], y[:examples], epochs=2, batch_size=64, shuffle=False,
                        verbose=0)
    metrics = model.evaluate(xt, yt, batch_size=64, verbose=0, return_dict=True)  # 8 batches
    expected = model.get_weights()
    assert sorted(outputs) == ["worker-0", "worker-1"]
    for report in outputs.values():
        assert report["steps"] == int(model.optimizer.iterations.numpy()) == 2 * -(-examples // 64)
        for key in ("loss", "accuracy"):
            np.testing.assert_allclose(report["history"][key], history.history[key], rtol=2e-5)
            np.testing.assert_allclose(report["metrics"][key], metrics[key], rtol=2e-5)
        assert len(report["weights"]) == len(expected) > 0
        for got, want in zip(report["weights"], expected):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    for a, b in zip(outputs["worker-0"]["weights"], outputs["worker-1"]["weights"]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("keras_fit,message", [
    (False, "steps_per_execution=4 is more than the 2 batches of one pass over the data"),
    (True, "The data ended inside the first block of 4 steps"),
])
def test_fewer_batches_than_one_block_is_refused_with_the_fix(tmp_path, keras_fit, message):
    # A job of its own: the failure ends the job (with fit(), before any epoch of any task).
    # 100 digits are 2 batches of 64: Keras has no result for a block that the data ends
    # inside its first pass. fit() says so before training; model.fit when it happens.
    with pytest.raises(tfd.LaunchError) as info:
        run_job(tmp_path, "--epochs", "1", "--examples", "100", "--steps-per-execution", "4",
                *(["--keras-fit"] if keras_fit else []))
    assert message in str(info.value)
    if not keras_fit:  # refused before any step
        assert not any("Epoch 1" in line for t in info.value.results for line in t.output)


def test_steps_per_execution_fails_without_the_repair(tmp_path):
    # A job of its own: the repair is switched off when Keras is imported, and the job fails.
    with pytest.raises(tfd.LaunchError) as info:
        run_job(tmp_path, "--epochs", "1", "--examples", "1280", "--steps-per-execution", "4",
                env={"TFDISTRIBUTED_DISABLE_COMPAT": "collective_steps_per_execution"})
    output = "\n".join(line for t in info.value.results for line in t.output)
    assert "You must feed a value for placeholder tensor" in output


def _step_collectives(report):
    """Collectives built per traced step function (train and test), by graph."""
    counts = {}
    for c in report["collectives"]:
        if c["graph"].startswith(("multi_step_on_iterator", "one_step_on_data")):
            counts[c["graph_id"]] = counts.get(c["graph_id"], 0) + 1
    return sorted(counts.values())


@pytest.fixture(scope="module")
def busy_jobs(shared_job, tmp_path_factory):
    """The busy model (convolutions, batch norm, dropout, L2, clipped Adam with a schedule,
    3 metrics) with validation_split, on 2 workers: with every repair (the shared job's first
    variant); with the logs apart from the gradients (logs_with_gradients off); with Keras'
    read-back assignments (assign_without_read off). The last two are jobs of their own: a
    repair is switched off when Keras is imported."""
    result, riding = shared_variant(shared_job, "busy")
    assert [t.returncode for t in result.tasks] == [0, 0]
    out = {"riding": riding}
    for name, env in (("apart", {"TFDISTRIBUTED_DISABLE_COMPAT": "logs_with_gradients"}),
                      ("read_back", {"TFDISTRIBUTED_DISABLE_COMPAT": "assign_without_read"})):
        outdir = tmp_path_factory.mktemp(name)
        result = run_job(outdir, *BUSY, env=env)
        assert [t.returncode for t in result.tasks] == [0, 0]
        out[name] = read_outputs(outdir)
    return out


def test_logs_ride_with_the_gradients_one_collective_per_step(busy_jobs):
    # Apart, a train step makes two all-reduces (gradients, then loss and metrics); riding,
    # every step function (train and validation) makes exactly one.
    for report in busy_jobs["riding"].values():
        counts = _step_collectives(report)  # train, validation, evaluate()
        assert len(counts) >= 3 and set(counts) == {1}
        train = [c for c in report["collectives"] if c["elements"] > 1000]
        assert len(train) == 1 and train[0]["dtype"] == "float32"
    for report in busy_jobs["apart"].values():
        assert max(_step_collectives(report)) == 2


def test_logs_riding_with_the_gradients_change_no_number(busy_jobs):
    # Same history (loss, 3 metrics, validation), evaluate() and weights bit for bit, on both
    # workers: only where the logs travel changed.
    riding, apart = busy_jobs["riding"], busy_jobs["apart"]
    assert sorted(riding) == sorted(apart) == ["worker-0", "worker-1"]
    for task in riding:
        assert set(riding[task]["history"]) == {
            f"{p}{k}" for p in ("", "val_") for k in ("loss", "accuracy", "top3", "xent")}
        assert riding[task]["history"] == apart[task]["history"]
        assert riding[task]["metrics"] == apart[task]["metrics"]
        assert riding[task]["steps"] == apart[task]["steps"] == 2 * -(-800 // 64)
        for a, b in zip(riding[task]["weights"], apart[task]["weights"]):
            np.testing.assert_array_equal(a, b)
    # Across workers: every weight but plain BatchNormalization's moving statistics (weights 4
    # and 5), which Keras keeps per worker (CONFORMANCE.md, row batchnorm).
    weights = riding["worker-0"]["weights"], riding["worker-1"]["weights"]
    for i, (a, b) in enumerate(zip(*weights)):
        if i not in (4, 5):
            np.testing.assert_array_equal(a, b)
    assert riding["worker-0"]["history"]["val_accuracy"][-1] > 0.5


def test_a_float64_model_trains_as_on_one_device(shared_job):
    # The example counts that weight each worker's gradients travel in their all-reduce, whose
    # tensors must share one dtype: they take the gradients' (float32 counts beside float64
    # gradients failed in TensorFlow's concat).
    import sys

    import keras

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "support"))
    from models import digits_model

    result, outputs = shared_variant(shared_job, "float64")
    assert [t.returncode for t in result.tasks] == [0, 0]
    (x, y), (xt, yt) = tfd.digits_arrays()
    # Keras fixes its global dtype policy (layers) when the first layer is made, which
    # set_floatx() (metrics) then no longer changes: as the workers, after the shared job's
    # earlier variants, this process sets both.
    previous = keras.mixed_precision.dtype_policy(), keras.config.floatx()
    keras.mixed_precision.set_dtype_policy("float64")
    keras.config.set_floatx("float64")
    try:
        model = digits_model(tfd.make_strategy("default"), seed=1, learning_rate=0.01)
        history = tfd.fit(model, x[:1345], y[:1345], epochs=2, batch_size=64, shuffle=False,
                          verbose=0)
        metrics = tfd.evaluate(model, xt, yt, batch_size=64, verbose=0)
        expected = model.get_weights()
    finally:
        keras.mixed_precision.set_dtype_policy(previous[0])
        keras.config.set_floatx(previous[1])
    assert {w.dtype for w in expected} == {np.dtype("float64")}
    for report in outputs.values():
        assert {c["dtype"] for c in report["collectives"] if c["elements"] > 1000} == {"float64"}
        for key in ("loss", "accuracy"):
            np.testing.assert_allclose(report["history"][key], history.history[key], rtol=1e-9)
            np.testing.assert_allclose(report["metrics"][key], metrics[key], rtol=1e-9)
        for got, want in zip(report["weights"], expected):
            assert got.dtype == np.float64
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_metric_resets_make_no_all_reduce(busy_jobs):
    # reset_metrics() (every epoch, and evaluate()) assigned each metric variable and read it
    # back: on several workers an eager all-reduce per variable, for a value Keras ignores.
    def eager(report):
        return sum(c["graph"] == "eager" for c in report["collectives"])

    for task in busy_jobs["riding"]:
        without, read_back = busy_jobs["riding"][task], busy_jobs["read_back"][task]
        # 4 metrics (loss, accuracy, top3, xent) x 2 variables, reset in 2 epochs, for
        # validation and for evaluate() at least: 32 or more all-reduces saved.
        assert eager(read_back) - eager(without) >= 32
        assert without["history"] == read_back["history"]
        assert without["metrics"] == read_back["metrics"]
        for a, b in zip(without["weights"], read_back["weights"]):
            np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def one_device_1345():
    """The digits model on one device, 32 bits: 2 epochs of the first 1345 examples."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "support"))
    from models import digits_model

    (x, y), (xt, yt) = tfd.digits_arrays()
    model = digits_model(tfd.make_strategy("default"), seed=1, learning_rate=0.01)
    history = tfd.fit(model, x[:1345], y[:1345], epochs=2, batch_size=64, shuffle=False,
                      verbose=0)
    return history.history, model.get_weights()


def test_a_seeded_shuffled_fit_trains_on_the_batches_of_one_device(shared_job):
    """keras.utils.set_random_seed() then fit(shuffle=True): each worker shuffles its copy of
    the arrays with the seed one device draws (not one from the job's ports, new at every
    launch), so the two workers train on one device's batches and a second run repeats the
    first."""
    _, outputs = shared_variant(shared_job, "shuffled")
    (x, y), _ = tfd.digits_arrays()
    from models import digits_model

    model = digits_model(tfd.make_strategy("default"), seed=1, learning_rate=0.01)
    one_device = tfd.fit(model, x[:1345], y[:1345], epochs=2, batch_size=64, shuffle=True,
                         verbose=0).history
    unshuffled = shared_variant(shared_job, "last_batch")[1]["worker-0"]["history"]
    for report in outputs.values():
        np.testing.assert_allclose(report["history"]["loss"], one_device["loss"], rtol=1e-5)
        for got, want in zip(report["weights"], model.get_weights()):
            np.testing.assert_allclose(got, want, atol=1e-5)
    # The same examples unshuffled give other losses: the shuffle did happen.
    assert abs(unshuffled["loss"][0] - one_device["loss"][0]) > 1e-3


def test_workers_seeded_differently_are_told_so_instead_of_shuffling_apart(shared_job):
    """Each worker's program seeds itself by its index: each would shuffle the arrays its own
    way and train on its share of other batches (some examples twice, others never). Every
    worker is told, with the seeds it saw, before any step; the job goes on with the next
    variant."""
    outdir, _, _ = shared_job
    errors = {p.stem: p.read_text() for p in (outdir / "seed_per_worker").glob("*.error")}
    assert sorted(errors) == ["worker-0", "worker-1"]
    for text in errors.values():
        assert "TrainingError: fit: the workers would shuffle the data in different orders " \
               "(worker 0: global seed 100, shuffle seed " in text
        assert "worker 1: global seed 101, shuffle seed " in text
        assert "Set the same random seed on every worker" in text
    for name in ("shuffled", "powersgd"):  # the variants before and after it trained
        assert sorted(shared_variant(shared_job, name)[1]) == ["worker-0", "worker-1"]
    assert not list((outdir / "seed_per_worker").glob("*.json"))


def _times_each_example_trained():
    """On each worker of a 2-worker job, one epoch of Keras' own ``model.fit(x, y)`` (shuffle
    is its default) on 256 one-hot examples, for each way a program seeds itself: how many
    examples were trained on 0, 1, 2... times (a zero-initialised kernel trained by SGD on the
    prediction itself moves by each example's count), or the error that was raised."""
    import json
    import os

    import keras
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.eager import context

    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    n = 256
    out = {}
    for case, seed in (("unseeded", None), ("seeded", 3), ("seeded_by_index", 100 + index),
                       ("tfd_unseeded", None)):
        tf.random.set_seed(None)  # as a program that never set one
        if seed is not None:
            keras.utils.set_random_seed(seed)
        with strategy.scope():
            model = keras.Sequential([keras.layers.Input((n,)), keras.layers.Dense(
                1, use_bias=False, kernel_initializer="zeros")])
            model.compile(keras.optimizers.SGD(1.0), loss=lambda y, prediction: prediction)
        x, y = np.eye(n, dtype="float32"), np.zeros((n, 1), "float32")
        try:
            if case.startswith("tfd"):
                tfd.fit(model, x, y, batch_size=32, epochs=1, verbose=0)
            else:
                model.fit(x, y, batch_size=32, epochs=1, verbose=0)
        except tfd.TrainingError as e:
            out[case] = str(e)
            continue
        moved = -model.get_weights()[0][:, 0]
        out[case] = np.bincount(np.round(moved / moved[moved > 0].min()).astype(int)).tolist()
        out[case + ":global_seed_after"] = context.global_seed()
    return out


def test_keras_own_fit_shuffles_arrays_in_one_order_on_every_worker():
    """Keras' own fit shuffles arrays on each worker with tf.random.shuffle: with no global
    seed each worker drew its own order and kept its half of each global batch from it, so an
    "epoch" trained ~a quarter of the examples twice and ~a quarter never (seen: 67, 122, 67 of
    256 trained 0, 1, 2 times). Now every example once; workers seeded alike keep Keras' own
    order; workers seeded apart are told so; tfd.fit already shared its order."""
    job = tfd.launch(_times_each_example_trained, workers=2, timeout=TIMEOUT,
                     watch=tfd.Watch(echo=False))
    for out in job.values:
        for case in ("unseeded", "seeded", "tfd_unseeded"):
            assert out[case] == [0, 256], (case, out[case])
        # The seed given for the call is taken back: the program is unseeded again.
        assert out["unseeded:global_seed_after"] is None
        assert out["seeded:global_seed_after"] == 3
        assert out["seeded_by_index"].startswith(
            "model.fit: the workers would shuffle the data in different orders (worker 0: "
            "global seed 100, worker 1: global seed 101)")


# Stated tolerances of 16-bit gradients against 32 bits after 2 epochs (44 Adam steps) of the
# digits model, about 10x what was seen (2026-11-25): the loss relative (seen 1e-5 fp16, 2e-4
# bf16), the weights absolute (seen 1.0e-4 fp16, 1.3e-2 bf16: Adam normalises each gradient
# element, so bf16's 8 bits move a weight whose gradient is near zero by up to a learning rate).
COMPRESSED_LOSS_RTOL = {"fp16": 1e-3, "bf16": 5e-3}
COMPRESSED_WEIGHTS_ATOL = {"fp16": 2e-3, "bf16": 0.1}


COMPRESSED = [("fp16", False), ("bf16", False), ("fp16", True)]


@pytest.mark.parametrize("compression,keras_fit", COMPRESSED)
def test_compressed_gradients_train_as_32_bits_within_tolerance(shared_job, one_device_1345,
                                                                compression, keras_fit):
    # The last batch of 1 example is split 1 and 0: the counts that weight each worker's
    # gradients travel exact (32 bits) beside the 16-bit gradients.
    result, outputs = shared_variant(shared_job, f"{compression}-{keras_fit}")
    assert [t.returncode for t in result.tasks] == [0, 0]
    history, expected = one_device_1345
    wire = {"fp16": "float16", "bf16": "bfloat16"}[compression]
    for report in outputs.values():
        big = {c["dtype"] for c in report["collectives"] if c["elements"] > 1000}
        assert big == {wire}
        assert {c["dtype"] for c in report["collectives"] if c["elements"] <= 1000} >= {"float32"}
        np.testing.assert_allclose(report["history"]["loss"], history["loss"],
                                   rtol=COMPRESSED_LOSS_RTOL[compression])
        for got, want in zip(report["weights"], expected):
            assert got.dtype == np.float32  # applied in the model's own precision
            np.testing.assert_allclose(got, want, atol=COMPRESSED_WEIGHTS_ATOL[compression])
    for a, b in zip(outputs["worker-0"]["weights"], outputs["worker-1"]["weights"]):
        np.testing.assert_array_equal(a, b)


def test_gradient_packs_are_several_all_reduces_that_train_as_one(shared_job, one_device_1345):
    # bytes_per_pack reaches Keras' gradients (TensorFlow alone packs only by the options of
    # the all-reduce call, not the strategy's). The digits model's gradient, last layers first
    # as TensorFlow packs it: the step's logs, the example count and the last layer's 10 + 640
    # elements (2.6 KB, over 1 KB: a pack), then the first layer's 64 + 4,096: 2 all-reduces in
    # the train step where one was. The update is the one-device update, within the 2-worker
    # tolerance of CONFORMANCE.md (2 workers sum in another order than one device; packing only
    # changes how many collectives carry the sums).
    result, outputs = shared_variant(shared_job, "packs")
    assert [t.returncode for t in result.tasks] == [0, 0]
    history, expected = one_device_1345
    for report in outputs.values():
        assert max(_step_collectives(report)) == 2
        big = [c["elements"] for c in report["collectives"] if c["elements"] > 100]
        assert 64 + 4096 in big and all(e == 64 + 4096 or 650 < e < 670 for e in big), big
        np.testing.assert_allclose(report["history"]["loss"], history["loss"], rtol=2e-5)
        for got, want in zip(report["weights"], expected):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    for a, b in zip(outputs["worker-0"]["weights"], outputs["worker-1"]["weights"]):
        np.testing.assert_array_equal(a, b)


def test_powersgd_gradients_train_identically_on_both_workers_in_mixed_precision(
        shared_job, one_device_1345):
    # Rank 2 after 5 steps of warm-up, under mixed_float16 (the loss-scaling optimizer's inner
    # optimizer holds PowerSGD's state), the last batch of 1 example split 1 and 0. Every worker
    # applies the same update; the two compressed all-reduces carry 629 elements where 32 bits
    # carry 4,810 (+ the example count; the logs ride where the loss scale lets them).
    result, outputs = shared_variant(shared_job, "powersgd")
    assert [t.returncode for t in result.tasks] == [0, 0]
    history, _ = one_device_1345
    for report in outputs.values():
        assert report["info"]["powersgd"]["rank"] == 2
        sizes = {c["elements"] for c in report["collectives"]
                 if c["graph"] != "eager" and c["elements"] > 100}
        # Warm-up: every gradient whole. Compressed: the vectors (74) and both sums of P
        # (64 x 2 and 10 x 2, twice), then Q (64 x 2, twice).
        assert sizes - {256} in ({4811}, {4811, 371}, {4813, 373}), sizes
        assert 256 in sizes
        # Rank 2 learns slower at first: epoch 2's loss is 1.32x one device's in 32 bits (0.48
        # against 0.36, seen 2026-11-26), the test accuracy 0.916 (0.920 in 32 bits).
        assert report["history"]["loss"][-1] < 1.5 * history["loss"][-1]
        assert report["metrics"]["accuracy"] > 0.89
    for a, b in zip(outputs["worker-0"]["weights"], outputs["worker-1"]["weights"]):
        np.testing.assert_array_equal(a, b)
