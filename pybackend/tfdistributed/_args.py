"""Argument checks shared by every module: one wording for every type mistake."""

from __future__ import annotations

import numbers

from .errors import ArgumentTypeError


def as_int(value, name: str, *, minimum: int | None = None, allow_none: bool = False):
    """``value`` as a Python int, or an :class:`ArgumentTypeError` that names the fix.

    Floats are refused, even whole ones such as ``64.0``: a float where a count is needed is
    usually a computed value worth a look (``n / 2``), and the fix is to pass an int. (The R
    package turns R's whole doubles, such as ``64``, into integers before they get here.) A
    TF_CONFIG is different: JSON written by other tools may say ``"index": 1.0``, which
    :mod:`tfdistributed.cluster` accepts, as TensorFlow does.

    Raises:
        ArgumentTypeError: ``value`` is missing, not an integer, or below ``minimum``.

    Example:
        >>> as_int(64, "batch_size", minimum=1)
        64
    """
    if value is None:
        if allow_none:
            return None
        raise ArgumentTypeError(f"`{name}` is required: pass a whole number.",
                                hints={"python": f"E.g. {name}=2.", "r": f"E.g. {name} = 2."})
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        hints = None
        if isinstance(value, numbers.Real) and float(value).is_integer():
            fix = f"pass {int(value)} as an integer"
            hints = {"python": f"E.g. {name}={int(value)}, not {value!r}.",
                     "r": f"E.g. {name} = {int(value)}L."}
        else:
            fix = "pass a whole number"
        raise ArgumentTypeError(f"`{name}` must be an integer, got {type(value).__name__} "
                                f"{value!r}: {fix}.", hints=hints)
    value = int(value)
    if minimum is not None and value < minimum:
        raise ArgumentTypeError(
            f"`{name}` must be >= {minimum}, got {value}: pass {minimum} or more.")
    return value


def as_seconds(value, name: str, *, minimum: float = 0.0) -> float:
    """``value`` as a number of seconds (an int or a float, at least ``minimum``), or an
    :class:`ArgumentTypeError` that names the fix."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= minimum:
        raise ArgumentTypeError(f"`{name}` must be a number of seconds of at least {minimum:g}, "
                                f"got {value!r}.")
    return float(value)


def as_str(value, name: str, *, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise ArgumentTypeError(f"`{name}` must be a string, got {type(value).__name__} {value!r}.")
    return value


VERBOSE_LEVELS = ("auto", 0, 1, 2)


def as_verbose(value):
    """Keras' ``verbose``: ``"auto"``, 0 (silent), 1 (progress bar) or 2 (one line per epoch).

    Raises:
        ArgumentTypeError: any other value, naming the valid ones.

    Example:
        >>> as_verbose(2)
        2
    """
    if isinstance(value, str) and value == "auto":
        return value
    if isinstance(value, bool) or value not in VERBOSE_LEVELS or isinstance(value, float):
        raise ArgumentTypeError(f'`verbose` must be "auto", 0, 1 or 2, got {value!r}.')
    return int(value)


#: Keras' fit/evaluate/predict arguments that count (steps, examples, epochs): a float reaches a
#: TensorFlow op or `range()` and fails there ("Expected int32 passed to parameter 'size' of op
#: 'Slice'"). The R package converts R doubles to integers for exactly these.
KERAS_COUNT_ARGUMENTS = ("batch_size", "epochs", "steps_per_epoch", "validation_steps",
                "validation_batch_size", "validation_freq", "initial_epoch", "steps")
# Keras' arguments that hold data: a Python list of numbers there is refused by Keras with
# "Unrecognized data type" and a page of the numbers (or an IndexError, for `y`).
KERAS_DATA = ("x", "y", "sample_weight")


def check_keras_call(method, model, args, kwargs) -> None:
    """Refuse, with the fix, what Keras' ``fit``/``evaluate``/``predict`` would fail on deep inside.

    ``method`` is Keras' own (unpatched) method; ``args``/``kwargs`` are bound to its signature,
    so positional arguments are checked by their names too. Whole floats where Keras counts
    (``batch_size=64.0``) and plain lists of numbers where it takes arrays are refused: Keras
    would fail on both with an error that names neither the argument nor the fix. Values Keras
    accepts pass unchanged. (The R package converts R's doubles and vectors before they get
    here, so an R user meets these messages only for a value R could not convert.)

    Raises:
        ArgumentTypeError: a count that is not an integer, or data given as a list of numbers.

    Example:
        >>> check_keras_call(keras.Model.fit, model, (x, y), {"batch_size": 64})  # doctest: +SKIP
    """
    import inspect

    try:
        bound = inspect.signature(method).bind(model, *args, **kwargs).arguments
    except TypeError:
        return  # a wrong call: Keras' own message says which argument
    for name in KERAS_COUNT_ARGUMENTS:
        if bound.get(name) is not None:
            as_int(bound[name], name)
    data = {name: bound.get(name) for name in KERAS_DATA}
    validation = bound.get("validation_data")
    if isinstance(validation, (tuple, list)):
        data.update({f"validation_data[{i}]": part for i, part in enumerate(validation)})
    for name, value in data.items():
        if _numbers_in_a_list(value):
            raise ArgumentTypeError(
                f"`{name}` is a {type(value).__name__} of numbers, which Keras does not take as "
                f"data: pass an array.",
                hints={"python": f"E.g. np.asarray({name}).",
                       "r": "Pass an R vector, matrix or array (tfdistributed converts it)."})


def _numbers_in_a_list(value) -> bool:
    import numpy as np

    if not isinstance(value, (list, tuple)) or not value:
        return False
    first = value[0]
    while isinstance(first, (list, tuple)) and first:
        first = first[0]
    return isinstance(first, (numbers.Number, np.generic))
