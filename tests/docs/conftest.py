"""The built site served on 127.0.0.1, and a headless Chromium driven by Selenium through
Debian's chromedriver (set-up installs both: packages chromium and chromium-driver).

Chromium runs with the flags this closed network needs (no background networking, component
updates or sync: without them Chromium's own connections are refused, many at a time) and an
empty profile. When the browser cannot start, the tests that need it FAIL with the reason: a
machine where the site cannot be checked must not look green."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".logs" / "site-screenshots"


class _SiteHandler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        # LinkChecker throttles a host to 10 requests a second unless it answers this header.
        self.send_header("LinkChecker", "local test server")
        super().end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def served_site(built_site):
    """(base URL, site directory) of the built site, served on a free port of 127.0.0.1."""
    handler = functools.partial(_SiteHandler, directory=str(built_site.dest))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", built_site.dest
    server.shutdown()
    server.server_close()


CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  "--window-size=1280,1000", "--hide-scrollbars"]


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """A headless Chromium (Selenium WebDriver) that keeps every console message."""
    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.fail("Chromium or chromedriver is missing, so the site cannot be checked in a "
                    "browser: run scripts/setup.sh (Debian packages chromium, chromium-driver).",
                    pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    except Exception as e:  # noqa: BLE001  (any reason must reach the report)
        pytest.fail(f"Chromium did not start under chromedriver: {type(e).__name__}: {e}",
                    pytrace=False)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def screenshots():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in SCREENSHOTS.glob("*.png"):
        old.unlink()
    return SCREENSHOTS
