"""The documentation site as a reader sees it: every page loaded in headless Chromium, every
link followed, the pages people land on kept as screenshots (.logs/site-screenshots/).

The site is the one this session rendered (tests/python/support/sitefixtures.py: the same
render the vignette tests check), finished here and served on 127.0.0.1. Nothing is fetched
from outside: a page that asks for anything beyond the site fails."""

from __future__ import annotations

import base64
import html.parser
import re
import shutil
import struct
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

# The same xdist group as tests/r/test_vignettes.py: one worker holds the session's one render.
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(2400),
              pytest.mark.xdist_group("site")]

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import docsite  # noqa: E402


def pages_of(dest: Path) -> list[str]:
    return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.html"))


# --- every page in the browser ---------------------------------------------------------------

BROKEN_IMAGES = ("return Array.from(document.images)"
                 ".filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")


def test_every_page_loads_with_no_console_error_and_no_broken_image(served_site, browser):
    base, dest = served_site
    pages = pages_of(dest)
    problems, warnings = {}, 0
    t0 = time.monotonic()
    for page in pages:
        browser.get(base + page)
        log = browser.get_log("browser")
        errors = [entry["message"] for entry in log if entry["level"] == "SEVERE"]
        warnings += sum(entry["level"] == "WARNING" for entry in log)
        broken = browser.execute_script(BROKEN_IMAGES)
        if errors or broken:
            problems[page] = errors + [f"image not drawn: {src}" for src in broken]
    print(f"\n{len(pages)} pages loaded in Chromium in {time.monotonic() - t0:.0f} s "
          f"({warnings} console warnings, no errors allowed)")
    assert len(pages) > 60, pages
    assert not problems, "\n".join(f"{page}: {msgs}" for page, msgs in problems.items())


def _full_page_png(browser, url: str, max_height: int = 14000) -> bytes:
    browser.get(url)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 1280, "height": min(height, max_height), "deviceScaleFactor": 1,
        "mobile": False})
    try:
        shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return base64.b64decode(shot["data"])


def _element_png(browser, element) -> bytes:
    """``element`` alone, through the DevTools protocol as :func:`_full_page_png` (chromedriver's
    own element screenshot gives up after 10 s without the renderer's answer, which a loaded
    machine exceeded once in make test)."""
    rect = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return {x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width,"
        " height: r.height};", element)
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True, "clip": dict(rect, scale=1)})
    return base64.b64decode(shot["data"])


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


SCREENSHOT_PAGES = {"home.png": "index.html", "reference-index.png": "reference/index.html",
                    "multi-worker-article.png": "articles/multi-worker.html"}


def test_screenshots_of_the_pages_people_land_on(served_site, browser, screenshots):
    base, _ = served_site
    for name, page in SCREENSHOT_PAGES.items():
        png = _full_page_png(browser, base + page)
        (screenshots / name).write_bytes(png)
        width, height = _png_size(png)
        assert width == 1280 and height > 1000, (name, width, height)
        assert len(png) > 50_000, f"{name} looks empty ({len(png)} bytes)"
    # The healing timeline alone, to look at without scrolling a whole article.
    browser.get(base + "articles/multi-worker.html")
    figure = browser.find_element("css selector", 'img[src*="heal-timeline"]')
    (screenshots / "multi-worker-healing-timeline.png").write_bytes(_element_png(browser, figure))
    print(f"\nscreenshots in {screenshots}")


def test_search_finds_a_function_and_marks_it_on_its_page(served_site, browser):
    base, _ = served_site
    browser.get(base + "articles/getting-started.html")
    box = browser.find_element("id", "search-input")
    box.click()
    box.send_keys("launch_cluster")
    deadline = time.monotonic() + 10
    results = []
    while time.monotonic() < deadline and not results:
        results = browser.find_elements("css selector", ".tfd-search-results a.dropdown-item")
        time.sleep(0.1)
    assert results, "the search box showed no result for launch_cluster"
    assert any("launch_cluster" in r.text for r in results), [r.text for r in results]
    # The function's own page comes first, before the sections that mention it.
    assert "Reference" in results[0].text and "launch_cluster" in results[0].text, \
        [r.text for r in results]
    results[0].click()
    assert "/reference/launch_cluster.html?q=" in browser.current_url, browser.current_url
    assert browser.find_elements("css selector", "main mark"), "the search term is not marked"
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_articles_have_a_table_of_contents_and_copy_buttons(served_site, browser):
    base, _ = served_site
    browser.get(base + "articles/multi-worker.html")
    toc = [a.text for a in browser.find_elements("css selector", "#toc a.nav-link")]
    assert "When a worker dies" in toc and len(toc) > 8, toc
    assert browser.find_elements("css selector", "div.sourceCode > button.btn-copy-ex")


# --- every link --------------------------------------------------------------------------------

LINKCHECKER_RC = """[checking]
threads=4
maxrequestspersecond=1000
[filtering]
checkextern=0
"""


def test_linkchecker_finds_no_broken_link(served_site, tmp_path):
    """Debian's LinkChecker crawls the whole site from its home page (external links are not
    fetched: checkextern=0)."""
    linkchecker = shutil.which("linkchecker")
    if linkchecker is None:
        pytest.fail("linkchecker is missing: run scripts/setup.sh (Debian package linkchecker)",
                    pytrace=False)
    base, dest = served_site
    rc = tmp_path / "linkcheckerrc"
    rc.write_text(LINKCHECKER_RC)
    t0 = time.monotonic()
    run = subprocess.run([linkchecker, "-f", str(rc), "--no-status", "-o", "text",
                          base + "index.html"], capture_output=True, text=True, timeout=600)
    summary = re.search(r"(\d+) links in (\d+) URLs checked\. (\d+) warnings? found\. "
                        r"(\d+) errors? found", run.stdout)
    assert summary, run.stdout[-3000:] + run.stderr[-3000:]
    links, urls, _, errors = map(int, summary.groups())
    print(f"\nLinkChecker: {links} links in {urls} URLs, {errors} errors, "
          f"{time.monotonic() - t0:.0f} s")
    assert errors == 0 and run.returncode == 0, run.stdout[-8000:]
    # It reached every page (and their images, scripts and styles too).
    assert urls >= len(pages_of(dest)), (urls, len(pages_of(dest)))


class _Page(html.parser.HTMLParser):
    """The ids of a page, and every link and resource it refers to."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.refs = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key) and (key == "id" or tag == "a"):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) is not None and not (tag == "link" and attrs.get("rel") in
                                                   ("canonical", "alternate")):
                self.refs.append((tag, key, attrs[key]))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def test_every_internal_link_and_anchor_resolves_and_nothing_loads_from_outside(built_site):
    """LinkChecker's anchor plugin fetches a page again for every anchor (minutes on the
    Python API's pages), so anchors are checked here, on the files, with every link."""
    dest = built_site.dest
    parsed = {page: _parse(dest / page) for page in pages_of(dest)}
    broken, external = [], []
    for page, doc in parsed.items():
        for tag, key, ref in doc.refs:
            url = urllib.parse.urlsplit(ref)
            if url.scheme in ("data", "javascript", "mailto"):   # inline, or no fetch at all
                continue
            if url.scheme or url.netloc:
                if key == "src" or tag == "link":   # loaded with the page, not followed
                    external.append(f"{page}: <{tag} {key}={ref[:120]}>")
                continue
            target = ((dest / page).parent / urllib.parse.unquote(url.path) if url.path
                      else dest / page).resolve()
            if target.is_dir():
                target = target / "index.html"
            if dest.resolve() not in target.parents and target != dest.resolve():
                broken.append(f"{page}: {ref} leaves the site")
            elif not target.exists():
                broken.append(f"{page}: {ref} (no file {target.relative_to(dest.resolve())})")
            elif url.fragment and target.suffix == ".html":
                ids = parsed.get(target.relative_to(dest.resolve()).as_posix()) or _parse(target)
                if urllib.parse.unquote(url.fragment) not in ids.ids:
                    broken.append(f"{page}: {ref} (no anchor #{url.fragment})")
    assert not external, "pages load resources from outside the site:\n" + "\n".join(external)
    assert not broken, f"{len(broken)} broken internal links:\n" + "\n".join(broken[:80])


# --- what the site holds -------------------------------------------------------------------------

def test_the_site_has_every_part_and_one_navigation_bar(built_site):
    dest = built_site.dest
    for name in docsite.article_names(built_site.pkg):
        assert built_site.article(name).exists(), name
    rd = sorted(p.stem for p in (ROOT / "rpkg" / "man").glob("*.Rd"))
    for topic in rd:
        assert (dest / "reference" / f"{topic}.html").exists(), topic
    index = (dest / "reference" / "index.html").read_text()
    for topic in rd:
        assert f'href="{topic}.html"' in index, f"{topic} is not in the reference index"
    for module in docsite.python_modules():
        assert (dest / "python" / (module.replace(".", "/") + ".html")).exists(), module
    news = (dest / "news" / "index.html").read_text()
    assert "tfdistributed 0.1.0" in news
    # One navigation bar: every pkgdown page leads to the Python API, every pdoc page back.
    for page in pages_of(dest):
        text = (dest / page).read_text()
        if page.startswith("python/"):
            if page != "python/index.html":
                assert 'class="site-bar"' in text and "reference/index.html" in text, page
        elif page != "404.html":
            assert re.search(r'href="(\.\./)*python/tfdistributed\.html"', text), page


def test_reference_examples_ran_and_the_ones_not_run_say_why(built_site):
    dest = built_site.dest / "reference"
    outputs = 0
    for page in sorted(dest.glob("*.html")):
        text = page.read_text()
        examples = text.split('id="ref-examples"', 1)
        if len(examples) < 2:
            continue
        code = html.unescape(re.sub(r"<[^>]+>", "", examples[1]))
        outputs += "#>" in code
        for not_run in re.finditer(r"if \(FALSE\) \{\s*\n(.*)", code):
            assert not_run.group(1).lstrip().startswith("# Not run here:"), (page.name, not_run)
    assert outputs >= 20, f"only {outputs} reference pages show the output of their examples"
    assert list(dest.glob("fit_distributed-*.png")), "plot(history) in the examples drew nothing"
