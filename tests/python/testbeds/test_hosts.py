"""Jobs across hosts: the test bed of network namespaces (tfdistributed.testbeds.hostbed) and what runs on it.

Needs root and iproute2. Where the bed cannot be built the tests FAIL with the reason: a machine
that cannot test multi-host behaviour must not look green.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

import tfdistributed as tfd
from tfdistributed.cluster.addresses import check_own_address
from tfdistributed.cluster.spec import validate_tf_config

from tfdistributed.testbeds import hostbed as hosts

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


BED_THEN_WAIT = """
import sys, time
from tfdistributed.testbeds import hostbed as hosts
bed = hosts.HostBed(1).up()
print(bed.prefix, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("signum", [15, 9])
def test_a_killed_process_leaves_no_bed_behind(signum):
    # SIGTERM: the bed's process deletes it on the way out. SIGKILL: the next bed built on this
    # machine deletes it (its prefix names a process that no longer exists).
    proc = subprocess.Popen([PYTHON, "-c", BED_THEN_WAIT],
                            stdout=subprocess.PIPE, text=True)
    try:
        prefix = proc.stdout.readline().strip()
        assert len(hosts.namespaces(prefix)) == 2
        proc.send_signal(signum)
        assert proc.wait(timeout=30) in (143, -9)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    if signum == 9:
        assert len(hosts.namespaces(prefix)) == 2
        build_bed(1).down()
    assert hosts.namespaces(prefix) == []


def test_without_root_or_iproute2_the_reason_is_given(monkeypatch):
    # What the tests then fail with (build_bed): never a skip.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(hosts.HostBedError, match="need root"):
        hosts.HostBed(2).up()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(hosts.shutil, "which", lambda tool: None if tool == "tc" else "/x")
    with pytest.raises(hosts.HostBedError, match="tc not found: install Debian's iproute2"):
        hosts.HostBed(2).up()


def test_cli_up_then_down():
    script = [PYTHON, "-m", "tfdistributed.testbeds.hostbed"]
    up = subprocess.run([*script, "up", "2"], capture_output=True, text=True, timeout=60)
    prefix = up.stdout.split()[1] if up.stdout.startswith("prefix ") else None
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.splitlines()[1:] == [f"{prefix}h0 10.77.0.2", f"{prefix}h1 10.77.0.3"]
        assert len(hosts.namespaces(prefix)) == 3
    finally:
        down = subprocess.run([*script, "down", prefix or hosts.PREFIX + "none-"],
                              capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert hosts.namespaces(prefix) == []


# --- clusters by address ---------------------------------------------------------------------

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "mwms_digits.py")
TIMEOUT = 240


def read_outputs(outdir, workers=2):
    import numpy as np

    out = {}
    for task in (f"worker-{i}" for i in range(workers)):
        with open(os.path.join(outdir, task + ".json")) as f:
            out[task] = json.load(f)
        with np.load(os.path.join(outdir, task + ".npz")) as weights:
            out[task]["weights"] = [weights[f"arr_{i}"] for i in range(len(weights.files))]
    return out


def test_two_workers_at_their_host_addresses_train_identically(bed, tmp_path):
    # Kubeflow / by-hand style: TF_CONFIG names each worker's host address, and each worker is
    # started on its host (in its namespace); make_strategy("auto") reads it.
    import numpy as np

    cluster = bed.cluster(2)
    assert cluster == {"worker": ["10.77.0.2:2222", "10.77.0.3:2222"]}
    result = tfd.launch(SCRIPT, tfd.Scaling(cluster=cluster),
                        engine=tfd.engines.Local(hosts=bed.launch_hosts()), timeout=TIMEOUT,
                        args=[str(tmp_path), "--epochs", "2", "--examples", "640"],
                        watch=tfd.Watch(echo=False))
    assert [t.returncode for t in result.tasks] == [0, 0]
    outputs = read_outputs(tmp_path)
    for report in outputs.values():
        assert report["info"]["kind"] == "multi_worker_mirrored"
        assert report["info"]["num_workers"] == 2
        assert report["steps"] == 2 * 10
    assert len(outputs["worker-0"]["weights"]) == 4
    for a, b in zip(outputs["worker-0"]["weights"], outputs["worker-1"]["weights"]):
        np.testing.assert_array_equal(a, b)
    assert outputs["worker-0"]["metrics"] == outputs["worker-1"]["metrics"]


def test_two_hosts_with_powersgd_gradients_train_identically(bed, tmp_path):
    # The bed's 2 hosts over 1 Gbit/s links, gradients low-rank (rank 2) after 3 steps of
    # warm-up: both workers end with the same weights, bit for bit, and the model learns.
    import numpy as np

    result = tfd.launch(SCRIPT, tfd.Scaling(cluster=bed.cluster(2)),
                        engine=tfd.engines.Local(hosts=bed.launch_hosts()), timeout=TIMEOUT,
                        args=[str(tmp_path), "--epochs", "2", "--examples", "640",
                              "--compression", "powersgd", "--powersgd", "2,3"],
                        watch=tfd.Watch(echo=False))
    assert [t.returncode for t in result.tasks] == [0, 0]
    outputs = read_outputs(tmp_path)
    for report in outputs.values():
        assert report["info"]["gradient_compression"] == "powersgd"
        assert report["steps"] == 2 * 10
        assert report["history"]["loss"][-1] < report["history"]["loss"][0]
        assert report["metrics"]["accuracy"] > 0.8
    for a, b in zip(outputs["worker-0"]["weights"], outputs["worker-1"]["weights"]):
        np.testing.assert_array_equal(a, b)


def test_four_hosts_with_fp16_gradients_train_identically_and_as_32_bits(tmp_path):
    # 4 hosts, one worker each, over 1 Gbit/s links, gradients all-reduced in fp16: every worker
    # ends with the same weights, within the stated fp16 tolerance of one device in 32 bits
    # (test_multiworker.py's, for 2 workers). The last batch, 1 example, leaves 3 workers none.
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "support"))
    from models import digits_model

    four = build_bed(4, "1gbit")
    try:
        result = tfd.launch(SCRIPT, tfd.Scaling(cluster=four.cluster(4)),
                            engine=tfd.engines.Local(hosts=four.launch_hosts()), timeout=TIMEOUT,
                            args=[str(tmp_path), "--epochs", "2", "--examples", "1345",
                                  "--compression", "fp16"], watch=tfd.Watch(echo=False))
    finally:
        four.down()
    assert [t.returncode for t in result.tasks] == [0, 0, 0, 0]
    outputs = read_outputs(tmp_path, workers=4)
    (x, y), _ = tfd.digits_arrays()
    model = digits_model(tfd.make_strategy("default"), seed=1, learning_rate=0.01)
    history = tfd.fit(model, x[:1345], y[:1345], epochs=2, batch_size=64, shuffle=False,
                      verbose=0)
    for report in outputs.values():
        assert report["info"]["num_workers"] == 4
        assert report["info"]["gradient_compression"] == "fp16"
        assert report["steps"] == 2 * 22
        np.testing.assert_allclose(report["history"]["loss"], history.history["loss"], rtol=1e-3)
        for got, want in zip(report["weights"], model.get_weights()):
            np.testing.assert_allclose(got, want, atol=2e-3)
    for other in ("worker-1", "worker-2", "worker-3"):
        for a, b in zip(outputs["worker-0"]["weights"], outputs[other]["weights"]):
            np.testing.assert_array_equal(a, b)


def listening(host, port):
    """Local addresses of the TCP sockets listening on ``port`` in ``host``'s namespace."""
    shown = subprocess.run([*host.prefix, "ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                           text=True, timeout=20).stdout
    return [line.split()[3] for line in shown.splitlines() if line.strip()]


def test_a_task_server_listens_on_every_interface_of_its_host(bed):
    # TensorFlow binds "0.0.0.0:PORT" whatever host TF_CONFIG names (grpc_server_lib.cc): only
    # the namespace (or a firewall) keeps the port off other networks. If this fails,
    # TensorFlow now binds the named address: update check_own_address()'s docstring and README.
    h0, h1 = bed.hosts
    config = {"cluster": {"worker": [f"{h0.address}:2300", f"{h1.address}:2300"]},
              "task": {"type": "worker", "index": 0}}
    server = subprocess.Popen([*h0.prefix, PYTHON, "-m", "tfdistributed", "server"],
                              env=dict(os.environ, TF_CONFIG=json.dumps(config)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:
            if "serving at" in line:
                break
        assert listening(h0, 2300) == ["*:2300"]
        assert listening(h1, 2300) == []
    finally:
        server.kill()
        server.wait(timeout=20)


def test_a_task_at_an_address_its_host_lacks_fails_fast_with_the_fix(bed):
    h0, h1 = bed.hosts
    cluster = {"worker": ["10.77.0.9:2222", f"{h1.address}:2222"]}
    with pytest.raises(tfd.LaunchError) as info:
        hosts = {"10.77.0.9": h0.prefix, h1.address: h1.prefix}
        tfd.launch(SCRIPT, tfd.Scaling(cluster=cluster), engine=tfd.engines.Local(hosts=hosts),
                   args=["/nonexistent"], timeout=TIMEOUT, watch=tfd.Watch(echo=False))
    message = str(info.value)
    assert "Task worker 0 exited" in message and "ClusterConfigError" in message
    assert ('"10.77.0.9:2222" is this task\'s own address (worker 0), but 10.77.0.9 is not an '
            'address of this machine, whose addresses are 10.77.0.2, 127.0.0.1') in message
    assert "Start this task on the host that has 10.77.0.9" in message


def test_launch_runs_only_on_the_hosts_it_is_given(bed):
    cluster = bed.cluster(2)
    with pytest.raises(tfd.ClusterConfigError, match='"10.77.0.3:2222" is not a loopback address'):
        tfd.launch(SCRIPT, tfd.Scaling(cluster=cluster),
                   engine=tfd.engines.Local(hosts={"10.77.0.2": bed.hosts[0].prefix}))
    with pytest.raises(tfd.ArgumentTypeError, match="pass the `cluster`"):
        tfd.launch(SCRIPT, engine=tfd.engines.Local(hosts=bed.launch_hosts()))
    with pytest.raises(tfd.ArgumentTypeError, match="command prefix"):
        tfd.launch(SCRIPT, tfd.Scaling(cluster=cluster),
                   engine=tfd.engines.Local(hosts={"10.77.0.2": "ip netns exec x"}))


# An R task: the strategy it reads from TF_CONFIG, and the address of the host it runs on.
R_TASK = """
library(tfdistributed)
info <- strategy_info(distribute_strategy("auto"))
addr <- system("ip -o -4 addr show dev eth0", intern = TRUE)
cat("task", get_tf_config()$task$index, info$kind, info$num_workers, "on",
    sub(".* inet ([0-9.]+)/.*", "\\\\1", addr), "\\n")
"""
R_LAUNCH = """
library(tfdistributed)
hosts <- list("10.77.0.2" = strsplit(Sys.getenv("H0"), " ")[[1]],
              "10.77.0.3" = strsplit(Sys.getenv("H1"), " ")[[1]])
job <- launch_cluster(Sys.getenv("TASK"),
                      scaling(cluster = tf_cluster(workers = c("10.77.0.2:2222",
                                                              "10.77.0.3:2222"))),
                      timeout = 180, watch = watching(echo = FALSE),
                      engine = local_hosts(hosts = hosts))
cat(unlist(job$output), sep = "\\n")
cat("\\nreturncodes", job$tasks$returncode, "\\n")
names(hosts)[1] <- "10.77.0.9"
tryCatch(launch_cluster(Sys.getenv("TASK"),
                        scaling(cluster = tf_cluster(workers = c("10.77.0.9:2222",
                                                                "10.77.0.3:2222"))),
                        timeout = 180, watch = watching(echo = FALSE),
                        engine = local_hosts(hosts = hosts)),
         tfdistributed_error = function(e) cat("R error:", gsub("\\n", " ", conditionMessage(e)), "\\n"))
tryCatch(launch_cluster(Sys.getenv("TASK"),
                        scaling(cluster = tf_cluster(workers = "10.77.0.2:2222")),
                        engine = local_hosts(hosts = list("10.77.0.2"))),
         tfdistributed_error = function(e) cat("R error:", gsub("\\n", " ", conditionMessage(e)), "\\n"))
"""


def test_launch_cluster_from_r_runs_tasks_on_the_hosts_it_is_given(bed, tmp_path):
    # launch_cluster(scaling(cluster = tf_cluster(...)), engine = local_hosts(hosts =
    # list(address = prefix))): each R task runs
    # in its host's namespace at that host's address; a task at an address no host has is an R
    # error naming it, and a hosts list without commands says what it must hold.
    from enginesupport import r_env

    task = tmp_path / "task.R"
    task.write_text(R_TASK)
    h0, h1 = bed.hosts
    done = subprocess.run(["Rscript", "-e", R_LAUNCH], capture_output=True, text=True, timeout=420,
                          env=r_env(TASK=str(task), H0=" ".join(h0.prefix), H1=" ".join(h1.prefix)))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "task 0 multi_worker_mirrored 2 on 10.77.0.2" in out
    assert "task 1 multi_worker_mirrored 2 on 10.77.0.3" in out
    assert "returncodes 0 0" in out
    failed, wrong_hosts = [line for line in out.splitlines() if line.startswith("R error:")]
    assert "Task worker 0 exited" in failed and "10.77.0.9 is not an address of this machine" in failed
    assert "Start this task on the host that has 10.77.0.9" in failed
    assert "`hosts` must be a named list" in wrong_hosts


@pytest.mark.parametrize("address", ["127.0.0.1:2222", "localhost:2222", "[::1]:2222"])
def test_own_address_on_this_machine_passes(address):
    check_own_address(validate_tf_config(
        {"cluster": {"worker": [address, "10.77.0.3:2222"]}, "task": {"type": "worker", "index": 0}}))


def test_own_host_name_and_tasks_without_an_address_pass():
    name = socket.gethostname()
    cluster = {"chief": [f"{name}:2222"], "worker": ["10.77.0.9:2222"], "ps": ["10.77.0.8:2222"]}
    check_own_address(validate_tf_config({"cluster": cluster, "task": {"type": "chief", "index": 0}}))
    # The coordinator of a cluster without a chief has no task, the evaluator no address.
    del cluster["chief"]
    check_own_address(validate_tf_config({"cluster": cluster}))
    check_own_address(validate_tf_config({"cluster": cluster,
                                          "task": {"type": "evaluator", "index": 0}}))


def test_make_strategy_refuses_an_own_address_of_another_machine(monkeypatch):
    # Refused before TensorFlow starts a server (which would otherwise wait for the others).
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["127.0.0.1:2222", "10.77.0.9:2222"]},
         "task": {"type": "worker", "index": 1}}))
    with pytest.raises(tfd.ClusterConfigError, match=r'TF_CONFIG\["cluster"\]\["worker"\]\[1\] = '
                                                     r'"10.77.0.9:2222" is this task'):
        tfd.make_strategy("auto")


def fake_resolver(names):
    """``socket.getaddrinfo`` answering from ``names`` only (no DNS traffic from the tests)."""
    def getaddrinfo(host, *args, **kwargs):
        if host not in names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (names[host], 0))]

    return getaddrinfo


def test_host_names_are_checked_by_what_they_resolve_to(monkeypatch, caplog):
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver(
        {"here.example": "127.0.1.1", "there.example": "10.77.0.9"}))

    def own(host):
        return validate_tf_config({"cluster": {"worker": [f"{host}:2222", "127.0.0.1:2223"]},
                                   "task": {"type": "worker", "index": 0}})

    check_own_address(own("here.example"))
    with pytest.raises(tfd.ClusterConfigError,
                       match=r"there.example \(10.77.0.9\) is not an address of this machine"):
        check_own_address(own("there.example"))
    # Not resolvable (yet): a Kubernetes headless service may publish the name late.
    check_own_address(own("pending.example"))
    assert "'pending.example' does not resolve here" in caplog.text
