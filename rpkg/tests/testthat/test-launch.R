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

test_that("a launched job's history is fit_distributed()'s kind: it prints, plots and has rows", {
  # As the backend hands it over: Keras' History.history, a metric missing in an epoch as NULL.
  history <- new_history(list(loss = list(0.9, 0.5, 0.25), val_loss = list(1, NULL, 0.5)),
                         list(0L, 1L, 2L))
  expect_s3_class(history, "tfdistributed_history")
  expect_identical(history$epochs, 1:3)
  expect_identical(history$metrics$val_loss, c(1, NA, 0.5))
  df <- as.data.frame(history)
  expect_identical(nrow(df), 6L)
  expect_identical(df$data, rep(c("training", "validation"), each = 3))
  expect_output(print(history), "3 epochs")
  path <- withr::local_tempfile(fileext = ".png")
  grDevices::png(path)
  expect_invisible(plot(history))
  grDevices::dev.off()
  expect_gt(file.size(path), 0)
  empty <- new_history(list(), list())
  expect_identical(nrow(as.data.frame(empty)), 0L)
})

test_that("the per-task records become a data frame, NA where nothing was measured", {
  workers <- workers_frame(list(
    list(task = "worker 0", steps = 46L, examples_per_second = 900.5, median_step_seconds = 0.03,
         wait_seconds = 0.01, outside_seconds = 0.002, restarts = 0L, straggler = FALSE,
         straggler_epochs = list()),
    list(task = "worker 1", steps = 46L, examples_per_second = NULL, median_step_seconds = NULL,
         wait_seconds = NULL, outside_seconds = NULL, restarts = 0L, straggler = TRUE,
         straggler_epochs = list(1L, 2L))))
  expect_identical(workers$task, c("worker 0", "worker 1"))
  expect_identical(workers$examples_per_second, c(900.5, NA))
  expect_identical(workers$steps, c(46L, 46L))
  expect_identical(workers$straggler, c(FALSE, TRUE))
  expect_identical(workers$straggler_epochs, list(integer(), 1:2))
  expect_identical(nrow(workers_frame(list())), 0L)
  job <- structure(list(
    tasks = data.frame(task_type = "worker", task_index = 0:1, returncode = 0L),
    seconds = 12, restarts = 0L, attempts = attempts_frame(list(list(attempt = 0L))),
    workers = workers, stragglers = "worker 1",
    history = new_history(list(loss = list(1, 0.5)), list(0L, 1L))), class = "tfdistributed_launch")
  shown <- capture.output(print(job))
  expect_true(any(grepl("^ +worker 0 +46 +900 ", shown)), info = paste(shown, collapse = "\n"))
  expect_true(any(grepl("stragglers: worker 1", shown)))
  expect_true(any(grepl("history: 2 epochs", shown)))
})

test_that("progress = TRUE is a redrawn line only in an interactive session", {
  skip_if_no_backend()
  expect_identical(with_progress_mode(watching())$progress, if (interactive()) "live" else "lines")
  expect_identical(with_progress_mode(watching(progress = TRUE))$progress,
                   if (interactive()) "live" else "lines")
  expect_identical(with_progress_mode(watching(progress = FALSE))$progress, FALSE)
  expect_identical(with_progress_mode(watching(progress = "live"))$progress, "live")
})

test_that("the console writer redraws a live line and ends it before the next one", {
  console <- console_writer()
  shown <- capture.output({
    console$write("[worker 0] starting")
    console$write("\r[tfdistributed] epoch 1/2 - 3/10")
    console$write("\r[tfdistributed] epoch 1/2 - 9/10")
    console$write("[tfdistributed] worker 1 is a straggler")
    console$write("\r[tfdistributed] epoch 2/2 - 1/10")
    console$close()
  })
  expect_identical(shown, c("[worker 0] starting",
                            "\r[tfdistributed] epoch 1/2 - 3/10\r[tfdistributed] epoch 1/2 - 9/10",
                            "[tfdistributed] worker 1 is a straggler",
                            "\r[tfdistributed] epoch 2/2 - 1/10"))
})

test_that("the watch's arguments are checked, in R or by the backend", {
  skip_if_no_backend()
  expect_error(watching(progress = "bars"), "`progress` must be", class = "tfdistributed_error")
  expect_error(watching(stall_warning = "soon"), "`stall_warning` must be a single number",
               class = "tfdistributed_error")
  expect_error(watching(stall_timeout = 0), "`stall_timeout` must be a number of seconds",
               class = "tfdistributed_error")
  # The error is the call the user wrote.
  err <- expect_error(watching(stall_timeout = 0))
  expect_identical(conditionCall(err), quote(watching(stall_timeout = 0)))
})

test_that("each option object is built from the arguments given, the others Python's defaults", {
  skip_if_no_backend()
  tfd <- backend()
  expect_identical(restarts()$max_restarts, tfd$Restarts()$max_restarts)
  expect_identical(watching()$stall_warning, tfd$Watch()$stall_warning)
  # NULL is a value when it is given: no stall warning at all.
  expect_null(watching(stall_warning = NULL)$stall_warning)
  policy <- restarts(max_restarts = 3, join_timeout = 20)
  expect_identical(c(policy$max_restarts, policy$join_timeout), c(3, 20))
  expect_identical(reticulate::py_repr(policy), "Restarts(max_restarts=3, join_timeout=20.0)")
  shape <- scaling(workers = 3, min_workers = 2)
  expect_identical(reticulate::py_repr(shape), "Scaling(workers=3, min_workers=2)")
  expect_identical(scaling()$workers, tfd$Scaling()$workers)
  expect_identical(scaling(cluster = local_cluster(2, ps = 1, chief = TRUE))$ps, 1L)
  expect_error(scaling(workers = 2, ps = 1), "scaling\\(workers = 2, ps = 1, chief = TRUE\\)",
               class = "tfdistributed_cluster_config_error")
  expect_error(scaling(workers = 2.5), "`workers` must be a single whole number",
               class = "tfdistributed_error")
  expect_error(launch_cluster("x.R", scaling(workers = 2), workers = 3),
               "`workers` and `scaling` were both given", class = "tfdistributed_error")
  engine <- slurm(partition = "cpu", time = "02:00:00", sbatch_args = "--gres=gpu:1")
  expect_identical(reticulate::py_repr(engine),
                   "Slurm(partition='cpu', time='02:00:00', sbatch_args=('--gres=gpu:1',))")
  expect_identical(ray(ray_options = list(num_cpus = 2))$ray_options, list(num_cpus = 2))
  expect_identical(local_hosts(hosts = list("10.77.0.2" = "ssh"))$hosts,
                   list("10.77.0.2" = "ssh"))
  expect_error(restarts(max_restarts = 1.5), "`max_restarts` must be a single whole number",
               class = "tfdistributed_error")
  expect_error(slurm(time = "two hours"), "`time` must be SLURM's --time",
               class = "tfdistributed_argument_type_error")
  expect_error(slurm(nodes = 2), "unexpected keyword argument", class = "tfdistributed_error")
  expect_error(launch_cluster("x.R", engine = "slurm"), "E.g. engine = slurm\\(\\)",
               class = "tfdistributed_argument_type_error")
})

test_that("an elastic job's sizes become a data frame and print as changes", {
  sizes <- sizes_frame(list(
    list(attempt = 0L, workers = 3L, wanted = 3L, why = "start", places = list(),
         position = NULL, seconds = 0.1),
    list(attempt = 1L, workers = 2L, wanted = 3L, why = "lost", places = list("10.77.0.4"),
         position = 18L, seconds = 40.7),
    list(attempt = 2L, workers = 3L, wanted = 3L, why = "back", places = list("10.77.0.4"),
         position = 54L, seconds = 55.7)))
  expect_identical(sizes$workers, c(3L, 2L, 3L))
  expect_identical(sizes$why, c("start", "lost", "back"))
  expect_identical(sizes$places, c("", "10.77.0.4", "10.77.0.4"))
  expect_identical(sizes$position, c(NA, 18L, 54L))
  expect_identical(nrow(sizes_frame(list())), 0L)
  job <- structure(list(
    tasks = data.frame(task_type = "worker", task_index = 0:2, returncode = 0L),
    seconds = 80, restarts = 2L, attempts = attempts_frame(list(list(attempt = 0L))),
    workers = workers_frame(list()), stragglers = character(), sizes = sizes,
    history = new_history(list(), list())), class = "tfdistributed_launch")
  shown <- capture.output(print(job))
  expect_true(any(grepl("from attempt 2: 2 of 3 workers \\(lost: 10.77.0.4\\)", shown)),
              info = paste(shown, collapse = "\n"))
  expect_true(any(grepl("from attempt 3: 3 of 3 workers \\(back: 10.77.0.4\\)", shown)))
})

test_that("min_workers needs hosts that can be lost, and a whole number", {
  skip_if_no_backend()
  script <- withr::local_tempfile(fileext = ".R")
  writeLines("invisible(NULL)", script)
  expect_error(launch_cluster(script, scaling(workers = 2, min_workers = 1)),
               "runs on this machine only.*engine = local_hosts\\(hosts = \\.\\.\\.\\)",
               class = "tfdistributed_argument_type_error")
  expect_error(scaling(min_workers = 1.5), "min_workers", class = "tfdistributed_error")
})

test_that("the watch's echo and on_output say where the job's lines go", {
  skip_if_no_backend()
  script <- withr::local_tempfile(fileext = ".R")
  writeLines("cat('hello from', Sys.getenv('TFDISTRIBUTED_ATTEMPT'), '\\n')", script)
  seen <- character()
  shown <- capture.output(job <- launch_cluster(
    script, workers = 1, timeout = 120,
    watch = watching(echo = FALSE, progress = FALSE,
                     on_output = function(line) seen <<- c(seen, line))))
  expect_identical(shown, character())
  expect_true("[worker 0] hello from 0 " %in% seen, info = paste(seen, collapse = "\n"))
  shown <- capture.output(launch_cluster(script, workers = 1, timeout = 120,
                                         watch = watching(progress = FALSE)))
  expect_true("[worker 0] hello from 0 " %in% shown, info = paste(shown, collapse = "\n"))
  expect_error(watching(on_output = "print"), "`on_output` must be a function",
               class = "tfdistributed_error")
})

test_that("warm_start forks a Python script's tasks from a warm Python, and must be a flag", {
  skip_if_no_backend()
  script <- withr::local_tempfile(fileext = ".py")
  writeLines(c("import json, os",
               "print('index', json.loads(os.environ['TF_CONFIG'])['task']['index'], os.getppid())"),
             script)
  job <- launch_cluster(script, workers = 2, engine = local_hosts(warm_start = TRUE),
                        watch = watching(progress = FALSE, echo = FALSE))
  expect_identical(job$tasks$returncode, c(0L, 0L))
  # Both tasks came from the one warm server of this R session: the same parent, not R's Python.
  parents <- vapply(job$output, function(out) {
    line <- grep("^index ", out, value = TRUE)
    as.integer(strsplit(line, " ")[[1]][[3]])
  }, 0L)
  expect_identical(length(unique(parents)), 1L)
  expect_false(parents[[1]] == Sys.getpid())
  expect_error(local_hosts(warm_start = "yes"), "warm_start", class = "tfdistributed_error")
})

test_that("warm_start forks an R script's tasks from a warm Rscript, run as Rscript runs them", {
  skip_if_no_backend()
  script <- withr::local_tempfile(fileext = ".R")
  writeLines(c("args <- commandArgs(trailingOnly = TRUE)",
               "cat('args', args, '\n')",
               "cat('parent', reticulate::import('os')$getppid(), '\n')",
               "if (args[[1]] == 'fail') stop('on purpose')"), script)
  job <- launch_cluster(script, workers = 2, args = c("ok", "b c"),
                        engine = local_hosts(warm_start = TRUE),
                        watch = watching(progress = FALSE, echo = FALSE))
  expect_identical(job$tasks$returncode, c(0L, 0L))
  lines <- unlist(job$output)
  expect_identical(sum(lines == "args ok b c "), 2L)
  parents <- as.integer(sub("^parent ([0-9]+) *$", "\\1", grep("^parent ", lines, value = TRUE)))
  # One R server of this session forked both (not this R, not its Python).
  expect_identical(length(unique(parents)), 1L)
  expect_false(parents[[1]] == Sys.getpid())
  # An error ends the task as Rscript ends it: the message, "Execution halted", status 1.
  err <- expect_error(launch_cluster(script, workers = 1, args = "fail",
                                     engine = local_hosts(warm_start = TRUE),
                                     watch = watching(progress = FALSE, echo = FALSE)),
                      "exited with status 1", class = "tfdistributed_error")
})

test_that("the shapes and engines the articles launch make a plan, checked before anything runs", {
  skip_if_no_backend()
  # The articles' calls that need a SLURM or Ray cluster, GPUs or root run only when the site is
  # built; their objects are checked here, as launch_cluster() checks them before it starts.
  plan <- function(shape, engine = local_hosts(), heal = restarts()) {
    with_backend(backend()$engines$JobPlan(target = "train.R", scaling = shape, engine = engine,
                                           restarts = heal, watch = watching()))
  }
  bed <- paste0("10.77.0.", 2:4)
  hosts <- stats::setNames(lapply(seq_along(bed), function(i) c("ip", "netns", "exec",
                                                               paste0("ns", i))), bed)
  elastic <- plan(scaling(min_workers = 2, cluster = tf_cluster(workers = paste0(bed, ":2222"))),
                  engine = local_hosts(hosts = hosts), heal = restarts(join_timeout = 15))
  expect_identical(c(elastic$scaling$workers, elastic$scaling$min_workers), c(3L, 2L))
  expect_identical(plan(scaling(workers = 4, min_workers = 2), slurm())$engine$name, "slurm")
  on_gpus <- plan(scaling(workers = 4, gpus_per_task = 1),
                  slurm(partition = "gpu", time = "02:00:00"))
  expect_identical(on_gpus$scaling$gpus_per_task, 1L)
  expect_identical(plan(scaling(workers = 4, gpus_per_task = 1), ray())$engine$name, "ray")
  expect_identical(plan(scaling(workers = 2, ps = 2, chief = TRUE))$scaling$trainers, 2L)
  expect_error(plan(scaling(workers = 4, min_workers = 2)), "runs on this machine only",
               class = "tfdistributed_argument_type_error")
})
