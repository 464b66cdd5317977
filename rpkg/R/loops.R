#' Custom training loops with correct loss scaling
#'
#' `make_train_step()` returns a compiled TensorFlow function that runs one
#' training step on every replica (`strategy$run`) and returns the loss summed
#' over replicas, i.e. the mean over the *global* batch. Each replica sums its
#' per-example losses and divides by the global batch size
#' (`tf$nn$compute_average_loss`), and divides regularization losses by the
#' number of replicas (`tf$nn$scale_regularization_loss`), so 2 replicas give
#' the same loss and update as one device on the same global batch.
#'
#' Iterate over `strategy$experimental_distribute_dataset(dataset)` and call
#' the step on each batch, or let `train_loop()` do it. The step runs in
#' TensorFlow, not in R: R functions must not be passed to `strategy$run()`
#' (replicas run on threads of their own, where R cannot be called).
#'
#' @param model A Keras model built inside `with(strategy$scope(), ...)`.
#' @param loss A Keras loss object or name; its reduction is replaced by
#'   per-example losses.
#' @param optimizer A Keras optimizer created inside the strategy's scope.
#' @inheritParams strategy_info
#' @inheritParams fit_distributed
#' @param global_batch_size The global batch size (see [global_batch_size()]).
#' @return `make_train_step()`, `make_eval_step()`: a function of one batch
#'   returning the global mean loss as a scalar tensor.
#' @family training
#' @export
#' @examples
#' if (backend_available()) {
#'   strategy <- distribute_strategy("default")
#'   with(strategy$scope(), {
#'     model <- keras$Sequential(list(keras$Input(shape = input_shape(3)),
#'                                    keras$layers$Dense(1L)))
#'     optimizer <- keras$optimizers$SGD(0.1)
#'   })
#'   ds <- dataset_from_arrays(matrix(runif(64 * 3), 64), runif(64), batch_size = 16)
#'   losses <- train_loop(model, ds, "mse", optimizer, strategy, global_batch_size = 16,
#'                        epochs = 2)
#'   losses
#' }
make_train_step <- function(model, loss, optimizer, strategy, global_batch_size) {
  with_backend(backend()$loops$make_train_step(model, loss, optimizer, strategy,
                                               as_integer(global_batch_size)))
}

#' @rdname make_train_step
#' @export
make_eval_step <- function(model, loss, strategy, global_batch_size) {
  with_backend(backend()$loops$make_eval_step(model, loss, strategy,
                                              as_integer(global_batch_size)))
}

#' @rdname make_train_step
#' @param dataset A `tf.data.Dataset` of `(x, y)` batches of the global batch
#'   size (drop the remainder: a short last batch is divided by the full size).
#' @return `train_loop()`: the mean loss of each epoch (numeric vector).
#' @export
train_loop <- function(model, dataset, loss, optimizer, strategy, global_batch_size, epochs) {
  unlist(with_backend(do.call(backend()$loops$train_loop, c(list(
    model, dataset, loss = loss, optimizer = optimizer, strategy = strategy,
    global_batch_size = as_integer(global_batch_size)),
    given_arguments(environment(), list(epochs = as_integer))))))
}
