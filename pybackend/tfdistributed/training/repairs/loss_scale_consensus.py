"""``loss_scale_consensus``: a loss-scaling optimizer decides from one replica's gradients
whether the step's gradients are finite.

``LossScaleOptimizer`` skips a step whose gradients overflowed (and halves its scale). Under a
strategy it takes that decision in cross-replica context from ``check_finite`` of the *first*
replica's gradients, before they are all-reduced (its comment says they already were; in Keras
3 the all-reduce comes later, in the inner optimizer's update). So under ``mirrored`` a step
whose other replica overflowed is applied, and the all-reduced gradient brings the inf or NaN
into every weight, where one device, whose gradient is the sum, skips the step; and each worker
of a multi-worker job decides from its own replica: a worker that skips leaves the others
waiting in the update's all-reduce. Here each replica's ``check_finite`` is its gradients' and
every other replica's (one all-reduce of a flag), so all decide as one device does.
"""

from __future__ import annotations

from .common import Repair, source


def detect(trainer) -> bool:
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

    return "experimental_local_results(" in source(LossScaleOptimizer._tf_apply)


def apply(trainer) -> None:
    import tensorflow as tf
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

    check_finite = LossScaleOptimizer.check_finite

    def _check_finite(self, grads):
        finite = check_finite(self, grads)
        context = tf.distribute.get_replica_context()
        if (not tf.distribute.has_strategy() or context is None
                or context.num_replicas_in_sync == 1):
            return finite
        overflowed = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                        1.0 - tf.cast(finite, tf.float32))
        return tf.equal(overflowed, 0.0)

    _check_finite.__tfdistributed_original__ = check_finite
    LossScaleOptimizer.check_finite = _check_finite


REPAIR = Repair(name="loss_scale_consensus", defect=__doc__, upstream=(), detect=detect,
                apply=apply)
