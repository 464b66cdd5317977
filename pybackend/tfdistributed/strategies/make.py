"""Create a ``tf.distribute.Strategy`` by name, with one small function per kind.

Names (case-insensitive; ``-``/``_``/spaces and a trailing ``Strategy`` are ignored, so the
class names ``MirroredStrategy``, ``MultiWorkerMirroredStrategy``... work too):

================================  ===========================================================
``default``                       no distribution (TensorFlow's default strategy)
``one_device``                    everything on one device (``devices="/gpu:0"``...)
``mirrored``                      synchronous data parallelism over local GPUs / logical CPUs
``central_storage``               variables on one device, computation mirrored
``multi_worker_mirrored``         synchronous data parallelism over several processes
``parameter_server``              asynchronous training, variables on ``ps`` tasks
``tpu``                           a Cloud TPU
``auto``                          chosen from TF_CONFIG and the local devices (see below)
================================  ===========================================================

On GPUs, every kind gets memory growth on each GPU, and ``multi_worker_mirrored`` NCCL for
its all-reduce unless ``communication_options`` chose another implementation
(:mod:`tfdistributed.strategies.gpus`; ``TF_FORCE_GPU_ALLOW_GROWTH=false`` turns growth off).

``auto`` picks ``parameter_server`` when TF_CONFIG has ``ps`` tasks (on the chief, or on the
coordinator of a cluster without a chief, whose TF_CONFIG has no task), ``multi_worker_mirrored``
when it has several workers, ``mirrored`` with several GPUs or when ``num_cpu_devices`` > 1 is
asked for, else ``default``; an ``evaluator`` task (outside the training cluster) gets a local
strategy. So one script runs unchanged on a laptop and under :func:`tfdistributed.launch`.
Inside ``srun`` (a SLURM job step of 2+ tasks) without TF_CONFIG, the cluster comes from SLURM's
environment first (:mod:`tfdistributed.cluster.from_slurm`, the reader alone: not the
``sbatch`` engine).
"""

from __future__ import annotations

import re

from ..cluster import from_slurm
from .._args import as_int
from .compression import (canonical_compression, gradient_compression, ignored_for_local,
                          not_compressible, powersgd_options, set_gradient_compression)
from .packing import (as_bytes_per_pack, communication_options, fixed_pack_bytes,
                      set_bytes_per_pack, threads_for_overlap)
from ..cluster.addresses import check_own_address
from ..cluster.environment import num_workers, read_tf_config, sync_tf_config
from ..errors import ArgumentTypeError, StrategyError, closest
from ..cluster import join
from .gpus import settle_gpus, with_nccl

STRATEGY_NAMES = ("default", "one_device", "mirrored", "central_storage",
                  "multi_worker_mirrored", "parameter_server", "tpu", "auto")
_ALIASES = {"ps": "parameter_server", "mwms": "multi_worker_mirrored", "onedevice": "one_device"}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_KEY = {_key(n): n for n in STRATEGY_NAMES}
_BY_KEY.update({_key(n) + "strategy": n for n in STRATEGY_NAMES})
_BY_KEY.update(_ALIASES)
_BY_KEY["tpustrategy"] = "tpu"


def canonical_name(name) -> str:
    """The canonical strategy name for ``name``, or a :class:`StrategyError` listing the valid
    ones."""
    if not isinstance(name, str):
        raise ArgumentTypeError(
            f"The strategy name must be a string such as 'mirrored', got {type(name).__name__} "
            f"{name!r}. Valid names: {', '.join(STRATEGY_NAMES)}.")
    found = _BY_KEY.get(_key(name))
    if found is None:
        match = closest(_key(name), [k for k in _BY_KEY if len(k) > 4] + ["tpu", "ps"])
        hint = f" Did you mean {_BY_KEY[match]!r}?" if match else ""
        raise StrategyError(
            f"Unknown strategy {name!r}. Valid names: {', '.join(STRATEGY_NAMES)} "
            f"(CamelCase class names such as 'MirroredStrategy' work too).{hint}")
    return found


def configure_cpu_devices(n) -> list:
    """Split the physical CPU into ``n`` logical devices, so CPU-only machines get ``n`` replicas.

    TensorFlow fixes its devices when it first initializes, so this must run before anything else
    touches TensorFlow (first thing in the script, or in a fresh R session).
    """
    import tensorflow as tf

    n = as_int(n, "num_cpu_devices", minimum=1)
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have != n:
            raise StrategyError(
                f"Cannot split the CPU into {n} logical devices: TensorFlow is already initialized "
                f"with {have}. Ask for {n} CPU devices in the first strategy, before anything "
                f"else uses TensorFlow: at the top of the script, or in a fresh session.",
                hints={"python": f"E.g. make_strategy('mirrored', num_cpu_devices={n}).",
                       "r": f'E.g. distribute_strategy("mirrored", num_cpu_devices = {n}).'}
            ) from None
    return tf.config.list_logical_devices("CPU")


def _device_list(devices, name: str):
    if devices is None:
        return None
    if isinstance(devices, str):
        return [devices]
    try:
        devices = list(devices)
    except TypeError:
        raise ArgumentTypeError(f"`devices` for {name!r} must be a device string or a list of "
                                f"them, e.g. ['/cpu:0', '/cpu:1']; got {devices!r}.") from None
    if not all(isinstance(d, str) for d in devices):
        raise ArgumentTypeError(
            f"`devices` must be device strings such as '/gpu:0'; got {devices!r}.")
    return devices


def _local_compute_devices():
    """All local GPUs if any, else all logical CPUs (several after configure_cpu_devices)."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    devices = gpus or tf.config.list_logical_devices("CPU")
    return [d.name for d in devices]


def _default(**_):
    import tensorflow as tf

    if not tf.distribute.has_strategy():
        return tf.distribute.get_strategy()
    # Inside another strategy's scope get_strategy() returns that one, not the default.
    from tensorflow.python.distribute import distribute_lib

    return distribute_lib._get_default_strategy()


def _one_device(devices=None, **_):
    import tensorflow as tf

    devices = _device_list(devices, "one_device")
    if devices and len(devices) != 1:
        raise StrategyError(f"'one_device' runs on exactly one device; got {len(devices)}: "
                            f"{devices}. Use 'mirrored' for several devices.")
    device = devices[0] if devices else _local_compute_devices()[0]
    return tf.distribute.OneDeviceStrategy(device)


def _mirrored(devices=None, cross_device_ops=None, **_):
    import tensorflow as tf

    devices = _device_list(devices, "mirrored") or _local_compute_devices()
    if cross_device_ops is None and all("GPU" not in d.upper() for d in devices):
        # TF 2.21 picks CollectiveAllReduce for CPU devices, and every new MirroredStrategy
        # restarts its collective keys at 100: a second strategy in the same process (a
        # re-run notebook chunk) then fails with "Shape mismatch in the collective instance".
        # Reducing on one device has no shared keys, and on one CPU it costs nothing extra.
        cross_device_ops = tf.distribute.ReductionToOneDevice()
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross_device_ops)


def _central_storage(devices=None, parameter_device=None, **_):
    import tensorflow as tf

    devices = _device_list(devices, "central_storage") or _local_compute_devices()
    return tf.distribute.experimental.CentralStorageStrategy(
        compute_devices=devices, parameter_device=parameter_device)


def _multi_worker_mirrored(cluster_resolver=None, communication_options=None, **_):
    import tensorflow as tf

    # Reading TF_CONFIG validates it and writes its normalized form back before TensorFlow
    # reads it; then the task shapes TensorFlow's constructor would fail on are named here.
    config = read_tf_config()
    task = (config or {}).get("task")
    if cluster_resolver is None and config and config["cluster"]:
        if task is None:
            raise StrategyError(
                "'multi_worker_mirrored' needs to know which task this process is, and TF_CONFIG "
                "has no \"task\" (that is only for the coordinator of parameter-server training): "
                "add \"task\": {\"type\": \"worker\", \"index\": i}.")
        if task["type"] == "ps":
            raise StrategyError(
                f"This process is the 'ps' task {task['index']}: ps tasks serve variables for "
                f"'parameter_server' training and run tfdistributed.run_server(), they do not "
                f"create a multi_worker_mirrored strategy.")
        if task["type"] == "evaluator" and "evaluator" not in config["cluster"]:
            raise StrategyError(
                "This process is the evaluator, which is not part of the training cluster: create "
                "a local strategy for it ('auto' does, or 'default' / 'mirrored').")
        check_own_address(config)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=cluster_resolver, communication_options=communication_options)
    except RuntimeError as e:
        if "initialized" in str(e) or "startup" in str(e):
            raise StrategyError(
                "multi_worker_mirrored must be created before TensorFlow runs anything else: "
                "create the strategy at the top of the script (after set_tf_config()), before "
                f"building models or datasets. TensorFlow said: {e}") from None
        raise


def _parameter_server(cluster_resolver=None, variable_partitioner=None, **_):
    import tensorflow as tf

    return tf.distribute.experimental.ParameterServerStrategy(
        cluster_resolver or ps_cluster_resolver(), variable_partitioner=variable_partitioner)


def ps_cluster_resolver():
    """TensorFlow's resolver of the parameter-server cluster TF_CONFIG describes, for the
    coordinator (the chief, or the process of a chief-less cluster whose TF_CONFIG has no task).

    Raises:
        StrategyError: TF_CONFIG names no ps task, or this process is a worker or ps task.
    """
    import tensorflow as tf

    config = read_tf_config()
    if not config or not config["cluster"].get("ps"):
        raise StrategyError(
            "'parameter_server' needs a cluster with workers and ps tasks (and optionally a "
            "chief), and there is none: set TF_CONFIG (set_tf_config()), start the job with "
            "the launcher and 1 or more ps tasks, or pass a cluster_resolver.",
            hints={"python": "E.g. tfdistributed.launch('train.py', "
                             "tfdistributed.Scaling(workers=2, ps=1, chief=True)).",
                   "r": 'E.g. launch_cluster("train.R", scaling(workers = 2, ps = 1, '
                        'chief = TRUE)).'})
    task = config.get("task")
    # The coordinator is the chief, or, in a cluster without a chief, the process whose
    # TF_CONFIG has no task: TensorFlow then adds it to the cluster as job "chief".
    if task is not None and task["type"] != "chief":
        raise StrategyError(
            f"This process is the {task['type']!r} task {task['index']}; in parameter-server "
            f"training only the chief creates the strategy (in a cluster without a chief: the "
            f"coordinator, whose TF_CONFIG has no \"task\"). Workers and ps tasks run "
            f"tfdistributed.run_server() (the launcher does this for you).")
    check_own_address(config)
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


def _tpu(tpu=None, cluster_resolver=None, **_):
    import tensorflow as tf

    try:
        resolver = (cluster_resolver
                    or tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or ""))
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        raise StrategyError(
            f"No TPU could be reached ({e}). Run on a Cloud TPU VM, or pass the TPU's name or "
            f"address as `tpu`. Without a TPU use 'mirrored' or 'auto'.",
            hints={"python": "E.g. make_strategy('tpu', tpu='my-tpu').",
                   "r": 'E.g. distribute_strategy("tpu", tpu = "my-tpu").'}) from None
    return tf.distribute.TPUStrategy(resolver)


def _auto_kind(num_cpu_devices=None) -> str:
    import tensorflow as tf

    config = read_tf_config()
    task = (config or {}).get("task")
    # The evaluator is not part of the training cluster (TensorFlow's definition): it evaluates
    # on its own devices, so it gets a local strategy.
    if config and config["cluster"] and not (task and task["type"] == "evaluator"):
        if config["cluster"].get("ps"):
            return "parameter_server"
        if num_workers(config) > 1:
            return "multi_worker_mirrored"
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return "mirrored"
    if num_cpu_devices and num_cpu_devices > 1:
        return "mirrored"
    return "default"


_MAKERS = {
    "default": _default,
    "one_device": _one_device,
    "mirrored": _mirrored,
    "central_storage": _central_storage,
    "multi_worker_mirrored": _multi_worker_mirrored,
    "parameter_server": _parameter_server,
    "tpu": _tpu,
}


def make_strategy(name="auto", *, devices=None, num_cpu_devices=None, cluster_resolver=None,
                  join_timeout=None, gradient_compression=None, bytes_per_pack=None, **kw):
    """A ``tf.distribute.Strategy`` from its name (see the module docstring for the names).

    Args:
        name: strategy name or alias, case-insensitive.
        devices: device string(s) for ``one_device``, ``mirrored``, ``central_storage``.
        num_cpu_devices: split the CPU into this many logical devices first, so a CPU-only
            machine gets several replicas (must come before TensorFlow initializes).
        cluster_resolver: for ``multi_worker_mirrored``, ``parameter_server``, ``tpu``; by
            default TF_CONFIG is read (and validated).
        join_timeout: for ``multi_worker_mirrored``: seconds to wait for every task of the
            cluster to join (default ``TFDISTRIBUTED_JOIN_TIMEOUT``, else 300); meanwhile the
            task names the tasks it still waits for, then fails with ``JoinTimeoutError``
            (see :mod:`tfdistributed.cluster.join`).
        gradient_compression: ``"fp16"`` or ``"bf16"``: the gradients cross the network
            between workers in 16 bits (:mod:`tfdistributed.strategies.compression`);
            ``"powersgd"`` or :func:`~tfdistributed.strategies.lowrank.powersgd`'s options
            (``powersgd(rank=4, warmup_steps=1000)``): big gradient matrices go low-rank, with
            error feedback (:mod:`tfdistributed.strategies.lowrank`). Only for
            ``multi_worker_mirrored`` (an error for the other kinds, a warning and ignored when
            ``auto`` picks a local strategy; ``auto`` never picks a compression itself). None
            (the default) or ``"none"``: 32 bits.
        bytes_per_pack: for ``multi_worker_mirrored``: the gradient all-reduce in packs of
            about this many bytes, each sent while the backward pass goes on
            (:mod:`tfdistributed.strategies.packing`); 0: one all-reduce per step; None (the
            default): "auto", packs for gradients of 8 MB or more. An error for the other kinds (but
            0 or None); ignored when ``auto`` picks a local strategy.
        **kw: passed to the kind's constructor: ``cross_device_ops`` (mirrored),
            ``parameter_device`` (central_storage), ``communication_options``
            (multi_worker_mirrored: on a task with GPUs, NCCL unless it names another
            implementation), ``variable_partitioner`` (parameter_server), ``tpu``.

    Every GPU of the process gets memory growth first, unless
    ``TF_FORCE_GPU_ALLOW_GROWTH=false`` (:mod:`tfdistributed.strategies.gpus`).
    """
    kind = canonical_name(name)
    compression = canonical_compression(gradient_compression)
    if compression and kind not in ("auto", "multi_worker_mirrored"):
        raise not_compressible(repr(kind))
    bytes_per_pack = as_bytes_per_pack(bytes_per_pack)
    if bytes_per_pack and kind not in ("auto", "multi_worker_mirrored"):
        raise StrategyError(
            f"`bytes_per_pack` applies to 'multi_worker_mirrored', whose gradients cross the "
            f"network in an all-reduce; {kind!r} has none to pack. Drop `bytes_per_pack`.")
    num_cpu_devices = as_int(num_cpu_devices, "num_cpu_devices", minimum=1, allow_none=True)
    known = {"cross_device_ops", "parameter_device", "communication_options",
             "variable_partitioner", "tpu"}
    unknown = set(kw) - known
    if unknown:
        raise ArgumentTypeError(f"Unknown argument(s) {sorted(unknown)} for make_strategy(); "
                                f"known: {sorted(known)}.")
    # TF_CONFIG may have been set outside Python since it started (e.g. R's Sys.setenv()).
    sync_tf_config()
    gpus = settle_gpus()  # memory growth, before TensorFlow starts its devices
    if num_cpu_devices:
        configure_cpu_devices(num_cpu_devices)
    if cluster_resolver is None and kind in ("auto", "multi_worker_mirrored", "parameter_server"):
        # A task of `srun -n 2+` without TF_CONFIG: its cluster is in SLURM's environment.
        from_slurm.set_tf_config_from_slurm_if_needed()
    if kind == "auto":
        kind = _auto_kind(num_cpu_devices)
        if compression and kind != "multi_worker_mirrored":
            ignored_for_local(kind, gradient_compression)
            compression = None
        if kind != "multi_worker_mirrored":
            bytes_per_pack = None  # nothing to pack: one process, no network
    if kind == "multi_worker_mirrored":
        if bytes_per_pack is not None:
            kw["communication_options"] = communication_options(
                bytes_per_pack, kw.get("communication_options"))
        threads_for_overlap(bytes_per_pack)
        if gpus:
            kw["communication_options"] = with_nccl(gpus, kw.get("communication_options"))
    with join.timeout(join_timeout):
        strategy = _MAKERS[kind](devices=devices, cluster_resolver=cluster_resolver, **kw)
    if bytes_per_pack is not None:
        set_bytes_per_pack(strategy, bytes_per_pack)
    return set_gradient_compression(strategy, gradient_compression) if compression else strategy


def strategy_kind(strategy) -> str:
    """The canonical name of a strategy object's kind (``"mirrored"``, ``"default"``...)."""
    import tensorflow as tf

    v1 = tf.compat.v1.distribute  # the TF 1 classes, which R tutorials still make by hand
    checks = [
        ((tf.distribute.MultiWorkerMirroredStrategy,
          v1.experimental.MultiWorkerMirroredStrategy), "multi_worker_mirrored"),
        ((tf.distribute.MirroredStrategy, v1.MirroredStrategy), "mirrored"),
        ((tf.distribute.OneDeviceStrategy, v1.OneDeviceStrategy), "one_device"),
        ((tf.distribute.experimental.CentralStorageStrategy,
          v1.experimental.CentralStorageStrategy), "central_storage"),
        ((tf.distribute.experimental.ParameterServerStrategy,
          v1.experimental.ParameterServerStrategy), "parameter_server"),
        ((tf.distribute.TPUStrategy, v1.experimental.TPUStrategy), "tpu"),
    ]
    for cls, kind in checks:
        if isinstance(strategy, cls):
            return kind
    if type(strategy).__name__ == "_DefaultDistributionStrategy":
        return "default"
    raise ArgumentTypeError(
        f"`strategy` must be a tf.distribute.Strategy, got {type(strategy).__name__} "
        f"{strategy!r:.80}: create one by name.",
        hints={"python": "E.g. strategy = tfdistributed.make_strategy('mirrored').",
               "r": 'E.g. strategy <- distribute_strategy("mirrored").'})


def input_workers(strategy) -> int:
    """The input pipelines ``strategy`` splits a dataset over: the workers of a multi-worker or
    parameter-server job, else 1 (every other strategy reads one pipeline in one process).

    Example:
        >>> input_workers(make_strategy("mirrored"))    # doctest: +SKIP
        1
    """
    if strategy_kind(strategy) in ("multi_worker_mirrored", "parameter_server"):
        return int(strategy_info(strategy)["num_workers"])
    return 1


def strategy_info(strategy) -> dict:
    """What a strategy is: kind, replicas in sync, local devices, workers and this task (and,
    for ``multi_worker_mirrored``, its ``gradient_compression``, ``powersgd`` (its options as
    a dict, or None) and ``bytes_per_pack``: the pack size set, 0 for one all-reduce per step,
    None for "auto")."""
    kind = strategy_kind(strategy)
    if kind == "default":
        devices = [_local_compute_devices()[0]]
    elif kind == "parameter_server":
        devices = []
    else:
        devices = list(strategy.extended.worker_devices)
    info = {"kind": kind, "num_replicas": int(strategy.num_replicas_in_sync),
            "devices": [str(d) for d in devices], "num_workers": 1,
            "task_type": None, "task_index": None}
    if kind == "multi_worker_mirrored":
        resolver = strategy.cluster_resolver
        info["task_type"] = resolver.task_type
        info["task_index"] = resolver.task_id
        spec = resolver.cluster_spec().as_dict()
        info["num_workers"] = max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))
        info["gradient_compression"] = gradient_compression(strategy)
        options = powersgd_options(strategy)
        info["powersgd"] = None if options is None else options.as_dict()
        info["bytes_per_pack"] = fixed_pack_bytes(strategy)
    elif kind == "parameter_server":
        # ParameterServerStrategy keeps its resolver on itself: the public
        # `strategy.cluster_resolver` (which asks `extended`) is None.
        spec = strategy._cluster_resolver.cluster_spec().as_dict()
        info["num_workers"] = len(spec.get("worker", []))
        info["num_ps"] = len(spec.get("ps", []))
        info["task_type"] = "chief"
        info["task_index"] = 0
    return info
