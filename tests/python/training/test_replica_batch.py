"""fit(max_replica_batch=): the global batch kept on fewer replicas by accumulating gradients
(tfdistributed.training.replica_batch), in this process's 2 logical CPUs.

N accumulated steps of batch_size / N update as one step of batch_size on one device, and a job
that resumes from its backup at another size (here 2 replicas, then 1: the shrink of an elastic
job) ends with the weights of an uninterrupted run. SGD with momentum is linear in the
gradients, so the only differences are float32 rounding of the same sums taken in another
order: the conformance matrix's tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed.training.replica_batch import accumulation_steps

RTOL, ATOL = 2e-5, 2e-6
N = 512  # 4 batches of 128, 8 of 64: whole batches at every size


@pytest.fixture(scope="module")
def data():
    (x, y), _ = tfd.digits_arrays()
    return x[:N], y[:N]


def _model(strategy):
    import keras

    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input((8, 8, 1)), keras.layers.Flatten(),
                                  keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _same(a, b):
    assert len(a.weights) == len(b.weights)
    for i, (u, v) in enumerate(zip(a.get_weights(), b.get_weights())):
        np.testing.assert_allclose(u, v, rtol=RTOL, atol=ATOL, err_msg=f"weight {i}")


def test_how_many_steps_make_a_global_batch():
    assert [accumulation_steps(256, n, 64) for n in (4, 2, 1)] == [1, 2, 4]
    # The fewest steps that divide a replica's share and keep it within the limit.
    assert accumulation_steps(96, 1, 64) == 2 and accumulation_steps(96, 1, 40) == 3


def test_accumulated_steps_update_as_one_step_of_the_global_batch(data):
    x, y = data
    reference = _model(tfd.make_strategy("default"))
    tfd.fit(reference, x, y, batch_size=128, epochs=2, shuffle=False, verbose=0)
    model = _model(tfd.make_strategy("mirrored"))
    history = tfd.fit(model, x, y, batch_size=128, epochs=2, shuffle=False, verbose=0,
                      max_replica_batch=32)
    assert model.optimizer.gradient_accumulation_steps == 2  # 64 a replica: 2 steps of 32
    assert int(model.optimizer.iterations.numpy()) == 2 * N // 128  # updates, not steps
    _same(model, reference)
    assert len(history.history["loss"]) == 2


class _Preempted(Exception):
    pass


def test_a_job_that_resumes_on_fewer_replicas_keeps_its_updates(data, tmp_path):
    import keras

    x, y = data
    reference = _model(tfd.make_strategy("default"))
    tfd.fit(reference, x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)

    def stop_at_epoch_2(epoch, logs):
        if epoch == 1:
            raise _Preempted()

    # 2 replicas of 32: no accumulation; the backup of epoch 1 is kept when the job fails.
    first = _model(tfd.make_strategy("mirrored"))
    with pytest.raises(_Preempted):
        tfd.fit(first, x, y, batch_size=64, epochs=2, shuffle=False, verbose=0,
                max_replica_batch=32, backup_dir=tmp_path,
                callbacks=[keras.callbacks.LambdaCallback(on_epoch_begin=stop_at_epoch_2)])
    assert first.optimizer.gradient_accumulation_steps is None
    # One replica: 2 accumulated steps of 32 per update, from the backup of epoch 1.
    second = _model(tfd.make_strategy("default"))
    tfd.fit(second, x, y, batch_size=64, epochs=2, shuffle=False, verbose=0,
            max_replica_batch=32, backup_dir=tmp_path)
    assert second.optimizer.gradient_accumulation_steps == 2
    assert int(second.optimizer.iterations.numpy()) == 2 * N // 64
    _same(second, reference)


def test_what_it_refuses(data):
    x, y = data
    model = _model(tfd.make_strategy("default"))
    with pytest.raises(tfd.ArgumentTypeError, match="give batch_size too"):
        tfd.fit(model, x, y, epochs=1, verbose=0, max_replica_batch=32)
    with pytest.raises(tfd.TrainingError, match=r"save_freq=2 .* max_replica_batch"):
        tfd.fit(model, x, y, batch_size=64, epochs=1, verbose=0, max_replica_batch=32,
                backup_dir="unused", save_freq=2)
