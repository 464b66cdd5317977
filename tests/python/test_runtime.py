"""TensorFlow's pooling CPU allocator: why tfdistributed asks for it, and that it gets it.

Each check runs in a fresh Python process: the allocator is chosen once per process, when
TensorFlow first allocates memory.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import tfdistributed as tfd
from tfdistributed import _runtime

# How many bytes of a 4 MiB tensor glibc hands out as a fresh mmap, in 4 tensors made and freed
# in turn, after an optional tf.data GeneratorDataset (``from_generator``, and the multi-device
# iterator behind every tf.distribute input, build one).
MMAP_PROBE = """
import ctypes, json, os, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tfdistributed":
    import tfdistributed
import tensorflow as tf
if sys.argv[2] == "generator":
    list(tf.data.Dataset.from_generator(lambda: iter([1]),
                                        output_signature=tf.TensorSpec([], tf.int32)))

def mmapped_bytes_of_a_new_tensor():
    before = libc.mallinfo2().hblkhd
    x = tf.random.uniform([1 << 20])
    grown = libc.mallinfo2().hblkhd - before
    del x
    return grown

try:
    stats = tf.config.experimental.get_memory_info("CPU:0")
except ValueError:  # only pooling allocators keep statistics
    stats = None
print(json.dumps({"mmapped": [mmapped_bytes_of_a_new_tensor() for _ in range(4)],
                  "env": os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"), "pool_stats": stats}))
"""


def probe(tmp_path, importer, dataset, **env):
    path = tmp_path / "probe.py"
    path.write_text(MMAP_PROBE)
    full = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    full.update(env)
    out = subprocess.run([sys.executable, str(path), importer, dataset], env=full, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_tensorflow_default_allocator_maps_every_large_tensor_anew_after_a_generator_dataset(
        tmp_path):
    # The upstream behaviour the default works around (TensorFlow's ApplyPython311MemoryPatch,
    # on Python 3.11). If this starts failing, TensorFlow changed and the default can be revisited.
    if sys.version_info[:2] != (3, 11):
        pytest.skip("TensorFlow applies the mallopt patch on Python 3.11 only")
    plain = probe(tmp_path, "tensorflow", "none")
    assert plain["pool_stats"] is None
    assert plain["mmapped"][1:] == [0, 0, 0], "glibc reuses freed memory once it has seen it"
    frozen = probe(tmp_path, "tensorflow", "generator")
    assert all(grown >= 4 << 20 for grown in frozen["mmapped"]), \
        "after a GeneratorDataset every 4 MiB tensor is a fresh mmap (and munmap when freed)"


def test_importing_tfdistributed_gives_the_pooling_allocator_that_reuses_memory(tmp_path):
    pooled = probe(tmp_path, "tfdistributed", "generator")
    assert pooled["env"] == "true"
    assert pooled["pool_stats"] is not None  # only a pooling allocator keeps statistics
    assert pooled["mmapped"][1:] == [0, 0, 0]


def test_the_users_choice_of_allocator_wins(tmp_path):
    kept = probe(tmp_path, "tfdistributed", "none", TF_CPU_ALLOCATOR_USE_BFC="false")
    assert kept["env"] == "false" and kept["pool_stats"] is None


def test_the_pool_limit_is_never_below_tensorflows_or_the_machines(monkeypatch):
    env = {}
    monkeypatch.setattr(_runtime, "_machine_memory_mb", lambda: 3 << 20)  # a 3 TB machine
    assert _runtime.prefer_pooled_cpu_allocator(env)
    assert env == {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPU_BFC_MEM_LIMIT_IN_MB": str(3 << 20)}
    env = {}
    monkeypatch.setattr(_runtime, "_machine_memory_mb", lambda: 24 << 10)
    _runtime.prefer_pooled_cpu_allocator(env)
    assert env == {"TF_CPU_ALLOCATOR_USE_BFC": "true"}  # TensorFlow's 64 GB limit stands
    env = {"TF_CPU_ALLOCATOR_USE_BFC": "0"}
    assert not _runtime.prefer_pooled_cpu_allocator(env)
    assert env == {"TF_CPU_ALLOCATOR_USE_BFC": "0"}


def _allocator_in_task():
    import os

    import tensorflow as tf

    tf.ones([256, 256])
    try:
        tf.config.experimental.get_memory_info("CPU:0")
        pooled = True
    except ValueError:
        pooled = False
    return os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"), pooled


@pytest.mark.cluster
def test_launched_tasks_get_the_pooling_allocator_unless_env_says_otherwise(tmp_path):
    script = tmp_path / "task.py"
    # A script that imports TensorFlow and never tfdistributed still gets it from launch().
    script.write_text(textwrap.dedent("""
        import os
        import tensorflow as tf
        tf.ones([256, 256])
        try:
            tf.config.experimental.get_memory_info("CPU:0")
            print("pooled", os.environ["TF_CPU_ALLOCATOR_USE_BFC"])
        except ValueError:
            print("default", os.environ["TF_CPU_ALLOCATOR_USE_BFC"])
    """))
    result = tfd.launch(str(script), workers=1, timeout=120, echo=False)
    assert result.tasks[0].output[-1] == "pooled true"
    result = tfd.launch(_allocator_in_task, workers=1, timeout=120, echo=False,
                        env={"TF_CPU_ALLOCATOR_USE_BFC": "false"})
    assert result.values == [("false", False)]
