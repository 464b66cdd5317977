"""What a child forked by the warm server does to become its task, as ``python argv...`` would
have run it (:func:`become_task`; it never returns, ``os._exit``), and the part of it every
forked task does, a Python or an R one (:func:`prepare`)."""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))


def become_task(argv: list, env: dict, cwd: str | None, output_fd: int) -> None:
    """Run ``argv`` (the arguments after the interpreter: ``["-m", module, ...]`` or
    ``[script, ...]``) in this forked process, then exit with the status Python would."""
    code = 1
    try:
        prepare(env, cwd, output_fd)
        code = _run(argv)
    except BaseException:  # noqa: BLE001 - anything before or around the target
        try:
            traceback.print_exc()
        finally:
            code = 1
    finally:
        code = _finish(code)
        os._exit(code)


def prepare(env: dict, cwd: str | None, output_fd: int) -> None:
    """Make this forked child a task started as the launcher starts one: its own session,
    stdin from ``/dev/null``, stdout and stderr to ``output_fd``, default SIGCHLD and SIGTERM,
    the working directory ``cwd`` and the environment ``env``, NumPy's global generator seeded
    afresh."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    for fd in (devnull, output_fd):
        if fd > 2:
            os.close(fd)
    # The server's own handlers (SIGCHLD for reaping) are not the task's.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if cwd:
        os.chdir(cwd)
    # The task's environment, in os.environ and in the C library's (what getenv(3) sees).
    os.environ.clear()
    os.environ.update(env)
    # A fresh interpreter seeds NumPy's global generator from the OS; the fork copied the
    # server's. (Python's `random` re-seeds itself after a fork.)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _run(argv: list) -> int:
    """Run the target as ``python argv`` would; return its exit status."""
    if argv[0] == "-m":
        module, sys.argv = argv[1], [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()
        run = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        script = argv[0]
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        run = lambda: _run_script(script)  # noqa: E731
    try:
        run()
    except SystemExit as e:
        return _exit_status(e.code)
    except KeyboardInterrupt:
        _print_exception()
        # Python ends a process interrupted this way by the signal itself.
        _finish(0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException:  # noqa: BLE001 - the target's uncaught exception, as Python reports it
        _print_exception()
        return 1
    return 0


def _run_script(script: str) -> None:
    """Run ``script`` as the ``__main__`` module, as ``python script`` does: ``sys.argv[0]`` as
    given, ``__file__`` absolute, the module left in ``sys.modules`` (what pickle and
    multiprocessing look up)."""
    import builtins
    import importlib.machinery
    import io
    import types

    path = os.path.abspath(script)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    main.__spec__ = None
    sys.modules["__main__"] = main
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec")
    exec(code, main.__dict__)


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _print_exception() -> None:
    """The uncaught exception through ``sys.excepthook``, its traceback starting where the
    target's code does (as a fresh interpreter shows it: without runpy's and our frames)."""
    kind, value, tb = sys.exc_info()
    while tb is not None and _not_the_targets(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    sys.excepthook(kind, value.with_traceback(tb) if tb is not None else value, tb)


def _not_the_targets(filename: str) -> bool:
    return (filename in (runpy.__file__, "<frozen runpy>")
            or os.path.dirname(os.path.abspath(filename)) == _HERE)


def _finish(code: int) -> int:
    """What Python does at exit: wait for non-daemon threads, run ``atexit`` handlers, flush."""
    try:
        threading._shutdown()  # noqa: SLF001 - the interpreter's own step at exit
    except BaseException:  # noqa: BLE001
        pass
    try:
        import atexit

        atexit._run_exitfuncs()  # noqa: SLF001 - likewise
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            code = code or 120  # Python's status when flushing stdout fails at exit
    return code
