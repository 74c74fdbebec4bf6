"""The built book and the browser, shared by the tests that read ``_build/html`` (markers ``book``, ``browser``).

``HTML`` is the strict build's HTML (``_build/html``, or ``BOUNDS_BOOK_HTML``), ``PAGES`` its pages, and
``needs_book`` skips, with the reason, when no book has been built. The fixtures ``browser`` (Debian's
``/usr/bin/chromium`` through Playwright, offline, installed with apt-get when root) and ``open_page``
(a page in a fresh context whose console errors and outside requests are recorded) are made available
to every test by ``conftest.py``, with ``typeset_page``: what the registered read-only measurements
(:func:`probe`) return on a page loaded and typeset once per test process and viewport (:data:`VIEWPORTS`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
from phone_math_report import RESCALE  # book/tools: on sys.path (conftest.py)

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("BOUNDS_BOOK_HTML", ROOT / "_build" / "html")).resolve()
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Folders of the build that hold assets, not pages.
NOT_PAGES = {"_static", "_sources", "_images", "_downloads", "_panels_static"}


def _pages() -> list[Path]:
    if not (HTML / "index.html").is_file():
        return []
    return sorted(
        p for p in HTML.rglob("*.html") if not (set(p.relative_to(HTML).parts[:-1]) & NOT_PAGES)
    )


PAGES = _pages()


def skip_reason() -> str | None:
    if not PAGES:
        return f"no built book at {HTML} (run `make test` or `make book` first)"
    return None




def needs_book(test):
    """Marker ``book`` on ``test``, and skip it, with the reason, when no book has been built."""
    return pytest.mark.book(pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")(test))


def needs_browser(test):
    """Markers ``book`` and ``browser``: the test opens built pages in Chromium (fixture ``open_page``)."""
    return pytest.mark.browser(needs_book(test))


# A page that only redirects (index.html -> book/intro.html).
REFRESH = re.compile(r'<meta[^>]+http-equiv="refresh"[^>]+content="\d+;\s*url=([^"]+)"', re.I)


def _ensure_chromium() -> str | None:
    """Return None when /usr/bin/chromium is usable, else the reason it is not."""
    if CHROMIUM.exists():
        return None
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("test_browser: /usr/bin/chromium missing; installing Debian's chromium", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        try:
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
            subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env, timeout=900)
        except (subprocess.SubprocessError, OSError) as exc:
            return f"/usr/bin/chromium missing and `apt-get install chromium` failed: {exc}"
        return None if CHROMIUM.exists() else "apt-get ran but /usr/bin/chromium is still missing"
    return "/usr/bin/chromium missing and cannot be installed here (not root or no apt-get)"


@pytest.fixture(scope="session")
def browser():
    """One Chromium per test process (per pytest-xdist worker), for the whole run: every page opens in a
    fresh context (``open_page``). Module scope relaunched it each time a worker came back to a module."""
    reason = skip_reason() or _ensure_chromium()
    if reason:
        print(f"\nSKIP browser test: {reason}")
        pytest.skip(reason)
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as pw:
        # Playwright gives every launch a fresh temporary profile (a new --user-data-dir).
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            yield b
        finally:
            b.close()


class _Watcher:
    """Collect console errors, page errors, blocked network requests and failed local loads."""

    def __init__(self, router, page):
        """Record ``page``'s errors; ``router`` (its context, or the page itself) blocks what is not local."""
        self.errors: list[str] = []
        self.external: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on(
            "requestfailed",
            lambda r: r.url.startswith("file:") and self.errors.append(f"failed to load {r.url}: {r.failure}"),
        )

        def route(r):
            url = r.request.url
            if url.startswith(("file:", "data:", "blob:", "about:")):
                r.continue_()
            else:
                self.external.append(url)
                r.abort()

        router.route("**/*", route)


@pytest.fixture
def open_page(browser):
    contexts = []

    def _open(url: str, width: int = 1280, height: int = 900):
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        watcher = _Watcher(context, page)
        page.goto(url, wait_until="load", timeout=30_000)
        return page, watcher

    yield _open
    for c in contexts:
        c.close()


WAIT_MATHJAX = """async () => {
  const mj = window.MathJax;
  if (!mj) return {loaded: false};
  if (mj.startup && mj.startup.promise) { await mj.startup.promise; }
  if (mj.typesetPromise) { await mj.typesetPromise(); }
  // the fonts a rendered frame asks for (MathJax's web fonts), until none is loading: a formula measured
  // in a fallback font is a few px off. book-math.js marked the wide displays when startup.promise resolved.
  const settle = async () => {
    void document.body.offsetWidth;
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    if (document.fonts && document.fonts.ready) { await document.fonts.ready; }
  };
  await settle();
  for (let i = 0; i < 50 && document.fonts && [...document.fonts].some(f => f.status === 'loading'); i++) {
    await settle();
  }
  // and with the scale MathJax measures now, where the one it typeset with was stale (RESCALE: under
  // load a phone page can be typeset with rounded font metrics, every formula 2.9 % wider; it is what once
  // measured three of Chapter 5's formulas 8 px wider than every other run, which waiting for the widths
  // to stop changing did not cure, and what failed Chapter 3 in a CI run)
  const rescaled = await (""" + RESCALE + r""")();
  if (rescaled) { await settle(); }
  return {loaded: true, rescaled};
}"""


# --------------------------------------------------------------------------------------------
# Pages loaded and typeset once per test process and viewport, for read-only measurements
# --------------------------------------------------------------------------------------------
#: The viewports the browser tests measure in: a laptop, a 390 px desktop window, an emulated phone
#: (touch, 2 device pixels per CSS pixel) and a 1280 x 800 laptop screen.
VIEWPORTS = {
    "laptop": {"viewport": {"width": 1280, "height": 900}},
    "window390": {"viewport": {"width": 390, "height": 844}},
    "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True,
              "device_scale_factor": 2},
    "screen800": {"viewport": {"width": 1280, "height": 800}},
}


@dataclass(frozen=True)
class Probe:
    """A script evaluated on a typeset page (with ``arg``). ``changes_page``: it changes the page (opens
    dropdowns, ...), so it runs after every read-only probe, on a fresh load if another such ran before."""

    script: str
    arg: object = None
    changes_page: bool = False


PROBES: dict[str, dict[str, Probe]] = {v: {} for v in VIEWPORTS}


def probe(viewport: str, name: str, script: str, arg=None, changes_page: bool = False) -> str:
    """Register ``script`` as measurement ``name`` on every page :func:`typeset_page` opens at ``viewport``.

    Test modules register at import (collection), before any page is opened; returns ``name``."""
    new = Probe(script, arg, changes_page)
    old = PROBES[viewport].setdefault(name, new)
    if old != new:
        raise ValueError(f"probe {name!r} at {viewport} registered twice with different scripts")
    return name


@dataclass
class Typeset:
    """A page as the tests measured it: WAIT_MATHJAX's answer, each probe's result, and the console
    errors and blocked outside requests of the load and the read-only probes."""

    mathjax: dict
    results: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    external: list = field(default_factory=list)


def _load_typeset(context, url: str):
    page = context.new_page()
    watcher = _Watcher(page, page)
    page.goto(url, wait_until="load", timeout=30_000)
    return page, watcher, page.evaluate(WAIT_MATHJAX)


def measure_typeset(context, url: str, probes: dict[str, Probe]) -> Typeset:
    """Load ``url`` in ``context``, wait for MathJax, evaluate the read-only probes (by name), record the
    errors after 100 ms more (late console messages), then the probes that change the page."""
    page, watcher, mathjax = _load_typeset(context, url)
    try:
        snap = Typeset(mathjax)
        for name in sorted(n for n, p in probes.items() if not p.changes_page):
            snap.results[name] = page.evaluate(probes[name].script, probes[name].arg)
        page.wait_for_timeout(100)
        snap.errors, snap.external = list(watcher.errors), list(watcher.external)
        for i, name in enumerate(sorted(n for n, p in probes.items() if p.changes_page)):
            if i:  # the page the previous one changed is not the page as loaded
                page.close()
                page, _, _ = _load_typeset(context, url)
            snap.results[name] = page.evaluate(probes[name].script, probes[name].arg)
        return snap
    finally:
        page.close()


def _shared(folder: Path | None, key: tuple[str, str], measure) -> Typeset | Exception:
    """``measure()``, or under pytest-xdist what the first worker to ask measured: it writes the result
    (or its failure) to ``folder``, the run's own temporary folder, while holding a lock on the key."""
    if folder is None:
        try:
            return measure()
        except Exception as exc:  # noqa: BLE001 - every test of the page reports the same failure
            return exc
    from filelock import FileLock

    name = hashlib.sha1("|".join(key).encode()).hexdigest()
    done = folder / f"typeset-{name}.json"
    with FileLock(str(folder / f"typeset-{name}.lock")):
        if not done.is_file():
            try:
                made = {"typeset": asdict(measure())}
            except Exception as exc:  # noqa: BLE001
                made = {"error": f"{type(exc).__name__}: {exc}"}
            done.write_text(json.dumps(made), encoding="utf-8")
        made = json.loads(done.read_text(encoding="utf-8"))
    return Typeset(**made["typeset"]) if "typeset" in made else RuntimeError(f"{key}: {made['error']}")


@pytest.fixture(scope="session")
def typeset_page(browser, tmp_path_factory):
    """``typeset_page(path, viewport) -> Typeset``: every probe registered for ``viewport``, measured once
    per test run on ``path`` (one browser context per viewport; each page closed once measured). Under
    pytest-xdist the workers share the measurements through the run's temporary folder (every worker
    collects the same tests, so registers the same probes)."""
    contexts, cache = {}, {}
    folder = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else None

    def _typeset(path: Path, viewport: str = "laptop") -> Typeset:
        key = (Path(path).resolve().as_uri(), viewport)
        if key not in cache:
            if viewport not in contexts:
                contexts[viewport] = browser.new_context(**VIEWPORTS[viewport])
            cache[key] = _shared(folder, key, lambda: measure_typeset(contexts[viewport], key[0], PROBES[viewport]))
        if isinstance(cache[key], Exception):
            raise cache[key]
        return cache[key]

    yield _typeset
    for c in contexts.values():
        c.close()
