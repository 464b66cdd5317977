"""The warm server: ``python -m tfdistributed.engines.warm.server SOCKET READY_FD``.

Imports TensorFlow, Keras and tfdistributed (:data:`WARM_MODULES`), listens on the Unix socket
``SOCKET`` (``SOCK_SEQPACKET``: one message per request), writes ``ready`` and its environment
(JSON) on one line to the file descriptor ``READY_FD`` (a pipe from the launcher; its stdout and
stderr go to a log) and then serves until its stdin closes (the launching process is gone or
done with it):

- a request is a pickled ``{"argv", "env", "cwd"}`` with one file descriptor attached (where
  the task's stdout and stderr go); the server forks, answers ``{"pid": pid}``, and the child
  becomes the task (:func:`~.child.become_task`);
- a child gets SIGKILL if the server ends first (so a launcher killed outright takes its warm
  tasks with it: its end closes the server's stdin);
- when a child ends, the server reaps it and answers ``{"returncode": code, "cpu": seconds}``
  on the same connection (``-N`` for a child killed by signal N, as :class:`subprocess.Popen`
  reports it; the CPU seconds the child used, user and system, as ``wait4`` reports them).

The server itself starts no thread and creates no TensorFlow runtime (nothing runs an op before
the fork), so a forked child is a whole, single-threaded interpreter with TensorFlow imported.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import pickle
import selectors
import signal
import socket
import sys

from ..base import dying_with_this_process
from .child import become_task

#: What the server imports before it serves: what every task imports first.
WARM_MODULES = ("numpy", "tensorflow", "keras", "cloudpickle", "tfdistributed",
                "tfdistributed.strategies", "tfdistributed.training", "tfdistributed.data",
                "tfdistributed.engines.base", "tfdistributed.engines.launch")
#: In a forked child, SIGKILL when the server ends (None off Linux); set by :func:`main`.
_die_with_server = None
#: The C library, for fflush (looked up once, before any fork).
_libc = None
#: Largest request (argv and environment, pickled).
MAX_REQUEST = 1 << 20


def main(argv=None) -> int:
    path, ready = (argv or sys.argv[1:])[:2]
    forked = listen_and_serve(path, int(ready))
    if forked is None:
        return 0
    try:
        request, output_fd = forked
        become_task(request["argv"], request["env"], request.get("cwd"), output_fd)
    finally:
        os._exit(1)  # never back into the server's code


def listen_and_serve(path: str, ready: int):
    """Import :data:`WARM_MODULES`, listen on ``path``, write ``ready`` and this process'
    environment (as it is once the imports are done, JSON on the same line) to the file
    descriptor ``ready``, then serve until stdin closes: returns ``None`` then. In each forked
    child it returns ``(request, output_fd)`` instead, the server's sockets and handlers gone:
    the caller makes the child its task (the Python server here with
    :func:`~.child.become_task`; the R server, :mod:`.rtask`, by returning into R)."""
    for name in WARM_MODULES:
        importlib.import_module(name)
    # Built before any fork (it looks up prctl, which a forked child must not load): a child
    # gets SIGKILL when this server ends, as a task started with Popen when its launcher does.
    global _die_with_server, _libc
    _die_with_server = dying_with_this_process()
    _libc = ctypes.CDLL(None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    # On a pipe of its own: what the imports print on stdout (warnings, a library's notice) goes
    # to the server's log with its stderr and cannot be taken for the answer. The environment
    # tells the launcher what the start-up set (R sets R_HOME, its .Renviron's variables...).
    os.write(ready, b"ready " + json.dumps(dict(os.environ)).encode() + b"\n")
    os.close(ready)
    return _serve(listener)


def _serve(listener: socket.socket):
    # SIGCHLD interrupts the wait below through this pipe; children are reaped in the loop.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    # fd 0, not sys.stdin: under R (reticulate) Python's sys.stdin is not the process' stdin.
    selector.register(0, selectors.EVENT_READ, "stdin")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    waiting: dict[int, socket.socket] = {}   # pid -> the connection its status goes back on
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.data == "stdin":
                if not os.read(0, 4096):
                    return None
            elif key.data == "wake":
                os.read(wake_r, 4096)
            elif key.data == "accept":
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ, "request")
            else:
                forked = _request(key.fileobj, selector, waiting, listener, (wake_r, wake_w))
                if forked is not None:
                    return forked  # in a child: the task's now
        _reap(waiting)


def _request(conn, selector, waiting, listener, wake):
    """Serve one request: fork; in the parent return None, in the child ``(request, fd)``."""
    selector.unregister(conn)
    try:
        data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 1)
    except OSError:
        conn.close()
        return None
    if not data or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    request = pickle.loads(data)
    sys.stdout.flush()
    sys.stderr.flush()
    _flush_c_stdio()
    pid = os.fork()
    if pid == 0:
        try:
            if _die_with_server is not None:
                _die_with_server()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in wake:
                os.close(fd)
            selector.close()
            listener.close()
            conn.close()
            for other in waiting.values():
                other.close()
            return request, fds[0]
        except BaseException:
            os._exit(1)  # never back into the server's loop
    os.close(fds[0])
    waiting[pid] = conn
    _send(conn, {"pid": pid})
    return None


def _flush_c_stdio() -> None:
    """Flush the C library's stdout and stderr buffers, so that a child does not write what the
    server printed (R prints through them) into its task's output."""
    if _libc is not None:
        _libc.fflush(None)


def _reap(waiting: dict) -> None:
    while waiting:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            _send(conn, {"returncode": os.waitstatus_to_exitcode(status),
                         "cpu": usage.ru_utime + usage.ru_stime})
            conn.close()


def _send(conn, message) -> None:
    try:
        conn.send(pickle.dumps(message))
    except OSError:
        pass  # the launcher is gone: nobody to tell


if __name__ == "__main__":
    sys.exit(main())
