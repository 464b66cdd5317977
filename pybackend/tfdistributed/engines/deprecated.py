"""``launch()``'s keyword arguments of before the option objects (:mod:`.options`), kept working
for one release: each is folded into the object that holds it now, and the call warns with the
new spelling (``launch(..., max_restarts=2)``: "use restarts=tfd.Restarts(max_restarts=2)").

R's ``launch_cluster()`` keeps its old arguments the same way, with R's spelling: it asks
:func:`regroup` where each one went and builds the objects with its own constructors. Delete
this module, and its uses in :mod:`.launch` and ``rpkg/R/launch.R``, in the release after.
"""

from __future__ import annotations

import dataclasses

from ..errors import ArgumentTypeError, did_you_mean
from .options import ENGINE_OPTIONS as ENGINE_CLASSES, Restarts, Watch

__all__ = ["regroup", "upgrade"]

_GROUPS = {"restarts": Restarts, "watch": Watch}
# Old name -> (the object that holds it now, its field there).
_MOVED = {"max_restarts": ("restarts", "max_restarts"),
          "max_failures": ("restarts", "max_restarts"),  # Ray Train's name, once a Ray option
          "min_workers": ("restarts", "min_workers"),
          "join_timeout": ("restarts", "join_timeout"),
          "grace": ("restarts", "grace"),
          **{f.name: ("watch", f.name) for f in dataclasses.fields(Watch)}}
_PYTHON_NAMES = {"engine": "tfd.engines.{}", "restarts": "tfd.Restarts", "watch": "tfd.Watch"}


def _engine_named(backend) -> str:
    if backend is None:
        return "local"
    if not isinstance(backend, str) or backend not in ENGINE_CLASSES:
        raise ArgumentTypeError(f"`backend` must be 'local', 'slurm' or 'ray', got {backend!r}."
                                f"{did_you_mean(str(backend), tuple(ENGINE_CLASSES))}")
    return backend


def _engine_fields(cls) -> set:
    return {f.name for f in dataclasses.fields(cls)}


def regroup(names, backend=None) -> dict:
    """Where each of ``names``, old keyword arguments of ``launch()``, lives now.

    Args:
        names: the old keyword arguments given (``"backend"`` among them, or not).
        backend: the value of the old ``backend`` argument (``"local"`` when None).

    Returns:
        ``{"engine": "slurm", "engine_fields": {old: field}, "restarts": {old: field},
        "watch": {old: field}}``: the engine the old ``backend`` names, and each old name
        under the object that holds it now (``max_failures`` becomes ``max_restarts``).

    Raises:
        ArgumentTypeError: an unknown name (the closest known one suggested), an option of
            another engine, a wrong ``backend``, or one option given by two names.

    Example:
        >>> regroup(["backend", "partition", "max_restarts"], "slurm")["restarts"]
        {'max_restarts': 'max_restarts'}
    """
    engine = _engine_named(backend)
    names = [names] if isinstance(names, str) else list(names)
    found = {"engine": engine, "engine_fields": {}, "restarts": {}, "watch": {}}
    fields = _engine_fields(ENGINE_CLASSES[engine])
    for name in names:
        if name == "backend":
            continue
        if name in _MOVED:
            group, field = _MOVED[name]
            if field in found[group].values():
                raise ArgumentTypeError("`max_restarts` and `max_failures` are two names of one "
                                        "option: give one (restarts=tfd.Restarts(max_restarts="
                                        "...)).")
            found[group][name] = field
        elif name in fields:
            found["engine_fields"][name] = name
        else:
            raise ArgumentTypeError(_unknown(name, engine))
    return found


def _unknown(name: str, engine: str) -> str:
    owners = [other for other, cls in ENGINE_CLASSES.items() if name in _engine_fields(cls)]
    if owners:
        spelled = " or ".join(f"engine=tfd.engines.{ENGINE_CLASSES[o].__name__}({name}=...)"
                              for o in owners)
        return (f"`{name}` is an option of the {' and '.join(owners)} engine, not of the "
                f"{engine} one: {spelled}.")
    known = set(_MOVED) | {"backend"} | set().union(*map(_engine_fields, ENGINE_CLASSES.values()))
    return f"Unknown argument `{name}` for launch().{did_you_mean(name, sorted(known))}"


def upgrade(keywords: dict, engine=None, restarts=None, watch=None):
    """``(engine, restarts, watch, message)``: the option objects with the old ``keywords``
    folded in, and the deprecation message that gives their new spelling.

    Raises:
        ArgumentTypeError: as :func:`regroup`, or an option given both ways (``restarts=``
            and ``max_restarts=``).
    """
    groups = regroup(list(keywords), keywords.get("backend"))
    made = {"engine": engine, "restarts": restarts, "watch": watch}
    spelled = []
    for group in ("engine", "restarts", "watch"):
        moved = groups["engine_fields" if group == "engine" else group]
        if not moved and not (group == "engine" and "backend" in keywords):
            continue
        cls = ENGINE_CLASSES[groups["engine"]] if group == "engine" else _GROUPS[group]
        if made[group] is not None:
            raise ArgumentTypeError(
                f"{', '.join(f'`{n}`' for n in moved or ['backend'])} and `{group}=` were both "
                f"given: give the option in {group}={_PYTHON_NAMES[group].format(cls.__name__)}"
                f"(...) only.")
        values = {field: keywords[old] for old, field in moved.items()}
        made[group] = cls(**values)
        given = ", ".join(f"{field}={value!r}" for field, value in values.items())
        spelled.append(f"{group}={_PYTHON_NAMES[group].format(cls.__name__)}({given})")
    old = ", ".join(f"{name}={value!r}" for name, value in keywords.items())
    message = (f"launch(..., {old}): these keyword arguments are deprecated and go in the next "
               f"release; use {', '.join(spelled)}.")
    return made["engine"], made["restarts"], made["watch"], message
