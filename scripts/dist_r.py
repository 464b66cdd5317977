"""The R source package, with its vignettes built inside: what `make dist` runs for R.

    python scripts/dist_r.py [DIST_DIR]        # default: dist/ (writes tfdistributed_<version>.tar.gz)

`R CMD build` builds a package's vignettes by knitting them, and the tutorials' code starts real
multi-process TensorFlow clusters, SLURM and Ray jobs (minutes of CPU). So the tutorials are
knitted once, by the function that knits them for the site (``docsite.knit_article``: the same
format, the same run), and the package is built from the knitted documents: each holds its
computed output and its plots, so `R CMD build` renders it without running code (seconds). This
is the *precomputed vignette* pattern; the tarball's ``vignettes/`` holds the knitted documents,
its ``inst/doc/`` the HTML pages, their plots inside them. ``make test`` builds the package the
same way from the session's one knit (tests/r/test_r_source_package.py).

The steps, in the order :func:`build` runs them:

1. :func:`knit` (skipped when the knitted tutorials are given): the tutorials knitted in a staged
   copy of the site's package (scripts/docsite.py), two at a time;
2. :func:`stage`: a copy of rpkg/ (tests included; vignettes copied, not linked), then
   :func:`use_knitted` puts each knitted tutorial in the place of its source;
3. :func:`build_tarball`: `R CMD build --no-manual` (no LaTeX here) into the destination.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import docsite  # noqa: E402

RPKG = ROOT / "rpkg"
BUILD_TIMEOUT = 600
# knitr's pattern of a chunk's first line (knitr::all_patterns$md$chunk.begin): a document
# that still has one is a source, not a knitted document, and R CMD build would run it.
CHUNK = re.compile(r"^[\t >]*```+\s*\{([a-zA-Z0-9_]+( *[ ,].*)?)\}\s*$", re.M)
# Terminal colours in the output: pkgdown's page draws them, an R vignette would show them as
# "[1m" (docsite.knit_article knits as pkgdown does, with colours).
ANSI = re.compile(r"\x1b\[[0-9;]*m")
IMAGE = re.compile(r'<img src="([^"]+)"|!\[[^\]]*\]\(([^)\s]+)')


class DistError(RuntimeError):
    pass


def tutorial_names() -> list[str]:
    """The package's vignettes: the tutorials, vignettes/*.Rmd (vignettes/articles/ holds the
    site's other articles, which .Rbuildignore keeps out of the package)."""
    return sorted(p.stem for p in (ROOT / "vignettes").glob("*.Rmd"))


def knit(work: Path) -> Path:
    """Every tutorial knitted (its code run) in a staged copy of the site's package under
    ``work``; the directory that holds the knitted documents and their plots."""
    pkg = docsite.stage(work)
    dest = work / "site"
    docsite.init(pkg, dest)   # pkgdown's article format, which the knit uses, needs it
    names = tutorial_names()
    print(f"knitting {len(names)} tutorials, 2 at a time (they run real clusters: minutes)",
          flush=True)
    failures = docsite.knit_articles(pkg, dest, names)
    if failures:
        raise DistError("\n\n".join(f"--- {name} ---\n{out}" for name, out in failures.items()))
    return pkg / "vignettes"


def _ignore(directory: str, names: list[str]) -> set[str]:
    """What a copy of rpkg/ leaves out: check directories, and what an earlier build or knit
    left in the sources (rendered vignettes in vignettes/ and inst/doc/; all gitignored)."""
    where = Path(directory)
    left = {n for n in names if n.endswith(".Rcheck")}
    if where.name == "vignettes":
        left |= {n for n in names if n.endswith(("_files", ".html", ".R", ".knit.md"))}
    if where.name == "inst" and where.parent.name == "rpkg":
        left |= {"doc"} & set(names)
    return left


def stage(work: Path, wheel: Path | None = None) -> Path:
    """A copy of rpkg/ to build, under ``work`` (the vignettes' symbolic link copied as files),
    carrying the backend's ``wheel`` in inst/python/ when given: ``install_tfdistributed()``
    with no ``package`` installs that wheel (R's bundled_wheel())."""
    pkg = work / "tfdistributed"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(RPKG, pkg, symlinks=False, ignore=_ignore)
    if wheel is not None:
        (pkg / "inst" / "python").mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, pkg / "inst" / "python" / Path(wheel).name)
    return pkg


def use_knitted(pkg: Path, knitted: Path) -> None:
    """Each tutorial's knitted document (from ``knitted``, a directory :func:`knit` or a site
    render filled) in the place of its source in the staged package ``pkg``, without terminal
    colours, its plots in vignettes/figures/<name>/: rmarkdown deletes a document's
    ``<name>_files/`` once it has put the plots inside the page, which would leave the tarball's
    vignettes without them."""
    vignettes = pkg / "vignettes"
    for name in sorted(p.stem for p in vignettes.glob("*.Rmd")):
        source = knitted / f"{name}.Rmd"
        if not source.exists():
            raise DistError(f"no knitted {name}.Rmd in {knitted}: knit the tutorials first "
                            f"(python scripts/dist_r.py knits them)")
        text = source.read_text()
        chunk = CHUNK.search(text)
        if chunk:
            raise DistError(f"{source} is not knitted: it still has the chunk "
                            f"{chunk.group(0).strip()!r}, which R CMD build would run. Give "
                            f"the directory docsite.knit_article wrote its tutorials into.")
        figures = knitted / f"{name}_files" / "figure-html"
        target = vignettes / "figures" / name
        text = ANSI.sub("", text).replace(f"{name}_files/figure-html/", f"figures/{name}/")
        if figures.is_dir():
            shutil.copytree(figures, target, dirs_exist_ok=True)
        (vignettes / f"{name}.Rmd").write_text(text)
        missing = [src for pair in IMAGE.findall(text) for src in pair
                   if src and not re.match(r"[a-z]+:", src) and not (vignettes / src).is_file()]
        if missing:
            raise DistError(f"the knitted {name}.Rmd shows images that are not there: {missing}")


def r_env() -> dict:
    """R CMD build installs the package to build its vignettes: the project's R library
    (reticulate) on the library path. No Python is needed: the vignettes run no code."""
    env = dict(os.environ)
    env["R_LIBS"] = str(ROOT / ".rlib")
    env.pop("TF_CONFIG", None)
    return env


def build_tarball(pkg: Path, dest: Path) -> Path:
    """`R CMD build --no-manual` of the staged package into ``dest``; the tarball."""
    dest.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(["R", "CMD", "build", "--no-manual", str(pkg)], cwd=dest, env=r_env(),
                         capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    output = run.stdout + run.stderr
    built = re.search(r"building .(\S+\.tar\.gz).", output)
    if run.returncode != 0 or not built:
        raise DistError(f"R CMD build failed (exit status {run.returncode}):\n{output[-6000:]}")
    if re.search(r"^(Warning|WARNING)", output, re.M):
        raise DistError(f"R CMD build warned:\n{output[-6000:]}")
    return dest / built.group(1)


def build(dest: Path, knitted: Path | None = None, work: Path | None = None,
          wheel: Path | None = None) -> Path:
    """The R source package in ``dest``, its vignettes built from the tutorials knitted in
    ``knitted`` (knitted here when None), carrying the backend's ``wheel`` when given (make
    dist gives the one it built: scripts/dist.py); the tarball's path."""
    own_work = work is None
    work = Path(tempfile.mkdtemp(prefix="tfdistributed-dist-")) if own_work else work
    try:
        if knitted is None:
            knitted = knit(work / "knit")
        pkg = stage(work / "package", wheel)
        use_knitted(pkg, knitted)
        print("R CMD build (the vignettes' pages from the knitted tutorials: no code runs)",
              flush=True)
        return build_tarball(pkg, dest.resolve())
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    dest = Path(argv[0]) if argv else ROOT / "dist"
    try:
        tarball = build(dest)
    except (DistError, docsite.SiteError, subprocess.TimeoutExpired) as e:
        print(e, file=sys.stderr)
        return 1
    print(f"R source package: {tarball}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
