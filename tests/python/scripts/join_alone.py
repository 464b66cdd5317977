"""A task that builds TensorFlow's own MultiWorkerMirroredStrategy and says how it ended.

Run by tests/python/cluster/test_join.py as the one started task of a cluster whose other tasks never
come: the join timeout (TFDISTRIBUTED_JOIN_TIMEOUT, set by launch(restarts=Restarts(join_timeout=))) must end it
with tfdistributed's JoinTimeoutError, after lines naming the missing task.
"""
import tensorflow as tf

import tfdistributed  # noqa: F401  (the join watch, installed on import)

tf.distribute.MultiWorkerMirroredStrategy()
print("joined", flush=True)
