"""The training entry points, looked up by name.

:mod:`tfdistributed.training` imports the modules below it (``compat``, ``strategies``, ``data``,
``ps``...). Some of those must call back into it: the ``strategy_aware_fit`` repair routes a
plain ``model.fit`` under a parameter-server strategy to ``training.fit_from_keras``, and an R
generator's training thread runs ``training.fit``. Importing ``training`` from there would make
an import cycle; instead ``training`` registers its entry points here when it is imported
(``import tfdistributed`` imports it), and they are looked up by name with :func:`entry`. This
module imports nothing.
"""

from __future__ import annotations

from typing import Callable

_ENTRY_POINTS: dict[str, Callable] = {}


def register(**entry_points: Callable) -> None:
    """Make each ``name=function`` available to :func:`entry` (a later registration wins)."""
    _ENTRY_POINTS.update(entry_points)


def entry(name: str) -> Callable:
    """The entry point registered as ``name`` (``"fit"``, ``"evaluate"``, ``"predict"``,
    ``"fit_from_keras"``, ``"evaluate_from_keras"``, ``"predict_from_keras"``).

    Raises:
        LookupError: nothing registered under ``name`` (``tfdistributed`` was not imported, or
            the name is misspelt).

    Example:
        >>> entry("fit")(model, x, y, epochs=2)    # doctest: +SKIP
    """
    try:
        return _ENTRY_POINTS[name]
    except KeyError:
        raise LookupError(f"No tfdistributed entry point {name!r} is registered (registered: "
                          f"{sorted(_ENTRY_POINTS)}); import tfdistributed first.") from None
