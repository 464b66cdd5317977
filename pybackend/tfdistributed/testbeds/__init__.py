"""Test beds: real clusters on one machine, for the tests, the benchmarks and the tutorials.

==================  ============================================================================
module              what it holds
==================  ============================================================================
``hostbed``         hosts as network namespaces on a bridge, with optional bandwidth caps
                    (root only; ``python -m tfdistributed.testbeds.hostbed up 2 1gbit``)
``slurm``           :class:`~.slurm.LocalSlurm`: a real SLURM cluster of local daemons, on this
                    machine or on the hosts of a host bed
==================  ============================================================================

Nothing in training uses them; they ship with the package because the tutorials and
benchmarks run on them. Layer: imports ``errors`` and ``cluster`` only.
"""

from . import hostbed, slurm

__all__ = ["hostbed", "slurm"]
