"""The review page in a real browser (headless Chromium driven by Selenium): a person's whole round.

Skipped, with the reason, where Chromium, its driver or Selenium is missing (.ci/run installs them).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import pytest

from synth import read_labels
from turboyolo.data.autolabels import label_status

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="selenium is not installed (pip install -e .[dev])")
    if not CHROMIUM or not DRIVER:
        pytest.skip("no headless browser: install Debian's chromium and chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1100,760"):
        options.add_argument(flag)
    # Chromium's own temporary folders go into one of ours, removed after the test (not left in /tmp); a
    # short path, not tmp_path: Chromium puts sockets there, and a socket's path has at most 107 bytes
    scratch = tempfile.mkdtemp(prefix="chromium-")
    service = webdriver.ChromeService(executable_path=DRIVER, env={**os.environ, "TMPDIR": scratch})
    try:
        driver = webdriver.Chrome(options=options, service=service)
        driver.set_script_timeout(30)
        yield driver
        driver.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def wait_for(driver, script: str, timeout: float = 30.0):
    """Poll the page until ``script`` (a JS expression) is truthy; returns its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(f"return {script}")
        if value:
            return value
        time.sleep(0.05)
    errors = driver.execute_script("return window.review && window.review.errors")
    raise AssertionError(f"the page never had {script}; its messages: {errors}")


class Page:
    """The mouse and keyboard of a person on the review page; points are relative to the picture."""

    def __init__(self, driver):
        from selenium.webdriver.common.action_chains import ActionChains

        self.driver, self.chains = driver, ActionChains

    def rect(self) -> dict:
        return self.driver.execute_script(
            "const r = document.getElementById('photo').getBoundingClientRect();"
            "return {x: r.left, y: r.top, w: r.width, h: r.height};")

    def at(self, point) -> tuple[int, int]:
        r = self.rect()
        return round(r["x"] + point[0] * r["w"]), round(r["y"] + point[1] * r["h"])

    def drag(self, start, end) -> tuple[tuple[float, float], tuple[float, float]]:
        """Drag from ``start`` to ``end``; returns both as the relative points the page saw."""
        from selenium.webdriver.common.actions.action_builder import ActionBuilder

        (x0, y0), (x1, y1) = self.at(start), self.at(end)
        builder = ActionBuilder(self.driver)
        builder.pointer_action.move_to_location(x0, y0).pointer_down()
        builder.pointer_action.move_to_location((x0 + x1) // 2, (y0 + y1) // 2)
        builder.pointer_action.move_to_location(x1, y1).pointer_up()
        builder.perform()
        r = self.rect()
        return (((x0 - r["x"]) / r["w"], (y0 - r["y"]) / r["h"]),
                ((x1 - r["x"]) / r["w"], (y1 - r["y"]) / r["h"]))

    def click(self, point) -> None:
        from selenium.webdriver.common.actions.action_builder import ActionBuilder

        builder = ActionBuilder(self.driver)
        builder.pointer_action.move_to_location(*self.at(point)).click()
        builder.perform()

    def keys(self, *keys: str) -> None:
        self.chains(self.driver).send_keys(*keys).perform()

    def rows(self) -> list:
        return self.driver.execute_script("return window.review.S.rows")

    def shown(self) -> int:
        return self.driver.execute_script("return window.review.shown.length")


def close(found, expected, tol=2e-6):
    assert len(found) == len(expected)
    for row, want in zip(found, expected):
        assert int(row[0]) == want[0], (row, want)
        assert all(abs(a - b) <= tol for a, b in zip(row[1:], want[1:])), (row, want)


def test_a_person_draws_moves_relabels_deletes_saves_and_meets_a_conflict(browser, review_set, start_review):
    from selenium.webdriver.common.keys import Keys

    process = start_review(review_set, "--order", "name")
    browser.get(process.url)
    page = Page(browser)
    wait_for(browser, "window.review && window.review.shown.length >= 1 && window.review.S.rows.length == 2")
    assert browser.find_element("id", "name").text == "a.jpg"

    # draw a box in the empty top right, give it class 2 (bird) with a key
    (x0, y0), (x1, y1) = page.drag((0.55, 0.1), (0.85, 0.35))
    page.keys("2")
    if os.environ.get("REVIEW_SCREENSHOT"):  # docs/review_page.png is made this way
        browser.save_screenshot(os.environ["REVIEW_SCREENSHOT"])
    # move the cat (0.25, 0.25) by dragging its middle; delete the dog (click it, Delete)
    (m0, n0), (m1, n1) = page.drag((0.25, 0.25), (0.35, 0.45))
    page.click((0.75, 0.75))
    page.keys(Keys.DELETE)
    page.keys("s")
    label = review_set.parent / "labels" / "a.txt"
    wait_for(browser, "window.review.S.status == 'reviewed'")
    expected = [[0, round(0.25 + m1 - m0, 6), round(0.25 + n1 - n0, 6), 0.2, 0.2],
                [2, round((x0 + x1) / 2, 6), round((y0 + y1) / 2, 6), round(x1 - x0, 6), round(y1 - y0, 6)]]
    lines = label.read_text().splitlines()
    assert len(lines) == 2 and [line.split()[0] for line in lines] == ["0", "2"]
    close(read_labels(label).tolist(), expected)
    assert label_status(label) == "reviewed"

    # the person changes a class while another program changes the file: the save is refused
    saved = label.read_text()
    page.keys(Keys.TAB, "1")  # the first box becomes a dog, on the page only
    label.write_text("1 0.5 0.5 0.1 0.1\n")
    page.keys("s")
    wait_for(browser, "!document.getElementById('message').hidden")
    message = browser.find_element("id", "message-text").text
    assert "changed on disk" in message
    assert label.read_text() == "1 0.5 0.5 0.1 0.1\n"  # the other program's change is kept
    assert browser.execute_script("return window.review.S.disk.rows.length") == 1  # both shown
    assert [row[0] for row in page.rows()] == [1, 2]  # and the person's edit still there
    assert len(browser.find_elements("css selector", ".box.disk")) == 1
    browser.find_element("id", "keep-mine").click()
    deadline = time.monotonic() + 30
    while label_status(label) != "reviewed" and time.monotonic() < deadline:  # the save, then its record
        time.sleep(0.05)
    assert [line.split()[0] for line in label.read_text().splitlines()] == ["1", "2"]
    assert label_status(label) == "reviewed"
    assert label.read_text() != saved

    # undo, then accept and go on: the next image appears, the first stays reviewed
    page.keys("z")
    assert [row[0] for row in page.rows()] == [0, 2]
    page.keys(Keys.ENTER)
    wait_for(browser, "window.review.shown.length >= 2 && window.review.S.index == 1")
    assert browser.find_element("id", "name").text == "b.jpg"
    assert [line.split()[0] for line in label.read_text().splitlines()] == ["0", "2"]
    assert label_status(label) == "reviewed"
    errors = browser.execute_script("return window.review.errors")
    assert len(errors) == 1 and "changed on disk" in errors[0]  # the conflict, nothing else went wrong
    code, output = process.stop()
    assert code == 0 and "review stopped" in output


def test_the_wheel_zooms_in_to_the_full_size_picture_and_f_fits_again(browser, start_review, tmp_path):
    import numpy as np
    from PIL import Image

    (tmp_path / "big" / "images").mkdir(parents=True)
    pixels = np.random.default_rng(0).integers(0, 255, (1800, 2400, 3), np.uint8)
    Image.fromarray(pixels).save(tmp_path / "big" / "images" / "photo.jpg", quality=80)
    process = start_review(tmp_path / "big" / "images", "--side", "800")
    browser.get(process.url)
    page = Page(browser)
    wait_for(browser, "window.review && window.review.shown.length >= 1")
    assert browser.execute_script("return document.getElementById('photo').naturalWidth") == 800
    assert not browser.execute_script("return window.review.S.full")  # the reduced picture fits
    before = page.rect()
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    photo = browser.find_element("id", "photo")
    for _ in range(3):
        ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(photo), 0, -100).perform()
    wait_for(browser, "window.review.S.zoom > window.review.S.fit * 1.5")
    assert page.rect()["w"] > before["w"] * 1.5
    # past the reduced picture's own pixels: the full-size one replaces it, at the same place
    wait_for(browser, "document.getElementById('photo').naturalWidth == 2400")
    page.keys("f")
    assert abs(page.rect()["w"] - before["w"]) < 1


@pytest.mark.slow
def test_the_models_boxes_are_shown_and_one_key_accepts_a_missing_one(browser, review_set, start_review,
                                                                       tiny_cfg, tmp_path):
    from turboyolo.model.loading import build_model, save_darknet_weights

    weights = save_darknet_weights(build_model(tiny_cfg), tmp_path / "tiny.weights")  # random: many boxes
    process = start_review(review_set, "--cfg", str(tiny_cfg), "--weights", str(weights), "--device", "cpu",
                           "--conf-thres", "0.01", "--order", "disagree")
    browser.get(process.url)
    page = Page(browser)
    wait_for(browser, "window.review && window.review.shown.length >= 1")
    predictions = browser.execute_script("return window.review.S.preds")
    assert predictions and len(browser.find_elements("css selector", ".box.pred")) == len(predictions)
    before = page.rows()
    page.keys("a")  # the most confident model box that no label covers becomes a label
    rows = page.rows()
    assert len(rows) == len(before) + 1 and rows[-1] == max(
        (p for p in predictions if all(iou(p, r) < 0.5 for r in before)), key=lambda p: p[5])[:5]
    page.keys("s")
    wait_for(browser, "window.review.S.status == 'reviewed'")
    name = browser.find_element("id", "name").text
    label = review_set.parent / "labels" / f"{name.rsplit('.', 1)[0]}.txt"
    close(read_labels(label).tolist(), [[int(r[0]), *r[1:]] for r in rows], tol=1e-6)


def iou(a, b) -> float:
    ax1, ay1, ax2, ay2 = a[1] - a[3] / 2, a[2] - a[4] / 2, a[1] + a[3] / 2, a[2] + a[4] / 2
    bx1, by1, bx2, by2 = b[1] - b[3] / 2, b[2] - b[4] / 2, b[1] + b[3] / 2, b[2] + b[4] / 2
    inter = max(0, min(ax2, bx2) - max(ax1, bx1)) * max(0, min(ay2, by2) - max(ay1, by1))
    return inter / (a[3] * a[4] + b[3] * b[4] - inter + 1e-12)


@pytest.fixture
def other_site(tmp_path):
    """``other_site(name, html) -> URL``: a page served by a second web server on this machine (another
    origin on 127.0.0.1, the same *site* for the browser's cookies), as any local dev server is."""
    import functools
    import http.server
    import threading

    folder = tmp_path / "other_site"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def page(name: str, html: str) -> str:
        (folder / name).write_text(html)
        return f"http://127.0.0.1:{server.server_address[1]}/{name}"

    yield page
    server.shutdown()
    server.server_close()


def test_another_local_sites_form_or_fetch_cannot_save_and_the_token_leaves_the_address_bar(
        browser, review_set, start_review, other_site):
    import hashlib
    import html
    import json

    process = start_review(review_set, "--order", "name")
    browser.get(process.url)  # the person has the review open (its cookie is set)
    wait_for(browser, "window.review && window.review.shown.length >= 1")
    label = review_set.parent / "labels" / "a.txt"
    before = label.read_bytes()
    edit = json.dumps({"rows": [[2, 0.5, 0.5, 0.1, 0.1]], "base": hashlib.sha1(before).hexdigest(), "x": ""})
    target = f"{process.base}api/labels/a.jpg?t={process.token}"  # the URL's token: history, scrollback
    # a form of text/plain whose body is that JSON: name '{"rows": ..., "x": "', value '"}'
    name, value = edit[:-2], edit[-2:]
    form = (f"<form method=post enctype=text/plain action='{html.escape(target)}'><input type=hidden "
            f"name='{html.escape(name)}' value='{html.escape(value)}'></form>"
            "<script>document.forms[0].submit()</script>")
    browser.get(other_site("form.html", form))
    deadline = time.monotonic() + 30
    while not browser.current_url.startswith(process.base) and time.monotonic() < deadline:
        time.sleep(0.05)  # the form went out and its answer is shown
    assert browser.current_url.startswith(process.base), browser.current_url
    assert label.read_bytes() == before and label_status(label) == "human"
    # a script of the other site: fetch without CORS (a "simple" request, the browser sends it)
    browser.get(other_site("fetch.html", "<p>other site</p>"))
    sent = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', mode: 'no-cors', credentials: 'include', body: arguments[1]})"
        ".then(() => done('sent'), (err) => done(String(err)));", target, edit)
    assert sent == "sent"
    assert label.read_bytes() == before and label_status(label) == "human"
    # the page keeps the token out of the address bar; a reload still opens it (its cookie)
    browser.get(process.url)
    wait_for(browser, "window.review && window.review.shown.length >= 1")
    assert "t=" not in browser.current_url and process.token not in browser.current_url
    browser.refresh()
    wait_for(browser, "window.review && window.review.shown.length >= 1 && window.review.S.rows.length == 2")
    assert browser.execute_script("return window.review.errors") == []
