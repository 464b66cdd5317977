"""R generators and files from R, driven through rpy2 (R runs in this process; its reticulate
shares this interpreter and its 2 logical CPUs), plus real launched jobs: 2 workers each
streaming from their own R generator, and a parameter-server job reading sharded files.

The no-deadlock design is in rpkg/R/generators.R and pybackend/tfdistributed/r/feed.py.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time

import numpy as np
import pytest

from rsupport import ROOT, r_env

SCRIPTS = ROOT / "tests" / "r" / "scripts"

R_HELPERS = r"""
gen_digits <- digits_data()
gen_model <- function(strategy = distribute_strategy("default"), seed = 1L) {
  with(strategy$scope(), {
    keras$utils$set_random_seed(seed)
    model <- keras$Sequential(list(
      keras$Input(shape = input_shape(8, 8, 1)),
      keras$layers$Flatten(),
      keras$layers$Dense(64L, activation = "relu"),
      keras$layers$Dense(10L)
    ))
    model$compile(optimizer = "adam", metrics = list("accuracy"),
                  loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
  })
  model
}
# Batches of 64 in order, NULL at the end of each epoch; optionally fails or misbehaves.
gen_batches <- function(x = gen_digits$train$x, y = gen_digits$train$y, fail_at = Inf,
                        bad_at = Inf) {
  start <- 1
  calls <- 0
  function() {
    calls <<- calls + 1
    if (calls == fail_at) stop("disk on fire at call ", calls)
    if (start > dim(x)[1]) {
      start <<- 1
      return(NULL)
    }
    rows <- start:min(start + 63, dim(x)[1])
    start <<- start + 64
    if (calls == bad_at) return(list(x[rows, , , 1], y[rows]))
    list(x[rows, , , , drop = FALSE], y[rows])
  }
}
"""


@pytest.fixture(scope="module")
def gr(r):
    r(R_HELPERS)
    return r


def training_threads():
    return [t for t in threading.enumerate() if t.name == "tfdistributed-training" and t.is_alive()]


def test_default_strategy_trains_digits_to_090(gr):
    gr("""
      model <- gen_model()
      history <- fit_distributed(model, dataset_from_generator(gen_batches()), epochs = 15)
      test_gen <- dataset_from_generator(gen_batches(gen_digits$test$x, gen_digits$test$y))
      result <- evaluate_distributed(model, test_gen)
    """)
    assert len(gr("history$metrics$loss")) == 15
    assert gr("result[['accuracy']]")[0] >= 0.9
    # The same weights evaluated on arrays agree: the generator's pass covered the test set.
    arrays = gr("evaluate_distributed(model, gen_digits$test$x, gen_digits$test$y)[['accuracy']]")[0]
    assert arrays == pytest.approx(gr("result[['accuracy']]")[0], abs=1e-6)
    assert not training_threads()


@pytest.mark.slow  # R serving two replicas to 0.9
def test_mirrored_trains_digits_to_090_and_needs_steps_per_epoch(gr):
    gr("""
      mirrored <- distribute_strategy("mirrored")
      model <- gen_model(mirrored)
      refused <- tryCatch(fit_distributed(model, dataset_from_generator(gen_batches()), epochs = 1),
                          tfdistributed_generator_error = conditionMessage)
      history <- fit_distributed(model, dataset_from_generator(gen_batches()), epochs = 15,
                                 steps_per_epoch = 22)
    """)
    assert "needs `steps_per_epoch`" in gr("refused")[0]
    assert gr("strategy_info(mirrored)$num_replicas")[0] == 2
    arrays = gr("evaluate_distributed(model, gen_digits$test$x, gen_digits$test$y)[['accuracy']]")[0]
    assert arrays >= 0.9
    streamed = gr("""evaluate_distributed(model, dataset_from_generator(
      gen_batches(gen_digits$test$x, gen_digits$test$y)), steps = 8)[['accuracy']]""")[0]
    assert streamed == pytest.approx(arrays, abs=1e-6)


def test_central_storage_trains_from_a_generator(gr):
    losses = list(gr("""
      model <- gen_model(distribute_strategy("central_storage"))
      fit_distributed(model, dataset_from_generator(gen_batches()), epochs = 3,
                      steps_per_epoch = 22)$metrics$loss
    """))
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_error_in_the_generator_is_an_r_error_within_seconds(gr):
    started = time.monotonic()
    gr("""
      model <- gen_model()
      failure <- tryCatch(fit_distributed(model, dataset_from_generator(gen_batches(fail_at = 30)),
                                          epochs = 50), error = identity)
    """)
    assert time.monotonic() - started < 20
    assert "tfdistributed_generator_error" in list(gr("class(failure)"))
    assert gr("conditionMessage(failure)")[0] == (
        "The data generator failed on call 30 (after 28 batches): disk on fire at call 30 "
        "(training was stopped).")
    assert gr("conditionMessage(failure$parent)")[0] == "disk on fire at call 30"
    assert not training_threads()


def test_a_batch_of_the_wrong_shape_or_type_names_the_signature(gr):
    gr("model <- gen_model()")
    shape = gr("""tryCatch(fit_distributed(model, dataset_from_generator(gen_batches(bad_at = 5)),
                                          epochs = 1), error = conditionMessage)""")[0]
    assert shape.startswith("Batch 5 does not match the first batch: expected x: float32 "
                            "(None, 8, 8, 1), y: int32 (None,), got x: float32 (None, 8, 8)")
    kind = gr("""tryCatch(fit_distributed(model, dataset_from_generator(function() "a batch"),
                                         epochs = 1), error = conditionMessage)""")[0]
    assert kind.startswith("Batch 1 is character a batch, not list(x, y)")
    args = gr("""tryCatch(dataset_from_generator(function(path) NULL),
                          error = conditionMessage)""")[0]
    assert "argument(s) `path` without a default" in args
    assert not training_threads()


def test_raw_from_generator_with_an_r_function_is_refused_at_once_not_hung(gr):
    from tfdistributed import GeneratorError
    from tfdistributed.data import rcallbacks

    started = time.monotonic()
    gr("""
      tf <- reticulate::import("tensorflow")
      raw_batches <- function() {
        next_batch <- gen_batches()
        reticulate::py_iterator(function() {
          batch <- next_batch()
          if (is.null(batch)) return(NULL)
          reticulate::tuple(reticulate::np_array(batch[[1]], dtype = "float32"),
                            reticulate::np_array(batch[[2]], dtype = "int32"))
        }, completed = NULL)
      }
      raw <- tf$data$Dataset$from_generator(raw_batches, output_signature = reticulate::tuple(
        tf$TensorSpec(input_shape(NA, 8, 8, 1), tf$float32), tf$TensorSpec(input_shape(NA), tf$int32)))
      model <- gen_model()
      refused <- tryCatch(fit_distributed(model, raw, epochs = 3), error = identity)
      refused_eval <- tryCatch(evaluate_distributed(model, raw), error = conditionMessage)
      reticulate::py_set_attr(reticulate::import_main(), "r_raw_dataset", raw)
    """)
    assert time.monotonic() - started < 20
    assert gr("is_generator_dataset(raw)")[0] is True
    assert gr("is_generator_dataset(dataset_from_arrays(gen_digits$train$x, gen_digits$train$y, "
              "batch_size = 32))")[0] is False
    assert "tfdistributed_generator_error" in list(gr("class(refused)"))
    message = gr("conditionMessage(refused)")[0]
    assert message.startswith("fit_distributed() was given a tf.data dataset whose generator is "
                              "an R function")
    assert "Pass dataset_from_generator(<your function>) instead" in message
    assert gr("refused_eval")[0].startswith("evaluate_distributed() was given")
    # The check tfdistributed.fit runs (data.check_dataset): on the main thread this dataset would
    # hang, so it is refused.
    import __main__

    with pytest.raises(GeneratorError, match="Use dataset_from_generator"):
        rcallbacks.refuse_r_generator_on_main_thread(__main__.r_raw_dataset)
    # ... and it is called by tfdistributed.fit and by Keras' own model.fit (repaired on import),
    # so neither Python nor R's model$fit() can start training that would never return.
    started = time.monotonic()
    gr("""
      refused_python <- tryCatch(tfd$fit(model, raw, epochs = 1L), error = conditionMessage)
      refused_keras <- tryCatch(model$fit(raw, epochs = 1L), error = conditionMessage)
      refused_validation <- tryCatch(
        model$fit(dataset_from_arrays(gen_digits$train$x, gen_digits$train$y, batch_size = 64),
                  validation_data = raw, epochs = 1L), error = conditionMessage)
    """)
    assert time.monotonic() - started < 20
    assert "Use dataset_from_generator" in gr("refused_python")[0]
    assert "Use dataset_from_generator" in gr("refused_keras")[0]
    # As fit's validation_data: refused before the first epoch, not by the evaluate Keras
    # calls at its end.
    assert gr("refused_validation")[0].startswith("model.fit() was given a tf.data dataset")
    # As validation data next to a parameter-server dataset function, which the chief reads on
    # this thread: refused too, not only when it is the training input.
    from tfdistributed.data.plan import plan_input

    with pytest.raises(GeneratorError, match="Use dataset_from_generator"):
        plan_input("fit", lambda context: None, kind="parameter_server",
                   validation_data=__main__.r_raw_dataset)
    del __main__.r_raw_dataset


def test_files_written_from_r_train_and_are_checked_before_sharding(gr, tmp_path):
    gr(f"""
      flat <- function(x) matrix(x, nrow = dim(x)[1])
      train_df <- data.frame(flat(gen_digits$train$x), label = factor(gen_digits$train$y))
      paths <- write_dataset_shards(train_df, "{tmp_path / 'csv'}", num_shards = 3, format = "csv")
      files <- dataset_from_files("{tmp_path / 'csv'}", label = "label", batch_size = 64)
      model <- keras$Sequential(list(keras$Input(shape = input_shape(64)),
        keras$layers$Dense(64L, activation = "relu"), keras$layers$Dense(10L)))
      model$compile(optimizer = "adam", metrics = list("accuracy"),
        loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
      history <- fit_distributed(model, files, epochs = 15)
      too_few <- tryCatch(check_sharding(files, num_shards = 4), error = identity)
    """)
    assert [p.rsplit("/", 1)[1] for p in gr("paths")] == [
        f"part-0000{i}-of-00003.csv" for i in range(3)]
    assert gr("shard_policy(files)")[0] == "file"
    assert gr("evaluate_distributed(model, flat(gen_digits$test$x), gen_digits$test$y)[['accuracy']]")[0] >= 0.9
    assert "tfdistributed_sharding_error" in list(gr("class(too_few)"))
    assert "write the data as at least 4 files" in gr("conditionMessage(too_few)")[0]
    bad = gr("""tryCatch(write_dataset_shards(data.frame(a = "x"), tempfile()),
                         error = conditionMessage)""")[0]
    assert bad.startswith("Column(s) a of `data` are not numeric")


@pytest.mark.slow
def test_an_r_interrupt_stops_training_and_its_thread():
    script = r"""
      library(tfdistributed)
      options(tfdistributed.verbose = 0L)
      digits <- digits_data()
      calls <- 0
      endless <- function() {
        calls <<- calls + 1
        if (calls == 40) tools::pskill(Sys.getpid(), tools::SIGINT)
        rows <- sample(dim(digits$train$x)[1], 64)
        list(digits$train$x[rows, , , , drop = FALSE], digits$train$y[rows])
      }
      model <- keras$Sequential(list(keras$Input(shape = input_shape(8, 8, 1)), keras$layers$Flatten(),
                                     keras$layers$Dense(10L)))
      model$compile(optimizer = "adam",
                    loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
      started <- Sys.time()
      outcome <- tryCatch(fit_distributed(model, dataset_from_generator(endless), epochs = 10000,
                                          steps_per_epoch = 100), interrupt = function(c) "interrupted")
      threads <- vapply(reticulate::import("threading")$enumerate(), function(t) t$name, "")
      cat(sprintf("OUTCOME %s after %.1f s, %d calls; threads: %s\n", outcome,
                  as.numeric(difftime(Sys.time(), started, units = "secs")), calls,
                  paste(threads, collapse = ",")))
    """
    done = subprocess.run(["Rscript", "-e", script], cwd=ROOT, env=r_env(), capture_output=True,
                          text=True, timeout=180)
    line = next((l for l in done.stdout.splitlines() if l.startswith("OUTCOME")), None)
    assert line is not None, done.stdout[-2000:] + done.stderr[-2000:]
    match = re.match(r"OUTCOME interrupted after ([\d.]+) s, (\d+) calls; threads: MainThread$", line)
    assert match, line
    # Training stopped right away: R made at most a prefetch (8) of batches after the interrupt.
    assert int(match.group(2)) <= 40 + 8


@pytest.mark.cluster
@pytest.mark.timeout(400)
def test_two_launched_workers_stream_their_own_generators_to_identical_weights(gr, tmp_path):
    gr(f"""
      job <- launch_cluster("{SCRIPTS / 'generator_worker.R'}", workers = 2,
                            args = "{tmp_path}", timeout = 300, watch = watching(echo = FALSE))
    """)
    for index in (0, 1):
        output = list(gr(f'job$output[["worker {index}"]]'))
        line = next((l for l in output if l.startswith(f"worker {index}: told")), None)
        assert line is not None, output[-20:]
        # Each worker's generator was told its own index and the worker count.
        assert f"told {index}/2;" in line
        assert float(line.rsplit(" ", 1)[1]) >= 0.9
    first, second = (np.load(tmp_path / f"weights-{i}.npz") for i in (0, 1))
    assert first.files == second.files and len(first.files) == 4
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])


@pytest.mark.cluster
@pytest.mark.timeout(400)
def test_parameter_server_refuses_generators_and_trains_on_files(gr, tmp_path):
    gr(f"""
      job <- launch_cluster("{SCRIPTS / 'generator_ps_chief.R'}",
                            scaling(workers = 2, ps = 1, chief = TRUE),
                            args = "{tmp_path / 'data'}", timeout = 300,
                            watch = watching(echo = FALSE))
      job_output <- unlist(job$output)
    """)
    output = "\n".join(gr("job_output"))
    assert "generator under parameter_server: fit() cannot stream from an R generator under " \
           "the 'parameter_server' strategy" in output
    accuracy = float(re.search(r"files under parameter_server: test accuracy ([\d.]+)", output).group(1))
    assert accuracy >= 0.9
