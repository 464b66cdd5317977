# Shared by every test file. TensorFlow fixes its devices when it first initializes, so the
# two logical CPUs that `mirrored` and `central_storage` tests need are configured here, before
# any test touches TensorFlow; every later strategy reuses them.

skip_if_no_backend <- function() {
  if (!backend_available()) {
    testthat::skip("the Python backend 'tfdistributed' is not available (run `make setup`)")
  }
}

if (backend_available()) {
  configure_cpu_devices(2)
  # Keep the test log readable: no progress bars.
  options(tfdistributed.verbose = 0L)
}

# One strategy object per kind for the whole run: creating strategies is not free. (Creating
# them again also works: the backend gives CPU-only mirrored strategies a reduction that does
# not share TensorFlow's collective keys; tests/python/strategies/test_strategies.py checks that.)
strategies <- new.env()
test_strategy <- function(kind) {
  if (is.null(strategies[[kind]])) {
    strategies[[kind]] <- distribute_strategy(kind)
  }
  strategies[[kind]]
}

# The seed tutorial's model: 8x8 digits -> Flatten -> Dense(64, relu) -> Dense(10 logits).
digits_model <- function(seed = 1L) {
  keras$utils$set_random_seed(seed)
  model <- keras$Sequential(list(
    keras$Input(shape = input_shape(8, 8, 1)),
    keras$layers$Flatten(),
    keras$layers$Dense(64L, activation = "relu"),
    keras$layers$Dense(10L)
  ))
  model$compile(
    optimizer = "adam",
    loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE),
    metrics = list("accuracy")
  )
  model
}

# A tiny regression model for fast tests of data handling.
linear_model <- function(inputs = 3L) {
  model <- keras$Sequential(list(keras$Input(shape = input_shape(inputs)), keras$layers$Dense(1L)))
  model$compile(optimizer = "sgd", loss = "mse")
  model
}
