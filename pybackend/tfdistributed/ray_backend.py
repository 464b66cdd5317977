"""The Ray engine under the name it always had: ``tfdistributed.ray_backend``.

The engine is :mod:`tfdistributed.launchers.ray` (``launch(target, workers=N, backend="ray")``);
this module keeps :func:`launch_ray` and :func:`start_local_ray` importable from here, where
scripts and the tests' fixtures (``start_local_ray``) find them.
"""

from __future__ import annotations

from .launchers.ray import launch_ray, start_local_ray

__all__ = ["launch_ray", "start_local_ray"]
