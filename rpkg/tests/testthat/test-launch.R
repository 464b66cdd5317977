test_that("launch_cluster() runs an R script on 2 workers; output reaches R's stdout", {
  skip_if_no_backend()
  script <- withr::local_tempfile(fileext = ".R")
  writeLines(c(
    "library(tfdistributed)",
    "config <- get_tf_config()",
    "cat('task', config$task$type, config$task$index, 'of', num_workers(), '\\n')"
  ), script)
  output <- capture.output(result <- launch_cluster(script, workers = 2, timeout = 120))
  expect_s3_class(result, "tfdistributed_launch")
  expect_identical(result$tasks$returncode, c(0L, 0L))
  expect_true("[worker 0] task worker 0 of 2 " %in% output)
  expect_true("[worker 1] task worker 1 of 2 " %in% output)
  expect_identical(result$output[["worker 1"]], "task worker 1 of 2 ")
  expect_output(print(result), "worker 1: exit 0")
})

test_that("a failing task is an R error naming the task and its output", {
  skip_if_no_backend()
  script <- withr::local_tempfile(fileext = ".R")
  writeLines("if (Sys.getenv('TF_CONFIG') != '' && grepl('\"index\": 1', Sys.getenv('TF_CONFIG'))) stop('boom on purpose')", script)
  expect_error(capture.output(launch_cluster(script, workers = 2, timeout = 120)),
               "Task worker 1 exited with status 1.*boom on purpose", class = "tfdistributed_launch_error")
  expect_error(launch_cluster("no/such/script.R"), "does not exist", class = "tfdistributed_error")
  expect_error(launch_cluster(script, workers = 0), ">= 1", class = "tfdistributed_error")
  expect_error(launch_cluster(script, env = c("x")), "named character vector", class = "tfdistributed_error")
})

test_that("the same R training script runs unchanged on 3 workers, in lock-step", {
  skip_if_no_backend()
  script <- withr::local_tempfile(fileext = ".R")
  writeLines(c(
    "library(tfdistributed)",
    "strategy <- distribute_strategy('auto')",
    "digits <- digits_data()",
    "keras$utils$set_random_seed(1L)",
    "with(strategy$scope(), {",
    "  model <- keras$Sequential(list(keras$Input(shape = input_shape(8, 8, 1)), keras$layers$Flatten(),",
    "                                 keras$layers$Dense(10L)))",
    "  model$compile(optimizer = 'adam', metrics = list('accuracy'),",
    "                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))",
    "})",
    "history <- fit_distributed(model, digits$train$x, digits$train$y, epochs = 2,",
    "                           batch_size = global_batch_size(32, strategy), verbose = 0)",
    "cat(sprintf('kind=%s replicas=%d final_loss=%.6f\\n', strategy_info(strategy)$kind,",
    "            strategy_info(strategy)$num_replicas, tail(history$metrics$loss, 1)))"
  ), script)
  output <- capture.output(result <- launch_cluster(script, workers = 3, timeout = 300))
  finals <- grep("final_loss", output, value = TRUE)
  expect_length(finals, 3)
  expect_match(finals, "kind=multi_worker_mirrored replicas=3")
  # All workers hold the same model: the same loss to the last printed digit.
  expect_length(unique(sub("^\\[worker [012]\\] ", "", finals)), 1)
})
