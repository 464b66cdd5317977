"""Group 10, self-healing: what backups cost a running job, and how soon a killed job trains again.

    .venv/bin/python bench/healing.py            # ~6 min, writes bench/results-healing.{md,json}
    .venv/bin/python bench/healing.py --quick    # smoke test (~1 min), results-healing-quick.*

Why: ``fit(backup_dir=, save_freq=)`` plus ``launch(restarts=Restarts(max_restarts=))`` is how a
job survives a lost machine. Its price is paid twice: a little on every step (the backups) and once per failure (the
restart). Both are measured here as ratios, so they read the same on a faster machine.

How: every arm is a 2-worker job of the bench CNN (bench/workloads.py) on synthetic arrays,
``shuffle=False``, 64 images per worker per step, workers pinned as run.py pins them.

- Cost of backups: the job without a ``backup_dir``, with ``save_freq=100`` and with
  ``save_freq=10``; the steady step rate (past epoch 1, which holds tracing and start-up) of the
  slower worker. Ratio: with backups / without, per round.
- Kill to training again: ``launch(restarts=Restarts(max_restarts=1))`` of the job with
  ``save_freq=10``, where worker 1 SIGKILLs itself after step ``stop_at`` on attempt 0. The
  tasks write ``time.time()`` stamps (one machine, one clock): (a) start-up = from the
  ``launch()`` call to the first step trained on attempt 0; (b) recovery = from the kill to the
  first step trained on attempt 1 (detecting the death, stopping the survivor, new processes,
  imports, restoring the backup, tracing). Ratio: b / a, per round. A step counts as trained
  when every worker has finished it.

As in run.py, the arms alternate within each round and their order flips every round, each run is
a fresh cluster with a timeout (``tfd.launch``'s), and a failed run is reported without stopping
the others.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

STARTED = time.time()  # this process's start, before TensorFlow's import

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

BATCH_PER_WORKER = 64
# steps_per_epoch = examples_per_replica / 64; save_freq=100 must fall inside the steady epochs.
FULL = {"reps": 3, "epochs": 3, "examples_per_replica": 4800, "stop_at": 25,
        "kill_examples_per_replica": 3200, "timeout": 240}
# Quick: too few steps for save_freq=100 to back up past epoch 1; it only checks that all runs.
QUICK = {"reps": 1, "epochs": 3, "examples_per_replica": 1280, "stop_at": 12,
         "kill_examples_per_replica": 960, "timeout": 150}
COST_ARMS = ("none", "100", "10")  # save_freq of each arm; "none": no backup_dir
KILL_SAVE_FREQ = 10


# --- the worker: one task of a 2-worker job ------------------------------------------------------

def build(examples_per_replica: int):
    """The strategy, the compiled bench CNN and its data (the same in every task)."""
    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    import keras

    from workloads import MODELS, compile_model, synthetic_images

    x, y = synthetic_images(examples_per_replica * strategy.num_replicas_in_sync)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = compile_model(MODELS["cnn"](keras), keras)
    return tfd, keras, strategy, model, x, y


def cost_worker(ns) -> None:
    tfd, keras, strategy, model, x, y = build(ns.examples_per_replica)
    from workloads import emit, make_timer

    timer = make_timer(keras)
    save_freq = None if ns.save_freq == "none" else int(ns.save_freq)
    backup = {} if save_freq is None else {"backup_dir": ns.backup, "save_freq": save_freq}
    tfd.fit(model, x, y, epochs=ns.epochs, shuffle=False, seed=0,
            batch_size=BATCH_PER_WORKER * strategy.num_replicas_in_sync, callbacks=[timer],
            verbose=0, **backup)
    steps, seconds = timer.steady()
    emit(steps_per_s=steps / seconds)


def kill_worker(ns) -> None:
    tfd, keras, strategy, model, x, y = build(ns.examples_per_replica)
    info = tfd.strategy_info(strategy)
    name = f"{info['task_type']}-{info['task_index']}"
    attempt = os.environ.get("TFDISTRIBUTED_ATTEMPT", "0")
    stamps = Path(ns.stamps)

    def stamp(what: str, step: int) -> None:
        # One small file per event, written before any kill: nothing is lost with the process.
        (stamps / f"{name}.{attempt}.{what}").write_text(json.dumps(
            {"time": time.time(), "step": step}))

    class Stamps(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.first = None
            self.restored = int(self.model.optimizer.iterations.numpy())

        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            if step == self.restored:
                return  # a step skipped while resuming trains nothing
            if self.first is None:
                self.first = step
                stamp("first_step", step)
                if attempt != "0":
                    # Training again is all this arm measures; every worker stops at the same
                    # step, so the lock-step job ends cleanly.
                    self.model.stop_training = True
            if attempt == "0" and name == "worker-1" and step == ns.stop_at:
                stamp("kill", step)
                os.kill(os.getpid(), signal.SIGKILL)

    # The process's own start (before TensorFlow's import), for the split of (b).
    (stamps / f"{name}.{attempt}.process").write_text(json.dumps({"time": STARTED}))
    tfd.fit(model, x, y, epochs=ns.epochs, shuffle=False, seed=0,
            batch_size=BATCH_PER_WORKER * strategy.num_replicas_in_sync, callbacks=[Stamps()],
            verbose=0, backup_dir=ns.backup, save_freq=KILL_SAVE_FREQ)


# --- the arms: one 2-worker job each -------------------------------------------------------------

def launch(args: list, cfg: dict, **options):
    from pinning import pin_tasks
    from run import RunFailed, base_env, failure_reason

    import tfdistributed as tfd

    try:
        return tfd.launch(__file__, workers=2, args=args, timeout=cfg["timeout"], env=base_env(),
                          cwd=ROOT, engine=tfd.engines.Local(prepare_task=pin_tasks()),
                          **dict(dict(watch=tfd.Watch(echo=False)), **options))
    except tfd.TFDistributedError as e:
        raise RunFailed(failure_reason(str(e))) from None


def run_cost(save_freq: str, cfg: dict) -> dict:
    """Steady steps/s of the job with ``save_freq`` (or no backups), the slower worker's."""
    from run import RunFailed, parse_results

    with tempfile.TemporaryDirectory(prefix="tfd-heal-") as tmp:
        result = launch(["--worker", "cost", "--save-freq", save_freq, "--backup", tmp,
                         "--epochs", str(cfg["epochs"]),
                         "--examples-per-replica", str(cfg["examples_per_replica"])], cfg)
    found = [r for task in result.tasks for r in parse_results(task.output)]
    if len(found) != 2:
        raise RunFailed(f"{len(found)} of 2 workers reported")
    # Lock-step workers: the job goes at the pace of the slower one.
    return {"steps_per_s": min(r["steps_per_s"] for r in found)}


def read_stamps(directory: Path) -> dict:
    """``{(event, attempt): [time of each task], ...}`` and the steps, from the stamp files."""
    out = {}
    for path in directory.iterdir():
        _task, attempt, event = path.name.split(".")
        out.setdefault((event, attempt), []).append(json.loads(path.read_text()))
    return out


def run_kill(cfg: dict) -> dict:
    """Start-up (a) and kill-to-training-again (b) of one job killed at ``stop_at``."""
    from run import RunFailed

    import tfdistributed as tfd

    with tempfile.TemporaryDirectory(prefix="tfd-heal-") as tmp:
        stamps, backup = Path(tmp, "stamps"), Path(tmp, "backup")
        stamps.mkdir()
        launched = time.time()
        result = launch(["--worker", "kill", "--stamps", str(stamps), "--backup", str(backup),
                         "--stop-at", str(cfg["stop_at"]), "--epochs", "2",
                         "--examples-per-replica", str(cfg["kill_examples_per_replica"])],
                        cfg, restarts=tfd.Restarts(max_restarts=1))
        got = read_stamps(stamps)
    if result.restarts != 1:
        raise RunFailed(f"{result.restarts} restarts, expected 1")
    try:
        # A step is trained when every worker finished it: the later of the two stamps.
        first0 = max(s["time"] for s in got[("first_step", "0")])
        (kill,) = got[("kill", "0")]
        first1 = max(s["time"] for s in got[("first_step", "1")])
        started1 = min(s["time"] for s in got[("process", "1")])
        resumed_at = got[("first_step", "1")][0]["step"]
    except (KeyError, ValueError) as e:
        raise RunFailed(f"missing stamps: {e}") from None
    startup, recovery = first0 - launched, first1 - kill["time"]
    return {"startup_s": startup, "recovery_s": recovery, "ratio": recovery / startup,
            "kill_to_processes_s": started1 - kill["time"],
            "steps_redone": kill["step"] - resumed_at + 1, "launch_s": result.seconds}


def run_rounds(cfg: dict) -> dict:
    arms = {**{f"save_freq={f}": (lambda f=f: run_cost(f, cfg)) for f in COST_ARMS},
            "kill": lambda: run_kill(cfg)}
    runs = {name: [] for name in arms}
    for rnd in range(cfg["reps"]):
        order = list(arms) if rnd % 2 == 0 else list(arms)[::-1]
        for name in order:
            print(f"[bench] self-healing: round {rnd + 1}/{cfg['reps']}, {name} ...", flush=True)
            t0 = time.monotonic()
            try:
                runs[name].append(arms[name]())
                print(f"[bench]   {runs[name][-1]} ({time.monotonic() - t0:.0f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - one failed run must not stop the others
                runs[name].append(f"{type(e).__name__}: {e}")
                print(f"[bench]   failed: {runs[name][-1]}", flush=True)
    return runs


# --- report --------------------------------------------------------------------------------------

def ok(runs: list) -> list:
    return [r for r in runs if isinstance(r, dict)]


def errors(runs: list) -> str:
    return "; ".join(r for r in runs if isinstance(r, str))[:200]


def fmt_ratios(ratios: list) -> str:
    if not ratios:
        return "-"
    return f"**{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)})"


def cost_table(runs: dict) -> tuple[list, dict]:
    base = runs["save_freq=none"]
    out = ["| Backups | Runs | Steps/s (median) | With / without backups (per round) |",
           "|---|---|---|---|"]
    medians = {}
    for name in (f"save_freq={f}" for f in COST_ARMS):
        good = ok(runs[name])
        if not good:
            out.append(f"| {name} | 0 | failed: {errors(runs[name])} | |")
            continue
        # Per-round pairs with the arm without backups, as run.py pairs its arms.
        ratios = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(runs[name], base)
                  if isinstance(a, dict) and isinstance(b, dict)]
        label = "no backup_dir" if name.endswith("none") else f"backup_dir, {name}"
        out.append(f"| {label} | {len(good)} | "
                   f"{statistics.median(r['steps_per_s'] for r in good):.1f} | "
                   f"{'-' if name.endswith('none') else fmt_ratios(ratios)} |")
        if ratios and not name.endswith("none"):
            medians[name] = statistics.median(ratios)
    return out, medians


def kill_table(runs: list) -> tuple[list, float | None]:
    good = ok(runs)
    if not good:
        return [f"Every run failed: {errors(runs)}"], None

    def med(key):
        return statistics.median(r[key] for r in good)

    ratios = [r["ratio"] for r in good]
    return (["| Runs | (a) start-up, launch to first step (s) | (b) kill to first step of "
             "attempt 1 (s) | of which kill to new processes (s) | Steps redone | b / a "
             "(per round) |", "|---|---|---|---|---|---|",
             f"| {len(good)} | {med('startup_s'):.2f} | {med('recovery_s'):.2f} | "
             f"{med('kill_to_processes_s'):.2f} | {med('steps_redone'):.0f} | "
             f"{fmt_ratios(ratios)} |"] + (["", f"Failed runs: {errors(runs)}"]
                                          if len(good) < len(runs) else []),
            statistics.median(ratios))


def write_report(runs, cfg, quick, started, seconds, prefix: Path, command) -> str:
    cost, cost_medians = cost_table(runs)
    kill, kill_median = kill_table(runs["kill"])
    title = " (--quick smoke test: numbers not meaningful)" if quick else ""
    steps = cfg["examples_per_replica"] // BATCH_PER_WORKER
    md = [f"# tfdistributed benchmarks, group 10: self-healing{title}", "",
          f"- Command: `{command}`",
          f"- Date: {started:%Y-%m-%d %H:%M} UTC, {seconds / 60:.1f} min; nproc {os.cpu_count()}",
          f"- {cfg['reps']} round(s); a 2-worker job of the bench CNN on synthetic arrays, "
          f"shuffle=False, 64 images per worker per step, workers pinned one per core", "",
          "## Cost of backups", "",
          f"{cfg['epochs']} epochs of {steps} steps; steps/s of the slower worker from the end of "
          "epoch 1 to the end of the last (backups included, tracing and start-up not).", "",
          *cost, "",
          "## Kill to training again", "",
          f"`launch(restarts=Restarts(max_restarts=1))`, "
          f"`fit(backup_dir=, save_freq={KILL_SAVE_FREQ})`, "
          f"{cfg['kill_examples_per_replica'] // BATCH_PER_WORKER} steps per epoch; worker 1 "
          f"SIGKILLs itself after step {cfg['stop_at']} of attempt 0. Times are the tasks' "
          "`time.time()` stamps; a step counts when both workers finished it. (b) covers "
          "noticing the death, stopping the survivor, new processes and imports, restoring the "
          "backup and tracing again; the steps since the last backup are then trained again.",
          "", *kill, ""]
    text = "\n".join(md) + "\n"
    prefix.with_suffix(".md").write_text(text)
    prefix.with_suffix(".json").write_text(json.dumps(
        {"command": command, "date": started.isoformat(), "config": cfg, "runs": runs,
         "ratios": {**{f"{k} / none": v for k, v in cost_medians.items()},
                    "recovery / startup": kill_median}}, indent=2, default=str) + "\n")
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round, small epochs (~1 min)")
    parser.add_argument("--out", type=Path, help="output prefix (default bench/results-healing)")
    parser.add_argument("--worker", choices=("cost", "kill"), help=argparse.SUPPRESS)
    for option in ("--save-freq", "--backup", "--stamps"):
        parser.add_argument(option, help=argparse.SUPPRESS)
    for option in ("--epochs", "--examples-per-replica", "--stop-at"):
        parser.add_argument(option, type=int, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.worker:
        return (cost_worker if ns.worker == "cost" else kill_worker)(ns)
    from run import run_own_group

    run_own_group(__file__, {"quick": QUICK, "full": FULL}, ns.quick, ns.out, argv, run_rounds,
                  write_report)


if __name__ == "__main__":
    main()
