"""``optimizer_follows_its_model``: an optimizer made outside the scope builds its slots for no
strategy.

Keras 3's TensorFlow optimizer records the strategy current when the optimizer object is made
(``TFOptimizer.__init__``) and makes and updates its slots (Adam's moments, RMSprop's
velocities) through that one. An optimizer made before ``with strategy.scope()``, or given to
``compile`` as an object made outside it (R: ``optimizer = optimizer_adam()`` is made when R
evaluates the argument), updates mirrored weights through TensorFlow's default strategy: "'Adam'
object has no attribute '_momentums'" at the first step (plain SGD happens to work). Legacy
tf.keras optimizers took the strategy they were first used under. So does the repair: an
optimizer made outside every scope takes the strategy it is built under (Keras builds it inside
the model's scope), and the variables it made with the object (its step count and learning
rate) are made again under that strategy, with their values: left plain, every replica would add
its own step to one count, and Adam's bias correction would run ahead, silently. One made inside
a scope and built inside another is a :class:`~tfdistributed.errors.PlacementError`.
"""

from __future__ import annotations

from ...errors import PlacementError
from .common import Repair, is_default, made_under, scope_name, source


def detect(trainer) -> bool:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    return "self._distribution_strategy = tf.distribute.get_strategy()" in source(
        TFOptimizer.__init__)


def take_build_strategy(optimizer) -> None:
    """Give the unbuilt ``optimizer`` the strategy it is being built under, if it was made
    outside every scope."""
    import tensorflow as tf

    made = optimizer._distribution_strategy
    current = tf.distribute.get_strategy()
    if optimizer.built or made is current:
        return
    if not is_default(made):
        raise PlacementError(
            f"The optimizer {optimizer.name!r} was made in {scope_name(made)} and is used in "
            f"{scope_name(current)}. Make the optimizer outside every scope, or inside the "
            f"model's.")
    if is_default(current):
        return
    optimizer._distribution_strategy = current
    for variable in optimizer.variables:  # the step count and learning rate made with it
        if made_under(variable) is not current:
            variable._initialize(variable._value.read_value())


def apply(trainer) -> None:
    from keras.src.backend.tensorflow.optimizer import TFOptimizer
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    own = TFOptimizer.__dict__.get("build")  # the TensorFlow optimizer's own, if it gets one

    def build(self, variables):
        take_build_strategy(self)
        if own is not None:
            return own(self, variables)
        # Looked up at each call: repairs applied later wrap BaseOptimizer.build (uneven_batches).
        return super(TFOptimizer, self).build(variables)

    build.__tfdistributed_original__ = own or BaseOptimizer.build
    build.__doc__ = BaseOptimizer.build.__doc__
    TFOptimizer.build = build


REPAIR = Repair(name="optimizer_follows_its_model", defect=__doc__, upstream=(), detect=detect,
                apply=apply)
