"""``turboyolo review`` over HTTP as the page uses it: the token, the paths it serves, saves, Ctrl-C."""

from __future__ import annotations

import http.client
import json
import os
from urllib.parse import urlsplit

import pytest
from PIL import Image

from turboyolo.data.autolabels import label_status


def request(process, method: str, path: str, body: dict | None = None, token: str | None = "own",
            headers: dict | None = None):
    """(status, bytes) of a raw request as the page sends it (a GET's token in the URL, a POST's in the
    header): the path is sent as written (``../`` is not normalized away); ``headers`` add or replace."""
    where = urlsplit(process.base)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    token = process.token if token == "own" else token
    sent = {"Content-Type": "application/json"}
    if token and method == "GET":
        path += ("&" if "?" in path else "?") + f"t={token}"
    elif token:
        sent["X-Turboyolo-Token"] = token
    sent.update(headers or {})
    data = json.dumps(body).encode() if body is not None else None
    connection.request(method, path, body=data, headers=sent)
    response = connection.getresponse()
    return response.status, response.read()


def test_every_request_needs_the_token_and_only_the_data_sets_images_are_served(review_set, start_review,
                                                                                  tmp_path):
    outside = tmp_path / "secret.jpg"
    Image.new("RGB", (40, 30), (200, 0, 0)).save(outside)
    os.symlink(outside, review_set / "linked.jpg")  # a link in the image folder to a file outside it
    process = start_review(review_set)
    assert "127.0.0.1" in process.base
    for path in ("/", "/api/session", "/image/a.jpg", "/api/labels/a.jpg"):
        assert request(process, "GET", path, token=None)[0] == 403
        assert request(process, "GET", path, token="not-the-token")[0] == 403
    status, body = request(process, "GET", "/api/session")
    assert status == 200 and json.loads(body)["names"] == ["cat", "dog", "bird"]
    status, body = request(process, "GET", "/image/a.jpg")
    assert status == 200 and body[:2] == b"\xff\xd8"
    for path in ("/image/../obj.names", "/image/%2e%2e/obj.names", "/image/../labels/a.txt",
                 "/api/labels/../labels/a.txt", "/image/linked.jpg", "/api/labels/linked.jpg",
                 "/image//etc/passwd", "/static/../../review/items.py", "/nothing"):
        assert request(process, "GET", path)[0] == 404, path
    status, _ = request(process, "POST", "/api/labels/../../evil.txt", {"rows": [], "base": None})
    assert status == 404 and not (tmp_path / "evil.txt").exists()
    code, output = process.stop()
    assert code == 0 and "review stopped: 0 saves" in output


def test_a_save_is_atomic_marked_reviewed_and_never_over_a_changed_file(review_set, start_review):
    process = start_review(review_set)
    label = review_set.parent / "labels" / "c.txt"
    status, body = request(process, "GET", "/api/labels/c.png")
    assert status == 200 and json.loads(body)["sha1"] is None and json.loads(body)["status"] == "none"
    status, body = request(process, "POST", "/api/labels/c.png",
                           {"rows": [[2, 0.5, 0.5, 0.25, 0.5], [0, 1.0, 0.5, 0.4, 0.2]], "base": None})
    saved = json.loads(body)
    # the second box reached past the right edge: clipped to the image
    assert status == 200 and label.read_text() == "2 0.500000 0.500000 0.250000 0.500000\n" \
                                                 "0 0.900000 0.500000 0.200000 0.200000\n"
    assert saved["status"] == "reviewed" and label_status(label) == "reviewed"
    assert saved["progress"]["reviewed"] == 1
    # a save that started from an older version (here: none) is refused, and the disk's copy comes back
    status, body = request(process, "POST", "/api/labels/c.png", {"rows": [], "base": None})
    assert status == 409 and json.loads(body)["disk"]["rows"][0] == [2, 0.5, 0.5, 0.25, 0.5]
    label.write_text("1 0.1 0.1 0.1 0.1\n")  # another program changes the file
    assert label_status(label) == "human"
    status, _ = request(process, "POST", "/api/labels/c.png", {"rows": [], "base": saved["sha1"]})
    assert status == 409 and label.read_text() == "1 0.1 0.1 0.1 0.1\n"
    status, body = request(process, "POST", "/api/labels/c.png", {"rows": [[5, 0.5, 0.5, 0.1, 0.1]],
                                                                   "base": json.loads(body)["disk"]["sha1"]})
    assert status == 400 and "class 5" in json.loads(body)["error"]  # three classes
    assert not list(label.parent.glob(".*.tmp"))
    code, output = process.stop()
    assert code == 0 and "1 saves" in output


def test_review_progress_survives_a_restart(review_set, start_review):
    process = start_review(review_set)
    first = json.loads(request(process, "GET", "/api/list")[1])["items"]
    assert [item["key"] for item in first] == ["c.png", "a.jpg", "b.jpg"]  # no labels before human ones
    sha1 = json.loads(request(process, "GET", "/api/labels/a.jpg")[1])["sha1"]
    before = (review_set.parent / "labels" / "a.txt").read_bytes()
    status, _ = request(process, "POST", "/api/labels/a.jpg",  # accepted unchanged: the bytes stay
                        {"rows": [[0, 0.25, 0.25, 0.2, 0.2], [1, 0.75, 0.75, 0.2, 0.2]], "base": sha1})
    assert status == 200 and (review_set.parent / "labels" / "a.txt").read_bytes() == before
    process.stop()
    again = start_review(review_set)
    listing = json.loads(request(again, "GET", "/api/list")[1])
    assert [item["key"] for item in listing["items"]] == ["c.png", "b.jpg", "a.jpg"]  # reviewed last
    assert listing["progress"] == {"model": 0, "none": 1, "human": 1, "reviewed": 1}
    unreviewed = json.loads(request(again, "GET", "/api/list?order=unreviewed")[1])["items"]
    assert [item["key"] for item in unreviewed] == ["c.png"]


def test_another_address_than_this_machine_is_bound_only_on_request_and_with_a_warning(review_set,
                                                                                       start_review):
    process = start_review(review_set, "--host", "0.0.0.0")
    assert any(line.startswith("warning: --host 0.0.0.0: other machines") for line in process.lines)
    assert request(process, "GET", "/api/session", token=None)[0] == 403  # the token is still needed
    assert request(process, "GET", "/api/session")[0] == 200


def test_a_taken_port_and_a_missing_data_set_are_named(review_set, start_review, capsys, tmp_path):
    from turboyolo.cli import main

    process = start_review(review_set)
    port = process.base.rsplit(":", 1)[1].strip("/")
    assert main(["review", str(review_set), "--no-browser", "--port", port]) == 1
    assert f"--port {port}: cannot listen there" in capsys.readouterr().err
    assert main(["review", str(tmp_path / "nowhere"), "--no-browser"]) == 1
    assert "nowhere: no such data file or folder" in capsys.readouterr().err


def test_a_read_only_data_set_is_shown_and_a_save_is_refused_with_the_reason(review_set, start_review,
                                                                             tmp_path):
    """The data set on a read-only mount (a bind mount in a private namespace, as for root too): the
    review starts, says so, shows the labels, and answers a save with the reason; nothing changes."""
    import shutil
    import subprocess

    probe = tmp_path / "probe"
    probe.mkdir()
    bind = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "sh", "-c", bind, str(probe), "sh",
                                                      "-c", f"! touch {probe}/x"]).returncode:
        pytest.skip("unshare cannot bind a folder read-only here")
    labels = review_set.parent / "labels"
    before = {path.name: path.read_bytes() for path in labels.iterdir()}
    process = start_review(review_set, prefix=("unshare", "-rm", "sh", "-c", bind, str(review_set.parent)))
    assert any("cannot write there" in line and "saving them is refused" in line for line in process.lines)
    status, body = request(process, "GET", "/api/labels/a.jpg")
    assert status == 200 and len(json.loads(body)["rows"]) == 2
    for key in ("a.jpg", "c.png"):  # an existing label file, and one that would be new
        sha1 = json.loads(request(process, "GET", f"/api/labels/{key}")[1])["sha1"]
        status, body = request(process, "POST", f"/api/labels/{key}",
                               {"rows": [[2, 0.5, 0.5, 0.1, 0.1]], "base": sha1})
        assert status == 500 and "Read-only file system" in json.loads(body)["error"], body
    assert request(process, "GET", "/api/session")[0] == 200
    code, output = process.stop()
    assert code == 0 and "Traceback" not in output and "review stopped: 0 saves" in output, output
    assert {path.name: path.read_bytes() for path in labels.iterdir()} == before
