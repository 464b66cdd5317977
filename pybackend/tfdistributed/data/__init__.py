"""What training reads: the input plan, shard policies and their pre-flight, data on disk.

==================  ============================================================================
module              what it holds
==================  ============================================================================
``plan``            :func:`plan_input`: the input plan every ``fit``/``evaluate``/``predict``
                    follows under every strategy (:class:`InputPlan`)
``arrays``          arrays turned into ``tf.data`` pipelines of global batches
``sharding``        shard policies, and the pre-flight every multi-worker entry point runs
``shards``          tables written as sharded TFRecord/CSV files and read back
``tfds``            TFDS datasets read with tensorflow-datasets' own loader
``digits``          the demo data: scikit-learn's digits as arrays and as a TFDS dataset
``rcallbacks``      datasets whose Python callbacks call R, refused where they would hang
==================  ============================================================================

Layer: above ``cluster``, beside ``strategies`` (it needs no strategy object: callers say how
many replicas and workers there are). Imports ``errors`` and ``_args`` only.
"""

from .arrays import (DEFAULT_BATCH_SIZE, as_arrays, class_weight_to_sample_weight,
                     global_batch_size, make_dataset, num_examples, split_validation)
from .plan import InputPlan, check_dataset, plan_input
from .tfds import load_tfds

__all__ = ["DEFAULT_BATCH_SIZE", "InputPlan", "as_arrays", "check_dataset",
           "class_weight_to_sample_weight", "global_batch_size", "load_tfds", "make_dataset",
           "num_examples", "plan_input", "split_validation"]
