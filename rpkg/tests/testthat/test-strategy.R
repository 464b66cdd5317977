kinds <- c("default", "one_device", "mirrored", "central_storage", "multi_worker_mirrored")

test_that("every local strategy kind is created by name and prints kind, replicas, devices", {
  skip_if_no_backend()
  replicas <- c(default = 1L, one_device = 1L, mirrored = 2L, central_storage = 2L,
                multi_worker_mirrored = 1L)
  for (kind in kinds) {
    strategy <- distribute_strategy(kind)
    expect_s3_class(strategy, "tfdistributed_strategy")
    info <- strategy_info(strategy)
    expect_identical(info$kind, kind)
    expect_identical(as.integer(info$num_replicas), replicas[[kind]])
    printed <- capture.output(print(strategy))
    expect_match(printed[[1]], paste0("<tfdistributed strategy: ", kind, ">"), fixed = TRUE)
    expect_match(printed[[2]], paste("replicas in sync:", replicas[[kind]]), fixed = TRUE)
    expect_match(printed[[3]], "devices:.*CPU:0")
  }
})

test_that("names are case-insensitive and class names are aliases", {
  skip_if_no_backend()
  expect_identical(strategy_info(distribute_strategy("MirroredStrategy"))$kind, "mirrored")
  expect_identical(strategy_info(distribute_strategy("One-Device"))$kind, "one_device")
  expect_identical(strategy_info(distribute_strategy("auto"))$kind, "default")
})

test_that("explicit devices are accepted as a character vector", {
  skip_if_no_backend()
  strategy <- distribute_strategy("mirrored", devices = c("/cpu:0", "/cpu:1"))
  expect_identical(as.integer(strategy$num_replicas_in_sync), 2L)
  one <- distribute_strategy("one_device", devices = "/cpu:1")
  expect_match(strategy_info(one)$devices, "CPU:1")
})

test_that("wrong strategy arguments are R errors with our message", {
  skip_if_no_backend()
  expect_error(distribute_strategy("mirroed"), "Unknown strategy 'mirroed'.*Did you mean 'mirrored'",
               class = "tfdistributed_strategy_error")
  expect_error(distribute_strategy(3), "`name` must be a single non-empty string", class = "tfdistributed_error")
  expect_error(distribute_strategy("mirrored", num_cpu_devices = 1.5), "whole number", class = "tfdistributed_error")
  expect_error(distribute_strategy("mirrored", num_cpu_devices = 4), "already initialized with 2",
               class = "tfdistributed_strategy_error")
  expect_error(distribute_strategy("one_device", devices = c("/cpu:0", "/cpu:1")), "exactly one device",
               class = "tfdistributed_error")
  expect_error(distribute_strategy("parameter_server"), "needs a cluster", class = "tfdistributed_error")
  expect_error(distribute_strategy("mirrored", devices = 1), "`devices` for 'mirrored' must be a device string or a list of them",
               class = "tfdistributed_error")
  expect_error(distribute_strategy("mirrored", bogus = 1), "Unknown argument", class = "tfdistributed_error")
  expect_error(distribute_strategy("mirrored", join_timeout = "soon"), "`join_timeout` must be a single number",
               class = "tfdistributed_error")
  expect_error(distribute_strategy("mirrored", join_timeout = 0), "`join_timeout` must be a number of seconds > 0",
               class = "tfdistributed_error")
  # The message is ours alone: no Python traceback, no reticulate hint.
  message <- tryCatch(distribute_strategy("nope"), error = conditionMessage)
  expect_false(grepl("Traceback|py_last_error", message))
})

test_that("with(strategy$scope(), ...) works for every kind; models built inside live on", {
  skip_if_no_backend()
  for (kind in kinds) {
    strategy <- distribute_strategy(kind)
    with(strategy$scope(), {
      model <- linear_model()
    })
    expect_true(exists("model", inherits = FALSE))
    expect_identical(strategy_info(model$distribute_strategy)$kind, kind)
    prediction <- model$predict(matrix(1, 2, 3), verbose = 0L)
    expect_identical(dim(prediction), c(2L, 1L))
    rm(model)
  }
})

test_that("global_batch_size() multiplies by the replicas in sync", {
  skip_if_no_backend()
  expect_identical(global_batch_size(32, distribute_strategy("mirrored")), 64L)
  expect_identical(global_batch_size(32, distribute_strategy("one_device")), 32L)
  expect_error(global_batch_size(32.5), "whole number", class = "tfdistributed_error")
  expect_error(global_batch_size(32, strategy = "mirrored"), "must be a tf.distribute.Strategy.*distribute_strategy",
               class = "tfdistributed_error")
})

test_that("gradient_compression marks a multi-worker strategy and shows in its print", {
  skip_if_no_backend()
  strategy <- distribute_strategy("multi_worker_mirrored", gradient_compression = "fp16")
  expect_identical(strategy_info(strategy)$gradient_compression, "fp16")
  expect_true(any(grepl("gradients sent:   fp16", capture.output(print(strategy)), fixed = TRUE)))
  expect_null(strategy_info(distribute_strategy("multi_worker_mirrored"))$gradient_compression)
})

test_that("bytes_per_pack packs a multi-worker strategy's gradients and shows in its print", {
  skip_if_no_backend()
  strategy <- distribute_strategy("multi_worker_mirrored", bytes_per_pack = 4e6)
  expect_identical(strategy_info(strategy)$bytes_per_pack, 4000000L)
  expect_true(any(grepl("gradient packs:   4,000,000 bytes", capture.output(print(strategy)),
                        fixed = TRUE)))
  auto <- distribute_strategy("multi_worker_mirrored")
  expect_null(strategy_info(auto)$bytes_per_pack)
  expect_true(any(grepl("gradient packs:   auto", capture.output(print(auto)), fixed = TRUE)))
  one <- distribute_strategy("multi_worker_mirrored", bytes_per_pack = 0)
  expect_identical(strategy_info(one)$bytes_per_pack, 0L)
  expect_error(distribute_strategy("mirrored", bytes_per_pack = 4e6),
               "`bytes_per_pack` applies to 'multi_worker_mirrored'", class = "tfdistributed_error")
  expect_error(distribute_strategy("multi_worker_mirrored", bytes_per_pack = 4.5),
               "`bytes_per_pack` must be a single whole number", class = "tfdistributed_error")
})

test_that("powersgd() marks a multi-worker strategy; R doubles count; bad options are named", {
  skip_if_no_backend()
  strategy <- distribute_strategy("multi_worker_mirrored",
                                  gradient_compression = powersgd(rank = 2, warmup_steps = 100))
  info <- strategy_info(strategy)
  expect_identical(info$gradient_compression, "powersgd")
  expect_identical(info$powersgd$rank, 2L)
  expect_identical(info$powersgd$warmup_steps, 100L)
  expect_true(any(grepl("gradients sent:   powersgd (rank 2, after 100 steps in 32 bits)",
                        capture.output(print(strategy)), fixed = TRUE)))
  defaults <- distribute_strategy("multi_worker_mirrored", gradient_compression = "powersgd")
  expect_identical(strategy_info(defaults)$powersgd$rank, 4L)
  expect_identical(strategy_info(defaults)$powersgd$warmup_steps, 1000L)
  expect_error(powersgd(rank = 0), "`rank` must be >= 1", class = "tfdistributed_error")
  expect_error(powersgd(rank = 2.5), "`rank` must be a single whole number",
               class = "tfdistributed_error")
  expect_error(powersgd(warmup_steps = -1), "`warmup_steps` must be >= 0",
               class = "tfdistributed_error")
  expect_error(powersgd(min_compression_rate = 0.5), "`min_compression_rate` must be a number >= 1",
               class = "tfdistributed_error")
  expect_error(powersgd(error_feedback = "yes"), "`error_feedback` must be TRUE or FALSE",
               class = "tfdistributed_error")
  expect_error(distribute_strategy("mirrored", gradient_compression = powersgd()),
               "`gradient_compression` applies to 'multi_worker_mirrored'",
               class = "tfdistributed_strategy_error")
  expect_error(distribute_strategy("mirrored", gradient_compression = "powersgd"),
               "`gradient_compression` applies to 'multi_worker_mirrored'",
               class = "tfdistributed_strategy_error")
})
