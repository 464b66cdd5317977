"""A gradient's values, whether it is a dense tensor or an ``tf.IndexedSlices`` (an embedding's).

Shared by the all-reduces that rewrite gradients before they cross the network
(:mod:`~tfdistributed.strategies.compression`, :mod:`~tfdistributed.strategies.lowrank`,
:mod:`~tfdistributed.strategies.packing`); imports nothing of the package.
"""

from __future__ import annotations


def gradient_values(gradient):
    """A gradient's values: the tensor itself, or an ``IndexedSlices``' ``values``."""
    import tensorflow as tf

    return gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient


def map_values(gradient, op):
    """``op`` applied to a gradient's values (an ``IndexedSlices`` stays one, with its indices)."""
    import tensorflow as tf

    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(op(gradient.values), gradient.indices, gradient.dense_shape)
    return op(gradient)
