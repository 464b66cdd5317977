# The R version of the seed tutorial: the digits model, built inside each strategy's scope,
# reaches >= 0.9 test accuracy.
test_that("the digits tutorial trains to >= 0.9 accuracy under every local strategy", {
  skip_if_no_backend()
  digits <- digits_data()
  for (kind in c("mirrored", "central_storage", "one_device", "default", "multi_worker_mirrored")) {
    strategy <- test_strategy(kind)
    with(strategy$scope(), model <- digits_model())
    history <- fit_distributed(model, digits$train$x, digits$train$y, epochs = 20,
                               batch_size = global_batch_size(32, strategy), seed = 1)
    expect_length(history$metrics$accuracy, 20)
    result <- evaluate_distributed(model, digits$test$x, digits$test$y)
    expect_gte(result[["accuracy"]], 0.9, label = paste(kind, "test accuracy"))
  }
})
