"""A real JupyterLab in a real browser: open lesson 04, run every cell, see the dashboard render.

Starts JupyterLab on 127.0.0.1 with a token, drives Debian's Chromium (/usr/bin/chromium, no browser
download) through Playwright, runs a copy of the lesson with QUICK = True, waits for the dashboard's
chart image and saves a screenshot (RDMALAB_SCREENSHOT, default .ci/artifacts/lesson-04.png).
Opt-in for now (RDMALAB_BROWSER_TEST=1 make test): it passes here, but from a fresh clone in CI it
waited 10 minutes for the chart once, not yet understood; until it is, it must not turn CI red.
"""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.host_only   # a browser, not the RDMA device


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def lab(tmp_path):
    if os.environ.get("RDMALAB_BROWSER_TEST") != "1":
        pytest.skip("the real-browser test is opt-in until it is reliable from a fresh clone: "
                    "RDMALAB_BROWSER_TEST=1 make test (needs Debian's chromium)")
    nb = json.load(open(os.path.join(ROOT, "notebooks", "04-one-sided.ipynb")))
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = ["QUICK = True\n"]
    json.dump(nb, open(tmp_path / "04-one-sided.ipynb", "w"))
    port, token = free_port(), "rdmalab-browser-test"
    jupyter = os.path.join(os.path.dirname(sys.executable), "jupyter")
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen([jupyter, "lab", "--no-browser", "--allow-root", f"--IdentityProvider.token={token}",
                               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                               f"--ServerApp.root_dir={tmp_path}"], stdout=log, stderr=log,
                              env=dict(os.environ, PYTHONPATH=ROOT))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            time.sleep(0.5)
    yield {"url": f"http://127.0.0.1:{port}/lab/tree/04-one-sided.ipynb?token={token}", "log": str(tmp_path / "lab.log")}
    server.terminate()
    try:
        server.wait(15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def test_lesson_04_runs_in_jupyterlab_and_the_dashboard_renders(lab):
    assert os.path.exists(CHROMIUM), "no /usr/bin/chromium: apt-get install chromium"
    from playwright.sync_api import sync_playwright
    shot = os.environ.get("RDMALAB_SCREENSHOT", os.path.join(ROOT, ".ci", "artifacts", "lesson-04.png"))
    os.makedirs(os.path.dirname(shot), exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(lab["url"])
            page.wait_for_selector(".jp-Notebook", timeout=120_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            chart = page.wait_for_selector("img.widget-image[src^='blob:']", timeout=300_000)
            run_button = page.locator(".widget-button", has_text="Run")
            assert run_button.count() == 1 and page.locator(".widget-readout").count() >= 1
            page.wait_for_selector(".jupyter-widgets .progress-bar-success", timeout=300_000)
            chart.scroll_into_view_if_needed()
            page.wait_for_timeout(1000)
            page.screenshot(path=shot)
            box = chart.bounding_box()
            assert box["width"] > 300 and box["height"] > 100, box
            # the lesson ran to its end: the mailbox's message was read back in the last output
            page.wait_for_selector("text=the reader found: b'gradients for layer 7 are ready'", timeout=300_000)
        except Exception as error:
            # what a person at the screen would have seen: the page, any dialog, errors, the server's log
            failed = shot.replace(".png", "-failed.png")
            page.screenshot(path=failed, full_page=True)
            dialogs = page.locator(".jp-Dialog").all_inner_texts()
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
            log = open(lab["log"]).read()[-3000:]
            raise AssertionError(f"{error}\nscreenshot: {failed}\ndialogs: {dialogs}\ncell errors: {errors[-3:]}"
                                 f"\nJupyterLab log (tail):\n{log}") from error
        finally:
            browser.close()
    assert os.path.getsize(shot) > 10_000
