"""Keras 3 x tf.distribute repairs, applied at their root, only where the defect is present.

Every patch tfdistributed makes to Keras is a repair, declared once as a
:class:`~tfdistributed.training.repairs.Repair` record (name, the defect and why the repair fixes
it, the issues filed upstream, how the defect is detected, how it is applied, and the repairs it
requires): the package :mod:`tfdistributed.training.repairs` holds them, one module each, in the
order they are applied, and this module applies, reports (:func:`status`) and switches them off.

They are installed as soon as Keras is imported in a process that has imported tfdistributed
(:func:`install`, run by ``import tfdistributed``; the R package runs it when Python starts), so
plain ``model.fit`` under a strategy the user built with ``tf.distribute`` directly is repaired
too, not only :func:`tfdistributed.fit`. The layers above may hand :func:`install` repairs of
their own, applied after these and reported and switched off the same way: training's routing
of ``model.fit``/``evaluate``/``predict`` (``strategy_aware_fit``,
:mod:`tfdistributed.training.routing`).

Each repair is gated on the Keras major version and on the defective code still being in the
installed Keras or TensorFlow (read with ``inspect``), so an upstream fix turns our patch off by
itself; a Keras or TensorFlow that lacks the code a detection reads (an older or newer release
within the supported ranges, without that internal) has not that defect in that form, and the
repair is skipped with the reason, never an error at import. A repair whose requirement is not
applied (switched off, or not needed) is skipped, and :func:`status` says why. ``apply()`` is
idempotent. Set ``TFDISTRIBUTED_DISABLE_COMPAT`` to ``all`` or a comma list of repair names to
switch repairs off (the tests use this to prove each defect is real).
"""

from __future__ import annotations

import os
import threading

from ..versions import after_import
from . import repairs
from .repairs.common import Repair, check_order
from .repairs import sharded_variable_updates
from .repairs.common import keras_trainer, original

_lock = threading.RLock()
_applied: dict[str, bool] = {}
_skipped: dict[str, str] = {}  # why a repair is not applied
_unreadable: dict[str, str] = {}  # what a detection could not read in the installed Keras
# Repairs of the layers above, handed to install() (training's routing of model.fit).
_above: tuple[Repair, ...] = ()


def records() -> tuple[Repair, ...]:
    """Every repair, in the order they are applied: the package's, then those of the layers
    above that :func:`install` was given."""
    return repairs.ALL + _above


def names() -> tuple[str, ...]:
    return tuple(r.name for r in records())


def __getattr__(name):
    if name == "REPAIRS":  # the repairs' names, in order (computed: install() may add some)
        return names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _disabled() -> set[str]:
    value = os.environ.get("TFDISTRIBUTED_DISABLE_COMPAT", "")
    names_ = {v.strip() for v in value.split(",") if v.strip()}
    return set(names()) if "all" in names_ else names_


def _record(name: str) -> Repair:
    for repair in records():
        if repair.name == name:
            return repair
    raise ValueError(f"unknown repair {name!r}; repairs are {names()}")


def _detect(repair: Repair, trainer) -> bool:
    """``repair.detect(trainer)``; False when the installed Keras or TensorFlow lacks the code
    the detection reads (an internal absent from that release: the defect is not there in
    that form), with what was missing kept for :func:`status`."""
    try:
        return bool(repair.detect(trainer))
    except (ImportError, AttributeError, OSError, TypeError) as e:
        _unreadable[repair.name] = f"{type(e).__name__}: {e}"
        return False


def defect_present(name: str) -> bool:
    """Whether the installed Keras still has the defect ``name`` (ignores our own patch)."""
    repair = _record(name)
    trainer = keras_trainer()
    return trainer is not None and _detect(repair, trainer)


def _why_not(repair: Repair, trainer, disabled: set[str]) -> str | None:
    """Why ``repair`` is not to be applied now, or None if it is."""
    if trainer is None:
        return "Keras 3 does not run on TensorFlow here"
    if repair.name in disabled:
        return "switched off by TFDISTRIBUTED_DISABLE_COMPAT"
    if not _detect(repair, trainer):
        if repair.name in _unreadable:
            return ("not needed: the installed Keras or TensorFlow lacks the code this repair "
                    f"reads ({_unreadable[repair.name]})")
        return "not needed: the installed Keras does not have the defect"
    missing = [r for r in repair.requires if not _applied.get(r)]
    if missing:
        return "; ".join(f"requires {r}, which is not applied ({_skipped.get(r, 'unknown')})"
                         for r in missing)
    return None


def apply() -> dict[str, bool]:
    """Apply every repair whose defect is present, which is not disabled and whose required
    repairs are applied, in order; idempotent. A repair with nothing global to patch
    (``apply=None``) is only marked as in effect.

    Returns ``{repair name: applied?}``.
    """
    with _lock:
        trainer = keras_trainer()
        disabled = _disabled()
        for repair in records():
            if _applied.get(repair.name):
                continue
            reason = _why_not(repair, trainer, disabled)
            if reason is None and repair.apply is not None:
                repair.apply(trainer)
            _applied[repair.name] = reason is None
            if reason is None:
                _skipped.pop(repair.name, None)
            else:
                _skipped[repair.name] = reason
        return dict(_applied)


def status() -> dict[str, dict]:
    """For each repair: is the defect in the installed Keras, and is our repair applied (with,
    when it is not, ``"skipped"``: why)."""
    result = {}
    for name in names():
        entry = {"defect_present": defect_present(name), "applied": bool(_applied.get(name))}
        if not entry["applied"]:
            entry["skipped"] = _skipped.get(name, "not applied yet")
        result[name] = entry
    return result


def update_shards_directly(optimizer) -> None:
    """Let ``optimizer`` update partitioned variables, if the ``sharded_variable_updates``
    repair is in effect (see :mod:`tfdistributed.training.repairs.sharded_variable_updates`)."""
    if apply().get("sharded_variable_updates"):
        sharded_variable_updates.update_shards_directly(optimizer)


def keras_method(model, name: str):
    """Keras' own ``fit``/``evaluate``/``predict`` of ``model``, bound, without our routing."""
    return original(getattr(type(model), name)).__get__(model)


def install(*above: Repair) -> None:
    """Have the repairs in place whenever Keras is used: now if Keras is loaded, else on import.

    Args:
        *above: repairs of a layer above this one (given by the layer that owns them, e.g.
            training's ``strategy_aware_fit``), applied after the package's, in the order
            given; one already known by its name is not added again.
    """
    global _above
    with _lock:
        new = tuple(r for r in above if r.name not in names())
        check_order(records() + new)
        _above += new
    # ``import tfdistributed`` must stay cheap (TensorFlow is imported lazily so TF_CONFIG and
    # logical devices can still be set after it), yet a user's own ``model.fit`` must meet
    # repaired Keras whichever of the two was imported first.
    after_import("keras", apply, ready="__version__")
