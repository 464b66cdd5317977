"""Group 12, overlap: does the gradient all-reduce overlap the backward pass, in packs?

    .venv/bin/python bench/overlap.py            # ~10 min, writes bench/results-overlap.{md,json}
    .venv/bin/python bench/overlap.py --quick    # smoke test (~3 min), results-overlap-quick.*

Why: with one all-reduce of the whole gradient, a step is compute, then communication. Split
into packs (tfdistributed.strategies.packing: ``bytes_per_pack``, by default "auto", packs for a gradient
of 8 MB or more), the last layers' pack can cross the network while the first layers'
gradients are still being computed, as PyTorch DDP's buckets do. Group 9's network-bound MLP
(bench/netbound.py) cannot show it: at 64 examples per worker its compute is a few percent of a
step. Here the same MLP (10.6 MB gradient) takes enough examples per worker that compute and
communication are of the same order, on 2 hosts of the host bed (root only; one worker per
network-namespace host, links capped with ``tc``).

How, in one job per link (arms take turns in every round, order rotated, as netbound.py):

- ``compute``: each worker trains the same model on its own batch with no strategy (no
  all-reduce): the compute alone;
- ``allreduce``: the 10.6 MB all-reduce alone (bench/hosts.py's ``time_all_reduces``);
- ``one``: one all-reduce of the whole gradient per step (``bytes_per_pack=0``);
- ``packs``: the default, "auto" (``bytes_per_pack=None``): for these gradients packs of
  4 MB, which split them in 2 (the last layers', then the first layer's).

And the inter-op threads: the same job with 1 (what TensorFlow picks by itself for a process
pinned to one core, and what ``make_strategy`` raises to 2) and with 2.

Overlap achieved = ``(compute + allreduce - step) / min(compute, allreduce)``: 0 when a step is
the sum of the two (nothing overlapped), 1 when the shorter one is hidden entirely. Steps are
the median time between two batches inside epoch 2 of 2, per round, of the slower worker.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from netbound import build as build_mlp, data  # noqa: E402

ARMS = ("one", "packs")
# jobs: (model, link, examples per worker per step, TensorFlow inter-op threads), the examples
# chosen so that the compute alone is of the order of the gradient's all-reduce alone on this
# machine (2026-11-25). Workers are pinned to one core each either way; 1 inter-op thread is
# what TensorFlow picks by itself for a process that may use one core.
FULL = {"jobs": (("conv_head", "100mbit", 256, 1), ("conv_head", "100mbit", 256, 2),
                 ("conv_head", "1gbit", 64, 2), ("mlp", "100mbit", 4096, 2),
                 ("mlp", "1gbit", 1024, 2)),
        "rounds": 3, "steps": 4, "allreduce_reps": 5, "timeout": 1200}
QUICK = {"jobs": (("conv_head", "100mbit", 256, 1), ("conv_head", "100mbit", 256, 2)),
         "rounds": 1,
         "steps": 4, "allreduce_reps": 2, "timeout": 600}


def build_conv_head(keras):
    """Two convolutions (most of the compute, 37 K parameters) under one wide dense layer (3.2 M
    parameters, a 12.9 MB gradient, little compute): the big gradient is ready first in the
    backward pass, the convolutions' backward comes after it, as in a CNN with a large
    classifier head."""
    return keras.Sequential([keras.Input(shape=(28, 28, 1)),
                             keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                             keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                             keras.layers.Flatten(),
                             keras.layers.Dense(64, activation="relu"),
                             keras.layers.Dense(10)])


def conv_data(n: int):
    x, y = data(n)
    return x.reshape(n, 28, 28, 1), y


MODELS = {"mlp": (build_mlp, data), "conv_head": (build_conv_head, conv_data)}


def _step_ms(tfd, keras, model, x, y, batch) -> float:
    """The median milliseconds between two batches inside epoch 2 of 2 (epoch 1 traces; the
    epochs' boundaries, which hold Keras' and tf.data's own work, are left out)."""
    import statistics

    from workloads import make_timer

    timer = make_timer(keras)
    tfd.fit(model, x, y, epochs=2, batch_size=batch, shuffle=False, verbose=0, callbacks=[timer])
    inside, _ = timer.step_times()
    return statistics.median(inside) * 1000


def worker(ns) -> None:
    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    import keras
    import tensorflow as tf

    from tfdistributed.strategies.packing import auto_pack_bytes

    from hosts import time_all_reduces
    from workloads import emit

    build, make_data = MODELS[ns.model]

    replicas, per = strategy.num_replicas_in_sync, ns.per_worker
    x, y = make_data(per * replicas * ns.steps)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = build(keras)
    initial = model.get_weights()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def compute_alone() -> float:
        alone = build(keras)  # outside the scope: the default strategy, no all-reduce
        alone.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
        alone.set_weights(initial)
        return _step_ms(tfd, keras, alone, x[:per * ns.steps], y[:per * ns.steps], per)

    def arm_ms(arm: str) -> float:
        # The one strategy of the job takes each arm's packing in turn (read when the train
        # step is traced, after the compile below).
        tfd.set_bytes_per_pack(strategy, None if arm == "packs" else 0)
        with strategy.scope():
            model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
        model.set_weights(initial)
        return _step_ms(tfd, keras, model, x, y, per * replicas)

    out = {arm: [] for arm in ("compute", *ARMS)}
    for rnd in range(ns.rounds):
        order = ("compute", *ARMS)
        order = order[rnd % len(order):] + order[:rnd % len(order)]
        for arm in order:
            out[arm].append(round(compute_alone() if arm == "compute" else arm_ms(arm), 1))
    grad_bytes = model.count_params() * 4
    allreduce = time_all_reduces(strategy, [grad_bytes], ns.allreduce_reps)[str(grad_bytes)]
    emit(per_round=out, allreduce_ms=round(allreduce, 1), grad_bytes=grad_bytes,
         replicas=replicas, pack_bytes=auto_pack_bytes(grad_bytes),
         interop=tf.config.threading.get_inter_op_parallelism_threads())


def run_job(model: str, link: str, per_worker: int, interop: int, cfg: dict) -> dict:
    from pinning import pin_tasks
    from run import RunFailed, base_env, failure_reason, parse_results

    import tfdistributed as tfd
    from tfdistributed.testbeds.hostbed import HostBed

    args = ["--worker", "--model", model, "--per-worker", str(per_worker),
            "--rounds", str(cfg["rounds"]),
            "--steps", str(cfg["steps"]), "--allreduce-reps", str(cfg["allreduce_reps"])]
    pin = pin_tasks()

    def prepare(task):
        pin(task)
        task.env["TF_NUM_INTEROP_THREADS"] = str(interop)

    bed = HostBed(2, link)
    try:
        bed.up()
        result = tfd.launch(__file__, tfd.Scaling(cluster=bed.cluster(2)),
                            engine=tfd.engines.Local(hosts=bed.launch_hosts(),
                                                     prepare_task=prepare), args=args,
                            timeout=cfg["timeout"], env=base_env(), cwd=ROOT,
                            watch=tfd.Watch(echo=False))
    except tfd.TFDistributedError as e:
        raise RunFailed(failure_reason(str(e))) from None
    finally:
        bed.down()
    found = [r for task in result.tasks for r in parse_results(task.output)]
    if len(found) != 2:
        raise RunFailed(f"{len(found)} of 2 workers reported")
    # The slower worker's, round by round.
    per_round = {arm: [max(r["per_round"][arm][i] for r in found) for i in range(cfg["rounds"])]
                 for arm in found[0]["per_round"]}
    return {"per_round": per_round, "allreduce_ms": max(r["allreduce_ms"] for r in found),
            "grad_bytes": found[0]["grad_bytes"], "pack_bytes": found[0]["pack_bytes"],
            "model": model, "link": link,
            "per_worker": per_worker, "interop": interop}


def run_rounds(cfg: dict) -> dict:
    from run import run_or_reason

    runs = {}
    for model, link, per_worker, interop in cfg["jobs"]:
        key = f"{model}/{link}/{interop}"
        print(f"[bench] overlap: {model}, 2 hosts at {link}, {per_worker} per worker, "
              f"{interop} inter-op thread(s) ...", flush=True)
        runs[key] = run_or_reason(lambda: run_job(model, link, per_worker, interop, cfg),
                                  show_result=True)
    return runs


def overlap(compute: float, allreduce: float, step: float) -> float:
    """The share of the shorter of compute and communication hidden under the other."""
    return (compute + allreduce - step) / min(compute, allreduce)


def write_report(runs, cfg, quick, started, seconds, prefix: Path, command) -> str:
    title = " (--quick smoke test: numbers not meaningful)" if quick else ""
    md = [f"# tfdistributed benchmarks, group 12: overlap of the all-reduce with the backward "
          f"pass{title}", "",
          f"- Command: `{command}`",
          f"- Date: {started:%Y-%m-%d %H:%M} UTC, {seconds / 60:.1f} min; nproc {os.cpu_count()}",
          f"- {cfg['rounds']} round(s); models: `mlp`, bench/netbound.py's wide MLP "
          f"(784-1280-1280-10), `conv_head`, two convolutions under a wide dense layer "
          f"(bench/overlap.py); 2 hosts (one worker each, pinned one per core), epoch 2 of 2 x "
          f"{cfg['steps']} steps timed; packs: the default (\"auto\"), in the table", "",
          "| Model | Link | Inter-op threads | Gradient | Examples per worker | Compute alone "
          "(ms) | All-reduce "
          "alone (ms) | Sum | One all-reduce: step (ms) | overlap | Packs | Packs: step (ms) | "
          "overlap "
          "| Packs vs one, examples/s (per round) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, run in runs.items():
        if isinstance(run, str):
            model, link, interop = key.split("/")
            md.append(f"| {model} | {link} | {interop} | failed: {run[:200]} | | | | | | | | | | |")
            continue
        rounds = run["per_round"]
        compute = statistics.median(rounds["compute"])
        one, packs = statistics.median(rounds["one"]), statistics.median(rounds["packs"])
        allreduce = run["allreduce_ms"]
        speed = [o / p for o, p in zip(rounds["one"], rounds["packs"])]
        md.append(
            f"| {run['model']} | {run['link']} | {run['interop']} | "
            f"{run['grad_bytes'] / 1e6:.1f} MB | "
            f"{run['per_worker']:,} | {compute:,.0f} | {allreduce:,.0f} | "
            f"{compute + allreduce:,.0f} | "
            f"{one:,.0f} | {overlap(compute, allreduce, one):.0%} | "
            f"{run['pack_bytes'] / 1e6:g} MB | {packs:,.0f} | "
            f"{overlap(compute, allreduce, packs):.0%} | **{statistics.median(speed):.2f}** "
            f"({', '.join(f'{r:.2f}' for r in speed)}) |")
    md += ["", "Overlap: `(compute + all-reduce - step) / min(compute, all-reduce)`, from the "
           "medians; 0% is a step that is the sum of the two, 100% hides the shorter one. The "
           "step also holds the optimizer's update and the host's reading of the logs, which "
           "neither part alone has, so the one-all-reduce overlap can read below 0.", ""]
    text = "\n".join(md) + "\n"
    prefix.with_suffix(".md").write_text(text)
    prefix.with_suffix(".json").write_text(json.dumps(
        {"command": command, "date": started.isoformat(), "config": cfg, "runs": runs},
        indent=2, default=str) + "\n")
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round, 1 link (~3 min)")
    parser.add_argument("--out", type=Path, help="output prefix (default bench/results-overlap)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for option in ("--per-worker", "--rounds", "--steps", "--allreduce-reps"):
        parser.add_argument(option, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", default="mlp", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.worker:
        return worker(ns)
    from run import run_own_host_group

    run_own_host_group(__file__, {"quick": QUICK, "full": FULL}, ns.quick, ns.out, argv,
                       run_rounds, write_report)


if __name__ == "__main__":
    main()
