"""Watching a job (tfdistributed.watch): the history, per-task figures, progress, stragglers and
stalls of launched jobs, and the stalls of a job started by hand, on real 2-worker clusters."""

import json
import os
import re
import subprocess
import sys
import sysconfig
import time

import portpicker
import pytest

import tfdistributed as tfd
from tfdistributed.watch import channel, collector, stall
from tfdistributed.watch.collector import JobWatch

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "watched_job.py")


# --- no cluster: the pieces ----------------------------------------------------------------------

def test_a_record_is_found_after_text_another_thread_printed_first():
    assert channel.parse("plain line") == ("plain line", None)
    assert channel.parse('@tfdistributed {"kind": "beat", "steps": 3}') == \
        (None, {"kind": "beat", "steps": 3})
    assert channel.parse('12/22 [===@tfdistributed {"kind": "end"}') == \
        ("12/22 [===", {"kind": "end"})
    # Only looks like one: stays text.
    assert channel.parse("@tfdistributed {not json") == ("@tfdistributed {not json", None)
    assert channel.parse('@tfdistributed [1, 2]') == ('@tfdistributed [1, 2]', None)


def state(**kw):
    base = {"phase": "train", "epoch": 0, "batch": 7, "steps": 7, "in_step": True,
            "idle": 80.0, "started": True}
    return dict(base, **kw)


def test_a_stall_names_the_task_in_a_callback_and_where():
    states = {"worker 0": state(),
              "worker 1": state(in_step=False, where={"user": "train.py:12 in on_batch_end",
                                                      "stack": ["a.py:1 in f"], "busy": []})}
    said = stall.diagnose(states, 60)
    assert said.startswith("No step for 80 s: worker 0 waits in step 8 for another task.")
    assert "worker 1 has not begun step 8 (its last was 7): it is in a callback or in the code " \
           "between two steps, at train.py:12 in on_batch_end" in said
    assert "worker 1's stack, innermost first: a.py:1 in f" in said
    assert stall.diagnose(states, 90) is None  # not for long enough yet


def _where_inside(places):
    """``stall._training_thread_at`` of a real stack: each (file, function) of ``places``,
    outermost first, calls the next, and the innermost is where the training thread is."""
    seen = {}
    inner = lambda: seen.setdefault("at", stall._training_thread_at(sys._getframe(1)))  # noqa: E731
    for filename, name in reversed(places):
        namespace = {"inner": inner}
        exec(compile(f"def {name}():\n    return inner()\n", filename, "exec"), namespace)
        inner = namespace[name]
    inner()
    return seen["at"]


def test_a_callback_calling_r_is_named_through_reticulate_and_keras3():
    library = sysconfig.get_paths()["purelib"]
    hook = (os.path.join(library, "keras", "src", "callbacks", "callback_list.py"),
            "_on_train_batch_end")
    r_call = ("/usr/lib/R/site-library/reticulate/python/rpytools/call.py", "python_function")
    # keras3's callback_lambda() wraps the R function in Python of its own (kerastools).
    keras3 = ("/r/library/keras3/python/kerastools/callback.py", "wrapper")
    for stack in ([hook, r_call], [hook, keras3, r_call]):
        assert _where_inside(stack) == "a callback's on_train_batch_end, in R code", stack
    assert _where_inside([hook, ("/home/me/train.py", "on_batch_end"), r_call]).startswith(
        "train.py:")


def test_a_stall_names_a_blocked_input_pipeline_and_uneven_steps():
    blocked = {"worker 0": state(), "worker 1": state(where={"busy": ["data.py:3 in batches"]})}
    assert "worker 1 is inside step 8, in its input pipeline, at data.py:3 in batches" in \
        stall.diagnose(blocked, 60)
    ended = {"worker 0": state(), "worker 1": state(phase="ended", in_step=False, idle=0.0)}
    said = stall.diagnose(ended, 60)
    assert "worker 1 finished training after 7 steps while the others wait in step 8: the " \
           "workers were not given the same number of steps" in said
    unknown = {"worker 0": state(), "worker 1": state()}
    assert "no task is outside it: one is stuck in its input pipeline or its computation" in \
        stall.diagnose(unknown, 60)


def test_no_stall_before_the_first_step_or_while_a_task_steps():
    assert stall.diagnose({"worker 0": state(started=False), "worker 1": state(started=False)},
                          60) is None
    assert stall.diagnose({"worker 0": state(), "worker 1": state(idle=1.0)}, 60) is None


def test_a_straggler_is_the_task_whose_own_work_is_slow():
    # Worker 1 spends 50 ms a step outside it; worker 0 waits for it inside the step.
    figures = {"worker 0": {"step_seconds": 0.055, "inside": 0.054, "outside": 0.0},
               "worker 1": {"step_seconds": 0.055, "inside": 0.004, "outside": 0.05}}
    found = collector.stragglers(figures)
    assert list(found) == ["worker 1"]
    assert "takes 11.0x the others'" in found["worker 1"]
    even = {"worker 0": {"step_seconds": 0.005, "inside": 0.0049, "outside": 0.0},
            "worker 1": {"step_seconds": 0.005, "inside": 0.0046, "outside": 0.0002}}
    assert collector.stragglers(even) == {}


def test_the_history_has_each_epoch_once_across_restarts():
    watch = JobWatch(display=None)
    for epoch, loss in ((0, 3.0), (1, 2.0)):
        watch.record("worker 0", {"kind": "epoch", "epoch": epoch, "logs": {"loss": loss}})
    watch.new_attempt(1)  # resumed at epoch 1: trained again
    for epoch, loss in ((1, 1.9), (2, 1.5)):
        watch.record("worker 0", {"kind": "epoch", "epoch": epoch, "logs": {"loss": loss}})
    watch.record("worker 1", {"kind": "epoch", "epoch": 2, "logs": {"loss": 9.0}})
    assert watch.history() == {"loss": [3.0, 1.9, 1.5]}
    assert watch.epochs() == [0, 1, 2]


def test_a_second_fit_replaces_the_epochs_it_trains_again_and_keeps_those_before():
    watch = JobWatch(display=None)

    def fit(first, losses):
        watch.record("worker 0", {"kind": "begin", "epochs": first + len(losses)})
        for epoch, loss in enumerate(losses, first):
            watch.record("worker 0", {"kind": "epoch", "epoch": epoch, "logs": {"loss": loss}})

    fit(0, [3.0, 2.0, 1.0])
    fit(0, [0.9, 0.8])  # again from the start, 2 epochs: its own, not mixed with the first's
    assert watch.history() == {"loss": [0.9, 0.8]} and watch.epochs() == [0, 1]
    fit(2, [0.7])  # fit(initial_epoch=2): continues, as Keras numbers the epochs
    assert watch.history() == {"loss": [0.9, 0.8, 0.7]}


def test_the_watch_options_are_checked():
    with pytest.raises(tfd.ArgumentTypeError, match="`progress` must be"):
        tfd.launch("x.py", watch=tfd.Watch(progress="bars"))
    with pytest.raises(tfd.ArgumentTypeError, match="`stall_warning` must be a number of seconds"):
        tfd.launch("x.py", watch=tfd.Watch(stall_warning="soon"))


# --- real 2-worker jobs ----------------------------------------------------------------------------

def run(tmp_path, *args, **kwargs):
    """launch() of the watched job: its result (or error), every line streamed, and what each
    worker's own fit returned."""
    outdir = tmp_path / "out"
    outdir.mkdir()
    lines = []
    options = dict(dict(timeout=300, watch=tfd.Watch(stall_warning=20)), **kwargs)
    options["watch"] = options["watch"].replace(echo=False, on_output=lines.append)
    try:
        outcome = tfd.launch(SCRIPT, workers=2, args=[str(outdir), *args], **options)
    except tfd.LaunchError as error:
        outcome = error
    own = {}
    for name in os.listdir(outdir):
        with open(outdir / name) as f:
            own[name[:-5]] = json.load(f)
    return outcome, lines, own


@pytest.fixture(scope="module")
def even(tmp_path_factory):
    where = tmp_path_factory.mktemp("even")
    return run(where, "--epochs", "3",
               watch=tfd.Watch(stall_warning=20, tensorboard=str(where / "tb")))


def scalars(directory) -> dict:
    """``{tag: [(step, value)]}`` of the TensorBoard event files in ``directory``."""
    import tensorflow as tf

    out = {}
    for name in sorted(os.listdir(directory)):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
            for value in event.summary.value:
                number = float(tf.make_ndarray(value.tensor))
                out.setdefault(value.tag, []).append((event.step, number))
    return out


@pytest.mark.cluster
def test_a_launched_job_brings_back_the_chiefs_history(even):
    result, lines, own = even
    assert result.epochs == [0, 1, 2]
    assert result.history == own["worker-0"]  # the same numbers, validation included
    assert set(result.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}


@pytest.mark.cluster
def test_one_progress_line_per_epoch_instead_of_each_workers_bars(even):
    result, lines, _ = even
    progress = [ln for ln in lines if ln.startswith("[tfdistributed] epoch")]
    assert [ln.split(" - ")[0] for ln in progress] == \
        [f"[tfdistributed] epoch {e}/3" for e in (1, 2, 3)]
    # Keras' own words and order (its progress bar's).
    assert re.search(r" - 15/15 - accuracy: [\d.]+ - loss: [\d.]+ - val_accuracy: [\d.]+ - "
                     r"val_loss: [\d.]+ - [\d,]+ examples/s - \d+ s elapsed", progress[0]), \
        progress[0]
    # Keras' own per-epoch lines are in each task's output, not in the stream.
    assert not [ln for ln in lines if re.search(r"\d+/\d+ - .*step", ln)]
    chief = result.task("worker", 0).output
    assert any(re.search(r"\d+/\d+ - .*step - accuracy", ln) for ln in chief), chief
    assert not any("@tfdistributed" in ln for t in result.tasks for ln in t.output)


@pytest.mark.cluster
def test_each_task_has_its_figures_and_an_even_job_has_no_straggler(even):
    result, lines, _ = even
    rows = {r["task"]: r for r in result.workers}
    assert set(rows) == {"worker 0", "worker 1"}
    for row in rows.values():
        assert row["steps"] == 3 * 15 and row["examples_per_second"] > 0
        assert row["median_step_seconds"] > 0 and row["wait_seconds"] >= 0
        assert row["restarts"] == 0 and not row["straggler"]
    assert result.stragglers == []
    assert not [ln for ln in lines if "straggler" in ln or "No step for" in ln]


@pytest.mark.cluster
def test_the_job_writes_its_curves_for_tensorboard(even, tmp_path_factory):
    result, _, _ = even
    root = next(p for p in tmp_path_factory.getbasetemp().glob("even*/tb"))
    train, validation, job = (scalars(root / part) for part in ("train", "validation", "job"))
    for key, values in result.history.items():
        tag, got = (f"epoch_{key[4:]}", validation) if key.startswith("val_") else \
            (f"epoch_{key}", train)
        assert [step for step, _ in got[tag]] == [0, 1, 2]
        assert [v for _, v in got[tag]] == pytest.approx(values)
    assert {"examples_per_second/worker_0", "examples_per_second/worker_1"} <= set(job)
    assert all(v > 0 for _, v in job["examples_per_second/worker_1"])


@pytest.mark.cluster
def test_plain_model_fit_brings_back_its_history_too(tmp_path):
    result, _, own = run(tmp_path, "--keras-fit")
    assert result.history == own["worker-0"] and result.epochs == [0, 1]


@pytest.mark.cluster
def test_a_script_that_fits_twice_brings_back_its_last_fits_history(tmp_path):
    # 3 epochs, then 2 from the start: epoch 3 of the first fit must not stay behind.
    result, _, own = run(tmp_path, "--epochs", "3", "--then", "2")
    assert result.history == own["worker-0"] and result.epochs == [0, 1]


@pytest.mark.cluster
def test_a_worker_slowed_in_a_callback_is_named_the_straggler(tmp_path):
    result, lines, _ = run(tmp_path, "--slow-callback", "0.05")
    assert result.stragglers == ["worker 1"]
    named = [ln for ln in lines if "is a straggler" in ln]
    assert named and all(ln.startswith("[tfdistributed] worker 1 is a straggler in epoch")
                         for ln in named), named
    assert "ms of it outside the step" in named[0]
    rows = {r["task"]: r for r in result.workers}
    assert rows["worker 1"]["straggler"] and not rows["worker 0"]["straggler"]
    assert rows["worker 0"]["wait_seconds"] > 0.03 > rows["worker 1"]["wait_seconds"]


# The stall jobs' stall_warning: short, so that each waits little (the tasks beat every 2 s).
STALL = 8
# A stall named no sooner than stall_warning, and within the test's timeout.
NAMED = re.compile(rf"\[tfdistributed\] No step for ([89]|[1-3]\d) s")
# Asleep after its step 6 (batch 5): the others wait in step 7.
ASLEEP = ("worker 0 waits in step 7 for another task. worker 1 has not begun step 7 (its last "
          "was 6): it is in a callback or in the code between two steps, at watched_job.py")


@pytest.mark.cluster
def test_a_worker_asleep_in_a_callback_is_named_and_the_stall_timeout_restarts_the_job(tmp_path):
    error, lines, _ = run(tmp_path, "--stall-callback", "5",
                          watch=tfd.Watch(stall_warning=STALL, stall_timeout=12), timeout=240,
                          restarts=tfd.Restarts(max_restarts=1))
    said = [ln for ln in lines if "No step for" in ln]
    assert said and NAMED.match(said[0]) and ASLEEP in said[0], lines[-20:]
    # Each attempt ended itself on the stall timeout, and was restarted once.
    assert isinstance(error, tfd.LaunchError)
    assert [a["ended"] for a in error.attempts] == ["exited with status 76"] * 2
    assert error.attempts[0]["error"].startswith("StallError: no step for")
    assert "restarting the job" in "\n".join(lines)


@pytest.mark.cluster
def test_a_blocked_input_pipeline_is_named_and_a_timeout_repeats_it(tmp_path):
    started = time.monotonic()
    error, lines, _ = run(tmp_path, "--stall-input", "5", watch=tfd.Watch(stall_warning=STALL),
                          timeout=35)
    assert isinstance(error, tfd.LaunchTimeoutError)
    # Blocked at its 6th batch, which TensorFlow asked for a few steps ahead (prefetching).
    words = ", in its input pipeline, at watched_job.py"
    said = [ln for ln in lines if "No step for" in ln]
    assert said and NAMED.match(said[0]) and words in said[0], lines[-20:]
    assert "The job had stalled" in str(error) and words in str(error)
    assert time.monotonic() - started < 120


@pytest.mark.cluster
def test_uneven_steps_are_named_as_such(tmp_path):
    error, lines, _ = run(tmp_path, "--uneven", "--epochs", "2",
                          watch=tfd.Watch(stall_warning=STALL), timeout=35)
    said = [ln for ln in lines if "No step for" in ln]
    assert said and "worker 1 finished training after 32 steps while the others wait in step " \
                    "33: the workers were not given the same number of steps" in said[0], said


@pytest.mark.cluster
def test_a_job_started_by_hand_names_its_own_stall(tmp_path):
    """No launcher: two processes started with their TF_CONFIG, as on a cluster by hand; the
    stall is named by the tasks themselves, through the coordination service's key-value store."""
    ports = [portpicker.pick_unused_port() for _ in range(2)]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    env = dict(os.environ, TFDISTRIBUTED_STALL_WARNING=str(STALL))
    env.pop(channel.ENV, None)
    procs, logs = [], [tmp_path / f"worker-{i}.log" for i in range(2)]
    for i in range(2):
        task_env = dict(env, TF_CONFIG=json.dumps({"cluster": cluster,
                                                   "task": {"type": "worker", "index": i}}))
        with open(logs[i], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, SCRIPT, str(tmp_path), "--stall-callback", "5"], env=task_env,
                stdout=log, stderr=subprocess.STDOUT))
    found = None
    try:
        deadline = time.monotonic() + 150
        while found is None and time.monotonic() < deadline:
            time.sleep(1)
            found = next((ln for ln in logs[0].read_text().splitlines()
                          if "No step for" in ln), None)
    finally:
        for p in procs:  # SIGKILL: a multi-worker task notes a SIGTERM and keeps waiting
            p.kill()
            p.wait()
    assert found, logs[0].read_text()[-3000:]
    assert "worker 0 waits in step 7 for another task. worker 1 has not begun step 7" in found
