"""Custom training loops under a strategy, with the loss scaled the way distribution needs.

Each replica sees ``global_batch / replicas`` examples. If each replica averaged its own loss,
the gradients summed across replicas would be ``replicas`` times too large; so the per-example
losses are summed and divided by the *global* batch size
(``tf.nn.compute_average_loss``), and regularization losses, which every replica adds once, are
divided by the number of replicas (``tf.nn.scale_regularization_loss``). With that, a step on 2
replicas gives the same loss and update as one device on the same global batch.

    step = make_train_step(model, loss_fn, optimizer, strategy, global_batch_size=64)
    for batch in strategy.experimental_distribute_dataset(dataset):
        loss = step(batch)          # already reduced over replicas: a scalar tensor
"""

from __future__ import annotations

from . import compat
from .._args import as_int
from ..errors import ArgumentTypeError


def _per_example_loss_fn(loss):
    """A loss that returns one value per example (``reduction=None``)."""
    import keras

    if isinstance(loss, str):
        loss = keras.losses.get(loss)
    if isinstance(loss, keras.losses.Loss):
        config = loss.get_config()
        config["reduction"] = None
        return type(loss).from_config(config)
    if callable(loss):
        return loss
    raise ArgumentTypeError(f"`loss` must be a Keras loss (object or name) or a function of "
                            f"(y_true, y_pred) returning per-example losses; got {loss!r}.")


def compute_loss(per_example_loss, global_batch_size, regularization_losses=(), sample_weight=None):
    """The replica's share of the global mean loss, plus its share of regularization.

    Args:
        per_example_loss: this replica's losses, one per example.
        global_batch_size: the examples of the step over all replicas (the divisor).
        regularization_losses: the model's regularization terms (``model.losses``); each
            replica adds them once, so they are divided by the replicas in sync.
        sample_weight: optional per-example weights.

    Returns:
        A scalar tensor: summed over the replicas, the global mean loss.

    Example:
        >>> compute_loss(tf.constant([1.0, 2.0, 3.0, 4.0]), 8)    # doctest: +SKIP
        <tf.Tensor: shape=(), dtype=float32, numpy=1.25>
    """
    import tensorflow as tf

    loss = tf.nn.compute_average_loss(per_example_loss, sample_weight=sample_weight,
                                      global_batch_size=global_batch_size)
    if regularization_losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(list(regularization_losses)))
    return loss


def make_train_step(model, loss, optimizer, strategy, global_batch_size):
    """A ``tf.function`` that runs one distributed training step and returns the global loss.

    Args:
        model: a Keras model built under ``strategy.scope()``.
        loss: a Keras loss (object or name; its reduction is replaced by per-example) or a
            function ``(y_true, y_pred)`` returning per-example losses.
        optimizer: a Keras optimizer created under ``strategy.scope()``.
        strategy: the ``tf.distribute.Strategy``.
        global_batch_size: the batch of one step over all replicas.

    Returns:
        ``step(batch)``: takes one element of ``strategy.experimental_distribute_dataset(...)``
        (``(x, y)``), updates the weights, returns the global mean loss (a scalar tensor).

    Raises:
        ArgumentTypeError: ``loss`` is not a loss, or ``global_batch_size`` not a whole number.

    Example:
        >>> step = make_train_step(model, "sparse_categorical_crossentropy", optimizer,
        ...                        strategy, global_batch_size=64)        # doctest: +SKIP
        >>> loss = step(next(iter(strategy.experimental_distribute_dataset(ds))))  # doctest: +SKIP
    """
    import tensorflow as tf

    compat.apply()
    global_batch_size = as_int(global_batch_size, "global_batch_size", minimum=1)
    per_example = _per_example_loss_fn(loss)
    # Slot variables (Adam's moments...) must exist before tracing: created lazily inside the
    # replicated step, they would be created per replica inside a conditional and fail.
    if not getattr(optimizer, "built", True):
        with strategy.scope():
            optimizer.build(model.trainable_variables)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            replica_loss = compute_loss(per_example(y, predictions), global_batch_size,
                                        model.losses)
        variables = model.trainable_variables
        gradients = tape.gradient(replica_loss, variables)
        optimizer.apply_gradients(zip(gradients, variables))
        return replica_loss

    return _summed_step(replica_step, strategy)


def _summed_step(replica_step, strategy):
    """``replica_step`` on every replica, its results summed: the global mean loss."""
    import tensorflow as tf

    @tf.function
    def step(batch):
        x, y = batch
        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return step


def make_eval_step(model, loss, strategy, global_batch_size):
    """Like :func:`make_train_step`, without the update: the global mean loss of a batch.

    Returns:
        ``step(batch)`` returning the global mean loss of one distributed batch.

    Example:
        >>> step = make_eval_step(model, loss, strategy, global_batch_size=64)    # doctest: +SKIP
    """
    compat.apply()
    global_batch_size = as_int(global_batch_size, "global_batch_size", minimum=1)
    per_example = _per_example_loss_fn(loss)

    def replica_step(x, y):
        return compute_loss(per_example(y, model(x, training=False)), global_batch_size)

    return _summed_step(replica_step, strategy)


def train_loop(model, dataset, *, loss, optimizer, strategy, global_batch_size, epochs=1):
    """Run :func:`make_train_step` over ``dataset`` for ``epochs``.

    Args:
        model, loss, optimizer, strategy, global_batch_size: as :func:`make_train_step`.
        dataset: a ``tf.data.Dataset`` of ``(x, y)`` batches of ``global_batch_size`` (drop the
            remainder, or the last batch is averaged over fewer examples than the divisor
            assumes).
        epochs: passes over ``dataset``.

    Returns:
        The mean loss of each epoch, as a list of floats.

    Example:
        >>> train_loop(model, ds, loss="sparse_categorical_crossentropy", optimizer=optimizer,
        ...            strategy=strategy, global_batch_size=64, epochs=3)   # doctest: +SKIP
        [1.9, 1.2, 0.8]
    """
    epochs = as_int(epochs, "epochs", minimum=1)
    step = make_train_step(model, loss, optimizer, strategy, global_batch_size)
    distributed = strategy.experimental_distribute_dataset(dataset)
    history = []
    for _ in range(epochs):
        total, steps = 0.0, 0
        for batch in distributed:
            total += float(step(batch))
            steps += 1
        history.append(total / max(steps, 1))
    return history
