"""A launched job's curves in TensorBoard, written by the launcher alone.

``launch(..., watch=Watch(tensorboard="logs/run1"))`` writes, as the job runs, what Keras' own
TensorBoard callback writes for one process, for the whole job: each epoch's metrics under
``train/`` and the validation's under ``validation/`` (tags ``epoch_loss``, ``epoch_accuracy``...),
and, under ``job/``, each task's examples/s per epoch (``examples_per_second/worker_1``) and the
restarts.
One writer for the whole job (the launcher, which hears every task), so workers never write
over each other's event files. TensorFlow is imported only when a log directory is asked for.
"""

from __future__ import annotations

import os


class TensorBoardLog:
    """Event files under ``logdir``; :meth:`write` takes ``(kind, name, value, step)`` events
    and is called on the launcher's own thread."""

    def __init__(self, logdir):
        self.logdir = os.fspath(logdir)
        self._writers = {}

    def _writer(self, part: str):
        if part not in self._writers:
            import tensorflow as tf

            self._writers[part] = tf.summary.create_file_writer(os.path.join(self.logdir, part))
        return self._writers[part]

    def write(self, events) -> None:
        import tensorflow as tf

        for part, tag, value, step in events:
            with self._writer(part).as_default():
                tf.summary.scalar(tag, value, step=step)
        for writer in self._writers.values():
            writer.flush()


def epoch_events(epoch: int, logs: dict) -> list:
    """The events of one epoch's logs, split as Keras' TensorBoard callback splits them."""
    events = []
    for key, value in logs.items():
        if key.startswith("val_"):
            events.append(("validation", f"epoch_{key[4:]}", value, epoch))
        else:
            events.append(("train", f"epoch_{key}", value, epoch))
    return events


def task_events(task: str, epoch: int, figures: dict, tasks: int) -> list:
    """A task's examples/s in one epoch (its share of the global batch at its step pace)."""
    per_step, step_seconds = figures.get("examples_per_step"), figures.get("step_seconds")
    if not (per_step and step_seconds):
        return []
    rate = per_step / max(1, tasks) / step_seconds
    return [("job", f"examples_per_second/{task.replace(' ', '_')}", rate, epoch)]
