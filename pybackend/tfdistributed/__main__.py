"""Command line: ``python -m tfdistributed launch --workers 2 [--ps 1] [--chief]
[--min-workers N] [--gpus-per-task N|all] [--max-restarts N] [--join-timeout S]
[--backend local|slurm|ray] [--partition P] script [args]``: the flags given make ``launch()``'s
option objects (``--workers 3 --min-workers 2``: ``tfd.Scaling(workers=3, min_workers=2)``;
``--backend slurm --partition P``: ``engine=tfd.engines.Slurm(partition=P)``;
``--max-restarts N``: ``restarts=tfd.Restarts(max_restarts=N)``), the others keep their
defaults.

``python -m tfdistributed versions [--check] [--format json|table]``: the TensorFlow, Keras and
tensorflow-datasets installed here and the ranges this installation supports
(:mod:`tfdistributed.versions`), without importing TensorFlow."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    """The ``python -m tfdistributed`` (and ``tfdistributed``) command.

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 when every task succeeded, 1 when the job failed (the reason is
        printed to stderr); argparse exits with 2 on a usage error.

    Example:
        >>> main(["launch", "--workers", "2", "train.py", "--epochs", "3"])   # doctest: +SKIP
        0
    """
    parser = _parser()
    ns = parser.parse_args(argv)

    from .errors import TFDistributedError

    if ns.command == "server":
        from .engines.launch import run_server

        run_server()
        return 0
    if ns.command == "versions":
        return _versions(ns.check, ns.format)
    if ns.command == "_call":
        from .engines.base import call_function

        call_function(ns.call_path, ns.result_path)
        return 0
    from .engines.launch import launch

    if ns.partition is not None and ns.backend != "slurm":
        parser.error("--partition applies to --backend slurm")
    try:
        result = launch(ns.script, args=ns.args, **_options(ns))
    except TFDistributedError as e:
        print(f"tfdistributed: {e}", file=sys.stderr)
        return 1
    _report(result)
    return 0


def _versions(check: bool, form: str = "json") -> int:
    """``python -m tfdistributed versions``: :func:`tfdistributed.versions.report` as JSON, or as
    a tab-separated table (R's ``install_tfdistributed()`` reads it), without importing
    TensorFlow."""
    import json

    from .versions import report

    state = report()
    if form == "json":
        print(json.dumps(state, indent=1))
    else:
        print("package\tdistribution\tversion\tsupported\tok")
        for name, entry in state.items():
            print("\t".join([name, entry["distribution"] or "", entry["version"] or "",
                             entry["supported"], str(entry["ok"])]))
    if check and not all(entry["ok"] for entry in state.values()):
        bad = [f"{name} {entry['version'] or '(not installed)'} (supported: "
               f"{entry['supported'] or 'any'})"
               for name, entry in state.items() if not entry["ok"]]
        print(f"tfdistributed: outside the supported releases: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


def _given(**values) -> dict:
    """The flags given on the command line (argparse's None: not given, the default applies)."""
    return {name: value for name, value in values.items() if value is not None}


def _options(ns) -> dict:
    """``launch()``'s option objects from the flags: each made from the flags given only."""
    from .engines import ENGINES
    from .engines.options import Restarts, Scaling, Watch

    return dict(
        **_given(timeout=ns.timeout),
        scaling=Scaling(**_given(workers=ns.workers, ps=ns.ps, chief=ns.chief or None,
                                 min_workers=ns.min_workers, gpus_per_task=ns.gpus_per_task)),
        engine=ENGINES[ns.backend](**_given(partition=ns.partition)),
        restarts=Restarts(**_given(max_restarts=ns.max_restarts,
                                   join_timeout=ns.join_timeout)),
        watch=Watch(**_given(stall_warning=ns.stall_warning, stall_timeout=ns.stall_timeout,
                             tensorboard=ns.tensorboard,
                             progress=False if ns.no_progress else None)))


def gpu_count(value: str):
    """``--gpus-per-task``: a whole number, or ``all``."""
    return value if value == "all" else int(value)


def _report(result) -> None:
    """What the job did, on stderr: every task's exit, the sizes it ran at, its pace."""
    names = ", ".join(f"{t.name}: {t.returncode}" for t in result.tasks)
    restarted = f" after {result.restarts} restart(s)" if result.restarts else ""
    print(f"tfdistributed: all tasks finished in {result.seconds:.1f} s{restarted} ({names})",
          file=sys.stderr)
    for size in result.sizes[1:]:
        print(f"tfdistributed: from attempt {size['attempt'] + 1}, {size['workers']} of "
              f"{size['wanted']} workers ({size['why']}: {', '.join(size['places'])})",
              file=sys.stderr)
    for row in result.workers:
        rate = row["examples_per_second"]
        print(f"tfdistributed: {row['task']}: {row['steps']} steps"
              + (f", {rate:,.0f} examples/s" if rate else "")
              + (" (straggler)" if row["straggler"] else ""), file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    from .cluster.join import DEFAULT_JOIN_TIMEOUT
    from .engines import ENGINES
    from .engines.options import DEFAULT_TIMEOUT, Restarts, Scaling, Watch

    parser = argparse.ArgumentParser(prog="python -m tfdistributed",
                                     description="Distributed TensorFlow/Keras training tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("launch", help="run a .py or .R script as a cluster: local processes on "
                                      "127.0.0.1, a SLURM job, or Ray actors")
    p.add_argument("--workers", type=int, default=None,
                   help=f"worker tasks (default {Scaling.workers})")
    p.add_argument("--ps", type=int, default=None, help="parameter-server tasks (needs --chief)")
    p.add_argument("--chief", action="store_true", help="add a chief task")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds before every task is stopped (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--max-restarts", type=int, default=None,
                   help=f"restart the whole job up to N times after a failure (default "
                        f"{Restarts.max_restarts})")
    p.add_argument("--min-workers", type=int, default=None,
                   help="go on with at least N workers when nodes are gone for good, and grow "
                        "back when they return (--backend slurm or ray)")
    p.add_argument("--join-timeout", type=float, default=None,
                   help=f"seconds a task waits for the others to join (default "
                        f"{DEFAULT_JOIN_TIMEOUT:g}); also how long a lost node may take to answer")
    p.add_argument("--backend", default="local", choices=tuple(ENGINES),
                   help="where the tasks run (default: local processes on 127.0.0.1)")
    p.add_argument("--partition", default=None, help="SLURM partition (--backend slurm)")
    p.add_argument("--gpus-per-task", type=gpu_count, default=None,
                   help="GPUs each training task gets (all: every GPU; default: this machine's "
                        "split evenly; on SLURM and Ray none)")
    p.add_argument("--stall-warning", type=float, default=None,
                   help=f"seconds without a step before the stalled task is named (default "
                        f"{Watch.stall_warning:g})")
    p.add_argument("--stall-timeout", type=float, default=None,
                   help="seconds without a step after which the job ends (to be restarted)")
    p.add_argument("--tensorboard", default=None, help="a directory for the job's curves")
    p.add_argument("--no-progress", action="store_true",
                   help="stream each task's own Keras progress instead of the job's display")
    p.add_argument("script", help="the .py or .R training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    sub.add_parser("server", help="serve this process's TF_CONFIG task (worker/ps of a PS cluster)")
    p = sub.add_parser("versions", help="the TensorFlow, Keras and tensorflow-datasets installed "
                                        "here and the ranges tfdistributed supports (JSON)")
    p.add_argument("--check", action="store_true",
                   help="exit with status 1 when one is missing or outside its range")
    p.add_argument("--format", choices=("json", "table"), default="json",
                   help="JSON, or a tab-separated table with a header line")
    p = sub.add_parser("_call", help=argparse.SUPPRESS)
    p.add_argument("call_path")
    p.add_argument("result_path")
    return parser


if __name__ == "__main__":
    sys.exit(main())
