"""Group 9, across hosts: a 2-worker job over links of several bandwidths, and what it projects;
then a network-bound model on 2 and 4 hosts and on loopback, its gradients in 32 bits, packs,
16 bits and low-rank (PowerSGD), and their held-out accuracy (``bench/netbound.py``).

    .venv/bin/python bench/hosts.py            # ~40 min, writes bench/results-hosts.{md,json}
    .venv/bin/python bench/hosts.py --quick    # smoke test (~3 min), bench/results-hosts-quick.*
    .venv/bin/python bench/hosts.py --report   # the report again from the json (analysis only)

Needs root: the hosts are network namespaces of ``tfdistributed.testbeds.hostbed``, one per worker,
joined by a bridge, each link capped with ``tc tbf`` (both ways) or not at all; the loopback arm
is the usual local cluster on 127.0.0.1. Every arm runs the same worker (this file,
``--worker``): the bench CNN trained with ``tfdistributed.fit`` (median step time past epoch 1),
then all-reduces alone, of the CNN's and the heavier CNN's gradient sizes and of 1 and 4 MB
(median time of each). Workers are pinned as run.py pins them (``bench/pinning.py``). As in
run.py, the arms alternate within each round, their order flips every round, each run is a fresh
cluster with a timeout, and a failed run is reported without stopping the others.

The all-reduce times per size give, per link, a fitted line ``t = a + S_wire / B`` (a ring over
N = 2 workers sends ``S_wire = 2(N-1)/N x S = S`` bytes per worker); :func:`project` uses it
for the ring model ``t(N) = 2(N-1)/N x S / B + 2(N-1) x alpha`` at 8, 32 and 128 workers, with
the assumptions written next to the table. The network-bound part compares 32-bit, packed,
16-bit and low-rank gradient all-reduces side by side (the wide MLP and the bench CNN: where
compression pays and where it does not), their held-out accuracy after the same epochs, and
checks that projection against 4 hosts.
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

MB = 1_000_000
RESNET50_BYTES = 25_557_032 * 4  # ResNet-50's parameters in float32 (~102 MB)
PROJECTED_WORKERS = (8, 32, 128)
# netbound_*: the network-bound part (bench/netbound.py), one job per link and worker count.
FULL = {"reps": 3, "links": ("loopback", "uncapped", "10gbit", "1gbit", "100mbit"),
        "epochs": 3, "examples_per_replica": 512, "allreduce_reps": 10, "timeout": 240,
        "netbound_links": ("loopback", "1gbit", "100mbit"), "netbound_workers": (2, 4),
        "rounds": 3, "steps": 6, "netbound_allreduce_reps": 5, "netbound_timeout": 1200,
        "accuracy_epochs": 10}
QUICK = {"reps": 1, "links": ("loopback", "1gbit", "100mbit"),
         "epochs": 2, "examples_per_replica": 256, "allreduce_reps": 3, "timeout": 150,
         "netbound_links": ("100mbit",), "netbound_workers": (2,), "rounds": 1, "steps": 6,
         "netbound_allreduce_reps": 2, "netbound_timeout": 600, "accuracy_epochs": 1}


# --- the worker: one task of the 2-worker job ----------------------------------------------------

def time_all_reduces(strategy, sizes, reps) -> dict:
    """Median milliseconds of one all-reduce (sum, float32) of each size in bytes."""
    import tensorflow as tf

    out = {}
    for nbytes in sizes:
        tensor = tf.ones([nbytes // 4], tf.float32)

        def replica(t):
            return tf.distribute.get_replica_context().all_reduce("sum", t)[0]

        step = tf.function(lambda: strategy.run(replica, args=(tensor,)))
        float(step())  # traced and warmed up once
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            float(step())  # the host waits for the result, as Keras reads its logs
            times.append(time.perf_counter() - t0)
        out[str(nbytes)] = statistics.median(times) * 1000
    return out


def worker(epochs: int, examples_per_replica: int, reps: int) -> None:
    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    import keras

    from workloads import (MODELS, compile_model, emit, make_timer, step_summary,
                           synthetic_images)

    sizes = {name: build().count_params() * 4 for name, build in
             (("cnn", lambda: MODELS["cnn"](keras)), ("heavy", lambda: MODELS["heavy"](keras)))}
    x, y = synthetic_images(examples_per_replica * strategy.num_replicas_in_sync)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = compile_model(MODELS["cnn"](keras), keras)
    timer = make_timer(keras)
    tfd.fit(model, x, y, epochs=epochs, batch_size=64 * strategy.num_replicas_in_sync, seed=0,
            callbacks=[timer], verbose=0)
    all_reduce = time_all_reduces(strategy, sorted({*sizes.values(), 1 * MB, 4 * MB}), reps)
    emit(step_ms=step_summary(timer)["step_ms"], grad_bytes=sizes, allreduce_ms=all_reduce)


# --- the arms: one 2-worker job per link ---------------------------------------------------------

def run_link(link: str, cfg: dict) -> dict:
    """One run of the job on ``link``; the slower worker's step and each size's all-reduce."""
    from tfdistributed.testbeds.hostbed import HostBed
    from pinning import pin_tasks
    from run import RunFailed, base_env, failure_reason, parse_results

    import tfdistributed as tfd

    args = ["--worker", "--epochs", str(cfg["epochs"]), "--examples-per-replica",
            str(cfg["examples_per_replica"]), "--allreduce-reps", str(cfg["allreduce_reps"])]
    common = dict(args=args, timeout=cfg["timeout"], env=base_env(), cwd=ROOT,
                  watch=tfd.Watch(echo=False))
    bed = None if link == "loopback" else HostBed(2, None if link == "uncapped" else link)
    try:
        if bed is None:
            result = tfd.launch(__file__, workers=2,
                                engine=tfd.engines.Local(prepare_task=pin_tasks()), **common)
        else:
            bed.up()
            result = tfd.launch(__file__, tfd.Scaling(cluster=bed.cluster(2)),
                                engine=tfd.engines.Local(hosts=bed.launch_hosts(),
                                                         prepare_task=pin_tasks()), **common)
    except tfd.TFDistributedError as e:
        raise RunFailed(failure_reason(str(e))) from None
    finally:
        if bed is not None:
            bed.down()
    found = [r for task in result.tasks for r in parse_results(task.output)]
    if len(found) != 2:
        raise RunFailed(f"{len(found)} of 2 workers reported")
    # Lock-step workers: the job goes at the pace of the slower one.
    return {"step_ms": max(r["step_ms"] for r in found), "grad_bytes": found[0]["grad_bytes"],
            "allreduce_ms": {k: max(r["allreduce_ms"][k] for r in found)
                             for k in found[0]["allreduce_ms"]}}


def run_rounds(cfg: dict) -> dict:
    """The CNN's rounds over ``cfg["links"]``, then the network-bound jobs (``"netbound"``),
    with the machine's load average (1 min) at the start and after each part (``"load"``): on
    a shared machine, what else ran."""
    import netbound

    load = [os.getloadavg()[0]]
    runs = run_cnn_rounds(cfg)
    load.append(os.getloadavg()[0])
    runs["netbound"] = netbound.run_all({**cfg, "script": __file__, "root": ROOT})
    runs["load"] = load + [os.getloadavg()[0]]
    return runs


def run_cnn_rounds(cfg: dict) -> dict:
    runs = {link: [] for link in cfg["links"]}
    for rnd in range(cfg["reps"]):
        order = list(cfg["links"]) if rnd % 2 == 0 else list(cfg["links"])[::-1]
        for link in order:
            print(f"[bench] across hosts: round {rnd + 1}/{cfg['reps']}, {link} ...", flush=True)
            t0 = time.monotonic()
            try:
                runs[link].append(run_link(link, cfg))
                print(f"[bench]   step {runs[link][-1]['step_ms']:.1f} ms "
                      f"({time.monotonic() - t0:.0f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - one failed run must not stop the others
                runs[link].append(f"{type(e).__name__}: {e}")
                print(f"[bench]   failed: {runs[link][-1]}", flush=True)
    return runs


# --- analysis: medians, the fitted line per link, the projection ---------------------------------

def summarise(runs: list) -> dict | None:
    """Medians over a link's successful runs, and ``t = a + S/B`` fitted to its all-reduces."""
    ok = [r for r in runs if isinstance(r, dict)]
    if not ok:
        return None
    sizes = sorted(int(k) for k in ok[0]["allreduce_ms"])
    ms = [statistics.median(r["allreduce_ms"][str(s)] for r in ok) for s in sizes]
    mean_s, mean_t = statistics.fmean(sizes), statistics.fmean(ms)
    slope = (sum((s - mean_s) * (t - mean_t) for s, t in zip(sizes, ms))
             / sum((s - mean_s) ** 2 for s in sizes))  # ms per byte on the wire
    grad = ok[0]["grad_bytes"]
    step = statistics.median(r["step_ms"] for r in ok)
    cnn_ms = ms[sizes.index(grad["cnn"])]
    return {"runs": len(ok), "step_ms": step, "allreduce_ms": dict(zip(sizes, ms)),
            "cnn_allreduce_ms": cnn_ms, "share": cnn_ms / step, "grad_bytes": grad,
            "fit_latency_ms": max(mean_t - slope * mean_s, 0.0),
            "fit_gbit_s": 8 / (slope * 1e6) if slope > 0 else None}


def ring_ms(n: int, nbytes: float, gbit_s: float, latency_ms: float) -> float:
    """Ring all-reduce over ``n`` workers: 2(n-1)/n x S / B, plus 2(n-1) hops of latency.

    ``latency_ms`` is what N = 2 measured (its 2 hops), so one hop is half of it."""
    alpha = latency_ms / 2
    return 2 * (n - 1) / n * nbytes * 8 / (gbit_s * 1e9) * 1000 + 2 * (n - 1) * alpha


def project(summary: dict, compute_ms: float) -> list:
    """Rows ``(gradient, N, all-reduce ms, step ms or None)`` for one link's fitted line."""
    grads = [("CNN", summary["grad_bytes"]["cnn"], compute_ms),
             ("heavier CNN", summary["grad_bytes"]["heavy"], None),
             ("ResNet-50", RESNET50_BYTES, None)]
    rows = []
    for name, nbytes, compute in grads:
        for n in PROJECTED_WORKERS:
            t = ring_ms(n, nbytes, summary["fit_gbit_s"], summary["fit_latency_ms"])
            rows.append((name, nbytes, n, t, None if compute is None else compute + t))
    return rows


# --- report --------------------------------------------------------------------------------------

ASSUMPTIONS = """Assumptions of the projection:

- Ring all-reduce (TensorFlow's CollectiveAllReduce on CPU, `CommunicationImplementation.AUTO`
  = RING), one all-reduce per step of the whole gradient (tfdistributed packs the logs with it),
  no overlap with compute. Every worker has its own link of bandwidth B to a non-blocking switch.
- B and the latency `a` are the line fitted to the measured N = 2 all-reduces of 4 sizes on
  that link; the 2 ring hops of N = 2 share `a`, so one hop costs `a / 2`, and N workers pay
  2(N-1) hops. `a` includes TensorFlow's per-collective overhead (launch, gRPC, the host waiting
  for the result), which dominates small gradients. A fitted `a` below 0 (a link so slow that
  the sizes' overhead vanishes in the noise) is taken as 0.
- No latency is emulated (`netem` is not available here): the namespaces' links add
  microseconds. A real network adds its round trip per hop, which the table leaves out.
- The CNN step (the only one with a compute time) is weak scaling: 64 images per worker per
  step at any N, the compute time that of N = 2 on loopback minus its all-reduce.
- One process per worker on shared cores of one machine: the fitted B of an uncapped or fast
  link is the CPU's copy speed, not a network's."""


def fmt(value, digits=3) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}g}"


def paired_ratios(runs: dict, link: str) -> list:
    """Step time on ``link`` over loopback's, per round where both ran (as run.py pairs arms)."""
    return [a["step_ms"] / b["step_ms"] for a, b in zip(runs[link], runs.get("loopback", []))
            if isinstance(a, dict) and isinstance(b, dict)]


def links_table(summaries: dict, runs: dict) -> list:
    out = ["| Link | Runs | Step (ms) | Step vs loopback (per round) | CNN all-reduce (ms) | "
           "All-reduce share | 1 MB (ms) | 4 MB (ms) | Fitted B (Gbit/s) | Fitted a (ms) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for link, s in summaries.items():
        if s is None:
            errors = "; ".join(r for r in runs[link] if isinstance(r, str))[:200]
            out.append(f"| {link} | 0 | failed: {errors} | | | | | | | |")
            continue
        ratios = paired_ratios(runs, link)
        ratio = (f"**{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)})"
                 if ratios else "-")
        out.append(f"| {link} | {s['runs']} | {fmt(s['step_ms'])} | {ratio} | "
                   f"{fmt(s['cnn_allreduce_ms'])} | {s['share']:.0%} | "
                   f"{fmt(s['allreduce_ms'][MB])} | {fmt(s['allreduce_ms'][4 * MB])} | "
                   f"{fmt(s['fit_gbit_s'])} | {fmt(s['fit_latency_ms'])} |")
    return out


def projection_table(summaries: dict) -> list:
    base = summaries.get("loopback")
    compute = base["step_ms"] - base["cnn_allreduce_ms"] if base else None
    out = ["| Link (fitted B, a) | Gradient | Bytes | N | All-reduce (ms) | CNN step (ms) |",
           "|---|---|---|---|---|---|"]
    for link, s in summaries.items():
        if s is None or link == "loopback" or s["fit_gbit_s"] is None:
            continue
        label = f"{link} ({fmt(s['fit_gbit_s'])} Gbit/s, {fmt(s['fit_latency_ms'])} ms)"
        for name, nbytes, n, t, step in project(s, compute):
            out.append(f"| {label} | {name} | {nbytes / MB:.3g} MB | {n} | {fmt(t)} | "
                       f"{fmt(step)} |")
    return out


def netbound_sections(runs: dict, cfg: dict) -> list:
    import netbound

    if not runs:
        return []
    links = netbound._links(runs)
    return ["## Network-bound: a wide MLP (10.6 MB gradient), 32 bits, packs, fp16, bf16, "
            "PowerSGD", "",
            f"{cfg['rounds']} round(s) in one job per link and host count; each arm 2 epochs of "
            f"{cfg['steps']} steps, 64 examples per worker per step, epoch 2 timed "
            f"(bench/netbound.py says how). Step: median of the per-round step times of the "
            f"slower worker. Examples/s vs fp32 and loss vs fp32: the median of the per-round "
            f"ratios, the values behind it in brackets. Loss: the mean over epoch 2's steps, "
            f"the same steps from the same weights for every arm. powersgd: "
            f"`powersgd(rank = {netbound.POWERSGD['rank']}, warmup_steps = "
            f"{netbound.POWERSGD['warmup_steps']})`, every timed step compressed. Sent per step: "
            f"what one worker puts into the step's gradient all-reduces (a ring sends "
            f"2(N-1)/N of it over each link).", "",
            *netbound.arms_table(runs), "",
            "Issue 40's targets in this run:", "", *netbound.targets(runs), "",
            f"Load average (1 min) before -> after each job: {netbound.load_line(runs)}.", "",
            "The same jobs, the bench CNN (0.139 MB gradient), "
            f"{netbound.CNN_STEPS} steps an epoch:", "",
            *netbound.arms_table(runs, "cnn"), "",
            "Where PowerSGD pays (2 hosts): its examples/s against fp32's per link (as in the "
            "tables), and where the lines t = c + k / B through each arm's two capped links "
            "cross (an estimate from two points per arm: a few milliseconds of noise move it "
            "far, and the CNN's arms differ by a few milliseconds).", "",
            f"- wide MLP: {netbound.break_even(links, 'mlp')}",
            f"- bench CNN: {netbound.break_even(links, 'cnn')}", "",
            "## Held-out accuracy after the same epochs", "",
            f"One job of 2 workers on loopback (the arms compute the same numbers on any link): "
            f"each model {cfg['accuracy_epochs']} epochs of the handwritten digits (1,347, 8x8 "
            f"scaled to 28x28; 64 per worker per step) from the same weights over the same "
            f"batches, then evaluated on the 450 held-out digits.", "",
            *netbound.accuracy_table(runs), "",
            "## The ring model checked on 4 hosts", "",
            "The all-reduce alone (median of the timed ones, slower worker) at 4 sizes, on 2 and "
            "4 hosts of the same link: the line fitted at N = 2 (as in the projection below) "
            "projects N = 4; where it misses by more than 20%, the ring model is refitted to "
            "N = 2 and 4 together (bandwidth and a latency per hop).", "",
            *netbound.projection_check(links, ring_ms), ""]


def write_report(runs, cfg, quick, started, seconds, prefix: Path, command) -> str:
    runs = dict(runs)
    netbound_runs = runs.pop("netbound", {})
    load = runs.pop("load", [])
    summaries = {link: summarise(r) for link, r in runs.items()}
    title = " (--quick smoke test: numbers not meaningful)" if quick else ""
    md = [f"# tfdistributed benchmarks, group 9: across hosts{title}", "",
          f"- Command: `{command}`",
          f"- Date: {started:%Y-%m-%d %H:%M} UTC, {seconds / 60:.1f} min; nproc {os.cpu_count()}",
          f"- {cfg['reps']} round(s); the bench CNN, {cfg['epochs']} epochs x "
          f"{cfg['examples_per_replica']} images per worker, 64 per worker per step; "
          f"{cfg['allreduce_reps']} timed all-reduces per size",
          "- Load average (1 min) at the start, after the CNN's rounds and at the end: "
          + ", ".join(f"{v:.1f}" for v in load) + f" (on {os.cpu_count()} cores: other jobs "
          "ran on this machine meanwhile where it is above about 2)", "",
          "## Measured: 2 workers, one per host", "", *links_table(summaries, runs), "",
          "Step: median step time past epoch 1 of the slower worker. Step vs loopback: the median "
          "of the per-round ratios (the values behind it in brackets). All-reduce share: the CNN "
          "gradient's all-reduce alone over the step time.", "",
          *netbound_sections(netbound_runs, cfg),
          "## Projected: ring all-reduce cost model", "", *projection_table(summaries), "",
          ASSUMPTIONS]
    text = "\n".join(md) + "\n"
    prefix.with_suffix(".md").write_text(text)
    prefix.with_suffix(".json").write_text(json.dumps(
        {"command": command, "date": started.isoformat(), "seconds": seconds, "config": cfg,
         "runs": runs, "netbound": netbound_runs, "summaries": summaries, "load": load}, indent=2, default=str) + "\n")
    return text


def report_again(prefix: Path) -> None:
    """The report of ``prefix``.json's run written again, from its measurements alone."""
    import datetime

    saved = json.loads(prefix.with_suffix(".json").read_text())
    runs = {link: [r for r in results] for link, results in saved["runs"].items()}
    runs.update(netbound=saved["netbound"], load=saved.get("load", []))
    started = datetime.datetime.fromisoformat(saved["date"])
    write_report(runs, saved["config"], False, started, saved.get("seconds", 0), prefix,
                 saved["command"])
    print(f"[bench] written again: {prefix.with_suffix('.md')}, .json")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round, 3 links (~1 min)")
    parser.add_argument("--out", type=Path, help="output prefix (default bench/results-hosts)")
    parser.add_argument("--report", action="store_true",
                        help="write the report again from OUT.json's measurements, measuring "
                             "nothing (after a change to the analysis)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--examples-per-replica", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--allreduce-reps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--netbound-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--accuracy-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.worker:
        return worker(ns.epochs, ns.examples_per_replica, ns.allreduce_reps)
    if ns.netbound_worker:
        import netbound

        return netbound.worker(ns.rounds, ns.steps, ns.allreduce_reps)
    if ns.accuracy_worker:
        import netbound

        return netbound.accuracy_worker(ns.epochs)
    if ns.report:
        return report_again(ns.out or HERE / "results-hosts")
    from run import run_own_host_group

    run_own_host_group(__file__, {"quick": QUICK, "full": FULL}, ns.quick, ns.out, argv,
                       run_rounds, write_report)


if __name__ == "__main__":
    main()
