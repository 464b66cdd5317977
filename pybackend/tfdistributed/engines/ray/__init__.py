"""Ray: ``launch(target, workers=N, backend="ray")`` runs one Ray actor per task
(:mod:`.launcher`), on the cluster Ray is connected to or on a local one
(:func:`start_local_ray`). Ray itself is imported only when a job runs.
"""

from __future__ import annotations

from .launcher import launch_ray, start_local_ray

__all__ = ["launch_ray", "start_local_ray"]
