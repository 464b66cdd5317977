"""The Ray engine's option object, :class:`Ray`: what ``launch(engine=tfd.engines.Ray())`` is
given, checked where it is made, and the launcher it makes (:mod:`.launcher`'s; Ray itself is
imported when a job runs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..._args import as_seconds
from ...errors import ArgumentTypeError
from ..options import POLL_SECONDS, Engine, Scaling, settle, text


@dataclass(frozen=True, kw_only=True, repr=False)
class Ray(Engine):
    """One Ray actor per task, on the Ray cluster this process is connected to, or a new one.

    The job's GPUs are its shape's: ``Scaling(gpus_per_task=n)`` is ``num_gpus=n`` of each
    task that trains (ps tasks and a parameter-server job's coordinator get none).

    Args:
        address: the Ray cluster to connect to (default: ``RAY_ADDRESS``, else a local Ray).
        ray_options: options of every task's actor (``num_cpus``, ``resources``...).
        poll: seconds between two looks at the actors.
        python, rscript: the interpreters on the nodes (as
            :class:`~tfdistributed.engines.options.Engine`).

    Example:
        >>> Ray(address="ray://head:10001")
        Ray(address='ray://head:10001')
    """

    name: ClassVar[str] = "ray"
    address: str | None = None
    ray_options: dict | None = None
    poll: float = POLL_SECONDS

    def __post_init__(self):
        super().__post_init__()
        text(self.address, "address", "'ray://head:10001'")
        if self.ray_options is not None and not isinstance(self.ray_options, dict):
            raise ArgumentTypeError(f"`ray_options` must be a dict of actor options, e.g. "
                                    f"{{'num_cpus': 2}}, got {self.ray_options!r}.",
                                    hints={"r": "E.g. ray_options = list(num_cpus = 2)."})
        settle(self, poll=as_seconds(self.poll, "poll", minimum=0.01))

    def check(self, scaling: Scaling) -> None:
        """As every engine (no ``cluster``, a number of GPUs), and GPUs given once."""
        super().check(scaling)
        if scaling.gpus_per_task is not None and "num_gpus" in (self.ray_options or {}):
            raise ArgumentTypeError("`gpus_per_task` and `ray_options` both give the actors "
                                    "GPUs (num_gpus): give gpus_per_task alone (only the tasks "
                                    "that train get them), or num_gpus in ray_options alone "
                                    "(every task's actor gets them).")

    def launcher(self, plan, relay):
        """A :class:`~.launcher.RayLauncher`."""
        from .launcher import RayLauncher

        return RayLauncher(plan, relay)
