"""TensorFlow's pooling CPU allocator: why tfdistributed asks for it, and that it gets it.

Each check runs in a fresh Python process: the allocator is chosen once per process, when
TensorFlow first allocates memory.
"""

import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest

import tfdistributed as tfd
from tfdistributed.strategies import runtime as _runtime


def _pooled() -> bool:
    """Whether TensorFlow's pooling (BFC) allocator serves this process's tensors: it counts a
    one-element tensor as one chunk of at least 256 bytes, where the default allocator keeps no
    statistics or does not count it. Its source also runs in the probe and the task script."""
    import tensorflow as tf

    tf.ones([8])
    try:
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    except ValueError:  # the default allocator keeps no statistics
        return False
    x = tf.random.uniform([1])  # noqa: F841  (alive while counted)
    return tf.config.experimental.get_memory_info("CPU:0")["current"] - before >= 256


# Run in a fresh process after an optional tf.data GeneratorDataset (``from_generator``, and the
# multi-device iterator behind every tf.distribute input, build one):
#   raw:     bytes glibc maps anew for each of 4 malloc'd blocks of 31 MiB, made and freed in
#            turn (above any threshold TensorFlow's start-up leaves, below glibc's 32 MiB
#            ceiling for its adaptive threshold, so only a frozen threshold maps them every time);
#   mmapped: the same for 4 MiB tensors;
#   pooled:  ``_pooled()``.
MMAP_PROBE = """
import ctypes, json, os, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "tfdistributed":
    import tfdistributed
import tensorflow as tf
if sys.argv[2] == "generator":
    list(tf.data.Dataset.from_generator(lambda: iter([1]),
                                        output_signature=tf.TensorSpec([], tf.int32)))

def mapped_anew(make, free=lambda block: None):
    before = libc.mallinfo2().hblkhd
    block = make()
    grown = libc.mallinfo2().hblkhd - before
    free(block)
    return grown

""" + inspect.getsource(_pooled) + """
print(json.dumps({"raw": [mapped_anew(lambda: libc.malloc(31 << 20), libc.free) for _ in range(4)],
                  "mmapped": [mapped_anew(lambda: tf.random.uniform([1 << 20])) for _ in range(4)],
                  "env": os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"), "pooled": _pooled()}))
"""


def probe(tmp_path, importer, dataset, **env):
    path = tmp_path / "probe.py"
    path.write_text(MMAP_PROBE)
    full = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    full.update(env)
    out = subprocess.run([sys.executable, str(path), importer, dataset], env=full, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # fresh Pythons
def test_tensorflow_freezes_glibcs_mmap_threshold_after_a_generator_dataset(tmp_path):
    # The upstream behaviour the default works around (TensorFlow's ApplyPython311MemoryPatch,
    # on Python 3.11: a mallopt() that turns glibc's adaptive mmap threshold off). Which tensors
    # it then maps anew depends on where the threshold stood (machine-dependent: on one machine
    # every tensor of a step was, on another none of 4 MiB); a block above any such threshold
    # shows the freeze itself. If this starts failing, TensorFlow changed: revisit the default.
    if sys.version_info[:2] != (3, 11):
        pytest.skip("TensorFlow applies the mallopt patch on Python 3.11 only")
    from packaging.version import Version

    from tfdistributed.versions import installed

    if Version(installed("tensorflow")[1]) < Version("2.21"):
        # Its libraries name the patch from 2.21 on (2.18.1 and 2.20.0 have none: make compat).
        pytest.skip("TensorFlow applies the mallopt patch from 2.21 on")
    plain = probe(tmp_path, "tensorflow", "none")
    assert not plain["pooled"]
    assert plain["raw"][1:] == [0, 0, 0], "glibc reuses freed memory once it has seen it"
    frozen = probe(tmp_path, "tensorflow", "generator")
    assert all(grown >= 31 << 20 for grown in frozen["raw"]), \
        "after a GeneratorDataset every 31 MiB block is a fresh mmap (and munmap when freed)"


@pytest.mark.slow
def test_importing_tfdistributed_gives_the_pooling_allocator_that_reuses_memory(tmp_path):
    pooled = probe(tmp_path, "tfdistributed", "generator")
    assert pooled["env"] == "true"
    assert pooled["pooled"]
    assert pooled["mmapped"][1:] == [0, 0, 0]


@pytest.mark.slow
def test_the_users_choice_of_allocator_wins(tmp_path):
    kept = probe(tmp_path, "tfdistributed", "none", TF_CPU_ALLOCATOR_USE_BFC="false")
    assert kept["env"] == "false" and not kept["pooled"]


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

    return os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"), _pooled()


@pytest.mark.cluster
def test_launched_tasks_get_the_pooling_allocator_unless_env_says_otherwise(tmp_path):
    script = tmp_path / "task.py"
    # A script that imports TensorFlow and never tfdistributed still gets it from launch().
    script.write_text("import os\n" + inspect.getsource(_pooled) + textwrap.dedent("""
        print("pooled" if _pooled() else "default", os.environ["TF_CPU_ALLOCATOR_USE_BFC"])
    """))
    result = tfd.launch(str(script), workers=1, timeout=120, watch=tfd.Watch(echo=False))
    assert result.tasks[0].output[-1] == "pooled true"
    result = tfd.launch(_allocator_in_task, workers=1, timeout=120,
                        env={"TF_CPU_ALLOCATOR_USE_BFC": "false"}, watch=tfd.Watch(echo=False))
    assert result.values == [("false", False)]
