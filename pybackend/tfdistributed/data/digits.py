"""Demo data: scikit-learn's handwritten digits, as arrays or as a real TFDS dataset on disk.

Used by the demo (``make demo``), the tutorials and the tests; kept apart from
:mod:`tfdistributed.data`, which holds the input machinery every training call uses. Both
functions are also importable from the package itself (``tfdistributed.digits_arrays``,
``tfdistributed.write_digits_tfds``), as the R package's ``digits_data()`` and
``write_digits_tfds()`` use them.
"""

from __future__ import annotations

import contextlib
import os

from .._args import as_int

#: The TFDS name :func:`write_digits_tfds` writes under (read it with ``load_tfds(DIGITS_NAME)``).
DIGITS_NAME = "sklearn_digits"


def digits_arrays(*, test_fraction=0.25, seed=0):
    """scikit-learn's 1797 handwritten digits as train and test arrays.

    The split is kept in the user's cache directory (``$TFDISTRIBUTED_CACHE``, else
    ``~/.cache/tfdistributed``; ``TFDISTRIBUTED_CACHE=""`` keeps nothing), keyed by
    scikit-learn's version and the arguments, so that the tasks of a job do not each import
    scikit-learn again.

    Args:
        test_fraction: the share of the examples held out for testing.
        seed: the seed of the stratified split (the same seed gives the same split).

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: float32 images of shape ``(n, 8, 8, 1)``
        scaled to [0, 1] and int32 labels 0-9.

    Example:
        >>> (x, y), (x_test, y_test) = digits_arrays()    # doctest: +SKIP
        >>> x.shape, x_test.shape                         # doctest: +SKIP
        ((1347, 8, 8, 1), (450, 8, 8, 1))
    """
    import numpy as np

    # A seed of None is a new split each time: nothing to keep.
    plain = (int, float)
    cached = (_cache_file(test_fraction, seed) if isinstance(seed, int)
              and isinstance(test_fraction, plain) and not isinstance(test_fraction, bool)
              else None)
    if cached is not None:
        try:
            with np.load(cached) as f:
                arrays = tuple(f[k] for k in _KEYS)
            if arrays[0].shape[1:] == (8, 8, 1) and len(arrays[0]) + len(arrays[2]) == 1797:
                return (arrays[0], arrays[1]), (arrays[2], arrays[3])
        except (OSError, KeyError, ValueError):
            pass  # not there yet, or unreadable: split again and write it anew
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y)
    if cached is not None:
        _write_cache(cached, dict(zip(_KEYS, (x_train, y_train, x_test, y_test))))
    return (x_train, y_train), (x_test, y_test)


_KEYS = ("x_train", "y_train", "x_test", "y_test")


def _cache_file(test_fraction, seed: int):
    """Where the split is kept between processes: importing scikit-learn costs each process
    of a job about 1.4 s of CPU (a third of importing Keras), paid again by every task of every
    attempt. Keyed by scikit-learn's version and the split's arguments, in
    ``$TFDISTRIBUTED_CACHE`` or the user's cache directory; ``TFDISTRIBUTED_CACHE=""`` turns it
    off. None when off or scikit-learn's version cannot be told."""
    from importlib import metadata

    root = os.environ.get("TFDISTRIBUTED_CACHE")
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "tfdistributed")
    if not root:
        return None
    try:
        version = metadata.version("scikit-learn")
    except metadata.PackageNotFoundError:
        return None
    return os.path.join(root, f"digits-sklearn{version}-test{test_fraction!r}-seed{seed}.npz")


def _write_cache(path: str, arrays: dict) -> None:
    """Written aside and renamed into place (many tasks may start at once); a directory that
    cannot be written only means no cache."""
    import tempfile

    import numpy as np

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, aside = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npz.tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(aside, path)
    except OSError:
        with contextlib.suppress(NameError, OSError):
            os.unlink(aside)


def _digits_builder_class():
    """A real TFDS builder for the digits (a class, so its info carries supervised keys)."""
    import numpy as np
    import tensorflow_datasets as tfds

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
    import tensorflow_datasets as tfds

    num_files = as_int(num_files, "num_files", minimum=1)
    data_dir = os.fspath(data_dir)
    builder = _digits_builder_class()(data_dir=data_dir, test_fraction=test_fraction, seed=seed)
    if not builder.is_prepared():
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(num_shards=num_files))
    return data_dir
