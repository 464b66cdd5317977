"""What the launchers do with the lines their tasks print, the same on every engine.

Each raw line is cleaned (:func:`clean_line`), kept in its task's output, and, unless it is
TensorFlow start-up noise, streamed prefixed with the task (``[worker 1] ...``) to stdout and/or
an ``on_output`` callback (:class:`Relay`). :func:`error_summary` turns a failed task's output
into the part of an error message that shows what went wrong.
"""

from __future__ import annotations

import re

from ..watch import channel
from ..watch.collector import job_watch
from ..watch.progress import KERAS_PROGRESS
from ..watch.channel import PREEMPTED_EXIT_CODE

# TensorFlow's C++ start-up INFO lines, printed before logging is configured (so
# TF_CPP_MIN_LOG_LEVEL cannot silence them), and its complaint that a machine without a GPU has
# no CUDA driver: kept in each task's output, not streamed nor quoted in errors.
NOISE = re.compile(r"^(I\d{4} [\d:.]+\s+\d+ \S+:\d+\] |WARNING: All log messages "
                   r"before absl::InitializeLog\(\) is called|E\d{4} [\d:.]+\s+\d+ "
                   r"cuda_platform\.cc:\d+\] failed call to cuInit)")
_TAIL = 40
# Terminal control sequences (colours, cursor moves) of progress bars, useless in a log.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LINE_LIMIT = 400
# The line that names a Python exception, or R's error line.
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(:.*)?"
                         r"|Error( in .*)?:.*)$")


def clean_line(raw: str) -> str:
    """One printed line as a log line: a progress bar redrawn with carriage returns becomes
    its last state, colour codes are dropped, and very long lines (array dumps) are cut."""
    line = _ANSI.sub("", raw)
    if "\r" in line:
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "")
    if len(line) > _LINE_LIMIT:
        line = line[:_LINE_LIMIT] + f" ... [{len(line) - _LINE_LIMIT} more characters]"
    return line


def error_line(lines) -> str:
    """A failed task's exception line (its last), or else its last line of output ("" if none):
    one line that says what went wrong, to compare the failures of two attempts of a job."""
    kept = [ln.strip() for ln in lines if not NOISE.match(ln) and ln.strip()]
    errors = [ln for ln in kept if _ERROR_LINE.match(ln)]
    return (errors or kept or [""])[-1]


def error_summary(lines) -> str:
    """The last output of a failed task for an error message: its exception line first (it can
    be followed by pages of other output), then the tail."""
    kept = [ln for ln in lines if not NOISE.match(ln)]
    tail = "\n".join(kept[-_TAIL:])
    if any(_ERROR_LINE.match(ln.strip()) for ln in kept):
        return f"Its error: {error_line(kept)}\nIts last output:\n{tail}"
    return f"Its last output:\n{tail}"


def how_it_ended(returncode: int) -> str:
    """``"exited with status 3"``, ``"was killed by signal 9"`` (a negative return code), or
    ``"was preempted (exit status 75)"``
    (:data:`~tfdistributed.engines.base.PREEMPTED_EXIT_CODE`)."""
    if returncode < 0:
        return f"was killed by signal {-returncode}"
    if returncode == PREEMPTED_EXIT_CODE:
        return f"was preempted (exit status {returncode})"
    return f"exited with status {returncode}"


class Relay:
    """Keeps each task's lines and streams them, prefixed with the task, to stdout / a callback.

    ``keep`` may run on any thread (the local launcher's readers); ``send`` runs on the calling
    thread, because ``on_output`` may be an R function. ``emit`` does both, for engines that
    read their tasks' output on the calling thread; ``tick`` says what the job's ``watch`` (a
    :class:`~tfdistributed.watch.collector.JobWatch`) has to say now, and engines call it from
    their supervising loop.

    The records a task sends on the channel (:mod:`tfdistributed.watch.channel`) go to
    ``watch``, not to the task's output. While the job's progress display runs, Keras' own
    progress lines of each task are kept in its output but not streamed (``show_all``
    streams every line).
    """

    def __init__(self, *, echo: bool, on_output=None, show_all: bool, watch=None):
        self.echo = echo
        self.on_output = on_output
        self.show_all = show_all
        self.watch = watch

    def keep(self, label: str, raw: str, output: list) -> str | None:
        """Clean ``raw``, append it to ``output``; the line to stream, or None for noise."""
        text, record = channel.parse(raw)
        if record is not None and self.watch is not None:
            self._watching(self.watch.record, label, record)
        if text is None:
            return None
        line = clean_line(text)
        output.append(line)
        if self.show_all:
            return f"[{label}] {line}"
        if NOISE.match(line) or (self.watch is not None and self.watch.display
                                 and KERAS_PROGRESS.match(line)):
            return None
        return f"[{label}] {line}"

    def send(self, line: str) -> None:
        if self.echo:
            if line.startswith("\r"):
                print(line, end="", flush=True)
            else:
                print(line, flush=True)
        if self.on_output is not None:
            self.on_output(line)

    def emit(self, label: str, raws, output: list) -> None:
        """``keep`` then ``send`` each of ``raws``."""
        for raw in raws:
            shown = self.keep(label, raw, output)
            if shown is not None:
                self.send(shown)
        self.tick()

    def tick(self) -> None:
        """Send what the job's watch has to say now (progress, a straggler, a stall)."""
        for line in self._watching(self.watch.due) if self.watch is not None else ():
            self.send(line)

    def _watching(self, call, *args):
        """Watching the job never ends it: a failure of the watch is said once, and the job
        goes on unwatched."""
        try:
            return call(*args) or ()
        except Exception as e:  # noqa: BLE001
            self.watch = None
            self.send(f"[tfdistributed] watching the job failed ({type(e).__name__}: {e}); it "
                      f"goes on without progress, history or stall reports")
            return ()


def job_relay(watch) -> Relay:
    """The :class:`Relay` of a job watched as ``watch`` (a checked
    :class:`~tfdistributed.engines.options.Watch`), with the job's
    :class:`~tfdistributed.watch.collector.JobWatch`."""
    return Relay(echo=watch.echo, on_output=watch.on_output, show_all=watch.show_all,
                 watch=job_watch(watch.progress, watch.stall_warning, echo=watch.echo,
                                 on_output=watch.on_output, tensorboard=watch.tensorboard))
