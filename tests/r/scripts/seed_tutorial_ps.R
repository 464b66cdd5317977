# The parameter-server part of the R tutorial on tf.distribute strategies, run as the chief of a
# local cluster with ps tasks: the strategy made by hand, as the tutorial makes it (no argument:
# it reads TF_CONFIG), the model object made before the scope and its layers piped inside it, then
# compile() with optimizer_rmsprop() and fit() with validation_split after it, as the tutorial
# does for its first strategy. `library(keras)` is read as `library(keras3)`, `library(tfdistributed)`
# is added, and the digits that ship with tfdistributed stand in for MNIST (no download here).
# Usage: Rscript seed_tutorial_ps.R OUT_DIR
library(keras3)
library(reticulate)
library(tfdistributed)

out_dir <- commandArgs(trailingOnly = TRUE)[[1]]

tf <- import("tensorflow")

strategy <- list()
strategy$parameter_server<-  tf$distribute$experimental$ParameterServerStrategy()

# digits in place of mnist
digits <- digits_data()
x_train <- array_reshape(digits$train$x, c(nrow(digits$train$x), 64))
y_train <- to_categorical(digits$train$y, 10)
x_test <- array_reshape(digits$test$x, c(nrow(digits$test$x), 64))
y_test <- to_categorical(digits$test$y, 10)

model <- keras_model_sequential()
with(strategy$parameter_server$scope(), {
  model %>%
    layer_dense(units = 256, activation = 'relu', input_shape = c(64)) %>%
    layer_dropout(rate = 0.4) %>%
    layer_dense(units = 128, activation = 'relu') %>%
    layer_dropout(rate = 0.3) %>%
    layer_dense(units = 10, activation = 'softmax')
})

model %>% compile(
  loss = 'categorical_crossentropy',
  optimizer = optimizer_rmsprop(),
  metrics = c('accuracy')
)

history <- model %>% fit(
  x_train, y_train,
  epochs = 10, batch_size = 128,
  validation_split = 0.2
)

jsonlite::write_json(
  list(history = history$metrics, test = as.list(model %>% evaluate(x_test, y_test, verbose = 0)),
       kind = strategy_info(strategy$parameter_server)$kind),
  file.path(out_dir, "seed_tutorial_ps.json"), auto_unbox = TRUE, digits = NA)
