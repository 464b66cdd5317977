"""Python callbacks in a ``tf.data`` pipeline that call R: found, and refused where they hang.

``tf.data.Dataset.from_generator(<R function>)`` (or a ``py_function`` over one) given to Keras
``fit`` on R's main thread hangs: TensorFlow calls the generator on one of its own threads,
reticulate can run R code only on R's main thread, and that thread is blocked inside ``fit``
waiting for the batch. :func:`find_host_generators` spots such a dataset, so that
:func:`refuse_r_generator_on_main_thread` (run by :func:`tfdistributed.data.check_dataset` on
every dataset given to ``fit``/``evaluate``) and the R package's ``fit_distributed()`` refuse
it at once, with a message naming ``dataset_from_generator()``, instead of hanging. (Serving
such a dataset from R's main thread works too - reticulate runs the callbacks there - but
TensorFlow keeps calling it from iterators Keras throws away, and a call into R left waiting
when the session ends crashed R at exit in our tests; the feed of
:mod:`tfdistributed.r.feed` has no such callback.)

A module of its own, below :mod:`tfdistributed.data`: the dataset checks need the detection,
while the feed imports ``data`` (and is imported by the training layer), so the detection cannot
live with the feed without an import cycle. It needs only TensorFlow and reticulate's module
name.
"""

from __future__ import annotations

import threading

from ..errors import GeneratorError

_PY_FUNC_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")


def _graph_ops(dataset):
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    # A dataset with Python callbacks has external state and would refuse to serialize.
    ignore = tf.data.experimental.ExternalStatePolicy.IGNORE
    graph = graph_pb2.GraphDef.FromString(
        dataset._as_serialized_graph(external_state_policy=ignore).numpy())
    nodes = list(graph.node)
    for function in graph.library.function:
        nodes += list(function.node_def)
    return nodes


def _is_r_callable(fn) -> bool:
    module = getattr(fn, "__module__", "") or ""
    return module.startswith("rpytools")


def _calls_r(fn, depth=4) -> bool:
    """Whether a registered callback is, or wraps, an R function.

    ``from_generator`` registers small functions whose closures hold (a method of) a state
    object, which holds the user's generator; the search follows closures, bound methods and
    that ``_generator`` attribute a few levels deep.
    """
    if fn is None or depth < 0:
        return False
    if _is_r_callable(fn):
        return True
    inner = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
             if c.cell_contents is not None]
    inner += [getattr(fn, name) for name in ("__self__", "_generator", "_func")
              if getattr(fn, name, None) is not None]
    return any(_calls_r(i, depth - 1) for i in inner if callable(i) or hasattr(i, "_generator"))


def find_host_generators(dataset) -> dict:
    """Python callbacks inside ``dataset`` (``from_generator``, ``py_function``...).

    Returns ``{"callbacks": n, "r_functions": m}``: ``m`` of the ``n`` callbacks call an R
    function (reticulate's wrapper). Such a dataset given to ``fit`` on R's main thread hangs:
    the callback waits for R's main thread, which waits inside ``fit``. When no callback of the
    process calls R, the answer comes without serializing the dataset (which copies arrays held
    in it), and is then ``{"callbacks": 0, "r_functions": 0}``: the dataset's own callbacks are
    counted only when one of the process might call R.
    """
    import tensorflow as tf
    from tensorflow.python.ops import script_ops

    if not isinstance(dataset, tf.data.Dataset):
        return {"callbacks": 0, "r_functions": 0}
    registry = dict(script_ops._py_funcs._funcs)
    if not any(_calls_r(fn) for fn in registry.values()):
        return {"callbacks": 0, "r_functions": 0}
    tokens = [node.attr["token"].s.decode() for node in _graph_ops(dataset)
              if node.op in _PY_FUNC_OPS]
    r_functions = sum(1 for t in tokens if t in registry and _calls_r(registry[t]))
    return {"callbacks": len(tokens), "r_functions": r_functions}


def refuse_r_generator_on_main_thread(dataset, what="fit"):
    """Raise :class:`GeneratorError` if ``dataset`` calls R and we are on the main thread.

    For ``tfdistributed.fit``/``evaluate``: there, such a dataset would hang forever.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if find_host_generators(dataset)["r_functions"]:
        raise GeneratorError(
            f"{what}() was given a tf.data dataset whose generator is an R function "
            f"(tf$data$Dataset$from_generator(<R function>)). Called on R's main thread this "
            f"hangs: TensorFlow calls the generator on its own thread and the call waits for R. "
            f"Use dataset_from_generator(<your function>) with fit_distributed() / "
            f"evaluate_distributed(), which serve the generator from R's main thread.")


__all__ = ["find_host_generators", "refuse_r_generator_on_main_thread"]
