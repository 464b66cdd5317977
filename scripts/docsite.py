"""Build the documentation site: pkgdown for the R package, pdoc for the Python API, one navbar.

    python scripts/docsite.py [SITE_DIR]        # what `make docs` runs (default: site/)

The site is built from a staged copy of the R package (rpkg/ with its vignettes, and the home
page made from README.md with its links turned into the site's), so that knitting writes
nothing into the source tree. Its parts, in the order `build()` runs them:

1. ``init``: pkgdown's assets and the Bootstrap theme;
2. ``render_articles``: every vignette and article, two at a time, those that run the most
   cluster jobs first, in two steps each. ``knit_article`` runs its code, once: knitr, through
   rmarkdown with pkgdown's own article format, knits the R Markdown in a fresh R process into
   markdown that holds the computed output, its plots written as PNG files beside it
   (``<name>_files/figure-html/``), and that knitted document takes the source's place in the
   staged package (the *precomputed vignette* pattern). pkgdown then makes its page from it
   in the same R process, which runs no code (seconds); the articles that run no code are
   knitted and made pages one after the other in one R process. The knit is the expensive part (the
   tutorials start real multi-process TensorFlow clusters, SLURM and Ray jobs); ``make test``
   knits them once, through the same function, and the vignette test, the browser test and the
   R source package test all read that one knit (tests/python/support/sitefixtures.py). The
   same knitted tutorials become the R package's built vignettes: scripts/dist_r.py (``make
   dist``) knits them with ``knit_article`` and lets `R CMD build` render them;
3. ``finish``: home, the R reference (every example runs), the articles index, the
   changelog, the search index, and the Python API reference under python/ (pdoc), with a bar
   of links back to the rest of the site.

A failing step raises ``SiteError`` with the step's output; so does any R warning, so the site
builds with no warning or not at all.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RPKG = ROOT / "rpkg"
VIGNETTES = ROOT / "vignettes"
KERAS3_LIB = ROOT / ".rlib-keras3"
# The tutorials that run the most cluster jobs start first, so that the two parallel renders
# end near together (tests/r/test_vignettes.py measured the order).
LONGEST = ("multi-worker", "running-on-a-cluster", "data-bigger-than-memory")
RENDER_TIMEOUT = 900


class SiteError(RuntimeError):
    pass


def article_names(pkg: Path) -> list[str]:
    """pkgdown's names of every article of the staged package ``pkg``: the package vignettes
    (``multi-worker``), then the web-only articles under vignettes/articles/
    (``articles/performance``)."""
    names = sorted(p.stem for p in (pkg / "vignettes").glob("*.Rmd"))
    names += sorted(f"articles/{p.stem}" for p in (pkg / "vignettes" / "articles").glob("*.Rmd"))
    return names


def r_env(keras3: bool = False) -> dict:
    """The environment of the R processes that build the site. With ``keras3``, keras3's library
    (.rlib-keras3, made by scripts/setup.sh) comes first: the tutorials and the home page's quick
    start are written with keras3, as R users write Keras, and the jobs the tutorials launch
    inherit it. The help pages' examples run without it: with keras3 installed, tfdistributed's
    `keras` is keras3's, the plain Python module, and those examples call tfdistributed's own
    `keras` with R values, as users without keras3 do."""
    env = dict(os.environ)
    env.setdefault("R_LIBS", str(ROOT / ".rlib"))
    if keras3:
        libs = [p for p in env["R_LIBS"].split(os.pathsep) if p and p != str(KERAS3_LIB)]
        env["R_LIBS"] = os.pathsep.join([str(KERAS3_LIB), *libs])
    env.setdefault("RETICULATE_PYTHON", sys.executable)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The performance article draws its charts from the benchmarks' result files.
    env["TFDISTRIBUTED_BENCH"] = str(ROOT / "bench")
    env.pop("TF_CONFIG", None)
    return env


# --- the staged package --------------------------------------------------------------------

# README links to files of the repository, and the site pages they become.
SITE_LINKS = [
    (re.compile(r"\]\(vignettes/articles/([\w-]+)\.Rmd(#[\w-]+)?\)"), r"](articles/\1.html\2)"),
    (re.compile(r"\]\(vignettes/([\w-]+)\.Rmd(#[\w-]+)?\)"), r"](articles/\1.html\2)"),
    (re.compile(r"\]\(rpkg/NEWS\.md\)"), "](news/index.html)"),
    (re.compile(r"\]\(CONFORMANCE\.md\)"), "](articles/conformance.html)"),
    (re.compile(r"\]\(COMPATIBILITY\.md\)"), "](articles/compatibility.html)"),
]
# Any other link to a file of the repository has no page on the site: its text stays.
OTHER_FILE_LINK = re.compile(r"\[([^\]]+)\]\((?![a-z]+://|#|articles/|news/)[^)\s]+\)")


def home_page(readme: str) -> str:
    """README.md as the site's home page: links to vignette sources become links to their
    articles, NEWS.md the changelog, CONFORMANCE.md and COMPATIBILITY.md their articles; other
    files of the repository are named, not linked."""
    for pattern, replacement in SITE_LINKS:
        readme = pattern.sub(replacement, readme)
    return OTHER_FILE_LINK.sub(r"\1", readme)


def markdown_article(markdown: str, description: str) -> str:
    """A markdown file of the repository as an article: its first heading becomes the title."""
    heading, body = markdown.split("\n", 1)
    title = heading.lstrip("# ").strip().replace('"', '\\"')
    return f'---\ntitle: "{title}"\ndescription: >\n  {description}\n---\n{body}'


def conformance_article(markdown: str) -> str:
    """CONFORMANCE.md (which the conformance test writes) as an article."""
    return markdown_article(markdown, "Every Keras feature under every strategy, as the "
                                      "conformance test found it.")


def compatibility_article(markdown: str) -> str:
    """COMPATIBILITY.md (which make compat writes) as an article."""
    return markdown_article(markdown, "The TensorFlow, Keras and tensorflow-datasets releases "
                                      "tested at the ends of the supported ranges.")


def stage(work: Path) -> Path:
    """A copy of rpkg/ to build from (vignettes copied, not linked; no tests), with
    pkgdown/index.md made from README.md, and the conformance matrix and the compatibility
    table as articles."""
    pkg = work / "tfdistributed"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(RPKG, pkg, symlinks=False,
                    ignore=shutil.ignore_patterns("tests", "..Rcheck", "*.Rcheck"))
    (pkg / "pkgdown" / "index.md").write_text(home_page((ROOT / "README.md").read_text()))
    # With a logo and no favicons, pkgdown asks realfavicongenerator.net to make them: the
    # pages use the SVG logo as their icon instead (pkgdown/templates/head.html).
    (pkg / "pkgdown" / "favicon").mkdir(exist_ok=True)
    (pkg / "vignettes" / "articles" / "conformance.Rmd").write_text(
        conformance_article((ROOT / "CONFORMANCE.md").read_text()))
    (pkg / "vignettes" / "articles" / "compatibility.Rmd").write_text(
        compatibility_article((ROOT / "COMPATIBILITY.md").read_text()))
    return pkg


# --- R --------------------------------------------------------------------------------------

def _pkg_expr(pkg: Path, dest: Path) -> str:
    return (f'pkg <- pkgdown::as_pkgdown("{pkg}", override = list(destination = "{dest}"))\n')


def rscript(code: str, what: str, timeout: float = RENDER_TIMEOUT, keras3: bool = False,
            env: dict | None = None) -> str:
    """Run R code in a fresh Rscript (with keras3 on its library path if ``keras3``: see
    :func:`r_env`; ``env``: more variables); its warnings are errors (the site builds without
    any). pkgdown is told there is no internet: it would ask CRAN whether the package is there
    (it is not), and this machine reaches no CRAN."""
    returncode, output, cpu = _run_counted(
        ["Rscript", "-e", "options(warn = 2, pkgdown.internet = FALSE)", "-e", code],
        env={**r_env(keras3), **(env or {})}, timeout=timeout)
    CPU_SECONDS[what] = CPU_SECONDS.get(what, 0.0) + cpu
    if returncode != 0:
        raise SiteError(f"{what} failed (Rscript exit status {returncode}):\n{output[-6000:]}")
    return output


#: CPU seconds of each Rscript this process ran, by what it did (``knitting the article
#: multi-worker``): the process and every process it started and waited for (the tutorials'
#: cluster tasks), whatever else ran beside it. What the suite's cost report reads.
CPU_SECONDS: dict[str, float] = {}


def _run_counted(cmd: list[str], env: dict, timeout: float) -> tuple[int, str, float]:
    """``cmd`` run to its end from ROOT: (exit status, stdout and stderr, its CPU seconds).
    os.wait4 reaps it, so that its own resource usage (and its waited-for children's) is known
    even while other commands run beside it, which the process-wide RUSAGE_CHILDREN mixes."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        timed_out = threading.Event()
        timer = threading.Timer(timeout, lambda: (timed_out.set(), proc.kill()))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:   # interrupted: the command does not outlive its caller
            proc.kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)   # reaped here, not by Popen
        out.seek(0)
        output = out.read().decode("utf-8", "replace")
    if timed_out.is_set() and proc.returncode == -signal.SIGKILL:
        raise subprocess.TimeoutExpired(cmd, timeout, output=output)
    return proc.returncode, output, usage.ru_utime + usage.ru_stime


def init(pkg: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    rscript(_pkg_expr(pkg, dest) + "pkgdown::init_site(pkg)", "pkgdown::init_site")


# The article's code runs here, once. rmarkdown knits it (run_pandoc = FALSE: knitr only) with
# the format pkgdown's build_article() knits articles with (pkgdown 2.0.7's internal
# build_rmarkdown_format(): its figure device, size and retina, the code width), in the
# article's directory as pkgdown's render does, into <name>.knit.md and <name>_files/figure-html/,
# then the knitted document replaces the source in the staged package. What it must not hold is
# anything the next knit (pkgdown's page, or R CMD build's vignette) would run again: a chunk or
# inline R code printed by the output, found with knitr's own patterns.
KNIT = """local({
%(pkg)s
i <- match("%(name)s", pkg$vignettes$name)
input <- file.path(pkg$src_path, pkg$vignettes$file_in[i])
format <- pkgdown:::build_rmarkdown_format(pkg, "article", depth = pkg$vignettes$depth[i])
knitted <- rmarkdown::render(input, output_format = format,
  output_file = sub("[.]Rmd$", ".html", basename(input)), run_pandoc = FALSE,
  envir = globalenv(), quiet = TRUE, encoding = "UTF-8")
knitted <- file.path(dirname(input), basename(knitted))
lines <- readLines(knitted, encoding = "UTF-8")
md <- knitr::all_patterns$md
again <- grep(md$chunk.begin, lines) |> union(grep(md$inline.code, lines, perl = TRUE))
if (length(again)) {
  stop("The knitted %(name)s holds R code that would run again when the page is made, ",
       "printed by a chunk's output: ", paste0("line ", again, ": ", lines[again],
       collapse = "; "), ". Print it so that it is not a chunk header or `r ...`.")
}
stopifnot(file.rename(knitted, input))
})"""


def _build_article(pkg: Path, dest: Path, name: str) -> str:
    return _pkg_expr(pkg, dest) + f'pkgdown::build_article("{name}", pkg, quiet = TRUE)\n'


def knit_article(pkg: Path, dest: Path, name: str, render: bool = False) -> str:
    """Run the code of the article ``name`` of the staged package ``pkg``, once: its source
    (``vignettes/<name>.Rmd``) becomes the knitted document, the computed output in it and its
    plots beside it (``<name>_files/figure-html/``). ``dest`` is the site pkgdown's format
    belongs to (:func:`init` made it); with ``render``, the same R process then makes the page
    (:func:`render_article`). Colours as pkgdown's own render has them: pkgdown's page draws
    the ANSI colours of an error; scripts/dist_r.py takes them out for the R package."""
    return rscript(_knit_code(pkg, dest, name, render), f"knitting the article {name}",
                   keras3=True, env=KNIT_ENV)


#: The knits' colours: as pkgdown's own render has them (see :func:`knit_article`).
KNIT_ENV = {"R_CLI_NUM_COLORS": "256"}


def _knit_code(pkg: Path, dest: Path, name: str, render: bool) -> str:
    """The R code of :func:`knit_article`: the knit, then with ``render`` the page."""
    return (KNIT % {"pkg": _pkg_expr(pkg, dest), "name": name} + "\n"
            + (_build_article(pkg, dest, name) if render else ""))


def render_article(pkg: Path, dest: Path, name: str) -> str:
    """pkgdown's page of the knitted article ``name`` (:func:`knit_article`): no code runs."""
    return rscript(_build_article(pkg, dest, name), f"rendering the article {name}",
                   keras3=True)


def _each(names: list[str], step, jobs: int) -> dict[str, str]:
    """``step(name)`` for every name, ``jobs`` at a time, the longest tutorials first; the
    failures by name (their output)."""
    order = sorted(names, key=lambda name: name not in LONGEST)
    failures = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = {name: pool.submit(step, name) for name in order}
        for name, run in runs.items():
            try:
                run.result()
            except (SiteError, subprocess.TimeoutExpired) as e:
                failures[name] = str(e)[-6000:]
    return failures


def knit_articles(pkg: Path, dest: Path, names: list[str], jobs: int = 2) -> dict[str, str]:
    """:func:`knit_article` for each of ``names``, ``jobs`` at a time; the failures by name."""
    return _each(names, lambda name: knit_article(pkg, dest, name), jobs)


#: A knitr chunk (```{r}, ```{python}...) or inline R code: what makes an article run code.
_CODE = re.compile(r"^\s*```+\s*\{|`r ", re.M)


def runs_code(pkg: Path, name: str) -> bool:
    """Whether knitting the article ``name`` of the staged package runs any code."""
    return bool(_CODE.search((pkg / "vignettes" / f"{name}.Rmd").read_text()))


def knit_articles_without_code(pkg: Path, dest: Path, names: list[str]) -> str:
    """:func:`knit_article` with ``render`` for each of ``names``, articles that run no code,
    one after the other in one R process: each in its own would pay R's, rmarkdown's and
    pkgdown's start-up for pages of text (~8 s of CPU each here, 2026-11-28)."""
    code = "\n".join(_knit_code(pkg, dest, name, render=True) for name in names)
    # From a file: R ignores an `-e` expression of 10,000 characters or more, with a warning
    # on stderr and exit status 0.
    with tempfile.TemporaryDirectory(prefix="tfdistributed-site-") as where:
        script = Path(where) / "knit-articles-without-code.R"
        script.write_text(code)
        return rscript(f'source("{script}")', f"knitting the article {', '.join(names)} "
                       "(one R process: no code)", keras3=True, env=KNIT_ENV)


def render_articles(pkg: Path, dest: Path, names: list[str] | None = None,
                    jobs: int = 2) -> dict[str, str]:
    """Knit every article (or ``names``) and make its page, ``jobs`` articles at a time (those
    that run no code together, in one R process); the failures by name (their output), empty
    when every article rendered."""
    names = article_names(pkg) if names is None else names
    quiet = [name for name in names if not runs_code(pkg, name)]
    batch = " + ".join(quiet)

    def step(item):
        if quiet and item == batch:
            return knit_articles_without_code(pkg, dest, quiet)
        return knit_article(pkg, dest, item, render=True)

    failures = _each([n for n in names if n not in quiet] + ([batch] if quiet else []), step,
                     jobs)
    if batch in failures:   # one R process: its output is each of its articles' failure
        failures.update(dict.fromkeys(quiet, failures.pop(batch)))
    return failures


REFERENCE = "pkgdown::build_reference(pkg, examples = TRUE, devel = FALSE, preview = FALSE)\n"
# With keras3 installed: the home page's R quick start is keras3 code, and downlit, linking a
# package's functions to their help, asks CRAN about a package it cannot find (a warning here,
# where CRAN cannot be reached). The search index is built last, over every page.
FINISH = """
pkgdown::build_home(pkg, preview = FALSE)
pkgdown::build_articles_index(pkg)
pkgdown::build_news(pkg, preview = FALSE)
pkgdown::build_search(pkg)
"""


def site_url(pkg: Path) -> str:
    match = re.search(r"^url:\s*(\S+)", (pkg / "_pkgdown.yml").read_text(), re.M)
    return match.group(1).rstrip("/") + "/" if match else ""


def relative_links(dest: Path, url: str) -> None:
    """Links to the site's own address (help pages and the home page's sidebar link to it; the
    404 page loads everything from it) made relative, so that they lead into this copy of the
    site: the address is a placeholder until the project publishes one."""
    if not url:
        return
    pattern = re.compile(r'(href|src)="' + re.escape(url) + r'([^"]*)"')
    for page in dest.rglob("*.html"):
        text = page.read_text()
        if url not in text:
            continue
        up = "../" * (len(page.relative_to(dest).parts) - 1)
        page.write_text(pattern.sub(lambda m: f'{m.group(1)}="{up}{m.group(2) or "index.html"}"',
                                    text))


def finish(pkg: Path, dest: Path) -> None:
    """Everything but the articles: the R reference (its examples run, without keras3: see
    :func:`r_env`), then home, articles index, changelog and search index (with keras3), then
    the Python API reference."""
    rscript(_pkg_expr(pkg, dest) + REFERENCE, "pkgdown (reference)")
    rscript(_pkg_expr(pkg, dest) + FINISH, "pkgdown (home, news, search)", keras3=True)
    python_api(dest)
    relative_links(dest, site_url(pkg))


# --- Python ---------------------------------------------------------------------------------

PYTHON_PACKAGE = ROOT / "pybackend" / "tfdistributed"


def python_modules() -> list[str]:
    """The package and each of its public subpackages and modules: each is documented as its
    own ``__all__`` says (the package's alone would hide the subpackages)."""
    children = sorted(p.stem if p.suffix == ".py" else p.name for p in PYTHON_PACKAGE.iterdir()
                      if not p.name.startswith("_")
                      and (p.suffix == ".py" or (p / "__init__.py").exists()))
    return ["tfdistributed"] + [f"tfdistributed.{name}" for name in children]


def python_api(dest: Path) -> None:
    """The Python API reference (pdoc) under python/, its pages carrying the site's navbar."""
    out = dest / "python"
    if out.exists():
        shutil.rmtree(out)
    env = r_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "pybackend"),
                                                      env.get("PYTHONPATH")]))
    # The docstrings are markdown with reST's ``literals`` and :func:`roles` and Google-style
    # Args/Returns/Raises sections: pdoc's "google" format reads all three.
    run = subprocess.run(
        [sys.executable, "-m", "pdoc",
         "--output-directory", str(out),
         "--template-directory", str(ROOT / "scripts" / "pdoc"), "--docformat", "google",
         "--footer-text", "tfdistributed Python API", *python_modules()],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if run.returncode != 0 or "Warn" in run.stderr:
        raise SiteError(f"pdoc failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}")


# --- all of it ------------------------------------------------------------------------------

def build(dest: Path, work: Path | None = None) -> None:
    """The whole site into ``dest``, from nothing (a previous site there is removed first, so
    no page of a removed article or topic stays behind)."""
    dest = dest.resolve()
    if dest.exists():
        if not (dest / "pkgdown.yml").exists():
            raise SiteError(f"{dest} exists and is not a site built by pkgdown: not touching it")
        shutil.rmtree(dest)
    work = (work or dest.parent / ".site-build").resolve()
    work.mkdir(parents=True, exist_ok=True)
    pkg = stage(work)
    print(f"building the site into {dest}", flush=True)
    init(pkg, dest)
    names = article_names(pkg)
    print(f"rendering {len(names)} articles, 2 at a time (the tutorials run real clusters: "
          f"minutes)", flush=True)
    failures = render_articles(pkg, dest, names)
    if failures:
        raise SiteError("\n\n".join(f"--- {name} ---\n{out}" for name, out in failures.items()))
    print("home, R reference (running its examples), changelog, search, Python API", flush=True)
    finish(pkg, dest)
    shutil.rmtree(work, ignore_errors=True)
    print(f"site: {dest}/index.html", flush=True)


def main(argv: list[str]) -> int:
    dest = Path(argv[0]) if argv else ROOT / "site"
    try:
        build(dest)
    except SiteError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
