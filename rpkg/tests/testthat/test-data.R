test_that("a TFDS dataset written as one file cannot be split over 2 workers by file", {
  skip_if_no_backend()
  dir <- withr::local_tempdir()
  expect_identical(write_digits_tfds(dir, num_files = 1), dir)
  train <- function() load_tfds("sklearn_digits", "train", data_dir = dir)$batch(32L)
  expect_error(check_sharding(train(), 2, policy = "file"), "shard policy to 'data'",
               class = "tfdistributed_sharding_error")
  # A fresh dataset: one that failed a file-sharding check fails any later check (TensorFlow).
  expect_identical(check_sharding(dataset_shard_policy(train(), "data"), 2), "data")
  expect_identical(shard_policy(load_tfds("sklearn_digits", "test", data_dir = dir, shard_policy = "off")), "off")
})

test_that("data helpers check their arguments in R", {
  skip_if_no_backend()
  expect_error(dataset_shard_policy(1:3, "data"), "a tf.data.Dataset", class = "tfdistributed_error")
  ds <- dataset_from_arrays(matrix(1, 4, 2), 1:4, batch_size = 2)
  expect_error(dataset_shard_policy(ds, "files"), "Unknown shard policy 'files'", class = "tfdistributed_error")
  expect_error(check_sharding(ds, 2.5), "whole number", class = "tfdistributed_error")
  expect_error(dataset_from_arrays(matrix(1, 4, 2), batch_size = 0), ">= 1", class = "tfdistributed_error")
  expect_error(load_tfds("no_such_dataset_here", data_dir = withr::local_tempdir()), "is not prepared",
               class = "tfdistributed_error")
})

test_that("digits_data() gives R arrays and integer labels", {
  skip_if_no_backend()
  digits <- digits_data()
  expect_identical(dim(digits$train$x), c(1347L, 8L, 8L, 1L))
  expect_type(digits$train$y, "integer")
  expect_identical(length(digits$test$y), 450L)
  expect_true(all(digits$train$x >= 0 & digits$train$x <= 1))
})
