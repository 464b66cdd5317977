"""Argument checks shared by every module: one wording for every type mistake."""

from __future__ import annotations

import numbers

from .errors import ArgumentTypeError


def as_int(value, name: str, *, minimum: int | None = None, allow_none: bool = False):
    """``value`` as a Python int, or an :class:`ArgumentTypeError` that names the fix.

    Floats are refused even when whole: from R, ``64`` is a double; the R package coerces whole
    doubles at its boundary, so a float that reaches here is a mistake worth naming.
    """
    if value is None:
        if allow_none:
            return None
        raise ArgumentTypeError(f"`{name}` is required: pass a whole number (for example {name}=2).")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and float(value).is_integer():
            fix = f"pass {int(value)} (an int), not {value!r}; from R write {int(value)}L"
        else:
            fix = "pass a whole number"
        raise ArgumentTypeError(f"`{name}` must be an integer, got {type(value).__name__} {value!r}: {fix}.")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ArgumentTypeError(f"`{name}` must be >= {minimum}, got {value}.")
    return value


def as_str(value, name: str, *, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise ArgumentTypeError(f"`{name}` must be a string, got {type(value).__name__} {value!r}.")
    return value
