"""The warm server for R tasks, and what its forked child does to become ``Rscript script.R``.

The launcher starts ``Rscript [options] serve.R`` (the task's own Rscript and options, in the
task's working directory, with the environment the task's R reads as it starts), where
``serve.R`` is one line, ``tfdistributed:::warm_task_server(SOCKET, READY_FD, "serve.R")``:
R starts as the task's would (site and user profiles, ``.Renviron``), loads the tfdistributed
namespace (reticulate, Python, and through :func:`serve` TensorFlow, Keras and the backend) and
serves as the Python warm server does (:func:`~.server.listen_and_serve`).

Rscript runs a script by reading it, one top-level expression after another, from the file
named by ``--file=``, through the C library's ``FILE`` R opened at start-up. The server's is
``serve.R``, whose one line R has read and is evaluating when the server forks. The child
(:func:`serve` returns ``TRUE`` into R there) puts the task's script on that file descriptor
(``dup2``), so that when the server's line returns R reads and runs the task's script with its
own REPL, as ``Rscript script.R`` would: visible values printed, warnings after each top-level
call, ``Error in f() : ...`` then ``Execution halted`` and exit status 1, ``quit(status=)``,
``.Last`` and finalizers at the end. Before it returns, the child also

- becomes the task as a Python one does (:func:`~.child.prepare`): its own session, stdin from
  ``/dev/null``, stdout and stderr to the launcher's pipe, the working directory, the
  environment (the task's, with what R's start-up set in the server on top: ``R_HOME``, the
  ``.Renviron``'s variables... which the launcher checks would be the same for this task);
- sets R's command line (``commandArgs()``) to the task's: the server's own, ``--file=`` the
  task's script, then ``--args`` and its arguments if it has any, as Rscript passes them;
- gets a ``tempdir()`` of its own (``R_TempDir`` and ``R_SESSION_TMPDIR``), created as R creates
  one at start-up, removed when the task ends (the server's stays the server's).

and R's side (``warm_task_server`` in the R package) removes the server's ``.Random.seed`` from
the global environment, so that the task's R seeds its generator afresh as a new session does.

Layer: as :mod:`.server`; loaded only in an R process (through reticulate), where ``libR`` is.
"""

from __future__ import annotations

import ctypes
import os
import sys
import traceback

from .child import prepare
from .server import listen_and_serve

#: libR's functions and variables (this process is R: its symbols are global).
_libR = None


def serve(path: str, ready: int, server_file: str) -> bool:
    """Serve R tasks (called from R in the server, its packages' threads stopped). ``FALSE``
    when the launcher is done with the server; ``TRUE`` in a forked child, made its task and
    about to read the task's script."""
    global _libR
    _libR = ctypes.CDLL(None)
    _libR.R_set_command_line_arguments  # noqa: B018 - not R: fail before serving, not per task
    server_file = os.path.abspath(server_file)
    event_loop = _EventLoop()
    event_loop.stop()
    _only_fork_safe_threads()
    notifier = _notifier_pipe()  # checked here: without it the server does not start
    forked = listen_and_serve(path, int(ready))
    if forked is None:
        return False
    request, output_fd = forked
    try:
        # reticulate marks the R process it started in (the server): the task's is this one.
        marker = os.environ.get("R_SESSION_INITIALIZED")
        prepare(request["env"], request.get("cwd"), output_fd)
        if marker is not None:
            os.environ["R_SESSION_INITIALIZED"] = marker.replace(f"PID={os.getppid()}:",
                                                                 f"PID={os.getpid()}:")
        _become(request["argv"], server_file)
        event_loop.start()
        _own_notifier_pipe(notifier)
    except BaseException:  # noqa: BLE001 - the child must never go on as the server
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    return True


class _EventLoop:
    """reticulate's event-loop thread (it has R process events while Python runs, every 0.5 s):
    stopped in the server before it forks, started in each task, as reticulate started it in a
    cold task when Python started."""

    def __init__(self):
        path = next((line.split()[-1] for line in open("/proc/self/maps")
                     if line.rstrip().endswith("/reticulate.so")), None)
        if path is None:
            raise RuntimeError("reticulate's library is not loaded in this R")
        library = ctypes.CDLL(path)
        try:
            self._stop = library._ZN10reticulate10event_loop12deinitializeEb
            self._start = library._ZN10reticulate10event_loop10initializeEv
        except AttributeError:
            raise RuntimeError(f"this reticulate ({path}) has no event loop to stop before a "
                               f"fork") from None
        self._stop.argtypes = [ctypes.c_bool]

    def stop(self) -> None:
        self._stop(True)  # waits for the thread to end

    def start(self) -> None:
        self._start()


#: Threads that may run in the server when it forks: their library starts them again in a child
#: (jemalloc's background thread, pyarrow's).
_FORK_SAFE_THREADS = ("jemalloc_bg_thd",)


def _only_fork_safe_threads() -> None:
    """Fail (the server does not start; tasks start cold, saying why) if a thread is left whose
    handle a forked task would keep without the thread."""
    # OpenBLAS (NumPy's) stops its threads before any fork (pthread_atfork) and starts them when
    # next needed: one fork of nothing lets them go, as the first task's would.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    own = str(os.getpid())
    others = []
    for tid in os.listdir("/proc/self/task"):
        if tid != own:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            if name not in _FORK_SAFE_THREADS:
                others.append(name)
    if others:
        raise RuntimeError(f"{len(others)} background thread(s) of R packages run in the server "
                           f"({', '.join(sorted(others))}); a fork would not copy them")


def _notifier_pipe() -> tuple:
    """reticulate wakes R for Python's pending calls through a pipe it made when Python started,
    both ends open in this process: ``(read_fd, write_fd)``. Looked for in the server before it
    serves (any other such pipe, or none, and the server does not start)."""
    ends: dict = {}
    for fd in map(int, os.listdir("/proc/self/fd")):
        link = _link(f"/proc/self/fd/{fd}")
        if fd > 2 and link and link.startswith("pipe:"):
            with open(f"/proc/self/fdinfo/{fd}") as f:
                flags = int(next(line.split()[1] for line in f if line.startswith("flags:")), 8)
            ends.setdefault(link, {})[flags & os.O_ACCMODE] = fd
    pairs = [e for e in ends.values() if os.O_RDONLY in e and os.O_WRONLY in e]
    if len(pairs) != 1:
        raise RuntimeError(f"expected reticulate's one pipe to itself in the R server, found "
                           f"{len(pairs)}")
    return pairs[0][os.O_RDONLY], pairs[0][os.O_WRONLY]


def _own_notifier_pipe(notifier: tuple) -> None:
    """A fresh notifier pipe at the same descriptors, so that one task's wake-up is not read by
    another task (or the server)."""
    read, write = os.pipe()
    os.dup2(read, notifier[0], inheritable=True)
    os.dup2(write, notifier[1], inheritable=True)
    os.close(read)
    os.close(write)


def _become(argv: list, server_file: str) -> None:
    script, args = argv[0], [str(a) for a in argv[1:]]
    _set_command_line(script, args, server_file)
    _new_tempdir()
    _read_next(script, server_file)


def _set_command_line(script: str, args: list, server_file: str) -> None:
    """``commandArgs()`` as ``Rscript [options] script args...`` gives it: the server's own
    (the same R, the same options) with its ``--file=`` the task's."""
    with open("/proc/self/cmdline", "rb") as f:
        own = [a.decode() for a in f.read().split(b"\0")[:-1]]
    line = [f"--file={script}" if a.startswith("--file=") else a for a in own]
    if "--args" in line:
        line = line[:line.index("--args")]
    if args:
        line += ["--args", *args]
    c_args = (ctypes.c_char_p * len(line))(*[a.encode() for a in line])
    _libR.R_set_command_line_arguments(len(line), c_args)


def _new_tempdir() -> None:
    """A session temporary directory of the task's own, made as R makes one at start-up
    (``RtmpXXXXXX`` with ``mkdtemp``, beside the server's: in the ``TMPDIR``, ``TMP`` or
    ``TEMP`` the two share), which R removes when the task ends. R keeps the directory's name in
    one buffer for ``tempdir()`` (``R_TempDir``) and for its removal at exit (a variable of its
    own, not exported): the new name, of the same length, is written into that buffer, so the
    server's directory is neither the task's nor removed by it."""
    where = ctypes.c_void_p.in_dll(_libR, "R_TempDir").value
    current = ctypes.string_at(where)
    template = ctypes.create_string_buffer(os.path.dirname(current) + b"/RtmpXXXXXX")
    _libR.mkdtemp.restype = ctypes.c_char_p
    path = _libR.mkdtemp(template)
    if path is None:
        raise OSError(ctypes.get_errno(), "cannot create the task's R session directory")
    if len(path) != len(current):  # cannot happen: the same directory, the same pattern
        os.rmdir(path)
        raise RuntimeError(f"the task's R session directory {path!r} is not as long as the "
                           f"server's {current!r}")
    ctypes.memmove(where, path, len(path) + 1)
    os.environ["R_SESSION_TMPDIR"] = os.fsdecode(path)


def _read_next(script: str, server_file: str) -> None:
    """Put ``script`` on the file descriptor R reads its ``--file=`` from (``serve.R``'s)."""
    # The same file (by device and inode: its path may name it through a symbolic link).
    wanted = os.stat(server_file)
    fds = [fd for fd in map(int, os.listdir("/proc/self/fd")) if _is_file(fd, wanted)]
    if len(fds) != 1:
        raise RuntimeError(f"R's script file {server_file} is open {len(fds)} times, not once")
    try:
        source = os.open(script, os.O_RDONLY)
    except OSError as e:
        # What Rscript itself says for a script it cannot open.
        sys.stderr.write(f"Fatal error: cannot open file '{script}': {e.strerror}\n")
        sys.stderr.flush()
        os._exit(2)
    os.dup2(source, fds[0])
    os.close(source)


def _is_file(fd: int, wanted: os.stat_result) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), wanted)
    except OSError:  # closed since it was listed (the listing's own descriptor)
        return False


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None
