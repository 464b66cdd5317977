"""The Keras 3 x ``tf.distribute`` repairs, one module each, in the order they are applied.

Each module holds one repair whole: its docstring says what goes wrong in Keras and what the
repair does instead, ``detect(trainer)`` finds the defective code in the installed Keras or
TensorFlow (read with ``inspect``, so an upstream fix turns the repair off by itself), and
``apply(trainer)`` patches it; the module's ``REPAIR`` (a :class:`~.common.Repair`) declares
them together with the issues filed upstream and the repairs it builds on (``requires``) or
must wrap (``after``). :data:`ALL` lists them in order; :mod:`tfdistributed.training.compat`
applies, reports and switches them off. ``common`` holds the record and the helpers several share.

The order is checked (:func:`~.common.check_order`): ``compile_under_model_strategy`` compiles
under the strategy ``model_strategy_from_weights`` reads from the weights, ``clip_after_all_reduce``
wraps the all-reduce ``uneven_batches`` weights, ``logs_with_gradients`` needs both
``uneven_batches`` (whose all-reduce carries the logs) and ``reduce_per_replica`` (which then skips
them), ``assign_without_read`` wraps the assignment ``central_storage_metric_assign`` patches,
and ``gradient_accumulation`` wraps the optimizer step ``clip_after_all_reduce`` patched (and
weights by the shares ``uneven_batches`` counts).
"""

from __future__ import annotations

from . import (assign_without_read, atomic_assign_add, central_storage_metric_assign,
               central_storage_updates, clip_after_all_reduce, compile_under_model_strategy,
               collective_steps_per_execution, ema_overwrite, gradient_accumulation,
               logs_with_gradients, loss_scale_consensus, loss_scale_counter,
               model_strategy_from_weights, one_iterator_per_pass, optimizer_follows_its_model,
               reduce_per_replica, sharded_variable_updates, symbolic_build, uneven_batches)
from .common import Repair, check_order

ALL: tuple[Repair, ...] = (
    model_strategy_from_weights.REPAIR,
    compile_under_model_strategy.REPAIR,
    optimizer_follows_its_model.REPAIR,
    symbolic_build.REPAIR,
    reduce_per_replica.REPAIR,
    atomic_assign_add.REPAIR,
    central_storage_updates.REPAIR,
    central_storage_metric_assign.REPAIR,
    uneven_batches.REPAIR,
    sharded_variable_updates.REPAIR,
    clip_after_all_reduce.REPAIR,
    logs_with_gradients.REPAIR,
    assign_without_read.REPAIR,
    collective_steps_per_execution.REPAIR,
    gradient_accumulation.REPAIR,
    ema_overwrite.REPAIR,
    loss_scale_consensus.REPAIR,
    loss_scale_counter.REPAIR,
    one_iterator_per_pass.REPAIR,
)

check_order(ALL)

__all__ = ["ALL", "Repair", "check_order"]
