"""Warm starts of R tasks (tfdistributed.engines.warm.rtask, rpkg/R/warm.R): an ``.R`` task
forked from an R that has loaded tfdistributed, reticulate and TensorFlow is the task
``Rscript script.R`` would have run: the same output (visible values, warnings, errors), exit
status, command line, environment (a ``.Renviron``'s variables and R's own), working directory,
a ``tempdir()`` of its own, a random seed of its own, and the same numbers from the same
training. Each case runs the same script cold (``warm_start=False``) and warm, and compares."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed import LaunchError
from tfdistributed.engines.warm import client

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
DIGITS = os.path.join(ROOT, "tests", "python", "scripts", "mwms_digits.R")
# The R library this repository's set-up installs the R package into, and this Python.
R_ENV = {"R_LIBS": os.path.join(ROOT, ".rlib"), "RETICULATE_PYTHON": sys.executable}
# What TensorFlow (absl) prints as it is imported: once per cold task, once per warm server.
_START_UP_LINES = re.compile(r"^(\[\w+ \d\] )?([IWEF]\d{4} |WARNING: All log messages)")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One working directory (and so one R server: an R task's depends on it) for the module."""
    return tmp_path_factory.mktemp("warm-r")


def r_script(where, body, name="task.R"):
    path = where / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def both(path, workdir, **options):
    """The job run cold, then warm: {False: result, True: result} (a LaunchError's results when
    it failed)."""
    runs = {}
    for warm in (False, True):
        try:
            runs[warm] = tfd.launch(path, timeout=300, watch=tfd.Watch(echo=False),
                                    engine=tfd.engines.Local(warm_start=warm), cwd=str(workdir),
                                    **{"workers": 1, **options})
        except LaunchError as e:
            runs[warm] = e
    return runs


def output(task):
    return [line for line in task.output if not _START_UP_LINES.match(line)]


def test_a_warm_r_task_runs_as_rscript_would_run_it(workdir):
    path = r_script(workdir, """
        library(tfdistributed)
        strategy <- distribute_strategy("default")
        index <- sub('.*"index": *([0-9]+).*', "\\\\1", Sys.getenv("TF_CONFIG"))
        cat("--- task", index, "\\n")
        cat("arguments:", paste(commandArgs(trailingOnly = TRUE), collapse = "|"), "\\n")
        cat("command line:", commandArgs(), "\\n")
        cat("directory:", getwd(), "| mine:", Sys.getenv("MINE"), "| interactive:",
            interactive(), "| stdin lines:", length(readLines(file("stdin"))), "\\n")
        cat("search path:", search(), "\\n")
        cat("R_HOME:", Sys.getenv("R_HOME"), "| EDITOR:", Sys.getenv("EDITOR"), "\\n")
        cat("reticulate's mark is this process':", identical(Sys.getenv("R_SESSION_INITIALIZED"),
            sprintf('PID=%d:NAME="reticulate"', Sys.getpid())), "\\n")
        session <- tempdir()
        cat("tempdir is the session's:", identical(session, Sys.getenv("R_SESSION_TMPDIR")),
            dir.exists(session), grepl("^Rtmp[A-Za-z0-9]{6}$", basename(session)), "\\n")
        draw <- runif(1)
        set.seed(7)
        cat("seeded:", runif(2), "\\n")
        x <- c(a = 1, b = 2)
        x
        invisible(x)
        warn <- function() warning("careful")
        warn()
        writeLines(c(session, format(draw, digits = 17), Sys.getpid()),
                   file.path(getwd(), sprintf("seen-%s-%s.txt", Sys.getenv("MODE"), index)))
    """)
    runs = {}
    for warm in (False, True):
        mode = "warm" if warm else "cold"
        runs[warm] = tfd.launch(path, workers=2, args=("a", "b c"), timeout=300,
                                engine=tfd.engines.Local(warm_start=warm), cwd=str(workdir),
                                env={**R_ENV, "MINE": "yes", "MODE": mode},
                                watch=tfd.Watch(echo=False))
    cold, warm = runs[False], runs[True]
    assert [t.returncode for t in warm.tasks] == [0, 0]
    for c, w in zip(cold.tasks, warm.tasks):
        assert output(w) == output(c)
    lines = output(warm.tasks[1])
    assert lines[lines.index("--- task 1 ") + 1:] == [
        "arguments: a|b c ",
        f"command line: /usr/lib/R/bin/exec/R --no-echo --no-restore --no-save "
        f"--no-restore --file={path} --args a b c ",
        f"directory: {workdir} | mine: yes | interactive: FALSE | stdin lines: 0 ",
        "search path: .GlobalEnv package:tfdistributed package:stats package:graphics "
        "package:grDevices package:utils package:datasets package:methods Autoloads package:base ",
        "R_HOME: /usr/lib/R | EDITOR: vi ",
        "reticulate's mark is this process': TRUE ",
        "tempdir is the session's: TRUE TRUE TRUE ",
        "seeded: 0.9889093 0.3977455 ",
        "a b ",
        "1 2 ",
        "Warning message:",
        "In warn() : careful",
    ]
    seen = {mode: [(workdir / f"seen-{mode}-{i}.txt").read_text().split() for i in (0, 1)]
            for mode in ("cold", "warm")}
    # Two processes of their own, forked (not the server itself).
    pids = {int(s[2]) for s in seen["warm"]}
    assert len(pids) == 2 and not pids & set(client.server_pids())
    # Each task's own tempdir() and random draw; both tempdirs gone with their tasks.
    for mode in ("cold", "warm"):
        (dir0, draw0, _), (dir1, draw1, _) = seen[mode]
        assert dir0 != dir1 and draw0 != draw1
        assert not os.path.exists(dir0) and not os.path.exists(dir1)


def test_warm_r_tasks_are_forked_by_an_r_server_of_the_launching_process(workdir):
    path = r_script(workdir, """
        os <- reticulate::import("os")
        cat("parent", os$getppid(), "\\n")
    """, name="parent.R")
    runs = both(path, workdir, workers=2, env=R_ENV)
    cold = {int(line.split()[-1]) for t in runs[False].tasks for line in output(t)}
    warm = {int(line.split()[-1]) for t in runs[True].tasks for line in output(t)}
    assert cold == {os.getpid()}
    assert len(warm) == 1 and warm <= set(client.server_pids())
    server = next(s for s in client._servers if s.proc.pid in warm)
    assert server.kind == "r" and server.cwd == str(workdir)


@pytest.mark.parametrize("mode, status", [("error", 1), ("quit", 3), ("kill", -9)])
def test_a_warm_r_task_ends_with_the_status_and_output_rscript_gives(workdir, mode, status):
    path = r_script(workdir, """
        mode <- commandArgs(trailingOnly = TRUE)[[1]]
        cat("before\\n")
        fails <- function() stop("broken on purpose")
        if (mode == "error") fails()
        if (mode == "quit") quit(status = 3L)
        if (mode == "kill") tools::pskill(Sys.getpid(), tools::SIGKILL)
        cat("not reached\\n")
    """, name="ends.R")
    runs = both(path, workdir, args=(mode,), env=R_ENV)
    cold, warm = runs[False], runs[True]
    assert isinstance(cold, LaunchError) and isinstance(warm, LaunchError)
    (c,), (w,) = cold.results, warm.results
    assert c.returncode == w.returncode == status
    assert output(w) == output(c)
    if mode == "error":
        assert output(w) == ["before", "Error in fails() : broken on purpose",
                             "Execution halted"]


def test_renviron_rprofile_and_r_variables_are_as_a_fresh_rscript_sets_them(tmp_path):
    # R reads .Renviron and .Rprofile in the working directory as it starts: the server starts
    # there, and a .Renviron's values win over the launcher's as they do in a fresh Rscript;
    # R's own defaults (EDITOR=${EDITOR-vi}) keep the task's values.
    (tmp_path / ".Renviron").write_text("FROM_RENVIRON=renviron\nSHARED=renviron\n")
    (tmp_path / ".Rprofile").write_text("profile_ran <- TRUE\n")
    path = r_script(tmp_path, """
        cat(Sys.getenv(c("FROM_RENVIRON", "SHARED", "EDITOR", "TFDISTRIBUTED_ATTEMPT")),
            exists("profile_ran"), "\\n")
    """)
    runs = both(path, tmp_path, env={**R_ENV, "SHARED": "launcher", "EDITOR": "nano"})
    assert output(runs[True].tasks[0]) == output(runs[False].tasks[0]) == [
        "renviron renviron nano 0 TRUE "]


def test_a_2_worker_r_job_trains_warm_to_the_numbers_it_trains_cold(workdir):
    outputs = {}
    for warm in (False, True):
        out = workdir / f"digits-{warm}"
        out.mkdir()
        result = tfd.launch(DIGITS, workers=2, args=(str(out), 1), timeout=300,
                            engine=tfd.engines.Local(warm_start=warm), cwd=str(workdir), env=R_ENV,
                            watch=tfd.Watch(echo=False))
        assert [t.returncode for t in result.tasks] == [0, 0]
        outputs[warm] = [[line for line in output(t) if "test accuracy" in line]
                         for t in result.tasks]
        weights = [np.load(out / f"worker-{i}.npz") for i in (0, 1)]
        outputs[warm].append([weights[0][k].tolist() for k in sorted(weights[0].files)])
        # One all-reduced model: both workers hold the same weights.
        for k in weights[0].files:
            np.testing.assert_array_equal(weights[0][k], weights[1][k])
    assert outputs[True] == outputs[False]
    assert outputs[True][0] and outputs[True][0][0].startswith("worker 0: test accuracy")


def test_an_r_server_that_cannot_start_is_named_and_the_tasks_start_cold(tmp_path):
    path = r_script(tmp_path, """
        cat("ran in", Sys.getpid(), "\\n")
    """)
    lines = []
    # An R library without tfdistributed: the server cannot load it; the task itself needs none.
    empty = tmp_path / "empty-library"
    empty.mkdir()
    result = tfd.launch(path, workers=2, timeout=120, engine=tfd.engines.Local(warm_start=True),
                        cwd=str(tmp_path),
                        env={**R_ENV, "R_LIBS": str(empty), "R_LIBS_USER": str(empty)},
                        watch=tfd.Watch(echo=False, on_output=lines.append))
    assert [t.returncode for t in result.tasks] == [0, 0]
    told = [line for line in lines if "warm-start server" in line]
    assert len(told) == 1, lines
    assert told[0].startswith("[launch] the R warm-start server failed to start (Error")
    assert "tfdistributed" in told[0] and told[0].endswith("; tasks start the usual way")


def test_the_server_finds_reticulates_pipe_to_itself_or_does_not_start():
    # reticulate wakes R through a pipe whose two ends it holds: each task gets a fresh one at
    # the same descriptors. The server looks for it before serving: none, or another such pipe
    # (which a task's fresh one could be mistaken for), and it does not start (tasks cold).
    probe = textwrap.dedent("""
        import os, sys
        from tfdistributed.engines.warm import rtask
        pipes = [os.pipe() for _ in range(int(sys.argv[1]))]
        try:
            print(rtask._notifier_pipe() == pipes[0])
        except RuntimeError as e:
            print(e)
    """)
    said = [subprocess.run([sys.executable, "-c", probe, str(n)], capture_output=True,
                           text=True, timeout=60).stdout.strip() for n in (1, 0, 2)]
    assert said == ["True",
                    "expected reticulate's one pipe to itself in the R server, found 0",
                    "expected reticulate's one pipe to itself in the R server, found 2"]


def test_the_r_tasks_a_warm_server_can_run():
    python = sys.executable
    assert client._warm_argv(["Rscript", "--no-save", "--no-restore", "/a/t.R", "x"], python) == (
        "r", "Rscript", ("--no-save", "--no-restore"), ["/a/t.R", "x"])
    assert client._warm_argv(["/opt/R/bin/Rscript", "t.r"], python).argv == ["t.r"]
    for argv in (["Rscript", "-e", "1"], ["Rscript", "--verbose", "t.R"], ["Rscript"],
                 ["Rscript", "--vanilla"], ["R", "-f", "t.R"]):
        assert client._warm_argv(argv, python) is None


def test_r_servers_do_not_push_python_ones_out(tmp_path, monkeypatch):
    # Each kind has its own limit: a session launching R jobs of many environments keeps its
    # Python server (and the other way round).
    monkeypatch.setattr(client, "MAX_SERVERS", 1)
    python_task = tmp_path / "parent.py"
    python_task.write_text("import os\nprint('parent', os.getppid())\n")
    r_task = r_script(tmp_path, """
        cat("parent", reticulate::import("os")$getppid(), "\\n")
    """)

    def parent(path, **env):
        result = tfd.launch(path, workers=1, timeout=120, engine=tfd.engines.Local(warm_start=True),
                            cwd=str(tmp_path), env={**R_ENV, **env}, watch=tfd.Watch(echo=False))
        return int(output(result.tasks[0])[-1].split()[-1])

    python_server = parent(str(python_task))
    first_r = parent(r_task, R_ROUND="1", MINE="a")
    # A variable R does not read as it starts (read at run time): the same server.
    assert parent(r_task, R_ROUND="1", MINE="b") == first_r
    # One it does (R_*): another server, and the first one goes.
    second_r = parent(r_task, R_ROUND="2")
    assert second_r != first_r and first_r not in client.server_pids()
    assert parent(str(python_task)) == python_server
    assert {python_server, second_r} <= set(client.server_pids())
