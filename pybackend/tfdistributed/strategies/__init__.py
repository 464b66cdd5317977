"""Strategies by name, and how their gradients cross the network.

==================  ============================================================================
module              what it holds
==================  ============================================================================
``make``            :func:`make_strategy`: every ``tf.distribute`` strategy by name, logical
                    CPU devices, what a strategy is (:func:`strategy_kind`, :func:`strategy_info`)
``compression``     the gradient all-reduce in 16 bits (fp16/bf16), marked on a strategy
``packing``         the gradient all-reduce in packs that overlap the backward pass
``runtime``         TensorFlow settings that must be made before it starts (its CPU allocator)
==================  ============================================================================

Layer: above ``cluster``. The all-reduce options (``compression``, ``packing``) are read by the
training layer's repairs, which carry out the gradient all-reduce; nothing here imports the
training layer.
"""

from .make import (STRATEGY_NAMES, canonical_name, configure_cpu_devices, input_workers,
                   make_strategy, strategy_info, strategy_kind)
from .compression import gradient_compression, set_gradient_compression
from .packing import set_bytes_per_pack

__all__ = ["STRATEGY_NAMES", "canonical_name", "configure_cpu_devices", "gradient_compression",
           "input_workers", "make_strategy", "set_bytes_per_pack", "set_gradient_compression",
           "strategy_info", "strategy_kind"]
