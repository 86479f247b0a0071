"""The app in a real browser: `python -m posbench.app` on a loopback port, driven by headless Chromium
(Debian's chromium + chromium-driver, through Selenium). Start a 2-cell study, see its progress and table,
open it from disk on the Explore page, switch a PE off in a chart. Screenshots go to the test's tmp dir."""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "") if p and Path(p).exists()), None)
DRIVER = next((p for p in ("/usr/bin/chromedriver", shutil.which("chromedriver") or "") if p and Path(p).exists()),
              None)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                                 reason="no Chromium: install Debian's `chromium` and `chromium-driver` packages")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def app_url(tmp_path):
    port = free_port()
    log = open(tmp_path / "streamlit.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "posbench.app", "--runs", str(tmp_path / "runs"),
                             "--server.port", str(port), "--server.headless", "true", "--server.address", "127.0.0.1",
                             "--server.fileWatcherType", "none"],  # no usage statistics: the app's default
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    try:
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            assert time.time() < deadline and proc.poll() is None, (tmp_path / "streamlit.log").read_text()
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        for pid_file in (tmp_path / "runs").glob("*/runner.pid"):  # a worker still running after a failure
            subprocess.run(["kill", str(json.loads(pid_file.read_text())["pid"])], check=False)


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1400,1800"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def wait_text(driver, text: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while text not in driver.find_element("tag name", "body").text:
        body = driver.find_element("tag name", "body").text
        assert time.time() < deadline, f"`{text}` did not appear; page shows:\n{body[:3000]}"
        time.sleep(0.3)


def find(driver, css: str, timeout: float = 60):
    """The first element matching `css`, waiting for it: Streamlit draws widgets as their deltas arrive."""
    deadline = time.time() + timeout
    while not (found := driver.find_elements("css selector", css)):
        assert time.time() < deadline, f"no `{css}` on the page:\n{driver.find_element('tag name', 'body').text[:3000]}"
        time.sleep(0.3)
    return found[0]


def set_field(driver, label: str, value: str, tag: str = "input") -> None:
    from selenium.webdriver.common.keys import Keys

    el = find(driver, f'{tag}[aria-label="{label}"]')
    el.click()
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.DELETE)
    el.send_keys(value)


def drop_from_multiselect(driver, index: int, values: list[str]) -> list[str]:
    """Click each value's remove button in the `index`-th multiselect; returns the values still selected."""
    find(driver, '[data-testid="stMultiSelect"] [data-tag]')
    widget = driver.find_elements("css selector", '[data-testid="stMultiSelect"]')[index]
    for v in values:
        widget.find_element("css selector", f'button[aria-label="Remove {v}"]').click()
        time.sleep(0.5)
        widget = driver.find_elements("css selector", '[data-testid="stMultiSelect"]')[index]
    return [t.get_attribute("aria-label") for t in widget.find_elements("css selector", "[data-tag]")]


REFERENCE_ENTRIES = ("chance", "training length")  # the reference lines' legend entries, not PEs


def legend(driver, chart: int = 0) -> list[str]:
    """The chart's PE legend entries as drawn (the reference lines' entries left out)."""
    el = driver.find_elements("css selector", '[data-testid="stPlotlyChart"]')[chart]
    return sorted(t.text for t in el.find_elements("css selector", ".legendtext")
                  if not t.text.startswith(REFERENCE_ENTRIES))


def test_run_explore_and_switch_pe(app_url, browser, tmp_path):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    browser.get(app_url)
    wait_text(browser, "Start study", 300)  # the first run of the script imports torch and the project
    find(browser, 'input[aria-label="d_ff"]')  # the last field of the form
    set_field(browser, "Name", "browser")
    set_field(browser, "Tasks (one per line)", "{name: k_back, k: 2}", tag="textarea")
    assert drop_from_multiselect(browser, 0, ["sinusoidal", "alibi", "none"]) == ["learned", "rope"]
    set_field(browser, "Seeds", "0")
    for label, value in (("Steps", "6"), ("Batch", "4"), ("Worker processes", "1"), ("d_model", "16"),
                         ("n_heads", "2"), ("n_layers", "1"), ("d_ff", "32")):
        set_field(browser, label, value)
    from selenium.webdriver.common.keys import Keys

    find(browser, 'input[aria-label="Name"]').send_keys(Keys.ENTER)  # Enter applies the field, starts nothing
    wait_text(browser, "Cost: 2 cells")  # the cost of these fields, before Start
    time.sleep(2)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    body = browser.find_element("tag name", "body").text
    assert "to submit form" not in body and "Deploy" not in body  # no form; the launcher hides Deploy
    browser.save_screenshot(str(shots / "1_form.png"))
    next(b for b in browser.find_elements("css selector", "button") if b.text == "Start study").click()
    wait_text(browser, "cells finished (running)", 120)
    assert any(b.text.endswith("Stop") for b in browser.find_elements("css selector", "button"))
    browser.save_screenshot(str(shots / "2_running.png"))
    wait_text(browser, "2 / 2 cells finished (finished)", 400)
    wait_text(browser, "OOD beyond train length", 30)
    browser.save_screenshot(str(shots / "3_finished.png"))
    table = browser.find_element("css selector", '[data-testid="stTable"]').text
    assert "k_back" in table and "rope" in table and "learned" in table

    browser.get(f"{app_url}/?run=browser")  # a refresh re-attaches, and does not start the study again
    wait_text(browser, "2 / 2 cells finished (finished)", 60)
    log = (tmp_path / "runs" / "browser" / "runner.log").read_text()
    assert log.count("another worker") == 0 and len(list((tmp_path / "runs" / "browser" / "cells").glob("*.json"))) == 2

    find(browser, '[data-testid="stSidebar"] label')
    wait_text(browser, "Explore results")
    next(e for e in browser.find_elements("css selector", '[data-testid="stSidebar"] label')
         if e.text == "Explore results").click()
    wait_text(browser, "Study directories, eval outputs")
    set_field(browser, "Study directories, eval outputs, sweep folders or results.json files (one per line)",
              str(tmp_path / "runs" / "browser"), tag="textarea")
    find(browser, "textarea").send_keys(Keys.CONTROL, Keys.ENTER)  # a text area's value is sent on Ctrl+Enter
    wait_text(browser, "Study browser (2 cells)")  # the backticks render as code
    wait_text(browser, "accuracy during training")
    assert legend(browser) == ["learned", "rope"]
    browser.save_screenshot(str(shots / "4_explore.png"))
    assert drop_from_multiselect(browser, 0, ["rope"]) == ["learned"]  # switch rope off in the charts
    deadline = time.time() + 30
    while legend(browser) != ["learned"]:
        assert time.time() < deadline, legend(browser)
        time.sleep(0.3)
    browser.save_screenshot(str(shots / "5_switched_pe.png"))
    print(f"screenshots in {shots}")


def test_colours_and_colour_bar_as_drawn(app_url, browser, tmp_path):
    """Eight PEs that were five greens and two greys: each its own colour in the drawn legend; the attention map's
    colour bar clear of the upright toolbar. Element screenshots (the docs/screenshots pair) go to the tmp dir."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    from tests.app.helpers import cell

    pes = ["rope", "modded_rope", "hope", "fope", "sinonly", "none", "binary_norm", "fox"]
    study = tmp_path / "colours"
    study.mkdir()
    cells = [{**cell(pe, seed, 0.3 + 0.08 * i, 0.2 + 0.07 * i), "cell_id": f"k_back_{pe}_s{seed}",
              "curve": [{"step": s, "ood_beyond_acc": min(1.0, 0.1 * s * (1 + i) / 8)} for s in (2, 4, 6, 8, 10)]}
             for i, pe in enumerate(pes) for seed in (0, 1)]
    (study / "results.json").write_text(json.dumps({"study": "colours", "cells": cells}))
    shots = tmp_path / "screenshots"
    shots.mkdir()
    browser.get(app_url)
    find(browser, '[data-testid="stSidebar"] label')
    next(e for e in browser.find_elements("css selector", '[data-testid="stSidebar"] label')
         if e.text == "Explore results").click()
    wait_text(browser, "Study directories, eval outputs")
    set_field(browser, "Study directories, eval outputs, sweep folders or results.json files (one per line)",
              str(study), tag="textarea")
    find(browser, "textarea").send_keys(Keys.CONTROL, Keys.ENTER)
    wait_text(browser, "accuracy during training")
    wait_text(browser, "Attention map")
    charts = browser.find_elements("css selector", '[data-testid="stPlotlyChart"]')
    browser.execute_script("arguments[0].scrollIntoView();", charts[0])
    time.sleep(1)
    charts[0].screenshot(str(shots / "pe_colours.png"))
    strokes = {t.text: t.find_element("xpath", "..").find_element("css selector", "path.js-line")
               .value_of_css_property("stroke") for t in charts[0].find_elements("css selector", ".legendtext")
               if not t.text.startswith(REFERENCE_ENTRIES)}
    attention = charts[-1]
    browser.execute_script("arguments[0].scrollIntoView();", attention)
    time.sleep(1)
    ActionChains(browser).move_to_element(attention).perform()  # the toolbar shows on hover
    time.sleep(1)
    attention.screenshot(str(shots / "attention_colour_bar.png"))
    print(f"screenshots in {shots}")
    assert list(strokes) == pes and len(set(strokes.values())) == len(pes), strokes  # the study's order
    bar = attention.find_element("css selector", ".colorbar").rect
    tools = attention.find_element("css selector", ".modebar").rect

    def overlap(a, b):
        return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
                and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])
    assert not overlap(bar, tools), (bar, tools)
