"""TF_CONFIG written by R users with jsonlite, read by the R package and by TensorFlow.

jsonlite::toJSON(auto_unbox = TRUE) writes a one-task job as a bare string and
jsonlite::toJSON() writes every scalar as a one-element array: TensorFlow crashes on both. After
the R package has read TF_CONFIG, TensorFlow (in this same process) must read the cluster and
task the R user meant.
"""

from __future__ import annotations

import json
import os

import pytest

# R list -> the cluster and task an R user means by it.
R_CONFIGS = {
    "one_worker": ('list(cluster = list(worker = "127.0.0.1:2222"), task = list(type = "worker", index = 0))',
                   {"worker": ["127.0.0.1:2222"]}, ("worker", 0)),
    "chief_ps": ('list(cluster = list(chief = "h1:2222", worker = c("h2:2222", "h3:2222"), ps = "h4:2222"), '
                 'task = list(type = "chief", index = 0L))',
                 {"chief": ["h1:2222"], "worker": ["h2:2222", "h3:2222"], "ps": ["h4:2222"]}, ("chief", 0)),
    "two_workers_second": ('list(cluster = list(worker = c("h1:2222", "h2:2222")), task = list(type = "worker", index = 1))',
                           {"worker": ["h1:2222", "h2:2222"]}, ("worker", 1)),
}


@pytest.mark.parametrize("auto_unbox", [True, False], ids=["auto_unbox", "boxed"])
@pytest.mark.parametrize("name", sorted(R_CONFIGS))
def test_jsonlite_tf_config_reaches_tensorflow_as_meant(r, clean_tf_config, name, auto_unbox):
    import tensorflow as tf

    code, cluster, (task_type, task_index) = R_CONFIGS[name]
    flag = "TRUE" if auto_unbox else "FALSE"
    r(f"Sys.setenv(TF_CONFIG = as.character(jsonlite::toJSON({code}, auto_unbox = {flag})))")
    assert r('get_tf_config()$task$type')[0] == task_type
    assert r('get_tf_config()$task$index')[0] == task_index
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert resolver.cluster_spec().as_dict() == cluster
    assert (resolver.task_type, resolver.task_id) == (task_type, task_index)
    # R sees the rewritten TF_CONFIG too (one process environment): its child processes get it.
    assert json.loads(r('Sys.getenv("TF_CONFIG")')[0]) == json.loads(os.environ["TF_CONFIG"])


def test_testthat_strings_are_what_jsonlite_writes(r):
    """test-cluster.R hard-codes jsonlite's output (no jsonlite dependency there): keep it true."""
    unboxed = r('as.character(jsonlite::toJSON(list(cluster = list(worker = "127.0.0.1:2222"), '
                'task = list(type = "worker", index = 0)), auto_unbox = TRUE))')[0]
    boxed = r('as.character(jsonlite::toJSON(list(cluster = list(worker = c("127.0.0.1:2222", "127.0.0.1:2223")), '
              'task = list(type = "worker", index = 1))))')[0]
    assert unboxed == '{"cluster":{"worker":"127.0.0.1:2222"},"task":{"type":"worker","index":0}}'
    assert boxed == ('{"cluster":{"worker":["127.0.0.1:2222","127.0.0.1:2223"]},'
                     '"task":{"type":["worker"],"index":[1]}}')
