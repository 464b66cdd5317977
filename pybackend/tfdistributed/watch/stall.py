"""Stalls named: which task the others wait for, and where it is.

In synchronous multi-worker training every step ends with an all-reduce that waits for every
task; one task that does not get there (asleep in a callback, blocked in its input pipeline,
out of data a step early) leaves the others waiting inside the collective, where TensorFlow says
nothing (it has no collective timeout by default). :func:`diagnose` reads every task's last
state (:meth:`tfdistributed.watch.recorder.TaskState.snapshot`, with :func:`where` it is once it
has made no step for a while) and names the task the others wait for, in the words of the
classic causes. The launcher calls it with its tasks' records
(:mod:`tfdistributed.watch.collector`); in a job started by hand, each task calls it with the
states the tasks publish in TensorFlow's coordination service key-value store (:class:`Peers`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
import threading
import time

# Seconds without a record after which a task is said to be silent (it beats every 2 s).
SILENT = 20.0
_LIBRARY = tuple(os.path.realpath(p) + os.sep for p in {
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"],
    sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})
# reticulate's own Python helpers (R calling Python, Python calling R) are plumbing too, and so
# are keras3's (kerastools: the Python wrapper of each R function given to callback_lambda()).
_PLUMBING = ("rpytools", os.path.join("keras3", "python", "kerastools"), "<frozen", "<string>")


def _is_user(filename: str) -> bool:
    if any(p in filename for p in _PLUMBING):
        return False
    return not os.path.realpath(filename).startswith(_LIBRARY)


def _frame_text(frame) -> str:
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"


def _stack(frame, limit: int = 12) -> list:
    """A thread's stack, outermost first, its innermost ``limit`` frames."""
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return [_frame_text(f) for f in reversed(frames[:limit])]


def _innermost_user(frame) -> str | None:
    while frame is not None:
        if _is_user(frame.f_code.co_filename):
            return _frame_text(frame)
        frame = frame.f_back
    return None


_HOOK = re.compile(r"^_?(on_\w+)$")


def _training_thread_at(frame) -> str | None:
    """The innermost place of the training thread worth naming: a frame of user code, or a
    callback hook (``"a callback's on_train_batch_end, in R code"``: a Keras callback calling R
    through reticulate, whose R frames Python cannot see), whichever is innermost."""
    in_r = False
    while frame is not None:
        in_r = in_r or "rpytools" in frame.f_code.co_filename
        if _is_user(frame.f_code.co_filename):
            return _frame_text(frame)
        hook = _HOOK.match(frame.f_code.co_name)
        if hook:
            return f"a callback's {hook.group(1)}" + (", in R code" if in_r else "")
        frame = frame.f_back
    return None


def where(main_ident: int) -> dict:
    """Where this process is: the training thread's innermost frame of user code (None when it
    is in library code only, e.g. waiting inside a step), its stack, and the other threads
    running user code (a generator or a ``py_function`` of the input pipeline)."""
    frames = sys._current_frames()
    frames.pop(threading.get_ident(), None)  # the watcher itself
    main = frames.pop(main_ident, None)
    busy = [at for at in (_innermost_user(f) for f in frames.values()) if at]
    return {"user": _training_thread_at(main), "stack": _stack(main), "busy": busy}


def _late(name, state, step) -> str | None:
    """Why the others wait for this task at step ``step``, or None if they do not."""
    where_ = state.get("where") or {}
    if state["phase"] in ("ended", "idle"):
        return (f"{name} finished training after {state['steps']} steps while the others wait "
                f"in step {step}: the workers were not given the same number of steps (epochs or "
                f"steps_per_epoch that differ between workers, e.g. counted from each worker's "
                f"own part of the data, which ran out early). Give every worker the same epochs "
                f"and steps_per_epoch (repeat() the dataset), or let fit() batch arrays")
    if state["phase"] != "train":
        return None
    if state.get("silent", 0.0) > SILENT:
        return (f"{name} has sent nothing for {state['silent']:.0f} s (its last step was "
                f"{state['steps']}): its process is alive but its Python is blocked (code that "
                f"holds Python's interpreter lock, or the process is stopped)")
    if state["steps"] < step - 1 or (not state["in_step"] and state["steps"] == step - 1):
        at = where_.get("user")
        return (f"{name} has not begun step {step} (its last was {state['steps']}): it is in a "
                f"callback or in the code between two steps"
                + (f", at {at}" if at else ""))
    if state["in_step"] and where_.get("busy"):
        return (f"{name} is inside step {step}, in its input pipeline, at "
                f"{where_['busy'][0]}")
    return None


def diagnose(states: dict, warning: float) -> str | None:
    """Name a stall from every task's last state (``{name: snapshot}``), or None when the job
    has made a step within ``warning`` seconds (or has not begun training)."""
    training = {n: dict({"steps": 0, "in_step": False, "idle": 0.0}, **s)
                for n, s in states.items() if s.get("phase")}
    active = [s for s in training.values() if s["phase"] in ("train", "test", "predict")]
    if not active or not any(s.get("started") for s in active):
        return None
    idle = min(s["idle"] for s in active)
    if idle < warning:
        return None
    step = max(s["steps"] for s in training.values()) + 1
    waiting = sorted(n for n, s in training.items() if s["in_step"] and not _late(n, s, step))
    late = [why for why in (_late(n, s, step) for n, s in sorted(training.items())) if why]
    verb = " waits" if len(waiting) == 1 else " wait"
    head = (f"No step for {idle:.0f} s: " + (", ".join(waiting) + verb if waiting else
                                             "the tasks wait") + f" in step {step}")
    if late:
        return f"{head} for another task. " + "; ".join(late) + "." + _stacks(training, late)
    return (f"{head} and no task is outside it: one is stuck in its input pipeline or its "
            f"computation (a collective may also have failed silently)." + _stacks(training, None))


def _stacks(states: dict, late) -> str:
    lines = []
    for name, state in sorted(states.items()):
        stack = (state.get("where") or {}).get("stack")
        if stack and (late is None or any(w.startswith(name + " ") for w in late)):
            lines.append(f"\n  {name}'s stack, innermost first: "
                         + " <- ".join(reversed(stack[-6:])))
    return "".join(lines)


class Peers:
    """The other tasks of a multi-worker job started by hand, through TensorFlow's coordination
    service key-value store (every task of a multi-worker job reaches it; TensorFlow runs it
    for the job)."""

    def __init__(self, me: str, others: list):
        from tensorflow.python.eager import context

        self.context = context.context()
        self.me, self.others = me, others

    @classmethod
    def of(cls, strategy) -> "Peers | None":
        resolver = getattr(strategy, "cluster_resolver", None)
        try:
            spec = resolver.cluster_spec().as_dict()
            me = f"{resolver.task_type} {int(resolver.task_id)}"
        except Exception:  # noqa: BLE001 - no cluster: nobody to compare with
            return None
        names = [f"{job} {i}" for job in ("chief", "worker") for i in range(
            len(spec.get(job, ())) if isinstance(spec.get(job), list) else len(spec.get(job, {})))]
        if len(names) < 2 or me not in names:
            return None
        return cls(me, [n for n in names if n != me])

    @staticmethod
    def _key(name: str) -> str:
        return "tfdistributed/watch/" + name.replace(" ", "/")

    def publish(self, state: dict) -> None:
        value = json.dumps(dict(state, at=time.time()), default=str)
        try:
            self.context.delete_config_key_value(self._key(self.me))
        except Exception:  # noqa: BLE001 - not there yet
            pass
        self.context.set_config_key_value(self._key(self.me), value)

    def states(self, mine: dict) -> dict:
        """Every task's last published state (this one's ``mine``), aged to now."""
        out = {self.me: mine}
        for name in self.others:
            try:
                state = json.loads(self.context.get_config_key_value(self._key(name), 200))
            except Exception:  # noqa: BLE001 - never published: not training yet
                continue
            state["idle"] += max(0.0, time.time() - state.pop("at", time.time()))
            out[name] = state
        return out
