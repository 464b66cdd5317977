# R values in Keras' own calls through `keras` (the full rule-by-rule comparison with Keras' own
# results is tests/r/test_r_keras_calls.py, driven through rpy2).

test_that("the quick start's model takes R values as R users write them", {
  skip_if_no_backend()
  with(test_strategy("mirrored")$scope(), {
    model <- keras$Sequential(list(
      keras$Input(shape = c(8, 8, 1)),
      keras$layers$Conv2D(filters = 4, kernel_size = 3, padding = "same"),
      keras$layers$Flatten(),
      keras$layers$Dense(10)))
    model$compile(optimizer = "adam", metrics = "accuracy",
                  loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
  })
  conv <- model$layers[[1]]$get_config()
  expect_identical(conv$filters, 4L)
  expect_identical(unlist(conv$kernel_size), c(3L, 3L))
  expect_identical(unlist(model$get_compile_config()$metrics), "accuracy")
  digits <- digits_data()
  history <- model$fit(digits$train$x[1:128, , , , drop = FALSE], digits$train$y[1:128],
                       epochs = 2, batch_size = 64, verbose = 0)
  expect_length(history$history$accuracy, 2)
})

test_that("values that cannot be converted are R errors naming the argument and the call", {
  skip_if_no_backend()
  err <- expect_error(keras$layers$Dense(64.5), class = "tfdistributed_argument_type_error")
  expect_match(conditionMessage(err), "`units` of keras.layers.Dense must be a single whole number >= 1, got 64.5",
               fixed = TRUE)
  expect_match(format(err$call), "keras$layers$Dense", fixed = TRUE)
  expect_error(keras$callbacks$ModelCheckpoint("m.keras", save_freq = -3), "`save_freq`",
               class = "tfdistributed_error")
  expect_error(keras$layers$MaxPooling2D(pool_size = c(2, 2.5)), "`pool_size`", class = "tfdistributed_error")
})

test_that("a class reached through keras is still the class", {
  skip_if_no_backend()
  layer <- keras$layers$Dense(2)
  expect_true(reticulate::import_builtins()$isinstance(layer, keras$layers$Dense))
  expect_s3_class(keras$layers$Dense, "python.builtin.type")
  expect_identical(names(formals(keras$layers$Dense))[[1]], "units")
})
