#' Save and load models safely under any strategy
#'
#' In a multi-worker job every worker must take part in a save, but only the
#' chief may write where you asked: the others write to a temporary directory
#' of their own that is deleted right after (TensorFlow's pattern, applied to
#' Keras 3). Call `save_model_distributed()` on every worker; on a single
#' process it is a plain save.
#'
#' `load_model_distributed()` loads a `.keras` file; with a `strategy` the
#' model is re-created inside its scope so it can be trained further under
#' it, without one it is a plain model that evaluates and predicts anywhere.
#' `export_saved_model_distributed()` writes a TensorFlow SavedModel for
#' serving (`tf$saved_model$load()`), chief only.
#'
#' @param model A Keras model.
#' @param path A `.keras` file (whole model) or `.weights.h5` file (weights);
#'   for `export_saved_model_distributed()`, a directory.
#' @param overwrite Replace an existing file (left out: yes).
#' @param strategy Strategy to load the model under, or `NULL`.
#' @param compile Restore the compiled loss, metrics and optimizer (left out:
#'   yes).
#' @return `save_model_distributed()` and `export_saved_model_distributed()`:
#'   the path this process wrote, invisibly. `load_model_distributed()`: the model.
#' @family checkpoints
#' @export
#' @examples
#' if (backend_available()) {
#'   model <- keras$Sequential(list(keras$Input(shape = input_shape(3)),
#'                                  keras$layers$Dense(1L)))
#'   model$compile(optimizer = "sgd", loss = "mse")
#'   path <- file.path(tempdir(), "example.keras")
#'   save_model_distributed(model, path)
#'   plain <- load_model_distributed(path)
#'   plain$count_params()
#' }
save_model_distributed <- function(model, path, overwrite) {
  invisible(with_backend(do.call(backend()$checkpoints$save_model, c(list(
    model, path.expand(as_string(path))),
    given_arguments(environment(), list(overwrite = optional_flag))))))
}

#' @rdname save_model_distributed
#' @export
load_model_distributed <- function(path, strategy = NULL, compile) {
  with_backend(do.call(backend()$checkpoints$load_model, c(list(
    path.expand(as_string(path)), strategy = strategy),
    given_arguments(environment(), list(compile = optional_flag)))))
}

#' @rdname save_model_distributed
#' @export
export_saved_model_distributed <- function(model, path) {
  invisible(with_backend(backend()$checkpoints$export_saved_model(
    model, path.expand(as_string(path)))))
}

#' Multi-worker-safe backup and restore of training
#'
#' Keras' `BackupAndRestore` callback made safe for many workers: every worker
#' restores from `backup_dir` (storage they all share), only the chief writes
#' it. When a job is started again after a failure, training resumes from the
#' last completed epoch. `fit_distributed(..., backup_dir = dir)` adds one for
#' you; file-writing Keras callbacks you pass to [fit_distributed()]
#' (`ModelCheckpoint`, `TensorBoard`, `CSVLogger`, `BackupAndRestore`) are made
#' chief-only automatically.
#'
#' @param backup_dir Directory for the backup, on storage every worker can
#'   read (shared storage on a real cluster); deleted when training completes.
#' @param save_freq `"epoch"` (left out) or a number of steps between backups (as in
#'   Keras' own callback, which restores at the start of the epoch; for a
#'   resume at the step, use [fit_distributed()]'s `save_freq`).
#' @return A Keras callback.
#' @family checkpoints
#' @export
#' @examples
#' if (backend_available()) {
#'   callback <- backup_and_restore(file.path(tempdir(), "backup"))
#'   class(callback)[[1]]
#' }
backup_and_restore <- function(backup_dir, save_freq) {
  with_backend(do.call(backend()$checkpoints$BackupAndRestore, c(list(as_path(backup_dir)),
    given_arguments(environment(), list(save_freq = as_save_freq)))))
}
