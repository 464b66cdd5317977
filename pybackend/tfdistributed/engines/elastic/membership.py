"""Who is in a job: the places it may use, those it runs on, those lost, and its size.

A *place* is where an engine runs one or more training tasks and which can be lost as a whole:
a host of a local job (``Local(hosts=)``), a SLURM node, a Ray node. The job wants
``max_workers`` training tasks (``workers``) and goes on with at least ``min_workers``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class SizeChange:
    """One change of the job's size, as the result and R's ``job$sizes`` show it.

    Attributes:
        attempt: the attempt that runs at the new size (0-based).
        workers: the training tasks it runs with.
        why: ``"start"``, ``"lost"`` (places gone for good), ``"back"`` (places that answer
            again) or ``"joined"`` (places new to the job: a node added to the cluster).
        places: the places that left or came.
        position: the step (counted from the start of training) the attempt resumes from:
            the backup's, None when unknown.
        seconds: since the job started.
        wanted: the workers the job wants (``workers``).
    """

    attempt: int
    workers: int
    why: str
    places: list = field(default_factory=list)
    position: int | None = None
    seconds: float = 0.0
    wanted: int | None = None

    def as_dict(self) -> dict:
        return {"attempt": self.attempt, "workers": self.workers, "wanted": self.wanted,
                "why": self.why, "places": list(self.places), "position": self.position,
                "seconds": round(self.seconds, 3)}


class Membership:
    """The places a job may use and the ones it runs on.

    Args:
        places: every place, in the engine's order (the first holds the chief or worker 0).
        trainers: ``trainers(places) -> int``, the training tasks the job has on those places.
        min_workers: the fewest training tasks the job goes on with.
    """

    def __init__(self, places: list, trainers, min_workers: int):
        self.places = list(places)
        self.trainers = trainers
        self.min_workers = min_workers
        self.max_workers = trainers(self.places)
        self.active = list(self.places)
        self.lost: dict = {}   # place -> {"since": monotonic, "position": step or None, "why"}
        self.joined: set = set()  # places that came after the start (a node added)
        self.spare: list = []     # places left out so that the global batch splits evenly
        self.started = time.monotonic()
        self.changes: list[SizeChange] = []

    @property
    def workers(self) -> int:
        return self.trainers(self.active)

    def lose(self, places: list, why: dict, position=None) -> None:
        """``places`` are gone (``why[place]``: what the probe saw), from ``position`` on."""
        now = time.monotonic()
        for place in places:
            if place in self.active:
                self.active.remove(place)
            self.lost.setdefault(place, {"since": now, "position": position,
                                         "why": why.get(place) or "no answer"})

    def back(self, places: list) -> None:
        """``places`` answer again: the next attempt runs on them too (in the engine's order),
        and on the places left out for the batch's sake (the batch check comes after)."""
        for place in places:
            self.lost.pop(place, None)
        wanted = set(self.active) | set(places) | set(self.spare)
        self.spare = []
        self.active = [p for p in self.places if p in wanted]

    def shrink_to(self, workers: int) -> list:
        """Drop places from the end until the job has ``workers`` training tasks; the places
        dropped (they are not lost: the job is smaller so that its global batch splits)."""
        dropped = []
        while self.trainers(self.active) > workers and len(self.active) > 1:
            dropped.append(self.active.pop())
        self.spare += dropped
        return dropped

    def record(self, attempt: int, why: str, places: list, position=None) -> SizeChange:
        change = SizeChange(attempt, self.workers, why, list(places), position,
                            time.monotonic() - self.started, self.max_workers)
        self.changes.append(change)
        return change


def size_for_batch(available: int, minimum: int, global_batch: int | None,
                   replicas_per_worker: int | None) -> int | None:
    """The most workers, from ``available`` down to ``minimum``, over whose replicas the global
    batch splits evenly (every replica the same share, as ``fit()`` requires); ``available``
    when the batch is unknown; None when no size in the range splits it.

    Example:
        >>> size_for_batch(3, 2, 64, 1), size_for_batch(3, 3, 64, 1), size_for_batch(3, 2, None, 1)
        (2, None, 3)
    """
    if not global_batch or not replicas_per_worker:
        return available
    for n in range(available, minimum - 1, -1):
        if global_batch % (n * replicas_per_worker) == 0:
            return n
    return None
