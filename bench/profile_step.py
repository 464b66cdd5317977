"""Where a multi-worker step's time goes: a per-step breakdown from TensorFlow's profiler.

    .venv/bin/python bench/profile_step.py [--model cnn|heavy] [--batch 64] [--out DIR]

Runs the bench CNN (``bench/workloads.py cnn``) three ways, pinned as ``make bench`` pins them:
one process, Keras 3 through ``tfdistributed.fit`` on 2 workers, and legacy Keras (tf_keras)
on the same 2-worker cluster. Each traces 20 steps of epoch 2 with TensorFlow's profiler and
records every collective TensorFlow builds (op, elements, dtype). The traces are then read here
(the ``XSpace`` protobuf TensorFlow writes; no TensorBoard needed) into, per step:

- ``compute``: time some model kernel runs (union of kernel intervals on TensorFlow's compute
  threads, collectives and tf.data excluded);
- ``sync <kind>``: time a collective of that kind is in flight while no kernel runs, i.e. the
  step waits for it: ``gradients`` (the all-reduce of the gradients), ``metrics`` (the step's
  loss and metric values, averaged over workers), ``end-of-data check`` (TensorFlow's
  per-step all-reduce that asks every worker whether it still has data, added for datasets of
  known, finite length);
- ``input``: waiting for tf.data with nothing else running;
- ``other``: the rest of the step: Python, dispatch of the step function, host copies;
- for each collective kind, how long it is in flight, and of that how long the first worker to
  arrive waits for the other one (start times of the same collective instance on both workers;
  one machine, one clock).

Plus, from every batch's start time, the cost of an epoch boundary beyond a step
(``epoch_gap_ms``: Keras makes a new input iterator each epoch and drops the old one).

Writes ``DIR/profile.json`` and prints a Markdown table (``bench/results.md`` holds one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as bench  # noqa: E402  (bench/run.py: the pinned process and cluster runners)

COLLECTIVE = ":CollectiveReduceV2"
STEP_FUNCTIONS = ("multi_step_on_iterator", "train_function")  # Keras 3, tf_keras


def _union(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _length(intervals) -> float:
    return sum(end - start for start, end in intervals)


def _minus(intervals, cut):
    """``intervals`` minus the (merged) intervals ``cut``."""
    out = []
    for start, end in intervals:
        pieces = [[start, end]]
        for c0, c1 in cut:
            nxt = []
            for p0, p1 in pieces:
                if c1 <= p0 or c0 >= p1:
                    nxt.append([p0, p1])
                    continue
                if c0 > p0:
                    nxt.append([p0, c0])
                if c1 < p1:
                    nxt.append([c1, p1])
            pieces = nxt
        out.extend(pieces)
    return out


def _clip(intervals, lo, hi):
    return [[max(a, lo), min(b, hi)] for a, b in intervals if b > lo and a < hi]


def read_trace(directory: Path) -> dict:
    """Events of one task's trace as ``{category: [(start_ms, end_ms, name, stats)]}``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    files = sorted(directory.rglob("*.xplane.pb"))
    if not files:
        raise FileNotFoundError(f"no profiler trace under {directory}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(files[-1].read_bytes())
    events = defaultdict(list)
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names, stat_names = plane.event_metadata, plane.stat_metadata
        for line in plane.lines:
            for ev in line.events:
                name = names[ev.metadata_id].name
                start = (line.timestamp_ns * 1000 + ev.offset_ps) / 1e9
                span = (start, start + ev.duration_ps / 1e9, name,
                        {stat_names[s.metadata_id].name: s.int64_value for s in ev.stats})
                if line.name == "python" and name in STEP_FUNCTIONS:
                    events["step"].append(span)
                elif name.endswith(COLLECTIVE):
                    events["collective"].append(span)
                elif line.name.startswith("tf_data") and "GetNext" in name:
                    events["input"].append(span)
                elif line.name.startswith("tf_Compute") and ":" in name and "::" not in name:
                    events["kernel"].append(span)
    return events


def classify(name: str, collectives: list[dict]) -> str:
    """The kind of a collective from its trace name, matched to what the workload recorded.

    An op of the step function itself appears under its own name; one of a function it calls
    (Keras 3's ``one_step_on_data``) under ``StatefulPartitionedCall/<name>``.
    """
    op = name[: -len(COLLECTIVE)] if name.endswith(COLLECTIVE) else name
    recorded = [c for c in collectives if c["op"] != "eager"]
    match = [c for c in recorded if c["op"] == op and c["graph"].startswith(STEP_FUNCTIONS)]
    match = match or sorted((c for c in recorded if op.endswith("/" + c["op"])
                             and not c["graph"].startswith(STEP_FUNCTIONS)),
                            key=lambda c: -len(c["op"]))
    if not match:
        return "other"
    best = match[0]
    elements = best["elements"] or 0
    if elements >= 1000:
        return "gradients"
    if best["bytes_per_element"] == 8 and elements <= 1 \
            and best["graph"].startswith(STEP_FUNCTIONS):
        return "end-of-data check"
    return "metrics"


def breakdown(events: dict, collectives: list[dict]) -> dict:
    """Per-step medians (ms) of what the step's wall clock was spent on, for one task."""
    steps = sorted(events["step"])
    if len(steps) < 3:
        raise RuntimeError("the trace holds fewer than 3 steps")
    kernels = _union([(a, b) for a, b, *_ in events["kernel"]])
    kinds = defaultdict(list)
    for a, b, name, _ in events["collective"]:
        kinds[classify(name, collectives)].append((a, b))
    inputs = _union([(a, b) for a, b, *_ in events["input"]])
    rows = defaultdict(list)
    for (s0, *_), (s1, *_) in zip(steps, steps[1:]):
        wall = s1 - s0
        busy = _clip(kernels, s0, s1)
        rows["step"].append(wall)
        rows["compute"].append(_length(busy))
        covered = list(busy)
        for kind in ("gradients", "metrics", "end-of-data check", "other"):
            mine = _union(_clip(kinds.get(kind, []), s0, s1))
            exposed = _minus(mine, _union(covered))
            rows[f"sync {kind}"].append(_length(exposed))
            rows[f"in flight {kind}"].append(_length(mine))
            covered = _union(covered + mine)
        rows["input"].append(_length(_minus(_union(_clip(inputs, s0, s1)), covered)))
        covered = _union(covered + _clip(inputs, s0, s1))
        rows["other"].append(wall - _length(covered))
    counts = defaultdict(int)
    for _, _, name, _ in events["collective"]:
        counts[classify(name, collectives)] += 1
    out = {k: statistics.median(v) for k, v in rows.items()}
    out["collectives per step"] = {k: v / (len(steps)) for k, v in counts.items()}
    return out


def waiting(traces: list[dict], collectives: list[dict]) -> dict:
    """Per collective kind: median ms the earlier worker waits for the later one to join."""
    by_key = []
    for events in traces:
        seen = defaultdict(list)
        for a, b, name, stats in sorted(events["collective"]):
            seen[(name, stats.get("instance_key"))].append((a, b))
        by_key.append(seen)
    out = defaultdict(list)
    for key, first in by_key[0].items():
        second = by_key[1].get(key, [])
        for (a0, _), (a1, _) in zip(first, second):
            out[classify(key[0], collectives)].append(abs(a0 - a1))
    return {k: statistics.median(v) for k, v in out.items() if v}


def sizes(collectives: list[dict]) -> dict:
    """Collectives a training step runs, by kind: count and bytes."""
    out = defaultdict(lambda: [0, 0])
    seen = set()
    for c in collectives:
        if c["op"] == "eager" or (c["graph"], c["op"]) in seen or not c["graph"].startswith(
                ("one_step_on_data", "multi_step_on_iterator", "train_function")):
            continue
        seen.add((c["graph"], c["op"]))  # a function traced twice builds its ops twice
        inner = not c["graph"].startswith(STEP_FUNCTIONS)
        kind = classify(("StatefulPartitionedCall/" if inner else "") + c["op"], collectives)
        out[kind][0] += 1
        out[kind][1] += (c["elements"] or 0) * c["bytes_per_element"]
    return {k: {"count": n, "bytes": b} for k, (n, b) in out.items()}


def profile(cfg, model: str, batch: int, out: Path) -> dict:
    args = ["cnn", "--epochs", "3", "--examples-per-replica", str(cfg.cnn_examples_per_replica),
            "--model", model, "--batch", str(batch)]
    arms = {}
    # Pinned as pinning.pin_tasks() pins one worker: core 0, one TensorFlow thread.
    one, _ = bench.run_process([sys.executable, bench.WORKLOADS, *args, "--profile",
                                out / "one"], timeout=cfg.timeout, cpus={0},
                               env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"})
    arms["1 process"] = [one]
    for name, extra in (("Keras 3, 2 workers", []), ("tf_keras, 2 workers", ["--legacy"])):
        found, _ = bench.run_cluster(args + extra + ["--profile", str(out / name[:8].strip(","))],
                                     timeout=cfg.timeout, workers=2, pin_cpus=True)
        arms[name] = found
    report = {}
    for name, results in arms.items():
        for r in results:
            r.update(json.loads((Path(r["profile_dir"]) / "collectives.json").read_text()))
        traces = [read_trace(Path(r["profile_dir"])) for r in results]
        parts = [breakdown(t, results[0]["collectives"]) for t in traces]
        report[name] = {
            "per_step": {k: max(p[k] for p in parts) if not isinstance(parts[0][k], dict)
                         else parts[0][k] for k in parts[0]},
            "waiting": waiting(traces, results[0]["collectives"]) if len(traces) == 2 else {},
            "sizes": sizes(results[0]["collectives"]),
            "epoch_gap_ms": max(r["epoch_gap_ms"] or 0 for r in results),
            "step_ms_timer": max(r["step_ms"] for r in results),
            "examples_per_second": min(r["examples_per_second"] for r in results),
        }
    return report


def markdown(report: dict, model: str, batch: int) -> str:
    names = list(report)
    lines = [f"Per-step breakdown, `{model}` at {batch} per replica (ms, medians over 20 traced "
             f"steps of epoch 2; for 2 workers the slower worker's value):", "",
             "| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]

    def row(label, get):
        cells = []
        for n in names:
            value = get(report[n])
            cells.append("-" if value is None else (f"{value:.1f}" if isinstance(value, float)
                                                    else str(value)))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("step (profiled)", lambda r: r["per_step"]["step"])
    row("step (untraced, timer)", lambda r: r["step_ms_timer"])
    row("model compute", lambda r: r["per_step"]["compute"])
    for kind in ("gradients", "metrics", "end-of-data check", "other"):
        if any(r["per_step"].get(f"in flight {kind}", 0) > 0 for r in report.values()):
            row(f"waiting on {kind} all-reduce", lambda r, k=kind: r["per_step"][f"sync {k}"])
            row(f"  {kind}: in flight", lambda r, k=kind: r["per_step"][f"in flight {k}"])
            row(f"  {kind}: first worker waits for the other",
                lambda r, k=kind: r["waiting"].get(k))
    row("waiting on input (tf.data)", lambda r: r["per_step"]["input"])
    row("other (Python, dispatch, copies)", lambda r: r["per_step"]["other"])
    row("collectives per step (bytes)", lambda r: ", ".join(
        f"{k} {v['count']} x ({v['bytes']:,} B)" for k, v in sorted(r["sizes"].items())) or "-")
    row("epoch boundary (ms, once per epoch)", lambda r: r["epoch_gap_ms"])
    row("examples/s (untraced epochs)", lambda r: round(r["examples_per_second"]))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("cnn", "heavy"), default="cnn")
    parser.add_argument("--batch", type=int, default=64, help="per replica")
    parser.add_argument("--out", type=Path, default=None)
    ns = parser.parse_args(argv)
    out = ns.out or Path(tempfile.mkdtemp(prefix="tfdistributed-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    cfg = bench.FULL
    report = profile(cfg, ns.model, ns.batch, out)
    (out / "profile.json").write_text(json.dumps(report, indent=1))
    print(markdown(report, ns.model, ns.batch))
    print(f"\ntraces and profile.json: {out}")


if __name__ == "__main__":
    main()
