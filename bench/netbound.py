"""Group 9, its network-bound part: a wide MLP over capped links, on 2 and 4 hosts.

Run by ``bench/hosts.py``, after the CNN's rounds; its report is group 9's
(``bench/results-hosts.md``). One job per link cap and worker count, each worker on its own network-namespace host. In that
job the arms take turns in every round (order rotated each round), so all arms share the same
processes, links and moment of a shared machine:

- ``fp32``: one all-reduce of the whole 32-bit gradient per step;
- ``packs``: the same in packs of ``PACK_BYTES`` (``set_bytes_per_pack``),
  each free to start as soon as its gradients are computed;
- ``fp16``, ``bf16``: ``gradient_compression``.

Each arm recompiles the model (a fresh Adam, learning rate 1e-3), restores the same initial weights and trains
2 epochs of the same batches: epoch 1 traces and warms up, epoch 2 is timed, and its loss (the
mean over epoch 2's steps, the same steps for every arm) is compared with fp32's. The arms
switch settings on the one strategy of the job: ``set_gradient_compression`` and
``set_bytes_per_pack`` (read when the train step is traced, as
:func:`tfdistributed.strategies.packing.gradient_options` says; ``fp32`` is one all-reduce, 0, not the
"auto" default, which packs a gradient this big; bench/overlap.py measures that). The job then
times all-reduces alone of 4 sizes, for the ring model's check: the line fitted at N = 2
projects N = 4.
"""

from __future__ import annotations

import statistics

HIDDEN = 1280  # 784-1280-1280-10: 2.66 M parameters, a 10.6 MB float32 gradient
PACK_BYTES = 2_500_000
ARMS = ("fp32", "packs", "fp16", "bf16")
SIZES = (250_000, 1_000_000, 4_000_000, 10_640_000)


def build(keras):
    return keras.Sequential([keras.Input(shape=(784,)),
                             keras.layers.Dense(HIDDEN, activation="relu"),
                             keras.layers.Dense(HIDDEN, activation="relu"),
                             keras.layers.Dense(10)])


def data(n: int):
    """``n`` random inputs, labelled by a fixed random linear teacher (a learnable task)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 784), dtype=np.float32)
    teacher = rng.standard_normal((784, 10), dtype=np.float32)
    return x, np.argmax(x @ teacher, axis=1).astype(np.int32)


def run_arm(tfd, keras, strategy, model, initial, arm, x, y, steps):
    """``(step ms, loss)`` of one arm: 2 epochs of ``steps`` steps, epoch 2 timed."""
    from workloads import make_timer

    tfd.set_gradient_compression(strategy, arm if arm in ("fp16", "bf16") else None)
    # The one strategy of the job takes each arm's packing in turn: one all-reduce (0, not
    # the "auto" default, which packs a gradient this big) but for the packs arm.
    tfd.set_bytes_per_pack(strategy, PACK_BYTES if arm == "packs" else 0)
    with strategy.scope():
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.
                      SparseCategoricalCrossentropy(from_logits=True))
    model.set_weights(initial)
    timer = make_timer(keras)
    batch = 64 * strategy.num_replicas_in_sync
    history = tfd.fit(model, x, y, epochs=2, batch_size=batch, shuffle=False, verbose=0,
                      callbacks=[timer])
    done, seconds = timer.steady()
    return seconds / done * 1000, history.history["loss"][-1]


def worker(rounds: int, steps: int, allreduce_reps: int) -> None:
    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    import keras

    from hosts import time_all_reduces
    from workloads import emit

    replicas = strategy.num_replicas_in_sync
    x, y = data(64 * replicas * steps)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = build(keras)
    initial = model.get_weights()
    out = {arm: {"step_ms": [], "loss": []} for arm in ARMS}
    for rnd in range(rounds):
        order = ARMS[rnd % len(ARMS):] + ARMS[:rnd % len(ARMS)]
        for arm in order:
            step_ms, loss = run_arm(tfd, keras, strategy, model, initial, arm, x, y, steps)
            out[arm]["step_ms"].append(round(step_ms, 1))
            out[arm]["loss"].append(loss)
    tfd.set_gradient_compression(strategy, None)
    # One line per arm: the launcher cuts a task's output lines at 400 characters.
    for arm, values in out.items():
        emit(arm=arm, **values)
    emit(grad_bytes=model.count_params() * 4, replicas=replicas,
         allreduce_ms={k: round(v, 2) for k, v in
                       time_all_reduces(strategy, SIZES, allreduce_reps).items()})


def run_job(link: str, workers: int, cfg: dict) -> dict:
    """One job of ``workers`` hosts on ``link``: per arm the slower worker's per-round step
    times and losses, and each size's all-reduce."""
    import tfdistributed as tfd
    from pinning import pin_tasks
    from run import RunFailed, base_env, failure_reason, parse_results
    from tfdistributed.testbeds.hostbed import HostBed

    args = ["--netbound-worker", "--rounds", str(cfg["rounds"]), "--steps", str(cfg["steps"]),
            "--allreduce-reps", str(cfg["netbound_allreduce_reps"])]
    bed = HostBed(workers, None if link == "uncapped" else link)
    try:
        bed.up()
        result = tfd.launch(cfg["script"], cluster=bed.cluster(workers), hosts=bed.launch_hosts(),
                            args=args, timeout=cfg["netbound_timeout"], env=base_env(),
                            echo=False, cwd=cfg["root"], prepare_task=pin_tasks())
    except tfd.TFDistributedError as e:
        raise RunFailed(failure_reason(str(e))) from None
    finally:
        bed.down()
    found = [_merged(parse_results(task.output)) for task in result.tasks]
    found = [r for r in found if "allreduce_ms" in r and set(r["arms"]) == set(ARMS)]
    if len(found) != workers:
        raise RunFailed(f"{len(found)} of {workers} workers reported")
    arms = {arm: {"step_ms": [max(r["arms"][arm]["step_ms"][i] for r in found)
                              for i in range(cfg["rounds"])],
                  "loss": found[0]["arms"][arm]["loss"]} for arm in ARMS}
    return {"arms": arms, "grad_bytes": found[0]["grad_bytes"], "replicas": found[0]["replicas"],
            "allreduce_ms": {k: max(r["allreduce_ms"][k] for r in found)
                             for k in found[0]["allreduce_ms"]}}


def _merged(lines: list) -> dict:
    """A worker's result lines as one: ``{"arms": {arm: values}, ...the last line's keys}``."""
    out = {"arms": {}}
    for line in lines:
        if "arm" in line:
            out["arms"][line.pop("arm")] = line
        else:
            out.update(line)
    return out


def run_all(cfg: dict) -> dict:
    from run import run_or_reason

    runs = {}
    for link in cfg["netbound_links"]:
        for workers in cfg["netbound_workers"]:
            key = f"{link}/{workers}"
            print(f"[bench] network-bound MLP: {workers} hosts at {link} ...", flush=True)
            runs[key] = run_or_reason(lambda: run_job(link, workers, cfg))
    return runs


# --- report ---------------------------------------------------------------------------------------

def _ratios(arm: dict, base: dict, key: str) -> list:
    return [a / b for a, b in zip(arm[key], base[key])]


def arms_table(runs: dict) -> list:
    out = ["| Link | Hosts | Arm | Step (ms) | Examples/s | Examples/s vs fp32 (per round) | "
           "Loss after the same steps | Loss vs fp32 (per round) |",
           "|---|---|---|---|---|---|---|---|"]
    for key, run in runs.items():
        link, workers = key.split("/")
        if isinstance(run, str):
            out.append(f"| {link} | {workers} | failed: {run[:200]} | | | | | |")
            continue
        base = run["arms"]["fp32"]
        batch = 64 * run["replicas"]
        for arm in ARMS:
            values = run["arms"][arm]
            step = statistics.median(values["step_ms"])
            speed = [1 / r for r in _ratios(values, base, "step_ms")]
            loss = _ratios(values, base, "loss")
            out.append(
                f"| {link} | {workers} | {arm} | {step:,.0f} | {batch / step * 1000:,.0f} | "
                f"**{statistics.median(speed):.2f}** ({', '.join(f'{r:.2f}' for r in speed)}) | "
                f"{statistics.median(values['loss']):.4f} | "
                f"{statistics.median(loss):.4f} ({', '.join(f'{r:.4f}' for r in loss)}) |")
    return out


def fit_line(sizes, ms):
    """``(a ms, B Gbit/s)`` of ``t = a + S / B`` fitted to N = 2's all-reduces (S on the wire)."""
    mean_s, mean_t = statistics.fmean(sizes), statistics.fmean(ms)
    slope = (sum((s - mean_s) * (t - mean_t) for s, t in zip(sizes, ms))
             / sum((s - mean_s) ** 2 for s in sizes))
    return max(mean_t - slope * mean_s, 0.0), (8 / (slope * 1e6) if slope > 0 else None)


def refit(points):
    """``(alpha ms per hop, B Gbit/s)`` of the ring model fitted to every ``(N, S, ms)``:
    ``t = 2(N-1)/N S / B + 2(N-1) alpha``, least squares in ``1/B`` and ``alpha``."""
    import numpy as np

    a = np.array([[2 * (n - 1) / n * s * 8 / 1e9 * 1000, 2 * (n - 1)] for n, s, _ in points])
    t = np.array([ms for _, _, ms in points])
    (inv_b, alpha), *_ = np.linalg.lstsq(a, t, rcond=None)
    return float(alpha), (1 / float(inv_b) if inv_b > 0 else None)


def projection_check(runs: dict, ring_ms) -> list:
    """Rows: per link and size, N = 4 measured against the ring model fitted at N = 2, and
    against the model refitted to N = 2 and 4 together where the first misses by > 20%."""
    out = ["| Link | Size | N = 2 (ms) | N = 4 measured (ms) | Projected from N = 2 (ms) | Error | "
           "Refitted model (ms) | Error |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    for link in sorted({k.split("/")[0] for k in runs}):
        two, four = runs.get(f"{link}/2"), runs.get(f"{link}/4")
        if not isinstance(two, dict) or not isinstance(four, dict):
            continue
        sizes = sorted(int(k) for k in two["allreduce_ms"])
        m2 = [two["allreduce_ms"][str(s)] for s in sizes]
        m4 = [four["allreduce_ms"][str(s)] for s in sizes]
        latency, gbit = fit_line(sizes, m2)
        if gbit is None:
            continue
        projected = [ring_ms(4, s, gbit, latency) for s in sizes]
        errors = [p / m - 1 for p, m in zip(projected, m4)]
        alpha, gbit2 = refit([(2, s, t) for s, t in zip(sizes, m2)]
                             + [(4, s, t) for s, t in zip(sizes, m4)])
        missed = any(abs(e) > 0.2 for e in errors) and gbit2 is not None
        for s, t2, t4, p, e in zip(sizes, m2, m4, projected, errors):
            r = ring_ms(4, s, gbit2, 2 * alpha) if missed else None
            out.append(f"| {link} | {s / 1e6:.3g} MB | {t2:,.1f} | {t4:,.1f} | {p:,.1f} | "
                       f"{e:+.0%} | {'-' if r is None else f'{r:,.1f}'} | "
                       f"{'-' if r is None else f'{r / t4 - 1:+.0%}'} |")
        notes.append(f"- {link}: fitted at N = 2, B = {gbit:.3g} Gbit/s, a = {latency:.3g} ms"
                     + (f"; refitted to N = 2 and 4, B = {gbit2:.3g} Gbit/s, "
                        f"{alpha:.3g} ms per hop" if missed else "; within 20%, kept"))
    return out + [""] + notes
