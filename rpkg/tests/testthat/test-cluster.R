test_that("tf_cluster() validates and normalizes a cluster", {
  skip_if_no_backend()
  cl <- tf_cluster(workers = c("10.0.0.1:2222", "10.0.0.2:2222"), ps = "10.0.0.3:2222",
                   chief = "10.0.0.4:2222")
  expect_s3_class(cl, "tfdistributed_cluster")
  expect_identical(names(cl), c("chief", "worker", "ps"))
  expect_identical(cl$worker, c("10.0.0.1:2222", "10.0.0.2:2222"))
  expect_output(print(cl), "worker:\\s+10.0.0.1:2222, 10.0.0.2:2222")
})

test_that("a one-worker cluster keeps its worker as a list in TF_CONFIG", {
  skip_if_no_backend()
  cfg <- tf_task_config(tf_cluster(workers = "127.0.0.1:2222"), "worker", 0)
  expect_identical(format(cfg), '{"cluster": {"worker": ["127.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}}')
})

test_that("malformed clusters are R errors naming the field and the fix", {
  skip_if_no_backend()
  expect_error(tf_cluster(workers = c("127.0.0.1:2222", "127.0.0.1")), 'TF_CONFIG\\["cluster"\\]\\["worker"\\]\\[1\\].*is not "host:port"',
               class = "tfdistributed_cluster_config_error")
  expect_error(tf_cluster(workers = c("127.0.0.1:2222", "127.0.0.1:2222")), "every task needs its own host:port",
               class = "tfdistributed_error")
  expect_error(tf_cluster(workers = character(0), ps = "127.0.0.1:2", chief = "127.0.0.1:3"),
               'has "ps" tasks but no "worker"', class = "tfdistributed_cluster_config_error")
  expect_error(tf_cluster(workers = 2222), "character vector", class = "tfdistributed_error")
  expect_error(tf_cluster(), 'no "worker" or "chief" task: list at least one worker',
               class = "tfdistributed_cluster_config_error")
  expect_error(tf_cluster(workers = "127.0.0.1:1", chief = c("127.0.0.1:2", "127.0.0.1:3")),
               "a cluster has at most one chief", class = "tfdistributed_cluster_config_error")
  expect_error(tf_task_config(list(worker = "127.0.0.1:1"), "worker", 1), "out of range",
               class = "tfdistributed_error")
  expect_error(tf_task_config(list(wroker = "127.0.0.1:1"), "worker", 0), "Did you mean 'worker'",
               class = "tfdistributed_error")
  expect_error(tf_task_config(list(worker = "127.0.0.1:1"), "worker", 0.5), "whole number",
               class = "tfdistributed_error")
  expect_error(local_cluster(workers = 2, ps = 1), "chief = TRUE", class = "tfdistributed_error")
  expect_error(local_cluster(workers = -1), "`workers` must be >= 0", class = "tfdistributed_error")
})

test_that("local_cluster() picks distinct loopback ports", {
  skip_if_no_backend()
  cl <- local_cluster(workers = 2, ps = 1, chief = TRUE)
  expect_identical(lengths(unclass(cl)), c(chief = 1L, worker = 2L, ps = 1L))
  addresses <- unlist(cl)
  expect_true(all(startsWith(addresses, "127.0.0.1:")))
  expect_false(anyDuplicated(addresses) > 0)
  with_evaluator <- local_cluster(workers = 1, evaluator = TRUE)
  expect_identical(names(with_evaluator), c("worker", "evaluator"))
})

test_that("set_tf_config() exports TF_CONFIG to R and Python; get/clear round-trip", {
  skip_if_no_backend()
  withr::defer(clear_tf_config())
  cl <- local_cluster(workers = 2)
  set <- set_tf_config(cl, "worker", 1)
  expect_identical(Sys.getenv("TF_CONFIG"), format(set))
  os <- reticulate::import("os")
  expect_identical(os$environ[["TF_CONFIG"]], Sys.getenv("TF_CONFIG"))
  got <- get_tf_config()
  expect_identical(got$task, list(type = "worker", index = 1L))
  expect_identical(got$cluster$worker, cl$worker)
  expect_identical(num_workers(), 2L)
  expect_false(is_chief())
  clear_tf_config()
  expect_null(get_tf_config())
  expect_identical(num_workers(), 1L)
  expect_true(is_chief())
})

test_that("a whole config, as a list or JSON, can be set", {
  skip_if_no_backend()
  withr::defer(clear_tf_config())
  config <- list(cluster = list(worker = c("127.0.0.1:5000", "127.0.0.1:5001")),
                 task = list(type = "worker", index = 0))
  set <- set_tf_config(config = config)
  expect_identical(set$task$index, 0L)
  set2 <- set_tf_config(config = format(set))
  expect_identical(format(set2), format(set))
  expect_error(set_tf_config(config = "{not json"), "not valid JSON", class = "tfdistributed_error")
  expect_error(set_tf_config(), 'needs either a whole `config` or a `cluster`.*set_tf_config\\(local_cluster\\(2\\), "worker", 0\\)',
               class = "tfdistributed_error")
  expect_error(set_tf_config(local_cluster(2), config = format(set)), "not both",
               class = "tfdistributed_argument_type_error")
})

test_that("a TF_CONFIG set with Sys.setenv() after Python started is seen by the backend", {
  skip_if_no_backend()
  withr::defer(clear_tf_config())
  cl <- local_cluster(workers = 3)
  Sys.setenv(TF_CONFIG = format(tf_task_config(cl, "worker", 2)))
  expect_identical(get_tf_config()$task$index, 2L)
  expect_identical(num_workers(), 3L)
  Sys.setenv(TF_CONFIG = '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "chief"}}')
  expect_error(get_tf_config(), "no 'chief' task", class = "tfdistributed_error")
})

test_that("a parameter-server cluster without a chief has a coordinator without a task", {
  skip_if_no_backend()
  cl <- tf_cluster(workers = c("127.0.0.1:5000", "127.0.0.1:5001"), ps = "127.0.0.1:5002")
  expect_identical(names(cl), c("worker", "ps"))
  coordinator <- tf_task_config(cl, task_type = NULL)
  expect_null(coordinator$task)
  expect_output(print(coordinator), "no task: the coordinator")
  expect_true(is_chief(coordinator))
  expect_identical(num_workers(coordinator), 2L)
  expect_error(tf_task_config(cl, "chief", 0), "has no \"task\"", class = "tfdistributed_cluster_config_error")
})

# TF_CONFIG text exactly as jsonlite::toJSON() writes it (tests/r/test_rpy2.py checks these
# strings against jsonlite itself): with auto_unbox = TRUE a one-task job is a bare string,
# without it every scalar is a one-element array. TensorFlow crashes on both.
unboxed <- '{"cluster":{"worker":"127.0.0.1:2222"},"task":{"type":"worker","index":0}}'
boxed <- '{"cluster":{"worker":["127.0.0.1:2222","127.0.0.1:2223"]},"task":{"type":["worker"],"index":[1]}}'

test_that("TF_CONFIG written with jsonlite is normalized for TensorFlow, in R's environment too", {
  skip_if_no_backend()
  withr::defer(clear_tf_config())
  Sys.setenv(TF_CONFIG = unboxed)
  expect_identical(get_tf_config()$cluster$worker, "127.0.0.1:2222")
  # The rewrite happened in the process environment, which R and TensorFlow share.
  expect_identical(Sys.getenv("TF_CONFIG"),
                   '{"cluster": {"worker": ["127.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}}')
  resolver <- reticulate::import("tensorflow")$distribute$cluster_resolver$TFConfigClusterResolver()
  expect_identical(resolver$cluster_spec()$as_dict()$worker, "127.0.0.1:2222")
  Sys.setenv(TF_CONFIG = boxed)
  expect_identical(get_tf_config()$task, list(type = "worker", index = 1L))
  expect_identical(num_workers(), 2L)
  expect_false(is_chief())
})

test_that("Vertex AI / AI Platform keys are kept and 'master' is the chief", {
  skip_if_no_backend()
  withr::defer(clear_tf_config())
  Sys.setenv(TF_CONFIG = paste0(
    '{"cluster": {"master": ["cmle-training-master-0:2222"]}, "environment": "cloud", ',
    '"task": {"type": "master", "index": 0, "trial": "2", "cloud": "c"}, ',
    '"job": {"scale_tier": "BASIC"}}'))
  config <- get_tf_config()
  expect_identical(config$cluster$chief, "cmle-training-master-0:2222")
  expect_identical(config$task$type, "chief")
  expect_identical(config$task$trial, "2")
  expect_identical(config$job$scale_tier, "BASIC")
  expect_true(is_chief())
  # A one-replica job: "auto" needs no cluster strategy.
  expect_identical(strategy_info(distribute_strategy("auto"))$kind, "default")
  set <- set_tf_config(config = Sys.getenv("TF_CONFIG"))
  expect_identical(set$environment, "cloud")
  expect_match(Sys.getenv("TF_CONFIG"), '"job": {"scale_tier": "BASIC"}', fixed = TRUE)
})

test_that("an empty TF_CONFIG is an error, as it is for TensorFlow", {
  skip_if_no_backend()
  withr::defer(clear_tf_config())
  Sys.setenv(TF_CONFIG = "")
  expect_error(get_tf_config(), "set but empty.*Sys.unsetenv", class = "tfdistributed_cluster_config_error")
  expect_error(distribute_strategy("auto"), "set but empty", class = "tfdistributed_cluster_config_error")
  Sys.unsetenv("TF_CONFIG")
  expect_null(get_tf_config())
})
