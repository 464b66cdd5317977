# The R-generator benchmark: the digits MLP at batch 64 trained from an R function that returns
# the next batch (dataset_from_generator) vs from the same data as in-memory arrays, each arm a
# fresh R process. Usage: Rscript bench/r_generator.R stream|epochs|arrays EPOCHS
# Prints one `BENCH_RESULT {json}` line for bench/run.py: examples/s from the end of epoch 1 to
# the end of the last epoch (start-up and tracing excluded), timed by a Python callback so that
# both arms are timed alike (an R callback would need R's main thread, which serves the generator).
args <- commandArgs(trailingOnly = TRUE)
mode <- args[[1]]
epochs <- as.integer(args[[2]])
batch <- 64L
library(tfdistributed)
options(tfdistributed.verbose = 0L)

digits <- digits_data()
x <- digits$train$x
y <- digits$train$y
n <- dim(x)[1]

# What an R user writes: reshuffle at the start of every epoch, one batch per call, NULL at the end.
shuffled_batches <- function() {
  order <- NULL
  start <- 1L
  function() {
    if (start > n) {
      start <<- 1L
      return(NULL)
    }
    if (start == 1L) order <<- sample.int(n)
    rows <- order[start:min(start + batch - 1L, n)]
    start <<- start + batch
    list(x[rows, , , , drop = FALSE], y[rows])
  }
}

timer <- reticulate::py_run_string("
import time
import keras

class EpochTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_epoch_end(self, epoch, logs=None):
        self.ends.append(time.perf_counter())
")$EpochTimes()

keras$utils$set_random_seed(0L)
set.seed(0)
model <- keras$Sequential(list(
  keras$Input(shape = input_shape(8, 8, 1)),
  keras$layers$Flatten(),
  keras$layers$Dense(64L, activation = "relu"),
  keras$layers$Dense(10L)
))
model$compile(optimizer = "adam", metrics = list("accuracy"),
              loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
# "stream": the generator's NULLs only mark where it starts over and an epoch is
# `steps_per_epoch` batches (22 = ceiling(1347 / 64), the same batches per epoch as the arrays);
# "epochs": a NULL ends each epoch; "arrays": the same data in memory.
if (mode == "stream") {
  fit_distributed(model, dataset_from_generator(shuffled_batches()), epochs = epochs,
                  steps_per_epoch = ceiling(n / batch), callbacks = timer)
} else if (mode == "epochs") {
  fit_distributed(model, dataset_from_generator(shuffled_batches()), epochs = epochs,
                  callbacks = timer)
} else if (mode == "arrays") {
  fit_distributed(model, x, y, epochs = epochs, batch_size = batch, callbacks = timer)
} else {
  stop("mode must be stream, epochs or arrays, got ", mode)
}
ends <- unlist(timer$ends)
seconds <- ends[[length(ends)]] - ends[[1]]
accuracy <- evaluate_distributed(model, digits$test$x, digits$test$y)[["accuracy"]]
cat(sprintf("BENCH_RESULT {\"examples_per_second\": %.3f, \"seconds\": %.6f, \"accuracy\": %.4f}\n",
            (epochs - 1) * n / seconds, seconds, accuracy))
