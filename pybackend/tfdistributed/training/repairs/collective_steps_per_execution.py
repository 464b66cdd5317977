"""``collective_steps_per_execution``: Keras' loop of ``steps_per_execution`` steps cannot
run where the replicas all-reduce with collective operations.

Keras runs ``steps_per_execution`` > 1 as a ``tf.while_loop`` that reads each batch as an
optional and calls the step inside a ``tf.cond``; with collective all-reduces in the step
TensorFlow cannot run that graph ("You must feed a value for placeholder tensor
'while/.../cond/Placeholder'", keras-team/keras#19246), so such a model could not train on
several workers at all, nor under a ``MirroredStrategy`` of several devices built with
TensorFlow's default all-reduce (collective operations on CPUs; ``make_strategy("mirrored")``
reduces on one device there and never met it). There the block's steps are chained in one
function instead, each reading its batch with ``get_next`` (where the data ends inside a
block, the steps before have run and Keras ends the epoch, as it does on one device), every
op of a step waiting for that step's batch, and the step's outputs (loss, metrics) are
reduced once, after the block's last step (with ``logs_with_gradients`` on, each step's logs
already travel in its gradients' all-reduce and the block adds none). A last, shorter block is
in the epoch's results but gets no batch-end callback (one device gives it one). An input with
fewer batches than one block ends before Keras has any logs; that is refused with the fix.
"""

from __future__ import annotations

from ...errors import TrainingError
from .common import Repair, source


def detect(trainer) -> bool:
    step_loop = source(trainer.TensorFlowTrainer._make_function)
    return "tf.while_loop" in step_loop and "get_next_as_optional" in step_loop


def apply(trainer) -> None:
    original = trainer.TensorFlowTrainer._make_function

    def _make_function(self, step_function):
        if (self.steps_per_execution > 1 and not self.run_eagerly
                and _all_reduces_with_collectives(self.distribute_strategy, trainer)):
            return _chained_steps(self, step_function, trainer)
        return original(self, step_function)

    _make_function.__tfdistributed_original__ = original
    trainer.TensorFlowTrainer._make_function = _make_function


def _all_reduces_with_collectives(strategy, trainer) -> bool:
    """Several workers, or a MirroredStrategy of several devices on collective all-reduces."""
    import tensorflow as tf
    from tensorflow.python.distribute import cross_device_ops

    if trainer._collective_all_reduce_multi_worker(strategy):
        return True
    return (type(strategy) is tf.distribute.MirroredStrategy
            and strategy.num_replicas_in_sync > 1
            and isinstance(getattr(strategy.extended, "_cross_device_ops", None),
                           cross_device_ops.CollectiveAllReduce))


def _chained_steps(model, step_function, trainer):
    """Keras' train/test function for ``steps_per_execution`` > 1 over collectives: the
    block's steps one after the other in one ``tf.function``, the logs reduced after the last."""
    import tensorflow as tf

    strategy = model.distribute_strategy

    def on_its_batch(data):
        # Every op of a step waits for the step's batch. Ops that read no data (the optimizer's
        # step counter, which Adam's bias correction reads) would otherwise run while the
        # batch's get_next is still finding out that the data has ended: the counter then
        # counts a step that never ran. merge_call carries these dependencies into the updates.
        with tf.control_dependencies(tf.nest.flatten(data, expand_composites=True)):
            return step_function(data)

    def one_step(data):
        return strategy.run(on_its_batch, args=(data,))

    if model.jit_compile:  # one compiled op: it starts once all its inputs are there
        one_step = tf.function(one_step, reduce_retracing=True, jit_compile=True)

    @tf.autograph.experimental.do_not_convert
    def block(iterator):
        outputs = one_step(iterator.get_next())
        for _ in range(model.steps_per_execution - 1):
            outputs = one_step(iterator.get_next())
        return trainer.reduce_per_replica(outputs, strategy, reduction="auto")

    block = tf.function(block, reduce_retracing=True)

    def function(iterator):
        try:
            outputs = block(iterator)
        except tf.errors.OutOfRangeError:
            if getattr(iterator, "_tfdistributed_blocks_run", 0):
                raise  # the end of the data: Keras ends the epoch
            raise _data_shorter_than_a_block(model) from None
        iterator._tfdistributed_blocks_run = getattr(iterator, "_tfdistributed_blocks_run", 0) + 1
        return outputs

    return function


def _data_shorter_than_a_block(model) -> TrainingError:
    return TrainingError(
        f"The data ended inside the first block of {model.steps_per_execution} steps "
        f"(steps_per_execution={model.steps_per_execution}): one pass over it has fewer "
        f"batches than that, and on several workers Keras has no result for such a "
        f"block. Compile the model with a steps_per_execution of at most the number of "
        f"batches, or use a smaller batch size.",
        hints={"r": "E.g. model$compile(..., steps_per_execution = 2L) inside "
                    "with(strategy$scope(), { ... })."})


REPAIR = Repair(name="collective_steps_per_execution", defect=__doc__,
                upstream=("keras-team/keras#19246",), detect=detect, apply=apply)
