"""Module paths of earlier releases, kept working: each is the module now at its new path.

The third layout pass put the package's modules into folders by concern (``cluster/``,
``strategies/``, ``data/``, ``training/``, ``engines/``, ``watch/``, ``r/``, ``testbeds/``).
``import tfdistributed.hostbed``, ``from tfdistributed.compression import ...`` and
``python -m tfdistributed.hostbed ...`` still work, with a ``DeprecationWarning`` naming the new
path; the old names are the new modules themselves (one module object, not a copy), so state and
``isinstance`` checks are shared. ``tfdistributed.cluster``, ``.data``, ``.strategies`` and
``.training`` became folders whose ``__init__`` keeps the old module's names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module (under ``tfdistributed.``) -> its module now.
MOVED = {
    "_runtime": "strategies.runtime", "_slurm_task": "engines.slurm.task",
    "checkpoints": "training.checkpoints", "compat": "training.compat",
    "compression": "strategies.compression", "demo_data": "data.digits",
    "generators": "r.feed", "hostbed": "testbeds.hostbed",
    "launchers": "engines", "launchers.base": "engines.base", "launchers.local": "engines.local",
    "launchers.output": "engines.output", "launchers.ray": "engines.ray.launcher",
    "launchers.restarts": "engines.restarts", "launchers.slurm": "engines.slurm.launcher",
    "launchers.slurm_script": "engines.slurm.script", "loops": "training.loops",
    "packing": "strategies.packing", "ps": "training.ps", "ray_backend": "engines.ray",
    "rcallbacks": "data.rcallbacks", "repairs": "training.repairs", "routing": "training.routing",
    "rvalues": "r.values", "served": "r.served", "sharding": "data.sharding",
    "shards": "data.shards", "slurm": "engines.slurm", "slurm_env": "cluster.from_slurm",
    "slurm_local": "testbeds.slurm", "watch.join": "cluster.join", "watch.tfconfig": "cluster.live",
}
_PACKAGE = __name__.rpartition(".")[0]


def new_name(old: str) -> str | None:
    """The module now at ``old`` (a full dotted name), or None if ``old`` did not move."""
    prefix = _PACKAGE + "."
    if not old.startswith(prefix):
        return None
    rest = old[len(prefix):]
    if rest in MOVED:
        return prefix + MOVED[rest]
    if rest.startswith("repairs."):  # every repair moved with its folder
        return f"{prefix}training.{rest}"
    return None


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there (the old path will go).",
                  DeprecationWarning, stacklevel=3)


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finds an old path and gives the module now at the new one (also for ``python -m``)."""

    def find_spec(self, fullname, path=None, target=None):
        if new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=False)

    def create_module(self, spec):
        new = new_name(spec.name)
        _warn(spec.name, new)
        return importlib.import_module(new)

    def exec_module(self, module):
        """Nothing to run: the module was run at its new path."""

    def get_source(self, fullname):
        """``python -m <old path>``: run the module at its new path as ``__main__`` (its
        relative imports need its own package)."""
        new = new_name(fullname)
        _warn(fullname, new)
        return f"import runpy\nrunpy.run_module({new!r}, run_name='__main__', alter_sys=True)\n"


def install() -> None:
    """Make the old paths importable (idempotent)."""
    # First, ahead of the path finder: under an old package path (tfdistributed.launchers) the
    # path finder would find the new package's modules again and load a second copy of each.
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())
    # tfdistributed.launch is the function launch(); importing the module of that name through
    # the finder would set the package's attribute to the module. Already in sys.modules, the
    # old module path imports without touching the attribute (and without a warning).
    sys.modules.setdefault(f"{_PACKAGE}.launch",
                           importlib.import_module(f"{_PACKAGE}.engines.launch"))


def attribute(name: str):
    """``tfdistributed.<name>`` for an old module name no longer set on the package."""
    new = new_name(f"{_PACKAGE}.{name}")
    if new is None:
        raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")
    _warn(f"{_PACKAGE}.{name}", new)
    return importlib.import_module(new)
