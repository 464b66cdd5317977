"""The TensorFlow and Keras of this process: the releases this installation supports and the
ones this environment has, and what runs once they are imported (:func:`after_import`).

tfdistributed works with a range of TensorFlow, Keras 3 and tensorflow-datasets releases (the
ranges are the package's own requirements, read from its installed metadata, so that they are
written once, in pyproject.toml). TensorFlow itself is an optional requirement, as it is for
TensorFlow's own add-on libraries: it comes in several distributions (``tensorflow``,
``tensorflow-cpu``, ``tensorflow[and-cuda]``...), and a requirement on one of them would make pip
install a second TensorFlow next to another. ``pip install "tfdistributed[tensorflow]"`` asks for
one; an environment that has a TensorFlow within the range keeps it.

Nothing here imports TensorFlow: it reads installed metadata only, so that R's
``install_tfdistributed()`` (through ``python -m tfdistributed versions``) and a process that
has not imported TensorFlow yet can ask.

    >>> import tfdistributed as tfd
    >>> tfd.versions.report()["tensorflow"]["ok"]      # doctest: +SKIP
    True

tfdistributed mends TensorFlow and Keras where they fall short (the Keras repairs,
:mod:`tfdistributed.training.compat`; the live TF_CONFIG and the join watch,
:mod:`tfdistributed.cluster.join`), yet ``import tfdistributed`` must not import them: TF_CONFIG
and logical devices can still be set after it. :func:`after_import` is the one import hook that
does this for both: a function runs as soon as its package is imported, whichever of the two
was imported first. It sits here, below ``cluster`` and ``training``, so that both can use it.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata as metadata
import importlib.util
import sys
import threading
import warnings

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .errors import TFDistributedError

#: The distributions that install the ``tensorflow`` module, the usual one first.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel",
                            "tensorflow-macos", "tf-nightly", "tf-nightly-cpu")
#: The extra that names TensorFlow (``pip install "tfdistributed[tensorflow]"``).
TENSORFLOW_EXTRA = "tensorflow"
#: The packages whose ranges :func:`report` checks, with the extra that names each.
CHECKED = {"tensorflow": TENSORFLOW_EXTRA, "keras": None, "tensorflow-datasets": None}


class VersionError(TFDistributedError):
    """The environment's TensorFlow (or Keras) is outside the range tfdistributed supports."""


def supported() -> dict[str, str]:
    """The supported range of each package of :data:`CHECKED`, as its requirement says
    (``{"tensorflow": ">=2.18,<2.22", ...}``): from this installation's metadata; ``""`` where
    the metadata names no range (a source tree that was never installed)."""
    try:
        requires = metadata.requires("tfdistributed") or []
    except metadata.PackageNotFoundError:
        requires = []
    ranges = {name: "" for name in CHECKED}
    for line in requires:
        requirement = Requirement(line)
        name = requirement.name.lower()
        if name not in CHECKED:
            continue
        # A plain requirement, or the one of the extra that names the package.
        marker = requirement.marker
        if marker is None or marker.evaluate({"extra": CHECKED[name] or ""}):
            ranges[name] = str(requirement.specifier)
    return ranges


def installed(name: str) -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed package ``name`` (for ``"tensorflow"``: the
    first of :data:`TENSORFLOW_DISTRIBUTIONS` that is installed), or None."""
    for dist in TENSORFLOW_DISTRIBUTIONS if name == "tensorflow" else (name,):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _within(version: str, spec: str) -> bool:
    # A pre-release or nightly of a supported minor counts as within the range.
    return not spec or SpecifierSet(spec).contains(Version(version), prereleases=True)


def report() -> dict:
    """Each package of :data:`CHECKED`: ``{"distribution", "version", "supported", "ok"}``
    (``distribution``/``version`` None when it is not installed; ``ok`` False then too)."""
    ranges = supported()
    out = {}
    for name in CHECKED:
        found = installed(name)
        out[name] = {"distribution": found[0] if found else None,
                     "version": found[1] if found else None,
                     "supported": ranges[name],
                     "ok": bool(found) and _within(found[1], ranges[name])}
    return out


def check_tensorflow(strict: bool = False) -> None:
    """Say when the TensorFlow or Keras installed here is outside the supported range.

    Older than the range: :class:`VersionError` naming the upgrade (the Keras repairs and the
    join hook are written for the range; below it they may not apply, silently). Newer than
    the range: a warning (it has not been tested; :func:`report` shows what is), or the error
    with ``strict``. Not installed: the error naming ``pip install "tfdistributed[tensorflow]"``.
    """
    state = report()
    tf = state["tensorflow"]
    if tf["version"] is None:
        raise VersionError(
            "TensorFlow is not installed in this Python. Fix: pip install "
            f"\"tfdistributed[{TENSORFLOW_EXTRA}]\" (or tensorflow-cpu, or "
            "\"tensorflow[and-cuda]\" for NVIDIA GPUs, within "
            f"{tf['supported'] or 'the supported range'}); from R: "
            "tfdistributed::install_tfdistributed().")
    for name in ("tensorflow", "keras"):
        entry = state[name]
        if entry["version"] is None or entry["ok"]:
            continue
        spec = SpecifierSet(entry["supported"])
        older = any(s.operator in (">=", ">", "==", "~=") and
                    Version(entry["version"]) < Version(s.version) for s in spec)
        message = (f"{entry['distribution']} {entry['version']} is outside the releases "
                   f"tfdistributed supports ({name}{entry['supported']}).")
        if older or strict:
            raise VersionError(f"{message} Fix: pip install \"{name}{entry['supported']}\" in "
                               "this environment (from R: tfdistributed::install_tfdistributed() "
                               "installs a supported one).")
        warnings.warn(f"{message} It has not been tested with tfdistributed; "
                      "`python -m tfdistributed versions` shows what is installed.",
                      stacklevel=2)


class VersionWarning(UserWarning):
    """TensorFlow is missing, or it or Keras is outside the supported releases (said once, when
    ``import tfdistributed`` runs; :func:`check_tensorflow` raises instead)."""


def warn_if_unsupported() -> None:
    """What ``import tfdistributed`` runs: :func:`check_tensorflow`'s findings as one
    :class:`VersionWarning`, so that ``python -m tfdistributed versions`` and R's
    ``install_tfdistributed()`` still work in an environment they are about to mend."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_tensorflow()
    except VersionError as e:
        warnings.warn(str(e), VersionWarning, stacklevel=3)
        return
    for warning in caught:
        warnings.warn(str(warning.message), VersionWarning, stacklevel=3)


# -- what runs once TensorFlow or Keras is imported ---------------------------------------------

class _AfterImport(importlib.abc.MetaPathFinder):
    """The import hook of :func:`after_import`: when a package it waits for is about to be
    imported, it lets the other finders find it, and wraps its loader so that the functions
    waiting for it run right after the package's code has run. It leaves ``sys.meta_path``
    once nothing waits any more. An import that fails leaves the functions waiting, for the
    next attempt to import the package."""

    def __init__(self):
        self.waiting: dict[str, list] = {}
        self.lock = threading.RLock()
        self.finding = threading.local()  # the names this thread is looking up (no recursion)

    def find_spec(self, fullname, path=None, target=None):
        finding = getattr(self.finding, "names", set())
        if fullname not in self.waiting or fullname in finding:
            return None
        self.finding.names = finding | {fullname}
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding.names = finding
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_run(module):
            exec_module(module)
            self.run(fullname)

        spec.loader.exec_module = exec_then_run
        return spec

    def run(self, name: str) -> None:
        """Run, in the order they were given, the functions that wait for ``name``."""
        with self.lock:
            functions = self.waiting.pop(name, [])
            if not self.waiting and self in sys.meta_path:
                sys.meta_path.remove(self)
        for function in functions:
            function()


_HOOK = _AfterImport()


def imported(name: str, ready: str) -> bool:
    """Whether the package ``name`` has been imported to the end: it is in ``sys.modules``
    with its attribute ``ready``, which its code sets (a package being imported is in
    ``sys.modules`` from its first line)."""
    return hasattr(sys.modules.get(name), ready)


def after_import(name: str, function, ready: str) -> None:
    """Run ``function()`` once the top-level package ``name`` (``"tensorflow"``, ``"keras"``)
    is imported: now if it is (:func:`imported` with ``ready``), else right after its import,
    once. A function already waiting for ``name`` is not added again.

    Example:
        >>> after_import("keras", lambda: print("keras is here"), "__version__")  # doctest: +SKIP
    """
    if imported(name, ready):
        function()
        return
    with _HOOK.lock:
        waiting = _HOOK.waiting.setdefault(name, [])
        if function not in waiting:
            waiting.append(function)
        if _HOOK not in sys.meta_path:
            sys.meta_path.insert(0, _HOOK)
