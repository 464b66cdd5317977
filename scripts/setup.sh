#!/usr/bin/env bash
# One idempotent set-up for every Makefile target: Debian packages, a project-local R library
# with reticulate >= 1.41, and a .venv with the backend installed editable. Each step checks
# for its own result first, so a second run takes seconds and changes nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RLIB="$ROOT/.rlib"
VENV="$ROOT/.venv"
STAMP_DIR="$ROOT/.setup"
mkdir -p "$RLIB" "$STAMP_DIR"

log() { printf '[setup] %s\n' "$*"; }

# --- Debian packages -------------------------------------------------------------------------
# R 4.2 from Debian (CRAN is not reachable); pandoc and the r-cran-* packages for the R package,
# its tests and the vignettes; reticulate's build dependencies.
DEB_PKGS=(r-base-core r-base-dev pandoc r-cran-testthat r-cran-jsonlite r-cran-knitr
  r-cran-rmarkdown r-cran-roxygen2 r-cran-processx r-cran-rcpp r-cran-rcpptoml r-cran-here
  r-cran-png r-cran-rappdirs r-cran-withr r-cran-rlang r-cran-matrix xz-utils
  # A real single-node SLURM cluster for the SLURM backend's tests and tutorial
  # (tfdistributed.testbeds.slurm starts the daemons in a temporary directory; /etc/slurm is unused).
  slurmd slurmctld slurm-client munge
  # ip and tc for the test bed of hosts (tests/python/hosts.py: network namespaces, tbf caps).
  iproute2
  # The documentation site (make docs, scripts/docsite.py): pkgdown 2.0.7 and what it needs
  # (downlit, ragg, httr, whisker... come with it); its browser test (tests/docs/): headless
  # Chromium driven through chromedriver, and LinkChecker over the whole site.
  r-cran-pkgdown chromium chromium-driver linkchecker
  # What keras3, tfdatasets, tfds and their R dependencies need from Debian (the keras3 step
  # below installs them).
  r-cran-generics r-cran-magrittr r-cran-zeallot r-cran-fastmap r-cran-glue r-cran-cli
  r-cran-yaml r-cran-rstudioapi r-cran-lifecycle r-cran-base64enc r-cran-whisker
  r-cran-tidyselect r-cran-backports r-cran-r.utils)
missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- reticulate >= 1.41 into .rlib -----------------------------------------------------------
# Debian bookworm's reticulate 1.28 rejects NumPy 2 and crashes under rpy2 when R's GC frees a
# Python object; 1.41 has neither problem (the R tests exercise both). Its source tarball comes
# from Debian trixie's source archive, fetched with a private apt configuration so the machine's
# lists stay untouched.
RETIC_TARBALL="r-cran-reticulate_1.41.0.1+dfsg.orig.tar.xz"
RETIC_SHA256="fca24ebaa8867e2b4da9b735410cf080f09d20ca326407f1759f30c1914b7cf9"
have_reticulate() {
  R_LIBS="$RLIB" Rscript -e 'quit(status = !(requireNamespace("reticulate", quietly = TRUE) &&
    packageVersion("reticulate") >= "1.41"))' >/dev/null 2>&1
}
if ! have_reticulate; then
  src="$STAMP_DIR/reticulate-src"
  mkdir -p "$src/lists/partial" "$src/dl"
  if [ ! -f "$src/dl/$RETIC_TARBALL" ]; then
    log "fetching reticulate 1.41 source from Debian trixie"
    echo "deb-src http://deb.debian.org/debian trixie main" > "$src/sources.list"
    APT_OPTS=(-o "Dir::Etc::SourceList=$src/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$src/lists" -o APT::Sandbox::User=root)
    apt-get "${APT_OPTS[@]}" update -qq
    # apt exits 100 because the .dsc is missing on the mirror; the orig tarball still arrives.
    (cd "$src/dl" && apt-get "${APT_OPTS[@]}" source --download-only r-cran-reticulate) || true
  fi
  echo "$RETIC_SHA256  $src/dl/$RETIC_TARBALL" | sha256sum -c --quiet -
  rm -rf "$src/build" && mkdir -p "$src/build"
  tar -xJf "$src/dl/$RETIC_TARBALL" -C "$src/build"
  pkgdir="$(dirname "$(find "$src/build" -maxdepth 2 -name DESCRIPTION | head -1)")"
  log "building reticulate into $RLIB"
  R CMD INSTALL --no-docs --no-html -l "$RLIB" "$pkgdir" >"$STAMP_DIR/reticulate-install.log" 2>&1 \
    || { cat "$STAMP_DIR/reticulate-install.log"; exit 1; }
  have_reticulate
fi

# --- keras3, tfdatasets and tfds, the R user's Keras and input pipelines, into .rlib-keras3 ------
# The suite runs R programs as R users write them: keras3 for the model, tfdatasets for the input
# pipeline (tensor_slices_dataset() |> dataset_batch()), tfds for tfds_load(). Their own library,
# put before .rlib by the tests that run such programs: with keras3 installed, tfdistributed's
# `keras` is keras3's (one object, no masking message), so the R-value conversions of
# tfdistributed's own `keras` are tested in .rlib alone, as users without keras3 have them.
# keras3 and tfdatasets from CRAN where CRAN can be reached (its host resolves); tfds was never
# on CRAN (its users install it from its repository), and whatever is still missing comes from
# the public sources in ../shared/r-packages/, in their dependency order (keras3 1.2.0: 1.3 and
# later need reticulate >= 1.42 and dotty).
K3LIB="$ROOT/.rlib-keras3"
K3_SOURCES="$ROOT/../shared/r-packages"
K3_ORDER=(config_0.3.2.9000 tfautograph_0.3.2 tfruns_1.5.4 tensorflow_2.20.0 keras3_1.2.0
  tfdatasets_2.18.0 tfds_0.0.0.9000)
R_USER_PACKAGES="c('keras3', 'tfdatasets', 'tfds')"
mkdir -p "$K3LIB"
r_user_packages_missing() {
  R_LIBS="$K3LIB:$RLIB" Rscript -e "p <- $R_USER_PACKAGES
    cat(p[!vapply(p, requireNamespace, logical(1), quietly = TRUE)])" 2>/dev/null
}
r_has() {
  R_LIBS="$K3LIB:$RLIB" Rscript -e "quit(status = !requireNamespace('$1', quietly = TRUE))" \
    >/dev/null 2>&1
}
if [ -n "$(r_user_packages_missing)" ]; then
  CRAN="${CRAN:-https://cloud.r-project.org}"
  if timeout 10 getent hosts "$(printf '%s' "$CRAN" | sed -E 's#^[a-z]+://([^/]+).*#\1#')" \
      >/dev/null 2>&1; then
    log "installing keras3 and tfdatasets from CRAN ($CRAN) into $K3LIB"
    R_LIBS="$K3LIB:$RLIB" Rscript -e "install.packages(c('keras3', 'tfdatasets'), lib = '$K3LIB',
      repos = '$CRAN')" >"$STAMP_DIR/keras3-install.log" 2>&1 || true
  fi
  missing="$(r_user_packages_missing)"
  if [ -n "$missing" ]; then
    [ -d "$K3_SOURCES" ] || { log "$missing: not on CRAN or CRAN cannot be reached, and $K3_SOURCES is missing"; exit 1; }
    log "installing $missing and their R dependencies from $K3_SOURCES (not from CRAN: it cannot be reached, or tfds is not there)"
    for pkg in "${K3_ORDER[@]}"; do
      r_has "${pkg%%_*}" && continue
      R_LIBS="$K3LIB:$RLIB" R CMD INSTALL --no-docs --no-html -l "$K3LIB" \
        "$K3_SOURCES/$pkg.tar.gz" >>"$STAMP_DIR/keras3-install.log" 2>&1 \
        || { tail -40 "$STAMP_DIR/keras3-install.log"; exit 1; }
    done
  fi
  [ -z "$(r_user_packages_missing)" ] || { log "still missing: $(r_user_packages_missing)"; exit 1; }
fi

# --- Python virtualenv -----------------------------------------------------------------------
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
fi
# pyproject.toml declares the supported ranges; constraints/dev.txt pins this environment's
# exact releases within them (the newest tested end). A change of either reinstalls.
CONSTRAINTS="$ROOT/constraints/dev.txt"
req_hash="$(cat pyproject.toml "$CONSTRAINTS" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP_DIR/venv.hash" 2>/dev/null)" != "$req_hash" ] \
   || ! "$VENV/bin/python" -c "import tfdistributed, rpy2, pytest, ray, pdoc, selenium" >/dev/null 2>&1; then
  log "installing the backend (editable) with TensorFlow's CPU build and the test, ray and docs extras into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # TensorFlow's CPU build, tensorflow-cpu (the same TensorFlow and kernels, without CUDA's): this
  # machine has no GPU, and each process that imports the CUDA build spends ~2 s more CPU in
  # loading and probing for it (~7 s against ~5 here), paid by the hundreds of processes a make
  # test starts. A .venv made with the CUDA build (`tensorflow`) has it removed first: the two
  # share the `tensorflow` package folder.
  if "$VENV/bin/python" -m pip show -q tensorflow >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip uninstall -y -q tensorflow
  fi
  # rpy2 builds against R; point it at the Debian R found above. The ray extra is for the Ray
  # backend's tests (tests/python/test_ray.py), which run against a real local Ray.
  # The docs extra builds the site's Python API reference and drives its browser test.
  R_HOME="$(R RHOME)" "$VENV/bin/python" -m pip install -q -c "$CONSTRAINTS" -e ".[test,ray,docs]" tensorflow-cpu
  # scikit-learn is no longer needed (the demo digits ship in the package), but a .venv made
  # before may hold it, and Keras imports it in every process when it is there (~0.9 s of CPU).
  "$VENV/bin/python" -m pip uninstall -y -q scikit-learn >/dev/null 2>&1 || true
  # Nor pandas, which ray[train] (the ray extra before) brought: Keras imports it in every
  # process where it is installed (~0.8 s of CPU each). Keras's own tests that use it find it
  # with jax and torch (constraints/peer-tests.txt).
  "$VENV/bin/python" -m pip uninstall -y -q pandas >/dev/null 2>&1 || true
  echo "$req_hash" > "$STAMP_DIR/venv.hash"
fi
# The backend's and the tests' helpers' bytecode, kept up to date: pip does not compile an
# editable install, and where PYTHONDONTWRITEBYTECODE is set (as on this machine) every task
# process would compile them again. Seconds when nothing changed.
"$VENV/bin/python" -m compileall -q pybackend/tfdistributed tests/python/support >/dev/null

# --- the bench extra (only with BENCH=1, i.e. `make bench`) -----------------------------------
# tf_keras (the legacy-Keras reference) and matplotlib are needed by the benchmarks alone, so
# only `make bench` pays for installing them.
if [ "${BENCH:-0}" = "1" ] && { [ "$(cat "$STAMP_DIR/bench.hash" 2>/dev/null)" != "$req_hash" ] \
   || ! "$VENV/bin/python" -c "import tf_keras, matplotlib" >/dev/null 2>&1; }; then
  log "installing the bench extra (tf_keras, matplotlib) into $VENV"
  # tf_keras declares `tensorflow` (the CUDA build) as its dependency; pip would install it over
  # tensorflow-cpu, which provides the same module: tf_keras alone, without its dependencies.
  "$VENV/bin/python" -m pip install -q -c "$CONSTRAINTS" matplotlib
  "$VENV/bin/python" -m pip install -q -c "$CONSTRAINTS" --no-deps "tf_keras==$("$VENV/bin/python" -c 'import tensorflow as tf; print(tf.__version__)')"
  echo "$req_hash" > "$STAMP_DIR/bench.hash"
fi

# --- the install tests' wheelhouse (only with TESTS=1, i.e. `make test`) --------------------
# tests/python/package/test_packaging.py installs our wheel into a fresh virtualenv that already
# holds an older supported TensorFlow (constraints/older-tensorflow.txt), from these files with
# --no-index: the suite then waits on no package index during its run. Downloaded by this
# environment's pip, with the dependencies of both; again only when either changes.
WHEELHOUSE="$STAMP_DIR/wheelhouse"
OLDER_TF="$ROOT/constraints/older-tensorflow.txt"
wh_hash="$(cat pyproject.toml "$OLDER_TF" | sha256sum | cut -d' ' -f1)"
if [ "${TESTS:-0}" = "1" ] && [ "$(cat "$STAMP_DIR/wheelhouse.hash" 2>/dev/null)" != "$wh_hash" ]; then
  log "downloading $(grep -v '^#' "$OLDER_TF") and the backend's dependencies into $WHEELHOUSE"
  rm -rf "$WHEELHOUSE"
  "$VENV/bin/python" -m pip download -d "$WHEELHOUSE" -r "$OLDER_TF" "$ROOT" \
    >"$STAMP_DIR/wheelhouse.log" 2>&1 || { tail -40 "$STAMP_DIR/wheelhouse.log"; exit 1; }
  rm -f "$WHEELHOUSE"/tfdistributed-*   # the tests build their own from the checkout
  echo "$wh_hash" > "$STAMP_DIR/wheelhouse.hash"
fi

# --- the peers' tests' own dependencies (only with TESTS=1, i.e. `make test`) ------------------
# Keras's own tests (tests/peers/test_keras_peers.py) import jax and torch; they go into a
# directory that only those test runs put on their path (constraints/peer-tests.txt says why
# not into .venv).
PEER_DEPS="$STAMP_DIR/peer-tests"
PEER_REQS="$ROOT/constraints/peer-tests.txt"
peers_hash="$(sha256sum "$PEER_REQS" | cut -d' ' -f1)"
if [ "${TESTS:-0}" = "1" ] && [ "$(cat "$STAMP_DIR/peer-tests.hash" 2>/dev/null)" != "$peers_hash" ]; then
  log "installing what Keras's own tests import (jax, torch) into $PEER_DEPS"
  rm -rf "$PEER_DEPS"
  "$VENV/bin/python" -m pip install -q --no-deps --no-compile --target "$PEER_DEPS" -r "$PEER_REQS" \
    >"$STAMP_DIR/peer-tests.log" 2>&1 || { tail -40 "$STAMP_DIR/peer-tests.log"; exit 1; }
  echo "$peers_hash" > "$STAMP_DIR/peer-tests.hash"
fi

# --- the R package --------------------------------------------------------------------------
# Installed into .rlib so Rscript, rpy2 and knitr all load the same code; reinstalled only when
# a file under rpkg/ changed.
if [ -f rpkg/DESCRIPTION ]; then
  rpkg_hash="$(find rpkg -type f -not -path '*/tests/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$STAMP_DIR/rpkg.hash" 2>/dev/null)" != "$rpkg_hash" ]; then
    log "installing the R package tfdistributed into $RLIB"
    R_LIBS="$RLIB" R CMD INSTALL --no-multiarch -l "$RLIB" rpkg >"$STAMP_DIR/rpkg-install.log" 2>&1 \
      || { cat "$STAMP_DIR/rpkg-install.log"; exit 1; }
    echo "$rpkg_hash" > "$STAMP_DIR/rpkg.hash"
  fi
fi
log "ready"
