"""The stress tier for the suite's races (``make stress``; not part of ``make test``).

    stress.py [--rounds N] [--groups NAME,...] [--hog N] [--cap-minutes M] [--log DIR]

Runs the tests of each group (:data:`GROUPS`: the self-healing jobs' kills, the chaos of kills
at random steps, preemptions, elastic jobs, the end-of-job barrier) ``--rounds`` times (default
20), one pytest run per group and round, while a bounded CPU hog keeps the machine busy: one
busy-loop process per core (``--hog``, default every core), each of which ends by itself after
``--cap-minutes`` (default 360) even if this script is killed, and is killed when the script
ends. The run as a whole stops starting rounds at that cap too. The run's jobs take their ports
from a port server of its own (:data:`PORTS`), apart from any other test session's.

It reports, per test, how many of its runs passed, and each misattribution: a failed run whose
assertion names another task than the one the test killed, with the kill steps the test drew
("kill steps drawn: [...]", printed by tests/python/engines/test_self_healing.py). Everything
goes to ``--log`` (default ``.logs/stress``): each run's JUnit XML and output, and
``summary.json`` / ``summary.txt``. Exit status: 0 if every run of every test passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = "tests/python/engines"
SELF_HEALING = f"{ENGINES}/test_self_healing.py"
#: Each group: the pytest arguments of its tests.
GROUPS = {
    "self-healing": [f"{SELF_HEALING}::test_the_same_worker_killed_on_consecutive_attempts_"
                     f"after_progress_heals",
                     f"{SELF_HEALING}::test_a_killed_task_restarts_the_whole_job_with_new_ports"],
    # Kills at steps drawn at random, on this machine (warm and cold) and on Ray.
    "chaos": [f"{SELF_HEALING}::test_a_worker_killed_at_a_random_step_resumes_at_the_last_backup",
              f"{ENGINES}/test_elastic_ray.py"],
    "preemption": [SELF_HEALING, "-k", "preempt"],
    "elastic": [f"{ENGINES}/test_elastic.py", f"{ENGINES}/test_elastic_slurm.py", "-m",
                "cluster"],
    "leave": [f"{ENGINES}/test_leave_together.py", "tests/r/test_r_leave_together.py"],
}
#: The ports this run's jobs get (below the suite's 15000-24999 and the kernel's ephemeral range).
PORTS = "10000-14999"
#: Longest one pytest run may take before it is stopped (and counted as failed).
RUN_TIMEOUT = 1800.0
# An assertion on the tasks named in a job's attempts, and the task it names instead.
_NAMED = re.compile(r"assert (\[[^\]]*'(?:worker|chief|ps) \d[^\]]*\]|'(?:worker|chief|ps) \d')"
                    r" == (.+)")
_KILL_STEPS = re.compile(r"kill steps drawn: (\[[\d, ]*\])")


def hog(cores: int, cap_seconds: float) -> list:
    """``cores`` busy-loop processes, each ending by itself after ``cap_seconds`` (and on this
    process' death: PR_SET_PDEATHSIG)."""
    loop = (f"import ctypes, signal, time; ctypes.CDLL(None).prctl(1, signal.SIGKILL); "
            f"end = time.monotonic() + {cap_seconds}\n"
            f"while time.monotonic() < end: pass")
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(cores)]


def port_server(log_dir: str):
    """portpicker's port server for the whole run, serving :data:`PORTS` (tests/conftest.py
    then starts none: each pytest session's own serves 15000-24999 from its top, and two
    sessions at once, this run's and a colleague's on a shared machine, hand out the same
    ports: "Could not start gRPC server", seen in 3 of 20 rounds)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "python", "support"))
    import portserver

    address = os.path.join(log_dir, "portserver.socket")
    if os.path.exists(address):
        os.remove(address)
    try:
        proc = portserver.start(address, pool=PORTS)
    except RuntimeError as e:
        raise SystemExit(str(e)) from None
    os.environ["PORTSERVER_ADDRESS"] = address
    return proc


def stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def run_group(args: list, junit: str, out: str, timeout: float) -> None:
    """One pytest run of a group's tests, its output in ``out``, stopped after ``timeout``."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
               f"--junitxml={junit}", "-o", "junit_logging=all", *args]
    with open(out, "wb") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log.write(f"\n[stress] stopped after {timeout:g} s\n".encode())
        except BaseException:  # Ctrl-C, SIGTERM: the run and its jobs go too
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise


def outcomes(junit: str) -> list:
    """``(test id, passed, failure text, captured output)`` of each test a JUnit XML lists."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return []
    found = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped") is not None
        said = "".join((e.text or "") for e in case.iter() if e.tag in ("system-out",
                                                                       "system-err"))
        text = "" if bad is None else (bad.get("message", "") + "\n" + (bad.text or ""))
        found.append((name, bad is None and not skipped, text, said, skipped))
    return found


def misattribution(text: str, said: str) -> dict | None:
    """A failure whose assertion names another task than the one expected, with the test's
    kill steps (None for any other failure)."""
    named = _NAMED.search(text)
    if not named:
        return None
    steps = _KILL_STEPS.search(said) or _KILL_STEPS.search(text)
    return {"named": named.group(1), "expected": named.group(2).strip(),
            "kill_steps": steps.group(1) if steps else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--groups", default=",".join(GROUPS))
    parser.add_argument("--hog", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cap-minutes", type=float, default=360.0)
    parser.add_argument("--log", default=os.path.join(ROOT, ".logs", "stress"))
    ns = parser.parse_args(argv)
    groups = [g.strip() for g in ns.groups.split(",") if g.strip()]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or ns.rounds < 1 or ns.hog < 0:
        parser.error(f"--groups takes names of {', '.join(GROUPS)} (got {', '.join(unknown)}); "
                     f"--rounds >= 1, --hog >= 0" if unknown else "--rounds >= 1, --hog >= 0")
    os.makedirs(ns.log, exist_ok=True)
    cap = ns.cap_minutes * 60
    started = time.monotonic()
    counts = defaultdict(lambda: [0, 0])  # test -> [passed, ran]
    wrong, rounds_run = [], 0
    # SIGTERM ends the run as Ctrl-C does: the running pytest and the hog are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    hogs = [port_server(ns.log)] + hog(ns.hog, cap)
    print(f"[stress] {ns.rounds} rounds of {', '.join(groups)}, {ns.hog} busy-loop process(es), "
          f"at most {ns.cap_minutes:g} min; logs in {ns.log}", flush=True)
    try:
        for n in range(ns.rounds):
            if time.monotonic() - started > cap:
                print(f"[stress] the cap of {ns.cap_minutes:g} min is reached: stopping after "
                      f"{rounds_run} round(s)", flush=True)
                break
            for group in groups:
                stem = os.path.join(ns.log, f"{group}-{n + 1}")
                left = cap - (time.monotonic() - started)
                run_group(GROUPS[group], stem + ".xml", stem + ".out",
                          max(60.0, min(RUN_TIMEOUT, left)))
                ran = outcomes(stem + ".xml")
                if not ran:
                    counts[f"{group}: (the run itself)"][1] += 1
                for test, passed, text, said, skipped in ran:
                    if skipped:
                        continue
                    counts[test][1] += 1
                    counts[test][0] += passed
                    found = None if passed else misattribution(text, said)
                    if found:
                        wrong.append(dict(found, test=test, round=n + 1, log=stem + ".out"))
                line = ", ".join(f"{t.split('::')[-1][:50]} {'ok' if p else 'FAILED'}"
                                 for t, p, _, _, s in ran if not s)
                print(f"[stress] round {n + 1} {group}: {line or 'no test ran (see the log)'}",
                      flush=True)
            rounds_run += 1
    finally:
        stop(hogs)
    return report(counts, wrong, rounds_run, time.monotonic() - started, ns)


def report(counts, wrong, rounds_run, seconds, ns) -> int:
    lines = [f"make stress: {rounds_run} round(s) in {seconds / 60:.1f} min, {ns.hog} busy-loop "
             f"process(es) beside the tests", ""]
    lines += [f"{passed:3d}/{ran:<3d} {test}" for test, (passed, ran) in sorted(counts.items())]
    lines.append("")
    lines.append(f"misattributions: {len(wrong)}")
    lines += [f"  round {w['round']} {w['test']}: named {w['named']} (expected {w['expected']}), "
              f"kill steps {w['kill_steps']} ({w['log']})" for w in wrong]
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(ns.log, "summary.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(ns.log, "summary.json"), "w") as f:
        json.dump({"rounds": rounds_run, "seconds": seconds, "hog": ns.hog,
                   "tests": {t: {"passed": p, "ran": r} for t, (p, r) in counts.items()},
                   "misattributions": wrong}, f, indent=1)
    return 0 if all(p == r for p, r in counts.values()) and counts else 1


if __name__ == "__main__":
    sys.exit(main())
