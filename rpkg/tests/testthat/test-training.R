regression_data <- function(n = 64) {
  set.seed(1)
  x <- matrix(runif(n * 3), n, 3)
  list(x = x, y = as.vector(x %*% c(1, -2, 0.5)))
}

mirrored_model <- function() {
  strategy <- test_strategy("mirrored")
  with(strategy$scope(), model <- linear_model())
  model
}

test_that("matrices and plain vectors train (vectors become arrays, not lists)", {
  skip_if_no_backend()
  model <- mirrored_model()
  d <- regression_data()
  history <- fit_distributed(model, d$x, d$y, epochs = 2, batch_size = 16)
  expect_s3_class(history, "tfdistributed_history")
  expect_identical(history$epochs, 1:2)
  expect_length(history$metrics$loss, 2)
})

test_that("batch_size = 64 (a double) works; 64.5, NA and odd global batches are R errors", {
  skip_if_no_backend()
  model <- mirrored_model()
  d <- regression_data()
  expect_s3_class(fit_distributed(model, d$x, d$y, batch_size = 64), "tfdistributed_history")
  expect_error(fit_distributed(model, d$x, d$y, batch_size = 64.5),
               "`batch_size` must be a single whole number, got numeric 64.5", class = "tfdistributed_error")
  expect_error(fit_distributed(model, d$x, d$y, batch_size = NA), "`batch_size`", class = "tfdistributed_error")
  expect_error(fit_distributed(model, d$x, d$y, epochs = NULL), "`epochs` is required", class = "tfdistributed_error")
  expect_error(fit_distributed(model, d$x, d$y, batch_size = 15), "divide evenly over the 2 replicas",
               class = "tfdistributed_training_error")
})

test_that("max_replica_batch = 16 (a double) accumulates two steps per update; 16.5 is an R error", {
  skip_if_no_backend()
  model <- mirrored_model()
  d <- regression_data()
  # 64 over 2 replicas is 32 each: two accumulated steps of 16 per update.
  fit_distributed(model, d$x, d$y, batch_size = 64, max_replica_batch = 16, verbose = 0)
  expect_equal(as.integer(reticulate::py_to_r(model$optimizer$gradient_accumulation_steps)), 2L)
  expect_error(fit_distributed(model, d$x, d$y, batch_size = 64, max_replica_batch = 16.5),
               "`max_replica_batch` must be a single whole number", class = "tfdistributed_error")
})

test_that("data frames, factors and integer labels are converted; bad data is an R error", {
  skip_if_no_backend()
  strategy <- test_strategy("mirrored")
  with(strategy$scope(), {
    model <- keras$Sequential(list(keras$Input(shape = input_shape(2)), keras$layers$Dense(3L)))
    model$compile(optimizer = "adam", metrics = list("accuracy"),
                  loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
  })
  df <- data.frame(a = runif(30), b = rep(c(TRUE, FALSE), 15))
  labels <- factor(rep(c("x", "y", "z"), 10))
  expect_s3_class(fit_distributed(model, df, labels, batch_size = 10), "tfdistributed_history")
  expect_s3_class(fit_distributed(model, df, as.integer(labels) - 1L, batch_size = 10), "tfdistributed_history")
  expect_named(evaluate_distributed(model, df, labels, batch_size = 10), c("accuracy", "loss"), ignore.order = TRUE)
  expect_error(fit_distributed(model, data.frame(a = "x", b = 1), 1L), "non-numeric column\\(s\\) a",
               class = "tfdistributed_error")
  expect_error(fit_distributed(model, df, c(NA, labels[-1])), "`y` contains NA", class = "tfdistributed_error")
  expect_error(fit_distributed(model, df, labels[-1]), "30 rows but `y` has 29", class = "tfdistributed_error")
  # A list is one array per model input, as in Keras.
  expect_error(fit_distributed(model, list(1, 2), labels), "`x` has 1 rows but `y` has 30",
               class = "tfdistributed_error")
  expect_error(fit_distributed(model), "needs data", class = "tfdistributed_error")
})

test_that("a model built outside the scope is refused with the fix", {
  skip_if_no_backend()
  model <- linear_model()
  d <- regression_data()
  expect_error(fit_distributed(model, d$x, d$y, strategy = test_strategy("mirrored")),
               "Build the model (its layers) inside the strategy's scope", fixed = TRUE,
               class = "tfdistributed_training_error")
  expect_error(fit_distributed("model", d$x, d$y), "needs a Keras model", class = "tfdistributed_error")
})

test_that("tf datasets, validation data and callbacks are accepted", {
  skip_if_no_backend()
  model <- mirrored_model()
  d <- regression_data()
  train <- dataset_from_arrays(d$x, d$y, batch_size = 16)
  expect_identical(shard_policy(train), "data")
  history <- fit_distributed(model, train, epochs = 2, validation_data = list(d$x, d$y),
                             callbacks = keras$callbacks$History())
  expect_setequal(names(history$metrics), c("loss", "val_loss"))
  expect_error(fit_distributed(model, train, batch_size = 16), "`batch_size` applies to arrays only",
               class = "tfdistributed_error")
  expect_error(fit_distributed(model, train, callbacks = "stop"), "`callbacks` must be", class = "tfdistributed_error")
  expect_error(fit_distributed(model, d$x, d$y, validation_data = d$x), "validation_data must be",
               class = "tfdistributed_error")
  result <- evaluate_distributed(model, train)
  expect_type(result, "double")
  expect_named(result, "loss")
})

test_that("the history converts to a data frame, prints and plots", {
  skip_if_no_backend()
  history <- structure(list(metrics = list(loss = c(1, 0.5), val_loss = c(1.2, 0.7)), epochs = 1:2,
                            params = list()), class = "tfdistributed_history")
  df <- as.data.frame(history)
  expect_identical(names(df), c("epoch", "metric", "value", "data"))
  expect_identical(df$metric, c("loss", "loss", "val_loss", "val_loss"))
  expect_identical(df$data, rep(c("training", "validation"), each = 2))
  expect_identical(df$epoch, c(1L, 2L, 1L, 2L))
  expect_output(print(history), "2 epochs")
  expect_output(print(history), "final loss:\\s+0.5")
  path <- withr::local_tempfile(fileext = ".png")
  grDevices::png(path)
  expect_invisible(plot(history))
  grDevices::dev.off()
  expect_gt(file.size(path), 0)
  expect_error(plot(history, metrics = "accuracy"), "Nothing to plot", class = "tfdistributed_error")
})

test_that("positional arguments get Keras' parameter names as Python would bind them", {
  params <- c("x", "y", "batch_size", "epochs", "verbose")
  named <- name_positional(list(1, 2, epochs = 3, 4), params)
  expect_identical(names(named), c("x", "y", "epochs", "batch_size"))
  expect_identical(names(name_positional(list(), params)), character())
})

test_that("model$fit() takes R vectors and doubles; what R cannot convert names the argument", {
  skip_if_no_backend()
  model <- linear_model()
  x <- matrix(seq_len(12) / 12, 4, 3)
  history <- model$fit(x, c(a = 1, b = 2, c = 3, d = 4), batch_size = 2, epochs = 2, verbose = 0)
  expect_length(unlist(history$history$loss), 2)
  expect_length(model$evaluate(x, c(1, 2, 3, 4), batch_size = 2, verbose = 0), 1)
  expect_identical(dim(model$predict(x, batch_size = 2, verbose = 0)), c(4L, 1L))
  err <- expect_error(model$fit(x, 1:4, batch_size = 2.5), class = "tfdistributed_error")
  expect_match(conditionMessage(err), "`batch_size` must be a single whole number")
  expect_match(format(err$call), "^model\\$fit\\(")
  expect_error(model$fit(x, c(1, NA, 3, 4)), "`y` contains NA", class = "tfdistributed_error")
})
