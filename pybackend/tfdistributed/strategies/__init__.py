"""Strategies by name, and how their gradients cross the network.

==================  ============================================================================
module              what it holds
==================  ============================================================================
``make``            :func:`make_strategy`: every ``tf.distribute`` strategy by name, logical
                    CPU devices, what a strategy is (:func:`strategy_kind`, :func:`strategy_info`)
``compression``     the gradient all-reduce compressed (fp16/bf16, or PowerSGD), marked on a
                    strategy
``lowrank``         low-rank gradients (PowerSGD): options, state, the two all-reduces
``packing``         the gradient all-reduce in packs that overlap the backward pass
``gradients``       a gradient's values, dense or ``IndexedSlices`` (shared by the three above)
``runtime``         TensorFlow settings that must be made before it starts (its CPU allocator)
``gpus``            on GPUs: memory growth, and NCCL for the multi-worker all-reduce, decided
                    from the list of GPUs
==================  ============================================================================

Layer: above ``cluster``. The all-reduce options (``compression``, ``packing``) are read by the
training layer's repairs, which carry out the gradient all-reduce (PowerSGD's with
``lowrank``'s functions, its state made with the optimizer's); nothing here imports the
training layer.
"""

from .make import (STRATEGY_NAMES, canonical_name, configure_cpu_devices, input_workers,
                   make_strategy, strategy_info, strategy_kind)
from .compression import gradient_compression, powersgd_options, set_gradient_compression
from .packing import set_bytes_per_pack
from .lowrank import PowerSGD, powersgd

__all__ = ["PowerSGD", "STRATEGY_NAMES", "canonical_name", "configure_cpu_devices",
           "gradient_compression", "input_workers", "make_strategy", "powersgd",
           "powersgd_options", "set_bytes_per_pack", "set_gradient_compression",
           "strategy_info", "strategy_kind"]
