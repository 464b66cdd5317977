"""Group 11, watching a job: what the task-to-launcher channel and the stall watchdog cost.

    .venv/bin/python bench/watching.py            # ~5 min, writes bench/results-watching.{md,json}
    .venv/bin/python bench/watching.py --quick    # smoke test (~1 min), results-watching-quick.*

Why: every launched job now counts its steps in a Keras callback (two clock reads and a few list
appends per step, on the training thread) and sends a record every 2 s from a heartbeat thread
(tfdistributed.watch), which the launcher reads for the job's history, progress, stragglers and
stalls. That must cost (next to) nothing: the target is within 2% of the steps/s of the same job
with it all off (``TFDISTRIBUTED_WATCH=0``, ``launch(watch=Watch(progress=False,
stall_warning=None))``).

How: as bench/healing.py's cost arms: a 2-worker job of the bench CNN (bench/workloads.py) on
synthetic arrays, 64 images per worker per step, workers pinned one per core; the steady step
rate (past epoch 1, which holds tracing and start-up) of the slower worker. The two arms
alternate within each round and their order flips every round. Ratio: watched / unwatched, per
round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

BATCH_PER_WORKER = 64
FULL = {"reps": 4, "epochs": 3, "examples_per_replica": 4800, "timeout": 240}
QUICK = {"reps": 1, "epochs": 2, "examples_per_replica": 1280, "timeout": 150}
ARMS = ("unwatched", "watched")


def worker(ns) -> None:
    """One task: the bench CNN trained with tfd.fit, its steady steps/s printed."""
    from healing import build
    from workloads import emit, make_timer

    tfd, keras, strategy, model, x, y = build(ns.examples_per_replica)
    timer = make_timer(keras)
    tfd.fit(model, x, y, epochs=ns.epochs, shuffle=False, seed=0,
            batch_size=BATCH_PER_WORKER * strategy.num_replicas_in_sync, callbacks=[timer],
            verbose=0)
    steps, seconds = timer.steady()
    emit(steps_per_s=steps / seconds)


def run_arm(arm: str, cfg: dict) -> dict:
    from pinning import pin_tasks
    from run import RunFailed, base_env, failure_reason, parse_results

    import tfdistributed as tfd

    watched = arm == "watched"
    env = dict(base_env(), **({} if watched else {"TFDISTRIBUTED_WATCH": "0"}))
    try:
        # Watched: the watch's own defaults; else no display and no stall warning.
        watch = (tfd.Watch(echo=False) if watched else
                 tfd.Watch(progress=False, stall_warning=None, echo=False))
        result = tfd.launch(__file__, workers=2, timeout=cfg["timeout"], env=env,
                            cwd=ROOT, engine=tfd.engines.Local(prepare_task=pin_tasks()),
                            watch=watch,
                            args=["--worker", "--epochs", str(cfg["epochs"]),
                                  "--examples-per-replica", str(cfg["examples_per_replica"])])
    except tfd.TFDistributedError as e:
        raise RunFailed(failure_reason(str(e))) from None
    found = [r for task in result.tasks for r in parse_results(task.output)]
    if len(found) != 2:
        raise RunFailed(f"{len(found)} of 2 workers reported")
    if watched and not result.history:
        raise RunFailed("the watched job brought no history back")
    return {"steps_per_s": min(r["steps_per_s"] for r in found)}


def run_rounds(cfg: dict) -> dict:
    runs = {arm: [] for arm in ARMS}
    for rnd in range(cfg["reps"]):
        for arm in (ARMS if rnd % 2 == 0 else ARMS[::-1]):
            print(f"[bench] watching: round {rnd + 1}/{cfg['reps']}, {arm} ...", flush=True)
            t0 = time.monotonic()
            try:
                runs[arm].append(run_arm(arm, cfg))
                print(f"[bench]   {runs[arm][-1]} ({time.monotonic() - t0:.0f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - one failed run must not stop the others
                runs[arm].append(f"{type(e).__name__}: {e}")
                print(f"[bench]   failed: {runs[arm][-1]}", flush=True)
    return runs


def write_report(runs, cfg, quick, started, seconds, prefix: Path, command) -> str:
    pairs = [(a["steps_per_s"], b["steps_per_s"])
             for a, b in zip(runs["watched"], runs["unwatched"])
             if isinstance(a, dict) and isinstance(b, dict)]
    ratios = [a / b for a, b in pairs]
    failed = [r for arm in ARMS for r in runs[arm] if isinstance(r, str)]
    ratio = statistics.median(ratios) if ratios else None
    per_round = ", ".join(f"{r:.3f}" for r in ratios)
    title = " (--quick smoke test: numbers not meaningful)" if quick else ""
    steps = cfg["examples_per_replica"] // BATCH_PER_WORKER
    md = [f"# tfdistributed benchmarks, group 11: watching a job{title}", "",
          f"- Command: `{command}`",
          f"- Date: {started:%Y-%m-%d %H:%M} UTC, {seconds / 60:.1f} min; nproc {os.cpu_count()}",
          f"- {cfg['reps']} round(s); a 2-worker job of the bench CNN on synthetic arrays, "
          f"{cfg['epochs']} epochs of {steps} steps, 64 images per worker per step, workers pinned "
          f"one per core; steps/s of the slower worker past epoch 1", "",
          "| Arm | Runs | Steps/s (median) |", "|---|---|---|"]
    for arm in ARMS:
        good = [r["steps_per_s"] for r in runs[arm] if isinstance(r, dict)]
        median = f"{statistics.median(good):.1f}" if good else "-"
        md.append(f"| {arm} | {len(good)} | {median} |")
    md += ["", f"Watched / unwatched: **{ratio:.3f}** (per round: {per_round})" if ratio else
           "Watched / unwatched: no pair of runs succeeded", ""]
    if failed:
        md += [f"Failed runs: {'; '.join(failed)[:300]}", ""]
    text = "\n".join(md) + "\n"
    prefix.with_suffix(".md").write_text(text)
    prefix.with_suffix(".json").write_text(json.dumps(
        {"command": command, "date": started.isoformat(), "config": cfg, "runs": runs,
         "ratios": {"watched / unwatched": ratio}}, indent=2, default=str) + "\n")
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round, small epochs (~1 min)")
    parser.add_argument("--out", type=Path, help="output prefix (default bench/results-watching)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for option in ("--epochs", "--examples-per-replica"):
        parser.add_argument(option, type=int, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.worker:
        return worker(ns)
    from run import run_own_group

    run_own_group(__file__, {"quick": QUICK, "full": FULL}, ns.quick, ns.out, argv, run_rounds,
                  write_report)


if __name__ == "__main__":
    main()
