"""R values in Keras' own calls: the one table of how an R value becomes what Keras takes.

R writes ``3`` for a double and ``"accuracy"`` for a length-1 character vector; reticulate hands
Keras ``3.0`` and ``"accuracy"``, and Keras fails on the first model an R user writes
("kernel_size must be a tuple of 2 integers. Received kernel_size=3.0", "Expected `metrics`
argument to be a list"). keras3's R wrappers (``layer_conv_2d()``, ``compile()``) convert such
values with ``as_integer()``, ``as_integer_tuple()``, ``normalize_shape()`` and ``as_axis()``
before calling Keras. The R package's ``keras`` object routes the calls it covers
(:func:`covers`) through :func:`call`, which converts by the rules of :data:`R_VALUE_RULES`,
keyed by Keras' argument names, and refuses what cannot be converted with the argument and the
Keras call named. Only calls from R come here: Python users' calls are untouched.

One deliberate difference from keras3 R: ``axis`` keeps Python's numbering (keras3's
``as_axis()`` subtracts 1 from a positive axis). Code written with ``keras$...`` follows Keras'
Python documentation, where ``axis = 1`` is the axis after the batch; shifting it would silently
compute over another axis.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from typing import NamedTuple

from .._args import KERAS_COUNT_ARGUMENTS
from ..errors import ArgumentTypeError

#: What R's NA_integer_ becomes through reticulate (R's integer NA is INT_MIN).
R_NA_INTEGER = -2147483648


class Rule(NamedTuple):
    """How one of Keras' arguments takes R values.

    ``kind``: ``"integer"`` (one whole number), ``"integers"`` (a whole number or a vector of
    them, e.g. ``kernel_size = c(3, 3)``; lists of vectors nest), ``"shape"`` (a vector, even of
    length 1, becomes a tuple; ``NA`` is an unknown dimension), ``"axis"`` (a whole number or a
    vector of them, any sign) or ``"list"`` (a single value becomes a list of one).
    ``minimum``: the smallest whole number allowed (``None``: any).
    """

    kind: str
    minimum: int | None = None


_SIZE, _COUNT = Rule("integer", 1), Rule("integer", 0)
_SIZES, _PADDING = Rule("integers", 1), Rule("integers", 0)

#: Keras' arguments that take R values, by name, with their rule. Every covered call (layers,
#: callbacks, optimizers, losses, metrics, ``keras.Input``, ``keras.Sequential``,
#: ``keras.Model``, ``model$compile()``) uses this one table; arguments not listed, and values
#: that are not R numbers or strings (Python objects, ``"same"``, ``"epoch"``), pass unchanged.
R_VALUE_RULES: dict[str, Rule] = {
    **{name: _SIZE for name in (
        "units", "filters", "output_dim", "input_dim", "num_heads", "key_dim", "value_dim",
        "n", "height", "width", "num_bins", "num_tokens", "max_tokens", "num_classes",
        "output_sequence_length", "depth_multiplier", "groups", "save_freq", "update_freq",
        "gradient_accumulation_steps", "ema_overwrite_frequency", "steps_per_execution",
        "k", "top_k", "num_thresholds")},
    **{name: _COUNT for name in (
        "patience", "cooldown", "verbose", "histogram_freq", "start_from_epoch",
        "num_oov_indices", "embeddings_freq")},
    **{name: _COUNT for name in KERAS_COUNT_ARGUMENTS},
    **{name: _SIZES for name in ("kernel_size", "pool_size", "strides", "dilation_rate", "size")},
    **{name: _PADDING for name in ("padding", "cropping", "output_padding", "profile_batch")},
    **{name: Rule("shape", 0) for name in ("shape", "input_shape", "batch_shape",
                                         "batch_input_shape", "noise_shape")},
    **{name: Rule("integers") for name in ("target_shape", "dims")},
    "axis": Rule("axis"),
    "seed": Rule("integer"),
    # tf.data's own methods called from R (ds$shuffle(2000), ds$batch(64 * workers)): what
    # tfdatasets' R wrappers convert for their users.
    **{name: _SIZE for name in ("buffer_size", "num_shards", "cycle_length", "block_length")},
    **{name: Rule("integer") for name in ("count", "index")},
    **{name: Rule("list") for name in ("metrics", "weighted_metrics", "loss_weights")},
}

#: The Keras modules whose callables take R values (every public callable of each), and the
#: covered callables of ``keras`` itself. Anything else reached through R's ``keras`` object
#: (``keras$ops``, ``keras$utils``, ``keras$datasets``...) is called untouched.
COVERED_MODULES = ("keras.layers", "keras.callbacks", "keras.optimizers", "keras.losses",
                   "keras.metrics", "keras.models", "keras.regularizers", "keras.initializers")
COVERED_TOP_LEVEL = ("Input", "Sequential", "Model")
#: A model's methods that take R values by these rules (``fit``, ``evaluate`` and ``predict``
#: take R data too, which the R package converts itself, with the counts of
#: ``KERAS_COUNT_ARGUMENTS``).
COVERED_MODEL_METHODS = ("compile",)
#: A ``tf.data.Dataset``'s methods that take R values by these rules (``batch_size``,
#: ``buffer_size``, ``count``...): what R code building a pipeline calls with R doubles.
COVERED_DATASET_METHODS = ("batch", "padded_batch", "shuffle", "repeat", "take", "skip",
                           "prefetch", "shard", "interleave", "rebatch")


def covers(path: str, name: str) -> bool:
    """Whether ``name`` of the Keras module at ``path``, as reached from R (``keras$layers$Conv2D``
    is ``covers("keras.layers", "Conv2D")``), takes R values.

    Example:
        >>> covers("keras.layers", "Conv2D"), covers("keras", "Input"), covers("keras.ops", "sum")
        (True, True, False)
    """
    if path == "keras":
        return name in COVERED_TOP_LEVEL
    return path in COVERED_MODULES


def _signature(fn):
    """``fn``'s signature; a class's or function's is kept (a model is built with the same few
    calls again and again), a bound method's is not (the cache would keep its model alive)."""
    if inspect.ismethod(fn):
        return _read_signature(fn)
    try:
        return _kept_signature(fn)
    except TypeError:  # unhashable
        return _read_signature(fn)


def _read_signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


_kept_signature = functools.lru_cache(maxsize=1024)(_read_signature)


def call(fn, /, *args, **kwargs):
    """``fn(*args, **kwargs)`` with the R values among the arguments converted by the rules.

    Positional arguments are converted by the names they bind to in ``fn``'s signature;
    arguments taken by ``**kwargs`` (``input_shape`` of a layer) by their own names. A call that
    does not bind goes to Keras as it is, for Keras' own message.

    Raises:
        ArgumentTypeError: a value that cannot be converted (``64.5``, ``-3`` for a size, a
            vector where one number is needed), naming the argument and the Keras call.

    Example:
        >>> import keras
        >>> call(keras.layers.Conv2D, 32.0, kernel_size=3.0).get_config()["kernel_size"]
        (3, 3)
    """
    # Only positional arguments need the signature (to be named); most R calls name theirs.
    signature = _signature(fn) if args else None
    if signature is None:
        return fn(*args, **{name: convert(name, value, fn) for name, value in kwargs.items()})
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        return fn(*args, **kwargs)
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            bound.arguments[name] = {key: convert(key, item, fn) for key, item in value.items()}
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            bound.arguments[name] = convert(name, value, fn)
    return fn(*bound.args, **bound.kwargs)


def convert(name: str, value, fn=None):
    """``value`` as Keras takes it for its argument ``name``, by :data:`R_VALUE_RULES`.

    Values of arguments without a rule, ``None`` and Python objects pass unchanged.

    Example:
        >>> convert("shape", [8.0, 8.0, 1.0]), convert("metrics", "accuracy")
        ((8, 8, 1), ['accuracy'])
    """
    rule = R_VALUE_RULES.get(name)
    if rule is None or value is None:
        return value
    where = _call_name(fn)
    if rule.kind == "list":
        return value if isinstance(value, (list, tuple, dict)) else [value]
    if rule.kind == "shape":
        if _is_number(value):
            value = [value]
        return _vector(value, name, where, rule.minimum, unknown=True)
    if isinstance(value, (list, tuple)):
        if rule.kind == "integer":
            raise _refusal(name, where, value, "a single whole number{bound}", rule.minimum)
        vector = _vector(value, name, where, rule.minimum, unknown=False)
        return list(vector) if rule.kind == "axis" else vector
    if _is_number(value):
        what = ("a single whole number{bound}" if rule.kind == "integer"
                else "a whole number{bound} or a vector of them")
        return _whole(value, name, where, rule.minimum, what)
    return value


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _whole(value, name, where, minimum, what):
    if (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())) \
            or value == R_NA_INTEGER or (minimum is not None and value < minimum):
        raise _refusal(name, where, value, what, minimum)
    return int(value)


def _vector(value, name, where, minimum, *, unknown: bool):
    """A list of R numbers (nested lists too) as a tuple of ints; with ``unknown``, NA and
    ``None`` are unknown dimensions (``None``). Anything else in it passes unchanged."""
    what = "whole numbers{bound} (NA for an unknown size)" if unknown else "whole numbers{bound}"
    if not isinstance(value, (list, tuple)):
        return value
    items = []
    for item in value:
        if isinstance(item, (list, tuple)):
            items.append(_vector(item, name, where, minimum, unknown=unknown))
        elif unknown and (item is None or item == R_NA_INTEGER
                          or (isinstance(item, float) and math.isnan(item))):
            items.append(None)
        elif _is_number(item):
            items.append(_whole(item, name, where, minimum, what))
        else:
            items.append(item)
    return tuple(items)


def _call_name(fn) -> str:
    if fn is None:
        return "Keras"
    paths = getattr(fn, "_api_export_path", None)
    if paths:  # Keras' public names, e.g. keras.Input and keras.layers.Input: the shortest
        return min(paths, key=len) if isinstance(paths, (list, tuple)) else str(paths)
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        return f"{type(owner).__name__}.{getattr(fn, '__name__', '')}()"
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', fn)}"


def _refusal(name, where, value, what, minimum) -> ArgumentTypeError:
    if isinstance(value, (list, tuple)):
        shown = f"a vector of length {len(value)}"
    elif value == R_NA_INTEGER or (isinstance(value, float) and math.isnan(value)):
        shown = "NA"
    else:  # as R prints it: 3, not 3.0
        shown = str(int(value)) if float(value).is_integer() else repr(value)
    what = what.format(bound=f" >= {minimum}" if minimum is not None else "")
    example = max(minimum or 0, 1)
    if isinstance(value, float) and math.isfinite(value):
        example = max(math.floor(value), example)
    return ArgumentTypeError(
        f"`{name}` of {where} must be {what}, got {shown}.",
        hints={"r": f"E.g. {name} = {example}.", "python": f"E.g. {name}={example}."})
