# A keras3 program on 2 workers whose worker 1 is slow to make its last read from worker 0, the
# job's leader (tests/r/test_r_leave_together.py). keras3's own fit(), as R users write it,
# with only library(tfdistributed) added; at the end of training (on_train_end), worker 0
# publishes a value in TensorFlow's coordination service and is done, worker 1 waits
# SLOW_READ_SECONDS, then reads it from worker 0.
#
# Usage (run by launch_cluster() or tfdistributed.launch): Rscript leave_race_keras3.R SECONDS
library(keras3)
library(tfdistributed)

slow <- as.numeric(commandArgs(trailingOnly = TRUE)[[1]])
strategy <- distribute_strategy("auto")
index <- jsonlite::fromJSON(Sys.getenv("TF_CONFIG"))$task$index
coordination <- reticulate::import("tensorflow.python.eager.context")$context()

last_read <- callback_lambda(on_train_end = function(logs) {
  if (index == 0) {
    coordination$set_config_key_value("leave_race_keras3", "trained")
  } else {
    Sys.sleep(slow)
    value <- coordination$get_config_key_value("leave_race_keras3", 30000L)
    cat("worker 1 read", value, "\n")
  }
})

with(strategy$scope(), {
  model <- keras_model_sequential(input_shape = 4) %>% layer_dense(units = 1)
})
model %>% compile(optimizer = "sgd", loss = "mse")
x <- matrix(rnorm(64 * 4), ncol = 4)
model %>% fit(x, x[, 1], epochs = 1, batch_size = 16, verbose = 0, callbacks = list(last_read))
