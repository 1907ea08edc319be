"""Screenshots of the docs in headless Chromium, into docs/: the site's home page and a concept page,
and the README's first screen.

``make docs-screenshots`` builds the site, serves site/ on a free loopback port, and has Debian's
Chromium (driven by Playwright, no browser downloaded) take each page at 1280 x 900, as a reader's
first screen of it. The README is rendered as a code host shows it (Python-Markdown with fenced code
and tables, a code host's widths and fonts) at 1280 x 1000: its first screen must show the skill and
the install command.
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import markdown
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
CHROMIUM = "/usr/bin/chromium"
PAGES = {
    "docs-home.png": "index.html",
    "docs-concept.png": "concepts/what-counts-as-yes.html",
}


README_CSS = (
    "body{font-family:Helvetica,Arial,sans-serif;font-size:16px;line-height:1.5;max-width:880px;"
    "margin:32px auto;color:#1f2328}pre{background:#f6f8fa;padding:16px;font-size:13.6px;"
    "line-height:1.45;overflow:auto}h1,h2{border-bottom:1px solid #d1d9e0;padding-bottom:.3em}"
)


def readme_page() -> str:
    body = markdown.markdown(
        (ROOT / "README.md").read_text(encoding="utf-8"), extensions=["fenced_code", "tables"]
    )
    return f"<html><head><meta charset=utf-8><style>{README_CSS}</style></head><body>{body}</body></html>"


def main() -> int:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for name, path in PAGES.items():
                page.goto(f"{base}/{path}", wait_until="networkidle")
                page.screenshot(path=str(ROOT / "docs" / name))
                print(f"docs/{name}: {base}/{path}")
            page.set_viewport_size({"width": 1280, "height": 1000})
            page.set_content(readme_page())
            page.screenshot(path=str(ROOT / "docs" / "readme-first-screen.png"))
            print("docs/readme-first-screen.png: README.md as a code host renders it")
            browser.close()
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
