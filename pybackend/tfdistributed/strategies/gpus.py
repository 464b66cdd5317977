"""What a strategy does on GPUs: memory growth, and NCCL for a multi-worker all-reduce.

Both are decided from the list of this process' physical GPUs
(``tf.config.list_physical_devices("GPU")``, before TensorFlow starts them), by functions of
that list alone (:func:`growth_devices`, :func:`with_nccl`), which :func:`make_strategy
<tfdistributed.strategies.make.make_strategy>` calls with the real list first thing:

- **Memory growth**, on for every GPU unless ``TF_FORCE_GPU_ALLOW_GROWTH=false``: TensorFlow
  otherwise takes nearly all of a GPU's memory as it starts, so two tasks that share a GPU
  (the local engine's default when there are fewer GPUs than tasks,
  :mod:`tfdistributed.engines.gpus`) fail, and a GPU's use cannot be read from
  ``nvidia-smi``. The opt-out is TensorFlow's own variable: whichever value it has,
  TensorFlow's GPU allocator follows it over any ``set_memory_growth`` call, so with ``false``
  we make none. A GPU with virtual devices (``tf.config.set_logical_device_configuration``) is
  left as configured: its memory limits rule. If TensorFlow started its GPUs before the
  strategy was made, growth can no longer change: a warning says so and how to fix it.
- **NCCL**, for ``multi_worker_mirrored`` on a task with GPUs when ``communication_options``
  chose no implementation (TensorFlow's ``AUTO``): ``CommunicationOptions(implementation=NCCL)``,
  NVIDIA's library for GPU all-reduce (TensorFlow's docs: "NCCL is generally more performant
  for GPU, but doesn't work for CPU"; TensorFlow falls back to its ring for what NCCL does not
  do). A task without GPUs keeps TensorFlow's default; an implementation the caller chose is
  kept, and so are the other options (``bytes_per_pack``, ``timeout_seconds``).

No GPU run has been measured yet: the machines this project is tested on have none, so what is
checked is what these functions decide from a faked list of devices.
"""

from __future__ import annotations

import os
import warnings

from ..errors import StrategyError

__all__ = ["GROWTH_ENV", "growth_devices", "memory_growth_wanted", "settle_gpus", "with_nccl"]

#: TensorFlow's own switch for memory growth (``true``/``false``), which wins over ours.
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"


def memory_growth_wanted(environ=None) -> bool:
    """Whether memory growth is wanted: yes unless ``TF_FORCE_GPU_ALLOW_GROWTH=false``.

    Raises:
        StrategyError: the variable is set to something TensorFlow would not read.
    """
    environ = os.environ if environ is None else environ
    value = environ.get(GROWTH_ENV)
    if value is None:
        return True
    if value not in ("true", "false"):
        raise StrategyError(f"{GROWTH_ENV} must be 'true' or 'false' (TensorFlow reads no other "
                            f"value), got {value!r}: unset it for memory growth on every GPU, "
                            f"or set it to false to turn it off.")
    return value == "true"


def growth_devices(gpus, environ=None) -> list:
    """The GPUs of ``gpus`` (physical devices) to turn memory growth on for: all of them, or
    none when it is not wanted (:func:`memory_growth_wanted`) or there are none."""
    gpus = list(gpus)
    return gpus if gpus and memory_growth_wanted(environ) else []


def settle_gpus(gpus=None, config=None, environ=None) -> list:
    """Memory growth on for this process' GPUs (``gpus``: the physical devices, by default
    TensorFlow's list), through ``config`` (default ``tf.config.experimental``); returns the
    GPUs, for :func:`with_nccl`. Call before TensorFlow starts its devices."""
    if gpus is None or config is None:
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU") if gpus is None else gpus
        config = tf.config.experimental if config is None else config
    gpus = list(gpus)
    late = []
    for gpu in growth_devices(gpus, environ):
        try:
            config.set_memory_growth(gpu, True)
        except ValueError:
            continue  # virtual devices configured on it: their memory limits rule
        except RuntimeError:
            # TensorFlow started its GPUs already: growth is fixed as it was then.
            if not config.get_memory_growth(gpu):
                late.append(gpu.name)
    if late:
        warnings.warn(
            f"TensorFlow started its GPUs ({', '.join(late)}) before the strategy was made, "
            f"without memory growth: each takes nearly all of its GPU's memory, and a task "
            f"sharing it will fail. Make the strategy first in the script, or set "
            f"{GROWTH_ENV}=true before TensorFlow starts.", UserWarning, stacklevel=3)
    return gpus


def with_nccl(gpus, options=None):
    """``communication_options`` for ``multi_worker_mirrored`` on a task with ``gpus``:
    ``options`` (a ``tf.distribute.experimental.CommunicationOptions`` or None) with NCCL as
    its implementation when it chose none (``AUTO``) and there are GPUs; else ``options`` as
    given.

    Example:
        >>> with_nccl([]) is None
        True
    """
    if not list(gpus):
        return options
    import tensorflow as tf

    implementation = tf.distribute.experimental.CommunicationImplementation
    if options is not None and options.implementation != implementation.AUTO:
        return options
    nccl = tf.distribute.experimental.CommunicationOptions(implementation=implementation.NCCL)
    return nccl if options is None else options.merge(nccl)
