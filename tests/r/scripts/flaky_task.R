# A task of a launched job that needs no TensorFlow: it says which attempt it is on, then, by
# mode: "once" fails on worker 1 of the first attempt only; "always" fails on worker 1 of every
# attempt with the same error; "hang" sleeps (to be interrupted). Usage: Rscript flaky_task.R MODE
mode <- commandArgs(trailingOnly = TRUE)[[1]]
attempt <- Sys.getenv("TFDISTRIBUTED_ATTEMPT")
task <- jsonlite::fromJSON(Sys.getenv("TF_CONFIG"))$task
cat(sprintf("attempt %s: %s %d started\n", attempt, task$type, task$index))
if (task$index == 1 && (mode == "always" || (mode == "once" && attempt == "0"))) {
  stop("the data server went away")
}
if (mode == "hang") {
  Sys.sleep(300)
}
