"""``logs_with_gradients``: a multi-worker train step's logs travel in its gradients'
all-reduce, one collective per step instead of two.

Not a defect but a cost: under multi-worker collectives a Keras train step makes two
all-reduces, one of the gradients and then one of its logs (loss and metric values), and
each is a round trip between the workers that the step waits for (the second is 8 bytes,
yet it cost 10-13% of the small bench CNN's step on 2 workers). Keras' own ``train_step``
updates the weights and then computes the metrics from the forward pass's predictions;
the metrics read nothing the update writes, so here they are computed first and their
scalars travel in the gradients' all-reduce: one collective per step. Same values bit for
bit (tested); only for Keras' own ``train_step`` and ``compute_metrics`` (a model that
overrides either keeps Keras' order), and a metric that reads the model's weights would
see them before the step's update.

Requires ``uneven_batches`` (whose all-reduce carries the logs,
:func:`~tfdistributed.training.repairs.uneven_batches.carried_in_all_reduce`) and
``reduce_per_replica`` (which then skips them,
:func:`~tfdistributed.training.repairs.reduce_per_replica.mark_reduced`); it wraps the train step
``uneven_batches`` patched.
"""

from __future__ import annotations

import threading

from .common import Repair, is_scalar_number, original, source
from .reduce_per_replica import mark_reduced
from .uneven_batches import carried_in_all_reduce, counting_examples

# While Keras' train step is traced in this (replica) thread: the optimizer whose
# apply_gradients calls are held back, and those calls. Per thread, since a worker with several
# devices traces one replica per thread at once.
_deferring = threading.local()


def detect(trainer) -> bool:
    step = source(trainer.TensorFlowTrainer.train_step)
    update, metrics = step.find(".apply_gradients("), step.find(".compute_metrics(")
    return 0 <= update < metrics


def apply(trainer) -> None:
    """The train step (``uneven_batches``') lets the logs ride where they can, and
    ``apply_gradients`` can be held back while a train step is traced."""
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    train_step = trainer.TensorFlowTrainer.train_step
    apply_gradients = BaseOptimizer.apply_gradients

    def _train_step(self, data):
        if _logs_can_ride(self, trainer):
            return _train_step_logs_riding(self, data, train_step)
        return train_step(self, data)

    def _apply_gradients(self, grads_and_vars):
        if getattr(_deferring, "optimizer", None) is self:
            _deferring.calls.append(list(grads_and_vars))
            return self._iterations  # as Keras returns
        return apply_gradients(self, grads_and_vars)

    _train_step.__tfdistributed_original__ = original(train_step)
    _apply_gradients.__tfdistributed_original__ = apply_gradients
    trainer.TensorFlowTrainer.train_step = _train_step
    BaseOptimizer.apply_gradients = _apply_gradients


def _logs_can_ride(model, trainer) -> bool:
    """Whether this train step's logs can travel in its gradient all-reduce.

    Only Keras' own ``train_step`` and ``compute_metrics`` (which read nothing the update
    writes) under multi-worker collectives, where the logs would otherwise cost an all-reduce
    of their own in every step. Not under XLA (``jit_compile``, Keras' default where there is a
    GPU): the step is then traced in a graph of its own, whose outputs ``reduce_per_replica``
    cannot recognise, and this machine has no GPU to test it on. Nor eagerly
    (``run_eagerly``): there are no graph tensors to mark, and no round trip to save. An
    optimizer that accumulates gradients (``gradient_accumulation``) all-reduces them once per
    update; the logs then travel in each step's all-reduce of the example counts.
    """
    stock = trainer.TensorFlowTrainer
    return (not model.jit_compile and not model.run_eagerly
            and original(type(model).train_step) is original(stock.train_step)
            and original(type(model).compute_metrics) is original(stock.compute_metrics)
            and model.optimizer is not None
            and trainer._collective_all_reduce_multi_worker(model.distribute_strategy))


def _train_step_logs_riding(model, data, train_step):
    """Keras' train step with the update after the metrics, the logs in the update's all-reduce.

    Keras updates the weights, then computes the metrics from the forward pass's predictions;
    the metrics read nothing the update writes, so computing them first gives the same values.
    Their scalars then go in the gradients' all-reduce: one collective per step, not two.
    """
    from keras.src import tree

    optimizer = model.optimizer
    deferred = []
    previous = getattr(_deferring, "calls", None), getattr(_deferring, "optimizer", None)
    _deferring.calls, _deferring.optimizer = deferred, optimizer
    try:
        logs = train_step(model, data)
    finally:
        _deferring.calls, _deferring.optimizer = previous
    if len(deferred) != 1:  # no trainable weights: nothing to ride
        for grads_and_vars in deferred:
            optimizer.apply_gradients(grads_and_vars)
        return logs
    flat = tree.flatten(logs)
    slots = [i for i, v in enumerate(flat) if is_scalar_number(v)]
    # The held-back update runs after the train step returned: its all-reduce is told this
    # replica's example count again, and carries the logs.
    with counting_examples(data), carried_in_all_reduce(flat[i] for i in slots) as means:
        optimizer.apply_gradients(deferred[0])
    if not means:
        return logs
    for position, value in means.items():
        flat[slots[position]] = value
    mark_reduced(means.values())
    return tree.pack_sequence_as(logs, flat)


REPAIR = Repair(name="logs_with_gradients", defect=__doc__, upstream=(), detect=detect,
                apply=apply, requires=("uneven_batches", "reduce_per_replica"))
