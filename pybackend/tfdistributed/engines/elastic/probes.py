"""Does a host answer? Probes for hosts a local job starts its tasks on (``Local(hosts=)``).

A host answers when its start command runs (the prefix, e.g. ``ip netns exec NS`` or
``ssh node``, with a small Python program behind it) and its network is up: from there, the
other hosts of the job are tried at the addresses their tasks use (a TCP connection accepted,
or refused: that host is there, nothing listens between attempts). A host with no route to any
of them ("network is unreachable") is cut off. A probe sends one TCP SYN to each of the job's
own task addresses, nothing anywhere else.

When some hosts reach each other and others reach none of them, the largest group that reaches
each other goes on (on a tie, the one with the job's first host, where the chief or worker 0
runs) and the others count as not answering.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

#: Seconds a probe may take: its command's start plus a 2-second connect to each other host.
PROBE_SECONDS = 15.0

# Run on the host: argv = the other hosts' task addresses; prints "address outcome" for each.
_PROGRAM = """
import errno, socket, sys
for address in sys.argv[1:]:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
        outcome = "answers"
    except ConnectionRefusedError:
        outcome = "answers"
    except OSError as e:
        outcome = "cut-off" if e.errno == errno.ENETUNREACH else "silent"
    print(address, outcome, flush=True)
"""


def run_probe(prefix: list, python: str, peers: list, timeout: float = PROBE_SECONDS):
    """``(None, {peer address: "answers" | "silent" | "cut-off"})`` if the command ran on the
    host, else ``(why, {})``."""
    try:
        done = subprocess.run([*prefix, python, "-c", _PROGRAM, *peers], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"its start command did not finish within {timeout:g} s", {}
    except OSError as e:
        return f"its start command failed ({e})", {}
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"its start command failed (status {done.returncode}: {said})", {}
    return None, dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)


def probe_hosts(hosts: dict, addresses: dict, python: str | None = None) -> dict:
    """Which hosts answer, all probed at once.

    Args:
        hosts: ``{host: command prefix}`` of the hosts to probe.
        addresses: ``{host: a task address on it}`` of every host the job runs on (the peers
            each probe tries, itself excepted), the probed ones included.
        python: the interpreter on the hosts (default: this one).

    Returns:
        ``{host: None}`` for a host that answers, ``{host: why}`` for one that does not.
    """
    python = python or sys.executable
    peers = {h: [a for other, a in addresses.items() if other != h] for h in hosts}
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        runs = {h: pool.submit(run_probe, prefix, python, peers[h]) for h, prefix in hosts.items()}
        outcome = {h: run.result() for h, run in runs.items()}
    why = {h: w for h, (w, _) in outcome.items() if w is not None}
    for h, (w, seen) in outcome.items():
        if w is None and seen and all(v == "cut-off" for v in seen.values()):
            why[h] = (f"its network is down: it has no route to the job's other hosts "
                      f"({', '.join(seen)})")
    reached = {h: {o for o, a in addresses.items() if seen.get(a) == "answers"}
               for h, (w, seen) in outcome.items() if h not in why}
    group = largest_group(list(hosts), reached)
    for h in reached:
        if h not in group and group:
            others = ", ".join(a for o, a in addresses.items() if o != h)
            why[h] = f"it reaches none of the job's hosts that reach each other ({others})"
    return {h: why.get(h) for h in hosts}


def largest_group(order: list, reached: dict) -> set:
    """The hosts of the largest group that reach each other (one reaching another joins them),
    ties going to the group of the first host in ``order``; empty when no host reaches another
    (then none is told apart).

    Example:
        >>> sorted(largest_group(["a", "b", "c"], {"a": {"b"}, "b": {"a"}, "c": set()}))
        ['a', 'b']
    """
    groups, seen = [], set()
    for host in order:
        if host in seen or host not in reached:
            continue
        group, todo = set(), [host]
        while todo:
            h = todo.pop()
            if h in group:
                continue
            group.add(h)
            todo += [o for o in reached.get(h, ()) if o in reached]
            todo += [o for o, r in reached.items() if h in r]
        seen |= group
        groups.append(group)
    reaching = [g for g in groups if len(g) > 1 or any(reached[h] for h in g)]
    return max(reaching, key=len, default=set())
