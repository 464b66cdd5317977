# keras3 programs as R users write them, with only library(tfdistributed) added: the model
# and compile() inside or outside with(strategy$scope(), ...), keras3's own fit() (arrays,
# validation_split, class_weight, a tf.data dataset, callbacks), evaluate(), predict(),
# save_model() and load_model(); and the same model through fit_distributed().
#
# Usage: Rscript keras3_placements.R <kinds, comma-separated, or "auto"> <output dir>
# Writes <output dir>/<kind>-<task>.json: for each program, its weights, history, evaluation
# and predictions (tests/r/test_r_keras3.py compares them with Python's one-device run of the
# same model, tests/python/support/placement.py).
library(keras3)
library(tfdistributed)

args <- commandArgs(trailingOnly = TRUE)
kinds <- strsplit(args[[1]], ",")[[1]]
out_dir <- args[[2]]

# On one machine, two logical CPU devices (mirrored and central_storage get 2 replicas); in a
# launched job, each task is one device.
if (!nzchar(Sys.getenv("TF_CONFIG"))) {
  configure_cpu_devices(2)
}
digits <- digits_data()
x <- digits$train$x[1:256, , , , drop = FALSE]
y <- digits$train$y[1:256]
x_new <- digits$test$x[1:64, , , , drop = FALSE]

layers_of <- function(model) {
  model %>%
    layer_flatten(input_shape = c(8, 8, 1)) %>%
    layer_dense(units = 32, activation = "relu") %>%
    layer_dense(units = 10)
}

compile_it <- function(model, optimizer) {
  model %>% compile(
    optimizer = optimizer, metrics = "accuracy",
    loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))
}

# Each program builds and compiles the model of tests/python/support/placement.py from the same
# seed; they differ only in what is inside the strategy's scope.
programs <- list(
  all_inside = function(strategy) {
    with(strategy$scope(), {
      model <- keras_model_sequential() %>% layers_of()
      compile_it(model, optimizer_adam())
    })
    model
  },
  compile_outside = function(strategy) {
    with(strategy$scope(), {
      model <- keras_model_sequential() %>% layers_of()
    })
    compile_it(model, "adam")
  },
  object_outside_compile_inside = function(strategy) {
    model <- keras_model_sequential()
    with(strategy$scope(), {
      model %>% layers_of()
      compile_it(model, optimizer_adam())
    })
    model
  },
  # The R tutorial's shape: the model object before the scope, its layers piped inside, the
  # optimizer made and compile() called after it.
  tutorial = function(strategy) {
    model <- keras_model_sequential()
    with(strategy$scope(), {
      model %>% layers_of()
    })
    compile_it(model, optimizer_adam())
  }
)

weights_of <- function(model) lapply(get_weights(model), function(w) w)

run_program <- function(name, strategy, where) {
  set_random_seed(3)
  model <- programs[[name]](strategy)
  history <- model %>% fit(
    x, y, epochs = 3, batch_size = 32, validation_split = 0.25, shuffle = FALSE, verbose = 0,
    callbacks = list(callback_early_stopping(monitor = "val_loss", patience = 5),
                     callback_model_checkpoint(file.path(where, paste0(name, ".ckpt.keras")))))
  path <- file.path(where, paste0(name, ".keras"))
  save_model(model, path, overwrite = TRUE)
  list(weights = weights_of(model), history = history$metrics,
       evaluate = as.list(model %>% evaluate(x, y, batch_size = 32, verbose = 0)),
       predict = model %>% predict(x_new, batch_size = 32, verbose = 0),
       loaded_predict = load_model(path) %>% predict(x_new, verbose = 0),
       replicas = strategy$num_replicas_in_sync)
}

# keras3's other fit() inputs, and fit_distributed(), on the tutorial's shape.
extras <- list(
  class_weight = function(model, strategy, where) {
    model %>% fit(x, y, epochs = 3, batch_size = 32, shuffle = FALSE, verbose = 0,
                  class_weight = as.list(setNames(c(1, 2, 1, 1, 1, 1, 1, 1, 3, 1), 0:9)),
                  callbacks = list(callback_backup_and_restore(file.path(where, "backup"))))
  },
  dataset = function(model, strategy, where) {
    batches <- tensorflow::tf$data$Dataset$from_tensor_slices(
      reticulate::tuple(np_array(x, "float32"), np_array(y, "int32")))$batch(32L)
    model %>% fit(batches, epochs = 3, verbose = 0)
  },
  fit_distributed = function(model, strategy, where) {
    fit_distributed(model, x, y, epochs = 3, batch_size = 32, shuffle = FALSE, verbose = 0)
  }
)

run_extra <- function(name, strategy, where) {
  set_random_seed(3)
  model <- programs$tutorial(strategy)
  history <- extras[[name]](model, strategy, where)
  # keras3's keras_training_history and fit_distributed()'s history both keep $metrics.
  list(weights = weights_of(model), history = history$metrics["loss"],
       evaluate = as.list(evaluate_distributed(model, x, y, batch_size = 32, verbose = 0)),
       replicas = strategy$num_replicas_in_sync)
}

for (kind in kinds) {
  strategy <- distribute_strategy(kind)
  config <- Sys.getenv("TF_CONFIG")
  task <- if (nzchar(config)) {
    with(jsonlite::fromJSON(config)$task, paste0(type, "-", index))
  } else "local"
  where <- file.path(out_dir, paste(kind, task, sep = "-"))
  dir.create(where, recursive = TRUE, showWarnings = FALSE)
  results <- c(
    lapply(setNames(names(programs), names(programs)), run_program, strategy, where),
    lapply(setNames(names(extras), paste0("extra_", names(extras))), run_extra, strategy, where))
  jsonlite::write_json(results, paste0(where, ".json"), digits = NA, auto_unbox = TRUE)
  cat(sprintf("%s: %d replicas, %d programs\n", kind, strategy$num_replicas_in_sync,
              length(results)))
}
