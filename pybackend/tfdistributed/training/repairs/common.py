"""What every repair is made of (:class:`Repair`), and the helpers several repairs share.

A repair reads the installed Keras' own source to decide whether its defect is still there
(:func:`source` reads through our patches, so the answer does not change once we patched), and
each patch records what it replaced as ``__tfdistributed_original__`` (:func:`original`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class Repair:
    """One patch tfdistributed makes to Keras 3 under ``tf.distribute``, declared in one place.

    Attributes:
        name: how :func:`tfdistributed.training.compat.status` and ``TFDISTRIBUTED_DISABLE_COMPAT``
            name it.
        defect: what goes wrong in Keras, and what the repair does instead (its module's
            docstring).
        upstream: the issues filed upstream (``"keras-team/keras#20585"``), if any.
        detect: ``detect(trainer)`` (Keras' ``backend.tensorflow.trainer`` module): whether the
            installed Keras or TensorFlow still has the defective code.
        apply: ``apply(trainer)`` patches Keras; ``None`` for a repair with nothing global to
            patch, applied on demand (its ``defect`` says by what) once :func:`apply` has found
            it in effect.
        requires: repairs this one builds on: it is applied only when they are, after them
            (otherwise it is skipped, and ``status()`` says why).
        after: repairs whose patches this one wraps when they are applied too: it comes after
            them in the order, but works without them.
    """

    name: str
    defect: str
    upstream: tuple[str, ...]
    detect: Callable[[Any], bool]
    apply: Optional[Callable[[Any], None]]
    requires: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


def check_order(repairs) -> None:
    """Raise ``ValueError`` unless every repair's ``requires`` and ``after`` name repairs that
    come before it in ``repairs`` (the order they are applied in)."""
    seen: set[str] = set()
    for repair in repairs:
        if repair.name in seen:
            raise ValueError(f"repair {repair.name!r} is declared twice")
        for needed in (*repair.requires, *repair.after):
            if needed not in seen:
                known = {r.name for r in repairs}
                where = "comes after it" if needed in known else "is not a repair"
                raise ValueError(f"repair {repair.name!r} must come after {needed!r}, which "
                                 f"{where}; the order is {[r.name for r in repairs]}")
        seen.add(repair.name)


def keras_trainer():
    """Keras' TensorFlow trainer module, or None unless Keras 3 runs on TensorFlow."""
    import keras

    if not keras.__version__.startswith("3.") or keras.backend.backend() != "tensorflow":
        return None
    from keras.src.backend.tensorflow import trainer

    return trainer


def in_a_replica_needing_merge_call() -> bool:
    """Whether this code runs in a replica of a strategy whose updates of distributed
    variables go through ``merge_call`` (every strategy but the default, XLA on GPUs aside),
    which TensorFlow forbids inside a branch of a ``cond`` (keras-team/keras#20582)."""
    import tensorflow as tf

    return (tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context() is False
            and not tf.__internal__.distribute.strategy_supports_no_merge_call())


def original(fn):
    """What ``fn`` replaced, if it is one of our patches (under every patch of ours wrapped
    around it: Keras' or TensorFlow's own), else ``fn``."""
    while hasattr(fn, "__tfdistributed_original__"):
        fn = fn.__tfdistributed_original__
    return fn


def source(obj) -> str:
    """The source of ``obj`` (a function, class or module) as the installed package has it."""
    return inspect.getsource(original(obj))


def dtype_of(value):
    """The dtype of a tensor or variable, of a distributed value's first component, or None."""
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    return getattr(value, "dtype", None)


def rank_of(value) -> int | None:
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    shape = getattr(value, "shape", None)
    return None if shape is None else shape.rank


def is_scalar_number(value) -> bool:
    """A rank-0 float or integer step output that is not a variable (it can be packed with
    others into one all-reduce)."""
    import keras
    import tensorflow as tf

    return (not isinstance(value, (keras.Variable, tf.Variable)) and rank_of(value) == 0
            and dtype_of(value) is not None and (dtype_of(value).is_floating
                                                 or dtype_of(value).is_integer))


def made_under(variable):
    """The strategy a Keras or TensorFlow variable was made under, or None (made outside every
    strategy scope). TensorFlow records it in each variable it makes inside a scope: mirrored,
    aggregating and sharded variables and the plain ones of one-device scopes alike."""
    value = getattr(variable, "_value", variable)
    shards = getattr(value, "_variables", None)  # a ShardedVariable: its shards know
    if shards and not hasattr(value, "_distribute_strategy"):
        value = shards[0]
    return getattr(value, "_distribute_strategy", None)


def scope_name(strategy) -> str:
    """How a placement message names ``strategy``: ``"the 'mirrored' strategy's scope"``, or
    ``"no strategy scope"`` for None and TensorFlow's default strategy."""
    from ...strategies.make import strategy_kind

    kind = "default" if strategy is None else strategy_kind(strategy)
    return "no strategy scope" if kind == "default" else f"the {kind!r} strategy's scope"


def is_default(strategy) -> bool:
    """Whether ``strategy`` is None or TensorFlow's default (no scope entered)."""
    return strategy is None or type(strategy).__name__ == "_DefaultDistributionStrategy"
