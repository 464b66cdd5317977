"""TF_CONFIG: build it from data, parse and validate it, set it; pick free loopback ports.

TF_CONFIG is the JSON that tells each TensorFlow process who is in the cluster and which task it
is::

    {"cluster": {"chief": ["host:port"], "worker": ["host:port", ...], "ps": [...]},
     "task": {"type": "worker", "index": 1}}

Everything here works on plain dicts (what ``json.loads`` gives), so the R package and any
scheduler can hand us the same data. Every validation error names the exact field, e.g.
``TF_CONFIG["cluster"]["worker"][1]``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from typing import Iterable, Mapping

from ._args import as_int
from .errors import ArgumentTypeError, ClusterConfigError, did_you_mean

#: Task roles TensorFlow knows, in the order we print them.
ROLES = ("chief", "worker", "ps", "evaluator")
_TOP_LEVEL_KEYS = ("cluster", "task", "environment", "rpc_layer")
_TASK_KEYS = ("type", "index", "trial")
_SINGLETON_ROLES = ("chief", "evaluator")
_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:\[\]/]+):(?P<port>\d+)$")


def _field(path: Iterable) -> str:
    return "TF_CONFIG" + "".join(f"[{p!r}]".replace("'", '"') for p in path)


def _check_address(address, path) -> str:
    if not isinstance(address, str):
        raise ClusterConfigError(
            f'{_field(path)} = {address!r} must be a "host:port" string, e.g. "10.0.0.1:2222".')
    match = _ADDRESS.match(address.strip())
    if not match:
        raise ClusterConfigError(
            f'{_field(path)} = "{address}" is not "host:port": write the host, a colon and a '
            f'port number, e.g. "127.0.0.1:2222" (IPv6: "[::1]:2222").')
    port = int(match.group("port"))
    if not 0 < port < 65536:
        raise ClusterConfigError(f'{_field(path)} = "{address}": port {port} is outside 1-65535.')
    return address.strip()


def _as_address_list(value, role: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        raise ClusterConfigError(
            f'{_field(["cluster", role])} must be a list of "host:port" strings, got a mapping; '
            f'sparse task indices are not supported.')
    try:
        return list(value)
    except TypeError:
        raise ClusterConfigError(
            f'{_field(["cluster", role])} must be a list of "host:port" strings, got {value!r}.') from None


def validate_cluster(cluster) -> dict:
    """Check a cluster description and return it normalized (roles in order, empty roles dropped)."""
    if not isinstance(cluster, Mapping):
        raise ClusterConfigError(
            f'{_field(["cluster"])} must be an object mapping roles to address lists, e.g. '
            f'{{"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}}; got {type(cluster).__name__}.')
    out: dict[str, list[str]] = {}
    for role in cluster:
        if role not in ROLES:
            raise ClusterConfigError(
                f'{_field(["cluster", role])}: unknown role {role!r}; roles are '
                f'{", ".join(ROLES)}.{did_you_mean(str(role), ROLES)}')
    seen: dict[str, list] = {}
    for role in ROLES:
        addresses = _as_address_list(cluster.get(role), role)
        if not addresses:
            continue
        if role in _SINGLETON_ROLES and len(addresses) > 1:
            raise ClusterConfigError(
                f'{_field(["cluster", role])} lists {len(addresses)} tasks; a cluster has at most one '
                f'{role}. Make the others "worker" tasks.')
        checked = []
        for i, address in enumerate(addresses):
            address = _check_address(address, ["cluster", role, i])
            if address in seen:
                raise ClusterConfigError(
                    f'{_field(["cluster", role, i])} = "{address}" is also {_field(seen[address])}: '
                    f'every task needs its own host:port.')
            seen[address] = ["cluster", role, i]
            checked.append(address)
        out[role] = checked
    if not out.get("chief") and not out.get("worker"):
        raise ClusterConfigError(
            f'{_field(["cluster"])} has no "worker" or "chief" task: list at least one worker.')
    if out.get("ps") and not out.get("chief"):
        raise ClusterConfigError(
            f'{_field(["cluster"])} has "ps" tasks but no "chief": parameter-server training needs a '
            f'chief (the coordinator) as well as workers and ps tasks; add '
            f'"chief": ["host:port"].')
    if out.get("ps") and not out.get("worker"):
        raise ClusterConfigError(
            f'{_field(["cluster"])} has "ps" tasks but no "worker": parameter-server training needs '
            f'at least one worker to run steps.')
    return out


def validate_tf_config(config) -> dict:
    """Validate a TF_CONFIG (a dict, or its JSON text) and return it normalized as a dict."""
    if isinstance(config, (str, bytes)):
        text = config.decode() if isinstance(config, bytes) else config
        try:
            config = json.loads(text)
        except json.JSONDecodeError as e:
            raise ClusterConfigError(
                f"TF_CONFIG is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}): "
                f"{text[:120]!r}. Build it with tfdistributed.tf_config(...) instead of by hand."
            ) from None
    if not isinstance(config, Mapping):
        raise ClusterConfigError(
            f"TF_CONFIG must be a JSON object with \"cluster\" and \"task\", got {type(config).__name__}.")
    for key in config:
        if key not in _TOP_LEVEL_KEYS:
            raise ClusterConfigError(
                f'{_field([key])}: unknown key; TF_CONFIG has "cluster" and "task" '
                f'(optionally "environment", "rpc_layer").{did_you_mean(str(key), _TOP_LEVEL_KEYS)}')
    if "cluster" not in config:
        raise ClusterConfigError('TF_CONFIG has no "cluster": add {"cluster": {"worker": [...]}}.')
    cluster = validate_cluster(config["cluster"])
    out: dict = {"cluster": cluster}
    task = config.get("task")
    if task is None:
        raise ClusterConfigError(
            'TF_CONFIG has no "task": add {"task": {"type": "worker", "index": 0}} saying which task '
            'this process is.')
    if not isinstance(task, Mapping):
        raise ClusterConfigError(f'{_field(["task"])} must be an object with "type" and "index".')
    for key in task:
        if key not in _TASK_KEYS:
            raise ClusterConfigError(
                f'{_field(["task", key])}: unknown key; a task has "type" and "index".'
                f'{did_you_mean(str(key), _TASK_KEYS)}')
    task_type = task.get("type")
    if task_type not in cluster:
        present = ", ".join(cluster)
        if task_type in ROLES:
            why = f'there is no {task_type!r} task in TF_CONFIG["cluster"] (it has: {present})'
        else:
            why = f"it must be one of the cluster's roles: {present}{did_you_mean(str(task_type), ROLES)}"
        raise ClusterConfigError(f'{_field(["task", "type"])} = {task_type!r}: {why}.')
    index = task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int):
        raise ClusterConfigError(f'{_field(["task", "index"])} = {index!r} must be an integer.')
    n = len(cluster[task_type])
    if not 0 <= index < n:
        raise ClusterConfigError(
            f'{_field(["task", "index"])} = {index} is out of range: the cluster has {n} '
            f'{task_type!r} task(s), so the index must be in 0..{n - 1}.')
    out["task"] = {"type": task_type, "index": index}
    for key in ("environment", "rpc_layer"):
        if key in config:
            out[key] = config[key]
    return out


def cluster_spec(workers, ps=None, chief=None, evaluator=None) -> dict:
    """A validated cluster dict from address lists (``chief``/``evaluator`` may be one string)."""
    cluster = {"chief": chief, "worker": workers, "ps": ps, "evaluator": evaluator}
    return validate_cluster({k: v for k, v in cluster.items() if v})


def tf_config(cluster, task_type: str, task_index=0) -> dict:
    """The TF_CONFIG dict for one task of ``cluster``; ``json.dumps`` it for the environment."""
    if isinstance(task_index, float) and task_index.is_integer():
        task_index = int(task_index)
    return validate_tf_config({"cluster": cluster, "task": {"type": task_type, "index": task_index}})


def set_tf_config(config=None, *, cluster=None, task_type=None, task_index=0) -> dict:
    """Validate and export TF_CONFIG for this process; returns the dict that was set.

    Pass a whole config (dict or JSON text), or ``cluster`` + ``task_type`` + ``task_index``.
    Must run before the strategy is created: TensorFlow reads TF_CONFIG when the strategy's
    cluster resolver is built.
    """
    if config is None:
        if cluster is None or task_type is None:
            raise ArgumentTypeError(
                "set_tf_config() needs either a whole `config` or `cluster` and `task_type` "
                "(e.g. set_tf_config(cluster=local_cluster(2), task_type='worker', task_index=0)).")
        config = tf_config(cluster, task_type, task_index)
    else:
        config = validate_tf_config(config)
    os.environ["TF_CONFIG"] = json.dumps(config)
    return config


def read_tf_config(value=None) -> dict | None:
    """The validated TF_CONFIG of this process (or of ``value``), or None when it is not set."""
    if value is None:
        value = os.environ.get("TF_CONFIG")
        if value is None or not value.strip():
            return None
    return validate_tf_config(value)


def clear_tf_config() -> None:
    """Remove TF_CONFIG from this process's environment."""
    os.environ.pop("TF_CONFIG", None)


def num_workers(config=None) -> int:
    """How many tasks run training steps in lock-step (chief + workers); 1 without TF_CONFIG."""
    config = read_tf_config() if config is None else validate_tf_config(config)
    if not config:
        return 1
    cluster = config["cluster"]
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def is_chief(config=None) -> bool:
    """True for the task that owns shared writes: the chief, or worker 0 when there is no chief."""
    config = read_tf_config() if config is None else validate_tf_config(config)
    if not config:
        return True
    task = config["task"]
    if "chief" in config["cluster"]:
        return task["type"] == "chief"
    return task["type"] == "worker" and task["index"] == 0


def is_loopback(address: str) -> bool:
    host = _ADDRESS.match(address).group("host").strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_loopback(cluster) -> dict:
    """Refuse any address off this machine: local clusters are unauthenticated gRPC servers."""
    cluster = validate_cluster(cluster)
    for role, addresses in cluster.items():
        for i, address in enumerate(addresses):
            if not is_loopback(address):
                raise ClusterConfigError(
                    f'{_field(["cluster", role, i])} = "{address}" is not a loopback address. '
                    f"TensorFlow's gRPC servers have no authentication, so local clusters bind "
                    f"127.0.0.1 only: use local_cluster() to pick addresses.")
    return cluster


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on this machine (portpicker, which also avoids races)."""
    import portpicker

    ports: list[int] = []
    while len(ports) < n:
        port = portpicker.pick_unused_port()
        if port not in ports:
            ports.append(port)
    return ports


def local_cluster(workers=2, ps=0, chief=False, evaluator=False) -> dict:
    """A cluster dict of tasks on 127.0.0.1 with free ports, for running on this one machine."""
    workers = as_int(workers, "workers", minimum=0)
    ps = as_int(ps, "ps", minimum=0)
    if ps and not chief:
        raise ClusterConfigError(
            "local_cluster(ps > 0) needs chief=True: parameter-server training is coordinated by a chief.")
    counts = {"chief": int(bool(chief)), "worker": workers, "ps": ps, "evaluator": int(bool(evaluator))}
    ports = iter(free_ports(sum(counts.values())))
    cluster = {role: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for role, n in counts.items() if n}
    return validate_cluster(cluster)
