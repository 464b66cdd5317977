#' Set how a multi-worker job splits a dataset
#'
#' With several workers, TensorFlow *auto-shards* each worker's copy of a
#' `tf.data` dataset:
#' * `"file"`: each worker reads a subset of the input files; needs at least as
#'   many files as workers.
#' * `"data"`: each worker reads everything and keeps every n-th element; always
#'   works.
#' * `"auto"` (TensorFlow's default): `"file"` when the pipeline reads at least
#'   as many files as there are workers, else `"data"`, as TensorFlow documents
#'   it. (TensorFlow itself stops at the first step when the files are too few;
#'   every tfdistributed entry point, Keras' own `model$fit()` included, shards
#'   by data instead and says so once per data set.) tf.data cannot tell an
#'   `"auto"` you set from the default, so it always means the default.
#' * `"hint"`: shard where the pipeline says; `"off"`: every worker sees
#'   everything.
#'
#' A policy you set other than `"auto"` is kept; one that cannot work is an
#' error before training (see [check_sharding()]).
#'
#' @param dataset A `tf.data.Dataset` (e.g. from [dataset_from_arrays()],
#'   [dataset_from_files()] or [load_tfds()]).
#' @param policy One of `"auto"`, `"file"`, `"data"`, `"off"`, `"hint"`.
#' @return `dataset_shard_policy()`: the dataset with the policy set.
#'   `shard_policy()`: the policy name set on `dataset`.
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   train <- dataset_from_arrays(matrix(runif(40), 10), runif(10), batch_size = 4)
#'   train <- dataset_shard_policy(train, "data")
#'   shard_policy(train)
#' }
dataset_shard_policy <- function(dataset, policy) {
  with_backend(backend()$with_shard_policy(dataset, as_string(policy)))
}

#' @rdname dataset_shard_policy
#' @export
shard_policy <- function(dataset) {
  with_backend(backend()$shard_policy(dataset))
}

#' Check, before training, how a dataset will be split over the workers
#'
#' Runs the check every entry point runs in a multi-worker job
#' ([fit_distributed()], and Keras' own `model$fit()`, `$evaluate()`,
#' `$predict()`): TensorFlow's own auto-shard rewrite for the first and last
#' worker, reading one element each of a copy without its `cache()` steps. A
#' failure TensorFlow would hit at the first training step happens here, as an
#' R error naming the fix. Under `"auto"`, fewer files than workers means
#' sharding by data (a warning says so once per data set), as TensorFlow
#' documents `"auto"`.
#'
#' @inheritParams dataset_shard_policy
#' @param num_shards Number of workers (input pipelines), e.g. [num_workers()].
#' @param policy Shard policy to check instead of the dataset's own (one of
#'   those of [dataset_shard_policy()]).
#' @return The policy the workers will shard by, invisibly: the one checked,
#'   or `"data"` where `"auto"` falls back to it.
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   dir <- write_digits_tfds(tempfile(), num_files = 1)
#'   train <- load_tfds("sklearn_digits", "train", data_dir = dir)
#'   # One file cannot be split over 2 workers by file: the error names the fix.
#'   try(check_sharding(train, num_shards = 2, policy = "file"))
#'   # Under "auto" (the default), it is sharded by data instead.
#'   print(check_sharding(train, num_shards = 2))
#' }
check_sharding <- function(dataset, num_shards, policy = NULL) {
  invisible(with_backend(backend()$check_sharding(
    dataset, as_integer(num_shards), as_string(policy, allow_null = TRUE))))
}

#' Global batch size from a per-replica batch size
#'
#' `per_replica` times the number of replicas in sync. Batches passed to
#' [fit_distributed()] are global: each replica gets `batch_size / replicas`.
#'
#' @param per_replica Examples per replica per step.
#' @param strategy A strategy; default the current one.
#' @return An integer.
#' @family strategies
#' @export
#' @examples
#' if (backend_available()) {
#'   global_batch_size(32, distribute_strategy("default"))
#' }
global_batch_size <- function(per_replica, strategy = NULL) {
  as.integer(with_backend(backend()$global_batch_size(as_integer(per_replica), strategy)))
}

#' R arrays as a batched, shardable `tf.data` dataset
#'
#' @param x,y Inputs and targets: matrices, arrays, vectors or data frames (see
#'   [fit_distributed()]).
#' @param batch_size The *global* batch size (required): each replica gets
#'   `batch_size / replicas` examples per step (see [global_batch_size()]).
#' @param shuffle Shuffle the examples (left out: not).
#' @param seed Seed for the shuffle (`NULL`: TensorFlow's, from its global seed
#'   when one was set). Each worker of a multi-worker job shuffles its own copy
#'   of the arrays, so each must be given the same seed.
#' @param sample_weight Per-example weights: the dataset yields
#'   `(x, y, sample_weight)`.
#' @param drop_remainder Drop the last batch when it is smaller (left out: kept).
#' @param shard_policy The shard policy set on the returned dataset: `"auto"`,
#'   `"file"`, `"data"`, `"off"` or `"hint"` (see [dataset_shard_policy()]).
#'   Left out, the one that suits the source: `"data"` for arrays held in
#'   memory, `"file"` for sharded files (each worker reads whole files); for
#'   [load_tfds()], the dataset's own (TensorFlow's `"auto"`).
#' @return A `tf.data.Dataset` yielding `(x, y)` batches.
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   ds <- dataset_from_arrays(matrix(runif(40), 10), 1:10, batch_size = 4)
#'   shard_policy(ds)
#' }
dataset_from_arrays <- function(x, y = NULL, batch_size, shuffle, seed = NULL,
                                sample_weight = NULL, drop_remainder, shard_policy) {
  given <- given_arguments(environment(), list(
    shuffle = optional_flag, drop_remainder = optional_flag,
    shard_policy = function(x, arg, call) as_string(x, arg, allow_null = TRUE, call = call)))
  with_backend(do.call(backend()$make_dataset, c(list(
    to_numpy(x, "x"), to_numpy(y, "y"), batch_size = as_integer(batch_size),
    seed = as_integer(seed), sample_weight = to_numpy(sample_weight, "sample_weight")), given)))
}

# R data -> NumPy array with the dtype Keras expects. An R vector would become a Python list
# (Keras: "Unrecognized data type"), so every input is an explicit array: doubles -> float32,
# integers -> int32 (labels), a factor -> 0-based int32 codes, a data frame -> float32 matrix.
to_numpy <- function(x, name, call = rlang::caller_env()) {
  if (is.null(x) || is_py(x)) {
    return(x)
  }
  if (is.data.frame(x)) {
    bad <- names(x)[!vapply(x, function(col) is.numeric(col) || is.logical(col), logical(1))]
    if (length(bad)) {
      tfd_abort("`", name, "` is a data frame with non-numeric column(s) ", paste(bad, collapse = ", "),
            ": convert them to numbers first (e.g. model.matrix(~ ., ", name, ")).",
            call = call)
    }
    x <- data.matrix(x)
  }
  if (is.factor(x)) {
    x <- as.integer(x) - 1L
  }
  if (is.list(x)) {
    return(list_to_numpy(x, name, call))
  }
  if (!is.numeric(x) && !is.logical(x)) {
    tfd_abort("`", name, "` must be numeric, got ", describe(x), ".", call = call)
  }
  if (anyNA(x)) {
    tfd_abort("`", name, "` contains NA: remove or impute missing values before training.", call = call)
  }
  if (length(x) == 0) {
    tfd_abort("`", name, "` is empty.", call = call)
  }
  dtype <- if (is.integer(x)) "int32" else "float32"
  if (is.null(dim(x))) {
    x <- as.vector(x)
  }
  reticulate::np_array(if (is.logical(x)) x + 0 else x, dtype = dtype)
}

# A list holds one array per model input, as in Keras: named, a Python dict (the model's named
# inputs or outputs); otherwise a Python list, in the order of the inputs. Each element is
# converted by to_numpy()'s rules, so keras3's already converted lists (its fit() hands over R
# lists of NumPy arrays) reach Keras as reticulate alone would pass them.
list_to_numpy <- function(x, name, call) {
  named <- length(x) && !is.null(names(x)) && all(nzchar(names(x)))
  labels <- if (named) paste0(name, "$", names(x)) else sprintf("%s[[%d]]", name, seq_along(x))
  arrays <- lapply(seq_along(x), function(i) to_numpy(x[[i]], labels[[i]], call = call))
  if (named) reticulate::py_dict(as.list(names(x)), arrays) else arrays
}

#' Read a TFDS dataset from disk
#'
#' Uses tensorflow-datasets' own loader. Nothing is downloaded unless
#' `download = TRUE`: in a multi-worker job every process runs this line, and
#' several processes downloading into one directory race.
#'
#' @param name Dataset name, e.g. `"sklearn_digits"`.
#' @param split Split, e.g. `"train"` or `"test"` (left out: `"train"`).
#' @param data_dir Directory holding the prepared dataset.
#' @inheritParams dataset_from_arrays
#' @param as_supervised Yield `(input, label)` pairs (left out: yes).
#' @param download Download and prepare when missing (left out: no).
#' @param ... Passed to `tfds.load()`.
#' @return A `tf.data.Dataset`.
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   dir <- write_digits_tfds(tempfile())
#'   train <- load_tfds("sklearn_digits", "train", data_dir = dir)
#'   train$element_spec
#' }
load_tfds <- function(name, split, data_dir = NULL, shard_policy = NULL, as_supervised,
                      download, ...) {
  given <- given_arguments(environment(), list(
    split = function(x, arg, call) as_string(x, arg, call = call),
    as_supervised = optional_flag, download = optional_flag))
  with_backend(do.call(backend()$load_tfds, c(list(
    as_string(name), data_dir = as_string(data_dir, allow_null = TRUE),
    shard_policy = as_string(shard_policy, allow_null = TRUE)), given, list(...))))
}

#' The handwritten digits (8x8) for tutorials and tests
#'
#' The 1797 handwritten digits scikit-learn ships (a copy of the UCI
#' "Optical Recognition of Handwritten Digits" test set, CC BY 4.0), split into
#' train and test with a seeded, stratified split. They ship with the Python
#' backend, with scikit-learn's own split at the defaults (the split the
#' documentation's numbers were measured on), so scikit-learn is not needed.
#' Other arguments make another stratified split. `digits_data()` returns R
#' arrays; `write_digits_tfds()` writes them as a real TFDS dataset
#' (`"sklearn_digits"`, images 8x8x1 uint8, labels 0-9) for [load_tfds()].
#'
#' @param test_fraction Fraction of images in the test split, in (0, 1).
#' @param seed Seed of the split (a whole number, or `NULL` for a new split
#'   each call). Left out, both are those of scikit-learn's split.
#' @return `digits_data()`: `list(train = list(x, y), test = list(x, y))` with
#'   `x` a `n x 8 x 8 x 1` array in \[0, 1\] and `y` integer labels 0-9.
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   digits <- digits_data()
#'   dim(digits$train$x)
#'   table(digits$train$y)
#' }
digits_data <- function(test_fraction, seed) {
  arrays <- with_backend(do.call(backend()$digits_arrays, given_arguments(environment(), list(
    test_fraction = as_number, seed = as_integer))))
  split <- function(pair) list(x = pair[[1]], y = as.integer(pair[[2]]))
  list(train = split(arrays[[1]]), test = split(arrays[[2]]))
}

#' @rdname digits_data
#' @param data_dir Directory to write into (created when missing).
#' @param num_files TFRecord files per split (left out: one); use at least as
#'   many as workers for the `"file"` shard policy.
#' @return `write_digits_tfds()`: `data_dir`, invisibly.
#' @export
write_digits_tfds <- function(data_dir, num_files, test_fraction, seed) {
  invisible(with_backend(do.call(backend()$write_digits_tfds, c(list(as_string(data_dir)),
    given_arguments(environment(), list(num_files = as_integer, test_fraction = as_number,
                                        seed = as_integer))))))
}
