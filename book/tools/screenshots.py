"""Screenshots of built pages at desktop (1280 px) and phone (390 px) width, for a visual check.

    python book/tools/screenshots.py [--html _build/html] [--out /tmp/book_shots] [PAGE ...]

PAGE is a path relative to the HTML folder (default: a few representative pages). Uses Debian's
/usr/bin/chromium through Playwright, offline, like tests/test_browser.py.
"""

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PAGES = ["book/intro.html", "notebooks/ch01_setting.html", "notebooks/ch02_interpolation.html",
                 "notebooks/ch06_bert.html", "book/notation.html", "book/reconstructions.html"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SIZES = {"desktop": (1280, 900), "phone": (390, 844)}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    ap.add_argument("--out", type=Path, default=Path("/tmp/book_shots"))
    ap.add_argument("--full", action="store_true", help="whole page instead of the first screen")
    ap.add_argument("pages", nargs="*", default=DEFAULT_PAGES)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        for kind, (w, h) in SIZES.items():
            ctx = browser.new_context(viewport={"width": w, "height": h},
                                      device_scale_factor=1 if kind == "desktop" else 2,
                                      is_mobile=kind == "phone", has_touch=kind == "phone")
            ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:")) else r.abort())
            for rel in a.pages:
                page = ctx.new_page()
                page.goto((a.html / rel).resolve().as_uri(), wait_until="load")
                page.evaluate("async () => { if (window.MathJax && MathJax.startup) await MathJax.startup.promise; }")
                name = a.out / f"{kind}_{rel.replace('/', '_').removesuffix('.html')}.png"
                page.screenshot(path=str(name), full_page=a.full)
                print(name)
                page.close()
            ctx.close()
        browser.close()


if __name__ == "__main__":
    main()
