# The chief (coordinator) of a parameter-server job (tests/r/test_r_generators.py): an R generator
# is refused with our message, and the same data written as sharded TFRecord files trains, each
# worker reading its share with TensorFlow's readers inside its own server.
# Usage: Rscript generator_ps_chief.R DATA_DIR
library(tfdistributed)
data_dir <- commandArgs(trailingOnly = TRUE)[[1]]
options(tfdistributed.verbose = 0L)
strategy <- distribute_strategy("auto")
digits <- digits_data()
flat <- function(x) matrix(x, nrow = dim(x)[1])
with(strategy$scope(), {
  keras$utils$set_random_seed(3L)
  model <- keras$Sequential(list(
    keras$Input(shape = input_shape(64)),
    keras$layers$Dense(64L, activation = "relu"),
    keras$layers$Dense(10L)
  ))
  model$compile(optimizer = "adam", metrics = list("accuracy"),
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
})
gen <- dataset_from_generator(function() list(flat(digits$train$x[1:64, , , , drop = FALSE]),
                                              digits$train$y[1:64]))
refused <- tryCatch({
  fit_distributed(model, gen, epochs = 1, steps_per_epoch = 1)
  "no error"
}, tfdistributed_generator_error = conditionMessage)
cat("generator under parameter_server:", refused, "\n")
train <- data.frame(flat(digits$train$x), label = digits$train$y)
write_dataset_shards(train, data_dir, num_shards = 4)
files <- dataset_from_files(data_dir, label = "label", batch_size = 64)
fit_distributed(model, files, epochs = 15, steps_per_epoch = 21)
result <- evaluate_distributed(model, flat(digits$test$x), digits$test$y)
cat(sprintf("files under parameter_server: test accuracy %.4f\n", result[["accuracy"]]))
