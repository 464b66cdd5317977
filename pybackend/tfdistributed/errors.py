"""One exception family for every mistake tfdistributed can see coming.

Each message says what was wrong, what was expected, and the fix. The classes also inherit from
the built-in exception a Python user would naturally catch (``ValueError``, ``TypeError``,
``TimeoutError``...), so ``except ValueError`` keeps working for code that predates us.

Messages are language-neutral: Python and the R package show the same text. Where the fix is
best shown as code, the error carries ``hints``, one per language (``{"python": ..., "r": ...}``):
``str()`` of the error adds the Python hint, and the R package adds the R hint instead
(:meth:`TFDistributedError.message_for`).
"""

from __future__ import annotations

import difflib
from typing import Iterable


class TFDistributedError(Exception):
    """Base class of every error raised on purpose by tfdistributed.

    Args:
        message: what was wrong and the fix, in words both languages share.
        hints: optional fix written as code, per language, each a sentence appended to the
            message: ``{"python": "...", "r": "..."}``.

    Example:
        >>> e = TFDistributedError("`seed` must be a whole number >= 0.",
        ...                        hints={"python": "E.g. seed=0.", "r": "E.g. seed = 0."})
        >>> str(e)
        '`seed` must be a whole number >= 0. E.g. seed=0.'
        >>> e.message_for("r")
        '`seed` must be a whole number >= 0. E.g. seed = 0.'
    """

    def __init__(self, *args, hints: dict | None = None):
        super().__init__(*args)
        self.hints = {k: v for k, v in (hints or {}).items() if v}

    def message_for(self, language: str) -> str:
        """The message with the hint for ``language`` (``"python"``, ``"r"``) appended, if any."""
        message = super().__str__()
        hint = self.hints.get(language)
        return f"{message} {hint}" if hint else message

    def __str__(self) -> str:
        return self.message_for("python")


class StrategyError(TFDistributedError, ValueError):
    """A strategy cannot be created as asked (unknown name, no TPU, no cluster...)."""


class ArgumentTypeError(TFDistributedError, TypeError):
    """An argument has the wrong type (for example a float where an integer is needed)."""


class ClusterConfigError(TFDistributedError, ValueError):
    """TF_CONFIG or a cluster description is malformed or inconsistent."""


class JoinTimeoutError(ClusterConfigError, TimeoutError):
    """A task of a multi-worker job gave up waiting for the others to join (the join timeout);
    the message names the missing tasks, their addresses and what the network answered."""


class ShardingError(TFDistributedError, ValueError):
    """A dataset cannot be sharded over the workers with the chosen policy."""


class TrainingError(TFDistributedError, RuntimeError):
    """fit/evaluate cannot run as asked (model outside the scope, bad batch size...)."""


class PlacementError(TFDistributedError, ValueError):
    """A model's variables, its optimizer or a call on it belong to different strategies: the
    message names what was made under which strategy and what to move into one scope."""


class GeneratorError(TFDistributedError, RuntimeError):
    """An R (or Python) batch generator failed, returned a bad batch, or cannot run here."""


class LaunchError(TFDistributedError, RuntimeError):
    """A task of a local cluster failed; ``results`` holds every task's outcome (of the last
    attempt when the job was restarted), ``failure`` the failed task's ``{"task", "ended",
    "error", "preempted"}`` (None when no task failed: a port in use, a timeout...),
    ``attempts`` each attempt's failure (see :class:`~tfdistributed.LaunchResult`)."""

    def __init__(self, message: str, results=None, *, hints: dict | None = None, failure=None,
                 attempts=None):
        super().__init__(message, hints=hints)
        self.results = results
        self.failure = failure
        self.attempts = list(attempts or [])


class LaunchTimeoutError(LaunchError, TimeoutError):
    """A local cluster did not finish in time; every process it started was stopped."""


class HostLostError(LaunchError):
    """A launched job cannot go on because hosts (SLURM or Ray nodes) it runs on are gone: they
    did not answer within the grace, and too few workers are left (``min_workers``), or the job
    needs all of them. Not a bug in the job: bring the hosts back and launch again."""


class ShardingWarning(UserWarning):
    """A multi-worker dataset is sharded otherwise than by file although its policy is
    ``"auto"``: it reads fewer files than there are workers, so it is sharded by data (as
    TensorFlow documents ``"auto"``; see :mod:`tfdistributed.data.sharding`). Said once per data
    set; set the shard policy to choose, or ``warnings.filterwarnings("ignore",
    category=ShardingWarning)``."""


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``name``, for "did you mean" hints (None when nothing is close)."""
    matches = difflib.get_close_matches(str(name).lower(), [c.lower() for c in choices], n=1,
                                        cutoff=0.5)
    if not matches:
        return None
    by_lower = {c.lower(): c for c in choices}
    return by_lower[matches[0]]


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    hint = closest(name, list(choices))
    return f" Did you mean {hint!r}?" if hint else ""
