"""Demo data: the handwritten digits scikit-learn ships, as arrays or as a TFDS dataset on disk.

Used by the demo (``make demo``), the tutorials and the tests; kept apart from
:mod:`tfdistributed.data`, which holds the input machinery every training call uses. Both
functions are also importable from the package itself (``tfdistributed.digits_arrays``,
``tfdistributed.write_digits_tfds``), as the R package's ``digits_data()`` and
``write_digits_tfds()`` use them.
"""

from __future__ import annotations

import numbers
import os

from .._args import as_int
from ..errors import ArgumentTypeError

#: The TFDS name :func:`write_digits_tfds` writes under (read it with ``load_tfds(DIGITS_NAME)``).
DIGITS_NAME = "sklearn_digits"


def digits_arrays(*, test_fraction=0.25, seed=0):
    """The 1797 handwritten digits scikit-learn ships, as train and test arrays.

    They ship with tfdistributed (``digits.npz`` beside this module, 49 kB): the 8x8 images as
    scikit-learn's ``load_digits()`` gives them (a copy of the test set of the UCI ML
    "Optical Recognition of Handwritten Digits" data, E. Alpaydin and C. Kaynak, 1998, CC BY 4.0),
    with scikit-learn's stratified split of a quarter for testing at seed 0, the split every
    number in tfdistributed's documentation and benchmarks was measured on. So neither the
    default split nor any other needs scikit-learn: when it is installed Keras imports it in every
    process (about 0.9 s of CPU each), and a job starts many processes.

    Other arguments make another stratified split with NumPy (each class contributes
    ``round(test_fraction * its size)`` test examples; the same arguments give the same split),
    not the one scikit-learn's ``train_test_split`` would make for that seed.

    Args:
        test_fraction: the share of the examples held out for testing, a number in (0, 1).
        seed: the split's seed, a whole number (the same seed gives the same split) or None (a
            new split each call).

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: float32 images of shape ``(n, 8, 8, 1)``
        scaled to [0, 1] and int32 labels 0-9.

    Raises:
        ArgumentTypeError: ``test_fraction`` is not a number in (0, 1), or ``seed`` not a whole
            number.

    Example:
        >>> (x, y), (x_test, y_test) = digits_arrays()
        >>> x.shape, x_test.shape
        ((1347, 8, 8, 1), (450, 8, 8, 1))
    """
    import numpy as np

    if (isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real)
            or not 0 < test_fraction < 1):
        raise ArgumentTypeError(
            f"`test_fraction` must be a number between 0 and 1 (the share held out for "
            f"testing), got {test_fraction!r}: pass e.g. 0.25.")
    if seed is not None:
        seed = as_int(seed, "seed", minimum=0)
    with np.load(_SHIPPED) as f:
        images, target, train, test = (f[k] for k in ("images", "target", "train", "test"))
    x = (images / 16.0).astype(np.float32)[..., None]
    y = target.astype(np.int32)
    if not (test_fraction == 0.25 and seed == 0):
        train, test = _stratified_split(y, test_fraction, seed)
    return (x[train], y[train]), (x[test], y[test])


#: The digits and their default split (see :func:`digits_arrays`).
_SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.npz")


def _stratified_split(y, test_fraction: float, seed):
    """Train and test indices, each class split in the same proportion, in a random order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    test = []
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        test.extend(members[:int(round(test_fraction * len(members)))])
    held_out = np.zeros(len(y), dtype=bool)
    held_out[test] = True
    if held_out.all() or not held_out.any():
        raise ArgumentTypeError(
            f"`test_fraction` = {test_fraction!r} leaves no example for "
            f"{'training' if held_out.all() else 'testing'}: pass a share nearer 0.25.")
    return rng.permutation(np.flatnonzero(~held_out)), rng.permutation(np.flatnonzero(held_out))


def _digits_builder_class():
    """A real TFDS builder for the digits (a class, so its info carries supervised keys)."""
    import numpy as np

    from .tfds import import_tfds

    tfds = import_tfds()

    class SklearnDigits(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version("1.0.0")

        def __init__(self, *, test_fraction, seed, **kwargs):
            self._arrays = digits_arrays(test_fraction=test_fraction, seed=seed)
            super().__init__(**kwargs)

        @property
        def name(self):
            return DIGITS_NAME

        def _info(self):
            return self.dataset_info_from_configs(
                description="scikit-learn's handwritten digits (8x8), written by "
                            "tfdistributed.write_digits_tfds for demos and tests.",
                features=tfds.features.FeaturesDict({
                    "image": tfds.features.Image(shape=(8, 8, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }),
                supervised_keys=("image", "label"),
            )

        def _split_generators(self, dl_manager):
            (x_train, y_train), (x_test, y_test) = self._arrays
            return {"train": self._generate_examples(x_train, y_train),
                    "test": self._generate_examples(x_test, y_test)}

        def _generate_examples(self, x, y):
            for i, (image, label) in enumerate(zip(x, y)):
                yield i, {"image": (image * 255).round().astype(np.uint8), "label": int(label)}

    return SklearnDigits


def write_digits_tfds(data_dir, *, num_files=1, test_fraction=0.25, seed=0):
    """Write scikit-learn's handwritten digits as a real TFDS dataset on disk.

    Splits ``train`` and ``test``, each in ``num_files`` TFRecord files (TFDS writes one file
    per split by default: the case where multi-worker FILE sharding fails); images are 8x8x1
    uint8 in 0-255, labels 0-9, supervised keys ``(image, label)``. Does nothing when the
    dataset is already there.

    Args:
        data_dir: the TFDS data directory to write into.
        num_files: TFRecord files per split (>= 1).
        test_fraction, seed: the split, as in :func:`digits_arrays`.

    Returns:
        ``data_dir``, to pass to :func:`tfdistributed.load_tfds`.

    Raises:
        ArgumentTypeError: ``num_files`` is not a whole number >= 1.

    Example:
        >>> data_dir = write_digits_tfds("/tmp/tfds", num_files=2)    # doctest: +SKIP
        >>> train = load_tfds("sklearn_digits", "train", data_dir)    # doctest: +SKIP
    """
    from .tfds import import_tfds

    tfds = import_tfds()

    num_files = as_int(num_files, "num_files", minimum=1)
    data_dir = os.fspath(data_dir)
    builder = _digits_builder_class()(data_dir=data_dir, test_fraction=test_fraction, seed=seed)
    if not builder.is_prepared():
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(num_shards=num_files))
    return data_dir
