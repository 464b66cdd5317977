"""The documentation site, rendered once per test session (a pytest plugin, loaded by
tests/conftest.py, so that its fixtures exist once for every test folder).

The tutorials run real multi-process TensorFlow clusters, SLURM and Ray jobs when they are
knitted (minutes), so the session knits them once, with the functions `make docs` uses
(scripts/docsite.py): ``site_render`` knits every article into a site under pytest's temporary
directory; tests/r/test_vignettes.py checks each tutorial's computed output in that render, and
``built_site`` finishes the same site (home, reference, changelog, search, Python API) for the
browser tier in tests/docs/. Under pytest-xdist (make test) a session fixture exists once per
worker, so both test files are in one ``xdist_group("site")``: one worker, one render.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import docsite  # noqa: E402


@dataclass
class SiteRender:
    pkg: Path                      # the staged R package the site is built from
    dest: Path                     # the site
    failures: dict                 # article name -> the end of its failed render's output
    seconds: dict = field(default_factory=dict)   # what each part took

    def article(self, name: str) -> Path:
        return self.dest / "articles" / f"{name.split('/')[-1]}.html"


# For working on the site itself, not for CI: the site directory of an earlier session's render
# (.logs/site, kept by the last run). Its articles are taken as they are, only the missing ones are
# knitted, so the browser tier can be re-run in a minute instead of re-running every cluster.
REUSE = "TFDISTRIBUTED_REUSE_SITE_RENDER"
KEPT = ROOT / ".logs" / "site"


@pytest.fixture(scope="session")
def site_render(tmp_path_factory) -> SiteRender:
    """Every article of the site knitted once (two at a time), as `make docs` knits them."""
    from rsupport import ensure_r_package_installed

    ensure_r_package_installed()
    work = tmp_path_factory.mktemp("site-build")
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
    return SiteRender(pkg, dest, failures, {"init": t1 - t0, "articles": t2 - t1})


@pytest.fixture(scope="session")
def built_site(site_render) -> SiteRender:
    """The whole site: the articles of ``site_render`` and the rest, built after them."""
    if site_render.failures:
        pytest.fail("articles failed to render, so the site cannot be built: "
                    + ", ".join(site_render.failures), pytrace=False)
    t0 = time.monotonic()
    docsite.finish(site_render.pkg, site_render.dest)
    site_render.seconds["finish"] = time.monotonic() - t0
    # Kept beside the screenshots, to open after the run (pytest's temporary directories are
    # recycled after three runs), or to give to TFDISTRIBUTED_REUSE_SITE_RENDER.
    shutil.rmtree(KEPT, ignore_errors=True)
    shutil.copytree(site_render.dest, KEPT)
    print(f"\nsite built in {site_render.dest} (a copy in {KEPT}): "
          + ", ".join(f"{part} {s:.0f} s" for part, s in site_render.seconds.items()))
    return site_render
