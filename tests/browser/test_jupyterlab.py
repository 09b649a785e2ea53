"""A real JupyterLab in a real browser: open lesson 04, run every cell, see the dashboard render.

Starts JupyterLab on 127.0.0.1 with a token, drives Debian's Chromium (/usr/bin/chromium, no browser
download) through Playwright, runs a copy of the lesson with QUICK = True, waits for the dashboard's
chart image and saves a screenshot (RDMALAB_SCREENSHOT, default .ci/artifacts/lesson-04.png).
Skips, saying why, where there is no Chromium; RDMALAB_BROWSER_TEST=1 (CI) makes that a failure.
"""
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from rdmalab import sockets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.host_only   # a browser, not the RDMA device


def free_port():
    server, port = sockets.listen()   # any free port on 127.0.0.1, released for JupyterLab
    server.close()
    return port


@pytest.fixture
def lab(tmp_path):
    if not os.path.exists(CHROMIUM):
        if os.environ.get("RDMALAB_BROWSER_TEST") == "1":   # CI sets it: there the browser is required
            pytest.fail(f"RDMALAB_BROWSER_TEST=1 but there is no {CHROMIUM}: apt-get install chromium")
        pytest.skip(f"the real-browser test needs Debian's Chromium at {CHROMIUM}: apt-get install chromium")
    nb = json.load(open(os.path.join(ROOT, "notebooks", "04-one-sided.ipynb")))
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = ["QUICK = True\n"]
    root, log_path = tmp_path / "lab", tmp_path / "lab.log"
    root.mkdir()
    json.dump(nb, open(root / "04-one-sided.ipynb", "w"))
    # JupyterLab as a first-time user meets it, whatever this machine's ~/.jupyter holds, except two
    # settings: start the notebook's kernel without asking (else a "Select Kernel" dialog waits for a
    # click), and no news prompt.
    settings = tmp_path / "user-settings"
    for plugin, values in {"notebook-extension/tracker": {"autoStartDefaultKernel": True},
                           "apputils-extension/notification": {"fetchNews": "false"}}.items():
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = free_port(), "rdmalab-browser-test"
    jupyter = os.path.join(os.path.dirname(sys.executable), "jupyter")
    log = open(log_path, "w")
    server = subprocess.Popen([jupyter, "lab", "--no-browser", "--allow-root", f"--IdentityProvider.token={token}",
                               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", f"--ServerApp.root_dir={root}",
                               f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}"],
                              stdout=log, stderr=log, env=dict(os.environ, PYTHONPATH=ROOT))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            time.sleep(0.5)
    yield {"url": f"http://127.0.0.1:{port}/lab/tree/04-one-sided.ipynb?token={token}", "log": str(log_path)}
    server.terminate()
    try:
        server.wait(15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    log.close()


def test_lesson_04_runs_in_jupyterlab_and_the_dashboard_renders(lab):
    from playwright.sync_api import sync_playwright
    shot = os.environ.get("RDMALAB_SCREENSHOT", os.path.join(ROOT, ".ci", "artifacts", "lesson-04.png"))
    os.makedirs(os.path.dirname(shot), exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(lab["url"])
            page.wait_for_selector(".jp-Notebook", timeout=120_000)
            # the kernel has started and connected: until then the status bar says "No Kernel | Initializing"
            # and "Run All Cells" does nothing (the toolbar's execution indicator says idle all along)
            page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\(ipykernel\) \| Idle")).wait_for(timeout=120_000)
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
