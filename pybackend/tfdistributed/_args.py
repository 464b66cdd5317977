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
        raise ArgumentTypeError(f"`{name}` must be an integer, got {type(value).__name__} {value!r}: "
                                f"{fix}.", hints=hints)
    value = int(value)
    if minimum is not None and value < minimum:
        raise ArgumentTypeError(f"`{name}` must be >= {minimum}, got {value}: pass {minimum} or more.")
    return value


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
