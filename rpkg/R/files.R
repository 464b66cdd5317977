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
#' @param dir Directory to write into (created when missing).
#' @param num_shards Number of files.
#' @param format `"tfrecord"` (one `tf.train.Example` per row) or `"csv"`
#'   (with a header line).
#' @param prefix File name prefix.
#' @return The file paths, invisibly.
#' @family data
#' @export
#' @examples
#' if (backend_available()) {
#'   df <- data.frame(x1 = runif(100), x2 = runif(100), y = rbinom(100, 1, 0.5))
#'   dir <- file.path(tempdir(), "my-data")
#'   basename(write_dataset_shards(df, dir, num_shards = 4))
#' }
write_dataset_shards <- function(data, dir, num_shards = 2, format = c("tfrecord", "csv"),
                                 prefix = "part") {
  if (!is.data.frame(data)) {
    tfd_abort("`data` must be a data frame, got ", describe(data), ".")
  }
  dir <- as_string(dir)
  num_shards <- as_integer(num_shards)
  format <- match.arg(format)
  prefix <- as_string(prefix)
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
  paths <- with_backend(backend()$write_shards(columns, dir, num_shards = num_shards,
                                               format = format, prefix = prefix))
  invisible(as.character(unlist(paths)))
}

#' Read sharded files as a batched, shardable `tf.data` dataset
#'
#' Reads the files written by [write_dataset_shards()] with TensorFlow's own
#' readers (`TFRecordDataset`, or `TextLineDataset` and `decode_csv`), one file
#' after another, in
#' batches: `x` is a float32 matrix of the `features` columns, `y` the `label`
#' column (int32 for integer and factor columns, float32 otherwise). The shard
#' policy defaults to `"file"`: in a multi-worker job each worker reads whole
#' files, and [fit_distributed()] checks before training that there are enough
#' of them (see [check_sharding()]). Works under every strategy, including
#' `parameter_server`, whose workers read the files themselves.
#'
#' @param dir Directory written by [write_dataset_shards()].
#' @param label Name of the target column.
#' @inheritParams dataset_from_arrays
#' @param features Names of the input columns; default all but `label`.
#' @param shuffle_files Read the files in a new random order every epoch.
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
dataset_from_files <- function(dir, label, batch_size = 32, features = NULL,
                               shuffle_files = FALSE, seed = NULL, shard_policy = "file") {
  dir <- path.expand(as_string(dir))
  label <- as_string(label)
  batch_size <- as_integer(batch_size)
  if (!is.null(features) && (!is.character(features) || anyNA(features))) {
    tfd_abort("`features` must be a character vector of column names, got ", describe(features), ".")
  }
  with_backend(backend()$read_shards(
    dir, label, batch_size = batch_size, features = py_list(features),
    shuffle_files = as_flag(shuffle_files), seed = as_integer(seed),
    shard_policy = as_string(shard_policy)
  ))
}
