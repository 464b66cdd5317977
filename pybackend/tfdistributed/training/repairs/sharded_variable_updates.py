"""``sharded_variable_updates``: Keras' optimizer cannot update a variable partitioned over
parameter servers.

Keras routes every optimizer update through ``strategy.extended.update``, which colocates it
with the variable; a variable split over parameter servers by a partitioner
(``ShardedVariable``) has no single place and fails ("doesn't support being used as a
reference"). :func:`update_shards_directly` makes one optimizer update such variables through
their own ``assign``/``assign_sub``, which write each shard on its ps task.

Nothing global is patched (the record's ``apply`` is None): the parameter-server trainer
applies it, on demand, to the optimizer of a model with partitioned variables, through
:func:`tfdistributed.training.compat.update_shards_directly`, once this repair is in effect (the
defect present and the repair not switched off).
"""

from __future__ import annotations

from .common import Repair, source


def detect(trainer) -> bool:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    return "extended.update" in source(TFOptimizer._distributed_tf_update_step)


def update_shards_directly(optimizer) -> None:
    """Let ``optimizer`` update partitioned variables: each ``ShardedVariable`` is updated
    through its own ``assign``/``assign_sub`` (which write each shard on its ps task), every
    other variable as Keras does. Idempotent."""
    import tensorflow as tf

    distributed_update = optimizer._distributed_tf_update_step
    if getattr(distributed_update, "updates_shards_directly", False):
        return

    def update(distribution, grads_and_vars, learning_rate):
        whole = []
        for grad, var in grads_and_vars:
            if isinstance(var, tf.__internal__.distribute.ShardedVariable):
                optimizer.update_step(grad, var, learning_rate)
            else:
                whole.append((grad, var))
        distributed_update(distribution, whole, learning_rate)

    update.updates_shards_directly = True
    optimizer._distributed_tf_update_step = update


REPAIR = Repair(name="sharded_variable_updates", defect=__doc__, upstream=(), detect=detect,
                apply=None)
