# The multi-worker tutorial as an R user writes it with reticulate: the script builds its own
# tf$distribute$MultiWorkerMirroredStrategy() and calls Keras' own model$fit(). The one change
# for tfdistributed is library(tfdistributed), which repairs Keras when Python starts.
# usage: Rscript keras_mwms_tutorial.R OUTDIR
library(tfdistributed)
outdir <- commandArgs(trailingOnly = TRUE)[[1]]
tf <- reticulate::import("tensorflow")
np <- reticulate::import("numpy", convert = FALSE)
strategy <- tf$distribute$MultiWorkerMirroredStrategy()

digits <- digits_data()
train <- tf$data$Dataset$from_tensor_slices(reticulate::tuple(digits$train$x, digits$train$y))
train <- train$shuffle(2000L, seed = 1L)$`repeat`()$batch(64L)
with(strategy$scope(), {
  keras$utils$set_random_seed(1L)
  model <- keras$Sequential(list(
    keras$Input(shape = reticulate::tuple(8L, 8L, 1L)),
    keras$layers$Flatten(),
    keras$layers$Dense(64L, activation = "relu"),
    keras$layers$Dense(10L)
  ))
  model$compile(optimizer = "adam", metrics = list("accuracy"),
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
})
history <- model$fit(train, epochs = 3L, steps_per_epoch = 20L, verbose = 2L)
task <- jsonlite::fromJSON(Sys.getenv("TF_CONFIG"))$task
weights <- vapply(model$get_weights(), function(w) sum(abs(reticulate::py_to_r(w))), numeric(1))
writeLines(jsonlite::toJSON(list(loss = unlist(history$history$loss), weights = weights),
                            digits = NA),
           file.path(outdir, sprintf("%s-%d.json", task$type, task$index)))
