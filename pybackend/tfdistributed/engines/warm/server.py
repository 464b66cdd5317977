"""The warm server: ``python -m tfdistributed.engines.warm.server SOCKET READY_FD``.

Imports TensorFlow, Keras and tfdistributed (:data:`WARM_MODULES`), listens on the Unix socket
``SOCKET`` (``SOCK_SEQPACKET``: one message per request), writes ``ready`` to the file
descriptor ``READY_FD`` (a pipe from the launcher; its stdout and stderr go to a log) and then
serves until its stdin closes (the launching process is gone or done with it):

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

import importlib
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
#: Largest request (argv and environment, pickled).
MAX_REQUEST = 1 << 20


def main(argv=None) -> int:
    path, ready = (argv or sys.argv[1:])[:2]
    for name in WARM_MODULES:
        importlib.import_module(name)
    # Built before any fork (it looks up prctl, which a forked child must not load): a child
    # gets SIGKILL when this server ends, as a task started with Popen when its launcher does.
    global _die_with_server
    _die_with_server = dying_with_this_process()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    # On a pipe of its own: what the imports print on stdout (warnings, a library's notice) goes
    # to the server's log with its stderr and cannot be taken for the answer.
    os.write(int(ready), b"ready\n")
    os.close(int(ready))
    _serve(listener)
    return 0


def _serve(listener: socket.socket) -> None:
    # SIGCHLD interrupts the wait below through this pipe; children are reaped in the loop.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    waiting: dict[int, socket.socket] = {}   # pid -> the connection its status goes back on
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):
                    return
            elif key.data == "wake":
                os.read(wake_r, 4096)
            elif key.data == "accept":
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ, "request")
            else:
                _request(key.fileobj, selector, waiting, listener, (wake_r, wake_w))
        _reap(waiting)


def _request(conn, selector, waiting, listener, wake) -> None:
    selector.unregister(conn)
    try:
        data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 1)
    except OSError:
        conn.close()
        return
    if not data or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    request = pickle.loads(data)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            if _die_with_server is not None:
                _die_with_server()
            signal.set_wakeup_fd(-1)
            for fd in wake:
                os.close(fd)
            selector.close()
            listener.close()
            conn.close()
            for other in waiting.values():
                other.close()
            become_task(request["argv"], request["env"], request.get("cwd"), fds[0])
        finally:
            os._exit(1)  # never back into the server's loop
    os.close(fds[0])
    waiting[pid] = conn
    _send(conn, {"pid": pid})


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
