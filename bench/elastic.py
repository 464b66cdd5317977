"""Group 10b, hosts that come and go: how soon an elastic job trains again after losing a host
for good, and what growing back costs, beside a plain restart.

    .venv/bin/python bench/elastic.py            # ~6 min (root: the host bed), results-elastic.*
    .venv/bin/python bench/elastic.py --quick    # one round (~2 min), results-elastic-quick.*

How: 3 hosts of the bed (network namespaces), one worker each, the digits model with a global
batch of 96 (14 steps an epoch, 6 epochs), ``save_freq=6``, each step paced to at least 0.1 s (a
real job's pace, so that a host that comes back finds the job training). Each task stamps every
step it trains (``time.time()``: one machine, one clock); a step counts as trained when every
worker of the attempt has trained it.

- plain restart: worker 2 SIGKILLs itself after step 20 (its host stays);
  ``Restarts(max_restarts=1)``.
  Kill to training again = from the kill to the first step trained on attempt 1.
- host lost: worker 2 takes its host's link down and dies after step 20; ``min_workers=2``,
  ``join_timeout`` (the grace a host has to answer) 10 s. Loss to training again, on 2 workers,
  the grace included; and beyond the grace.
- host back: once the job has trained 10 steps on 2 workers, the link comes back; the job stops
  at its next backup and starts again on 3. Back to training again = from the link up to the
  first step on 3 workers; of which the grow itself = from the last step on 2 to the first on 3
  (the cost of the planned restart, comparable to a plain restart's); steps redone (0 when the
  job stopped at a backup, as it should).

Ratios to the plain restart, per round; arms alternate within a round and flip every round.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

CONFIGS = {"full": {"reps": 3, "epochs": 6, "lose_at": 20, "back_after": 10, "grace": 10,
                    "timeout": 420},
           "quick": {"reps": 1, "epochs": 6, "lose_at": 20, "back_after": 10, "grace": 10,
                     "timeout": 420}}
BATCH, EXAMPLES, SAVE_FREQ, STEP_SECONDS = 96, 1344, 6, 0.1


# --- the worker: one task of the 3-worker job --------------------------------------------------

def worker(ns) -> None:
    import tfdistributed as tfd

    strategy = tfd.make_strategy("auto")
    import keras

    task = json.loads(os.environ["TF_CONFIG"])["task"]
    attempt = int(os.environ.get("TFDISTRIBUTED_ATTEMPT", "0"))
    workers = tfd.num_workers()
    stamps = Path(ns.stamps) / f"worker-{task['index']}.{attempt}"

    class Stamps(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.began = time.monotonic()

        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            time.sleep(max(0.0, STEP_SECONDS - (time.monotonic() - self.began)))
            with open(stamps, "a") as f:
                f.write(json.dumps({"time": time.time(), "step": step, "workers": workers}) + "\n")
            if attempt == 0 and task["index"] == 2 and step == ns.lose_at:
                if ns.mode == "host":
                    lose_this_host(task)
                os.kill(os.getpid(), signal.SIGKILL)

    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input((8, 8, 1)), keras.layers.Flatten(),
                                  keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    (x, y), _ = tfd.digits_arrays()
    tfd.fit(model, x[:EXAMPLES], y[:EXAMPLES], epochs=ns.epochs, batch_size=BATCH, shuffle=False,
            verbose=0, backup_dir=ns.backup, save_freq=SAVE_FREQ, callbacks=[Stamps()])


def lose_this_host(task) -> None:
    """Take this host's link down: only on a host of the bed (its eth0 carries this task's own
    address, in the bed's subnet), never on the machine itself."""
    from tfdistributed.testbeds.hostbed import SUBNET

    config = json.loads(os.environ["TF_CONFIG"])
    host = config["cluster"]["worker"][task["index"]].rpartition(":")[0]
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", "eth0"],
                           capture_output=True, text=True, timeout=20).stdout
    if not host.startswith(SUBNET + ".") or f" {host}/" not in shown:
        raise SystemExit("refusing to take a link down anywhere but on a host of the bed")
    subprocess.run(["ip", "link", "set", "eth0", "down"], check=True, timeout=20)


# --- the driver ----------------------------------------------------------------------------------

def read_stamps(directory: Path) -> dict:
    """``{attempt: {step: time every worker had trained it}}``."""
    by_attempt: dict = {}
    for path in directory.iterdir():
        attempt = int(path.name.split(".")[1])
        for line in path.read_text().splitlines():
            s = json.loads(line)
            steps = by_attempt.setdefault(attempt, {})
            steps.setdefault(s["step"], []).append(s["time"])
    return {a: {step: max(times) for step, times in steps.items()}
            for a, steps in by_attempt.items()}


def one_job(bed, cfg: dict, mode: str) -> tuple:
    import tfdistributed as tfd

    from run import RunFailed, base_env

    with tempfile.TemporaryDirectory(prefix="tfd-elastic-") as tmp:
        stamps = Path(tmp, "stamps")
        stamps.mkdir()
        lost, link_up = bed.hosts[2], {}
        watcher = threading.Thread(target=bring_back, args=(stamps, lost, cfg, link_up),
                                   daemon=True) if mode == "host" else None
        if watcher:
            watcher.start()
        restarts = (tfd.Restarts(join_timeout=cfg["grace"]) if mode == "host"
                    else tfd.Restarts(max_restarts=1))
        try:
            tfd.launch(__file__, tfd.Scaling(cluster=bed.cluster(3),
                                             min_workers=2 if mode == "host" else None),
                       engine=tfd.engines.Local(hosts=bed.launch_hosts()), timeout=cfg["timeout"],
                       env=base_env(), cwd=ROOT,
                       args=["--worker", "--mode", mode, "--stamps", str(stamps), "--backup",
                             str(Path(tmp, "backup")), "--lose-at", str(cfg["lose_at"]),
                             "--epochs", str(cfg["epochs"])], restarts=restarts,
                       watch=tfd.Watch(echo=False))
        except tfd.TFDistributedError as e:
            raise RunFailed(str(e).splitlines()[0]) from None
        finally:
            subprocess.run(["ip", "-n", lost.name, "link", "set", "eth0", "up"], timeout=20)
        return read_stamps(stamps), link_up.get("time")


def bring_back(stamps: Path, host, cfg: dict, link_up: dict) -> None:
    """Once attempt 1 has trained ``back_after`` steps, bring the lost host's link back."""
    deadline = time.monotonic() + cfg["timeout"]
    while time.monotonic() < deadline:
        try:
            if len(read_stamps(stamps).get(1, {})) >= cfg["back_after"]:
                subprocess.run(["ip", "-n", host.name, "link", "set", "eth0", "up"], timeout=20)
                link_up["time"] = time.time()
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)


def kill_time(steps: dict, lose_at: int) -> float:
    """When worker 2 died: just after it stamped ``lose_at`` (the others' stamps of that step
    come within milliseconds)."""
    return steps[0][lose_at]


def run_plain(bed, cfg: dict) -> dict:
    from run import RunFailed

    steps, _ = one_job(bed, cfg, "kill")
    if 1 not in steps:
        raise RunFailed("the job did not restart")
    return {"kill_to_training_s": min(steps[1].values()) - kill_time(steps, cfg["lose_at"])}


def run_elastic(bed, cfg: dict) -> dict:
    from run import RunFailed

    steps, up = one_job(bed, cfg, "host")
    if sorted(steps) != [0, 1, 2] or up is None:
        raise RunFailed(f"attempts {sorted(steps)}, link up {up}: expected a shrink and a grow")
    lost = min(steps[1].values()) - kill_time(steps, cfg["lose_at"])
    last2, first3 = max(steps[1]), min(steps[2])
    return {"loss_to_training_s": lost, "beyond_grace_s": lost - cfg["grace"],
            "back_to_training_s": steps[2][first3] - up,
            "grow_restart_s": steps[2][first3] - steps[1][last2],
            "steps_redone_at_grow": last2 - first3 + 1}


def run_rounds(cfg: dict) -> dict:
    from run import run_or_reason

    from tfdistributed.testbeds.hostbed import HostBed

    runs = {"plain": [], "elastic": []}
    with HostBed(3) as bed:
        for rnd in range(cfg["reps"]):
            order = ["plain", "elastic"] if rnd % 2 == 0 else ["elastic", "plain"]
            for name in order:
                print(f"[bench] hosts that come and go: round {rnd + 1}/{cfg['reps']}, {name} ...",
                      flush=True)
                arm = run_plain if name == "plain" else run_elastic
                runs[name].append(run_or_reason(lambda: arm(bed, cfg), show_result=True))
    return runs


# --- report --------------------------------------------------------------------------------------

def _ok(runs):
    return [r for r in runs if isinstance(r, dict)]


def _cell(values, unit="s"):
    if not values:
        return "-"
    return (f"**{statistics.median(values):.1f}**{unit} "
            f"({', '.join(f'{v:.1f}' for v in values)})")


def write_report(runs, cfg, quick, started, seconds, prefix: Path, command) -> str:
    plain, elastic = _ok(runs["plain"]), _ok(runs["elastic"])
    rounds = list(zip(plain, elastic))
    base = [p["kill_to_training_s"] for p, _ in rounds]
    rows = [("Plain restart: worker killed, its host stays (max_restarts=1): kill to training again",
             _cell([p["kill_to_training_s"] for p in plain]), "1.00"),
            (f"Host lost for good (min_workers=2): loss to training again on 2 workers, the "
             f"{cfg['grace']} s grace included", _cell([e["loss_to_training_s"] for e in elastic]),
             _ratio([e["loss_to_training_s"] for _, e in rounds], base)),
            ("... of which beyond the grace (probes, stopping the others, the new attempt)",
             _cell([e["beyond_grace_s"] for e in elastic]),
             _ratio([e["beyond_grace_s"] for _, e in rounds], base)),
            ("Host back: link up to training again on 3 workers (next probe, next backup, restart)",
             _cell([e["back_to_training_s"] for e in elastic]),
             _ratio([e["back_to_training_s"] for _, e in rounds], base)),
            ("... of which the planned restart: last step on 2 to first step on 3",
             _cell([e["grow_restart_s"] for e in elastic]),
             _ratio([e["grow_restart_s"] for _, e in rounds], base)),
            ("Steps redone when growing (0: it stopped at a backup)",
             _cell([e["steps_redone_at_grow"] for e in elastic], ""), "-")]
    failed = [r for arm in runs.values() for r in arm if not isinstance(r, dict)]
    lines = [f"# Group 10b: hosts that come and go ({'quick' if quick else 'full'})", "",
             f"{started:%Y-%m-%d %H:%M} UTC, {len(rounds)} round(s), {seconds:.0f} s; load "
             f"average {os.getloadavg()[0]:.1f} at the end. Command: `{command}`", "",
             "| What | Seconds (median, per round) | vs the plain restart (median of per-round ratios) |",
             "|---|---|---|", *[f"| {a} | {b} | {c} |" for a, b, c in rows], ""]
    if failed:
        lines += ["Failed runs: " + "; ".join(map(str, failed))[:500], ""]
    prefix.with_suffix(".md").write_text("\n".join(lines))
    prefix.with_suffix(".json").write_text(json.dumps(
        {"command": command, "config": cfg, "runs": runs}, indent=2) + "\n")
    return "\n".join(lines)


def _ratio(values, base) -> str:
    ratios = [v / b for v, b in zip(values, base) if b]
    return f"**{statistics.median(ratios):.2f}**" if ratios else "-"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("kill", "host"), help=argparse.SUPPRESS)
    parser.add_argument("--stamps", help=argparse.SUPPRESS)
    parser.add_argument("--backup", help=argparse.SUPPRESS)
    parser.add_argument("--lose-at", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=6, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.worker:
        return worker(ns)
    from run import run_own_host_group

    run_own_host_group(__file__, CONFIGS, ns.quick, ns.out, argv, run_rounds, write_report)


if __name__ == "__main__":
    main()
