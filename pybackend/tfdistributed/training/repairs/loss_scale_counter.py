"""``loss_scale_counter``: a loss-scaling optimizer cannot train under ``central_storage``.

After a step with finite gradients, ``LossScaleOptimizer`` counts it, and every
``dynamic_growth_steps`` doubles its scale, with an ``ops.cond`` in each replica whose branches
assign its counter and scale. Under ``CentralStorageStrategy`` those are aggregated variables,
whose assignment from a replica needs ``merge_call``, which TensorFlow forbids inside a branch:
the optimizer failed at its first step with "`merge_call` called while defining a new graph or
a tf.function" (the defect of ``gradient_accumulation``, keras-team/keras#20582; under
``mirrored`` each replica writes its own copy and never met it). Here the branch is chosen by
value (``where``), the same counter and scale assigned without a ``cond``.
"""

from __future__ import annotations

from .common import Repair, in_a_replica_needing_merge_call, source


def detect(trainer) -> bool:
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

    step = source(LossScaleOptimizer._stateful_handle_finite_grads)
    return "ops.cond(" in step and "step_counter" in step


def apply(trainer) -> None:
    from keras.src import ops
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

    handle_finite = LossScaleOptimizer._stateful_handle_finite_grads

    def _stateful_handle_finite_grads(self, grads, trainable_variables):
        if not in_a_replica_needing_merge_call():
            return handle_finite(self, grads, trainable_variables)
        scale = self.dynamic_scale
        weights = trainable_variables or self._trainable_variables
        unscaled = [g if g is None or self._overwrite_variable_with_gradient(v)
                    else ops.divide(g, scale) for g, v in zip(grads, weights)]
        self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)
        # Keras' cond: upscale (counter 0, scale x 2) or increment (counter + 1), by value.
        grow = ops.equal(self.step_counter, self.dynamic_growth_steps - 1)
        self.step_counter.assign(ops.where(grow, ops.zeros_like(self.step_counter),
                                           self.step_counter + 1))
        self.dynamic_scale.assign(ops.where(grow, ops.multiply(self.dynamic_scale, 2.0),
                                            self.dynamic_scale))

    _stateful_handle_finite_grads.__tfdistributed_original__ = handle_finite
    LossScaleOptimizer._stateful_handle_finite_grads = _stateful_handle_finite_grads


REPAIR = Repair(name="loss_scale_counter", defect=__doc__, upstream=("keras-team/keras#20582",),
                detect=detect, apply=apply)
