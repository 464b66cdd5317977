"""TensorFlow runtime settings that must be in place before TensorFlow allocates memory.

One today: TensorFlow's pooling (BFC) allocator for CPU tensors, ``TF_CPU_ALLOCATOR_USE_BFC``.

Why. The kernel of TensorFlow's ``GeneratorDataset`` (built by ``Dataset.from_generator`` and by
the multi-device iterator that every ``tf.distribute`` strategy's input goes through) calls
``mallopt`` on Python 3.11 (TensorFlow's ``ApplyPython311MemoryPatch``; TensorFlow 2.21 logs
"M_TRIM_THRESHOLD=128 kb was set"). That turns glibc's adaptive mmap threshold off where it
stands: from then on every buffer above it is a fresh ``mmap`` when allocated and a ``munmap``
when freed. Where it stands depends on what ran before (on one machine it was low enough for
every tensor of a training step, on another no 4 MiB tensor was affected); where it is low, a
step page-faults its activations and gradients in again at every step. On a 2-worker
CNN job (one core per worker) the compute thread spent as much time in the kernel as in its own
code (strace: ~180 ``munmap`` per second) and a step took twice what it takes in one process.
TensorFlow's BFC allocator keeps the memory it got and reuses it, so the frozen threshold no
longer matters; with it the same job's step took about half as long, and one process, which
does not go through ``GeneratorDataset``, is unchanged (the numbers: ``bench/results.md``,
section 11).

The allocator is chosen when TensorFlow first allocates CPU memory, so this runs when
``tfdistributed`` is imported (TensorFlow is imported lazily, later) and for every task
:func:`tfdistributed.launch` starts. A value the user set wins: ``TF_CPU_ALLOCATOR_USE_BFC=false``
keeps TensorFlow's default allocator. The pool grows as needed up to
``TF_CPU_BFC_MEM_LIMIT_IN_MB`` (TensorFlow's default: 64 GB), which we raise to the machine's
memory where that is larger, so no job that fitted before fails now; memory the pool took is
kept for reuse rather than given back to the system.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

POOLED_CPU_ALLOCATOR = "TF_CPU_ALLOCATOR_USE_BFC"
POOL_LIMIT_MB = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
TENSORFLOW_DEFAULT_LIMIT_MB = 1 << 16


def _machine_memory_mb() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return None


def prefer_pooled_cpu_allocator(environ: MutableMapping[str, str] | None = None) -> bool:
    """Ask TensorFlow for its pooling CPU allocator, unless the environment already chose.

    Args:
        environ: the environment to change (default ``os.environ``), e.g. a task's environment
            before it starts.

    Returns:
        Whether the pooling allocator is asked for (``False`` if the user turned it off).
    """
    environ = os.environ if environ is None else environ
    if POOLED_CPU_ALLOCATOR in environ:
        return environ[POOLED_CPU_ALLOCATOR].strip().lower() in ("1", "true")
    environ[POOLED_CPU_ALLOCATOR] = "true"
    memory = _machine_memory_mb()
    if memory and memory > TENSORFLOW_DEFAULT_LIMIT_MB:
        environ.setdefault(POOL_LIMIT_MB, str(memory))
    return True
