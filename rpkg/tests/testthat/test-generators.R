# R generators (dataset_from_generator) and sharded files (write_dataset_shards,
# dataset_from_files). Training runs on a Python thread while this R session serves the batches.

digits_batches <- function(x, y, batch_size = 64L, fail_at = Inf, record = NULL) {
  start <- 1L
  calls <- 0L
  function(worker_index, num_workers) {
    calls <<- calls + 1L
    if (!is.null(record)) record$told <- c(worker_index, num_workers)
    if (calls == fail_at) stop("cannot read chunk ", calls)
    if (start > dim(x)[1]) {
      start <<- 1L
      return(NULL)
    }
    rows <- start:min(start + batch_size - 1L, dim(x)[1])
    start <<- start + batch_size
    list(x[rows, , , , drop = FALSE], y[rows])
  }
}

test_that("dataset_from_generator() checks the function it is given", {
  skip_if_no_backend()
  expect_error(dataset_from_generator(1:3), "must be an R function",
               class = "tfdistributed_generator_error")
  expect_error(dataset_from_generator(function(path) NULL), "`path` without a default",
               class = "tfdistributed_generator_error")
  expect_error(dataset_from_generator(function() NULL, prefetch = 0), "must be >= 1")
  gen <- dataset_from_generator(function(num_workers, ...) NULL, prefetch = 4)
  expect_s3_class(gen, "tfdistributed_generator_dataset")
  expect_true(is_generator_dataset(gen))
  expect_false(is_generator_dataset(1:3))
  expect_output(print(gen), "prefetch 4.*called with: worker_index, num_workers")
})

test_that("an R generator trains under the default strategy and is told its worker", {
  skip_if_no_backend()
  digits <- digits_data()
  record <- new.env()
  model <- digits_model()
  history <- fit_distributed(model, dataset_from_generator(
    digits_batches(digits$train$x, digits$train$y, record = record)), epochs = 4)
  expect_length(history$metrics$loss, 4)
  expect_lt(history$metrics$loss[[4]], history$metrics$loss[[1]])
  expect_identical(record$told, c(0L, 1L))
  result <- evaluate_distributed(model, dataset_from_generator(
    digits_batches(digits$test$x, digits$test$y)))
  expect_equal(result[["accuracy"]],
               evaluate_distributed(model, digits$test$x, digits$test$y)[["accuracy"]],
               tolerance = 1e-6)
})

test_that("an endless generator trains and evaluates with steps", {
  skip_if_no_backend()
  digits <- digits_data()
  endless <- function() {
    rows <- sample(dim(digits$train$x)[1], 32L)
    list(digits$train$x[rows, , , , drop = FALSE], digits$train$y[rows])
  }
  model <- digits_model()
  history <- fit_distributed(model, dataset_from_generator(endless), epochs = 2,
                             steps_per_epoch = 10)
  expect_length(history$metrics$loss, 2)
  result <- evaluate_distributed(model, dataset_from_generator(endless), steps = 5)
  expect_named(result, c("accuracy", "loss"), ignore.order = TRUE)
})

test_that("mirrored and central_storage train from a generator with steps_per_epoch", {
  skip_if_no_backend()
  digits <- digits_data()
  for (kind in c("mirrored", "central_storage")) {
    strategy <- test_strategy(kind)
    with(strategy$scope(), model <- digits_model())
    gen <- dataset_from_generator(digits_batches(digits$train$x, digits$train$y))
    expect_error(fit_distributed(model, gen, epochs = 1), "needs `steps_per_epoch`",
                 class = "tfdistributed_generator_error")
    history <- fit_distributed(model, gen, epochs = 3, steps_per_epoch = 22)
    expect_lt(history$metrics$loss[[3]], history$metrics$loss[[1]])
    test_gen <- dataset_from_generator(digits_batches(digits$test$x, digits$test$y))
    expect_error(evaluate_distributed(model, test_gen), "needs `steps`",
                 class = "tfdistributed_generator_error")
    # 450 test images are 8 batches: with steps, exactly the examples the arrays give.
    expect_equal(evaluate_distributed(model, test_gen, steps = 8)[["accuracy"]],
                 evaluate_distributed(model, digits$test$x, digits$test$y)[["accuracy"]],
                 tolerance = 1e-6)
  }
})

test_that("an error in the generator stops training with the generator's message", {
  skip_if_no_backend()
  digits <- digits_data()
  model <- digits_model()
  gen <- dataset_from_generator(digits_batches(digits$train$x, digits$train$y, fail_at = 10))
  started <- Sys.time()
  err <- expect_error(fit_distributed(model, gen, epochs = 100),
                      class = "tfdistributed_generator_error")
  expect_lt(as.numeric(difftime(Sys.time(), started, units = "secs")), 20)
  expect_match(conditionMessage(err), "failed on call 10 \\(after 9 batches\\): cannot read chunk 10")
  expect_identical(conditionMessage(err$parent), "cannot read chunk 10")
  threads <- vapply(reticulate::import("threading")$enumerate(), function(t) t$name, "")
  expect_false("tfdistributed-training" %in% threads)
})

test_that("a batch of the wrong type or shape names the expected signature", {
  skip_if_no_backend()
  model <- digits_model()
  expect_error(fit_distributed(model, dataset_from_generator(function() matrix(1, 2, 2))),
               "Batch 1 is matrix .*not list\\(x, y\\)", class = "tfdistributed_generator_error")
  calls <- 0L
  shrinking <- function() {
    calls <<- calls + 1L
    list(array(0, c(4, 8, 8, if (calls < 3) 1 else 2)), 0:3)
  }
  expect_error(fit_distributed(model, dataset_from_generator(shrinking), epochs = 1,
                               steps_per_epoch = 5),
               "Batch 3 does not match the first batch: expected x: float32 \\(None, 8, 8, 1\\)",
               class = "tfdistributed_generator_error")
  expect_error(fit_distributed(model, dataset_from_generator(function() NULL)),
               "returned NULL before any batch of pass 1", class = "tfdistributed_generator_error")
  expect_error(fit_distributed(model, dataset_from_generator(shrinking), batch_size = 64),
               "`batch_size` apply to arrays only", class = "tfdistributed_generator_error")
})

test_that("a data frame written as TFRecord shards reads back and trains", {
  skip_if_no_backend()
  digits <- digits_data()
  df <- data.frame(matrix(digits$train$x, nrow = dim(digits$train$x)[1]),
                   label = digits$train$y)
  dir <- tempfile("shards-")
  on.exit(unlink(dir, recursive = TRUE))
  paths <- write_dataset_shards(df, dir, num_shards = 2)
  expect_identical(basename(paths), c("part-00000-of-00002.tfrecord", "part-00001-of-00002.tfrecord"))
  files <- dataset_from_files(dir, label = "label", batch_size = 64)
  expect_identical(shard_policy(files), "file")
  expect_identical(check_sharding(files, num_shards = 2), "file")
  expect_error(check_sharding(files, num_shards = 3), "at least 3 files",
               class = "tfdistributed_sharding_error")
  model <- linear_model(64L)
  history <- fit_distributed(model, files, epochs = 2)
  expect_length(history$metrics$loss, 2)
  expect_error(dataset_from_files(dir, label = "nope", batch_size = 64), "No column 'nope'")
  expect_error(dataset_from_files(file.path(dir, "missing"), label = "label", batch_size = 64),
               "does not exist")
  expect_error(write_dataset_shards(list(a = 1), dir), "must be a data frame")
  expect_error(write_dataset_shards(data.frame(a = c(1, NA)), dir), "contains NA")
})

test_that("an interrupt while R serves the generator stops training and its thread", {
  skip_if_no_backend()
  # A real SIGINT needs a process of its own: this one runs the test suite.
  script <- tempfile(fileext = ".R")
  on.exit(unlink(script))
  writeLines(c(
    "library(tfdistributed)",
    "options(tfdistributed.verbose = 0L)",
    "calls <- 0",
    "endless <- function() {",
    "  calls <<- calls + 1",
    "  if (calls == 30) tools::pskill(Sys.getpid(), tools::SIGINT)",
    "  list(array(runif(32 * 4), c(32, 4)), runif(32))",
    "}",
    "model <- keras$Sequential(list(keras$Input(shape = input_shape(4)), keras$layers$Dense(1L)))",
    "model$compile(optimizer = 'sgd', loss = 'mse')",
    "outcome <- tryCatch(fit_distributed(model, dataset_from_generator(endless), epochs = 10000,",
    "                                    steps_per_epoch = 100), interrupt = function(c) 'interrupted')",
    "threads <- vapply(reticulate::import('threading')$enumerate(), function(t) t$name, '')",
    "cat('OUTCOME', outcome, calls, paste(threads, collapse = ','), '\\n')"
  ), script)
  out <- system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = FALSE,
                 timeout = 180)
  line <- grep("^OUTCOME", out, value = TRUE)
  expect_length(line, 1)
  parts <- strsplit(line, " ")[[1]]
  expect_identical(parts[[2]], "interrupted")
  expect_lte(as.integer(parts[[3]]), 30 + 8)  # at most a prefetch of batches after it
  expect_identical(parts[[4]], "MainThread")
})
