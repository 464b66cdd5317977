# Warm starts of R tasks (launch_cluster(engine = local_hosts(warm_start = TRUE)) with an .R
# script). The launcher starts `Rscript [options] serve.R` once, whose one line calls this: R,
# reticulate, Python, TensorFlow, Keras and the backend are loaded here once, and each task is a
# fork of this process (pybackend/tfdistributed/engines/warm/rtask.py). In the parent, serving
# returns FALSE when the launcher is done with the server; in a forked child it returns TRUE,
# the child being its task already (its output, environment, working directory, commandArgs(),
# tempdir()), and R then reads and runs the task's script from the same `--file=` as Rscript
# would.
warm_task_server <- function(socket, ready, server_file) {
  rtask <- reticulate::import("tfdistributed.engines.warm.rtask")
  # A fork copies one thread: a package's background thread is stopped before serving and
  # started again in each task (its handle in the task would name another thread).
  stop_package_threads()
  served <- rtask$serve(socket, as.integer(ready), server_file)
  if (!isTRUE(served)) {
    quit(save = "no", status = 0L)
  }
  start_package_threads()
  # A new R session seeds its random generator afresh, from the time and its pid.
  if (exists(".Random.seed", envir = globalenv(), inherits = FALSE)) {
    rm(".Random.seed", envir = globalenv())
  }
  invisible()
}

# cli (loaded with rlang) runs a timer thread from its .onLoad and cancels it at exit: in a
# forked task that handle would be stale, and cancelling it would hit a thread TensorFlow started
# in its place (seen: "terminate called without an active exception").
stop_package_threads <- function() {
  if ("cli" %in% loadedNamespaces()) {
    get("unload", envir = asNamespace("cli"))()
  }
  invisible()
}

start_package_threads <- function() {
  if ("cli" %in% loadedNamespaces()) {
    cli <- asNamespace("cli")
    clienv <- get("clienv", envir = cli)
    do.call(".Call", list(get("clic_start_thread", envir = cli), environment(get("dummy", cli)),
                          clienv$tick_time, clienv$speed_time))
    clienv$unloaded <- FALSE
  }
  invisible()
}
