"""The documentation's sources agree with each other and with the rules of the site, checked
without building it (fast: part of `make check`).

- The README is short, for users, and points into the site: no date and no measured run (those
  are the development and Performance articles'); its quick starts are chunks of the articles
  that run them when the site is built (R: Getting started; Python: Getting started from
  Python), so the code on the home page is code that ran.
- Every other code block of the site either runs (a knitr chunk) or says it does not, and why:
  fenced blocks of the web-only articles and the help pages' \\dontrun{} examples start with a
  "# Not run here: <reason>" line. (The README's block of `make` commands is the project's
  commands, not an example; ``text`` blocks are transcripts and the layout, not code.)
- _pkgdown.yml lists every article and every help topic; the R conventions are kept: NEWS.md,
  no placeholder URL, the package help page linking to the articles, a CITATION file.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import docsite  # noqa: E402

README = (ROOT / "README.md").read_text()
ARTICLES = ROOT / "vignettes" / "articles"
FENCE = re.compile(r"^```([\w{][^\n]*)?\n(.*?)^```", re.M | re.S)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, code) of every fenced block of a markdown or R Markdown text."""
    return [((m.group(1) or "").strip(), m.group(2)) for m in FENCE.finditer(text)]


def chunk(path: Path, label: str) -> str:
    for info, code in fenced_blocks(path.read_text()):
        if re.match(r"\{(r|python)[ ,]+" + re.escape(label) + r"[ ,}]", info):
            return code
    raise AssertionError(f"no chunk {label} in {path.name}")


def test_readme_is_short_and_points_into_the_site():
    lines = README.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the details go in the articles"
    for command in ("make demo", "make test", "make check", "make docs", "make bench"):
        assert command in README, command
    # Every tutorial and guide is one link away.
    for name in docsite.article_names(docsite.RPKG):
        if name == "articles/conformance":
            continue
        source = f"vignettes/{name}.Rmd"
        assert f"]({source})" in README, f"the README does not link to {source}"


# What a measured run reads like: a timing of the suite, CPU seconds, a count of tests run,
# "measured on ...". They belong to the development article (the suite) and the Performance
# article (the benchmarks), where each number is named with the run it came from.
MEASURED_RUN = [
    (r"\b\d+ min(?: \d+ s)?\b", "a timing (\"26 min 50 s\")"),
    (r"\bCPU s\b|\bs of CPU\b|\bseconds of CPU\b", "CPU seconds"),
    (r"\bof pytest\b", "a timing of pytest"),
    (r"\b\d[\d,]* tests\b", "a count of tests"),
    (r"(?i)\bmeasured\b", "\"measured ...\""),
    (r"\d+(?:-\d+)?% busy", "how busy the cores were"),
]


def test_readme_is_for_users_no_date_and_no_measured_run():
    """The README (and so the site's home page) says what tfdistributed is, how to install it,
    the quick starts and where to read next: no date, no timing of the test suite or the
    benchmarks (a README that logged runs grew into a diary of the suite)."""
    dates = re.findall(r"20\d\d-\d\d-\d\d", README)
    assert not dates, f"README.md holds dates: {dates}"
    for pattern, what in MEASURED_RUN:
        found = re.findall(pattern, README)
        assert not found, f"README.md holds {what}: {found}; it goes in the articles"
    for heading in ("## Install", "## Quick start (R)", "## Quick start (Python)",
                    "## Where to read next", "## Develop"):
        assert heading in README, heading


def test_readme_links_lead_to_files_of_the_repository():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if re.match(r"[a-z]+://", target):
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_home_page_links_are_the_sites():
    home = docsite.home_page(README)
    for target in re.findall(r"\]\(([^)\s]+)\)", home):
        if re.match(r"[a-z]+://|#", target):
            continue
        assert re.match(r"(articles|reference|news|python)/", target), target


def test_readme_quick_starts_are_the_articles_chunks_that_run():
    blocks = dict((info, code) for info, code in fenced_blocks(README) if info in ("r", "python"))
    assert blocks["r"] == chunk(ROOT / "vignettes" / "getting-started.Rmd", "quick-start")
    assert blocks["python"] == chunk(ARTICLES / "getting-started-python.Rmd", "quick-start")
    for info, code in fenced_blocks(README):
        assert info in ("r", "python", "text") or all(line.startswith("make ")
                                                      for line in code.splitlines()), (info, code)


@pytest.mark.parametrize("article", sorted(p.name for p in ARTICLES.glob("*.Rmd")))
def test_article_code_runs_or_says_why_not(article):
    text = (ARTICLES / article).read_text()
    for info, code in fenced_blocks(text):
        if info.startswith("{"):
            assert not re.search(r"eval\s*=\s*(FALSE|F)\b", info), (article, info)
        elif info != "text":   # a transcript of output, not code
            first = code.splitlines()[0] if code.strip() else ""
            assert first.startswith("# Not run"), (article, info, first)


def test_article_titles_have_no_dollar_sign():
    """pkgdown puts an article's title into a pandoc template, where `$` starts a variable: a
    title with `strategy$run` failed the render ("Error compiling template")."""
    for rmd in sorted((ROOT / "vignettes").rglob("*.Rmd")):
        title = re.search(r'^title: "(.*)"$', rmd.read_text(), re.M).group(1)
        assert "$" not in title, (rmd.name, title)


def test_help_pages_examples_not_run_say_why():
    for rd in sorted((ROOT / "rpkg" / "man").glob("*.Rd")):
        for block in re.findall(r"\\dontrun\{\n(.*?)\n\}", rd.read_text(), re.S):
            assert block.startswith("# Not run here:"), (rd.name, block)


def test_pkgdown_config_lists_every_article_and_topic():
    config = yaml.safe_load((ROOT / "rpkg" / "_pkgdown.yml").read_text())
    listed = [name for section in config["articles"] for name in section["contents"]]
    expected = sorted(p.stem for p in (ROOT / "vignettes").glob("*.Rmd"))
    expected += sorted(f"articles/{p.stem}" for p in ARTICLES.glob("*.Rmd"))
    # Made by scripts/docsite.py from CONFORMANCE.md and COMPATIBILITY.md.
    expected += ["articles/conformance", "articles/compatibility"]
    assert sorted(listed) == sorted(expected)
    # Every article is in a menu of the navbar: the users' in Articles, the one for people
    # working on tfdistributed itself in Contributing, not among the users' guides.
    components = config["navbar"]["components"]
    assert "contributing" in config["navbar"]["structure"]["left"]
    menus = {name: [item.get("href") for item in components[name]["menu"]]
             for name in ("articles", "contributing")}
    for name in expected:
        page = f"articles/{name.split('/')[-1]}.html"
        where = "contributing" if name == "articles/development" else "articles"
        assert page in menus[where], (name, where)
    assert "articles/development.html" not in menus["articles"]
    sections = {section["title"]: section["contents"] for section in config["articles"]}
    assert sections["Contributing"] == ["articles/development"]
    # Each help page's family (\concept) has a section, or the page is listed by name.
    selectors = [c for section in config["reference"] for c in section["contents"]]
    for rd in sorted((ROOT / "rpkg" / "man").glob("*.Rd")):
        text = rd.read_text()
        concept = re.search(r"\\concept\{([^}]+)\}", text)
        assert (concept and f'has_concept("{concept.group(1)}")' in selectors) \
            or rd.stem in selectors, f"{rd.name} is in no section of the reference"


def test_r_package_conventions():
    description = (ROOT / "rpkg" / "DESCRIPTION").read_text()
    version = re.search(r"^Version: (\S+)", description, re.M).group(1)
    # No placeholder address: the project publishes no site or tracker yet, and a URL that
    # leads nowhere is wrong metadata (R CMD check and CRAN take a package without URL).
    for source in (description, (ROOT / "rpkg" / "inst" / "CITATION").read_text(),
                   (ROOT / "pyproject.toml").read_text()):
        assert "example.org/" not in source
    news = (ROOT / "rpkg" / "NEWS.md").read_text()
    assert news.startswith(f"# tfdistributed {version}")
    package = (ROOT / "rpkg" / "man" / "tfdistributed-package.Rd").read_text()
    for vignette in sorted(p.stem for p in (ROOT / "vignettes").glob("*.Rmd")):
        assert f'vignette("{vignette}", package = "tfdistributed")' in package, vignette
    for guide in ("self-healing", "seeing-a-job", "clusters-and-networks", "performance"):
        assert f"articles/{guide}.html" in package, guide
    roxygen = (ROOT / "rpkg" / "R" / "package.R").read_text()
    assert "@section Articles:" in roxygen and "articles/self-healing.html" in roxygen


def test_citation_parses():
    code = ('meta <- as.list(read.dcf("rpkg/DESCRIPTION")[1, ]); '
            'cit <- utils::readCitationFile("rpkg/inst/CITATION", meta = meta); '
            'cat(format(cit, style = "text"))')
    run = subprocess.run(["Rscript", "-e", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "tfdistributed" in run.stdout and "R package version" in run.stdout, run.stdout
