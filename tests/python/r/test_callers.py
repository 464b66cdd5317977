"""TensorFlow called straight from R, as the R tutorials call it (tfdistributed.r.callers):
deprecation notices that look for a Python caller, and ParameterServerStrategy() with no
argument. Its own process: the mends change TensorFlow for the process that installs them, and
the defects are shown first, before they are mended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import _thread, json, os, sys, time
    import tensorflow as tf
    from tensorflow.python.util import deprecation
    from tfdistributed.r import callers

    def called_with_no_python_frame(name):
        # A thread's target is called from C, as reticulate calls Python from R.
        calls = []
        notice = deprecation.deprecated(None, "use another")(lambda: calls.append(1))
        notice.__name__ = name
        _thread.start_new_thread(notice, ())
        time.sleep(0.5)
        return calls == [1]

    out = {"notice_before": called_with_no_python_frame("before")}
    try:
        tf.distribute.experimental.ParameterServerStrategy()
    except TypeError as e:
        out["ps_before"] = str(e)
    callers.install()
    callers.install()  # idempotent
    out["notice_after"] = called_with_no_python_frame("after")
    local = tf.distribute.experimental.ParameterServerStrategy()
    out["ps_local"] = type(local).__name__
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["127.0.0.1:1"],
                                                      "ps": ["127.0.0.1:2"]},
                                          "task": {"type": "worker", "index": 0}})
    try:
        tf.distribute.experimental.ParameterServerStrategy()
    except Exception as e:
        out["ps_worker"] = [type(e).__name__, str(e)]
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_tensorflow_called_from_r_as_the_tutorials_call_it():
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=120, env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # Without the mend the notice fails before the call it announces ('NoneType' ... 'f_code').
    assert out["notice_before"] is False and "f_code" in proc.stderr
    assert out["notice_after"] is True
    assert "From R (through reticulate)" in proc.stderr
    assert "missing 1 required positional argument: 'cluster_resolver'" in out["ps_before"]
    # No cluster: what TensorFlow 2.0 gave, and a notice saying so and how to get one.
    assert out["ps_local"] == "CentralStorageStrategy"
    assert "as CentralStorageStrategy, as TensorFlow 2.0 did" in proc.stderr
    assert 'launch_cluster("train.R", scaling(workers = 2, ps = 1, chief = TRUE))' in proc.stderr
    # A cluster, in a worker task: our error, not TensorFlow's.
    assert out["ps_worker"][0] == "StrategyError"
    assert "only the chief creates the strategy" in out["ps_worker"][1]
