#' Write a data frame as sharded TFRecord or CSV files
#'
#' Splits the rows of `data` into `num_shards` contiguous, nearly equal parts
#' and writes one file each (`part-00000-of-00004.tfrecord`, ...), plus a
#' `schema.json` naming the columns and their types. Read them back with
#' [dataset_from_files()], which uses TensorFlow's own readers, so the data
#' never has to fit in R's memory at training time, and every worker of a
#' multi-worker or parameter-server job reads its share of the files.
#'
#' Use at least as many files as workers: with the `"file"` shard policy each
#' worker reads whole files, and [fit_distributed()] refuses, before training,
#' a dataset with fewer files than workers. To write more data than fits in
#' memory, call this once per chunk with a different `prefix`.
#'
#' @param data A data frame of numeric, integer, logical or factor columns
#'   (factors are written as their 0-based codes).
#' @param directory Directory to write into (created when missing).
#' @param num_shards Number of files (left out: 2).
#' @param format `"tfrecord"` (one `tf.train.Example` per row; left out) or
#'   `"csv"` (with a header line).
#' @param prefix File name prefix (left out: `"part"`).
#' @return The file paths, invisibly.
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   df <- data.frame(x1 = runif(100), x2 = runif(100), y = rbinom(100, 1, 0.5))
#'   dir <- file.path(tempdir(), "my-data")
#'   basename(write_dataset_shards(df, dir, num_shards = 4))
#' }
write_dataset_shards <- function(data, directory, num_shards, format, prefix) {
  if (!is.data.frame(data)) {
    tfd_abort("`data` must be a data frame, got ", describe(data), ".")
  }
  directory <- as_string(directory)
  string <- function(x, arg, call) as_string(x, arg, call = call)
  given <- given_arguments(environment(), list(num_shards = as_integer, format = string,
                                               prefix = string))
  bad <- names(data)[!vapply(data, function(col) is.numeric(col) || is.logical(col) ||
                                is.factor(col), logical(1))]
  if (length(bad)) {
    tfd_abort("Column(s) ", paste(bad, collapse = ", "), " of `data` are not numeric: convert them ",
          "to numbers or factors first (e.g. data$", bad[[1]], " <- factor(data$", bad[[1]], ")).")
  }
  if (anyNA(data)) {
    tfd_abort("`data` contains NA: remove or impute missing values before writing.")
  }
  columns <- lapply(data, function(col) {
    if (is.factor(col)) col <- as.integer(col) - 1L
    if (is.logical(col)) col <- as.integer(col)
    reticulate::np_array(col)
  })
  paths <- with_backend(do.call(backend()$write_shards, c(list(columns, directory), given)))
  invisible(as.character(unlist(paths)))
}

#' Read sharded files as a batched, shardable `tf.data` dataset
#'
#' Reads the files written by [write_dataset_shards()] with TensorFlow's own
#' readers (`TFRecordDataset`, or `TextLineDataset` and `decode_csv`), one file
#' after another, in
#' batches: `x` is a float32 matrix of the `features` columns, `y` the `label`
#' column (int32 for integer and factor columns, float32 otherwise). The shard
#' policy is `"file"` unless you give another: in a multi-worker job each worker reads whole
#' files, and [fit_distributed()] checks before training that there are enough
#' of them (see [check_sharding()]). Works under every strategy, including
#' `parameter_server`, whose workers read the files themselves.
#'
#' @param directory Directory written by [write_dataset_shards()].
#' @param label Name of the target column.
#' @inheritParams dataset_from_arrays
#' @param features Names of the input columns; default all but `label`.
#' @param shuffle_files Read the files in a new random order every epoch (left
#'   out: no).
#' @param seed Seed for the file order.
#' @return A `tf.data.Dataset` yielding `(x, y)` batches.
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   df <- data.frame(x1 = runif(100), x2 = runif(100), y = rbinom(100, 1, 0.5))
#'   dir <- file.path(tempdir(), "my-shards")
#'   write_dataset_shards(df, dir, num_shards = 2)
#'   train <- dataset_from_files(dir, label = "y", batch_size = 20)
#'   train$element_spec
#' }
dataset_from_files <- function(directory, label, batch_size, features = NULL, shuffle_files,
                               seed = NULL, shard_policy) {
  directory <- path.expand(as_string(directory))
  label <- as_string(label)
  if (!is.null(features) && (!is.character(features) || anyNA(features))) {
    tfd_abort("`features` must be a character vector of column names, got ", describe(features), ".")
  }
  given <- given_arguments(environment(), list(
    shuffle_files = optional_flag,
    shard_policy = function(x, arg, call) as_string(x, arg, allow_null = TRUE, call = call)))
  with_backend(do.call(backend()$read_shards, c(list(
    directory, label, batch_size = as_integer(batch_size), features = py_list(features),
    seed = as_integer(seed)), given)))
}
