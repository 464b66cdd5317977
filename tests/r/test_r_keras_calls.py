"""R values in Keras' own calls made through the package's `keras` object (issue 33, item 2).

Every rule of `tfdistributed.r.values.R_VALUE_RULES` is driven from R, as R users write it
(whole doubles, R vectors, a length-1 character vector), and compared with Keras' own result
for the integer/list form written in Python: the same layer `get_config()`, the same callback
and optimizer settings, the same compile state. Values R cannot convert are R errors naming
the argument and the Keras call. The wrapper is still Keras' class where a class is needed, a
call it does not know is reticulate's own, and Python users' calls are unchanged.
"""

from __future__ import annotations

import pytest

import tfdistributed.r.values as rvalues


def _from_r(r, code: str):
    """The Python object R's `code` returns (handed over through __main__)."""
    import __main__

    r(f"reticulate::py_set_attr(reticulate::import_main(), 'r_keras_value', {{ {code} }})")
    try:
        return __main__.r_keras_value
    finally:
        del __main__.r_keras_value


def _config(layer_or_object) -> dict:
    config = dict(layer_or_object.get_config())
    config.pop("name", None)
    return config


# (R call with R values, the same call in Python with Keras' integer/list/tuple forms)
LAYERS = {
    "units": ('keras$layers$Dense(64, activation = "relu")',
              lambda k: k.layers.Dense(64, activation="relu")),
    "filters_kernel_size": ("keras$layers$Conv2D(filters = 32, kernel_size = 3)",
                            lambda k: k.layers.Conv2D(filters=32, kernel_size=3)),
    "positional_strides_dilation": (
        'keras$layers$Conv2D(8, c(3, 5), strides = 2, dilation_rate = c(1, 1), padding = "same")',
        lambda k: k.layers.Conv2D(8, (3, 5), strides=2, dilation_rate=(1, 1), padding="same")),
    "groups_conv1d": ("keras$layers$Conv1D(4, 3, groups = 2)", lambda k: k.layers.Conv1D(4, 3, groups=2)),
    "depth_multiplier": ("keras$layers$DepthwiseConv2D(3, depth_multiplier = 2)",
                         lambda k: k.layers.DepthwiseConv2D(3, depth_multiplier=2)),
    "output_padding": ("keras$layers$Conv2DTranspose(4, 3, strides = 2, output_padding = 1)",
                       lambda k: k.layers.Conv2DTranspose(4, 3, strides=2, output_padding=1)),
    "pool_size": ("keras$layers$MaxPooling2D(pool_size = c(2, 2), strides = 1)",
                  lambda k: k.layers.MaxPooling2D(pool_size=(2, 2), strides=1)),
    "size": ("keras$layers$UpSampling2D(size = c(2, 3))", lambda k: k.layers.UpSampling2D(size=(2, 3))),
    "padding_nested": ("keras$layers$ZeroPadding2D(padding = list(c(1, 1), c(2, 0)))",
                       lambda k: k.layers.ZeroPadding2D(padding=((1, 1), (2, 0)))),
    "cropping": ("keras$layers$Cropping2D(cropping = 1)", lambda k: k.layers.Cropping2D(cropping=1)),
    "target_shape": ("keras$layers$Reshape(target_shape = c(4, -1))",
                     lambda k: k.layers.Reshape(target_shape=(4, -1))),
    "dims": ("keras$layers$Permute(dims = c(2, 1))", lambda k: k.layers.Permute(dims=(2, 1))),
    "n": ("keras$layers$RepeatVector(3)", lambda k: k.layers.RepeatVector(3)),
    "input_output_dim": ("keras$layers$Embedding(input_dim = 100, output_dim = 8)",
                         lambda k: k.layers.Embedding(input_dim=100, output_dim=8)),
    "rnn_units": ("keras$layers$LSTM(units = 16)", lambda k: k.layers.LSTM(16)),
    "heads": ("keras$layers$MultiHeadAttention(num_heads = 2, key_dim = 4, value_dim = 3)",
              lambda k: k.layers.MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3)),
    "axis": ("keras$layers$Concatenate(axis = 1)", lambda k: k.layers.Concatenate(axis=1)),
    "axis_vector": ("keras$layers$LayerNormalization(axis = c(1, 2))",
                    lambda k: k.layers.LayerNormalization(axis=[1, 2])),
    "seed_noise_shape": ("keras$layers$Dropout(0.5, seed = 1, noise_shape = c(NA, 1))",
                         lambda k: k.layers.Dropout(0.5, seed=1, noise_shape=(None, 1))),
    "height_width": ("keras$layers$Resizing(4, 5)", lambda k: k.layers.Resizing(4, 5)),
    "num_tokens": ("keras$layers$CategoryEncoding(num_tokens = 4)",
                   lambda k: k.layers.CategoryEncoding(num_tokens=4)),
    "num_bins": ("keras$layers$Hashing(num_bins = 3)", lambda k: k.layers.Hashing(num_bins=3)),
    "max_tokens": ("keras$layers$TextVectorization(max_tokens = 50, output_sequence_length = 6)",
                   lambda k: k.layers.TextVectorization(max_tokens=50, output_sequence_length=6)),
    "num_oov_indices": ("keras$layers$StringLookup(num_oov_indices = 2)",
                        lambda k: k.layers.StringLookup(num_oov_indices=2)),
    "optimizer": ("keras$optimizers$Adam(learning_rate = 0.01, gradient_accumulation_steps = 2, "
                  "use_ema = TRUE, ema_overwrite_frequency = 5)",
                  lambda k: k.optimizers.Adam(learning_rate=0.01, gradient_accumulation_steps=2,
                                              use_ema=True, ema_overwrite_frequency=5)),
    "metric_k": ("keras$metrics$TopKCategoricalAccuracy(k = 3)",
                 lambda k: k.metrics.TopKCategoricalAccuracy(k=3)),
    "metric_thresholds": ("keras$metrics$AUC(num_thresholds = 50)",
                          lambda k: k.metrics.AUC(num_thresholds=50)),
    "metric_top_k": ("keras$metrics$Precision(top_k = 2)", lambda k: k.metrics.Precision(top_k=2)),
    "metric_fn_parameter": ('keras$metrics$MeanMetricWrapper(keras$losses$mean_squared_error, '
                            'name = "m", dtype = "float32")',
                            lambda k: k.metrics.MeanMetricWrapper(k.losses.mean_squared_error,
                                                                  name="m", dtype="float32")),
    "metric_num_classes": ("keras$metrics$MeanIoU(num_classes = 3)",
                           lambda k: k.metrics.MeanIoU(num_classes=3)),
}


@pytest.mark.parametrize("case", list(LAYERS))
def test_r_values_give_keras_own_config(r, case):
    import keras

    code, python = LAYERS[case]
    assert _config(_from_r(r, code)) == _config(python(keras))


# Rules driven here only by position (`keras$layers$Dense(64)`, `Resizing(4, 5)`...), or only
# by tfdistributed's R fit path (fit's counts: tests/r/test_r_values.py), or Keras 2 names that
# Keras 3 takes through **kwargs with a deprecation warning.
NOT_NAMED_HERE = {"n", "height", "width", "batch_input_shape", "input_shape"} | (
    set(rvalues.KERAS_COUNT_ARGUMENTS) - {"batch_size"})


def test_every_rule_is_driven_from_r():
    """No rule of the table goes untested: each argument is named in an R call of this file."""
    codes = " ".join([*(code for code, _ in LAYERS.values()), *(code for code, _ in INPUTS.values()),
                      *(code for code, _, _ in CALLBACKS.values()), COMPILE_R,
                      *(code for code, _ in DATASETS.values())])
    untested = {name for name in rvalues.R_VALUE_RULES if f"{name} =" not in codes}
    assert untested <= NOT_NAMED_HERE, untested - NOT_NAMED_HERE


INPUTS = {
    "shape": ("keras$Input(shape = c(8, 8, 1))", lambda k: k.Input(shape=(8, 8, 1))),
    "shape_scalar": ("keras$Input(shape = 8, batch_size = 4)", lambda k: k.Input(shape=(8,), batch_size=4)),
    "shape_unknown": ("keras$Input(shape = c(NA, 4))", lambda k: k.Input(shape=(None, 4))),
    "shape_integer_na": ("keras$Input(shape = c(NA_integer_, 4L))", lambda k: k.Input(shape=(None, 4))),
    "batch_shape": ("keras$layers$Input(batch_shape = c(2, 3))", lambda k: k.Input(batch_shape=(2, 3))),
    "input_shape_helper": ("keras$Input(shape = input_shape(8, 8, 1))", lambda k: k.Input(shape=(8, 8, 1))),
}


@pytest.mark.parametrize("case", list(INPUTS))
def test_r_shapes_give_keras_own_inputs(r, case):
    import keras

    code, python = INPUTS[case]
    tensor, expected = _from_r(r, code), python(keras)
    assert (tensor.shape, tensor.dtype) == (expected.shape, expected.dtype)


CALLBACKS = {
    "checkpoint": ('keras$callbacks$ModelCheckpoint("m.keras", save_freq = 100, verbose = 1)',
                   lambda k: k.callbacks.ModelCheckpoint("m.keras", save_freq=100, verbose=1),
                   ("save_freq", "verbose")),
    "early_stopping": ("keras$callbacks$EarlyStopping(patience = 3, start_from_epoch = 2, verbose = 1)",
                       lambda k: k.callbacks.EarlyStopping(patience=3, start_from_epoch=2, verbose=1),
                       ("patience", "start_from_epoch", "verbose")),
    "plateau": ("keras$callbacks$ReduceLROnPlateau(patience = 2, cooldown = 1)",
                lambda k: k.callbacks.ReduceLROnPlateau(patience=2, cooldown=1), ("patience", "cooldown")),
    "tensorboard": ('keras$callbacks$TensorBoard("logs", histogram_freq = 1, update_freq = 10, '
                    "embeddings_freq = 2, profile_batch = c(2, 4))",
                    lambda k: k.callbacks.TensorBoard("logs", histogram_freq=1, update_freq=10,
                                                      embeddings_freq=2, profile_batch=(2, 4)),
                    ("histogram_freq", "update_freq", "embeddings_freq", "_start_batch", "_stop_batch")),
    "backup": ('keras$callbacks$BackupAndRestore("b", save_freq = 10)',
               lambda k: k.callbacks.BackupAndRestore("b", save_freq=10), ("save_freq",)),
    "checkpoint_epoch": ('keras$callbacks$ModelCheckpoint("m.keras", save_freq = "epoch")',
                         lambda k: k.callbacks.ModelCheckpoint("m.keras", save_freq="epoch"), ("save_freq",)),
}


@pytest.mark.parametrize("case", list(CALLBACKS))
def test_r_values_give_keras_own_callbacks(r, case):
    import keras

    code, python, attrs = CALLBACKS[case]
    from_r, expected = _from_r(r, code), python(keras)
    for attr in attrs:
        value, wanted = getattr(from_r, attr), getattr(expected, attr)
        assert (value, type(value)) == (wanted, type(wanted)), attr


COMPILE_R = ('model$compile(optimizer = "adam", loss = "mse", metrics = "mae", '
             'weighted_metrics = "mse", loss_weights = 0.5, steps_per_execution = 2)')


def test_r_compile_gives_keras_own_compile_state(r):
    import keras
    import numpy as np

    build = "keras$Sequential(list(keras$Input(shape = 3), keras$layers$Dense(2)))"
    from_r = _from_r(r, f"model <- {build}; {COMPILE_R}; model")
    expected = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    expected.compile(optimizer="adam", loss="mse", metrics=["mae"], weighted_metrics=["mse"],
                     loss_weights=[0.5], steps_per_execution=2)
    configs = [model.get_compile_config() for model in (from_r, expected)]
    for config in configs:  # the optimizers' automatic names (adam_2, adam_3) differ
        config["optimizer"]["config"].pop("name")
    assert configs[0] == configs[1]
    assert from_r.steps_per_execution == expected.steps_per_execution == 2
    # The compiled model trains with the metrics asked for, as Keras' own.
    from_r.set_weights(expected.get_weights())
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 2), "float32")
    assert from_r.evaluate(x, y, verbose=0, return_dict=True) == \
        expected.evaluate(x, y, verbose=0, return_dict=True)


REFUSALS = {
    "fraction": ("keras$layers$Dense(64.5)",
                 "`units` of keras.layers.Dense must be a single whole number >= 1, got 64.5. "
                 "E.g. units = 64."),
    "negative_size": ("keras$layers$Conv2D(32, -3)",
                      "`kernel_size` of keras.layers.Conv2D must be a whole number >= 1 or a vector"),
    "negative_in_vector": ("keras$layers$Conv2D(32, kernel_size = c(3, -3))",
                           "`kernel_size` of keras.layers.Conv2D must be whole numbers >= 1, got -3"),
    "vector_for_scalar": ("keras$layers$Dense(c(2, 3))", "`units` of keras.layers.Dense must be a "
                          "single whole number >= 1, got a vector of length 2"),
    "na": ("keras$layers$Dense(NA_integer_)", "`units` of keras.layers.Dense must be a single whole "
           "number >= 1, got NA"),
    "callback": ("keras$callbacks$EarlyStopping(patience = 1.5)",
                 "`patience` of keras.callbacks.EarlyStopping must be a single whole number >= 0"),
    "shape": ("keras$Input(shape = c(8, 0.5))", "`shape` of keras.Input must be whole numbers >= 0 "
              "(NA for an unknown size), got 0.5"),
    "compile": ("keras$Sequential(list(keras$Input(shape = 3), keras$layers$Dense(2)))$compile("
                'loss = "mse", steps_per_execution = 2.5)',
                "`steps_per_execution` of Sequential.compile() must be a single whole number >= 1"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_r_values_that_cannot_be_converted_are_r_errors_naming_the_argument(r, case):
    from rpy2.rinterface_lib.embedded import RRuntimeError

    code, expected = REFUSALS[case]
    with pytest.raises(RRuntimeError) as error:
        r(code)
    assert expected in str(error.value), str(error.value)
    classes = list(r(f"class(tryCatch({code}, error = function(e) e))"))
    assert "tfdistributed_argument_type_error" in classes and "tfdistributed_error" in classes
    # The error is reported for the user's own Keras call, not for a helper of ours.
    call = r(f"deparse(conditionCall(tryCatch({code}, error = function(e) e)))")[0]
    assert call.startswith(code.split("(")[0]), call


def test_a_class_reached_through_keras_is_still_the_class(r):
    import keras

    assert _from_r(r, "keras$layers$Dense") is keras.layers.Dense
    checks = r("""
      dense <- keras$layers$Dense
      layer <- dense(4)
      MyDense <- reticulate::PyClass("MyDense", inherit = keras$layers$Dense)
      mine <- MyDense(3L)
      c(class = inherits(dense, "python.builtin.type"),
        layer = inherits(layer, "keras.src.layers.layer.Layer"),
        isinstance = reticulate::import_builtins()$isinstance(layer, keras$layers$Dense),
        subclass = reticulate::import_builtins()$isinstance(mine, keras$layers$Dense),
        from_config = keras$layers$Dense$from_config(layer$get_config())$units == 4L,
        as_value = inherits(keras$layers$TimeDistributed(keras$layers$Dense(3)),
                            "keras.src.layers.rnn.time_distributed.TimeDistributed"),
        signature = identical(names(formals(keras$layers$Dense))[1], "units"),
        via_dots = (function(...) keras$layers$Dense(...))(5, use_bias = FALSE)$units == 5L,
        brackets = keras[["layers"]][["Dense"]](6)$units == 6L)
    """)
    assert dict(zip(checks.names, checks)) == dict.fromkeys(checks.names, True)


def test_a_call_the_table_does_not_cover_is_reticulates_own(r):
    checks = r("""
      c(ops = is.null(environment(keras$ops$sum)$.tfdistributed_fn),
        layers = !is.null(environment(keras$layers$Dense)$.tfdistributed_fn),
        version = is.character(keras$version()),
        module = inherits(keras$ops, "python.builtin.module"))
    """)
    assert dict(zip(checks.names, checks)) == dict.fromkeys(checks.names, True)


def test_python_users_calls_are_unchanged():
    """`import tfdistributed` changes no Keras call from Python: Keras' own refusal stays."""
    import keras

    with pytest.raises(ValueError, match="kernel_size=3.0"):
        keras.layers.Conv2D(32, 3.0)
    with pytest.raises(ValueError, match="to be a list"):
        keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).compile(loss="mse", metrics="mae")


# tf.data's own methods called from R with R doubles, as R code builds a pipeline (the mlverse
# program's ds$shuffle(2000)$batch(64 * workers)), against the same pipeline built in Python.
TF = 'tf <- reticulate::import("tensorflow"); '
DATASETS = {
    "shuffle_repeat_take_skip_batch_prefetch": (
        TF + "tf$data$Dataset$range(100L)$shuffle(buffer_size = 50, seed = 1)$`repeat`(count = 2)"
             "$take(count = 150)$skip(count = 10)$batch(batch_size = 16)$prefetch(buffer_size = 2)",
        lambda tf: tf.data.Dataset.range(100).shuffle(50, seed=1).repeat(2).take(150).skip(10)
        .batch(16).prefetch(2)),
    "positional_doubles": (
        TF + "tf$data$Dataset$range(40L)$shuffle(2000, seed = 3)$batch(4 * 2)",
        lambda tf: tf.data.Dataset.range(40).shuffle(2000, seed=3).batch(8)),
    "shard_interleave_padded_rebatch": (
        TF + "tf$data$Dataset$range(24L)$shard(num_shards = 2, index = 1)"
             "$interleave(function(x) tf$data$Dataset$from_tensors(x), cycle_length = 2, "
             "block_length = 1)$padded_batch(4)$rebatch(2)",
        lambda tf: tf.data.Dataset.range(24).shard(2, 1).interleave(
            tf.data.Dataset.from_tensors, cycle_length=2, block_length=1).padded_batch(4)
        .rebatch(2)),
}


@pytest.mark.parametrize("case", list(DATASETS))
def test_r_values_in_a_tf_data_pipeline_give_tensorflows_own_elements(r, case):
    import tensorflow as tf

    code, build = DATASETS[case]
    got = [e.tolist() for e in _from_r(r, code).as_numpy_iterator()]
    assert got == [e.tolist() for e in build(tf).as_numpy_iterator()]


def test_a_tf_data_argument_that_cannot_be_converted_is_an_r_error_naming_it(r):
    message = r("tryCatch(reticulate::import('tensorflow')$data$Dataset$range(4L)$batch(2.5), "
                "error = conditionMessage)")[0]
    assert "`batch_size` of " in message and "got 2.5" in message, message
