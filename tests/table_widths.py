"""Tables wider than the text column, measured on the built book in headless Chromium.

``wide_tables(site, viewport)`` opens every page of a built book (``_build/html``) at a window
``viewport`` pixels wide, opens every fold (``<details>``) as a reader would, and returns, per
page, the tables whose rendered width exceeds the width of the page's text column: a reader would
have to scroll sideways to see their right-hand columns. Used by test_book.py; needs Debian's
chromium and the playwright package.
"""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# the flags this closed network needs: without them Chromium keeps calling home and stalls
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

MEASURE = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const column = document.querySelector('article.bd-article') || document.querySelector('main');
  const style = getComputedStyle(column);
  const width = column.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return [...column.querySelectorAll('table')]
    .map(t => ({width: Math.round(t.getBoundingClientRect().width), column: Math.round(width),
                head: t.innerText.trim().split('\\n')[0].slice(0, 60)}))
    .filter(t => t.width > t.column + 1);
}"""


def available() -> str | None:
    """Why the measurement cannot run here, or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -r requirements.txt)"
    if not Path(CHROMIUM).exists():
        return "no chromium (Debian: apt-get install chromium)"
    return None


def wide_tables(site: Path, viewport: int = 1280) -> dict[str, list[dict]]:
    """Per page of the built book at ``site`` (relative path), its tables wider than the column."""
    from playwright.sync_api import sync_playwright

    site, found = Path(site).resolve(), {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": viewport, "height": 900})
        for html in sorted(site.rglob("*.html")):
            name = str(html.relative_to(site))
            if name.startswith(("_", "genindex", "search")) or 'http-equiv="refresh"' in html.read_text().lower():
                continue  # the index only redirects to the introduction
            page.goto(html.as_uri())
            wide = page.evaluate(MEASURE)
            if wide:
                found[name] = wide
        browser.close()
    return found
