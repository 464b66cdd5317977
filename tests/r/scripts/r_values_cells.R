# The R-values row of the conformance matrix: Keras' own model$fit(), model$evaluate() and
# model$predict() given R values exactly as R users have them (an R array, an R integer vector
# of labels, whole doubles for counts, validation data as an R list, class weights as a named R
# list), under each strategy named on the command line. Each strategy's result is written to
# OUT_DIR/<strategy>.json; a launched task writes <strategy>-<task>.json. Under a launched job
# ("auto") the strategy comes from TF_CONFIG.
# Usage: Rscript r_values_cells.R OUT_DIR STRATEGY...
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
out_dir <- args[[1]]
strategies <- args[-1]
if (!identical(strategies, "auto")) {
  configure_cpu_devices(2)
}
d <- digits_data()
# 10 global batches of 128, as in the Python matrix: a parameter-server epoch is the whole
# global batches of the data (its workers repeat their input), one device's epoch ends with a
# partial batch when they do not divide.
train_x <- d$train$x[1:1280, , , , drop = FALSE]
train_y <- d$train$y[1:1280]

r_values_cell <- function(strategy) {
  with(strategy$scope(), {
    keras$utils$set_random_seed(7L)
    model <- keras$Sequential(list(
      keras$Input(shape = input_shape(8, 8, 1)),
      keras$layers$Flatten(),
      keras$layers$Dense(32L, activation = "relu"),
      keras$layers$Dense(10L)
    ))
    model$compile(optimizer = keras$optimizers$Adam(0.01), metrics = list("accuracy"),
                  loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
  })
  history <- model$fit(train_x, train_y, batch_size = 64 * 2, epochs = 3, verbose = 0,
                       shuffle = FALSE, validation_data = list(d$test$x, d$test$y),
                       validation_freq = 1, class_weight = list("0" = 1, "1" = 2, "7" = 0.5))
  score <- model$evaluate(d$test$x, d$test$y, batch_size = 60, verbose = FALSE,
                          return_dict = TRUE)
  predictions <- model$predict(d$test$x, batch_size = 60, verbose = 0)
  list(history = lapply(history$history, unlist), evaluate = score,
       true_accuracy = mean(max.col(predictions) - 1L == d$test$y),
       weights = lapply(model$get_weights(), function(w) as.numeric(w)))
}

for (name in strategies) {
  strategy <- distribute_strategy(name)
  info <- strategy_info(strategy)
  cell <- tryCatch(c(list(status = "ok"), r_values_cell(strategy)),
                   error = function(e) list(status = "error", message = conditionMessage(e)))
  task <- if (is.null(info$task_type)) "" else sprintf("-%s-%d", info$task_type, info$task_index)
  writeLines(jsonlite::toJSON(c(list(kind = info$kind), cell), digits = NA, auto_unbox = TRUE),
             file.path(out_dir, paste0(name, task, ".json")))
}
