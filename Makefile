# Every target sets itself up first (scripts/setup.sh is idempotent: seconds when nothing changed).
SHELL := /bin/bash
ROOT := $(abspath .)
PY := $(ROOT)/.venv/bin/python
export R_LIBS := $(ROOT)/.rlib
export RETICULATE_PYTHON := $(PY)
# Keep TensorFlow's C++ start-up chatter out of test and demo logs.
export TF_CPP_MIN_LOG_LEVEL := 2
PYTEST_ARGS ?=
# pytest-xdist: each test file runs whole on one worker (--dist loadscope), the costliest files
# first (tests/conftest.py orders them; --no-loadscope-reorder keeps that order). With 3
# workers the machine's two cores are 93% busy over the run (sampled from /proc/stat; the
# cluster jobs' waits are filled by the other workers), so a fourth gains nothing (26 min 26 s
# against 24 min 27 s and 26 min 47 s for 3; with warm starts 23 min 21 s against 22 min 53 s);
# only less CPU makes the suite faster. make check's tests are mostly single-process, 2
# workers suffice.
TEST_WORKERS ?= 3
CHECK_WORKERS ?= 2
BENCH_ARGS ?=

.PHONY: setup lint demo test check docs bench stress compat clean

setup:
	@bash scripts/setup.sh

# The linter: ruff over the package as pyproject.toml's [tool.ruff] says (pyflakes, lines over
# 100 characters), under a second. make check and make test run it first and stop on a finding
# (make test too: it is what CI runs, .ci/run).
lint: setup
	@$(ROOT)/.venv/bin/ruff check

# Both keep their whole output in .logs/ and show it without TensorFlow's C++ start-up lines.
demo: setup
	@$(PY) scripts/quiet.py .logs/demo.log -- $(PY) -m tfdistributed.demo

# TESTS=1: set-up also fetches the install tests' wheelhouse (scripts/setup.sh says why).
test: lint
	@TESTS=1 bash scripts/setup.sh
	@$(PY) scripts/quiet.py .logs/test.log -- $(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=0 --cpu-log=.logs/test-cpu.jsonl $(PYTEST_ARGS)

# The edit-test loop: everything that starts no multi-process cluster and is not a whole other
# suite, build, fresh process or long training (pytest markers `cluster` and `slow`): 850 tests,
# 65 s of pytest (1 min 13 s in all) on the host of 2026-11-29's second session, within its
# 150-s budget; 2 min 4 s to 2 min 58 s on the 2.3x slower hosts of the days before. `make test`
# stays the full suite (1,392 tests, 24 min 54 s of pytest on that host, within its 30-minute
# budget; 44-56 min on the slower ones; its log prints the machine's speed before its CPU
# sums: see vignettes/articles/development.Rmd).
check: lint
	@$(PY) scripts/quiet.py .logs/check.log -- $(PY) -m pytest -n $(CHECK_WORKERS) --dist loadscope --no-loadscope-reorder -m "not cluster and not slow" $(PYTEST_ARGS)

# The documentation site (pkgdown for R, pdoc for Python) into site/: the tutorials run real
# clusters while they are knitted, so this takes minutes. make test renders them once and checks
# the site in headless Chromium (tests/docs/).
docs: setup
	@$(PY) scripts/docsite.py $(ROOT)/site

# The release files into dist/ (gitignored): the Python wheel and sdist, and the R source package
# carrying the wheel (install_tfdistributed() installs it), its vignettes built inside from the
# tutorials knitted once (their code runs real clusters: minutes, as in make docs).
# scripts/dist.py, scripts/dist_r.py.
.PHONY: dist
dist: setup
	@$(PY) scripts/dist.py $(ROOT)/dist

# make bench BENCH_ARGS=--quick: a < 4 min smoke test of every benchmark.
bench:
	@BENCH=1 bash scripts/setup.sh
	$(PY) bench/run.py $(BENCH_ARGS)

# The stress tier for the races between a task's end and its peers' (which end the launcher sees
# first, a worker leaving while a peer still reads from it): the self-healing, chaos,
# preemption, elastic and end-of-job tests, 20 rounds each, with every core kept busy by a
# bounded CPU hog (scripts/stress.py; STRESS_ARGS="--rounds 5 --groups self-healing"). Hours on
# a 2-core machine; not part of make test.
STRESS_ARGS ?=
stress: setup
	@$(PY) scripts/stress.py $(STRESS_ARGS)

# The older ends of the supported version ranges (pyproject.toml), each in a fresh virtualenv
# under .compat/ with the project's wheel: make check's selection, a 2-worker and a
# parameter-server job, the placement tests and the keras3 R programs; the table goes to
# COMPATIBILITY.md. Not part of make test or CI: it downloads several TensorFlow wheels and
# takes minutes per pair. It must pass before a range moves (scripts/compat.py).
COMPAT_ARGS ?=
compat: setup
	@$(PY) scripts/compat.py $(COMPAT_ARGS)

clean:
	rm -rf .venv .rlib .rlib-keras3 .setup site .site-build .pytest_cache .ruff_cache .logs .compat
