"""The elastic policy of a launched job: which places each attempt runs on.

:class:`Elastic` is asked by the attempt loop (:func:`tfdistributed.engines.restarts.run`):

- :meth:`~Elastic.first` before the first attempt: the places that answer (at least
  ``min_workers`` training tasks, waiting up to the grace for them); the others are probed in
  the background, and the job grows when they answer (as Ray Train starts with what it gets);
- :meth:`~Elastic.after_failure` after a failed attempt: the places that do not answer within
  the grace are lost. The job goes on without them (a restart that does not spend
  ``max_restarts``) if enough are left, at the most workers over which its global batch splits
  evenly; otherwise it ends with a :class:`~tfdistributed.errors.HostLostError` naming the lost
  places. Without ``min_workers`` a job needs all of its places: a lost one ends it, named as
  such, instead of restarts that wait for it and a failure called "a bug";
- while an attempt runs (:meth:`~Elastic.watching`), a lost place that answers again makes the
  job stop at its next backup (each task told as by a preemption notice) and start again on
  more places: a planned restart, announced, that redoes no step. A job without backups uses
  it at its next restart instead.
"""

from __future__ import annotations

import contextlib
import threading
import time

from ...errors import ArgumentTypeError, HostLostError
from .membership import Membership, size_for_batch

#: Seconds between two probes of a place that does not answer.
PROBE_EVERY = 2.0


class Elastic:
    """The membership policy of one ``launch()`` (see the module docstring).

    Args:
        launcher: the engine (:class:`~tfdistributed.engines.base.Launcher`: ``places()``,
            ``probe()``, ``trainers()``, ``place_word``).
        min_workers: the fewest training tasks the job goes on with; None: all of them.
        grace: seconds a place may take to answer before it counts as lost (the join
            timeout: how long a task of the next attempt would wait for it).
        relay: where announcements go (the job's output).
    """

    def __init__(self, launcher, min_workers, grace: float, relay):
        self.launcher, self.relay, self.grace = launcher, relay, grace
        self.word = launcher.place_word  # what a place is: host, node
        self.elastic = min_workers is not None
        self.members = Membership(launcher.places(), launcher.trainers, 0)
        self.members.min_workers = (self.members.max_workers if min_workers is None
                                    else min_workers)
        if self.members.min_workers > self.members.max_workers:
            raise ArgumentTypeError(f"min_workers={min_workers} is more than the job's "
                              f"{self.members.max_workers} workers: min_workers <= workers.")
        self.grow_asked = False
        self.attempt_workers = self.members.max_workers  # of the attempt that runs (or ran)
        self._job = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    @property
    def watch(self):
        return self.relay.watch

    # -- before an attempt ----------------------------------------------------------------------
    def first(self) -> list:
        """The places of the first attempt: those that answer now, if they hold at least
        ``min_workers`` training tasks (the others join later); else those that answer within
        the grace (:meth:`_answering`)."""
        silent = self.launcher.probe(self.members.places, self.members.places)
        silent = {p: w for p, w in silent.items() if w is not None}
        answering = [p for p in self.members.places if p not in silent]
        if silent and self.members.trainers(answering) < self.members.min_workers:
            silent = self._answering(self.members.places)
        if silent:
            self.members.lose(list(silent), silent)
            self._enough(silent, "at the start")
            self.relay.send(f"[tfdistributed] {self._places(silent)} did not answer within "
                            f"{self.grace:g} s ({self._reasons(silent)}): the job starts with "
                            f"{self.members.workers} of its {self.members.max_workers} workers "
                            f"and grows when they answer")
        self.members.record(0, "start", sorted(silent))
        return self.placed()

    def placed(self) -> list:
        """The places the next attempt runs on (its size noted for the batch check)."""
        self.attempt_workers = self.members.workers
        return list(self.members.active)

    def after_failure(self, attempt: int) -> str | None:
        """After attempt ``attempt`` failed: an announcement if the membership shrank (the next
        attempt runs on fewer places, not a counted restart), None if every place answers
        (an ordinary failure). Raises when too few places are left."""
        back = self._back_now()
        silent = self._answering(self.members.active)
        if not silent:
            if back:
                self.members.back(back)
                self._fit_batch()
                change = self.members.record(attempt + 1, self._why_more(back), back,
                                             self._backup())
                self._tell(change)
                return None  # an ordinary restart, on more places
            return None
        position = self._backup()
        self.members.lose(list(silent), silent, position)
        self._enough(silent, f"at step {self._at()}" if self._at() is not None else "")
        if back:
            self.members.back(back)
        dropped = self._fit_batch()
        change = self.members.record(attempt + 1, "lost", sorted(silent), position)
        self._tell(change)
        return (f"{self._places(silent)} is gone ({self._reasons(silent)}; no answer within "
                f"{self.grace:g} s) since step {self._at() if self._at() is not None else '?'}: "
                f"the job goes on with {self.members.workers} worker(s)"
                f"{self._dropped(dropped)}{self._from_backup(position)}; it grows back when "
                f"{'they answer' if len(silent) > 1 else 'it answers'} again")

    def planned(self, failure: dict) -> bool:
        """Whether an attempt that ended with ``failure`` was the job stopping to grow: asked
        to, and a task stopped at its backup (status 75) or by the notice itself (SIGTERM,
        outside ``fit``)."""
        return self.grow_asked and (failure.get("preempted")
                                    or failure.get("ended") == "was killed by signal 15")

    def after_planned_stop(self, attempt: int) -> str:
        """The job stopped at a backup to grow: the places that answer again join it."""
        with self._lock:
            self.grow_asked = False
        back = self._back_now()
        self.members.back(back)
        dropped = self._fit_batch()
        position = self._backup()
        change = self.members.record(attempt + 1, self._why_more(back), back, position)
        self._tell(change)
        came = f"{self._places(back)} {self._comes(back)}" if back else "no place answers"
        return (f"{came}: the job grows to {self.members.workers} worker(s){self._dropped(dropped)}"
                f"{self._from_backup(position)}")

    # -- while an attempt runs ------------------------------------------------------------------
    @contextlib.contextmanager
    def watching(self, job):
        """Probe the lost places in the background while ``job`` runs; the first to answer
        again makes the job stop at its next backup (:meth:`_grow_when_back`)."""
        if not self.elastic or not self.members.lost:
            yield
            return
        self._job, self._stop = job, threading.Event()
        self._thread = threading.Thread(target=self._grow_when_back, daemon=True,
                                        name="tfdistributed-elastic")
        self._thread.start()
        try:
            yield
        finally:
            self._stop.set()
            self._thread.join(timeout=PROBE_EVERY + 30)
            self._job = None

    def _grow_when_back(self) -> None:
        said, answered = False, set()
        while not self._stop.wait(PROBE_EVERY):
            self._discover()
            lost = list(self.members.lost)
            answers = self.launcher.probe(lost, self.members.active)
            # A place that answers twice in a row (a rebooted node's daemons all up, a link
            # that stays up), not one that flaps.
            back = [p for p in lost if answers.get(p) is None and p in answered]
            answered = {p for p in lost if answers.get(p) is None}
            if not back:
                continue
            if not self._backed_up_here():
                if not said:
                    said = True
                    self._say(f"[tfdistributed] {self._places(back)} {self._comes(back)}; this "
                              f"attempt has written no backup yet, so the job grows at its next "
                              f"backup or restart")
                continue
            with self._lock:
                self.grow_asked = True
            self._say(f"[tfdistributed] {self._places(back)} {self._comes(back)}: the job stops "
                      f"at its next backup and grows to "
                      f"{self.members.trainers(self.members.active + back)} worker(s)")
            self._job.preempt()
            return

    # -- helpers --------------------------------------------------------------------------------
    def _discover(self) -> None:
        """Places the engine offers now that the job has not known (a Ray node that joined the
        cluster, a node added to the SLURM partition): candidates to grow on, as lost ones."""
        new = [p for p in self.launcher.places() if p not in self.members.places]
        if new:
            self.members.places += new
            self.members.lose(new, {p: "new to the job" for p in new})
            self.members.joined |= set(new)

    def _back_now(self) -> list:
        """The lost places that answer now (one probe, no waiting)."""
        self._discover()
        lost = list(self.members.lost)
        if not lost:
            return []
        answers = self.launcher.probe(lost, self.members.active)
        return [p for p in lost if answers.get(p) is None]

    def _why_more(self, places) -> str:
        """``"joined"`` when every place that comes is new to the job, else ``"back"``."""
        return "joined" if places and set(places) <= self.members.joined else "back"

    def _comes(self, places) -> str:
        return "joined the cluster" if self._why_more(places) == "joined" else "answers again"

    def _tell(self, change) -> None:
        if self.watch is not None:
            self.watch.size_changed(change.as_dict())

    def _say(self, line: str) -> None:
        """A line for the job's output from the prober's thread: printed by the calling
        thread (where ``on_output`` may be an R function)."""
        if self.watch is not None:
            self.watch.say(line)

    def _answering(self, places: list) -> dict:
        """``{place: why}`` of the ``places`` that still do not answer after the grace."""
        deadline = time.monotonic() + self.grace
        silent = self.launcher.probe(places, places)
        silent = {p: w for p, w in silent.items() if w is not None}
        while silent and time.monotonic() < deadline:
            time.sleep(min(PROBE_EVERY, max(0.0, deadline - time.monotonic())))
            again = self.launcher.probe(list(silent), places)
            silent = {p: again.get(p) for p in silent if again.get(p) is not None}
        return silent

    def _enough(self, silent: dict, when: str) -> None:
        """Raise when the places left hold fewer than ``min_workers`` training tasks."""
        left = self.members.workers
        if left >= self.members.min_workers and left > 0:
            return
        need = (f"min_workers={self.members.min_workers}" if self.elastic else
                f"all {self.members.max_workers} workers (no min_workers: give the job's "
                f"scaling a min_workers to go on without lost {self.word}s)")
        raise HostLostError(
            f"{self._places(silent)} is gone{' ' + when if when else ''}: "
            f"{self._reasons(silent)}; it did not answer within {self.grace:g} s (the join "
            f"timeout). {left} worker(s) are left and the job needs {need}. A lost {self.word}, "
            f"not a bug in the job: bring the {self.word} back (or give the job another) and "
            f"launch again; it resumes from its backup.", [], failure=None)

    def _fit_batch(self) -> list:
        """Shrink further so that the global batch splits evenly; the places left out."""
        batch, per_worker = self._batch()
        size = size_for_batch(self.members.workers, self.members.min_workers, batch, per_worker)
        if size is None:
            raise HostLostError(
                f"The job's global batch of {batch} cannot be split evenly over "
                f"{self.members.min_workers} to {self.members.workers} workers of "
                f"{per_worker} replica(s) each: choose a global batch divisible by the sizes the "
                f"job may run at (e.g. a multiple of {per_worker * _lcm_range(self.members)}).",
                [], failure=None)
        return self.members.shrink_to(size) if size < self.members.workers else []

    def _batch(self) -> tuple:
        """The global batch of the job's training and the replicas of one worker (each None
        when unknown: the job trained without our recorder, or not yet)."""
        if self.watch is None:
            return None, None
        shape = self.watch.training_shape()
        replicas = shape.get("replicas")
        per_worker = replicas // self.attempt_workers if replicas and self.attempt_workers else None
        return shape.get("examples_per_step"), per_worker or None

    def _backup(self):
        return self.watch.failure_point("")["backup"] if self.watch is not None else None

    def _at(self):
        return self.watch.failure_point("")["at"] if self.watch is not None else None

    def _backed_up_here(self) -> bool:
        return self.watch is not None and self.watch.backed_up_in_attempt()

    def _places(self, places) -> str:
        places = list(places)
        return f"{self.word}{'' if len(places) == 1 else 's'} " + ", ".join(map(str, places))

    @staticmethod
    def _reasons(silent: dict) -> str:
        return "; ".join(f"{p}: {w}" for p, w in silent.items())

    @staticmethod
    def _dropped(dropped: list) -> str:
        return (f" (leaving out {', '.join(dropped)} so that the global batch splits evenly)"
                if dropped else "")

    @staticmethod
    def _from_backup(position) -> str:
        return f", from its backup at step {position}" if position is not None else ""


def _lcm_range(members: Membership) -> int:
    import math

    value = 1
    for n in range(max(1, members.min_workers), members.max_workers + 1):
        value = value * n // math.gcd(value, n)
    return value
