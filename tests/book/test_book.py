"""The book of executed lessons (make book: book/build.py), built from a fresh run of every lesson on soft0 and
read in Chromium as a reader would: every page of its table of contents renders with all its local files, every
chart and table the lessons showed is on their pages (and every chart loads), no link between the pages is
broken, widgets show their static fallback, and each output says where it ran. Lesson 06's page (the target's
CPU, its dashboard drawn static) is kept as .ci/artifacts/book-lesson-06.png.

Needs Debian's Chromium and Jupyter Book (the lab's `book` extra, which make test installs); skips, saying
why, where Chromium is missing, and RDMALAB_BROWSER_TEST=1 (CI) makes that a failure.
"""
import json
import os
import re
import subprocess
import sys
import urllib.parse

import pytest

from rdmalab.lessons import length, series

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.host_only   # the lessons run on soft0 here; the book is a host's product


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        if os.environ.get("RDMALAB_BROWSER_TEST") == "1":
            pytest.fail(f"RDMALAB_BROWSER_TEST=1 but there is no {CHROMIUM}: apt-get install chromium")
        pytest.skip(f"the book's check needs Debian's Chromium at {CHROMIUM}: apt-get install chromium")
    out = tmp_path_factory.mktemp("book")
    built = subprocess.run([sys.executable, os.path.join(ROOT, "book", "build.py"), "--out", str(out)],
                           capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    print("\n" + built.stdout.strip().splitlines()[-1] if built.stdout.strip() else "")
    toc = [line.split("file:")[1].strip() for line in open(out / "src" / "_toc.yml") if "file:" in line]
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield {"site": out / "html", "ran": out / "ran", "src": out / "src", "pages": ["intro"] + toc,
               "browser": browser, "log": built.stdout}
        browser.close()


def opened(book, page_name):
    """(page, failed requests) for the book's page `page_name` (a toc entry: notebooks/05-one-sided)."""
    page = book["browser"].new_page(viewport={"width": 1280, "height": 900})
    failed = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    page.goto((book["site"] / f"{page_name}.html").as_uri())
    page.wait_for_load_state("load")
    return page, failed


def test_every_page_renders_with_all_its_local_files(book):
    assert len(book["pages"]) == 1 + len(series.LESSONS) + 2 + len([n for n in os.listdir(os.path.join(ROOT, "docs"))
                                                                      if n.endswith(".md")])
    for name in book["pages"]:
        page, failed = opened(book, name)
        try:
            assert page.locator("main h1").count() >= 1, f"{name}: no heading"
            local = [url for url in failed if url.startswith("file:")]
            assert not local, f"{name}: could not load {local}"
        finally:
            page.close()


@pytest.mark.parametrize("slug", [slug for slug, _ in series.LESSONS])
def test_each_lessons_page_shows_every_chart_and_table_it_ran_with_widgets_static_and_where_it_ran(book, slug):
    name = series.notebook(slug)
    ran = json.load(open(book["ran"] / name))
    counts = length.count_outputs(ran)
    outputs = sum(1 for c in ran["cells"] if c["cell_type"] == "code" and c.get("outputs")
                  and "injected-parameters" not in c["metadata"].get("tags", []))
    widgets = sum(1 for c in ran["cells"] for o in c.get("outputs", [])
                  if "application/vnd.jupyter.widget-view+json" in o.get("data", {}))
    page, _ = opened(book, f"notebooks/{name.removesuffix('.ipynb')}")
    try:
        images = page.locator(".cell_output img")
        loaded = page.evaluate("() => [...document.querySelectorAll('.cell_output img')].filter(i => i.naturalWidth > 0).length")
        assert loaded == images.count() >= counts["charts"], (slug, loaded, images.count(), counts)
        rows = page.locator(".cell_output tr:has(td)").count()
        assert rows >= counts["rows"], (slug, rows, counts)
        assert page.locator(".cell_output .rdmalab-widget").count() == widgets
        for widget in page.locator(".rdmalab-widget").all():   # what it showed, and that it needs a kernel
            shown = widget.locator(".rdmalab-widget-box > *, img, button, table, progress, input, code, pre").count()
            assert shown and "run the lesson in JupyterLab" in widget.inner_text(), widget.inner_html()[:500]
        assert page.locator("script[type='application/vnd.jupyter.widget-view+json']").count() == 0
        ran_on = page.locator(".rdmalab-ran-on")
        assert ran_on.count() == outputs and "soft0" in ran_on.first.inner_text()
        assert page.get_by_text("Every output on this page is from one run of the lesson on", exact=False).count() == 1
        if slug == "target-cpu":   # the dashboard, drawn static
            shot = os.path.join(ROOT, ".ci", "artifacts", f"book-lesson-{series.number(slug)}.png")
            os.makedirs(os.path.dirname(shot), exist_ok=True)
            page.locator(".rdmalab-widget img").first.scroll_into_view_if_needed()
            page.screenshot(path=shot)
    finally:
        page.close()


def test_no_link_between_the_pages_is_broken(book):
    broken = []
    for name in book["pages"]:
        page, _ = opened(book, name)
        try:
            hrefs = page.evaluate("() => [...document.querySelectorAll('main a[href], nav a[href]')].map(a => a.href)")
        finally:
            page.close()
        for href in hrefs:
            parts = urllib.parse.urlparse(href)
            if parts.scheme != "file":
                continue   # (the web: not reachable from here, and not the book's)
            path = urllib.parse.unquote(parts.path)
            if not os.path.exists(path):
                broken.append(f"{name}: {href}")
            elif parts.fragment and path.endswith(".html"):
                if f'id="{parts.fragment}"' not in open(path).read():
                    broken.append(f"{name}: {href} (no such anchor)")
    assert not broken, "\n".join(sorted(set(broken)))


def test_the_book_is_written_from_the_lessons_and_docs_as_committed(book):
    """Its source: the lessons as run (no QUICK = True anywhere), the guide and the docs, no source-code links."""
    for slug, _ in series.LESSONS:
        nb = json.load(open(book["src"] / "notebooks" / series.notebook(slug)))
        source = "".join("".join(c["source"]) for c in nb["cells"])
        assert "QUICK = True" not in source and not re.search(r"\]\((\.\./)+rdmalab/", source)
    assert (book["src"] / "notebooks" / "README.md").read_text().startswith("# The lessons: a guide for instructors")
