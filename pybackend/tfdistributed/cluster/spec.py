"""TF_CONFIG: build it from data, parse and validate it.

TF_CONFIG is the JSON that tells each TensorFlow process who is in the cluster and which task it
is::

    {"cluster": {"chief": ["host:port"], "worker": ["host:port", ...], "ps": [...]},
     "task": {"type": "worker", "index": 1}}

Everything here works on plain dicts (what ``json.loads`` gives), so the R package and any
scheduler can hand us the same data. Every validation error names the exact field, e.g.
``TF_CONFIG["cluster"]["worker"][1]``.

The contract is TensorFlow's
----------------------------
What TensorFlow's ``TFConfigClusterResolver``, ``multi_worker_util`` and the strategy a cluster
calls for (``ParameterServerStrategy`` when it has ps tasks, else ``MultiWorkerMirroredStrategy``)
accept, we accept; what they reject or crash on, we reject first, naming the field and the fix.
``tests/python/cluster/test_tf_config_tensorflow.py`` runs every case through both and lists each
intended difference. Per case:

==========================================  =========  ==========================================
input                                       decision   why
==========================================  =========  ==========================================
unknown keys (Vertex AI / AI Platform       keep       TensorFlow ignores them; kept verbatim,
``job``, ``environment``; task ``trial``,              reported once at debug level (a near-miss
``cloud``)                                             such as ``"clusters"`` at warning level)
chief called ``"master"`` (AI Platform)     normalize  renamed ``"chief"``: TF's strategies refuse
                                                       the job name ``master``
one-task job as a bare string,              normalize  ``jsonlite::toJSON(auto_unbox = TRUE)``
``{"worker": "h:1"}``                                  writes it; TF raises ``TypeError``
``"type": ["worker"]``, ``"index": [0]``    normalize  ``jsonlite::toJSON()`` without auto_unbox
                                                       writes scalars as arrays; TF crashes
``"index": "1"`` or ``1.0``                 normalize  TF casts with ``int()``; written back as 1
``"index": 1.5``, ``true``, ``-1``          refuse     TF truncates / takes ``True`` as 1 / lets a
                                                       negative index through to fail later
task without ``"index"`` (listed role)      refuse     TF raises ``TypeError``; which task is it?
job ``null`` or empty (R ``NULL``)          normalize  dropped; TF crashes on ``null``, and an
                                                       empty ``ps`` job misleads the strategies
sparse job ``{"0": "h:1", "1": "h:2"}``     normalize  TF accepts; written back as a list
sparse job with gaps ``{"1": "h:1"}``       refuse     the strategies address tasks 0..n-1
address not ``host:port``, same address     refuse     TF passes them on; its servers fail later
twice                                                  with an obscure gRPC error
``TF_CONFIG=""`` / not JSON                 refuse     TF raises ``JSONDecodeError``
``TF_CONFIG="{}"``, no ``"cluster"``        accept     no cluster: one process, as in TF
TF_CONFIG not an object, task not an        refuse     TF silently reads them as "no cluster" /
object, task with index but no type                    "no task"; certainly a mistake
no task, cluster with ps tasks              accept     the parameter-server coordinator: TF adds
                                                       it to the cluster as ``chief``
no task, cluster without ps tasks           refuse     MultiWorkerMirroredStrategy needs the task
evaluator not listed in the cluster         accept     TF allows it: the evaluator is not part of
                                                       the training cluster
``rpc_layer``                               keep       must be a string (TF uses it as protocol);
                                                       ``null`` is TF's default, as if absent
``session_master``                          keep       TF 1 sessions only; passed through
==========================================  =========  ==========================================

When :func:`read_tf_config` normalizes the environment's TF_CONFIG it writes the normalized JSON
back to ``os.environ`` (which also updates the process environment R sees), so TensorFlow, read
afterwards, never meets a shape it would crash on.

Roles, as TensorFlow defines them: :func:`is_chief` is ``multi_worker_util.is_chief`` (the chief,
worker 0 without a chief, and the evaluator), plus the coordinator of a parameter-server cluster
without a chief, which has no task. :func:`is_checkpoint_writer` is who writes training
checkpoints: the same minus the evaluator, which evaluates but never trains, and minus worker 0
of a parameter-server cluster without a chief, which only serves (the coordinator writes).

"""

from __future__ import annotations

import copy
import json
import logging
import re
from typing import Iterable, Mapping

from ..errors import ClusterConfigError, closest, did_you_mean


#: Task roles TensorFlow knows, in the order we print them.
ROLES = ("chief", "worker", "ps", "evaluator")


#: Other names for roles, written by platforms (Google AI Platform calls the chief "master").
ROLE_ALIASES = {"master": "chief"}


_TOP_LEVEL_KEYS = ("cluster", "task", "rpc_layer", "session_master", "environment")


_TASK_KEYS = ("type", "index")


_SINGLETON_ROLES = ("chief", "evaluator")


_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:\[\]/]+):(?P<port>\d+)$")


def parse_address(address: str) -> tuple[str, int]:
    """Split a TF_CONFIG address ``"host:port"`` into ``(host, port)``: the one parser of them.

    An IPv6 host is written in brackets (``"[::1]:2222"``) and comes back without them. The
    port range is not checked here (:func:`validate_cluster` does).

    Args:
        address: ``"host:port"``; surrounding white space is ignored.

    Returns:
        ``(host, port)`` with ``port`` an int.

    Raises:
        ValueError: ``address`` is not a string of the form ``host:port``.

    Example:
        >>> parse_address("127.0.0.1:2222"), parse_address("[::1]:2222")
        (('127.0.0.1', 2222), ('::1', 2222))
    """
    match = _ADDRESS.match(address.strip()) if isinstance(address, str) else None
    if not match:
        raise ValueError(
            f'{address!r} is not "host:port", e.g. "127.0.0.1:2222" (IPv6: "[::1]:2222").')
    return match.group("host").strip("[]"), int(match.group("port"))


def format_address(host: str, port: int) -> str:
    """``(host, port)`` as a TF_CONFIG address, brackets around an IPv6 host: the inverse of
    :func:`parse_address`.

    Example:
        >>> format_address("10.0.0.1", 2222), format_address("::1", 2222)
        ('10.0.0.1:2222', '[::1]:2222')
    """
    host = str(host)
    return f"[{host}]:{int(port)}" if ":" in host else f"{host}:{int(port)}"


_log = logging.getLogger(__name__)


_reported: set = set()


def field_name(path: Iterable) -> str:
    """``TF_CONFIG["cluster"]["worker"][1]`` for the path ``["cluster", "worker", 1]``."""
    return "TF_CONFIG" + "".join(f"[{p!r}]".replace("'", '"') for p in path)


def _report_unknown(path: list, known: tuple) -> None:
    """Unknown keys are never fatal (platforms add their own); a near-miss gets a warning once."""
    key = tuple(str(p) for p in path)
    if key in _reported:
        return
    _reported.add(key)
    hint = closest(str(path[-1]), known)
    if hint and hint != path[-1]:
        _log.warning("%s is not a key TensorFlow reads; ignored. Did you mean %r?",
                     field_name(path), hint)
    else:
        _log.debug("%s is not a key TensorFlow reads; ignored.", field_name(path))


def _near_miss(mapping: Mapping, wanted: str, path: list) -> str:
    """' TF_CONFIG has "clusters": did you mean "cluster"?' when a present key looks like
    ``wanted``."""
    keys = [k for k in mapping if isinstance(k, str) and k != wanted]
    hint = closest(wanted, keys)
    return f' {field_name(path)} has "{hint}": did you mean "{wanted}"?' if hint else ""


def _unbox(value):
    """``["x"]`` -> ``"x"``: R's ``jsonlite::toJSON()`` writes every scalar as a 1-element array."""
    if (isinstance(value, (list, tuple)) and len(value) == 1
            and not isinstance(value[0], (list, tuple, Mapping))):
        return value[0]
    return value


def _check_address(address, path) -> str:
    if not isinstance(address, str):
        raise ClusterConfigError(
            f'{field_name(path)} = {address!r} must be a "host:port" string, e.g. "10.0.0.1:2222".')
    try:
        _, port = parse_address(address)
    except ValueError:
        raise ClusterConfigError(
            f'{field_name(path)} = "{address}" is not "host:port": write the host, a colon and a '
            f'port number, e.g. "127.0.0.1:2222" (IPv6: "[::1]:2222").') from None
    if not 0 < port < 65536:
        raise ClusterConfigError(
            f'{field_name(path)} = "{address}": port {port} is outside 1-65535.')
    return address.strip()


def _sparse_job(tasks: Mapping, role: str) -> list:
    """``{"0": a, "1": b}`` (TensorFlow's sparse job form) as ``[a, b]``; gaps are refused."""
    by_index = {}
    for key, address in tasks.items():
        try:
            # int() is what tf.train.ClusterSpec applies to the keys.
            index = int(key)
        except (TypeError, ValueError):
            raise ClusterConfigError(
                f'{field_name(["cluster", role, key])}: a job written as an object maps task '
                f'indices ("0", "1", ...) to addresses; {key!r} is not an index. Write the job as '
                f'a list: "{role}": ["host:port", ...].') from None
        if index in by_index:
            raise ClusterConfigError(
                f'{field_name(["cluster", role])} gives task index {index} twice: list each '
                f'task once.')
        by_index[index] = address
    if sorted(by_index) != list(range(len(by_index))):
        raise ClusterConfigError(
            f'{field_name(["cluster", role])} lists task indices {sorted(by_index)}; the '
            f'strategies address tasks 0..{len(by_index) - 1} of a job, so every index from 0 up '
            f'must be present. Write the whole job as a list: "{role}": ["host:port", ...].')
    return [by_index[i] for i in range(len(by_index))]


def _as_address_list(value, role: str) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return _sparse_job(value, role)
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ClusterConfigError(
        f'{field_name(["cluster", role])} must be a list of "host:port" strings, got {value!r}.')


def _role_name(role, path) -> str:
    if not isinstance(role, str):
        raise ClusterConfigError(
            f'{field_name(path)}: a role must be a string; roles are {", ".join(ROLES)}.')
    role = ROLE_ALIASES.get(role, role)
    if role not in ROLES:
        raise ClusterConfigError(
            f'{field_name(path)}: unknown role {path[-1]!r}; roles are {", ".join(ROLES)} '
            f'("master" is read as "chief").{did_you_mean(str(path[-1]), ROLES)}')
    return role


def validate_cluster(cluster) -> dict:
    """Check a cluster description and return it normalized.

    Roles come back in TensorFlow's order, each a list of stripped ``"host:port"`` strings;
    ``"master"`` becomes ``"chief"``, a bare string a one-element list, a dense sparse job a
    list; empty and ``None`` roles are dropped. An empty cluster (``{}``) is valid: no cluster.

    Raises:
        ClusterConfigError: naming the field, e.g. ``TF_CONFIG["cluster"]["worker"][1]``.

    Example:
        >>> validate_cluster({"worker": "10.0.0.1:2222", "master": ["10.0.0.2:2222"]})
        {'chief': ['10.0.0.2:2222'], 'worker': ['10.0.0.1:2222']}
    """
    if not isinstance(cluster, Mapping):
        raise ClusterConfigError(
            f'{field_name(["cluster"])} must be an object mapping roles to address lists, e.g. '
            f'{{"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}}; got {type(cluster).__name__}.')
    by_role: dict[str, list] = {}
    written_as: dict[str, str] = {}
    for name, value in cluster.items():
        role = _role_name(name, ["cluster", name])
        if role in written_as:
            raise ClusterConfigError(
                f'{field_name(["cluster"])} has both "{written_as[role]}" and "{name}", two names '
                f'for the {role}: keep one.')
        written_as[role] = name
        by_role[role] = _as_address_list(value, name)
    seen: dict[str, list] = {}
    out: dict[str, list[str]] = {}
    for role in ROLES:
        addresses = by_role.get(role)
        if not addresses:
            continue
        name = written_as[role]
        if role in _SINGLETON_ROLES and len(addresses) > 1:
            raise ClusterConfigError(
                f'{field_name(["cluster", name])} lists {len(addresses)} tasks; a cluster has at '
                f'most one {role}. Make the others "worker" tasks.')
        checked = []
        for i, address in enumerate(addresses):
            address = _check_address(address, ["cluster", name, i])
            if address in seen:
                raise ClusterConfigError(
                    f'{field_name(["cluster", name, i])} = "{address}" is also '
                    f'{field_name(seen[address])}: every task needs its own host:port.')
            seen[address] = ["cluster", name, i]
            checked.append(address)
        out[role] = checked
    if out.get("ps") and not out.get("worker"):
        raise ClusterConfigError(
            f'{field_name(["cluster"])} has "ps" tasks but no "worker": parameter-server training '
            f'needs at least one worker to run steps; add "worker": ["host:port", ...].')
    return out


def _task_index(task: Mapping, role: str, cluster: dict):
    listed = role in cluster
    if "index" not in task:
        if not listed:
            return 0
        raise ClusterConfigError(
            f'{field_name(["task"])} has no "index": say which {role!r} task this process is, '
            f'0..{len(cluster[role]) - 1}, e.g. "task": {{"type": "{role}", "index": 0}}.'
            f'{_near_miss(task, "index", ["task"])}')
    raw = _unbox(task["index"])
    index = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        index = raw
    elif isinstance(raw, float) and raw.is_integer():
        index = int(raw)
    elif isinstance(raw, str):
        try:
            # TensorFlow's resolver reads the index with int(): accept what it accepts.
            index = int(raw)
        except ValueError:
            pass
    if index is None:
        raise ClusterConfigError(
            f'{field_name(["task", "index"])} = {task["index"]!r} must be a whole number '
            f'such as 0.')
    if index < 0 or (listed and index >= len(cluster[role])):
        span = (f"the cluster has {len(cluster[role])} {role!r} task(s), so the index must be in "
                f"0..{len(cluster[role]) - 1}" if listed else "it must be 0 or more")
        raise ClusterConfigError(
            f'{field_name(["task", "index"])} = {index} is out of range: {span}.')
    return index


def _task(config: Mapping, cluster: dict):
    """The normalized task (``None`` for the coordinator of a parameter-server cluster)."""
    task = config.get("task", {})
    if not isinstance(task, Mapping):
        raise ClusterConfigError(
            f'{field_name(["task"])} must be an object such as {{"type": "worker", "index": 0}}, '
            f'got {task!r}.')
    for key in task:
        if key not in _TASK_KEYS:
            _report_unknown(["task", key], _TASK_KEYS)
    if "type" not in task:
        if "index" in task:
            raise ClusterConfigError(
                f'{field_name(["task"])} has an "index" but no "type": add "type": "worker" (or '
                f'"chief", "ps", "evaluator").{_near_miss(task, "type", ["task"])}')
        if cluster and not cluster.get("ps"):
            raise ClusterConfigError(
                f'TF_CONFIG has no "task" saying which task this process is: add "task": '
                f'{{"type": "worker", "index": i}}. Only the coordinator of a parameter-server '
                f'cluster runs without one.{_near_miss(config, "task", [])}')
        return None
    role = _unbox(task["type"])
    if not isinstance(role, str) or ROLE_ALIASES.get(role, role) not in ROLES:
        raise ClusterConfigError(
            f'{field_name(["task", "type"])} = {task["type"]!r}: it must be one of '
            f'{", ".join(ROLES)}.{did_you_mean(str(role), ROLES)}')
    role = ROLE_ALIASES.get(role, role)
    if role not in cluster and role != "evaluator":
        if "cluster" in config:
            present = ", ".join(cluster) or "nothing"
            why = f'there is no {role!r} task in TF_CONFIG["cluster"] (it has: {present})'
        else:
            why = (f'TF_CONFIG has no "cluster" listing the tasks; add "cluster": '
                   f'{{"{role}": ["host:port", ...]}}')
        if role == "chief" and cluster.get("ps"):
            why += ('; the coordinator of a parameter-server cluster without a chief has no '
                    '"task": remove it, or add "chief": ["host:port"] to the cluster')
        raise ClusterConfigError(
            f'{field_name(["task", "type"])} = {task["type"]!r}: '
            f'{why}.{_near_miss(config, "cluster", [])}')
    out = {"type": role, "index": _task_index(task, role, cluster)}
    out.update((k, v) for k, v in task.items() if k not in _TASK_KEYS)
    return out


def _parse_json(text) -> object:
    if isinstance(text, bytes):
        text = text.decode()
    if not text.strip():
        raise ClusterConfigError(
            "TF_CONFIG is set but empty, and TensorFlow cannot read an empty TF_CONFIG (it fails "
            "with a JSON error). To train in one process, unset it (clear_tf_config()); for a "
            "cluster, set it to the cluster's JSON (set_tf_config()).",
            hints={"python": "Or: del os.environ['TF_CONFIG'].",
                   "r": 'Or: Sys.unsetenv("TF_CONFIG").'})
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ClusterConfigError(
            f"TF_CONFIG is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}): "
            f"{text[:120]!r}. Build it with tfdistributed.tf_config(...) instead of by hand."
        ) from None


def validate_tf_config(config) -> dict:
    """Validate a TF_CONFIG (a dict, or its JSON text) and return it normalized as a dict.

    The result has ``"cluster"`` (see :func:`validate_cluster`; ``{}`` when there is none),
    ``"task"`` with ``"type"`` and an int ``"index"`` (absent for the coordinator of a
    parameter-server cluster), and every other key of the input unchanged. The module docstring
    lists what is normalized and what is refused.

    Raises:
        ClusterConfigError: naming the field and the fix.

    Example:
        >>> validate_tf_config('{"cluster": {"worker": "h:1"}, '
        ...                    '"task": {"type": "worker", "index": "0"}}')
        {'cluster': {'worker': ['h:1']}, 'task': {'type': 'worker', 'index': 0}}
    """
    if isinstance(config, (str, bytes)):
        config = _parse_json(config)
    if not isinstance(config, Mapping):
        raise ClusterConfigError(
            f'TF_CONFIG must be a JSON object with "cluster" and "task", got '
            f'{type(config).__name__} {config!r:.80}.')
    for key in config:
        if key not in _TOP_LEVEL_KEYS:
            _report_unknown([key], _TOP_LEVEL_KEYS)
    cluster = validate_cluster(config["cluster"]) if "cluster" in config else {}
    out: dict = {"cluster": cluster}
    task = _task(config, cluster)
    if task is not None:
        out["task"] = task
    if config.get("rpc_layer") is not None:
        rpc_layer = _unbox(config["rpc_layer"])
        if not isinstance(rpc_layer, str):
            raise ClusterConfigError(
                f'{field_name(["rpc_layer"])} = {config["rpc_layer"]!r} must be a protocol name '
                f'such as "grpc" (or leave it out: gRPC is the default).')
        out["rpc_layer"] = rpc_layer
    # A null rpc_layer means TensorFlow's default, as if it were absent.
    out.update((k, copy.deepcopy(v)) for k, v in config.items()
               if k not in out and k != "task" and not (k == "rpc_layer" and v is None))
    return out


def cluster_or_none(config: dict):
    """``None`` for a TF_CONFIG that describes no cluster and no task (TensorFlow: one process)."""
    return config if config["cluster"] or "task" in config else None


def cluster_spec(workers=None, ps=None, chief=None, evaluator=None) -> dict:
    """A validated cluster dict from address lists (``chief``/``evaluator`` may be one string).

    Example:
        >>> cluster_spec(["10.0.0.1:2222", "10.0.0.2:2222"], ps=["10.0.0.3:2222"])
        {'worker': ['10.0.0.1:2222', '10.0.0.2:2222'], 'ps': ['10.0.0.3:2222']}
    """
    cluster = {"chief": chief, "worker": workers, "ps": ps, "evaluator": evaluator}
    cluster = validate_cluster({k: v for k, v in cluster.items() if v})
    if not cluster.get("chief") and not cluster.get("worker"):
        raise ClusterConfigError(
            f'{field_name(["cluster"])} has no "worker" or "chief" task: list at least one worker.')
    return cluster


def tf_config(cluster, task_type: str | None = "worker", task_index=0) -> dict:
    """The TF_CONFIG dict for one task of ``cluster`` (worker 0 by default); ``json.dumps`` it
    for the environment.

    ``task_type=None`` gives the coordinator's TF_CONFIG of a parameter-server cluster without
    a chief (TensorFlow adds the coordinator to the cluster itself).

    Example:
        >>> tf_config({"worker": ["h:1", "h:2"]}, "worker", 1)["task"]
        {'type': 'worker', 'index': 1}
    """
    if isinstance(task_index, float) and task_index.is_integer():
        task_index = int(task_index)
    config = {"cluster": cluster}
    if task_type is not None:
        config["task"] = {"type": task_type, "index": task_index}
    return validate_tf_config(config)
