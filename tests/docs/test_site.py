"""The documentation site builds with ``mkdocs build --strict`` and renders in a browser.

Strict mode turns every warning into a failure: a link to a page or anchor that does not
exist, a page left out of the navigation, an API name mkdocstrings cannot resolve, a
docstring whose parameters do not match the signature. The built site is then served on
127.0.0.1 and opened in headless Chromium (Debian's ``chromium``, as the drill picture's
tests do), which must show the pages with their navigation and search box.
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gateway.drill import find_chromium

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (the README's test command installs it)")


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
        stdin=subprocess.DEVNULL, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for the whole run: the test workers (pytest-xdist) share
    the base temporary directory, and the first to take the lock builds it."""
    shared = tmp_path_factory.getbasetemp().parent
    out, log = shared / "docs-site", shared / "docs-site.log"
    with (shared / "docs-site.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not log.exists():
            done = mkdocs_build(ROOT / "mkdocs.yml", out)
            log.write_text(f"{done.returncode}\n{done.stderr}")
    code, _, stderr = log.read_text().partition("\n")
    assert code == "0", stderr
    return out


@pytest.mark.timeout(180)
def test_the_site_builds_strict(site: Path) -> None:
    # Then every page of the navigation is there, the API and CLI references generated
    for page in ("index.html", "getting-started/index.html", "guides/failures/index.html",
                 "reference/cli/index.html", "benchmarks/details/index.html"):
        assert (site / page).is_file(), page
    api = (site / "reference/api/gateway/index.html").read_text(encoding="utf-8")
    assert 'id="gateway.GeoSender"' in api and 'id="gateway.GeoSender.send_batch"' in api
    cli = (site / "reference/cli/index.html").read_text(encoding="utf-8")
    assert "geogateway queue salvage" in cli and "--durable-queue" in cli


def small_site(tmp_path: Path, page: str, nav: list[object]) -> Path:
    """mkdocs.yml's settings over a docs folder of one page."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(page)
    config.update(docs_dir=str(docs), nav=nav)
    # paths in the API reference's settings are relative to mkdocs.yml: make them absolute
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            python = plugin["mkdocstrings"]["handlers"]["python"]
            python["paths"] = [str(ROOT / path) for path in python["paths"]]
            options = python["options"]
            options["extensions"] = [str(ROOT / path) for path in options["extensions"]]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("page", "nav", "broken"), [
    ("# Home\n\n[gone](nowhere.md), [no heading](#no-such-heading)\n",
     ["index.md", "missing.md"], ["nowhere.md", "no-such-heading", "missing.md"]),
    ("# Home\n\n::: durable_queue.NoSuchName\n", ["index.md"], ["durable_queue.NoSuchName"]),
], ids=["links and pages", "API name"])
def test_the_strict_build_fails_on(tmp_path: Path, page: str, nav: list[object],
                                   broken: list[str]) -> None:
    # Given mkdocs.yml's settings over a page with broken links (strict mode reports
    # every one) or an API name that does not exist (which stops the build at once)
    config = small_site(tmp_path, page, nav)
    # When it is built
    done = mkdocs_build(config, tmp_path / "site")
    # Then the build fails, naming each
    assert done.returncode != 0
    for name in broken:
        assert name in done.stderr, name


# -- in a browser ------------------------------------------------------------------------

class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def dump_dom(url: str, profile: Path) -> str:
    """The page's DOM once its scripts ran, in headless Chromium (offline but for
    127.0.0.1)."""
    assert CHROMIUM is not None
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
    done = subprocess.run(
        [CHROMIUM, "--headless", *sandbox, "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", "--virtual-time-budget=5000",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_chromium
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("path", "content"), [
    ("/", "keeps messages in a durable"),
    ("/guides/modes/", "Passive replication (default)"),
    ("/reference/api/gateway/", 'id="gateway.GeoSender"'),
], ids=["front page", "a guide", "GeoSender reference"])
def test_the_page_renders_with_its_navigation_and_search_box(
        served: str, tmp_path: Path, path: str, content: str) -> None:
    # When the page is opened in the browser
    dom = dump_dom(served + path, tmp_path / "profile")
    # Then it shows its content, the tabs and side navigation and the search box, after
    # Material's script ran (it marks the document)
    assert content in dom
    assert 'class="md-tabs"' in dom and 'class="md-nav md-nav--primary' in dom
    assert 'class="md-search__input"' in dom
    assert "js-focus-visible" in dom
