test_that("a model saved under mirrored loads and evaluates with and without a strategy", {
  skip_if_no_backend()
  strategy <- test_strategy("mirrored")
  digits <- digits_data()
  with(strategy$scope(), model <- digits_model())
  fit_distributed(model, digits$train$x, digits$train$y, epochs = 3, batch_size = 64)
  expected <- evaluate_distributed(model, digits$test$x, digits$test$y)
  path <- withr::local_tempfile(fileext = ".keras")
  expect_identical(save_model_distributed(model, path), path)
  plain <- load_model_distributed(path)
  expect_identical(plain$distribute_strategy$num_replicas_in_sync, 1L)
  expect_equal(evaluate_distributed(plain, digits$test$x, digits$test$y), expected, tolerance = 1e-5)
  again <- load_model_distributed(path, strategy = strategy)
  expect_identical(again$distribute_strategy$num_replicas_in_sync, 2L)
  expect_equal(evaluate_distributed(again, digits$test$x, digits$test$y), expected, tolerance = 1e-5)
  expect_error(load_model_distributed(file.path(tempdir(), "none.keras")), "does not exist",
               class = "tfdistributed_error")
})

test_that("a custom training loop on 2 replicas matches one device", {
  skip_if_no_backend()
  digits <- digits_data()
  x <- digits$train$x[1:640, , , , drop = FALSE]
  y <- digits$train$y[1:640]
  run <- function(strategy) {
    keras$utils$set_random_seed(3L)
    with(strategy$scope(), {
      model <- keras$Sequential(list(keras$Input(shape = input_shape(8, 8, 1)), keras$layers$Flatten(),
                                     keras$layers$Dense(10L)))
      optimizer <- keras$optimizers$SGD(0.1)
    })
    train_loop(model, dataset_from_arrays(x, y, batch_size = 64), strategy = strategy,
               loss = "sparse_categorical_crossentropy", optimizer = optimizer,
               global_batch_size = 64, epochs = 2)
  }
  two <- run(test_strategy("mirrored"))
  expect_length(two, 2)
  expect_equal(two, run(test_strategy("one_device")), tolerance = 1e-5)
  expect_error(make_train_step(linear_model(), "mse", NULL, test_strategy("mirrored"), 64.5),
               "whole number", class = "tfdistributed_error")
})
