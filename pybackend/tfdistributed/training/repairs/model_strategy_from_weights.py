"""``model_strategy_from_weights``: a model object made outside the scope forgets the strategy
its layers were made under.

Keras 3 records a model's strategy once, when the model object is made
(``TensorFlowTrainer.__init__``). ``keras.Sequential()`` (R: ``keras_model_sequential()``) made
before ``with strategy.scope()`` and given its layers inside has none, and ``fit``/``evaluate``/
``predict`` then run under whatever strategy is current at the call: outside the scope,
TensorFlow's default strategy over mirrored weights ("tuple indices must be integers or slices,
not MirroredVariable"), or metrics updated outside their replicas ("SyncOnReadVariable does not
support `assign_add` in cross-replica context", "Need to be inside `with strategy.scope()`").
Legacy tf.keras kept the strategy with the model; the R tutorials were written against it.

The repair reads the strategy from the model's own weights, as TensorFlow records in each
variable the strategy it was made under: the model trains under that one, wherever its object
was made and wherever it is called. Weights made under two strategies, or under a strategy other
than the model object's, or outside every scope while the model is used inside one, cannot
train together: that is a :class:`~tfdistributed.errors.PlacementError` naming the weights and
the scopes they were made in, instead of TensorFlow's error at the first step.
"""

from __future__ import annotations

from ...errors import PlacementError
from .common import Repair, is_default, made_under, scope_name, source

_HINTS = {"python": "E.g. with strategy.scope(): model = keras.Sequential([...])",
          "r": "E.g. with(strategy$scope(), { model <- keras_model_sequential() %>% ... })"}


def detect(trainer) -> bool:
    prop = trainer.TensorFlowTrainer.distribute_strategy
    return "self._distribute_strategy or tf.distribute.get_strategy()" in source(prop.fget)


def weights_strategy(model):
    """``(strategy, found)``: the one strategy ``model``'s weights were made under (None: outside
    every scope), and whether it has any weights yet.

    Raises:
        PlacementError: the weights were made under different strategies.
    """
    seen = {}
    for weight in model.weights:
        strategy = made_under(weight)
        seen.setdefault(id(strategy), (strategy, weight.path))
    if len(seen) > 1:
        made = "; ".join(f"{path} in {scope_name(s)}" for s, path in seen.values())
        raise PlacementError(
            f"The model's weights were made in different scopes ({made}), so no strategy can "
            f"train them together. Make every layer of the model inside one strategy's scope.",
            hints=_HINTS)
    return (next(iter(seen.values()))[0], True) if seen else (None, False)


def strategy_of(model):
    """The strategy ``model`` trains under: the one its weights were made under, else the one
    current when its object was made, else the current one (Keras' own rule)."""
    import tensorflow as tf

    made, found = weights_strategy(model)
    recorded = model._distribute_strategy
    if recorded is not None and found and made is not recorded:
        raise PlacementError(
            f"The model object was made in {scope_name(recorded)} but its weights in "
            f"{scope_name(made)}. Make the model and its layers inside the same scope.",
            hints=_HINTS)
    if recorded is None and found and made is not None:
        model._distribute_strategy = made  # kept, as Keras keeps the one it saw at __init__
        return made
    current = recorded or tf.distribute.get_strategy()
    if found and made is None and not is_default(current):
        raise PlacementError(
            f"The model's weights were made in no strategy scope, yet it is used inside "
            f"{scope_name(current)}: its weights cannot be replicated after they were made. Make "
            f"the model (its layers) inside the scope, or call it outside.", hints=_HINTS)
    return current


def apply(trainer) -> None:
    cls = trainer.TensorFlowTrainer
    original = cls.distribute_strategy

    def distribute_strategy(self):
        return strategy_of(self)

    distribute_strategy.__tfdistributed_original__ = original.fget
    cls.distribute_strategy = property(distribute_strategy, doc=original.__doc__)


REPAIR = Repair(name="model_strategy_from_weights", defect=__doc__, upstream=(), detect=detect,
                apply=apply)
