"""The R source package `make dist` writes (scripts/dist_r.py), installed as a user installs it:
`R CMD INSTALL` of the tarball into an empty library, then R run outside the checkout.

The tarball is built from the tutorials this session knitted for the site (the ``site_render``
fixture of tests/python/support/sitefixtures.py): their code ran once, and `R CMD build` renders
the knitted documents without running it. The installed package must list every tutorial as a
vignette, each page with the output computed when it was knitted and its plots inside it, and
work: a mirrored strategy made from it. The library path of that R holds the new library and
reticulate (linked from .rlib, the only R package tfdistributed needs that Debian's do not
give), not the checkout's installed package; the backend is the project's Python
(RETICULATE_PYTHON), as install_tfdistributed() would give a user.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys

import pytest

from rsupport import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import dist_r  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
TIMEOUT = 300
TUTORIALS = dist_r.tutorial_names()
# A line of computed output from each of two tutorials' pages.
COMPUTED = {"getting-started": "replicas in sync: 2", "multi-worker": "[tfdistributed] epoch 5/5"}

CHECK = r"""
options(warn = 2)
library(tfdistributed)
cat("package:", find.package("tfdistributed"), "\n")
cat("libpath:", .libPaths(), sep = "\n")
cat("vignettes:", vignette(package = "tfdistributed")$results[, "Item"], "\n")
for (name in strsplit(Sys.getenv("TUTORIALS"), ",")[[1]]) {
  v <- vignette(name, package = "tfdistributed")
  cat("page:", name, file.path(v$Dir, "doc", v$PDF), "\n")
}
strategy <- distribute_strategy("mirrored", num_cpu_devices = 2)
cat("replicas:", strategy$num_replicas_in_sync, "\n")
"""


@pytest.fixture(scope="module")
def tarball(site_render, tmp_path_factory):
    failed = sorted(set(site_render.failures) & set(TUTORIALS))
    if failed:
        pytest.fail(f"tutorials failed to knit, so the package cannot be built: {failed}",
                    pytrace=False)
    return dist_r.build(tmp_path_factory.mktemp("dist"), knitted=site_render.pkg / "vignettes",
                        work=tmp_path_factory.mktemp("dist-work"))


def clean_env(lib, deps, tmp_path) -> dict:
    """The environment of an R user's shell: nothing of the checkout but its Python."""
    env = {k: v for k, v in os.environ.items()
           if str(ROOT) not in v and not k.startswith(("R_", "RETICULATE_", "TF_CONFIG"))}
    env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                  if str(ROOT) not in p)
    env.update(R_LIBS=f"{lib}{os.pathsep}{deps}", R_LIBS_USER=str(tmp_path / "no-user-library"),
               RETICULATE_PYTHON=str(ROOT / ".venv" / "bin" / "python"),
               TF_CPP_MIN_LOG_LEVEL="2", TUTORIALS=",".join(TUTORIALS))
    return env


def test_the_tarball_installs_into_a_clean_library_with_every_tutorial_as_a_vignette(
        tarball, tmp_path):
    lib, deps = tmp_path / "lib", tmp_path / "deps"
    lib.mkdir()
    deps.mkdir()
    (deps / "reticulate").symlink_to(ROOT / ".rlib" / "reticulate")
    env = clean_env(lib, deps, tmp_path)
    install = subprocess.run(["R", "CMD", "INSTALL", f"--library={lib}", str(tarball)],
                             cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=TIMEOUT)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    run = subprocess.run(["Rscript", "-e", CHECK], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert re.search(r"^package: " + re.escape(str(lib / "tfdistributed")), out, re.M), out
    libpaths = re.findall(r"^(/\S+)$", out, re.M)
    assert libpaths and not [p for p in libpaths if str(ROOT) in p], libpaths
    listed = re.search(r"^vignettes: (.*)$", out, re.M).group(1).split()
    assert sorted(listed) == TUTORIALS
    assert re.search(r"^replicas: 2 $", out, re.M), out

    pages = dict(re.findall(r"^page: (\S+) (\S+) $", out, re.M))
    assert sorted(pages) == TUTORIALS
    for name, path in pages.items():
        page = open(path, encoding="utf-8").read()
        text = html.unescape(re.sub(r"<[^>]+>", "", page))
        # Code shown with the output it printed when the tutorial was knitted, in R's colours
        # nowhere: no terminal escape left in the page.
        assert "#&gt; " in page or "#> " in text, name
        assert "\x1b" not in page, name
        assert COMPUTED.get(name, "#>") in text, (name, COMPUTED.get(name))
        # Plots inside the page (a vignette is one file), none pointing at a missing file.
        images = re.findall(r'<img src="([^"]+)"', page)
        assert all(src.startswith("data:image/png;base64,") for src in images), \
            (name, [src[:80] for src in images])
        if name in ("getting-started", "multi-worker"):
            assert images, f"{name}'s page has no plot"
