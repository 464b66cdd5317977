"""``compile_under_model_strategy``: ``compile`` called outside the scope makes the loss tracker
and the optimizer outside it.

Keras 3's ``compile`` makes its loss tracker (a ``Mean`` metric, whose variables exist at once)
and the optimizer named by a string (``optimizer = "adam"``) under whatever strategy is current.
Called after the ``with strategy.scope()`` block, as the R tutorials call ``model %>%
compile(...)``, the loss tracker belongs to no strategy: under ``mirrored`` and
``central_storage`` each replica adds its loss to one plain variable and ``fit`` reports a loss
that is not the model's, silently; the optimizer then fails at its first step ("'Adam' object has
no attribute '_momentums'"). Legacy tf.keras compiled under the model's strategy
(``with self.distribute_strategy.scope()``); so does the repair, with the strategy the model's
weights were made under (``model_strategy_from_weights``). Compiling a model of one strategy
inside another strategy's scope is a :class:`~tfdistributed.errors.PlacementError`.
"""

from __future__ import annotations

from ...errors import PlacementError
from .common import Repair, is_default, scope_name, source


def detect(trainer) -> bool:
    from keras.src.trainers.trainer import Trainer

    return "distribute_strategy" not in source(Trainer.compile)


def compile_scope(model):
    """The scope ``model.compile`` must run in: its strategy's, or None where it already runs
    there (or the model has none)."""
    import tensorflow as tf

    strategy = model.distribute_strategy
    current = tf.distribute.get_strategy()
    if strategy is current or is_default(strategy):
        return None
    if not is_default(current):
        raise PlacementError(
            f"compile() was called inside {scope_name(current)} for a model made in "
            f"{scope_name(strategy)}. Compile the model inside the scope it was made in, or "
            f"outside every scope.",
            hints={"python": "E.g. with strategy.scope(): model.compile(...)",
                   "r": "E.g. with(strategy$scope(), { model %>% compile(...) })"})
    return strategy.scope()


def apply(trainer) -> None:
    from keras.src.trainers.trainer import Trainer

    # Trainer's own: Keras compares a model's compile with it to tell a user's override.
    cls = Trainer
    original = cls.compile

    def compile(self, *args, **kwargs):
        scope = compile_scope(self)
        if scope is None:
            return original(self, *args, **kwargs)
        with scope:
            return original(self, *args, **kwargs)

    compile.__tfdistributed_original__ = original
    compile.__doc__ = original.__doc__
    compile.__wrapped__ = original
    cls.compile = compile


REPAIR = Repair(name="compile_under_model_strategy", defect=__doc__, upstream=(), detect=detect,
                apply=apply, requires=("model_strategy_from_weights",))
