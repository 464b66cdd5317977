"""What each test costs in CPU, its processes' included, summed per test folder at the end.

    pytest --cpu-log=.logs/test-cpu.jsonl ...

(With ``=``: pytest reads the value before it loads this plugin, and a value apart would be
taken for a test path.)

On this 2-core machine the suite is bound by CPU, not by waiting: a test's wall time says
little (it stretches when other workers are busy), its CPU time says what it takes from the
others. Each test's CPU is this process's (every thread) plus its reaped children's and their
reaped descendants' (``RUSAGE_CHILDREN``: the launcher's task processes, Rscript and what it
starts), and the tasks forked by this process' warm servers as each ends (they are the
servers' children: ``tfdistributed.engines.warm.client.tasks_cpu_seconds``). Not counted:
daemons that outlive the test (slurmd and its steps, Ray's raylets) and a module-scoped
fixture's teardown (charged to the next test). Each pytest-xdist worker appends one
JSON line per test; the controller empties the file first and prints the sums last.

Before the workers start, the controller times two fixed pieces of work (``machine_speed``),
printed at the end: runs on hosts of different speeds are compared through them.

The controller also reads the whole machine's CPU (``psutil.cpu_times``) at the start and the
end: how busy its cores were over the run, and how much of that the per-test sums do not see
(the daemons above, the pytest processes' own start-up, anything else the machine ran).
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time

import pytest


def pytest_addoption(parser):
    parser.addoption("--cpu-log", default=None, metavar="PATH",
                     help="append each test's CPU seconds (its processes' included) to PATH as "
                          "JSON lines and print the sums per test folder at the end")


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Warm tasks are their server's children, counted here when each ends (engines/warm).
    warm = sys.modules.get("tfdistributed.engines.warm.client")
    warm_tasks = warm.tasks_cpu_seconds() if warm is not None else 0.0
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + warm_tasks


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _machine_busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy since boot (all processes, the
    kernel's included; idle, I/O wait and time stolen by a hypervisor aside)."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


_machine_start: tuple[float, float] | None = None  # (wall clock, busy seconds) at the start
_machine_speed: str | None = None


def machine_speed() -> str:
    """CPU seconds of two fixed pieces of work, measured by the controller before any worker
    starts: what makes two runs' figures comparable. Two hosts sold as the same CPU ran this
    suite's very same tests with 6,200 and 2,712 s of CPU (2026-11-29): a slower run says
    "slower machine" when these grow with it, and "costlier tests" when they do not."""
    import numpy as np

    start = time.process_time()
    total = 0
    for i in range(20_000_000):  # the interpreter: imports, tracing, R's and Python's glue
        total += i
    python = time.process_time() - start
    a = np.random.default_rng(0).random((512, 512), dtype=np.float32)
    start = time.process_time()
    for _ in range(200):  # float32 kernels (numpy's BLAS, on this process's threads)
        a @ a
    kernels = time.process_time() - start
    return (f"this machine's speed (before the tests): 20 million Python additions in "
            f"{python:.2f} s of CPU, 200 float32 512x512 matrix products in {kernels:.2f} s")


def pytest_configure(config):
    global _machine_start, _machine_speed
    path = config.getoption("--cpu-log")
    if path and not _is_worker(config):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        open(path, "w").close()
        _machine_speed = machine_speed()
        _machine_start = (time.time(), _machine_busy_seconds())


def machine_use(start: tuple[float, float], logged: float, now: tuple[float, float],
                cores: int) -> str:
    """The machine over the run, from ``start`` and ``now`` (wall clock, busy seconds): how busy
    its ``cores`` were, and how much of that the per-test sums (``logged``) do not count."""
    wall, busy = now[0] - start[0], now[1] - start[1]
    share = busy / (wall * cores) if wall > 0 else 0.0
    return (f"the machine: {cores} cores {share:.0%} busy over {wall:.0f} s ({busy:.0f} s of CPU; "
            f"{max(busy - logged, 0.0):.0f} s of it not in the sums above: daemons such as "
            f"slurmd's steps and Ray's, pytest's own processes, anything else running)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = item.config.getoption("--cpu-log")
    before, start = (_cpu_seconds(), time.time()) if path else (0.0, 0.0)
    yield
    if path:
        line = json.dumps({"test": item.nodeid, "cpu": round(_cpu_seconds() - before, 2),
                           "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                           "start": round(start, 2), "end": round(time.time(), 2)})
        with open(path, "a") as log:  # one short append per line: workers do not interleave
            log.write(line + "\n")


def group_of(nodeid: str) -> str:
    """tests/python/engines/test_x.py::t -> tests/python/engines; tests/r/test_y.py -> tests/r."""
    parts = nodeid.split("::")[0].split("/")
    return "/".join(parts[:3] if len(parts) > 3 else parts[:2])


def sums(path: str) -> tuple[collections.Counter, collections.Counter]:
    groups, files = collections.Counter(), collections.Counter()
    with open(path) as log:
        for line in log:
            record = json.loads(line)
            groups[group_of(record["test"])] += record["cpu"]
            files[record["test"].split("::")[0]] += record["cpu"]
    return groups, files


def worker_spans(path: str) -> dict[str, tuple[float, float, float]]:
    """{xdist worker: (its first test's start, its last test's end, CPU seconds)}."""
    spans = {}
    with open(path) as log:
        for line in log:
            record = json.loads(line)
            if "worker" not in record:
                continue
            first, last, cpu = spans.get(record["worker"], (record["start"], record["end"], 0.0))
            spans[record["worker"]] = (min(first, record["start"]), max(last, record["end"]),
                                       cpu + record["cpu"])
    return spans


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    path = config.getoption("--cpu-log")
    if not path or _is_worker(config) or not os.path.exists(path):
        return
    groups, files = sums(path)
    if not groups:
        return
    write = terminalreporter.write_line
    terminalreporter.section("CPU seconds per test folder (processes included)")
    for name, seconds in groups.most_common():
        write(f"{seconds:8.0f}  {name}")
    write(f"{sum(groups.values()):8.0f}  in all")
    if _machine_speed is not None:
        write(_machine_speed)
    if _machine_start is not None:
        write(machine_use(_machine_start, sum(groups.values()),
                          (time.time(), _machine_busy_seconds()), os.cpu_count() or 1))
    write("costliest files:")
    for name, seconds in files.most_common(12):
        write(f"{seconds:8.0f}  {name}")
    spans = worker_spans(path)
    if spans:
        begin = min(first for first, _, _ in spans.values())
        write("each worker's tests, wall clock from the first start (a worker done early left "
              "a core to the others):")
        for worker, (first, last, cpu) in sorted(spans.items()):
            write(f"  {worker}: {first - begin:6.0f} s to {last - begin:6.0f} s, "
                  f"{cpu:6.0f} s of CPU")
