# What R values in Keras' own calls cost: building and compiling a model through the package's
# `keras` object with R values (doubles, c(8, 8, 1), "accuracy"; each call routed through the
# backend's rules, tfdistributed.r.values) against the same model built through reticulate's own
# keras module with the values Keras takes (64L, input_shape(), list("accuracy")).
# Usage: Rscript bench/r_keras_calls.R [ROUNDS] [BUILDS] [OUT.md]
# Both arms run in the same process, one build of each in turn (which goes first alternates),
# so a busy machine slows both alike; each round's ratio is of its summed seconds per arm
# (R values / plain), and the result is the median of the rounds' ratios.
args <- commandArgs(trailingOnly = TRUE)
rounds <- if (length(args) >= 1) as.integer(args[[1]]) else 5L
builds <- if (length(args) >= 2) as.integer(args[[2]]) else 20L
out <- if (length(args) >= 3) args[[3]] else NULL

suppressPackageStartupMessages(library(tfdistributed))
plain <- reticulate::import("keras")

with_r_values <- function() {
  model <- keras$Sequential(list(
    keras$Input(shape = c(8, 8, 1)),
    keras$layers$Conv2D(filters = 8, kernel_size = 3, padding = "same", activation = "relu"),
    keras$layers$MaxPooling2D(pool_size = 2),
    keras$layers$Flatten(),
    keras$layers$Dense(64, activation = "relu"),
    keras$layers$Dense(10)))
  model$compile(optimizer = keras$optimizers$Adam(0.01), metrics = "accuracy",
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
  model
}

with_keras_values <- function() {
  model <- plain$Sequential(list(
    plain$Input(shape = input_shape(8, 8, 1)),
    plain$layers$Conv2D(filters = 8L, kernel_size = 3L, padding = "same", activation = "relu"),
    plain$layers$MaxPooling2D(pool_size = 2L),
    plain$layers$Flatten(),
    plain$layers$Dense(64L, activation = "relu"),
    plain$layers$Dense(10L)))
  model$compile(optimizer = plain$optimizers$Adam(0.01), metrics = list("accuracy"),
                loss = plain$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
  model
}

seconds <- function(build) {
  start <- proc.time()[["elapsed"]]
  build()
  elapsed <- proc.time()[["elapsed"]] - start
  plain$backend$clear_session()
  elapsed
}

# Both arms build the same model (same parameters), and one of each first warms Keras up.
stopifnot(with_r_values()$count_params() == with_keras_values()$count_params())
times <- list(r_values = numeric(), plain = numeric())
for (round in seq_len(rounds)) {
  total <- c(r_values = 0, plain = 0)
  for (i in seq_len(builds)) {
    order <- if (i %% 2 == 1) c("r_values", "plain") else c("plain", "r_values")
    for (arm in order) {
      total[[arm]] <- total[[arm]] + seconds(if (arm == "r_values") with_r_values else with_keras_values)
    }
  }
  times$r_values <- c(times$r_values, total[["r_values"]] / builds)
  times$plain <- c(times$plain, total[["plain"]] / builds)
}
ratios <- times$r_values / times$plain
ratio <- stats::median(ratios)
lines <- c(
  "# R values in Keras' own calls: what routing them through the rules costs",
  "",
  sprintf("Measured %s by `Rscript bench/r_keras_calls.R %d %d` (%d rounds of %d builds per arm,",
          format(Sys.Date()), rounds, builds, rounds, builds),
  "one build of each arm in turn). One build: a small CNN (Input, Conv2D, MaxPooling2D, Flatten,",
  "2 Dense) made and compiled with an Adam optimizer and a loss object: 10 routed calls",
  "(9 constructors and `$compile()`), each also a `$` lookup through the routed module.",
  "",
  "| arm | median seconds per model | per round |",
  "|---|---|---|",
  sprintf("| R values through `keras` (routed) | %.4f | %s |", stats::median(times$r_values),
          paste(sprintf("%.4f", times$r_values), collapse = ", ")),
  sprintf("| Keras' own values through reticulate's module | %.4f | %s |",
          stats::median(times$plain), paste(sprintf("%.4f", times$plain), collapse = ", ")),
  "",
  sprintf("Ratio (R values / plain), median of the rounds: **%.2f** (per round: %s)", ratio,
          paste(sprintf("%.2f", ratios), collapse = ", ")))
writeLines(lines)
if (!is.null(out)) writeLines(lines, out)
