"""Models the tests train, kept here so that changing the demo (``tfdistributed.demo``) never
changes what a test proves.

Test files import it as ``models`` (pyproject's pytest ``pythonpath`` puts tests/python/support
on ``sys.path``); the chief and worker scripts under tests/python/scripts add that directory
themselves.
"""

LEARNING_RATE = 0.005


def digits_model(strategy, seed=1, learning_rate=LEARNING_RATE):
    """A small digits classifier (8x8x1 images, 10 logits), >= 0.9 accurate in seconds.

    Args:
        strategy: built and compiled in this strategy's scope.
        seed: Keras' global seed, set first (``None`` leaves it as it is).
        learning_rate: Adam's learning rate.

    Returns:
        The compiled ``keras.Sequential`` (sparse categorical cross-entropy on logits,
        accuracy).

    Example:
        >>> model = digits_model(tfd.make_strategy("mirrored"))    # doctest: +SKIP
    """
    import keras

    if seed is not None:
        keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = keras.Sequential([
            keras.layers.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    return model


def busy_digits_model(strategy, seed=1):
    """A digits classifier built the way Keras users build them: convolutions, batch
    normalisation, dropout, an L2 penalty, clipped Adam, a learning-rate schedule and several
    metrics (accuracy, top-3 accuracy, cross-entropy as a metric).

    Args:
        strategy: built and compiled in this strategy's scope.
        seed: Keras' global seed, set first.

    Returns:
        The compiled ``keras.Sequential``.
    """
    import keras

    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = keras.Sequential([
            keras.layers.Input((8, 8, 1)),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(32, activation="relu",
                               kernel_regularizer=keras.regularizers.L2(1e-4)),
            keras.layers.Dense(10),
        ])
        schedule = keras.optimizers.schedules.ExponentialDecay(0.01, 10, 0.9)
        model.compile(optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy",
                               keras.metrics.SparseTopKCategoricalAccuracy(3, name="top3"),
                               keras.metrics.SparseCategoricalCrossentropy(from_logits=True,
                                                                           name="xent")])
    return model
