# Render one vignette to HTML in a fresh R process (each vignette sets up TensorFlow's devices
# itself, which can happen only once per process).
# usage: Rscript scripts/render_vignette.R vignettes/NAME.Rmd OUTPUT_DIR
args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 2) stop("usage: Rscript scripts/render_vignette.R INPUT.Rmd OUTPUT_DIR")
input <- normalizePath(args[[1]], mustWork = TRUE)
output_dir <- args[[2]]
dir.create(output_dir, showWarnings = FALSE, recursive = TRUE)
work <- tempfile("vignette-")
dir.create(work)
# Knit in a scratch copy so intermediate files never land in the source tree.
invisible(file.copy(input, work))
rmarkdown::render(file.path(work, basename(input)), output_dir = normalizePath(output_dir),
                  intermediates_dir = work, envir = new.env(), quiet = TRUE)
unlink(work, recursive = TRUE)
