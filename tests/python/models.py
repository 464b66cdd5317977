"""Models the tests train, kept here so that changing the demo (``tfdistributed.demo``) never
changes what a test proves.

Test files import it as ``models`` (pytest puts tests/python on ``sys.path``); the chief and
worker scripts under tests/python/scripts add that directory themselves.
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
