"""Jobs across hosts: the test bed of network namespaces (tests/python/hosts.py) and what runs on it.

Needs root and iproute2. Where the bed cannot be built the tests FAIL with the reason: a machine
that cannot test multi-host behaviour must not look green.
"""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import hosts  # noqa: E402  (tests/python/hosts.py)

pytestmark = pytest.mark.cluster
PYTHON = sys.executable
# Serves one connection on the host's address: reads a line, answers it upper-cased.
ECHO_SERVER = """
import socket, sys
with socket.create_server((sys.argv[1], 5000)) as server:
    print("listening", flush=True)
    conn, _ = server.accept()
    with conn:
        conn.sendall(conn.recv(100).upper())
"""
ECHO_CLIENT = """
import socket, sys
with socket.create_connection((sys.argv[1], 5000), timeout=20) as conn:
    conn.sendall(b"hello from " + sys.argv[2].encode())
    print(conn.recv(100).decode())
"""


def build_bed(n, rate=None):
    try:
        return hosts.HostBed(n, rate).up()
    except hosts.HostBedError as e:
        pytest.fail(f"The test bed of hosts could not be built, so multi-host behaviour cannot be "
                    f"tested here: {e}", pytrace=False)


@pytest.fixture(scope="module")
def bed():
    """Two hosts, 10.77.0.2 and 10.77.0.3, links capped at 1gbit; built once per module."""
    built = build_bed(2, "1gbit")
    yield built
    built.down()


def run_on(host, code, *args, timeout=60):
    return subprocess.run([*host.prefix, PYTHON, "-c", code, *args], capture_output=True,
                          text=True, timeout=timeout)


def test_hosts_reach_each_other_over_tcp(bed):
    h0, h1 = bed.hosts
    server = subprocess.Popen([*h0.prefix, PYTHON, "-c", ECHO_SERVER, h0.address],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        client = run_on(h1, ECHO_CLIENT, h0.address, h1.address)
        assert client.returncode == 0, client.stderr
        assert client.stdout.strip() == "HELLO FROM 10.77.0.3"
        assert server.wait(timeout=20) == 0
    finally:
        server.kill()
        server.wait(timeout=20)


def test_each_host_has_its_own_address_and_loopback(bed):
    shown = run_on(bed.hosts[0], "import psutil; print(sorted(a.address for addrs in "
                                 "psutil.net_if_addrs().values() for a in addrs if a.family == 2))")
    assert shown.stdout.strip() == "['10.77.0.2', '127.0.0.1']"
    qdisc = subprocess.run([*bed.hosts[1].prefix, "tc", "qdisc", "show", "dev", "eth0"],
                           capture_output=True, text=True, timeout=20).stdout
    assert "tbf" in qdisc and "rate 1Gbit" in qdisc


def test_teardown_leaves_no_namespace_or_link():
    small = build_bed(1, "100mbit")
    assert set(hosts.namespaces(small.prefix)) == {small.prefix + "br", small.prefix + "h0"}
    small.down()
    assert hosts.namespaces(small.prefix) == []
    assert hosts.links(hosts.PREFIX) == []


def test_a_failed_build_leaves_nothing():
    broken = hosts.HostBed(2, rate="not-a-rate")
    with pytest.raises(hosts.HostBedError, match="tc qdisc add"):
        broken.up()
    assert hosts.namespaces(broken.prefix) == []


def test_cli_up_then_down():
    script = os.path.join(os.path.dirname(__file__), "hosts.py")
    up = subprocess.run([PYTHON, script, "up", "2"], capture_output=True, text=True, timeout=60)
    prefix = up.stdout.split()[1] if up.stdout.startswith("prefix ") else None
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.splitlines()[1:] == [f"{prefix}h0 10.77.0.2", f"{prefix}h1 10.77.0.3"]
        assert len(hosts.namespaces(prefix)) == 3
    finally:
        down = subprocess.run([PYTHON, script, "down", prefix or hosts.PREFIX + "none-"],
                              capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert hosts.namespaces(prefix) == []
