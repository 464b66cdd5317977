# The R tutorial on tf.distribute strategies, as its readers run it, with `library(keras)`
# read as `library(keras3)` and `library(tfdistributed)` added. Two things differ from the text,
# and only because this machine cannot do them: the handwritten digits that ship with
# tfdistributed stand in for MNIST (dataset_mnist() downloads it), 8 x 8 = 64 pixels in place of
# 784; and the program writes what it trained to OUT_DIR for the test to read. Everything else is
# the tutorial's: TensorFlow's strategies made by hand (the four of them, at the top), the model
# object made before the scope and its layers piped inside it, compile() with optimizer_rmsprop()
# and fit() with validation_split after it; then the same model under the parameter-server scope
# ("to change the strategy, you just need to change the scope"), compiled and fitted the same way.
# On one machine, as its readers ran it: the fourth strategy, made without a cluster, runs on this
# machine's devices as TensorFlow 2.0 ran it (tests/r/scripts/seed_tutorial_ps.R is its
# parameter-server part on a cluster).
# Usage: Rscript seed_tutorial.R OUT_DIR
library(keras3)
library(reticulate)
library(tfdistributed)

out_dir <- commandArgs(trailingOnly = TRUE)[[1]]

tf <- import("tensorflow")

strategy <- list()

# Creating strategies
strategy$mirrored <- tf$compat$v1$distribute$MirroredStrategy()
strategy$central_storage <- tf$distribute$experimental$CentralStorageStrategy()
strategy$multiworker_mirrored <- tf$distribute$experimental$MultiWorkerMirroredStrategy()
strategy$parameter_server<-  tf$distribute$experimental$ParameterServerStrategy()

# digits in place of mnist
digits <- digits_data()
x_train <- digits$train$x
y_train <- digits$train$y

x_test <- digits$test$x
y_test <- digits$test$y

# reshape
x_train <- array_reshape(x_train, c(nrow(x_train), 64))
x_test <- array_reshape(x_test, c(nrow(x_test), 64))

y_train <- to_categorical(y_train, 10)
y_test <- to_categorical(y_test, 10)

model <- keras_model_sequential()
with(strategy$central_storage$scope(), {
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

central_storage <- list(history = history$metrics,
                        test = as.list(model %>% evaluate(x_test, y_test, verbose = 0)))

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

parameter_server <- list(history = history$metrics,
                         test = as.list(model %>% evaluate(x_test, y_test, verbose = 0)))
jsonlite::write_json(list(central_storage = central_storage, parameter_server = parameter_server,
                          replicas = lapply(strategy, function(s) s$num_replicas_in_sync),
                          kinds = lapply(strategy, function(s) strategy_info(s)$kind)),
                     file.path(out_dir, "seed_tutorial.json"), auto_unbox = TRUE, digits = NA)
