"""One progress display for a whole launched job, instead of every task's progress bar.

Where the output is a terminal, one line redrawn about once a second (``\\r``); elsewhere (a
SLURM output file, CI, a knitted page, R's ``sink()``) plain lines, one per epoch, never
carriage-return animations. The words are Keras' own progress bar's: ``epoch 3/10 - 12/22 -
loss: 0.4312 - accuracy: 0.8701``, then the job's examples/s, elapsed and remaining time.
"""

from __future__ import annotations

import re

# Keras' own per-task progress output, hidden from the stream while the job's display runs (and
# kept in each task's output): "Epoch 3/10" and "22/22 - 1s - 23ms/step - loss: ...".
KERAS_PROGRESS = re.compile(r"^(Epoch \d+/\d+\s*$|\s*\d+/\d+ .*(\d+m?s/step|ETA|━))")


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _logs(logs: dict) -> str:
    return "".join(f" - {k}: {v:.4f}" for k, v in logs.items())


def line(*, epoch: int, epochs, step, steps, logs: dict, examples_per_second, elapsed: float,
         remaining, workers=(None, None)) -> str:
    """One line: where the job is, its last logs, its pace and time; and, for an elastic job
    running with fewer workers than it wants (``workers``: how many now, how many wanted),
    ``2 of 3 workers``."""
    text = f"epoch {epoch + 1}/{epochs or '?'}"
    if step is not None:
        text += f" - {step}/{steps or '?'}"
    text += _logs(logs)
    if examples_per_second:
        text += f" - {examples_per_second:,.0f} examples/s"
    text += f" - {_duration(elapsed)} elapsed"
    if remaining is not None:
        text += f", ~{_duration(remaining)} left"
    now, wanted = workers
    if now and wanted and now < wanted:
        text += f" - {now} of {wanted} workers"
    return text


def remaining(*, epoch: int, epochs, step, steps, step_seconds) -> float | None:
    """Seconds left at this pace, or None when it cannot be told."""
    if not (epochs and steps and step_seconds):
        return None
    left = (epochs - epoch - 1) * steps + (steps - (step or 0))
    return max(0.0, left * step_seconds)
