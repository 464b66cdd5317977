# The R version of the seed tutorial: the digits model, built inside a strategy's scope, reaches
# >= 0.9 test accuracy with fit_distributed(), on 2 replicas and under the multi-worker strategy
# (alone here). Every other strategy trains the same numbers as the default strategy from R
# (tests/r/test_r_values.py) and from Python (the conformance matrix): not trained again here.
test_that("the digits tutorial trains to >= 0.9 accuracy with fit_distributed()", {
  skip_if_no_backend()
  digits <- digits_data()
  for (kind in c("mirrored", "multi_worker_mirrored")) {
    strategy <- test_strategy(kind)
    with(strategy$scope(), model <- digits_model())
    history <- fit_distributed(model, digits$train$x, digits$train$y, epochs = 8,
                               batch_size = global_batch_size(32, strategy), seed = 1)
    expect_length(history$metrics$accuracy, 8)
    result <- evaluate_distributed(model, digits$test$x, digits$test$y)
    expect_gte(result[["accuracy"]], 0.9, label = paste(kind, "test accuracy"))
  }
})

# The seed tutorial's own program, as an R user writes it: a 256-128 MLP with two Dropout
# layers, rmsprop, one-hot targets, fit(epochs = 10, batch_size = 128, validation_split = 0.2),
# after one strategy and then another in one R session. (Under every strategy, the same
# program is a cell of the conformance matrix, tests/python/training/test_conformance.py, and
# the tutorial as written runs whole in tests/r/test_r_seed_program.py.)
tutorial_mlp <- function() {
  keras$utils$set_random_seed(1L)
  model <- keras$Sequential(list(
    keras$Input(shape = input_shape(8, 8, 1)),
    keras$layers$Flatten(),
    keras$layers$Dense(256L, activation = "relu"),
    keras$layers$Dropout(0.4),
    keras$layers$Dense(128L, activation = "relu"),
    keras$layers$Dropout(0.3),
    keras$layers$Dense(10L, activation = "softmax")
  ))
  model$compile(loss = "categorical_crossentropy", optimizer = keras$optimizers$RMSprop(),
                metrics = list("accuracy"))
  model
}

test_that("the seed tutorial's fit(validation_split = 0.2) reaches >= 0.9 under every strategy", {
  skip_if_no_backend()
  digits <- digits_data()
  y_train <- keras$utils$to_categorical(digits$train$y, 10L)
  y_test <- keras$utils$to_categorical(digits$test$y, 10L)
  for (kind in c("central_storage", "mirrored")) {
    strategy <- test_strategy(kind)
    with(strategy$scope(), model <- tutorial_mlp())
    history <- fit_distributed(model, digits$train$x, y_train, epochs = 10, batch_size = 128,
                               validation_split = 0.2)
    expect_length(history$metrics$val_accuracy, 10)
    result <- evaluate_distributed(model, digits$test$x, y_test)
    expect_gte(result[["accuracy"]], 0.9, label = paste(kind, "test accuracy"))
  }
})

test_that("Keras' own model$fit works under a strategy from R, with validation_split", {
  skip_if_no_backend()
  digits <- digits_data()
  y_train <- keras$utils$to_categorical(digits$train$y, 10L)
  strategy <- test_strategy("mirrored")
  with(strategy$scope(), model <- tutorial_mlp())
  history <- model$fit(digits$train$x, y_train, epochs = 10L, batch_size = 128L,
                       validation_split = 0.2, verbose = 0L)
  expect_length(history$history$val_accuracy, 10)
  result <- model$evaluate(digits$test$x, keras$utils$to_categorical(digits$test$y, 10L),
                           verbose = 0L, return_dict = TRUE)
  expect_gte(result$accuracy, 0.9)
})

test_that("named lists feed models with named inputs; class_weight and 3-part validation_data", {
  skip_if_no_backend()
  digits <- digits_data()
  halves <- function(x) {
    flat <- array(x, c(dim(x)[1], 64))
    list(top = flat[, 1:32], bottom = flat[, 33:64])
  }
  strategy <- test_strategy("mirrored")
  with(strategy$scope(), {
    keras$utils$set_random_seed(1L)
    top <- keras$Input(shape = input_shape(32), name = "top")
    bottom <- keras$Input(shape = input_shape(32), name = "bottom")
    joined <- keras$layers$Concatenate()(list(keras$layers$Dense(32L, activation = "relu")(top),
                                              keras$layers$Dense(32L, activation = "relu")(bottom)))
    model <- keras$Model(list(top = top, bottom = bottom), keras$layers$Dense(10L)(joined))
    model$compile(optimizer = "adam", metrics = list("accuracy"),
                  loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
  })
  weights <- setNames(as.list(rep(1, 10)), 0:9)
  history <- fit_distributed(model, halves(digits$train$x), digits$train$y, epochs = 15,
                             batch_size = 64, class_weight = weights,
                             validation_data = list(halves(digits$test$x), digits$test$y,
                                                    rep(1, length(digits$test$y))))
  expect_length(history$metrics$val_loss, 15)
  result <- evaluate_distributed(model, halves(digits$test$x), digits$test$y)
  expect_gte(result[["accuracy"]], 0.9)
  expect_error(fit_distributed(model, halves(digits$train$x), digits$train$y,
                               validation_split = 1.5), "fraction between 0 and 1")
  expect_error(fit_distributed(model, halves(digits$train$x), digits$train$y,
                               class_weight = c(1, 2)), "named by class index")
})
