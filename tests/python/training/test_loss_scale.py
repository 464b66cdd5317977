"""A loss-scaling optimizer skips a step whose gradients overflowed as one device does, whichever
replica they overflowed on (the ``loss_scale_consensus`` repair), in this process's 2 logical
CPUs. One batch of 4 examples: the 2 that replica 1 gets have inputs of 1e30, whose squared
error overflows float32; replica 0's 2 are ordinary. One device sees the overflow in the
batch's gradient, skips the step and halves its scale."""

from __future__ import annotations

import numpy as np

import tfdistributed as tfd


def _train(strategy):
    import keras

    keras.utils.set_random_seed(5)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
                      loss="mse")
    before = model.get_weights()
    x = np.ones((4, 2), "float32")
    x[2:] = 1e30
    model.fit(x, np.zeros((4, 1), "float32"), batch_size=4, epochs=1, shuffle=False, verbose=0)
    return before, model.get_weights(), float(model.optimizer.dynamic_scale.numpy())


def test_a_step_that_overflowed_on_one_replica_is_skipped_as_on_one_device(monkeypatch):
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

    before, after, scale = _train(tfd.make_strategy("default"))
    assert all(np.array_equal(a, b) for a, b in zip(before, after))  # skipped
    before, after, mirrored_scale = _train(tfd.make_strategy("mirrored"))
    assert all(np.array_equal(a, b) for a, b in zip(before, after)) and mirrored_scale == scale
    # Keras' own decision reads replica 0's gradients only: the step is applied, and the
    # all-reduced gradient brings the overflow into the weights.
    monkeypatch.setattr(LossScaleOptimizer, "check_finite",
                        LossScaleOptimizer.check_finite.__tfdistributed_original__)
    _, after, _ = _train(tfd.make_strategy("mirrored"))
    assert not all(np.isfinite(a).all() for a in after)
