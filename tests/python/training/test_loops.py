"""Custom training loops: global-batch loss scaling makes 2 replicas match one device."""

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed.training import loops


def _run(strategy_name, x, y, *, regularize=False, epochs=2, optimizer="sgd"):
    import keras
    import tensorflow as tf

    strategy = tfd.make_strategy(strategy_name)
    keras.utils.set_random_seed(7)
    reg = keras.regularizers.L2(1e-3) if regularize else None
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input((8, 8, 1)), keras.layers.Flatten(),
                                  keras.layers.Dense(32, activation="relu", kernel_regularizer=reg),
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.get({"class_name": optimizer, "config": {"learning_rate": 0.05}})
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=True)
    losses = loops.train_loop(model, dataset, strategy=strategy, global_batch_size=64,
                              epochs=epochs, optimizer=optimizer,
                              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return losses, [np.asarray(w) for w in model.get_weights()]


@pytest.mark.parametrize("regularize,optimizer", [(False, "sgd"), (True, "sgd"), (True, "adam")])
def test_two_replicas_match_one_device(digits, regularize, optimizer):
    (x, y), _ = digits
    x, y = x[:640], y[:640]
    one_losses, one_weights = _run("one_device", x, y, regularize=regularize, optimizer=optimizer)
    two_losses, two_weights = _run("mirrored", x, y, regularize=regularize, optimizer=optimizer)
    assert tfd.make_strategy("mirrored").num_replicas_in_sync == 2
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    assert len(two_weights) == len(one_weights) == 4  # zip() alone passes on empty lists
    for a, b in zip(two_weights, one_weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert two_losses[1] < two_losses[0]


def test_unscaled_loss_would_not_match(digits):
    """The point of the scaling: averaging per replica instead is off by the replica count."""
    import tensorflow as tf

    per_example = tf.constant([1.0, 2.0, 3.0, 4.0])
    # One replica's half of a global batch of 8 contributes sum/8, not mean.
    assert float(loops.compute_loss(per_example, 8)) == pytest.approx(10 / 8)
    assert float(tf.reduce_mean(per_example)) == pytest.approx(10 / 4)


def test_bad_loss():
    with pytest.raises(tfd.ArgumentTypeError, match="Keras loss"):
        loops._per_example_loss_fn(42)
