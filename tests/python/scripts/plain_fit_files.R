# One worker of a 2-worker job: Keras' own model$fit() and model$evaluate() on the digits in one
# file, as an R user writes it with reticulate: a TFDS data set (one file per split) read with
# tensorflow_datasets' own load(), or a TFRecord file parsed by an R function.
# usage: Rscript plain_fit_files.R OUTDIR TFDS_DIR|TFRECORD_FILE tensorflow|ours tfds|tfrecord
library(tfdistributed)
args <- commandArgs(trailingOnly = TRUE)
outdir <- args[[1]]
tf <- reticulate::import("tensorflow")
strategy <- if (args[[3]] == "tensorflow") {
  tf$distribute$MultiWorkerMirroredStrategy()
} else {
  distribute_strategy("auto")
}
if (args[[4]] == "tfds") {
  tfds <- reticulate::import("tensorflow_datasets")
  train <- tfds$load("sklearn_digits", split = "train", data_dir = args[[2]], as_supervised = TRUE)
} else {
  features <- list(x = tf$io$FixedLenFeature(list(8L, 8L, 1L), tf$float32),
                   y = tf$io$FixedLenFeature(list(), tf$int64))
  train <- tf$data$TFRecordDataset(args[[2]])$map(function(record) {
    example <- tf$io$parse_single_example(record, features)
    reticulate::tuple(example$x, example$y)
  })
}
train <- train$batch(64L)
with(strategy$scope(), {
  keras$utils$set_random_seed(1L)
  model <- keras$Sequential(list(
    keras$Input(shape = reticulate::tuple(8L, 8L, 1L)),
    keras$layers$Rescaling(1 / 255),
    keras$layers$Flatten(),
    keras$layers$Dense(32L, activation = "relu"),
    keras$layers$Dense(10L)
  ))
  model$compile(optimizer = keras$optimizers$Adam(0.01), metrics = list("accuracy"),
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
})
history <- model$fit(train, epochs = 2, verbose = 2)
metrics <- model$evaluate(train, verbose = 0, return_dict = TRUE)
task <- jsonlite::fromJSON(Sys.getenv("TF_CONFIG"))$task
weights <- lapply(model$get_weights(), function(w) as.vector(reticulate::py_to_r(w)))
writeLines(jsonlite::toJSON(list(loss = unlist(history$history$loss), weights = weights,
                                 accuracy = metrics$accuracy), digits = NA, auto_unbox = TRUE),
           file.path(outdir, sprintf("%s-%d.json", task$type, task$index)))
