"""The batch feed behind R generators, driven from Python exactly as the R package drives it
(producer loop on the main thread, training on a job thread). The sharded files are in
test_shards.py."""

import threading

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed.data import rcallbacks
from tfdistributed.r import served
from models import digits_model as build_digits_model
from tfdistributed.r.feed import BatchFeed
from tfdistributed.errors import GeneratorError


def passes(x, y, batch_size=64, fail_at=None):
    """What an R generator does: batches of one epoch, then None (R's NULL), forever."""
    calls = 0
    while True:
        for start in range(0, len(x), batch_size):
            calls += 1
            if calls == fail_at:
                yield RuntimeError(f"disk on fire at call {calls}")
            yield [x[start:start + batch_size].astype(np.float64), y[start:start + batch_size]]
        yield None


def serve(job, feed, batches):
    """The R package's serving loop (rpkg/R/generators.R: run_served) in Python."""
    while True:
        free = feed.free_slots(0.01)
        if free < 0:
            if job.wait(0.01):
                return
            continue
        for _ in range(free):
            batch = next(batches)
            if isinstance(batch, Exception):
                feed.fail(str(batch))
                job.stop(30)
                return
            if batch is None:
                feed.end_pass()
            else:
                feed.put(batch)


def training_threads():
    return [t for t in threading.enumerate() if t.name == "tfdistributed-training" and t.is_alive()]


def fit_from(model, batches, **kwargs):
    feed = BatchFeed(capacity=4, stream=kwargs.get("steps_per_epoch") is not None)
    feed.put(next(batches))
    job = served.start_fit(model, feed, verbose=0, **kwargs)
    serve(job, feed, batches)
    return job, feed


def test_default_strategy_trains_to_090_from_a_generator(digits):
    (x, y), (xt, yt) = digits
    model = build_digits_model(tfd.make_strategy("default"))
    job, feed = fit_from(model, passes(x, y), epochs=15)
    history = job.result()
    assert len(history.history["loss"]) == 15
    # Every batch of every epoch was trained on: 22 per epoch (1347 examples / 64).
    assert feed.batches >= 15 * 22
    assert tfd.evaluate(model, xt, yt, verbose=0)["accuracy"] >= 0.9
    assert not training_threads()


def test_mirrored_with_steps_per_epoch_keeps_every_batch(digits):
    (x, y), _ = digits
    strategy = tfd.make_strategy("mirrored")
    model = build_digits_model(strategy)
    with pytest.raises(GeneratorError, match="needs `steps_per_epoch`"):
        fit_from(model, passes(x, y), epochs=1)
    job, feed = fit_from(model, passes(x, y), epochs=3, steps_per_epoch=22)
    history = job.result()
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert all(acc > 0 for acc in history.history["accuracy"])


def test_error_in_the_generator_stops_training_within_seconds(digits):
    (x, y), _ = digits
    model = build_digits_model(tfd.make_strategy("default"))
    job, feed = fit_from(model, passes(x, y, fail_at=30), epochs=100)
    # Training stopped at the failing call, the 30th, not after its 100 epochs (2,200 batches):
    # no batch was asked for after it, and the job ended within job.stop's 30 s (below). Not
    # a wall-clock bound from the start: on a loaded machine tracing the model alone can take
    # most of 30 s.
    assert feed.failure == "disk on fire at call 30"
    assert feed.batches == 29
    with pytest.raises(Exception, match="R generator failed or training was stopped"):
        job.result()
    assert not job.alive and not training_threads()


def test_a_batch_of_another_shape_names_the_expected_signature():
    feed = BatchFeed()
    feed.put([np.zeros((4, 8, 8, 1)), np.arange(4, dtype=np.int32)])
    with pytest.raises(GeneratorError) as error:
        feed.put([np.zeros((4, 8, 8)), np.arange(4, dtype=np.int32)])
    assert "Batch 2 does not match the first batch: expected x: float32 (None, 8, 8, 1), " \
           "y: int32 (None,), got x: float32 (None, 8, 8)" in str(error.value)
    with pytest.raises(GeneratorError, match="different first .batch. dimensions"):
        feed.put([np.zeros((4, 8, 8, 1)), np.arange(3, dtype=np.int32)])
    with pytest.raises(GeneratorError, match=r"must return list\(x, y\)"):
        feed.put([np.zeros((4, 8, 8, 1))])
    with pytest.raises(GeneratorError, match="not numeric"):
        feed.put([np.array(["a", "b"]), np.arange(2)])


def test_an_epoch_needs_a_batch_and_the_feed_refuses_to_build_before_one():
    feed = BatchFeed()
    with pytest.raises(GeneratorError, match="no batch yet"):
        feed.dataset()
    feed.put([np.zeros((2, 3)), np.zeros(2)])
    feed.end_pass()
    with pytest.raises(GeneratorError, match="returned NULL before any batch of pass 2"):
        feed.end_pass()


def test_a_stopped_feed_makes_the_dataset_raise_even_with_batches_buffered():
    import tensorflow as tf

    feed = BatchFeed(capacity=4, passes=1)
    for _ in range(3):
        feed.put([np.ones((2, 3)), np.zeros(2)])
    iterator = iter(feed.dataset())
    assert next(iterator)[0].shape == (2, 3)
    feed.fail("boom")
    assert feed.free_slots(0) == -1
    with pytest.raises(tf.errors.InvalidArgumentError, match="R generator failed"):
        next(iterator)


def test_a_bounded_feed_holds_at_most_capacity_batches():
    feed = BatchFeed(capacity=3)
    assert feed.free_slots(0) == 3
    for _ in range(3):
        feed.put([np.ones((2, 3)), np.zeros(2)])
    assert feed.free_slots(0.02) == 0
    next(iter(feed.dataset()))
    assert feed.free_slots(0) == 1


def test_python_from_generator_is_not_mistaken_for_r():
    import tensorflow as tf

    def python_batches():
        yield np.zeros((2, 3), np.float32)

    dataset = tf.data.Dataset.from_generator(
        python_batches, output_signature=tf.TensorSpec((None, 3), tf.float32))
    # While no callback of the process calls R (the dataset is not looked into) ...
    real = rcallbacks._calls_r
    import unittest.mock as mock

    with mock.patch.object(rcallbacks, "_calls_r", lambda fn, depth=4: False):
        assert rcallbacks.find_host_generators(dataset) == {"callbacks": 0, "r_functions": 0}
        rcallbacks.refuse_r_generator_on_main_thread(dataset)

    # ... and once one does (an R test run earlier in this process, or a stand-in), when the
    # dataset's own callbacks are counted: from_generator's three, none calling R.
    def stand_in(fn, depth=4):
        return fn is marker or real(fn, depth)

    def marker():
        return None

    with mock.patch.object(rcallbacks, "_calls_r", stand_in):
        from tensorflow.python.ops import script_ops

        token = script_ops._py_funcs.insert(marker)
        try:
            assert rcallbacks.find_host_generators(dataset) == {"callbacks": 3, "r_functions": 0}
            rcallbacks.refuse_r_generator_on_main_thread(dataset)
        finally:
            script_ops._py_funcs.remove(token)
