"""What exists only for R: the R package's calls that Python users never need.

==================  ============================================================================
module              what it holds
==================  ============================================================================
``values``          R values in Keras' own calls made from R: one table of rules
                    (:data:`~.values.R_VALUE_RULES`) and the calls it covers
``feed``            :class:`~.feed.BatchFeed`: batches an R function produces, served from R's
                    main thread into a bounded queue that training reads
``served``          ``fit``/``evaluate`` started on a training thread while R serves the feed
``callers``         TensorFlow called straight from R: deprecation notices that look for a
                    Python caller (installed by the R package when TensorFlow loads)
==================  ============================================================================

Layer: the top (beside ``engines``): it may import every folder below; nothing in the package
imports it. The R package reaches these as ``backend()$r$...``; datasets whose callbacks call R
are found by :func:`find_host_generators` (from ``data.rcallbacks``, where every training call
checks them).
"""

from . import callers, feed, served, values
from ..data.rcallbacks import find_host_generators

__all__ = ["callers", "feed", "find_host_generators", "served", "values"]
