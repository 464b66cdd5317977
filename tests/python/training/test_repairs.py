"""Each Keras repair, declared once (``tfdistributed.training.repairs``), seen apart from a cluster: its
detection finds the defect in the installed Keras (read through our own patches) and nothing in
a fixed version of the same source; the declared order satisfies what the repairs require and
wrap; a repair whose requirement is switched off is skipped, and ``status()`` says why.

The end-to-end proofs that each defect is real (the same job fails or reports other numbers
without the repair) are in test_keras_surface.py, test_multiworker.py and test_conformance.py;
``one_iterator_per_pass`` (a cost, not a wrong number) is proven here: fewer distributed
iterators made, the same history and weights as Keras' own epoch iterator.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys

import pytest

import tfdistributed  # noqa: F401  (installs the repairs)
from tfdistributed.training import compat, repairs, routing
from tfdistributed.training.repairs.common import Repair, check_order, keras_trainer, original


def _swap(a, b):
    return lambda text: text.replace(a, "\0").replace(b, a).replace("\0", b)


# For each repair, how the fixed upstream code would read, as an edit of the installed source
# its detection reads (through its module's ``source``).
FIXED = {
    "model_strategy_from_weights": lambda t: t.replace(
        "self._distribute_strategy or tf.distribute.get_strategy()",
        "self._distribute_strategy or strategy_of_weights(self)"),
    "compile_under_model_strategy": lambda t: t.replace(
        "optimizer = optimizers.get(optimizer)",
        "with self.distribute_strategy.scope(): optimizer = optimizers.get(optimizer)"),
    "optimizer_follows_its_model": lambda t: t.replace(
        "self._distribution_strategy = tf.distribute.get_strategy()",
        "self._distribution_strategy = None  # taken at build"),
    "symbolic_build": lambda t: t.replace(".reduce(", ".first_value("),
    "reduce_per_replica": lambda t: t.replace(
        'strategy.reduce("MEAN", v, axis=0)', 'strategy.reduce("MEAN", v, axis=None)'),
    "atomic_assign_add": lambda t: t.replace(
        "self.assign(self + value)", "self._value.assign_add(value)"),
    "central_storage_updates": lambda t: t.replace(
        'aggregation="none"', 'aggregation="only_first_replica"'),
    "central_storage_metric_assign": lambda t: t.replace(
        "variable.assign(variable +", "variable.assign_add("),
    "uneven_batches": lambda t: t.replace("1.0 / num_replicas", "local_examples / global_examples"),
    "sharded_variable_updates": lambda t: t.replace("extended.update", "update_each_shard"),
    "clip_after_all_reduce": lambda t: t.replace(
        "_all_reduce_sum_gradients", "_apply_summed_gradients"),
    "logs_with_gradients": _swap(".apply_gradients(", ".compute_metrics("),
    "assign_without_read": lambda t: t + "\n# read_value=False",
    "collective_steps_per_execution": lambda t: t.replace("tf.while_loop", "chained_steps"),
    "gradient_accumulation": lambda t: t.replace("ops.cond(", "cross_replica_cond("),
    "ema_overwrite": lambda t: t.replace("extended.update", "replica_local_update"),
    "loss_scale_consensus": lambda t: t.replace("experimental_local_results(", "all_replicas("),
    "loss_scale_counter": lambda t: t.replace("ops.cond(", "ops.where("),
    "one_iterator_per_pass": lambda t: t.replace(
        "self._current_iterator = iter(self._get_iterator())\n                self._steps_seen = 0\n"
        "        else", "self._current_iterator = None\n                self._steps_seen = 0\n"
        "        else"),
    "strategy_aware_fit": lambda t: t + "\n# ClusterCoordinator",
}


def _module(name):
    """The module that declares repair ``name`` (the routing is not in the repairs package)."""
    if name == "strategy_aware_fit":
        return routing
    return importlib.import_module(f"tfdistributed.training.repairs.{name}")


def test_every_repair_has_a_detection_test_and_the_names_are_those_of_before():
    assert list(FIXED) == list(compat.names()) == list(compat.REPAIRS) == list(compat.status())
    assert compat.names() == (
        "model_strategy_from_weights", "compile_under_model_strategy",
        "optimizer_follows_its_model", "symbolic_build", "reduce_per_replica", "atomic_assign_add", "central_storage_updates",
        "central_storage_metric_assign", "uneven_batches", "sharded_variable_updates",
        "clip_after_all_reduce", "logs_with_gradients", "assign_without_read",
        "collective_steps_per_execution", "gradient_accumulation", "ema_overwrite",
        "loss_scale_consensus", "loss_scale_counter", "one_iterator_per_pass",
        "strategy_aware_fit")


@pytest.mark.parametrize("name", list(FIXED))
def test_detection_finds_the_defect_in_the_installed_keras_through_our_patch(name):
    compat.apply()
    record = next(r for r in compat.records() if r.name == name)
    assert record.detect(keras_trainer()) is True
    assert compat.defect_present(name) is True


@pytest.mark.parametrize("name", list(FIXED))
def test_detection_finds_nothing_in_the_fixed_source(name, monkeypatch):
    fix = FIXED[name]
    module = _module(name)
    read = module.source
    edited = []

    def fixed_source(obj):
        text = read(obj)
        new = fix(text)
        edited.append(new != text)
        return new

    monkeypatch.setattr(module, "source", fixed_source)
    record = next(r for r in compat.records() if r.name == name)
    assert record.detect(keras_trainer()) is False
    assert any(edited), f"{name}: the fix edited none of the sources the detection read"


def test_each_record_is_its_module_whole():
    for record in repairs.ALL:
        module = _module(record.name)
        assert module.REPAIR is record
        assert record.defect == module.__doc__ and record.defect.startswith(f"``{record.name}``")
        assert record.detect is module.detect
    routed = compat.records()[-1]
    assert routed.name == "strategy_aware_fit" and routed.defect == routing.__doc__
    assert routed.upstream == ("keras-team/keras#18624",)


def test_the_declared_order_satisfies_requires_and_after():
    check_order(repairs.ALL)
    check_order(compat.records())
    logs = next(r for r in repairs.ALL if r.name == "logs_with_gradients")
    assert logs.requires == ("uneven_batches", "reduce_per_replica")
    order = [r.name for r in repairs.ALL]
    swapped = list(repairs.ALL)
    i, j = order.index("uneven_batches"), order.index("logs_with_gradients")
    swapped[i], swapped[j] = swapped[j], swapped[i]
    with pytest.raises(ValueError, match="'logs_with_gradients' must come after 'uneven_batches', "
                                         "which comes after it"):
        check_order(swapped)
    unknown = dataclasses.replace(logs, name="x", requires=("no_such_repair",))
    with pytest.raises(ValueError, match="'no_such_repair', which is not a repair"):
        check_order((*repairs.ALL, unknown))
    with pytest.raises(ValueError, match="declared twice"):
        check_order((*repairs.ALL, repairs.ALL[0]))


def test_install_refuses_a_repair_out_of_order_and_adds_a_known_one_once():
    before = compat.names()
    compat.install(compat.records()[-1])  # strategy_aware_fit again: nothing added
    assert compat.names() == before
    needs_missing = Repair(name="late", defect="", upstream=(), detect=lambda t: True,
                           apply=None, requires=("not_declared",))
    with pytest.raises(ValueError, match="not_declared"):
        compat.install(needs_missing)
    assert compat.names() == before


@pytest.mark.slow
def test_a_repair_whose_requirement_is_switched_off_is_skipped_and_says_why():
    code = ("import json, keras, tfdistributed\n"
            "from tfdistributed.training import compat\n"
            "print(json.dumps({'status': compat.status(), 'applied': compat.apply()}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
                               "TFDISTRIBUTED_DISABLE_COMPAT": "uneven_batches"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    status = out["status"]
    assert status["uneven_batches"] == {
        "defect_present": True, "applied": False,
        "skipped": "switched off by TFDISTRIBUTED_DISABLE_COMPAT"}
    assert status["logs_with_gradients"] == {
        "defect_present": True, "applied": False,
        "skipped": "requires uneven_batches, which is not applied (switched off by "
                   "TFDISTRIBUTED_DISABLE_COMPAT)"}
    # What does not require it is applied, clip_after_all_reduce (which only wraps it) too.
    assert all(out["applied"][name] for name in compat.names()
               if name not in ("uneven_batches", "logs_with_gradients"))


def test_sharded_variable_updates_patches_nothing_global_and_applies_on_demand():
    import keras

    record = next(r for r in repairs.ALL if r.name == "sharded_variable_updates")
    assert record.apply is None
    assert compat.status()["sharded_variable_updates"] == {"defect_present": True,
                                                           "applied": True}
    optimizer = keras.optimizers.SGD()
    keras_update = optimizer._distributed_tf_update_step
    compat.update_shards_directly(optimizer)
    compat.update_shards_directly(optimizer)  # idempotent
    assert optimizer._distributed_tf_update_step.updates_shards_directly
    assert keras.optimizers.SGD()._distributed_tf_update_step.__func__ \
        is keras_update.__func__  # other optimizers untouched


def test_routing_wraps_keras_methods_and_keeps_their_signature():
    import inspect

    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    for name in ("fit", "evaluate", "predict"):
        routed = getattr(type(model), name)
        keras_own = compat.keras_method(model, name)
        assert routed.__wrapped__ is keras_own.__func__
        assert routed.__tfdistributed_original__ is keras_own.__func__
        assert inspect.signature(routed) == inspect.signature(keras_own.__func__)


def _passes(strategy, make_input, monkeypatch, *, repaired):
    """fit (2 epochs, validation each) and evaluate under ``strategy``: the distributed iterators
    made, the history and the weights; with Keras' own epoch iterator when not ``repaired``."""
    import keras
    import numpy as np
    from keras.src.backend.tensorflow import trainer
    from tensorflow.python.distribute import input_lib

    made = []
    counted = input_lib.DistributedIterator.__init__
    with monkeypatch.context() as patch:
        patch.setattr(input_lib.DistributedIterator, "__init__",
                      lambda self, *a, **k: (made.append(1), counted(self, *a, **k))[1])
        if not repaired:
            for name in ("_get_iterator", "_enumerate_iterator"):
                patch.setattr(trainer.TFEpochIterator, name,
                              original(getattr(trainer.TFEpochIterator, name)))
        (x, y), (xt, yt) = tfdistributed.digits_arrays()
        keras.utils.set_random_seed(5)
        with strategy.scope():
            model = keras.Sequential([keras.Input((8, 8)), keras.layers.Flatten(),
                                      keras.layers.Dense(10)])
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        data, fit_args = make_input(x[:128], y[:128], strategy)
        history = model.fit(*data, epochs=2, validation_data=(xt[:64], yt[:64]), verbose=0,
                            **fit_args)
        model.evaluate(xt[:64], yt[:64], verbose=0)
    return len(made), history.history, [np.asarray(w) for w in model.get_weights()]


def _arrays(x, y, strategy):
    return (x, y), {"batch_size": 32, "shuffle": True}


def _dataset_continued(x, y, strategy):
    import tensorflow as tf

    return ((tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat(),),
            {"steps_per_epoch": 3, "shuffle": False})


def _dataset_reshuffled(x, y, strategy):
    import tensorflow as tf

    return ((tf.data.Dataset.from_tensor_slices((x, y)).shuffle(128, seed=3).batch(32),),
            {"shuffle": False})


def _distributed_from_function(x, y, strategy):
    import tensorflow as tf

    def dataset(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(
            context.get_per_replica_batch_size(32))

    return (strategy.distribute_datasets_from_function(dataset),), {"shuffle": False}


# ~30 s of CPU (10 fits, 8 under mirrored): left out of make check, which keeps the detection.
# (strategy, input, iterators saved: Keras' end-of-pass iterator of each of the 5 passes, or of
# the validation and evaluation passes only when the training input draws seeds per iterator)
@pytest.mark.slow
@pytest.mark.parametrize("strategy_name, make_input, saved", [
    ("mirrored", _arrays, 5),              # Keras' own shuffle of arrays: in the pipeline
    ("mirrored", _dataset_continued, 3),   # the training iterator continues: made once
    ("mirrored", _dataset_reshuffled, 3),  # reshuffled per iterator: its passes kept as Keras'
    # A pipeline made per worker by a function cannot be read: its passes are Keras' own, the
    # validation and evaluation arrays' are repaired.
    ("mirrored", _distributed_from_function, 3),
    ("default", _arrays, 0),               # no strategy: Keras' own code, untouched
])
def test_one_iterator_per_pass_makes_what_is_read_and_trains_the_same(
        strategy_name, make_input, saved, monkeypatch):
    import numpy as np

    strategy = tfdistributed.make_strategy(strategy_name)
    keras_made, keras_history, keras_weights = _passes(strategy, make_input, monkeypatch,
                                                       repaired=False)
    made, history, weights = _passes(strategy, make_input, monkeypatch, repaired=True)
    assert keras_made - made == saved
    assert history == keras_history
    assert all(np.array_equal(a, b) for a, b in zip(weights, keras_weights))


def test_draws_seeds_per_iterator_reads_the_whole_pipeline():
    import tensorflow as tf

    from tfdistributed.training.repairs.one_iterator_per_pass import draws_seeds_per_iterator

    plain = tf.data.Dataset.range(8).map(lambda i: i * 2).batch(2)
    assert not draws_seeds_per_iterator(plain)
    assert draws_seeds_per_iterator(tf.data.Dataset.range(8).shuffle(8).map(lambda i: i).batch(2))
    assert draws_seeds_per_iterator(tf.data.Dataset.zip(plain, tf.data.Dataset.random(seed=1)))
    assert draws_seeds_per_iterator(tf.data.Dataset.sample_from_datasets([plain, plain]))
