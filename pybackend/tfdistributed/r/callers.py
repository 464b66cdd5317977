"""TensorFlow called straight from R, as the R tutorials call it.

Two things TensorFlow 2.21 assumes of its callers that R programs written from those tutorials
do not meet, each mended only where the installed TensorFlow still has it:

TensorFlow's deprecation notices name the file and line of the call, two Python frames above
the deprecated function (``tensorflow.python.util.deprecation._call_location``). Called from R
through reticulate, as the R tutorials write ``tf$distribute$experimental$
MultiWorkerMirroredStrategy()``, there is no Python frame there, and the notice itself fails
before the strategy is made: "AttributeError: 'NoneType' object has no attribute 'f_code'".
:func:`install` has the notice name R as the caller instead; where TensorFlow's own code already
copes (an upstream fix), it changes nothing.

``tf$distribute$experimental$ParameterServerStrategy()`` with no argument: TensorFlow 2.0-2.3
read the cluster from TF_CONFIG and, with none, ran on the machine's own devices, variables kept
in one place and computation replicated (what became ``CentralStorageStrategy``), as the
tutorials expect; 2.4 and later require a cluster resolver ("missing 1 required positional
argument: 'cluster_resolver'"). Called without one, the strategy now takes the cluster TF_CONFIG
describes, as ``distribute_strategy("parameter_server")`` does
(:func:`tfdistributed.strategies.make.ps_cluster_resolver`); where TF_CONFIG names no ps task,
it is a ``CentralStorageStrategy``, as TensorFlow 2.0 gave, and says so.
"""

from __future__ import annotations

import inspect
import sys

from ..cluster.environment import read_tf_config
from ..strategies.make import ps_cluster_resolver

CALLER = "R (through reticulate)"
LOCAL_NOTICE = ("ParameterServerStrategy() was made without a cluster (TF_CONFIG names no ps "
                "task): it runs on this machine's devices as CentralStorageStrategy, as "
                "TensorFlow 2.0 did. For parameter servers, launch the program as the chief of a "
                "cluster with ps tasks, e.g. launch_cluster(\"train.R\", scaling(workers = 2, "
                "ps = 1, chief = TRUE)).")


def defect_present(deprecation) -> bool:
    """Whether TensorFlow's ``_call_location`` still reads a frame that may not exist."""
    source = inspect.getsource(getattr(deprecation._call_location, "__tfdistributed_original__",
                                       deprecation._call_location))
    return "f.f_code" in source and "f is None" not in source


def install() -> None:
    """Both mends, where the installed TensorFlow needs them (idempotent; imports
    TensorFlow)."""
    _notices_name_r()
    _ps_strategy_reads_tf_config()


def _notices_name_r() -> None:
    """Let TensorFlow's deprecation notices name R as the caller when there is no Python
    frame above the deprecated call."""
    from tensorflow.python.util import deprecation

    original = deprecation._call_location
    if hasattr(original, "__tfdistributed_original__") or not defect_present(deprecation):
        return

    def _call_location(outer=False):
        # TensorFlow's own lookup, two frames up (this function's caller's caller), with the
        # frame that R calls have no Python frame for.
        frame = inspect.currentframe().f_back.f_back
        parent = frame and frame.f_back
        if outer and parent is not None:
            frame = parent
        if frame is None:
            return CALLER
        return f"{frame.f_code.co_filename}:{frame.f_lineno}"

    _call_location.__tfdistributed_original__ = original
    deprecation._call_location = _call_location


def _ps_strategy_reads_tf_config() -> None:
    """``ParameterServerStrategy()`` without a cluster resolver: TF_CONFIG's cluster, or this
    machine's devices (central storage) where TF_CONFIG names no ps task."""
    import tensorflow as tf
    from tensorflow.python.distribute import parameter_server_strategy_v2 as ps

    cls = ps.ParameterServerStrategyV2
    init = cls.__init__
    needed = inspect.signature(init).parameters["cluster_resolver"].default
    if hasattr(init, "__tfdistributed_original__") or needed is not inspect.Parameter.empty:
        return

    def __new__(klass, cluster_resolver=None, variable_partitioner=None):
        if cluster_resolver is None and not (read_tf_config() or {}).get("cluster", {}).get("ps"):
            print(LOCAL_NOTICE, file=sys.stderr, flush=True)
            return tf.distribute.experimental.CentralStorageStrategy()
        return object.__new__(klass)

    def __init__(self, cluster_resolver=None, variable_partitioner=None):
        init(self, cluster_resolver or ps_cluster_resolver(), variable_partitioner)

    __init__.__tfdistributed_original__ = init
    __init__.__doc__ = init.__doc__
    cls.__new__ = __new__
    cls.__init__ = __init__
