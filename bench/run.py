"""tfdistributed benchmarks: ratios against the engines we wrap, measured side by side.

    make bench                                    # full run (~20 min), writes bench/results.*
    .venv/bin/python bench/run.py --quick         # smoke test (< 4 min), bench/results-quick.*
    .venv/bin/python bench/run.py --only 6 --out bench/results-generator   # one group only

Group 9, across hosts, is bench/hosts.py (root only), group 10, self-healing, is
bench/healing.py, 10b, hosts that come and go, is bench/elastic.py (root only), group 11,
watching a job, is bench/watching.py, and group 12, gradient packs
overlapping the backward pass across hosts, is bench/overlap.py (root only): each has its own
rounds and report (bench/results-<name>[-quick].md), so each runs once, as its own process,
after the other groups, and this report says where its results went or why it failed.

Every measured run is a fresh process (or a fresh local cluster) running bench/workloads.py,
bench/r_fit.R or bench/r_generator.R. The arms of a benchmark alternate within each round, and
their order flips every round (A B, B A, ...), so drift of this shared machine's load hits both alike; each ratio is the
median of the per-round ratios, shown with the medians of the values behind it. One failing run
or benchmark is reported in the table and never stops the others; every run has a timeout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOADS = HERE / "workloads.py"
R_SCRIPT = HERE / "r_fit.R"
R_GENERATOR = HERE / "r_generator.R"
RESULT_TAG = "BENCH_RESULT"
HOSTS_GROUP = "9. Across hosts (bench/hosts.py)"
HEALING_GROUP = "10. Self-healing (bench/healing.py)"
ELASTIC_GROUP = "10b. Hosts that come and go (bench/elastic.py)"
WATCHING_GROUP = "11. Watching a job (bench/watching.py)"
OVERLAP_GROUP = "12. Packs overlapping the backward pass, across hosts (bench/overlap.py)"
# Standalone groups: (title, script, report prefix), each run once as its own process.
STANDALONE = ((HOSTS_GROUP, "hosts.py", "results-hosts"),
              (HEALING_GROUP, "healing.py", "results-healing"),
              (ELASTIC_GROUP, "elastic.py", "results-elastic"),
              (WATCHING_GROUP, "watching.py", "results-watching"),
              (OVERLAP_GROUP, "overlap.py", "results-overlap"))


@dataclass(frozen=True)
class Config:
    reps: int
    digits_epochs: int
    cnn_epochs: int
    cnn_examples_per_replica: int
    heavy_epochs: int
    heavy_examples_per_replica: int
    ps_epochs: int
    ps_steps: int
    timeout: float


FULL = Config(reps=4, digits_epochs=40, cnn_epochs=6, cnn_examples_per_replica=4096,
              heavy_epochs=4, heavy_examples_per_replica=2048,
              ps_epochs=6, ps_steps=100, timeout=300)
# Two epochs past the first are the fewest that still measure past tracing.
QUICK = Config(reps=1, digits_epochs=4, cnn_epochs=3, cnn_examples_per_replica=512,
               heavy_epochs=3, heavy_examples_per_replica=512,
               ps_epochs=3, ps_steps=10, timeout=150)


class RunFailed(Exception):
    pass


def base_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("R_LIBS", str(ROOT / ".rlib"))
    env.setdefault("RETICULATE_PYTHON", sys.executable)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def failure_reason(text: str) -> str:
    """The most telling line of a failed run's output, short enough for a table cell."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if any(word in line for word in ("Error", "error", "Exception", "Timeout", "timed out")):
            return line[:200]
    return (lines[-1] if lines else "no output")[:200]


def parse_results(lines) -> list[dict]:
    return [json.loads(line.split(RESULT_TAG, 1)[1]) for line in lines if RESULT_TAG in line]


def run_process(argv, *, timeout, cpus=None, env=None) -> tuple[dict, float]:
    """Run one process; its BENCH_RESULT and the wall clock just before it started."""
    full_env = base_env()
    full_env.update(env or {})
    started = time.time()
    proc = subprocess.Popen(
        [str(a) for a in argv], env=full_env, cwd=ROOT, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"timed out after {timeout:g} s") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = out.decode(errors="replace")
    results = parse_results(text.splitlines())
    if proc.returncode != 0 or not results:
        raise RunFailed(f"exit {proc.returncode}: {failure_reason(text)}")
    return results[0], started


def run_cluster(args, *, timeout, workers, ps=0, chief=False, pin_cpus, env=None):
    """Run workloads.py as a local cluster; the BENCH_RESULT of each task that printed one.

    ``pin_cpus``: task i on core i % ncores with one TensorFlow thread (pinning.py)."""
    from tfdistributed import Scaling, TFDistributedError, Watch, engines, launch

    from pinning import pin_tasks

    full_env = base_env()
    full_env.update(env or {})
    started = time.time()
    try:
        result = launch(str(WORKLOADS), Scaling(workers=workers, ps=ps, chief=chief), args=args,
                        timeout=timeout, env=full_env, cwd=ROOT, watch=Watch(echo=False),
                        engine=engines.Local(prepare_task=pin_tasks() if pin_cpus else None))
    except TFDistributedError as e:
        raise RunFailed(failure_reason(str(e))) from None
    found = [r for task in result.tasks for r in parse_results(task.output)]
    if not found:
        raise RunFailed("no task printed a result")
    return found, started


# --- the arms: one measured run each, returning {metric: value} --------------------------------

def arm_r(cfg):
    res, _ = run_process(["Rscript", "--no-save", "--no-restore", R_SCRIPT, cfg.digits_epochs,
                          64, "default"], timeout=cfg.timeout)
    return {"fit_seconds": res["fit_seconds"], "via": res["via"]}


def arm_python_digits(cfg):
    res, _ = run_process([sys.executable, WORKLOADS, "digits", "--epochs", cfg.digits_epochs,
                          "--strategy", "default"], timeout=cfg.timeout)
    return {"fit_seconds": res["fit_seconds"]}


def r_generator_arm(mode):
    def arm(cfg):
        res, _ = run_process(["Rscript", "--no-save", "--no-restore", R_GENERATOR, mode,
                              cfg.digits_epochs], timeout=cfg.timeout)
        return {"examples_per_second": res["examples_per_second"], "accuracy": res["accuracy"]}

    return arm


def cnn_args(cfg, legacy=False, heavy=False, steps_per_execution=1):
    if steps_per_execution > 1:
        return cnn_args(cfg, legacy, heavy) + ["--steps-per-execution", str(steps_per_execution)]
    if heavy:  # the compute-heavier workload: 128 images per replica, ~6x the FLOPs per image
        args = ["cnn", "--model", "heavy", "--batch", "128", "--epochs",
                str(cfg.heavy_epochs), "--examples-per-replica", str(cfg.heavy_examples_per_replica)]
    else:
        args = ["cnn", "--epochs", str(cfg.cnn_epochs), "--examples-per-replica",
                str(cfg.cnn_examples_per_replica)]
    return args + (["--legacy"] if legacy else [])


def cnn_cluster(cfg, legacy, heavy=False, steps_per_execution=1):
    # Lock-step workers: the job is as fast as its slower worker and starts when both have.
    found, started = run_cluster(cnn_args(cfg, legacy, heavy, steps_per_execution),
                                 timeout=cfg.timeout, workers=2, pin_cpus=True)
    if len(found) != 2:
        raise RunFailed(f"{len(found)} of 2 workers reported")
    return {"examples_per_second": min(r["examples_per_second"] for r in found),
            "startup_seconds": max(r["first_step"] for r in found) - started,
            "global_batch": found[0]["global_batch"], "params": found[0]["params"]}


def shrunk_arm(accumulate: bool):
    """A 2-worker job that keeps the global batch of a 4-worker job of 64 per replica (256):
    each replica takes 128 examples a step (growing: what an elastic job does when it shrinks),
    or 2 accumulated steps of 64 (fit(max_replica_batch=64))."""
    def arm(cfg):
        args = cnn_args(cfg) + ["--batch", "128"] + (
            ["--max-replica-batch", "64"] if accumulate else [])
        found, _ = run_cluster(args, timeout=cfg.timeout, workers=2, pin_cpus=True)
        if len(found) != 2:
            raise RunFailed(f"{len(found)} of 2 workers reported")
        if found[0]["accumulated"] != (2 if accumulate else 1):
            raise RunFailed(f"accumulated {found[0]['accumulated']} steps per update")
        return {"examples_per_second": min(r["examples_per_second"] for r in found),
                "peak_rss_mib": max(r["peak_rss_mib"] for r in found)}

    return arm


def arm_k3_two_workers(cfg):
    return cnn_cluster(cfg, legacy=False)


def arm_legacy_two_workers(cfg):
    return cnn_cluster(cfg, legacy=True)


def arm_k3_one_process(cfg, heavy=False, steps_per_execution=1):
    # Pinned exactly as pinning.pin_tasks() pins one worker: core 0, one TensorFlow thread.
    res, started = run_process([sys.executable, WORKLOADS,
                                *cnn_args(cfg, heavy=heavy,
                                          steps_per_execution=steps_per_execution)],
                               timeout=cfg.timeout,
                               cpus={0}, env={"TF_NUM_INTRAOP_THREADS": "1",
                                              "TF_NUM_INTEROP_THREADS": "1"})
    return {"examples_per_second": res["examples_per_second"],
            "startup_seconds": res["first_step"] - started, "global_batch": res["global_batch"],
            "params": res["params"]}


def mirrored_arm(devices):
    def arm(cfg):
        # Both cores, one thread per op, two inter-op threads: one replica can keep one core
        # busy, two replicas can run side by side - the in-process analogue of two pinned workers.
        res, _ = run_process(
            [sys.executable, WORKLOADS, "mirrored", "--devices", devices, "--epochs",
             cfg.cnn_epochs, "--examples-per-replica", cfg.cnn_examples_per_replica],
            timeout=cfg.timeout, cpus=set(range(min(2, os.cpu_count() or 1))),
            env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"})
        return {"examples_per_second": res["examples_per_second"],
                "global_batch": res["global_batch"]}

    return arm


def ps_arm(legacy):
    def arm(cfg):
        args = ["ps", "--epochs", str(cfg.ps_epochs), "--steps", str(cfg.ps_steps)]
        # Four processes on two cores: pin_tasks() pins task i to core i % 2, one thread per op
        # (it leaves PS servers their inter-op threads, which they need to serve RPCs).
        found, _ = run_cluster(args + (["--legacy"] if legacy else []), timeout=cfg.timeout,
                               workers=2, ps=1, chief=True, pin_cpus=True)
        return {"steps_per_second": found[0]["steps_per_second"]}

    return arm


def passes_arm(repaired: bool):
    """Keras' fit (validation every epoch) + evaluate of the digits MLP under mirrored of 2
    logical CPUs, with the repair one_iterator_per_pass or with Keras' own epoch iterator."""
    def arm(cfg):
        res, _ = run_process(
            [sys.executable, WORKLOADS, "passes", "--epochs", cfg.digits_epochs],
            timeout=cfg.timeout,
            env={} if repaired else {"TFDISTRIBUTED_DISABLE_COMPAT": "one_iterator_per_pass"})
        return res

    return arm


@dataclass
class Arm:
    key: str
    label: str
    run: object
    runs: list = field(default_factory=list)  # per round: a metrics dict, or an error string

    def values(self, metric):
        return [r[metric] if isinstance(r, dict) else None for r in self.runs]

    def errors(self):
        return [r for r in self.runs if isinstance(r, str)]


def run_rounds(name, arms, cfg):
    for rnd in range(cfg.reps):
        order = arms if rnd % 2 == 0 else arms[::-1]
        for arm in order:
            if len(arm.errors()) >= 2:
                continue  # a broken arm would otherwise spend a timeout in every round
            print(f"[bench] {name}: round {rnd + 1}/{cfg.reps}, {arm.label} ...", flush=True)
            t0 = time.monotonic()
            try:
                arm.runs.append(arm.run(cfg))
                shown = {k: round(v, 3) if isinstance(v, float) else v
                         for k, v in arm.runs[-1].items()}
                print(f"[bench]   {shown} ({time.monotonic() - t0:.0f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - one failed run must not stop the others
                reason = str(e) if isinstance(e, RunFailed) else f"{type(e).__name__}: {e}"
                arm.runs.append(reason)
                print(f"[bench]   failed: {reason}", flush=True)


def run_standalone_group(title: str, script: str, prefix: str, quick: bool) -> str:
    """Run bench/``script`` (``--quick`` too when ``quick``) once; a note on how it went."""
    report = f"bench/{prefix}-quick.md" if quick else f"bench/{prefix}.md"
    argv = [sys.executable, str(HERE / script), *(["--quick"] if quick else [])]
    print(f"[bench] {title} ...", flush=True)
    # Its output is not captured: it shows its progress and its tables itself.
    proc = subprocess.Popen(argv, env=base_env(), cwd=ROOT, stdin=subprocess.DEVNULL)
    timeout = 600 if quick else 1800
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM, not SIGKILL: hosts.py deletes its network namespaces on the way out (and
        # healing.py's launch() stops its tasks).
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return f"timed out after {timeout} s and was stopped"
    if code != 0:
        return f"failed with status {code} (its reason is in the output above it)"
    return f"results in [{report}]({Path(report).name})"


# --- turning runs into table rows --------------------------------------------------------------

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def paired_ratios(a: Arm, a_metric, b: Arm, b_metric):
    return [x / y for x, y in zip(a.values(a_metric), b.values(b_metric))
            if x is not None and y is not None and y > 0]


def row(benchmark, a: Arm, b: Arm, metric, unit, *, ratio_name, target=None, meets=None,
        b_metric=None, note=""):
    """One table row: the medians of both arms and the median of the per-round ratios A/B."""
    b_metric = b_metric or metric
    ratios = paired_ratios(a, metric, b, b_metric)
    errors = a.errors() + b.errors()
    entry = {
        "benchmark": benchmark, "a": a.label, "b": b.label, "metric": metric, "unit": unit,
        "a_values": a.values(metric), "b_values": b.values(b_metric),
        "a_median": median(a.values(metric)), "b_median": median(b.values(b_metric)),
        "ratio_name": ratio_name, "ratios": ratios, "ratio": median(ratios), "target": target,
        "errors": errors, "note": note,
    }
    if entry["ratio"] is None:
        entry["status"] = f"failed: {errors[0] if errors else 'no paired runs'}"
    else:
        entry["status"] = "" if meets is None else ("meets" if meets(entry["ratio"]) else "misses")
        if errors:
            entry["status"] += f" ({len(errors)} run(s) failed: {errors[0]})"
    return entry


def scaling_arm(key: str, label: str, two: Arm, one: Arm) -> Arm:
    """A derived arm: each round's 2-worker / 1-process examples/s ratio (None where a run of
    the round failed), so that two ways of scaling measured in the same rounds compare round by
    round."""
    arm = Arm(key, label, None)
    arm.runs = [{"scaling": a / b} if a and b else "a run of the round failed"
                for a, b in zip(two.values("examples_per_second"),
                                one.values("examples_per_second"))]
    return arm


def every_round(entry):
    """A row whose target also asks every round's ratio to be >= 1.0."""
    if entry["ratio"] is not None and entry["status"].startswith("meets") \
            and min(entry["ratios"]) < 1.0:
        entry["status"] = entry["status"].replace("meets", "misses (a round < 1.0)", 1)
    return entry


def scaling_note(one: Arm, two: Arm, params, *, how) -> str:
    """Why 2 replicas fall short of 2x: per-step time against one replica's, and what it holds."""
    e1, e2 = median(one.values("examples_per_second")), median(two.values("examples_per_second"))
    b1, b2 = median(one.values("global_batch")), median(two.values("global_batch"))
    if None in (e1, e2, b1, b2):
        return ""
    t1, t2 = 1000 * b1 / e1, 1000 * b2 / e2
    grad_kib = (params or 0) * 4 / 1024
    text = (f"a step takes {t2:.1f} ms with 2 replicas vs {t1:.1f} ms with 1, for the same "
            f"{int(b1)} examples per replica")
    if t2 <= t1 * 1.05:
        return text + ": no measurable synchronisation cost."
    return text + f": {t2 - t1:.1f} ms per step go to synchronisation: " + \
        how.format(kib=f"{grad_kib:.0f} KiB") + "."


def analyse(arms: dict) -> list[dict]:
    rows = []
    r, py = arms["r"], arms["py_digits"]
    via = sorted({run["via"] for run in r.runs if isinstance(run, dict)})
    rows.append(row("1. R overhead", r, py, "fit_seconds", "s (fit call)", ratio_name="R / Python",
                    target="<= 1.05", meets=lambda x: x <= 1.05,
                    note=f"digits MLP, batch 64, default strategy, driven via {', '.join(via) or '?'}"))

    k3, legacy, one = arms["k3_2w"], arms["legacy_2w"], arms["k3_1p"]
    params = median(k3.values("params")) or median(one.values("params"))
    rows.append(every_round(row(
        "2. Keras 3 multi-worker vs legacy Keras", k3, legacy, "examples_per_second",
        "examples/s", ratio_name="Keras 3 / tf_keras", target=">= 1.2, every round >= 1.0",
        meets=lambda x: x >= 1.2,
        note="small CNN, 28x28x1, 64 per worker, 2 workers pinned 1 core each")))

    ours, theirs = arms["ps_ours"], arms["ps_legacy"]
    rows.append(row("3. Parameter server vs legacy Keras", ours, theirs, "steps_per_second",
                    "steps/s", ratio_name="ours / tf_keras", target=">= 1.0",
                    meets=lambda x: x >= 1.0,
                    note="digits MLP, batch 64, chief + 2 workers + 1 ps, pinned 2 tasks per core"))

    how = ("one all-reduce of {kib} of float32 gradients and one of the step's loss and metrics "
           "per step over loopback gRPC, and lock-step waiting for the slower worker (each "
           "worker shares its core with the rest of the machine); bench/profile_step.py breaks "
           "it down")
    rows.append(row("4a. Scaling: 2 workers vs 1", k3, one, "examples_per_second", "examples/s",
                    ratio_name="2 workers / 1 process", target=">= 1.6",
                    meets=lambda x: x >= 1.6, note=scaling_note(one, k3, params, how=how)))
    hk3, hlegacy, hone = arms["heavy_k3_2w"], arms["heavy_legacy_2w"], arms["heavy_1p"]
    hparams = median(hk3.values("params")) or median(hone.values("params"))
    rows.append(row("7a. Scaling, compute-heavier CNN: 2 workers vs 1", hk3, hone,
                    "examples_per_second", "examples/s", ratio_name="2 workers / 1 process",
                    target=">= 1.85", meets=lambda x: x >= 1.85,
                    note="3-convolution CNN, 28x28x1, 128 per replica; "
                         + scaling_note(hone, hk3, hparams, how=how)))
    rows.append(every_round(row(
        "7b. Keras 3 vs legacy Keras, compute-heavier CNN", hk3, hlegacy, "examples_per_second",
        "examples/s", ratio_name="Keras 3 / tf_keras", target=">= 1.2, every round >= 1.0",
        meets=lambda x: x >= 1.2, note="same 2-worker cluster, 128 per worker")))
    bk3, bone = arms["blocks_k3_2w"], arms["blocks_1p"]
    rows.append(row("8a. Scaling in blocks of 4 steps: 2 workers vs 1", bk3, bone,
                    "examples_per_second", "examples/s", ratio_name="2 workers / 1 process",
                    note="the small CNN of 4a compiled with steps_per_execution=4 on both sides "
                         "(the logs are all-reduced once a block), in the same rounds as 4a; "
                         + scaling_note(bone, bk3, params,
                                        how="one all-reduce of {kib} of gradients per step and "
                                            "one of the logs per 4 steps")))
    with_blocks = scaling_arm("scaling_blocks", "2 workers / 1 process, blocks of 4", bk3, bone)
    without = scaling_arm("scaling_steps", "2 workers / 1 process, step by step", k3, one)
    rows.append(row("8c. What blocks of 4 steps buy a 2-worker job", with_blocks, without,
                    "scaling", "x", ratio_name="scaling in blocks / step by step",
                    note="each round's 2-worker / 1-process ratio of 8a over that of 4a: the "
                         "four runs of a round alternate with each other (and with tf_keras's "
                         "of 2), so the machine's drift hits both ratios alike"))
    hbk3, hbone = arms["heavy_blocks_k3_2w"], arms["heavy_blocks_1p"]
    rows.append(row("8b. Scaling in blocks of 4 steps, compute-heavier CNN: 2 workers vs 1", hbk3,
                    hbone, "examples_per_second", "examples/s", ratio_name="2 workers / 1 process",
                    note="the compute-heavier CNN of 7a compiled with steps_per_execution=4 on "
                         "both sides; " + scaling_note(
                             hbone, hbk3, hparams, how="one all-reduce of {kib} of gradients per "
                                                     "step and one of the logs per 4 steps")))
    acc, grow = arms["shrunk_accumulate"], arms["shrunk_grow"]
    rows.append(row("13a. A shrunk job keeping its global batch: accumulate vs grow", acc, grow,
                    "examples_per_second", "examples/s", ratio_name="accumulate / grow",
                    note="the small CNN on 2 workers (pinned as in 4a) with the global batch of a "
                         "4-worker job of 64 per replica (256): fit(max_replica_batch=64), 2 "
                         "accumulated steps of 64 per replica per update, against 128 per "
                         "replica in one step (what a shrunk elastic job does by default); the "
                         "same updates, one gradient all-reduce per update either way"))
    rows.append(row("13b. The same: peak memory of a worker", acc, grow, "peak_rss_mib",
                    "MiB (peak RSS)", ratio_name="accumulate / grow",
                    note="the larger of the two workers' peak resident memory"))
    m2, m1 = arms["mirrored_2"], arms["mirrored_1"]
    rows.append(row("4b. Scaling: mirrored, 2 logical CPUs vs 1", m2, m1, "examples_per_second",
                    "examples/s", ratio_name="2 devices / 1 device", target="ideal 2.0",
                    note=scaling_note(m1, m2, params, how=(
                        "one Python thread drives both replicas, their ops share one 2-thread "
                        "inter-op pool, and the in-process sum of {kib} of gradients per step "
                        "waits for both"))))
    legacy_start = median(legacy.values("startup_seconds"))
    rows.append(row("5. Start-up to first step", k3, one, "startup_seconds",
                    "s (launch -> first step)", ratio_name="2-worker job / 1 process",
                    note="same script" + (f"; tf_keras 2-worker job: {legacy_start:.1f} s"
                                          if legacy_start is not None else "")))
    stream, epochs, arrays = arms["r_gen_stream"], arms["r_gen_epochs"], arms["r_arrays"]
    rows.append(row("6a. R generator vs in-memory arrays", stream, arrays, "examples_per_second",
                    "examples/s", ratio_name="generator / arrays", target=">= 0.8",
                    meets=lambda x: x >= 0.8,
                    note="digits MLP, batch 64, default strategy, from R: dataset_from_generator() "
                         "of an R function reshuffling every epoch, with steps_per_epoch = 22 "
                         "(the batches per epoch of the arrays), vs fit_distributed() on the "
                         "same data as R arrays"))
    rows.append(row("6b. R generator, NULL-terminated epochs vs arrays", epochs, arrays,
                    "examples_per_second", "examples/s", ratio_name="generator / arrays",
                    note="the same generator where a NULL ends each epoch: Keras then treats "
                         "the data as of unknown length and starts a new input iterator every "
                         "epoch (plus one it throws away), a fixed cost per epoch; "
                         "steps_per_epoch avoids it"))
    ours, keras_own = arms["passes_repaired"], arms["passes_keras"]
    same = {(r["loss"], r["weights_sum"]) for r in ours.runs + keras_own.runs if isinstance(r, dict)}
    passes = median(ours.values("passes"))
    what = (f"the digits MLP under mirrored of 2 logical CPUs, Keras' own fit with validation "
            f"every epoch then evaluate ({passes and int(passes)} passes over the data), with the "
            f"repair one_iterator_per_pass against Keras' own epoch iterator, which makes each "
            f"pass's next distributed iterator and never reads it; "
            + ("the same loss and weights in every run" if len(same) == 1 else
               f"{len(same)} different (loss, weights) among the runs"))
    rows.append(row("14a. Passes over the data under mirrored: wall time", ours, keras_own,
                    "seconds", "s (fit + evaluate)", ratio_name="repaired / Keras' own",
                    target="< 1", meets=lambda x: x < 1, note=what))
    rows.append(row("14b. The same: CPU time", ours, keras_own, "cpu_seconds",
                    "s of CPU (fit + evaluate)", ratio_name="repaired / Keras' own",
                    target="< 1", meets=lambda x: x < 1, note="this process's CPU, every thread"))
    return rows


# --- reporting ----------------------------------------------------------------------------------

def fmt(value, digits=3):
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def table(rows) -> str:
    out = ["| Benchmark | A vs B | A (median) | B (median) | Ratio | Per-round ratios | Target | "
           "Result |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"**{r['ratio']:.2f}** ({r['ratio_name']})"
        spread = ", ".join(f"{x:.2f}" for x in r["ratios"]) or "-"
        out.append(f"| {r['benchmark']} | {r['a']} vs {r['b']} | {fmt(r['a_median'])} "
                   f"{r['unit']} | {fmt(r['b_median'])} {r['unit']} | {ratio} | {spread} | "
                   f"{r['target'] or '-'} | {r['status'] or '-'} |")
    return "\n".join(out)


def command_output(argv, timeout=60) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=base_env())
        return proc.stdout.strip() or proc.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e})"


def machine() -> dict:
    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
                 platform.processor())
    r_versions = command_output(["Rscript", "-e", (
        'cat(R.version.string, "; reticulate", format(packageVersion("reticulate")), '
        '"; tfdistributed (R)", tryCatch(format(packageVersion("tfdistributed")), '
        'error = function(e) "not installed"))')])
    return {
        "nproc": os.cpu_count(), "cpu": model,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "os": platform.platform(), "python": platform.python_version(),
        # tensorflow-cpu provides the same module under another distribution name.
        "tensorflow": next((v for v in map(version, ("tensorflow", "tensorflow-cpu"))
                            if v != "not installed"), "not installed"),
        "keras": version("keras"),
        "tf_keras": version("tf_keras"), "tfdistributed": version("tfdistributed"),
        "r": r_versions,
    }


def plot(rows, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no plot: {e}"
    lines = max(1, -(-len(rows) // 3))
    fig, axes = plt.subplots(lines, 3, figsize=(15, 4 * lines), squeeze=False)
    for ax, r in zip(axes.flat, rows):
        for i, (label, values, med) in enumerate([(r["a"], r["a_values"], r["a_median"]),
                                                  (r["b"], r["b_values"], r["b_median"])]):
            ax.bar(i, med or 0, color=f"C{i}", alpha=0.5, width=0.6)
            points = [v for v in values if v is not None]
            ax.scatter([i] * len(points), points, color=f"C{i}", zorder=3, s=18)
        ax.set_xticks([0, 1], [r["a"], r["b"]], fontsize=8)
        ax.set_ylabel(r["unit"], fontsize=8)
        ratio = "failed" if r["ratio"] is None else f"{r['ratio_name']} = {r['ratio']:.2f}"
        ax.set_title(f"{r['benchmark']}\n{ratio}", fontsize=9)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle("tfdistributed benchmarks: per-run values (dots) and medians (bars)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


METHOD = """\
Method: every run is a fresh process (or local cluster on 127.0.0.1); within each round the arms
run one after the other and their order flips every round (A B, B A, ...), so the machine's load
drift hits both; "Ratio" is the median of the per-round ratios A/B. Throughputs are measured inside
the training processes from the end of epoch 1 to the end of the last epoch (tracing and start-up
excluded). Multi-worker jobs use `launch(..., engine=Local(prepare_task=pin_tasks()))` (bench/pinning.py):
one core and one TensorFlow thread per worker; the single process of 4a/5 is pinned the same way (core 0, one thread), the
mirrored process of 4b gets both cores, one thread per op and two inter-op threads. The
parameter-server jobs (3) are pinned too (task i on core i % 2: 4 processes on 2 cores), with
one intra-op thread each and 4 inter-op threads (pin_tasks() sets that: with the one a pinned
process gets by default, PS servers cannot serve concurrent RPCs and the job hangs). 2, 4a, 5 and 8a come from the same rounds (8c compares 8a's and 4a's ratios round by round). Start-up is the wall clock from just before `launch()` (or `Popen`) to the first
`on_train_batch_begin` (of the later worker)."""


def write_report(rows, info, cfg, started, prefix: Path, command, quick, notes=()):
    plot_error = plot(rows, prefix.with_suffix(".png"))
    title = " (--quick smoke test: numbers not meaningful)" if quick else ""
    md = [f"# tfdistributed benchmarks{title}",
          "", f"- Command: `{command}`",
          f"- Date: {started:%Y-%m-%d %H:%M} UTC, {info['minutes']:.1f} min",
          f"- Machine: nproc {info['nproc']}, {info['cpu']}, {info['memory_gib']} GiB, "
          f"{info['os']}; load average {info['load_before']} before, {info['load_after']} after",
          f"- Versions: Python {info['python']}, TensorFlow {info['tensorflow']}, Keras "
          f"{info['keras']}, tf_keras {info['tf_keras']}, tfdistributed {info['tfdistributed']}; "
          f"{info['r']}",
          f"- Repetitions: {cfg.reps} per arm; epochs: digits {cfg.digits_epochs}, CNN "
          f"{cfg.cnn_epochs} x {cfg.cnn_examples_per_replica} images per replica, PS "
          f"{cfg.ps_epochs} x {cfg.ps_steps} steps", "", table(rows), "", "Notes:", ""]
    md += [f"- **{r['benchmark']}**: {r['note']}" for r in rows if r["note"]]
    md += [f"- {note}" for note in notes]
    md += ["", METHOD, ""]
    md.append(f"![per-run values]({prefix.with_suffix('.png').name})" if plot_error is None
              else f"({plot_error})")
    prefix.with_suffix(".md").write_text("\n".join(md) + "\n")
    prefix.with_suffix(".json").write_text(json.dumps(
        {"command": command, "date": started.isoformat(), "machine": info,
         "config": cfg.__dict__, "rows": rows}, indent=2) + "\n")


def run_own_group(script: str, configs: dict, quick: bool, out, argv, run_rounds, write_report):
    """A group that runs as a script of its own (bench/hosts.py, bench/healing.py): its rounds,
    then its report at ``out`` (default ``bench/results-<name>[-quick]``), with the command that
    made it. ``configs`` holds the ``"quick"`` and ``"full"`` settings."""
    cfg = configs["quick" if quick else "full"]
    name = Path(script).stem
    prefix = out or HERE / (f"results-{name}-quick" if quick else f"results-{name}")
    command = " ".join([os.path.relpath(sys.executable, ROOT), f"bench/{name}.py",
                        *(argv or sys.argv[1:])])
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    runs = run_rounds(cfg)
    print(write_report(runs, cfg, quick, started, time.monotonic() - t0, prefix, command))
    print(f"[bench] written: {prefix.with_suffix('.md')}, .json")


def run_own_host_group(script: str, configs: dict, quick: bool, out, argv, run_rounds,
                       write_report):
    """:func:`run_own_group` for a group on the host bed of network namespaces (root only):
    exits with the reason when the hosts cannot be built here."""
    from tfdistributed.testbeds.hostbed import HostBedError, check_can_build

    try:
        check_can_build()
    except HostBedError as e:
        sys.exit(f"[bench] the hosts cannot be built here: {e}")
    run_own_group(script, configs, quick, out, argv, run_rounds, write_report)


def run_or_reason(run, *, show_result: bool = False):
    """``run()``'s result (printed with its seconds when ``show_result``, else "done"), or the
    reason it failed as a string (one failed job must not stop the others)."""
    t0 = time.monotonic()
    try:
        result = run()
    except Exception as e:  # noqa: BLE001 - one failed job must not stop the others
        result = f"{type(e).__name__}: {e}"
        print(f"[bench]   failed: {result}", flush=True)
        return result
    print(f"[bench]   {result if show_result else 'done'} ({time.monotonic() - t0:.0f} s)",
          flush=True)
    return result


def chosen(title: str, prefixes) -> bool:
    """Whether ``--only`` selects the group ``title``: "8" selects 8a and 8b, "1" not 10."""
    return not prefixes or any(title.startswith(p) and not title[len(p):len(p) + 1].isdigit()
                               for p in prefixes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="1 repetition, tiny epochs: checks that everything runs (< 4 min)")
    parser.add_argument("--reps", type=int, help="repetitions per arm (default 4, --quick 1)")
    parser.add_argument("--only", action="append", metavar="PREFIX",
                        help="run only the benchmark groups whose title starts with PREFIX "
                        "(e.g. --only 6 for the R generator); repeatable")
    parser.add_argument("--out", type=Path, help="output prefix (default bench/results, "
                        "--quick bench/results-quick): writes .md, .json and .png")
    ns = parser.parse_args(argv)
    cfg = QUICK if ns.quick else FULL
    if ns.reps:
        cfg = Config(**{**cfg.__dict__, "reps": ns.reps})
    prefix = ns.out or HERE / ("results-quick" if ns.quick else "results")
    given = list(argv or sys.argv[1:])
    # Under make, the command a reader types again: make bench with its BENCH_ARGS.
    command = (("make bench" + (f' BENCH_ARGS="{" ".join(given)}"' if given else ""))
               if os.environ.get("MAKELEVEL") else
               " ".join([os.path.relpath(sys.executable, ROOT), "bench/run.py", *given]))
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    info = machine()
    info["load_before"] = " ".join(f"{x:.2f}" for x in os.getloadavg())

    groups = [
        ("1. R overhead", [Arm("r", "R", arm_r), Arm("py_digits", "Python", arm_python_digits)]),
        # 8a's arms in the rounds of 4a's: the scaling with and without blocks side by side (8c).
        ("2/4a/5/8a. CNN: Keras 3 and tf_keras, 2 workers and 1 process, step by step and in "
         "blocks of 4 steps",
         [Arm("k3_2w", "Keras 3, 2 workers", arm_k3_two_workers),
          Arm("legacy_2w", "tf_keras, 2 workers", arm_legacy_two_workers),
          Arm("k3_1p", "1 process", arm_k3_one_process),
          Arm("blocks_k3_2w", "Keras 3, 2 workers, blocks of 4",
              lambda cfg: cnn_cluster(cfg, False, steps_per_execution=4)),
          Arm("blocks_1p", "1 process, blocks of 4",
              lambda cfg: arm_k3_one_process(cfg, steps_per_execution=4))]),
        ("7. Compute-heavier CNN: Keras 3 and tf_keras, 2 workers and 1 process",
         [Arm("heavy_k3_2w", "Keras 3, 2 workers", lambda cfg: cnn_cluster(cfg, False, True)),
          Arm("heavy_legacy_2w", "tf_keras, 2 workers", lambda cfg: cnn_cluster(cfg, True, True)),
          Arm("heavy_1p", "1 process", lambda cfg: arm_k3_one_process(cfg, heavy=True))]),
        ("8b. Compute-heavier CNN in blocks of 4 steps: Keras 3, 2 workers and 1 process",
         [Arm("heavy_blocks_k3_2w", "Keras 3, 2 workers, blocks of 4",
              lambda cfg: cnn_cluster(cfg, False, True, steps_per_execution=4)),
          Arm("heavy_blocks_1p", "1 process, blocks of 4",
              lambda cfg: arm_k3_one_process(cfg, heavy=True, steps_per_execution=4))]),
        ("13. A shrunk job keeping its global batch",
         [Arm("shrunk_accumulate", "2 workers, 2 x 64 accumulated", shrunk_arm(True)),
          Arm("shrunk_grow", "2 workers, 128 per replica", shrunk_arm(False))]),
        ("3. Parameter server", [Arm("ps_ours", "tfdistributed PS", ps_arm(legacy=False)),
                                 Arm("ps_legacy", "tf_keras PS", ps_arm(legacy=True))]),
        ("4b. Mirrored on logical CPUs", [Arm("mirrored_2", "2 logical CPUs", mirrored_arm(2)),
                                          Arm("mirrored_1", "1 logical CPU", mirrored_arm(1))]),
        ("14. Passes over the data under mirrored: each pass's iterators",
         [Arm("passes_repaired", "repaired", passes_arm(repaired=True)),
          Arm("passes_keras", "Keras' own", passes_arm(repaired=False))]),
        ("6. R generator vs in-memory arrays",
         [Arm("r_gen_stream", "R generator", r_generator_arm("stream")),
          Arm("r_gen_epochs", "R generator (NULL epochs)", r_generator_arm("epochs")),
          Arm("r_arrays", "R arrays", r_generator_arm("arrays"))]),
    ]
    selected = [g for g in groups if chosen(g[0], ns.only)]
    for name, arms in selected:
        run_rounds(name, arms, cfg)
    notes = []
    for title, script, report in STANDALONE:
        if chosen(title, ns.only):
            notes.append(f"**{title}**: {run_standalone_group(title, script, report, ns.quick)}")
    rows = analyse({a.key: a for _, arms in groups for a in arms})
    # Rows of groups that were not selected have no runs at all: leave them out of the report.
    rows = [r for r in rows if any(v is not None for v in r["a_values"] + r["b_values"])
            or r["errors"]]
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info["minutes"] = (time.monotonic() - t0) / 60
    write_report(rows, info, cfg, started, prefix, command, ns.quick, notes)
    print()
    print(table(rows))
    print("\n".join(notes))
    print(f"\n[bench] written: {prefix.with_suffix('.md')}, .json, .png "
          f"({info['minutes']:.1f} min)")


if __name__ == "__main__":
    main()
