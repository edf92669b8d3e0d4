"""``turboyolo review DATA --issues AUDIT``: an audit's suspected boxes on the page, their images worst first,
each fix one key away and saved as every edit is (atomically, marked reviewed)."""

from __future__ import annotations

import json
import time

import pytest

from review.test_review_browser import Page, browser, close, wait_for  # noqa: F401 (the browser fixture)
from review.test_review_server import request
from synth import read_labels
from turboyolo.cli import main
from turboyolo.data.autolabels import label_status
from turboyolo.formats.issues import LabelIssue, write_issues

A, B = (400, 300), (430, 320)  # (width, height) of a.jpg and b.jpg (conftest.make_review_set)


def until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the file never changed"
        time.sleep(0.05)


def _audit(folder, review_set):
    """An audit of the review set: the cat of a.jpg seen as a dog, a bird nobody boxed on a.jpg, the dog
    of b.jpg around nothing; c.png clean."""
    a, b = str(review_set / "a.jpg"), str(review_set / "b.jpg")
    rows = [LabelIssue(a, "class", 0.9, 0, (60, 45, 140, 105), 1, None, *A),
            LabelIssue(b, "spurious", 0.85, 1, (150.5, 96, 279.5, 224), None, None, *B),
            LabelIssue(a, "missing", 0.6, 2, (260, 45, 340, 105), 2, (260, 45, 340, 105), *A),
            LabelIssue(a, "spurious", 0.1, 1, (260, 195, 340, 255), None, None, *A),  # under the floor
            LabelIssue(str(review_set / "c.png"), "ok", 0.0, 0, (1, 1, 5, 5), None, None, 460, 340)]
    folder.mkdir()
    write_issues(folder / "label_issues.csv", rows, ["cat", "dog", "bird"])
    c = review_set / "c.png"
    (folder / "image_ranking.csv").write_text(f"rank,image,score\n1,{a},0.96\n2,{b},0.85\n3,{c},0\n")
    return folder


def test_the_issue_order_and_each_images_suspected_boxes_are_served(review_set, start_review, tmp_path):
    audit = _audit(tmp_path / "audit", review_set)
    process = start_review(review_set, "--issues", str(audit))
    session = json.loads(request(process, "GET", "/api/session")[1])
    assert session["issues"] and session["order"] == "issues"
    listed = json.loads(request(process, "GET", "/api/list?order=issues")[1])
    assert [item["key"] for item in listed["items"]] == ["a.jpg", "b.jpg"]  # c.png holds nothing
    state = json.loads(request(process, "GET", "/api/labels/a.jpg")[1])
    assert [(i["kind"], i["score"]) for i in state["issues"]] == [("class", 0.9), ("missing", 0.6)]
    assert state["issues"][0]["box"] == pytest.approx([0.25, 0.25, 0.2, 0.2])
    assert state["issues"][1]["suggested_box"] == pytest.approx([0.75, 0.25, 0.2, 0.2])
    assert "2 of these images hold a suspected box" in "".join(process.lines)


@pytest.mark.parametrize("flags, message", [
    (["--order", "issues"], "--order issues needs --issues"),
    (["--issues", "nowhere"], "--issues nowhere: no label_issues.csv there"),
])
def test_issues_flags_name_what_is_wrong(review_set, capsys, flags, message):
    assert main(["review", str(review_set), "--no-browser", *flags]) == 1
    assert message in capsys.readouterr().err


def test_one_key_takes_each_fix_and_saves_it_as_reviewed(browser, review_set, start_review, tmp_path):  # noqa: F811
    from selenium.webdriver.common.keys import Keys

    audit = _audit(tmp_path / "audit", review_set)
    process = start_review(review_set, "--issues", str(audit))
    browser.get(process.url)
    page = Page(browser)
    wait_for(browser, "window.review && window.review.shown.length >= 1 "
                      "&& window.review.S.issues.length == 2")
    assert browser.find_element("id", "name").text == "a.jpg"  # the worst image first
    tags = [el.text for el in browser.find_elements("css selector", ".box.issue .tag")]
    assert tags[0].startswith("class 0.90: cat → dog") and tags[1].startswith("missing 0.60: bird")
    label = review_set.parent / "labels" / "a.txt"

    page.keys("y")  # the worst one: the cat becomes a dog, saved
    wait_for(browser, "window.review.S.status == 'reviewed' && window.review.S.selIssue == 1")
    until(lambda: read_labels(label)[0, 0] == 1)
    close(read_labels(label).tolist(), [[1, 0.25, 0.25, 0.2, 0.2], [1, 0.75, 0.75, 0.2, 0.2]])
    assert label_status(label) == "reviewed"
    assert len(browser.find_elements("css selector", ".box.issue")) == 1  # the fixed one is gone

    page.keys("y")  # the bird nobody boxed is added, saved
    until(lambda: len(label.read_text().splitlines()) == 3)
    wait_for(browser, "window.review.S.selIssue == -1 && !window.review.S.busy")  # the page has the answer
    assert not browser.find_elements("css selector", ".box.issue")
    close(read_labels(label).tolist(), [[1, 0.25, 0.25, 0.2, 0.2], [1, 0.75, 0.75, 0.2, 0.2],
                                             [2, 0.75, 0.25, 0.2, 0.2]])
    assert label_status(label) == "reviewed" and not list(label.parent.glob(".*.tmp"))

    page.keys(Keys.ENTER)  # on to the next image of the order: the dog around nothing is deleted
    wait_for(browser, "window.review.S.index == 1 && window.review.S.issues.length == 1")
    assert browser.find_element("id", "name").text == "b.jpg"
    page.keys("y")
    other = review_set.parent / "labels" / "b.txt"
    until(lambda: other.read_text() == "" and label_status(other) == "reviewed")
    assert browser.execute_script("return window.review.errors") == []
    code, output = process.stop()
    assert code == 0 and "4 saves" in output  # the three fixes, and Enter's accept of a.jpg
