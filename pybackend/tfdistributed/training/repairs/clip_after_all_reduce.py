"""``clip_after_all_reduce``: Keras clips each replica's gradients before summing them.

Keras clips gradients (``clipnorm``, ``clipvalue``, ``global_clipnorm``) in each replica
*before* summing them over the replicas, so with 2 or more replicas the update is not the one
a single device makes from the same global batch (each replica's share is clipped on its
own). The sum over replicas is taken first here, then clipped, as on one device.

It calls the optimizer's all-reduce as it finds it, so it comes after ``uneven_batches``, whose
weighted all-reduce it then uses (and works without it).
"""

from __future__ import annotations

from .common import Repair, source


def detect(trainer) -> bool:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    clip_first = source(TFOptimizer._backend_apply_gradients).find("_clip_gradients")
    reduce_later = "_all_reduce_sum_gradients" in source(TFOptimizer._backend_update_step)
    return clip_first >= 0 and reduce_later


def apply(trainer) -> None:
    import tensorflow as tf
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    apply_gradients = TFOptimizer._backend_apply_gradients
    all_reduce = TFOptimizer._all_reduce_sum_gradients

    def _backend_apply_gradients(self, grads, trainable_variables):
        context = tf.distribute.get_replica_context()
        clips = any(getattr(self, k, None) is not None
                    for k in ("clipnorm", "clipvalue", "global_clipnorm"))
        if (not clips or context is None or context.num_replicas_in_sync == 1
                or self.gradient_accumulation_steps):
            return apply_gradients(self, grads, trainable_variables)
        reduced = all_reduce(self, list(zip(grads, trainable_variables)))
        self._tfd_gradients_reduced = True
        try:
            return apply_gradients(self, [g for g, _ in reduced], trainable_variables)
        finally:
            self._tfd_gradients_reduced = False

    def _all_reduce_sum_gradients(self, grads_and_vars):
        if getattr(self, "_tfd_gradients_reduced", False):
            return list(grads_and_vars)
        return all_reduce(self, grads_and_vars)

    _backend_apply_gradients.__tfdistributed_original__ = apply_gradients
    _all_reduce_sum_gradients.__tfdistributed_original__ = all_reduce
    TFOptimizer._backend_apply_gradients = _backend_apply_gradients
    TFOptimizer._all_reduce_sum_gradients = _all_reduce_sum_gradients


REPAIR = Repair(name="clip_after_all_reduce", defect=__doc__, upstream=(), detect=detect,
                apply=apply, after=("uneven_batches",))
