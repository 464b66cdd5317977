"""Keras 3's training options under each strategy: honoured, or refused before training.

Every option of ``compile()`` and of the optimizers that changes how a model trains
(``steps_per_execution``, ``jit_compile``, ``run_eagerly``, ``gradient_accumulation_steps``,
``use_ema``, loss scaling, ``clipnorm``/``clipvalue``/``global_clipnorm``) trains under every
strategy kind as on one device, with the repairs of :mod:`tfdistributed.training.compat`
(CONFORMANCE.md shows each), except the few below, which :func:`check_options` refuses before
any step, by a :class:`~tfdistributed.errors.TrainingError` that names the option, the strategy
and what to use instead, where Keras or TensorFlow would fail deep inside (or, for a strategy
whose trainer is ours, silently ignore the option):

- ``steps_per_execution`` that is not a whole number >= 1, e.g. ``"auto"`` (tf.keras' tuner):
  Keras 3 takes a number of steps and fails on anything else, under every strategy.
- ``jit_compile=True`` under ``mirrored`` with several devices (Keras compiles the step of
  every replica as one XLA program, on one device, while each replica's variables live on its
  own: keras-team/keras#19005), under ``central_storage`` with several devices (each replica's
  compiled ``evaluate``/``predict`` step reads the weights on the parameter device), under
  ``multi_worker_mirrored`` on CPUs (TensorFlow's XLA has
  no collective operations on CPUs: "Collectives are not yet implemented for CPU devices when
  compiling with XLA") or with several devices per worker, and under ``parameter_server``
  (tfdistributed's coordinator runs each step as a ``tf.function`` on a worker, reading
  variables that live on the ps tasks, and does not compile it with XLA).
- ``run_eagerly=True`` under ``parameter_server``: the coordinator can only send a worker a
  ``tf.function``.
- ``gradient_accumulation_steps`` under ``parameter_server`` with more than one worker: the
  workers run their steps asynchronously, so no step knows which others fall in its window
  (with one worker, the steps run in order and accumulate as on one device).

The check runs in tfdistributed's ``fit()``, ``evaluate()`` and ``predict()`` and in Keras'
own ``model.fit``/``evaluate``/``predict`` (:mod:`tfdistributed.training.routing`), which is
where keras3's R functions arrive.
"""

from __future__ import annotations

from ..errors import TrainingError
from ..strategies.make import input_workers, strategy_kind

_STEPS_HINT = {"python": "E.g. model.compile(..., steps_per_execution=32).",
               "r": "E.g. compile(..., steps_per_execution = 32)."}
_JIT_HINT = {"python": "E.g. model.compile(..., jit_compile=False).",
             "r": "E.g. compile(..., jit_compile = FALSE)."}


def check_options(model, strategy=None, what: str = "fit") -> None:
    """Refuse, before training, a Keras option ``model`` was compiled with that cannot be
    honoured under ``strategy`` (default: the model's); see the module's docstring.

    Raises:
        TrainingError: naming the option, the strategy and what to use instead.

    Example:
        >>> model.compile(optimizer="adam", loss="mse", steps_per_execution="auto")
        >>> check_options(model)    # doctest: +SKIP
        TrainingError: steps_per_execution="auto" is not a number of steps: ...
    """
    if not getattr(model, "compiled", False):
        return
    strategy = strategy or model.distribute_strategy
    kind = strategy_kind(strategy)
    for rule in (_steps_per_execution, _jit_compile, _run_eagerly, _accumulation):
        refusal = rule(model, strategy, kind, what)
        if refusal is not None:
            raise refusal


def _steps_per_execution(model, strategy, kind, what):
    steps = getattr(model, "steps_per_execution", 1)
    if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1:
        return None
    return TrainingError(
        f"{what}(): the model was compiled with steps_per_execution={steps!r}, which is not a "
        f"number of steps (under the {kind!r} strategy, as under any): Keras 3 runs a whole "
        f"number of steps in each call and has no \"auto\" (tf.keras' tuner). Compile the "
        f"model with a whole number of steps, e.g. the batches of an epoch or fewer.",
        hints=_STEPS_HINT)


def _jit_compile(model, strategy, kind, what):
    if getattr(model, "jit_compile", False) is not True:
        return None
    devices = [d.upper() for d in strategy.extended.worker_devices] \
        if kind in ("mirrored", "central_storage", "multi_worker_mirrored") else []
    if kind == "mirrored" and len(devices) > 1:
        why = (f"Keras compiles the step of all {len(devices)} replicas as one XLA program for "
               f"one device, and each replica's weights live on its own device")
    elif kind == "central_storage" and len(devices) > 1:
        why = ("XLA compiles each replica's step (evaluate's, predict's) for the replica's "
               "device, and the weights live on the parameter device")
    elif kind == "multi_worker_mirrored" and (len(devices) > 1
                                              or any("CPU" in d for d in devices)):
        why = ("TensorFlow's XLA cannot compile the all-reduce between workers on CPU devices, "
               "nor one step for several devices of a worker")
    elif kind == "parameter_server":
        why = ("each step runs on a worker as a tf.function that reads the weights from the ps "
               "tasks, and is not compiled with XLA")
    else:
        return None
    return TrainingError(
        f"{what}(): jit_compile=True (XLA) cannot be honoured under the {kind!r} strategy: "
        f"{why}. Compile the model with jit_compile=False (what Keras chooses by itself under "
        f"a strategy), or use XLA on one device.", hints=_JIT_HINT)


def _run_eagerly(model, strategy, kind, what):
    if kind != "parameter_server" or not getattr(model, "run_eagerly", False):
        return None
    return TrainingError(
        f"{what}(): run_eagerly=True cannot be honoured under the 'parameter_server' strategy: "
        f"the coordinator sends each step to a worker as a tf.function, which cannot run "
        f"eagerly. Compile the model with run_eagerly=False, or debug the step eagerly on one "
        f"device (the default strategy).",
        hints={"python": "E.g. model.compile(..., run_eagerly=False).",
               "r": "E.g. compile(..., run_eagerly = FALSE)."})


def _accumulation(model, strategy, kind, what):
    steps = getattr(getattr(model, "optimizer", None), "gradient_accumulation_steps", None)
    if not steps or kind != "parameter_server" or input_workers(strategy) < 2:
        return None
    return TrainingError(
        f"{what}(): gradient_accumulation_steps={steps} cannot be honoured under the "
        f"'parameter_server' strategy with {input_workers(strategy)} workers: they run their "
        f"steps asynchronously, so no step knows which others fall in its window of {steps}. "
        f"Use the 'multi_worker_mirrored' strategy, whose workers accumulate in lock step, or "
        f"a {steps} times larger batch size without accumulation.",
        hints={"python": f"E.g. keras.optimizers.SGD(...) with fit(..., batch_size={steps} * "
                         f"the batch size).",
               "r": f"E.g. optimizer_sgd() with fit(..., batch_size = {steps} * the batch "
                    f"size)."})
