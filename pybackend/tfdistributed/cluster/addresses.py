"""Which addresses are this machine's: loopback, the interfaces' addresses, and the check that a
task's own TF_CONFIG address is one of them (:func:`check_own_address`), made before
TensorFlow starts a server.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

from ..errors import ClusterConfigError
from .spec import field_name, parse_address

_log = logging.getLogger(__name__)


def is_loopback(address: str) -> bool:
    host, _ = parse_address(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_addresses() -> set:
    """The IP addresses of this machine's interfaces (of its network namespace), as strings."""
    import psutil

    families = (socket.AF_INET, socket.AF_INET6)
    # An IPv6 link-local address carries its interface ("fe80::1%eth0"); TF_CONFIG never does.
    return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in families}


def _host_ips(host: str, field: str) -> list | None:
    """The IP addresses ``host`` stands for: itself if it is one, else what it resolves to;
    None for a name that does not resolve (yet)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        return sorted({info[4][0].split("%")[0] for info in socket.getaddrinfo(host, None)})
    except OSError as e:
        # Not refused: a scheduler's DNS may publish a task's name only once it runs (e.g. a
        # Kubernetes headless service), and TensorFlow never resolves its own task's name.
        _log.warning("%s: the host name %r does not resolve here (%s); if the job does not "
                     "start, check that every task can resolve it.", field, host, e)
        return None


def check_own_address(config) -> None:
    """Refuse a task whose own TF_CONFIG address is not an address of this machine.

    The other tasks connect to a task at its TF_CONFIG address; a task started on a machine
    (or network namespace) that has no such address is never reached, and the job hangs until
    its timeout with gRPC errors about the others. Caught here, before any server starts.

    What binds where: TensorFlow's gRPC server takes only the port from the task's address and
    listens on every interface (``tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc``,
    ``GrpcServer::Init``: ``AddListeningPort(StrCat("0.0.0.0:", requested_port), ...)``; no
    option of ``tf.distribute.Server``, the cluster resolvers or ``rpc_layer`` changes the
    host). ``ss -ltn`` shows ``*:PORT``. So a task cannot be limited to its own address from
    here: keep the ports off untrusted networks with a firewall or a private network.

    Loopback addresses, this machine's host name, and names that resolve to one of its
    addresses are accepted; a name that does not resolve only logs a warning (DNS may publish
    it late). Tasks not listed in the cluster (a coordinator, an evaluator outside
    it) have no own address and pass.

    Args:
        config: a validated TF_CONFIG dict (:func:`read_tf_config`), or None.

    Raises:
        ClusterConfigError: naming the address, this machine's addresses and the fix.
    """
    task = (config or {}).get("task")
    if not task or task["type"] not in config["cluster"]:
        return
    address = config["cluster"][task["type"]][task["index"]]
    host, _ = parse_address(address)
    name = socket.gethostname()
    if is_loopback(address) or host in (name, name.split(".")[0]):
        return
    field = field_name(["cluster", task["type"], task["index"]])
    local = local_addresses()
    ips = _host_ips(host, field)
    if ips is None or any(ip in local or ipaddress.ip_address(ip).is_loopback for ip in ips):
        return
    stands_for = "" if ips == [host] else f" ({', '.join(ips)})"
    raise ClusterConfigError(
        f'{field} = "{address}" is this task\'s own address ({task["type"]} {task["index"]}), but '
        f'{host}{stands_for} is not an address of this machine, whose addresses are '
        f'{", ".join(sorted(local))}. The other tasks would connect there and never reach this '
        f'one. Start this task on the host that has {host}, or give it one of this machine\'s '
        f'addresses in TF_CONFIG["cluster"] (the same TF_CONFIG on every task).')
