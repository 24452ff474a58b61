"""The course website (``make site``) in Chromium, served from 127.0.0.1 and nothing else.

``make test-site`` (and ``make test``) builds the site into _build/site and runs this module on it
(``LMLESSONS_SITE_DIR``). Run on its own, the module tests _build/site when it was built from the
current notebooks and skips otherwise (say ``make test-site``); with ``LMLESSONS_SITE_DIR`` set, a
missing or stale site fails.

Every lesson page (one per notebooks/*.ipynb) must: load with no console error, no failed request
and no request to any host but the local server (others are aborted and reported); load every
image (naturalWidth > 0); have every internal link resolve, anchors included; render its math
(MathJax output, no TeX error) where the notebook's Markdown has ``$`` math; show a copy button on
every code cell, previous/next links in lesson order, and Colab/Binder badges for its student copy;
and show as many figures as its notebook has image outputs.

Figures, precisely: a figure is an ``<img>`` inside a cell's output area (``div.cell_output``). The
notebook side counts, for every display_data/execute_result output, the representation the site
shows: text/html if the output has it (this is also the stored picture of every widget, whose
widget view is never chosen), else the first of image/svg+xml, image/png, image/jpeg, image/gif.
An image representation counts 1; a text/html one counts its ``<img`` tags. Stream and error
outputs count 0, and so do images in Markdown cells (prose, not outputs).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import runpy
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

import tools.browser as jb
from tests._lessons import LESSONS, ROOT

SITE_SOURCES = ROOT / "site"
sys.path.insert(0, str(SITE_SOURCES))
import lmsite  # noqa: E402  (site/ is not a package)

DEFAULT_SITE = ROOT / "_build" / "site"
FIGURE_MIMES = ("image/svg+xml", "image/png", "image/jpeg", "image/gif")
#: Inline or display math in Markdown: $x$ or $$...$$ (a $ followed by no space).
MATH = re.compile(r"\$\$?[^\s$]")
CONF = runpy.run_path(str(SITE_SOURCES / "conf.py"))


def expected_figures(notebook: dict[str, Any]) -> int:
    """Figures the page must show for ``notebook`` (the rule is in the module docstring)."""
    count = 0
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text/html" in data:
                count += len(re.findall(r"<img\b", "".join(data["text/html"]), re.I))
            elif any(mime in data for mime in FIGURE_MIMES):
                count += 1
    return count


def has_math(notebook: dict[str, Any]) -> bool:
    markdown = (c for c in notebook["cells"] if c["cell_type"] == "markdown")
    return any(MATH.search("".join(c["source"])) for c in markdown)


def page_name(path: Path) -> str:
    return f"notebooks/{path.stem}.html"


# ------------------------------------------------------------------------------------------
# The site, its server and the browser (module scope)
# ------------------------------------------------------------------------------------------
def _built_from(site: Path) -> dict[str, str]:
    """The SHA-256 of each lesson the site was built from (site/build.py records them)."""
    return json.loads((site / "_lessons.json").read_text(encoding="utf-8"))


def _stale_reason(site: Path) -> str | None:
    if not (site / "index.html").is_file() or not (site / "_lessons.json").is_file():
        return f"no site built in {site}"
    built = _built_from(site)
    current = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in LESSONS}
    changed = sorted({name for name, _ in set(built.items()) ^ set(current.items())})
    return f"{site} was built from other notebooks: {changed}" if changed else None


def _read_as_built(site: Path, path: Path) -> dict[str, Any]:
    """The notebook at ``path``, failing if it changed since the site was built."""
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == _built_from(site).get(path.name), (
        f"{path.name} changed since the site was built: run `make test-site`"
    )
    return json.loads(data)


@pytest.fixture(scope="module")
def site() -> Path:
    given = os.environ.get("LMLESSONS_SITE_DIR")
    path = Path(given).resolve() if given else DEFAULT_SITE
    reason = _stale_reason(path)
    if reason and given:
        pytest.fail(f"LMLESSONS_SITE_DIR: {reason}")
    if reason:
        pytest.skip(f"{reason}: `make test-site` builds the site and tests it")
    return path


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    """A static file server over the site on a free 127.0.0.1 port; yields its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[jb.Browser]:
    path = jb.find_chromium()
    if path is None:
        pytest.skip("no Chromium found; install it with `apt-get install chromium`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = jb.launch_chromium(pw, path)
        try:
            yield browser
        finally:
            browser.close()


class PageLog:
    """A page and what it did: console errors, failed requests, requests to other hosts (refused).
    In a fresh context (a first visit: no cache, no stored settings) unless ``context`` is given
    (the lesson pages share one, as a reader going from page to page does)."""

    def __init__(self, browser: jb.Browser, base: str, context: Any = None) -> None:
        self.base = base
        self.errors: list[str] = []
        self.failed: list[str] = []
        self.foreign: list[str] = []
        self.own_context = context is None
        self.context = jb.new_context(browser) if context is None else context
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", self._page_error)
        self.page.on("requestfailed", self._request_failed)
        self.page.on("response", self._response)
        self.page.route("**/*", self._route)

    def _console(self, msg: Any) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)

    def _page_error(self, error: Any) -> None:
        self.errors.append(f"page error: {error}")

    def _request_failed(self, request: Any) -> None:
        self.failed.append(f"{request.url}: {request.failure}")

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self.failed.append(f"{response.url}: HTTP {response.status}")

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(self.base) or url.startswith(("data:", "blob:", "about:")):
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort()

    def close(self) -> None:
        if self.own_context:
            self.context.close()
        else:
            self.page.close()

    def check(self, name: str) -> None:
        """Every request the page made has ended (at once when the checks before took longer
        than the half second of quiet that means), and none failed or went to another host."""
        self.page.wait_for_load_state("networkidle")
        assert not self.foreign, f"{name} requests other hosts: {self.foreign}"
        assert not self.failed, f"{name} has failed requests: {self.failed}"
        assert not self.errors, f"{name} has console errors: {self.errors}"


def _open(browser: jb.Browser, base: str, name: str, context: Any = None) -> PageLog:
    """The page loaded (its scripts, styles and images); :meth:`PageLog.check` waits for the
    requests made after that."""
    log = PageLog(browser, base, context)
    log.page.goto(base + name, wait_until="load")
    return log


IMAGES_JS = """async () => {
  const images = [...document.images];
  images.forEach((img) => { img.loading = 'eager'; });
  await Promise.all(images.map((img) => img.complete ? null
    : new Promise((done) => { img.onload = img.onerror = done; })));
  return images.map((img) => [img.getAttribute('src').slice(0, 80), img.naturalWidth]);
}"""

MATH_JS = """async () => {
  if (!window.MathJax || !MathJax.startup) return null;
  await MathJax.startup.promise;
  return {math: document.querySelectorAll('.math').length,
          typeset: document.querySelectorAll('.math mjx-container').length,
          errors: [...document.querySelectorAll('mjx-merror')].map((e) => e.textContent)};
}"""

LINKS_JS = "() => [...document.querySelectorAll('a[href]')].map((a) => a.href)"

#: axe-core, installed from npm by `make setup` (Makefile: AXE_CORE); LMLESSONS_AXE overrides.
AXE = Path(
    os.environ.get(
        "LMLESSONS_AXE", ROOT / ".venv" / "node" / "node_modules" / "axe-core" / "axe.min.js"
    )
)
AXE_JS = """async (tags) => {
  const only = {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']};
  const result = await axe.run(document, only);
  const why = (n) => (n.failureSummary || '').split('\\n').slice(1, 2).join('');
  return result.violations.flatMap((v) => v.nodes.map((n) =>
    `${v.id}: ${n.target.join(' ')}: ${why(n)}`));
}"""
#: WCAG 2.0 and 2.1, levels A and AA.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
#: An image's alt text must say what it shows: words, not a file name.
ALT_JS = "() => [...document.images].map((img) => [img.getAttribute('src').slice(0, 60), img.alt])"


def axe_violations(page: Any) -> list[str]:
    """Every node of ``page`` that breaks a WCAG 2.1 A or AA rule, as axe-core reports it."""
    if not AXE.is_file():
        message = f"axe-core not found at {AXE}: `make setup` installs it from npm"
        if os.environ.get("LMLESSONS_SITE_DIR"):
            pytest.fail(message)
        pytest.skip(message)
    page.add_script_tag(path=str(AXE))
    return page.evaluate(AXE_JS, AXE_TAGS)


def bad_alt_texts(page: Any) -> list[str]:
    """Images whose alt text is missing, a file name, or fewer than three words."""
    bad = []
    for src, alt in page.evaluate(ALT_JS):
        short = len(alt.split()) < 3 and alt not in ("Open in Colab", "Launch Binder")
        if short or re.search(r"\.(png|svg|jpe?g|gif)\b", alt):
            bad.append(f"{src}: {alt!r}")
    return bad


@functools.cache
def _fetch(url: str) -> str | None:
    """The text of a page of the local server, or None when it is not there."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError:
        return None


def broken_links(base: str, hrefs: list[str]) -> list[str]:
    """Internal links (under ``base``) whose page or anchor does not exist."""
    broken = []
    for href in sorted(set(hrefs)):
        if not href.startswith(base):
            continue
        anchor = unquote(urlsplit(href).fragment)
        text = _fetch(href.split("#", 1)[0])
        if text is None or (anchor and f'id="{anchor}"' not in text):
            broken.append(href)
    return broken


# ------------------------------------------------------------------------------------------
# The harness can fail
# ------------------------------------------------------------------------------------------
def test_the_figure_rule_counts_what_the_site_shows() -> None:
    widget = {
        "output_type": "display_data",
        "data": {
            "application/vnd.jupyter.widget-view+json": {"model_id": "x"},
            "text/html": ['<div><img src="data:image/png;base64,AA"><img src="b.png"></div>'],
            "text/plain": ["Slider(...)"],
        },
    }
    plot = {"output_type": "display_data", "data": {"image/png": "AA", "text/plain": ["<Fig>"]}}
    table = {"output_type": "execute_result", "data": {"text/html": ["<table></table>"]}}
    stream = {"output_type": "stream", "name": "stdout", "text": ["<img> in a print\n"]}
    notebook = {"cells": [{"cell_type": "code", "outputs": [widget, plot, table, stream]}]}
    assert expected_figures(notebook) == 3


def test_the_broken_link_check_finds_missing_pages_and_anchors(server: str) -> None:
    good = server + "index.html#the-lessons"
    assert broken_links(server, [good, "https://example.org/x"]) == []
    missing = [server + "notebooks/99_missing.html", server + "index.html#no-such-anchor"]
    assert broken_links(server, [good, *missing]) == sorted(missing)


@pytest.mark.browser
def test_the_accessibility_check_finds_low_contrast_and_bad_alt_text(
    browser: jb.Browser, server: str
) -> None:
    log = _open(browser, server, "index.html")
    try:
        assert axe_violations(log.page) == []
        log.page.evaluate(
            """() => { const p = document.createElement('p');
              p.style.cssText = 'color:#777;background:#fff;font-size:12px';
              p.textContent = 'grey on white'; document.querySelector('main').append(p);
              const img = document.createElement('img');
              img.src = '_static/favicon.svg'; img.alt = '../_images/abc.png';
              document.querySelector('main').append(img); }"""
        )
        found = axe_violations(log.page)
        assert len(found) == 1 and found[0].startswith("color-contrast"), found
        assert [a for a in bad_alt_texts(log.page) if "abc.png" in a]
    finally:
        log.close()


@pytest.mark.browser
def test_a_foreign_request_is_refused_and_reported(browser: jb.Browser, server: str) -> None:
    log = PageLog(browser, server)
    try:
        log.page.goto(server + "index.html", wait_until="load")
        log.page.evaluate("() => fetch('http://example.invalid/font.woff2').catch(() => null)")
        log.page.wait_for_load_state("networkidle")
        with pytest.raises(AssertionError, match="requests other hosts"):
            log.check("index.html")
    finally:
        log.close()


# ------------------------------------------------------------------------------------------
# The site
# ------------------------------------------------------------------------------------------
def test_every_lesson_has_a_page(site: Path) -> None:
    assert LESSONS, "no notebooks/*.ipynb"
    missing = [page_name(p) for p in LESSONS if not (site / page_name(p)).is_file()]
    assert not missing, f"lessons without a page: {missing}"


def test_no_page_names_another_host_for_a_script_style_or_font(site: Path) -> None:
    loads = re.compile(r"<(?:script|link|img|source|iframe)\b[^>]*?(?:src|href)=\"(?:https?:)?//")
    found = [p.name for p in site.rglob("*.html") if loads.search(p.read_text(encoding="utf-8"))]
    assert not found, f"pages that load from another host: {found}"


@pytest.mark.browser
def test_the_landing_page_is_the_lesson_map(browser: jb.Browser, server: str) -> None:
    log = _open(browser, server, "index.html")
    try:
        links = log.page.evaluate(LINKS_JS)
        for path in LESSONS:
            assert server + page_name(path) in links, f"the landing page does not link {path.name}"
        assert all(width > 0 for _, width in log.page.evaluate(IMAGES_JS))
        assert broken_links(server, links) == []
        assert axe_violations(log.page) == []
        log.check("index.html")
    finally:
        log.close()


@pytest.mark.browser
def test_search_finds_a_lesson(browser: jb.Browser, server: str) -> None:
    log = _open(browser, server, "search.html?q=num_items_in_batch")
    try:
        results = log.page.locator("#search-results a")
        results.first.wait_for(timeout=30_000)
        hrefs = [results.nth(i).get_attribute("href") for i in range(results.count())]
        assert any("07_loss_at_scale" in (h or "") for h in hrefs), hrefs
        log.check("search.html")
    finally:
        log.close()


@pytest.fixture(scope="module")
def reader(browser: jb.Browser) -> Iterator[Any]:
    """One browser context for the lesson pages, read one after another: the first is a first
    visit, the others load the theme's files from the cache."""
    context = jb.new_context(browser)
    yield context
    context.close()


@pytest.mark.browser
@pytest.mark.parametrize("index", range(len(LESSONS)), ids=lambda i: LESSONS[i].stem)
def test_lesson_page(index: int, site: Path, browser: jb.Browser, server: str, reader: Any) -> None:
    path = LESSONS[index]
    name = page_name(path)
    notebook = _read_as_built(site, path)
    log = _open(browser, server, name, reader)
    page = log.page
    try:
        images = page.evaluate(IMAGES_JS)
        assert [src for src, width in images if width == 0] == [], f"{name}: images not loaded"

        figures = page.locator("div.cell_output img").count()
        assert figures == expected_figures(notebook), f"{name}: figures on the page"
        assert bad_alt_texts(page) == [], f"{name}: images without a real alt text"
        assert axe_violations(page) == [], f"{name}: WCAG 2.1 A/AA violations"

        math = page.evaluate(MATH_JS)
        if has_math(notebook):
            assert math is not None, f"{name} has $ math but loads no MathJax"
            assert math["math"] > 0 and math["typeset"] == math["math"], f"{name}: {math}"
            assert not math["errors"], f"{name}: TeX errors {math['errors']}"

        code = page.locator("div.cell_input div.highlight pre").count()
        assert code > 0 and page.locator("div.cell_input button.copybtn").count() == code

        badges = page.locator("p.lmlessons-launch a")
        urls = lmsite.launch_urls(CONF["lmlessons_repository"], CONF["lmlessons_branch"], path.name)
        assert [badges.nth(i).get_attribute("href") for i in range(badges.count())] == [
            urls["colab"],
            urls["binder"],
        ]

        before = page_name(LESSONS[index - 1]).split("/")[1] if index else "../index.html"
        prev = page.locator("a.left-prev").get_attribute("href")
        assert prev == before, f"{name}: previous is {prev}"
        if index < len(LESSONS) - 1:
            after = page_name(LESSONS[index + 1]).split("/")[1]
            assert page.locator("a.right-next").get_attribute("href") == after
        else:
            assert page.locator("a.right-next").count() == 0

        assert broken_links(server, page.evaluate(LINKS_JS)) == [], f"{name}: broken links"
        log.check(name)
    finally:
        log.close()


# ------------------------------------------------------------------------------------------
# Launch badges in README.md (no browser)
# ------------------------------------------------------------------------------------------
def test_readme_rows_launch_every_student_copy() -> None:
    table = lmsite.lesson_table((ROOT / "README.md").read_text(encoding="utf-8"))
    rows = {
        m.group(1): line
        for line in table.splitlines()
        if (m := re.search(r"\]\(notebooks/(\d\d_\w+\.ipynb)\)", line))
    }
    missing = [p.name for p in LESSONS if p.name not in rows]
    assert not missing, f"lessons without a row in README.md's lesson table: {missing}"
    for notebook, row in rows.items():
        assert (ROOT / "student" / notebook).is_file(), f"no student/{notebook}"
        urls = lmsite.launch_urls(CONF["lmlessons_repository"], CONF["lmlessons_branch"], notebook)
        for kind, url in urls.items():
            assert f"]({url})" in row, f"README row of {notebook} lacks its {kind} badge"


def test_launch_urls_reject_what_is_not_a_github_repository() -> None:
    with pytest.raises(ValueError, match="repository"):
        lmsite.launch_urls("https://gitlab.com/a/b", "main", "00_start_here.ipynb")
    with pytest.raises(ValueError, match="notebook"):
        lmsite.launch_urls("https://github.com/a/b", "main", "student/00_start_here.ipynb")
