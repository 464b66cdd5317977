"""The documentation site, rendered once per test session (a pytest plugin, loaded by
tests/conftest.py, so that its fixtures exist once for every test folder).

The tutorials run real multi-process TensorFlow clusters, SLURM and Ray jobs when they are
knitted (minutes), so the session knits them once, with the functions `make docs` uses
(scripts/docsite.py): ``site_render`` knits every article (its code runs, and the knitted
document takes the source's place in the staged package, ``pkg``) and makes its page;
tests/r/test_vignettes.py checks each tutorial's computed output in that render,
tests/r/test_r_source_package.py builds the R source package from the same knitted tutorials
(scripts/dist_r.py), and ``built_site`` finishes the same site (home, reference, changelog,
search, Python API) for the browser tier in tests/docs/.

Once per session, not once per pytest-xdist worker (make test runs 3): the site is built in the
directory the workers share (the parent of each worker's base temporary directory), under a
file lock; the first worker that needs it builds it, the others wait and read it. (The two test
files also share an ``xdist_group``, but with pytest 9.2 and pytest-xdist 3.8 ``--dist
loadgroup`` keeps no group together: xdist renames ``item._nodeid``, which pytest 9 no longer
reads. The lock does not depend on it.)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import docsite  # noqa: E402

# For working on the site itself, not for CI: the site directory of an earlier session's render
# (.logs/site, kept by the last run). Its articles are taken as they are, only the missing ones
# are knitted, so the browser tier can be re-run in a minute instead of re-running every cluster.
# The R source package test then fails: the tutorials it needs knitted were not.
REUSE = "TFDISTRIBUTED_REUSE_SITE_RENDER"
KEPT = ROOT / ".logs" / "site"
# CPU seconds of each article's knit (and of pkgdown's other steps), written by every render.
CPU_REPORT = ROOT / ".logs" / "site-cpu.json"


@dataclass
class SiteRender:
    pkg: Path                      # the staged R package the site is built from (knitted)
    dest: Path                     # the site
    failures: dict                 # article name -> the end of its failed render's output
    seconds: dict = field(default_factory=dict)   # what each part took

    def article(self, name: str) -> Path:
        return self.dest / "articles" / f"{name.split('/')[-1]}.html"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({k: str(v) if isinstance(v, Path) else v
                                    for k, v in asdict(self).items()}))

    @classmethod
    def load(cls, path: Path) -> "SiteRender":
        data = json.loads(path.read_text())
        return cls(Path(data["pkg"]), Path(data["dest"]), data["failures"], data["seconds"])


@contextmanager
def _once(tmp_path_factory, name: str):
    """(directory shared by the session's workers, the step's result file), held under a lock:
    the result file exists when another worker has done the step already."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    work = root / "site-build"
    work.mkdir(exist_ok=True)
    with open(work / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield work, work / f"{name}.json"


def _render(work: Path) -> SiteRender:
    from rsupport import ensure_r_package_installed

    ensure_r_package_installed()
    dest = work / "site"
    pkg = docsite.stage(work)
    t0 = time.monotonic()
    docsite.init(pkg, dest)
    names = docsite.article_names(pkg)
    if os.environ.get(REUSE):
        earlier = Path(os.environ[REUSE]) / "articles"
        shutil.copytree(earlier, dest / "articles", dirs_exist_ok=True)
        names = [n for n in names if not (dest / "articles" / f"{n.split('/')[-1]}.html").exists()]
        print(f"\n{REUSE}: articles from {earlier}; rendering only {names}")
    t1 = time.monotonic()
    failures = docsite.render_articles(pkg, dest, names)
    t2 = time.monotonic()
    _report_cpu(fresh=True)
    return SiteRender(pkg, dest, failures, {"init": t1 - t0, "articles": t2 - t1})


def _report_cpu(fresh: bool) -> None:
    """CPU_REPORT: the CPU seconds of each Rscript this process ran for the site (each knit with
    its cluster jobs: the suite's costliest fixture, by article), costliest first; added to the
    file's entries unless ``fresh`` (the site may be finished in another pytest worker)."""
    cpu = {} if fresh or not CPU_REPORT.exists() else json.loads(CPU_REPORT.read_text())
    cpu.update({what.removeprefix("knitting the article "): round(seconds, 1)
                for what, seconds in docsite.CPU_SECONDS.items()})
    CPU_REPORT.parent.mkdir(exist_ok=True)
    CPU_REPORT.write_text(json.dumps(dict(sorted(cpu.items(), key=lambda kv: -kv[1])), indent=1)
                          + "\n")


@pytest.fixture(scope="session")
def site_render(tmp_path_factory) -> SiteRender:
    """Every article of the site knitted once and made a page (two at a time), as `make docs`
    makes them."""
    with _once(tmp_path_factory, "rendered") as (work, done):
        if done.exists():
            return SiteRender.load(done)
        render = _render(work)
        render.save(done)
        return render


@pytest.fixture(scope="session")
def built_site(site_render, tmp_path_factory) -> SiteRender:
    """The whole site: the articles of ``site_render`` and the rest, built after them."""
    if site_render.failures:
        pytest.fail("articles failed to render, so the site cannot be built: "
                    + ", ".join(site_render.failures), pytrace=False)
    with _once(tmp_path_factory, "built") as (_, done):
        if done.exists():
            return SiteRender.load(done)
        t0 = time.monotonic()
        docsite.finish(site_render.pkg, site_render.dest)
        site_render.seconds["finish"] = time.monotonic() - t0
        _report_cpu(fresh=False)
        # Kept beside the screenshots, to open after the run (pytest's temporary directories
        # are recycled after three runs), or to give to TFDISTRIBUTED_REUSE_SITE_RENDER.
        shutil.rmtree(KEPT, ignore_errors=True)
        shutil.copytree(site_render.dest, KEPT)
        print(f"\nsite built in {site_render.dest} (a copy in {KEPT}): "
              + ", ".join(f"{part} {s:.0f} s" for part, s in site_render.seconds.items()))
        site_render.save(done)
        return site_render
