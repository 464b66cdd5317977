"""The packages as users get them and install them, with no checkout on any path.

- `python -m build` makes an sdist and a wheel (the wheel built from the sdist, so a file
  missing from the sdist shows). The sdist installs into a fresh virtualenv and works there:
  our package alone (`--no-deps`), TensorFlow and the other dependencies reached through a .pth
  line to this project's .venv, which does not make the project's own (editable) tfdistributed
  importable. So what is imported is what was installed.
- A user's environment that already holds a supported, older TensorFlow (tensorflow-cpu):
  `pip install <wheel>` resolves the rest, keeps that TensorFlow alone, and a 2-worker job
  trains there. pip resolves from the wheelhouse `make test`'s set-up downloaded from the index
  (scripts/setup.sh, TESTS=1), with --no-index: the suite waits on no index during its run.
- An R user: the R source package (carrying the wheel, as `make dist` builds it) into a clean
  library, then `install_tfdistributed()` with no argument gives a backend with no root, found
  by itself in the next R session.
"""

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True,
                   capture_output=True, timeout=600)
    return out


def _fresh_env(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True).create(path)
    python = path / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True)
    # Dependencies (TensorFlow, Keras, NumPy...) from the project's environment, appended after
    # the fresh site-packages: the installed tfdistributed comes first.
    (Path(purelib.stdout.strip()) / "deps.pth").write_text(
        "\n".join(p for p in site.getsitepackages() if "site-packages" in p) + "\n")
    return python


CHECK = """
import json, numpy as np, tfdistributed as tfd, keras
strategy = tfd.make_strategy("default")
with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
x = np.ones((8, 3), "float32")
history = tfd.fit(model, x, x.sum(1), epochs=2, batch_size=4, verbose=0)
(digits, _), _ = tfd.digits_arrays()   # the package's data file was installed too
print(json.dumps({"file": tfd.__file__, "version": tfd.__version__,
                  "epochs": len(history.history["loss"]), "digits": list(digits.shape)}))
"""


@pytest.mark.slow
def test_the_sdist_installs_into_a_fresh_venv_and_trains(dist, tmp_path):
    """The sdist (pip builds a wheel from it, so a file missing from it shows). The wheel is
    installed by the next test, into a user's environment."""
    artifact = next(dist.glob("*.tar.gz"))
    python = _fresh_env(tmp_path / "env")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(artifact)],
                   check=True, capture_output=True, timeout=600)
    env = _clean_env()
    done = subprocess.run([python, "-c", CHECK], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["file"].startswith(str(tmp_path / "env")), report
    assert report["version"] == "0.1.0" and report["epochs"] == 2
    assert report["digits"] == [1347, 8, 8, 1]
    # The command-line entry point is installed too.
    cli = subprocess.run([tmp_path / "env" / "bin" / "tfdistributed", "--help"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert cli.returncode == 0 and "launch" in cli.stdout, cli.stderr[-2000:]


# --- Installs where users are: their TensorFlow kept, no checkout on any path ----------------
#: A supported TensorFlow that is not the newest, as the distribution users of CPU clusters
#: install: the wheel must keep it (no second TensorFlow, no upgrade). The same file tells
#: scripts/setup.sh what to download into the wheelhouse.
OLDER_TENSORFLOW = ROOT / "constraints" / "older-tensorflow.txt"
KEPT_TENSORFLOW = tuple(next(line for line in OLDER_TENSORFLOW.read_text().splitlines()
                             if line and not line.startswith("#")).split("=="))
WHEELHOUSE = ROOT / ".setup" / "wheelhouse"

TWO_WORKERS = """
import json, sys, numpy as np, tfdistributed as tfd
def train():
    import keras, numpy as np, tfdistributed as tfd
    strategy = tfd.make_strategy("multi_worker_mirrored")
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    x = np.linspace(0, 1, 64 * 4, dtype="float32").reshape(64, 4)
    history = tfd.fit(model, x, x.sum(1), epochs=2, batch_size=16, verbose=0)
    return {"loss": history.history["loss"], "replicas": strategy.num_replicas_in_sync}
result = tfd.launch(train, workers=2, timeout=240)
import importlib.metadata as m, tensorflow as tf
(digits, _), _ = tfd.digits_arrays()   # the package's data file was installed too
# launch() raises when a task fails.
print(json.dumps({"returns": [t.value for t in result.tasks],
                  "tf": tf.__version__, "file": tfd.__file__, "version": tfd.__version__,
                  "digits": list(digits.shape),
                  "dists": sorted({d.metadata["Name"].lower().replace("_", "-")
                                   for d in m.distributions()
                                   if d.metadata["Name"].lower().startswith("tensorflow")})}))
"""


def _pip_install(python: Path, *what: str) -> None:
    """``pip install`` into the user's environment from the wheelhouse alone, run isolated
    (``-I``: neither this checkout nor PYTHON* variables on its path)."""
    if not WHEELHOUSE.is_dir():
        pytest.fail(f"{WHEELHOUSE} is missing: `make test` downloads it (TESTS=1 bash "
                    "scripts/setup.sh)")
    done = subprocess.run([python, "-I", "-m", "pip", "install", "--no-compile", "--no-index",
                           "--find-links", str(WHEELHOUSE), *what], capture_output=True,
                          text=True, timeout=900, env=_clean_env(), cwd=python.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _clean_env() -> dict:
    """The environment of a user's process: nothing of this checkout on any path, and no
    LD_LIBRARY_PATH of R's. A pytest worker that ran the rpy2 tests has R's in its environment
    (rpy2 puts it there), /usr/lib/x86_64-linux-gnu first: a Python with its own shared
    libpython (pyenv's, here) started with it loads Debian's libpython3.11 instead, and its
    `_ssl` then fails to import ("undefined symbol: _PyModule_Add"): pip could not reach the
    index in CI's run, "the SSL module is not available". pip does not byte-compile what it
    installs (PIP_NO_COMPILE: TensorFlow's thousands of modules cost the suite CPU seconds, and
    a user's first import compiles what it uses)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TF_CONFIG", "RETICULATE_PYTHON", "R_LIBS",
                        "R_LIBS_USER", "VIRTUAL_ENV", "LD_LIBRARY_PATH")}
    env["PIP_NO_COMPILE"] = "1"
    return env


@pytest.fixture(scope="module")
def env_with_older_tensorflow(tmp_path_factory):
    """A fresh virtualenv that already holds a supported, older TensorFlow."""
    path = tmp_path_factory.mktemp("user") / "env"
    venv.EnvBuilder(with_pip=True).create(path)
    python = path / "bin" / "python"
    _pip_install(python, "==".join(KEPT_TENSORFLOW))
    return path


@pytest.mark.slow
@pytest.mark.cluster
def test_the_wheel_keeps_the_users_tensorflow_and_runs_a_two_worker_job(
        dist, env_with_older_tensorflow, tmp_path):
    python = env_with_older_tensorflow / "bin" / "python"
    wheel = next(dist.glob("*.whl"))
    # What a user types: pip install <wheel>, its dependencies resolved (from the wheelhouse).
    _pip_install(python, str(wheel))
    job = subprocess.run([python, "-c", TWO_WORKERS], capture_output=True, text=True,
                         timeout=400, env=_clean_env(), cwd=tmp_path)
    assert job.returncode == 0, job.stderr[-4000:]
    report = json.loads(job.stdout.strip().splitlines()[-1])
    dist_name, version = KEPT_TENSORFLOW
    # The user's TensorFlow, in place, alone.
    assert report["tf"] == version, report
    assert dist_name in report["dists"] and "tensorflow" not in report["dists"], report
    assert report["file"].startswith(str(env_with_older_tensorflow)), report
    losses = [r["loss"] for r in report["returns"]]
    assert [r["replicas"] for r in report["returns"]] == [2, 2]
    assert losses[0] == losses[1] and losses[0][1] < losses[0][0], losses
    assert report["version"] == "0.1.0" and report["digits"] == [1347, 8, 8, 1], report
    versions = subprocess.run([python, "-m", "tfdistributed", "versions", "--check"],
                              capture_output=True, text=True, timeout=120, env=_clean_env())
    assert versions.returncode == 0, versions.stdout + versions.stderr
    # The command-line entry point is installed too.
    cli = subprocess.run([env_with_older_tensorflow / "bin" / "tfdistributed", "--help"],
                         capture_output=True, text=True, timeout=120, env=_clean_env())
    assert cli.returncode == 0 and "launch" in cli.stdout, cli.stderr[-2000:]


def _r_source_package(wheel: Path, out: Path) -> Path:
    """The R source package staged as `make dist` stages it (scripts/dist_r.py), carrying the
    backend's wheel in inst/python/; its vignettes are left out here (their build from the
    session's one knit is tests/r/test_r_source_package.py's)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import dist_r

    stage = dist_r.stage(out / "stage", wheel)
    subprocess.run(["R", "CMD", "build", "--no-build-vignettes", "--no-manual", str(stage)],
                   cwd=out, check=True, capture_output=True, timeout=300, env=dist_r.r_env())
    return next(out.glob("tfdistributed_*.tar.gz"))


def _rscript(code: str, env: dict, cwd: Path, timeout: float = 900) -> str:
    done = subprocess.run(["Rscript", "-e", code], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.slow
def test_an_r_user_installs_the_package_then_the_backend_it_carries(dist, tmp_path):
    """R CMD INSTALL of the source package into a clean library, then install_tfdistributed()
    with no argument: the virtualenv r-tfdistributed (under WORKON_HOME, reticulate's home of
    virtualenvs) with the carried wheel and a TensorFlow from the index, found by itself in
    the next session."""
    wheel = next(dist.glob("*.whl"))
    tarball = _r_source_package(wheel, tmp_path)
    library = tmp_path / "library"
    library.mkdir()
    env = _clean_env()
    # The R dependencies (reticulate, rlang) a user has from CRAN: here from the project's
    # library, after the clean one.
    env["R_LIBS"] = f"{library}:{ROOT / '.rlib'}"
    env["WORKON_HOME"] = str(tmp_path / "virtualenvs")
    subprocess.run(["R", "CMD", "INSTALL", "-l", str(library), str(tarball)], check=True,
                   capture_output=True, timeout=300, env=env)
    said = _rscript("tfdistributed::install_tfdistributed()", env, tmp_path)
    assert "Installed the tfdistributed backend into virtualenv 'r-tfdistributed'" in said, said
    python = tmp_path / "virtualenvs" / "r-tfdistributed" / "bin" / "python"
    assert python.exists(), said
    out = _rscript(
        "library(tfdistributed); cat('from:', find.package('tfdistributed'), '\\n'); "
        "s <- distribute_strategy('mirrored', num_cpu_devices = 2L); "
        "cat('replicas:', s$num_replicas_in_sync, '\\n'); "
        "cat('python:', reticulate::py_config()$python, '\\n'); "
        "cat('module:', tfd$`__file__`, '\\n')", env, tmp_path, timeout=300)
    assert f"from: {library}/tfdistributed" in out, out
    assert "replicas: 2" in out, out
    assert f"python: {python}" in out, out
    assert f"module: {tmp_path / 'virtualenvs'}" in out, out
