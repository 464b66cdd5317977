"""Group 9, its network-bound part: a wide MLP (and the bench CNN) over capped links, on 2 and
4 hosts and on loopback, with 32-bit, packed, 16-bit and low-rank (PowerSGD) gradients.

Run by ``bench/hosts.py``, after the CNN's rounds; its report is group 9's
(``bench/results-hosts.md``). One job per link cap and worker count, each worker on its own
network-namespace host (or the usual local cluster on 127.0.0.1 for ``loopback``). In that job
the arms take turns in every round (order rotated each round), so all arms share the same
processes, links and moment of a shared machine:

- ``fp32``: one all-reduce of the whole 32-bit gradient per step;
- ``packs``: the same in packs of ``PACK_BYTES`` (``set_bytes_per_pack``),
  each free to start as soon as its gradients are computed;
- ``fp16``, ``bf16``: ``gradient_compression``;
- ``powersgd``: ``gradient_compression=powersgd(**POWERSGD)``: low-rank, from step
  ``warmup_steps + 1`` on (all of the timed epoch).

Each arm recompiles the model (a fresh Adam, learning rate 1e-3), restores the same initial weights and trains
2 epochs of the same batches: epoch 1 traces and warms up, epoch 2 is timed, and its loss (the
mean over epoch 2's steps, the same steps for every arm) is compared with fp32's. The arms
switch settings on the one strategy of the job: ``set_gradient_compression`` and
``set_bytes_per_pack`` (read when the train step is traced and the optimizer built, as
:func:`tfdistributed.strategies.packing.gradient_options` says; ``fp32`` is one all-reduce, 0, not the
"auto" default, which packs a gradient this big; bench/overlap.py measures that). The bench
CNN (``workloads.cnn``, a 0.14 MB gradient: where compression should not pay) then takes
``CNN_ARMS`` the same way. The job then times all-reduces alone of 4 sizes, for the ring
model's check: the line fitted at N = 2 projects N = 4.

The held-out accuracy is a job of its own (:func:`accuracy_worker`, 2 workers on loopback:
the arms compute the same numbers on any link): each model trains ``cfg["accuracy_epochs"]``
epochs of the real handwritten digits (scikit-learn's, 8x8 scaled to 28x28) from the same
weights in each of ``ACCURACY_ARMS``, then is evaluated on the 450 held-out digits.
"""

from __future__ import annotations

import os
import statistics

HIDDEN = 1280  # 784-1280-1280-10: 2.66 M parameters, a 10.6 MB float32 gradient
PACK_BYTES = 2_500_000
ARMS = ("fp32", "packs", "fp16", "bf16", "powersgd")
CNN_ARMS = ("fp32", "fp16", "powersgd")
ACCURACY_ARMS = ("fp32", "fp16", "powersgd")
# Rank 4 (the default), compressed from the 6th step: every step of the timed epoch, and all
# but the first 5 of the accuracy runs.
POWERSGD = {"rank": 4, "warmup_steps": 5}
CNN_STEPS = 20  # a CNN step is ~30 ms: more steps than the MLP's to time one epoch
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


def compression(tfd, arm):
    """What ``set_gradient_compression`` takes for ``arm``."""
    if arm == "powersgd":
        return tfd.powersgd(**POWERSGD)
    return arm if arm in ("fp16", "bf16") else None


def sent_bytes(tfd, model, arm) -> int:
    """Bytes one worker puts into a step's gradient all-reduces under ``arm`` (a ring sends
    2(N-1)/N of them over its link); the few counts and logs aside."""
    from tfdistributed.strategies import lowrank

    shapes = [tuple(v.shape) for v in model.trainable_variables]
    if arm == "powersgd":
        return 4 * lowrank.wire_elements(shapes, tfd.powersgd(**POWERSGD))
    return model.count_params() * (2 if arm in ("fp16", "bf16") else 4)


def compile_arm(tfd, keras, strategy, model, initial, arm, metrics=()):
    """``model`` recompiled for ``arm`` (a fresh Adam, so a fresh PowerSGD state), from
    ``initial``."""
    tfd.set_gradient_compression(strategy, compression(tfd, arm))
    # The one strategy of the job takes each arm's packing in turn: one all-reduce (0, not
    # the "auto" default, which packs a gradient this big) but for the packs arm.
    tfd.set_bytes_per_pack(strategy, PACK_BYTES if arm == "packs" else 0)
    with strategy.scope():
        model.compile(optimizer=keras.optimizers.Adam(1e-3), metrics=list(metrics),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.set_weights(initial)


def run_arm(tfd, keras, strategy, model, initial, arm, x, y, steps):
    """``(step ms, loss)`` of one arm: 2 epochs of ``steps`` steps, epoch 2 timed."""
    from workloads import make_timer

    compile_arm(tfd, keras, strategy, model, initial, arm)
    timer = make_timer(keras)
    batch = 64 * strategy.num_replicas_in_sync
    history = tfd.fit(model, x[:batch * steps], y[:batch * steps], epochs=2, batch_size=batch,
                      shuffle=False, verbose=0, callbacks=[timer])
    done, seconds = timer.steady()
    return seconds / done * 1000, history.history["loss"][-1]


def run_model(tfd, keras, strategy, model, arms, x, y, steps, rounds) -> dict:
    """Every arm in every round (order rotated each round): per arm its step times and losses,
    and the bytes it sends per step."""
    initial = model.get_weights()
    out = {arm: {"step_ms": [], "loss": [], "sent": sent_bytes(tfd, model, arm)} for arm in arms}
    for rnd in range(rounds):
        for arm in arms[rnd % len(arms):] + arms[:rnd % len(arms)]:
            step_ms, loss = run_arm(tfd, keras, strategy, model, initial, arm, x, y, steps)
            out[arm]["step_ms"].append(round(step_ms, 1))
            out[arm]["loss"].append(loss)
    return out


def worker(rounds: int, steps: int, allreduce_reps: int) -> None:
    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    import keras

    from hosts import time_all_reduces
    from workloads import MODELS, emit, synthetic_images

    replicas = strategy.num_replicas_in_sync
    keras.utils.set_random_seed(0)
    with strategy.scope():
        mlp, cnn = build(keras), MODELS["cnn"](keras)
    x, y = data(64 * replicas * steps)
    results = {"mlp": run_model(tfd, keras, strategy, mlp, ARMS, x, y, steps, rounds)}
    x, y = synthetic_images(64 * replicas * CNN_STEPS)
    results["cnn"] = run_model(tfd, keras, strategy, cnn, CNN_ARMS, x, y, CNN_STEPS, rounds)
    tfd.set_gradient_compression(strategy, None)
    # One line per arm: the launcher cuts a task's output lines at 400 characters.
    for name, arms in results.items():
        for arm, values in arms.items():
            emit(model=name, arm=arm, **values)
    emit(grad_bytes=mlp.count_params() * 4, cnn_grad_bytes=cnn.count_params() * 4,
         replicas=replicas, allreduce_ms={k: round(v, 2) for k, v in
                                          time_all_reduces(strategy, SIZES, allreduce_reps).items()})


def digits_28():
    """The handwritten digits (train and held-out), 8x8 scaled 3x and padded to 28x28x1."""
    import numpy as np

    import tfdistributed as tfd

    def scaled(images):
        big = np.kron(images, np.ones((1, 3, 3, 1), np.float32))
        return np.pad(big, ((0, 0), (2, 2), (2, 2), (0, 0)))

    (x, y), (xt, yt) = tfd.digits_arrays()
    return (scaled(x), y), (scaled(xt), yt)


def accuracy_worker(epochs: int) -> None:
    """Held-out accuracy and loss of the wide MLP and the bench CNN after ``epochs`` epochs of
    the digits in each of ``ACCURACY_ARMS``, from the same weights, the same batches."""
    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    import keras

    from workloads import MODELS, emit

    (x, y), (xt, yt) = digits_28()
    batch = 64 * strategy.num_replicas_in_sync
    keras.utils.set_random_seed(0)
    with strategy.scope():
        models = {"mlp": build(keras), "cnn": MODELS["cnn"](keras)}
    for name, model in models.items():
        flat = (lambda a: a.reshape(len(a), -1)) if name == "mlp" else (lambda a: a)
        initial = model.get_weights()
        for arm in ACCURACY_ARMS:
            compile_arm(tfd, keras, strategy, model, initial, arm, metrics=["accuracy"])
            history = tfd.fit(model, flat(x), y, epochs=epochs, batch_size=batch, shuffle=False,
                              verbose=0)
            held_out = tfd.evaluate(model, flat(xt), yt, batch_size=batch, verbose=0)
            emit(model=name, arm=arm, accuracy=round(held_out["accuracy"], 4),
                 loss=round(held_out["loss"], 4), train_loss=round(history.history["loss"][-1], 4),
                 steps=int(model.optimizer.iterations.numpy()))


def launch_job(link: str, workers: int, args: list, timeout: float, cfg: dict) -> list:
    """Each worker's result lines of one job of ``workers`` tasks: on hosts of the bed at
    ``link`` (or on 127.0.0.1 for ``loopback``), pinned one per core."""
    import tfdistributed as tfd
    from pinning import pin_tasks
    from run import RunFailed, base_env, failure_reason, parse_results
    from tfdistributed.testbeds.hostbed import HostBed

    common = dict(args=args, timeout=timeout, env=base_env(), cwd=cfg["root"],
                  watch=tfd.Watch(echo=False))
    bed = None if link == "loopback" else HostBed(workers, None if link == "uncapped" else link)
    try:
        if bed is None:
            result = tfd.launch(cfg["script"], workers=workers,
                                engine=tfd.engines.Local(prepare_task=pin_tasks()), **common)
        else:
            bed.up()
            result = tfd.launch(cfg["script"], tfd.Scaling(cluster=bed.cluster(workers)),
                                engine=tfd.engines.Local(hosts=bed.launch_hosts(),
                                                         prepare_task=pin_tasks()), **common)
    except tfd.TFDistributedError as e:
        raise RunFailed(failure_reason(str(e))) from None
    finally:
        if bed is not None:
            bed.down()
    return [parse_results(task.output) for task in result.tasks]


def run_job(link: str, workers: int, cfg: dict) -> dict:
    """One job of ``workers`` hosts on ``link``: per model and arm the slower worker's
    per-round step times, the losses and bytes sent, and each size's all-reduce."""
    from run import RunFailed

    args = ["--netbound-worker", "--rounds", str(cfg["rounds"]), "--steps", str(cfg["steps"]),
            "--allreduce-reps", str(cfg["netbound_allreduce_reps"])]
    found = [_merged(lines) for lines in launch_job(link, workers, args,
                                                    cfg["netbound_timeout"], cfg)]
    found = [r for r in found if "allreduce_ms" in r and set(r["models"].get("mlp", ())) == set(ARMS)]
    if len(found) != workers:
        raise RunFailed(f"{len(found)} of {workers} workers reported")
    models = {name: {arm: {"step_ms": [max(r["models"][name][arm]["step_ms"][i] for r in found)
                                       for i in range(cfg["rounds"])],
                           "loss": found[0]["models"][name][arm]["loss"],
                           "sent": found[0]["models"][name][arm]["sent"]} for arm in arms}
              for name, arms in (("mlp", ARMS), ("cnn", CNN_ARMS))}
    return {"arms": models["mlp"], "cnn_arms": models["cnn"], "grad_bytes": found[0]["grad_bytes"],
            "cnn_grad_bytes": found[0]["cnn_grad_bytes"], "replicas": found[0]["replicas"],
            "allreduce_ms": {k: max(r["allreduce_ms"][k] for r in found)
                             for k in found[0]["allreduce_ms"]}}


def _merged(lines: list) -> dict:
    """A worker's result lines as one: ``{"models": {model: {arm: values}}, ...the last line's
    keys}``."""
    out = {"models": {}}
    for line in lines:
        if "arm" in line:
            out["models"].setdefault(line.pop("model"), {})[line.pop("arm")] = line
        else:
            out.update(line)
    return out


def run_accuracy(cfg: dict) -> dict:
    """``{model: {arm: held-out accuracy, loss...}}`` from the 2-worker loopback job."""
    from run import RunFailed

    args = ["--accuracy-worker", "--epochs", str(cfg["accuracy_epochs"])]
    chief = launch_job("loopback", 2, args, cfg["netbound_timeout"], cfg)[0]
    out = {}
    for line in chief:
        out.setdefault(line.pop("model"), {})[line.pop("arm")] = line
    if set(out.get("mlp", ())) != set(ACCURACY_ARMS):
        raise RunFailed(f"the accuracy job reported {sorted(out)}")
    return out


def run_all(cfg: dict) -> dict:
    from run import run_or_reason

    runs, load = {}, {}
    for link in cfg["netbound_links"]:
        for workers in cfg["netbound_workers"]:
            if link == "loopback" and workers != 2:
                continue  # 4 tasks on 127.0.0.1 of a 2-core machine measure the cores
            key = f"{link}/{workers}"
            print(f"[bench] network-bound MLP: {workers} hosts at {link} ...", flush=True)
            before = os.getloadavg()[0]
            runs[key] = run_or_reason(lambda: run_job(link, workers, cfg))
            load[key] = [round(before, 1), round(os.getloadavg()[0], 1)]
    print("[bench] held-out accuracy, 2 workers on loopback ...", flush=True)
    runs["accuracy"] = run_or_reason(lambda: run_accuracy(cfg))
    runs["load"] = load
    return runs


# --- report ---------------------------------------------------------------------------------------

def _ratios(arm: dict, base: dict, key: str) -> list:
    return [a / b for a, b in zip(arm[key], base[key])]


def _links(runs: dict) -> dict:
    """The timing jobs of ``runs`` (not the accuracy job): ``{"link/hosts": run}``."""
    return {k: v for k, v in runs.items() if "/" in k}


def arms_table(runs: dict, model: str = "mlp") -> list:
    """Per link, host count and arm of ``model`` (``"mlp"``: ``ARMS``, ``"cnn"``:
    ``CNN_ARMS``): step, examples/s and its ratio to fp32, loss and its ratio, bytes sent."""
    key, arms, label = (("arms", ARMS, "Arm") if model == "mlp"
                        else ("cnn_arms", CNN_ARMS, "Arm (bench CNN)"))
    out = [f"| Link | Hosts | {label} | Step (ms) | Examples/s | Examples/s vs fp32 (per round) | "
           "Loss after the same steps | Loss vs fp32 (per round) | Sent per step (MB) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, run in _links(runs).items():
        link, workers = name.split("/")
        if isinstance(run, str):
            out.append(f"| {link} | {workers} | failed: {run[:200]} | | | | | | |")
            continue
        base = run[key]["fp32"]
        batch = 64 * run["replicas"]
        for arm in arms:
            values = run[key][arm]
            step = statistics.median(values["step_ms"])
            speed = [1 / r for r in _ratios(values, base, "step_ms")]
            loss = _ratios(values, base, "loss")
            out.append(
                f"| {link} | {workers} | {arm} | {step:,.0f} | {batch / step * 1000:,.0f} | "
                f"**{statistics.median(speed):.2f}** ({', '.join(f'{r:.2f}' for r in speed)}) | "
                f"{statistics.median(values['loss']):.4f} | "
                f"{statistics.median(loss):.4f} ({', '.join(f'{r:.4f}' for r in loss)}) | "
                f"{values['sent'] / 1e6:.3g} |")
    return out


def accuracy_table(runs: dict) -> list:
    """Held-out accuracy and loss per model and arm, and the accuracy's difference from fp32."""
    found = runs.get("accuracy")
    out = ["| Model | Gradients | Held-out accuracy | vs 32 bits | Held-out loss | Train loss "
           "(last epoch) | Steps |", "|---|---|---|---|---|---|---|"]
    if not isinstance(found, dict):
        return out + [f"| failed: {str(found)[:200]} | | | | | | |"]
    for model, arms in found.items():
        for arm in ACCURACY_ARMS:
            r = arms[arm]
            out.append(f"| {'wide MLP' if model == 'mlp' else 'bench CNN'} | {arm} | "
                       f"{r['accuracy']:.4f} | {r['accuracy'] - arms['fp32']['accuracy']:+.4f} | "
                       f"{r['loss']:.4f} | {r['train_loss']:.4f} | {r['steps']} |")
    return out


def targets(runs: dict) -> list:
    """Issue 40's targets against this run: at 100 Mbit/s on 2 hosts powersgd >= 5x fp32's
    examples/s on the wide MLP, and held-out accuracy within 0.02 of fp32's on both models."""
    out = []
    run = runs.get("100mbit/2")
    if isinstance(run, dict):
        speed = statistics.median(1 / r for r in _ratios(run["arms"]["powersgd"],
                                                         run["arms"]["fp32"], "step_ms"))
        out.append(f"- powersgd >= 5x the examples/s of fp32, wide MLP, 2 hosts at 100 Mbit/s: "
                   f"{speed:.2f}x, {'met' if speed >= 5 else 'MISSED'}")
    found = runs.get("accuracy")
    if isinstance(found, dict):
        for model, arms in found.items():
            gap = arms["powersgd"]["accuracy"] - arms["fp32"]["accuracy"]
            out.append(f"- held-out accuracy within 0.02 of fp32's, "
                       f"{'wide MLP' if model == 'mlp' else 'bench CNN'}: {gap:+.4f}, "
                       f"{'met' if abs(gap) <= 0.02 else 'MISSED'}")
    return out


def load_line(runs: dict) -> str:
    """The machine's load average (1 min) before and after each timing job."""
    load = runs.get("load") or {}
    return "; ".join(f"{key}: {a} -> {b}" for key, (a, b) in load.items())


def break_even(runs: dict, model: str, workers: str = "2") -> str:
    """Where PowerSGD pays for ``model`` on ``workers`` hosts: its examples/s against fp32's on
    each link measured (the tables' medians of per-round ratios), and where the lines
    ``t = c + k / B`` through each arm's two capped links (B = 1 and 0.1 Gbit/s, the medians'
    step times) cross: an estimate, said as one, which noise of a few ms moves a lot."""
    key = "arms" if model == "mlp" else "cnn_arms"
    steps, ratios = {}, []
    for name, run in _links(runs).items():
        link, hosts = name.split("/")
        if hosts == workers and isinstance(run, dict):
            arms = run[key]
            steps[link] = {arm: statistics.median(arms[arm]["step_ms"]) for arm in arms}
            speed = [1 / r for r in _ratios(arms["powersgd"], arms["fp32"], "step_ms")]
            ratios.append(f"{link} {statistics.median(speed):.2f}x")
    said = "powersgd vs fp32 examples/s: " + ", ".join(ratios)
    if not {"1gbit", "100mbit"} <= set(steps):
        return said
    lines = {}
    for arm in ("fp32", "powersgd"):  # x = 1 / B, B in Gbit/s
        k = (steps["100mbit"][arm] - steps["1gbit"][arm]) / (1 / 0.1 - 1 / 1)
        lines[arm] = (steps["1gbit"][arm] - k, k)
    (c_f, k_f), (c_p, k_p) = lines["fp32"], lines["powersgd"]
    if c_p <= c_f and k_p <= k_f:
        where = "powersgd faster at every bandwidth"
    elif c_p >= c_f and k_p >= k_f:
        where = "powersgd slower at every bandwidth"
    elif c_p > c_f:
        where = f"powersgd faster below about {(k_f - k_p) / (c_p - c_f):.2g} Gbit/s"
    else:
        where = f"powersgd faster above about {(k_p - k_f) / (c_f - c_p):.2g} Gbit/s"
    return (f"{said}; lines through the capped links: fp32 {c_f:.0f} ms + {k_f:.0f} ms x "
            f"(1 Gbit/s / B), powersgd {c_p:.0f} ms + {k_p:.0f} ms x (1 Gbit/s / B): {where}")


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
