"""Ray: ``launch(target, workers=N, engine=Ray())`` runs one Ray actor per task
(:mod:`.launcher`), on the cluster Ray is connected to or on a local one
(:func:`start_local_ray`). Ray itself is imported only when a job runs.

``engine`` holds what ``engine=Ray(...)`` is given (:class:`~.engine.Ray`), checked, and what
it refuses of a job's shape; ``launcher`` the engine's launcher and its actors.

Layer: inside ``engines``.
"""

from __future__ import annotations

from .launcher import start_local_ray

__all__ = ["start_local_ray"]
