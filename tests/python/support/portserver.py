"""portpicker's port server, started for a pytest session (tests/conftest.py) or for a stress
run (scripts/stress.py): one start, answered before it is used."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def start(address: str, pool: str | None = None, timeout: float = 30.0) -> subprocess.Popen:
    """Start portpicker's port server on the Unix socket file ``address`` (serving ``pool``,
    e.g. ``"10000-14999"``; portpicker's default, 15000-24999, without it) and return its
    process once it hands out a port. Raises RuntimeError, the server killed, if it does not
    within ``timeout`` seconds. The server dies with the process that started it, however that
    ends (a pytest session stopped by a signal does not reach its clean-up)."""
    import portpicker

    from tfdistributed.engines.base import dying_with_this_process

    script = os.path.join(os.path.dirname(sys.executable), "portserver.py")
    argv = [sys.executable, script, f"--portserver_address={address}"]
    if pool:
        argv.append(f"--portserver_static_pool={pool}")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=dying_with_this_process())
    deadline = time.monotonic() + timeout
    # Asked only once its socket exists: portpicker prints every failed connection.
    while not os.path.exists(address) or portpicker.get_port_from_port_server(address) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"portpicker's port server ({script}) did not start")
        time.sleep(0.1)
    return proc
