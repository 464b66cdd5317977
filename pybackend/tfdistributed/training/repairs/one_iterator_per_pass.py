"""``one_iterator_per_pass``: under a strategy, Keras makes two distributed iterators a pass and
uses one.

Keras' epoch iterator ends every pass over known-length data (an epoch of ``fit``, each
validation, ``evaluate``, ``predict``) by making the iterator for the next pass at once. With
``steps_per_epoch`` unset (the usual case) the next pass makes its own when it begins, so that
iterator is never read; after the last pass there is no next one. Without a strategy an iterator
costs ~2 ms. Under a strategy it is a distributed iterator: on each worker one iterator per
replica's device, each tracing six functions of its own as it is made (its init, next and
finalize, local and remote). Under ``mirrored`` of 2 CPUs here that was ~0.24 s of CPU each, a
third of ``fit`` + ``evaluate``'s CPU on the small digits model (6.5 -> 4.6 s), for nothing;
over 40 epochs with validation, 0.56 of the wall time (bench/results-passes.md).

Here the iterator a pass ends with is made only when a pass reads it (``steps_per_epoch`` set:
the next pass continues the data). Kept exactly as Keras has it: the default strategy (no
scope: a Keras program that uses none is untouched), distributed input whose pipeline cannot be
read (``distribute_datasets_from_function``), and an input pipeline whose every new iterator
draws new seeds (``shuffle`` reshuffling each iteration, ``Dataset.random``...): there the
number of iterators made decides which order each epoch gets, and a seeded program must get
Keras' orders. Keras' own shuffling of arrays
(``fit(shuffle = TRUE)``) draws its orders inside the pipeline, not per iterator: same batches
with or without this repair.
"""

from __future__ import annotations

from .common import Repair, is_default, source

# The end of a pass over known-length data, in Keras' EpochIterator._enumerate_iterator.
_NEXT_PASS = ("if self._num_batches and self._steps_seen >= self._num_batches:\n"
              "                self._current_iterator = iter(self._get_iterator())")


def detect(trainer) -> bool:
    from keras.src.trainers.epoch_iterator import EpochIterator

    return _NEXT_PASS in source(EpochIterator._enumerate_iterator)


class _NotYetMade:
    """The iterator of the next pass, made when a pass reads it."""

    def __iter__(self):
        return self

    def __next__(self):  # a pass reads it only as one_iterator_per_pass's patch has made it
        raise RuntimeError("tfdistributed (one_iterator_per_pass): a pass read the next pass's "
                           "iterator before it was made; set TFDISTRIBUTED_DISABLE_COMPAT="
                           "one_iterator_per_pass and report this")


def draws_seeds_per_iterator(dataset) -> bool:
    """Whether a new iterator of ``dataset`` draws new seeds (a dataset in its pipeline has its
    own seeds: ``shuffle``, ``Dataset.random``, ``sample_from_datasets``...). A pipeline that
    cannot be read through counts as drawing them."""
    seen, todo = set(), [dataset]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if hasattr(node, "_seed2"):  # shuffle, random, global shuffle, snapshot's shuffle...
            return True
        try:
            todo.extend(node._inputs())
        except Exception:  # noqa: BLE001  (not a tf.data dataset we can read: keep Keras')
            return True
    return False


def _skips_next_pass(iterator) -> bool:
    decided = getattr(iterator, "_tfdistributed_lazy", None)
    if decided is None:
        original = getattr(iterator._distributed_dataset, "_original_dataset", None)
        decided = (not is_default(iterator._distribute_strategy) and original is not None
                   and not draws_seeds_per_iterator(original))
        iterator._tfdistributed_lazy = decided
    return decided


def apply(trainer) -> None:
    epoch_iterator = trainer.TFEpochIterator
    enumerate_passes = epoch_iterator._enumerate_iterator
    get_iterator = epoch_iterator._get_iterator

    def _get_iterator(self):
        # Called after the pass has yielded a step: the next pass's iterator (Keras' _NEXT_PASS).
        if getattr(self, "_tfdistributed_in_pass", False) and _skips_next_pass(self):
            return _NotYetMade()
        return get_iterator(self)

    def _enumerate_iterator(self):
        self._tfdistributed_in_pass = False
        try:
            for begin, end, iterator in enumerate_passes(self):
                if isinstance(iterator, _NotYetMade):  # the pass reads it: made now
                    iterator = self._current_iterator = iter(get_iterator(self))
                self._tfdistributed_in_pass = True
                yield begin, end, iterator
        finally:
            self._tfdistributed_in_pass = False

    _get_iterator.__tfdistributed_original__ = get_iterator
    _enumerate_iterator.__tfdistributed_original__ = enumerate_passes
    epoch_iterator._get_iterator = _get_iterator
    epoch_iterator._enumerate_iterator = _enumerate_iterator


REPAIR = Repair(name="one_iterator_per_pass", defect=__doc__, upstream=(), detect=detect,
                apply=apply)
