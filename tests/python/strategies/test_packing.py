"""Gradient packs (tfdistributed.strategies.packing): the argument, its errors, and the inter-op threads
that let packs overlap the backward pass. That packs reach Keras' gradients and train as one
all-reduce is a 2-worker job in test_multiworker.py; what they gain is bench group 12."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import tfdistributed as tfd
from tfdistributed.strategies import packing


@pytest.mark.parametrize("value,message", [
    (4e6, r"`bytes_per_pack` must be an integer, got float 4000000.0: pass 4000000 as an "
          r"integer"),
    (-1, r"`bytes_per_pack` must be >= 0, got -1"),
    ("4MB", r"`bytes_per_pack` must be an integer, got str"),
])
def test_a_bad_bytes_per_pack_names_the_argument(value, message):
    with pytest.raises(tfd.ArgumentTypeError, match=message):
        tfd.make_strategy("multi_worker_mirrored", bytes_per_pack=value)


@pytest.mark.parametrize("name", ["default", "mirrored", "one_device", "central_storage"])
def test_bytes_per_pack_without_a_cross_worker_all_reduce_is_refused(name):
    with pytest.raises(tfd.StrategyError, match=rf"`bytes_per_pack` applies to "
                                                rf"'multi_worker_mirrored'.*'{name}' has none"):
        tfd.make_strategy(name, bytes_per_pack=1024)


def test_auto_on_one_machine_ignores_bytes_per_pack_and_zero_is_one_all_reduce():
    # The same script runs on a laptop (nothing to pack) and on a cluster.
    assert tfd.strategy_info(tfd.make_strategy("auto", bytes_per_pack=4_000_000))["kind"] == \
        "default"
    tfd.make_strategy("default", bytes_per_pack=0)


@pytest.mark.parametrize("total,expected", [
    (139_304, 0),          # the bench CNN: one all-reduce, as before
    (7_999_999, 0),
    (8_000_000, 4_000_000),  # 2 packs
    (10_629_160, 4_000_000),
    (102_228_128, 25_557_032),  # a ResNet-50's 102 MB: 4 packs, as DDP's 25 MB buckets
])
def test_auto_packs_only_big_gradients_in_about_four_packs(total, expected):
    assert packing.auto_pack_bytes(total) == expected


def test_the_pack_size_is_given_once():
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions
    merged = packing.communication_options(1024, options(timeout_seconds=30.0))
    assert (merged.bytes_per_pack, merged.timeout_seconds) == (1024, 30.0)
    assert packing.communication_options(1024, options(bytes_per_pack=1024)).bytes_per_pack == 1024
    assert packing.communication_options(None, None) is None
    with pytest.raises(tfd.ArgumentTypeError, match=r"`bytes_per_pack=1024` and "
                                                    r"`communication_options` \(bytes_per_pack=2048"
                                                    r"\) disagree"):
        packing.communication_options(1024, options(bytes_per_pack=2048))


def test_a_multi_worker_strategy_says_its_pack_size_and_tensorflows_class_takes_one():
    import tensorflow as tf

    strategy = tfd.make_strategy("multi_worker_mirrored", bytes_per_pack=4_000_000)
    assert tfd.strategy_info(strategy)["bytes_per_pack"] == 4_000_000
    big = [tf.zeros([3_000_000])]  # 12 MB: "auto" would pack it by 4 MB too, a set size wins
    assert packing.gradient_options(strategy, big).bytes_per_pack == 4_000_000
    auto = tfd.make_strategy("multi_worker_mirrored")
    assert tfd.strategy_info(auto)["bytes_per_pack"] is None  # "auto"
    assert packing.gradient_options(auto, big).bytes_per_pack == 4_000_000
    assert packing.gradient_options(auto, [tf.zeros([1000])]).bytes_per_pack == 0
    assert packing.gradient_options(auto, big, auto=False).bytes_per_pack == 0
    own = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=1_000_000, timeout_seconds=60.0))
    options = packing.gradient_options(own, big)
    assert (options.bytes_per_pack, options.timeout_seconds) == (1_000_000, 60.0)
    one = tfd.set_bytes_per_pack(own, 0)
    assert packing.gradient_options(one, big).bytes_per_pack == 0
    assert tfd.strategy_info(one)["bytes_per_pack"] == 0
    assert packing.gradient_options(tfd.make_strategy("mirrored"), big) is None


THREADS = """
import json, os, warnings
from tfdistributed.strategies import packing
import tensorflow as tf
seen = {}
cores = sorted(os.sched_getaffinity(0))
if len(cores) > 1:  # TensorFlow's own choice is a thread per usable core: nothing to do
    seen["several cores"] = packing.threads_for_overlap(4_000_000)
os.environ["TF_NUM_INTEROP_THREADS"] = "1"  # the user's choice is kept, with a warning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    seen["user set 1"] = packing.threads_for_overlap(4_000_000)
    seen["user set 1, auto"] = packing.threads_for_overlap(None)  # not asked for: no warning
seen["warnings"] = [str(w.message) for w in caught]
del os.environ["TF_NUM_INTEROP_THREADS"]
seen["no packs"] = packing.threads_for_overlap(0)
os.sched_setaffinity(0, cores[:1])  # one core: TensorFlow would pick 1 thread by itself
seen["one core"] = packing.threads_for_overlap(None)
seen["threads"] = tf.config.threading.get_inter_op_parallelism_threads()
tf.constant(1.0) + 1.0  # TensorFlow starts with them
print(json.dumps(seen))
"""


@pytest.mark.slow  # a fresh TensorFlow process: make test
def test_packs_get_a_second_inter_op_thread_to_overlap_the_backward_pass():
    # Measured (bench group 12): with one inter-op thread TensorFlow computes every gradient
    # before it sends the first pack. A fresh process: threads are fixed when TensorFlow starts.
    env = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTEROP_THREADS"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(THREADS)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    seen = json.loads(done.stdout.strip().splitlines()[-1])
    if len(os.sched_getaffinity(0)) > 1:
        assert seen.pop("several cores") is None
    assert seen["user set 1"] == seen["user set 1, auto"] == "kept"
    [warning] = seen["warnings"]
    assert "one inter-op thread (TF_NUM_INTEROP_THREADS=1)" in warning
    assert "the packs cannot overlap the backward pass" in warning
    assert seen["no packs"] is None
    assert seen["one core"] == "raised" and seen["threads"] == 2
