"""Keras 3 training under every strategy.

==================  ============================================================================
module              what it holds
==================  ============================================================================
``trainer``         :func:`fit`, :func:`evaluate` and :func:`predict` for every strategy
``routing``         plain ``model.fit``/``evaluate``/``predict`` routed (parameter-server
                    strategies) and sent through the shard pre-flight (multi-worker jobs)
``seeds``           one shuffle order on every worker (``fit``'s seed, Keras' own ``fit`` on
                    arrays), checked across the workers
``options``         Keras' compile and optimizer options that a strategy cannot honour, refused
                    by name before training
``replica_batch``   ``fit(max_replica_batch=)``: a global batch kept on fewer replicas by
                    accumulating gradients instead of growing each replica's batch
``compat``          applies, reports and switches off the Keras repairs
``repairs/``        one module per Keras 3 x ``tf.distribute`` defect repaired at its root
``ps``              parameter-server training on ``ClusterCoordinator``
``loops``           custom training loops with the loss scaled by the global batch
``checkpoints``     saving that is safe with many workers; step-level backups and resume
==================  ============================================================================

Layer: above ``strategies``, ``data`` and ``watch`` (each ``fit`` reports its steps to the
launcher through ``watch``); ``versions``' import hook puts the repairs in place once Keras is
imported. Nothing below imports it; ``engines`` never does either (a launched
task trains in its own process).
"""

from .trainer import (STRATEGY_AWARE_FIT, evaluate, evaluate_from_keras, fit, fit_from_keras,
                      model_strategy, predict, predict_from_keras)

__all__ = ["STRATEGY_AWARE_FIT", "evaluate", "evaluate_from_keras", "fit", "fit_from_keras",
           "model_strategy", "predict", "predict_from_keras"]
