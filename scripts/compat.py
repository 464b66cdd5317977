"""make compat: the older ends of the supported version ranges, tested in environments of their own.

pyproject.toml declares the releases tfdistributed supports as ranges (TensorFlow, Keras 3,
tensorflow-datasets); the project's own ``.venv`` is the newest end (pinned exactly in
constraints/dev.txt, and ``make test`` runs on it). This script tests the other ends: for each
pair of :data:`PAIRS` it builds a fresh virtualenv under ``.compat/<pair>/``, installs the
project's wheel (``python -m build``) with its test, ray and docs extras and that exact pair,
and runs there, one pair at a time (the machine has 2 cores):

- ``check``: make check's selection (``-m "not cluster and not slow"``);
- ``two workers``: the 2-worker MultiWorkerMirroredStrategy job of tests/python/training/
  test_multiworker.py (its fit/evaluate and identical-weights tests);
- ``parameter server``: the parameter-server job of tests/python/training/test_ps.py;
- ``placement``: tests/python/training/test_placement.py;
- ``keras3 R``: tests/r/test_r_keras3.py, with ``.rlib-keras3`` first on R's library path
  (as tests/r/rsupport.py's ``keras3_env`` does) and ``RETICULATE_PYTHON`` naming the pair's
  Python.

It writes the table of pairs and results (tests passed/failed per check) to COMPATIBILITY.md at
the project's root, which the documentation includes, and exits non-zero when a check failed.

**This is what must pass before a range moves.** It refuses to widen silently: before
building anything it reads pyproject.toml's ranges and fails if a pair lies outside them, or
if a range's lower end is older than the oldest pair tested here (a lower bound moved without
a pair at it). Lower a bound by adding the pair at the new end to :data:`PAIRS`, running
``make compat`` and committing the COMPATIBILITY.md it wrote with the new range.

Not part of ``make test`` or CI: it downloads several TensorFlow wheels (~600 MB each) and takes
minutes per pair. ``--pair NAME`` runs one pair and ``--check NAME`` one check (the table keeps
the other rows and cells from the last run, .compat/results.json); ``--fresh`` rebuilds the
environments (otherwise one whose wheel and pair are unchanged is reused).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".compat"
TABLE = ROOT / "COMPATIBILITY.md"
EXTRAS = "test,ray,docs"
# Per check, seconds; a check over its time is killed (its process group) and counted failed.
CHECK_TIMEOUT = 1800

#: The pairs tested here: the oldest of every range, and one in the middle. The newest pair is
#: .venv itself (constraints/dev.txt), which make test covers.
PAIRS = {
    "oldest": {"tensorflow": "2.18.1", "keras": "3.10.0", "tensorflow-datasets": "4.9.10"},
    "middle": {"tensorflow": "2.20.0", "keras": "3.11.3", "tensorflow-datasets": "4.9.10"},
}
#: Other releases a pair needs, each with why (shown under the table). TensorFlow 2.18 and 2.19
#: require protobuf < 6, and tensorflow-metadata 1.21 (what pip picks for tensorflow-datasets)
#: is generated with protobuf 6 while declaring protobuf >= 4.25: importing tensorflow_datasets
#: then fails ("Detected incompatible Protobuf Gencode/Runtime versions").
ALSO = {
    "oldest": {"tensorflow-metadata": ("1.17.3", "tensorflow-metadata 1.21 needs protobuf 6, "
                                                 "TensorFlow 2.18-2.19 allow protobuf < 6 only")},
}
#: What each check runs: pytest arguments, and whether R finds keras3 first.
CHECKS = {
    "check": (["-n", "2", "--dist", "loadscope", "-m", "not cluster and not slow"], False),
    "two workers": (["tests/python/training/test_multiworker.py", "-k",
                     "test_fit_then_evaluate_succeed_on_both_workers or "
                     "test_workers_end_with_identical_weights"], False),
    "parameter server": (["tests/python/training/test_ps.py", "-k",
                          "test_fit_trains_digits_with_history_and_callbacks or "
                          "test_evaluate_matches_single_process_model"], False),
    "placement": (["tests/python/training/test_placement.py"], False),
    "keras3 R": (["tests/r/test_r_keras3.py"], True),
}


def log(message: str) -> None:
    print(f"[compat] {message}", flush=True)


def ranges() -> dict[str, Requirement]:
    """pyproject.toml's requirement on each package a pair names (TensorFlow's from its
    ``tensorflow`` extra)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + project["optional-dependencies"].get("tensorflow", [])
    found = {}
    for line in lines:
        requirement = Requirement(line)
        if requirement.name.lower() in PAIRS["oldest"]:
            found[requirement.name.lower()] = requirement
    return found


def refuse_silent_widening(pairs: dict) -> list[str]:
    """Why the declared ranges are not what :data:`PAIRS` tests (empty: they are): a pair
    outside a range, or a range whose lower end is older than every pair tested."""
    problems = []
    for name, requirement in ranges().items():
        tested = sorted(Version(pair[name]) for pair in PAIRS.values())
        for pair_name, pair in pairs.items():
            if not requirement.specifier.contains(pair[name]):
                problems.append(f"pair {pair_name!r} has {name} {pair[name]}, outside "
                                f"pyproject.toml's {requirement}")
        lower = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        if not lower:
            problems.append(f"pyproject.toml's {requirement} has no lower bound: declare the "
                            "oldest release tested here (>=)")
        elif lower[0] < Version(f"{tested[0].major}.{tested[0].minor}"):
            problems.append(f"pyproject.toml's {requirement} reaches below the oldest {name} "
                            f"tested here ({tested[0]}): add a pair at {lower[0]} to PAIRS in "
                            "scripts/compat.py and run make compat before lowering the bound")
    return problems


def build_wheel() -> Path:
    """The project's wheel, built as a release would be (``python -m build``)."""
    dist = WORK / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    log("building the wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
                   check=True, stdout=subprocess.DEVNULL, timeout=600)
    return next(dist.glob("tfdistributed-*.whl"))


def environment(name: str, pair: dict, wheel: Path, fresh: bool) -> Path:
    """``.compat/<name>/venv`` with the wheel, its extras and exactly ``pair``; reused when it
    was made with that pair (the wheel reinstalled alone if it changed)."""
    home = WORK / name
    venv, stamp = home / "venv", home / "installed.json"
    pair = {**pair, **{k: v for k, (v, _) in ALSO.get(name, {}).items()}}
    wanted = {"pair": pair, "wheel": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    python = venv / "bin" / "python"
    made = json.loads(stamp.read_text()) if stamp.exists() else {}
    if not fresh and made.get("pair") == pair and python.exists():
        if made.get("wheel") != wanted["wheel"]:
            log(f"{name}: reinstalling the wheel into {venv}")
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                            "--force-reinstall", str(wheel)], check=True, timeout=600)
            stamp.write_text(json.dumps(wanted))
        log(f"{name}: reusing {venv}")
        return python
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    log(f"{name}: a fresh virtualenv with {pins(pair)}")
    subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True, timeout=300)
    env = dict(os.environ, R_HOME=subprocess.run(["R", "RHOME"], capture_output=True, text=True,
                                                 check=True).stdout.strip())
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"{wheel}[{EXTRAS}]",
                    *[f"{k}=={v}" for k, v in pair.items()]], check=True, env=env, timeout=3600)
    stamp.write_text(json.dumps(wanted))
    return python


def _base_python() -> str:
    """The interpreter .venv was made from (so every environment has the same Python)."""
    return getattr(sys, "_base_executable", None) or shutil.which("python3") or "python3"


def pins(pair: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in pair.items())


def run_check(name: str, python: Path, check: str) -> dict:
    """One check in the pair's environment; its counts from pytest's JUnit XML."""
    args, keras3 = CHECKS[check]
    report = WORK / name / f"{re.sub('[^a-z0-9]+', '-', check.lower())}.xml"
    logfile = report.with_suffix(".log")
    rlibs = f"{ROOT / '.rlib-keras3'}:{ROOT / '.rlib'}" if keras3 else str(ROOT / ".rlib")
    env = dict(os.environ, R_LIBS=rlibs, RETICULATE_PYTHON=str(python), TF_CPP_MIN_LOG_LEVEL="2",
               PATH=f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("VIRTUAL_ENV", None)
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={report}", *args]
    log(f"{name}: {check}: {' '.join(command[1:])}")
    start = time.monotonic()
    with open(logfile, "w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=CHECK_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
    result = counts(report)
    result.update(seconds=round(time.monotonic() - start), returncode=proc.returncode,
                  log=str(logfile.relative_to(ROOT)))
    log(f"{name}: {check}: {summary(result)} ({result['seconds']} s, log {result['log']})")
    return result


def counts(report: Path) -> dict:
    """passed/failed/skipped from a JUnit XML report (failed counts errors; no report: 0)."""
    if not report.exists():
        return {"passed": 0, "failed": 0, "skipped": 0}
    root = ElementTree.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites)
             for k in ("tests", "failures", "errors", "skipped")}
    failed = total["failures"] + total["errors"]
    names = sorted({f"{case.get('classname', '')}::{case.get('name')}"
                    for case in root.iter("testcase")
                    if case.find("failure") is not None or case.find("error") is not None})
    return {"passed": total["tests"] - failed - total["skipped"], "failed": failed,
            "skipped": total["skipped"], "failed_tests": names}


def summary(result: dict) -> str:
    ok = result["failed"] == 0 and result["returncode"] == 0 and result["passed"] > 0
    text = f"{result['passed']} passed, {result['failed']} failed"
    if result["skipped"]:
        text += f", {result['skipped']} skipped"
    if not ok and result["failed"] == 0:
        why = {2: ": interrupted, the check's other tests not run", -9: ": over its time"}
        text += f" (pytest exited {result['returncode']}{why.get(result['returncode'], '')})"
    return ("ok: " if ok else "FAILED: ") + text


def write_table(results: dict) -> None:
    """COMPATIBILITY.md: one row per pair, one column per check."""
    checks = list(CHECKS)
    lines = [
        "# Compatibility",
        "",
        "The releases tfdistributed is tested with at the ends of its supported ranges "
        "(pyproject.toml). Written by `make compat` (scripts/compat.py), which builds a fresh "
        "virtualenv per pair with the project's wheel and runs: `make check`'s selection, a "
        "2-worker job, a parameter-server job, the placement tests and the keras3 R programs. "
        "The newest pair is the project's own environment (constraints/dev.txt), tested by "
        "`make test`. A range moves only after this table passes at its new end.",
        "",
        "Supported: " + ", ".join(f"{name} `{req.specifier}`"
                                  for name, req in sorted(ranges().items())) + ".",
        "",
        "| Pair | TensorFlow | Keras | tensorflow-datasets | " + " | ".join(checks) + " |",
        "|" + "---|" * (4 + len(checks)),
    ]
    for name, entry in results.items():
        pair = entry["pair"]
        cells = [summary(entry["checks"][c]) if c in entry["checks"] else "not run"
                 for c in checks]
        lines.append(f"| {name} ({entry['date']}) | {pair['tensorflow']} | {pair['keras']} | "
                     f"{pair['tensorflow-datasets']} | " + " | ".join(cells) + " |")
    for name, entry in results.items():
        for check, result in entry["checks"].items():
            if result.get("failed_tests"):
                lines += ["", f"Failed in {name}, {check}:", ""]
                lines += [f"- `{test}`" for test in result["failed_tests"]]
    for name, also in ALSO.items():
        lines += [""] + [f"The {name} pair also pins {k} {v}: {why}." for k, (v, why) in
                         also.items()]
    lines += ["", f"Python {sys.version.split()[0]}, R from Debian, on a 2-core machine. Each "
              "cell: tests passed and failed in that check (the pytest logs are in .compat/).",
              ""]
    TABLE.write_text("\n".join(lines))
    (WORK / "results.json").write_text(json.dumps(results, indent=1))


def from_reports() -> dict:
    """The results of every pair and check whose JUnit report is in .compat/ (its date)."""
    results = {}
    for name, pair in PAIRS.items():
        entry = {"pair": pair, "date": None, "checks": {}}
        for check in CHECKS:
            report = WORK / name / f"{re.sub('[^a-z0-9]+', '-', check.lower())}.xml"
            if report.exists():
                result = counts(report)
                result.update(returncode=1 if result["failed"] else 0,
                              log=str(report.with_suffix(".log").relative_to(ROOT)))
                entry["checks"][check] = result
                day = datetime.date.fromtimestamp(report.stat().st_mtime).isoformat()
                entry["date"] = max(filter(None, [entry["date"], day]))
        if entry["checks"]:
            results[name] = entry
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pair", action="append", choices=sorted(PAIRS),
                        help="run this pair only (repeatable); default: every pair")
    parser.add_argument("--check", action="append", choices=list(CHECKS),
                        help="run this check only (repeatable); default: every check")
    parser.add_argument("--fresh", action="store_true", help="rebuild the environments")
    parser.add_argument("--from-reports", action="store_true",
                        help="run nothing: write the table from the checks' last JUnit reports "
                             "in .compat/<pair>/ (after a run that was cut short)")
    args = parser.parse_args(argv)
    if args.from_reports:
        write_table(from_reports())
        return 0
    chosen = {name: PAIRS[name] for name in (args.pair or PAIRS)}
    problems = refuse_silent_widening(PAIRS)
    if problems:
        for problem in problems:
            print(f"[compat] refused: {problem}", file=sys.stderr)
        return 2
    WORK.mkdir(exist_ok=True)
    previous = WORK / "results.json"
    results = json.loads(previous.read_text()) if previous.exists() else {}
    results = {name: results[name] for name in PAIRS if name in results}
    wheel = build_wheel()
    failed = False
    for name, pair in chosen.items():
        python = environment(name, pair, wheel, args.fresh)
        entry = {"pair": pair, "date": datetime.date.today().isoformat(),
                 "checks": dict(results.get(name, {}).get("checks", {})) if args.check else {}}
        results[name] = entry
        for check in args.check or CHECKS:  # the table after each check: a cut run keeps it
            entry["checks"][check] = result = run_check(name, python, check)
            failed |= summary(result).startswith("FAILED")
            write_table({n: results[n] for n in PAIRS if n in results})
    log(f"wrote {TABLE.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
