"""The Python package as users get it: `python -m build` makes an sdist and a wheel (the wheel
built from the sdist, so a file missing from the sdist shows), and each installs into a fresh
virtualenv and works there.

The fresh environments install our package alone (`--no-deps`): TensorFlow and the other
dependencies are reached through a .pth line to this project's .venv, which does not make the
project's own (editable) tfdistributed importable. So what is imported is what was installed.
"""

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
@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_installs_into_a_fresh_venv_and_trains(dist, tmp_path, kind):
    artifact = next(dist.glob("*.whl" if kind == "wheel" else "*.tar.gz"))
    python = _fresh_env(tmp_path / "env")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(artifact)],
                   check=True, capture_output=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CONFIG")}
    done = subprocess.run([python, "-c", CHECK], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["file"].startswith(str(tmp_path / "env")), report
    assert report["version"] == "0.1.0" and report["epochs"] == 2
    assert report["digits"] == [1347, 8, 8, 1]
    # The command-line entry point is installed too.
    cli = subprocess.run([tmp_path / "env" / "bin" / "tfdistributed", "--help"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert cli.returncode == 0 and "launch" in cli.stdout, cli.stderr[-2000:]
