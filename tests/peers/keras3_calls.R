# What Keras receives from keras3's compile(), fit(), evaluate() and predict(), written as JSON:
# tests/peers/test_keras3_peers.py runs this twice, with and without library(tfdistributed), and
# the two must be the same. The calls involve no strategy; their arguments are the forms keras3
# users give: R arrays, integer labels, lists for several inputs, named lists for named ones,
# validation data as a list, class and sample weights, callbacks, an R generator.
# Usage: Rscript keras3_calls.R OUT.json with|without
args <- commandArgs(trailingOnly = TRUE)
library(keras3)
if (args[[2]] == "with") {
  library(tfdistributed)
}
recorder <- reticulate::py_run_string(convert = FALSE, "
import numpy as np
seen = []

def describe(value):
    if isinstance(value, dict):
        return {'dict': {str(k): describe(v) for k, v in sorted(value.items())}}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [describe(v) for v in value]}
    if isinstance(value, np.ndarray):
        return {'ndarray': [str(value.dtype), list(value.shape), float(np.sum(value))]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {type(value).__name__: value}
    return {'object': type(value).__name__}

def record(model, name):
    method = getattr(model, name)
    def recorded(*args, **kwargs):
        seen.append([name, describe(list(args)), describe(kwargs)])
        return method(*args, **kwargs)
    object.__setattr__(model, name, recorded)
")
recorded <- function(model) {
  for (name in c("compile", "fit", "evaluate", "predict")) recorder$record(model, name)
  model
}

set.seed(1)
x <- matrix(runif(64 * 4), 64, 4)
y <- sample(0:2, 64, replace = TRUE)
model <- recorded(keras_model_sequential(input_shape = 4) |> layer_dense(3))
model |> compile(optimizer = optimizer_sgd(0.01), metrics = "accuracy",
                 loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))
model |> fit(x, y, epochs = 2, batch_size = 16, verbose = 0, validation_data = list(x, y),
             class_weight = list("0" = 1, "1" = 2, "2" = 1), shuffle = FALSE,
             callbacks = list(callback_early_stopping(patience = 3)))
model |> fit(x, y, epochs = 1, batch_size = 32, sample_weight = runif(64), verbose = 0,
             validation_split = 0.25, shuffle = FALSE)
model |> evaluate(x, y, batch_size = 16, verbose = 0)
model |> predict(x, batch_size = 16, verbose = 0)
generator <- function() list(x[1:16, ], y[1:16])
model |> fit(generator, steps_per_epoch = 2, epochs = 1, verbose = 0)

a <- layer_input(2, name = "a")
b <- layer_input(3, name = "b")
two <- recorded(keras_model(list(a = a, b = b), layer_concatenate(list(a, b)) |> layer_dense(1)))
two |> compile(optimizer = "sgd", loss = "mse")
two |> fit(list(a = x[, 1:2], b = x[, 2:4]), x[, 1], epochs = 1, batch_size = 16, verbose = 0,
           validation_data = list(list(a = x[, 1:2], b = x[, 2:4]), x[, 1]))
unnamed <- recorded(keras_model(list(a, b), layer_concatenate(list(a, b)) |> layer_dense(1)))
unnamed |> compile(optimizer = "sgd", loss = "mse", loss_weights = 0.5)
unnamed |> fit(list(x[, 1:2], x[, 2:4]), x[, 1], epochs = 1, batch_size = 16, verbose = 0)
unnamed |> predict(list(x[, 1:2], x[, 2:4]), verbose = 0)

# tfdatasets calls the methods of tf.data datasets (dataset$batch(), $shuffle()...), which the
# R package takes over too: the pipeline yields the same batches.
library(tfdatasets)
batches <- list(x, y) |>
  tensor_slices_dataset() |>
  dataset_shuffle(64, seed = 3) |>
  dataset_map(function(x, y) list(x * 2, y)) |>
  dataset_batch(10, drop_remainder = TRUE) |>
  dataset_repeat(2) |>
  dataset_take(9) |>
  dataset_prefetch(2)
model |> fit(batches, epochs = 1, verbose = 0)
for (batch in reticulate::iterate(batches)) {
  recorder$seen$append(list("batch", recorder$describe(lapply(batch, function(t) t$numpy()))))
}

writeLines(reticulate::py_to_r(reticulate::import("json")$dumps(recorder$seen, indent = 1L)),
           args[[1]])
