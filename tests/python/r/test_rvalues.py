"""The table of rules for R values in Keras' calls, on the values reticulate hands Python
(R doubles as floats, R vectors as lists, NA as nan or INT_MIN). The R side of these rules,
against Keras' own results, is tests/r/test_r_keras_calls.py."""

from __future__ import annotations

import pytest

import tfdistributed as tfd
from tfdistributed.r import values as rvalues

CONVERTED = [
    ("units", 64.0, 64),
    ("kernel_size", 3.0, 3),
    ("kernel_size", [3.0, 5.0], (3, 5)),
    ("padding", [[1.0, 1.0], [2.0, 0.0]], ((1, 1), (2, 0))),
    ("shape", 8.0, (8,)),
    ("shape", [float("nan"), 4.0], (None, 4)),
    ("shape", [rvalues.R_NA_INTEGER, 4], (None, 4)),
    ("shape", [None, 4.0], (None, 4)),
    ("target_shape", [4.0, -1.0], (4, -1)),
    ("axis", -1.0, -1),
    ("axis", [1.0, 2.0], [1, 2]),
    ("metrics", "accuracy", ["accuracy"]),
    ("loss_weights", 0.5, [0.5]),
    ("seed", -7.0, -7),
    ("save_freq", 100.0, 100),
    ("epochs", 3.0, 3),
    # tf.data's own methods
    ("buffer_size", 2000.0, 2000),
    ("count", -1.0, -1),
    ("num_shards", 4.0, 4),
]
UNTOUCHED = [("padding", "same"), ("save_freq", "epoch"), ("verbose", "auto"), ("verbose", True),
             ("metrics", ["accuracy"]), ("metrics", {"out": "mae"}), ("rate", 0.5),
             ("learning_rate", 1.0), ("units", None), ("shape", (8, 8, 1))]


@pytest.mark.parametrize("name, value, expected", CONVERTED)
def test_r_values_become_what_keras_takes(name, value, expected):
    converted = rvalues.convert(name, value)
    assert converted == expected and type(converted) is type(expected)


@pytest.mark.parametrize("name, value", UNTOUCHED)
def test_values_without_a_rule_or_not_r_numbers_pass_unchanged(name, value):
    assert rvalues.convert(name, value) is value or rvalues.convert(name, value) == value


@pytest.mark.parametrize("name, value, message", [
    ("units", 64.5, "`units` of Keras must be a single whole number >= 1, got 64.5. E.g. units=64."),
    ("units", -3.0, "got -3."),
    ("units", [2.0, 3.0], "got a vector of length 2."),
    ("units", float("nan"), "got NA."),
    ("units", rvalues.R_NA_INTEGER, "got NA."),
    ("kernel_size", [3.0, 0.0], "`kernel_size` of Keras must be whole numbers >= 1, got 0."),
    ("shape", [8.0, -1.0], "must be whole numbers >= 0 (NA for an unknown size), got -1."),
    ("patience", 1.5, "`patience` of Keras must be a single whole number >= 0"),
])
def test_what_cannot_be_converted_is_refused_by_name(name, value, message):
    with pytest.raises(tfd.ArgumentTypeError) as error:
        rvalues.convert(name, value)
    assert message in str(error.value)


def test_the_calls_covered():
    assert rvalues.covers("keras.layers", "Conv2D") and rvalues.covers("keras.callbacks", "EarlyStopping")
    assert rvalues.covers("keras", "Input") and rvalues.covers("keras", "Sequential")
    assert not rvalues.covers("keras", "ops") and not rvalues.covers("keras.ops", "sum")
    assert not rvalues.covers("keras.utils", "to_categorical")
    assert not rvalues.covers("keras.src.layers", "Dense")  # Keras' insides: not a public call


def test_call_names_positional_arguments_by_keras_signature():
    import keras

    with pytest.warns(UserWarning, match="input_shape"):  # Keras 3's warning for a Keras 2 name
        layer = rvalues.call(keras.layers.Conv2D, 8.0, [3.0, 5.0], strides=2.0,
                             input_shape=[8.0, 8.0, 1.0])
    config = layer.get_config()
    assert (config["filters"], config["kernel_size"], config["strides"]) == (8, (3, 5), (2, 2))
    assert layer._input_shape_arg == (8, 8, 1)  # taken by **kwargs, converted by its own name
    with pytest.raises(tfd.ArgumentTypeError, match="`filters` of keras.layers.Conv2D"):
        rvalues.call(keras.layers.Conv2D, 8.5, 3.0)


def test_a_models_method_is_not_kept_alive_by_the_rules():
    import gc
    import weakref

    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    rvalues.call(model.compile, "adam", "mse", metrics="mae")
    assert model.get_compile_config()["metrics"] == ["mae"]
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None
