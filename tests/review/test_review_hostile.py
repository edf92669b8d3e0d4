"""``turboyolo review`` over HTTP as a careless client or an attacker uses it (issue 42, round four):
values no label file may hold, malformed requests, other hosts and origins, links out of the data set.

Each request is sent as raw bytes to a real server process; after each one the label file must be as it
was, and the server must answer (never a dead handler thread) and go on answering.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import threading
from urllib.parse import urlsplit

import pytest

from turboyolo.data.autolabels import label_status

SECRET = "0 0.5 0.5 0.1 0.1\n# a private note\n"


def raw(process, method: str, path: str, body: bytes = b"", headers: dict | None = None,
        host: str | None = None, token: str | None = "header", length: object = "auto"):
    """(status, JSON or bytes) of a request written byte for byte: ``headers`` add or replace, a value
    None drops one; ``length`` the Content-Length sent ("auto": the body's, None: none)."""
    where = urlsplit(process.base)
    sent = {"Host": host or where.netloc, "Content-Type": "application/json"}
    if token == "header":
        sent["X-Turboyolo-Token"] = process.token
    elif token == "url":
        path += ("&" if "?" in path else "?") + f"t={process.token}"
    if length is not None:
        sent["Content-Length"] = str(len(body)) if length == "auto" else str(length)
    sent.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in sent.items() if v is not None)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n" + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        data = response.read()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data


def save(process, key: str, rows, base="current", **kwargs):
    """POST ``rows`` as the page does (``base``: the label file's SHA-1 now, unless given)."""
    if base == "current":
        base = sha1_of(process, key)
    return raw(process, "POST", f"/api/labels/{key}", json.dumps({"rows": rows, "base": base}).encode(),
               **kwargs)


def sha1_of(process, key: str) -> str | None:
    status, state = raw(process, "GET", f"/api/labels/{key}")
    assert status == 200, state
    return state["sha1"]


@pytest.fixture(scope="module")
def server(module_review_set, start_module_review):
    """One review server for the module, on conftest's three images and a fourth, d.jpg, whose label file
    is a link to a file outside the data set."""
    images = module_review_set
    shutil.copy(images / "a.jpg", images / "d.jpg")
    secret = images.parent.parent / "secret.txt"
    secret.write_text(SECRET)
    os.symlink(secret, images.parent / "labels" / "d.txt")
    return start_module_review(images), images, secret


@pytest.fixture
def served(server):
    """The module's server and its label file of a.jpg, checked unchanged (and not reviewed) after."""
    process, images, _ = server
    label = images.parent / "labels" / "a.txt"
    before = label.read_bytes()
    yield process, label
    assert label.read_bytes() == before and label_status(label) == "human"
    assert raw(process, "GET", "/api/session")[0] == 200  # still answering


@pytest.mark.parametrize(("body", "field", "why"), [
    (b'{"rows": [[0, NaN, 0.5, 0.2, 0.2]], "base": "%s"}', "rows[0][1] (cx)", "not a finite number"),
    (b'{"rows": [[0, 0.5, 0.5, Infinity, 0.2]], "base": "%s"}', "rows[0][3] (w)", "not a finite number"),
    (b'{"rows": [[0, 0.5, 0.5, 0.2, -Infinity]], "base": "%s"}', "rows[0][4] (h)", "not a finite number"),
    (b'{"rows": [[0, 0.5, 1e400, 0.2, 0.2]], "base": "%s"}', "rows[0][2] (cy)", "not a finite number"),
    (b'{"rows": [[NaN, 0.5, 0.5, 0.2, 0.2]], "base": "%s"}', "rows[0][0] (class)", "not a finite number"),
    (b'{"rows": [[0, 0.5, 0.5, 0.2, 0.2]], "base": NaN}', "base", "40 hex digits"),
    (b'{"rows": [[0, -0.1, 0.5, 0.2, 0.2]], "base": "%s"}', "rows[0][1] (cx)", "within 0..1"),
    (b'{"rows": [[0, 0.5, 1.5, 0.2, 0.2]], "base": "%s"}', "rows[0][2] (cy)", "within 0..1"),
    (b'{"rows": [[0, 0.5, 0.5, 0, 0.2]], "base": "%s"}', "rows[0][3] (w)", "within (0, 1]"),
    (b'{"rows": [[0, 0.5, 0.5, 0.2, -0.3]], "base": "%s"}', "rows[0][4] (h)", "within (0, 1]"),
    (b'{"rows": [[0, 0.5, 0.5, 1.5, 0.2]], "base": "%s"}', "rows[0][3] (w)", "within (0, 1]"),
    (b'{"rows": [[0, 1.0, 0.5, 0.0000008, 0.2]], "base": "%s"}', "rows[0]", "0.000001 wide or high"),
    (b'{"rows": [[1.7, 0.5, 0.5, 0.2, 0.2]], "base": "%s"}', "rows[0][0] (class)", "class 1.7"),
    (b'{"rows": [[true, 0.5, 0.5, 0.2, 0.2]], "base": "%s"}', "rows[0][0] (class)", "true/false"),
    (b'{"rows": [[3, 0.5, 0.5, 0.2, 0.2]], "base": "%s"}', "rows[0][0] (class)", "3 classes"),
    (b'{"rows": [[-1, 0.5, 0.5, 0.2, 0.2]], "base": "%s"}', "rows[0][0] (class)", "class -1"),
    (b'{"rows": [[0, "0.5", 0.5, 0.2, 0.2]], "base": "%s"}', "rows[0][1] (cx)", "expected a number"),
    (b'{"rows": [[0, 0.5, 0.5, 0.2]], "base": "%s"}', "rows[0]", "[class, cx, cy, w, h]"),
    (b'{"rows": "abcde", "base": "%s"}', "rows", "expected a list"),
    (b'{"rows": {"0": [0, 0.5, 0.5, 0.2, 0.2]}, "base": "%s"}', "rows", "expected a list"),
    (b'{"rows": [], "base": 5}', "base", "40 hex digits"),
    (b'{"rows": [[0, 0.5, 0.5, 0.2, 0.2], [0, 0.5, 0.5, 0.2, 0.2e999]], "base": "%s"}', "rows[1][4] (h)",
     "not a finite number"),
])
def test_a_value_no_label_file_may_hold_is_refused_naming_its_field_and_nothing_is_written(served, body,
                                                                                           field, why):
    process, label = served
    if b"%s" in body:
        body = body.replace(b"%s", sha1_of(process, "a.jpg").encode())
    status, answer = raw(process, "POST", "/api/labels/a.jpg", body)
    assert status == 400, answer
    assert why in answer["error"], answer
    assert answer["field"] == field and answer["error"].startswith(field), answer


def test_a_box_reaching_past_an_edge_is_clipped_as_the_docs_say(server):
    process, images, _ = server
    label = images.parent / "labels" / "b.txt"
    status, state = save(process, "b.jpg", [[2, 0.0, 1.0, 0.4, 1.0], [1, 0.5, 0.5, 1.0, 1.0]])
    assert status == 200, state
    assert label.read_text().splitlines() == ["2 0.100000 0.750000 0.200000 0.500000",
                                              "1 0.500000 0.500000 1.000000 1.000000"]
    assert label_status(label) == "reviewed"


@pytest.mark.parametrize(("head", "body", "expected"), [
    ({"Content-Length": "abc"}, b'{"rows": []}', 400),
    ({"Content-Length": "-5"}, b'{"rows": []}', 400),
    ({"Content-Length": None}, b"", 411),
    ({"Content-Length": None, "Transfer-Encoding": "chunked"}, b"0\r\n\r\n", 411),
    ({"Content-Length": str(200 * 1024 * 1024)}, b'{"rows": [', 413),  # never read: answered at once
    ({}, b"[" * 100_000 + b"]" * 100_000, 400),
    ({}, b'{"rows": [[0, 0.5, 0.5, 0.2, 0.2]], "base": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
    ({}, b"rows=[]&base=none", 400),
    ({}, b"\xff\xfe{}", 400),
    ({}, b'["rows", []]', 400),
    ({}, b"", 400),
    ({"Content-Type": "text/plain"}, b'{"rows": [], "base": null}', 415),
    ({"Content-Type": None}, b'{"rows": [], "base": null}', 415),
])
def test_every_malformed_request_is_answered_never_a_dead_thread(served, head, body, expected):
    process, _ = served
    status, answer = raw(process, "POST", "/api/labels/a.jpg", body, headers=head)
    assert status == expected, answer


def test_a_body_over_the_limit_is_refused_before_it_is_sent(served):
    """The client announces 200 MB and sends nothing: the answer comes at once, not after 200 MB."""
    process, _ = served
    where = urlsplit(process.base)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(f"POST /api/labels/a.jpg HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: "
                     f"application/json\r\nX-Turboyolo-Token: {process.token}\r\nContent-Length: "
                     f"{200 * 1024 * 1024}\r\n\r\n".encode())
        response = http.client.HTTPResponse(sock)
        response.begin()  # times out (an error) if the server waits for the body
        assert response.status == 413 and b"over the limit" in response.read()


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1.nip.io:{port}",
                                  "127.0.0.1:1", "localhost:{port}@evil.example", "", None])
def test_a_foreign_host_is_refused_on_every_route(served, host):
    """DNS rebinding: another site's name pointed at 127.0.0.1; the URL's token does not help it."""
    process, label = served
    port = urlsplit(process.base).port
    host = None if host is None else host.format(port=port)
    sent = {"Host": host} if host is not None else {"Host": None}
    for path in ("/", "/api/session", "/api/labels/a.jpg", "/image/a.jpg"):
        status, _ = raw(process, "GET", path, token="url", headers=sent, length=None)
        assert status in (400, 403), (host, path, status)
    status, answer = save(process, "a.jpg", [[2, 0.5, 0.5, 0.1, 0.1]], headers=sent)
    assert status in (400, 403), answer


@pytest.mark.parametrize("host", ["localhost:{port}", "LOCALHOST:{port}", "127.0.0.1:{port}", "[::1]:{port}"])
def test_the_servers_own_names_are_accepted(server, host):
    process = server[0]
    host = host.format(port=urlsplit(process.base).port)
    origin = {"Origin": f"http://{host}"}
    assert raw(process, "GET", "/api/session", headers={"Host": host}, length=None)[0] == 200
    status, state = save(process, "b.jpg", [[2, 0.5, 0.5, 0.1, 0.1]], headers={"Host": host, **origin})
    assert status == 200 and state["status"] == "reviewed", state


def test_a_cross_origin_request_a_token_in_the_url_or_a_form_type_cannot_save(served):
    """What another page in the same browser can send: its Origin, the URL's token (not the header),
    a form's text/plain body; each refused, and the label file unchanged (the fixture checks)."""
    process, _ = served
    port = urlsplit(process.base).port
    for origin in ("http://evil.example", f"http://localhost:{port + 1}", "null", f"https://127.0.0.1:{port}"):
        status, answer = save(process, "a.jpg", [[2, 0.5, 0.5, 0.1, 0.1]], headers={"Origin": origin})
        assert status == 403 and "Origin" in answer["error"], (origin, answer)
        assert raw(process, "GET", "/api/session", headers={"Origin": origin}, length=None)[0] == 403
    status, answer = save(process, "a.jpg", [[2, 0.5, 0.5, 0.1, 0.1]], token="url")
    assert status == 403 and "X-Turboyolo-Token" in answer["error"], answer
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, _ = save(process, "a.jpg", [[2, 0.5, 0.5, 0.1, 0.1]], headers={"Content-Type": kind})
        assert status == 415, kind


def test_bound_to_every_address_any_ip_is_accepted_and_a_name_is_not(review_set, start_review):
    process = start_review(review_set, "--host", "0.0.0.0")
    port = urlsplit(process.base).port
    assert raw(process, "GET", "/api/session", host=f"192.0.2.7:{port}", length=None)[0] == 200
    assert raw(process, "GET", "/api/session", host=f"[2001:db8::1]:{port}", length=None)[0] == 200
    assert raw(process, "GET", "/api/session", host=f"evil.example:{port}", length=None)[0] == 403


def test_a_label_file_that_is_a_link_out_of_the_data_set_is_neither_served_nor_written(server):
    process, images, secret = server
    label = images.parent / "labels" / "d.txt"
    for path in ("/api/labels/d.jpg", "/image/d.jpg"):
        status, answer = raw(process, "GET", path, token="url", length=None)
        assert status == 404 and b"private" not in json.dumps(answer).encode(), answer
    status, _ = save(process, "d.jpg", [[2, 0.5, 0.5, 0.1, 0.1]], base=None)
    assert status == 404
    assert secret.read_text() == SECRET and os.path.islink(label)
    listing = raw(process, "GET", "/api/list?order=name", token="url", length=None)[1]
    assert [item["key"] for item in listing["items"]] == ["a.jpg", "b.jpg", "c.png", "d.jpg"]  # listed


def test_an_unforeseen_failure_in_a_route_is_answered_500_logged_and_the_server_goes_on(review_set, tmp_path,
                                                                                       monkeypatch, capsys):
    """The last resort: a route that raises what nobody foresaw is answered (500, the reason in the
    terminal), never a dead handler thread and a page waiting forever."""
    from turboyolo.review import server as review_server

    app = review_server.open_review(review_set, review_server.ReviewArgs(), cache=tmp_path / "cache")
    httpd = review_server.make_server(app)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def broken(self, request):
        raise RuntimeError("a bug nobody foresaw")

    monkeypatch.setattr(review_server.Handler, "answer_session", broken)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", app.port, timeout=30)
        for path in ("/api/session", "/api/list"):
            connection.request("GET", path, headers={"X-Turboyolo-Token": app.token})
            response = connection.getresponse()
            body = json.loads(response.read())
            if path == "/api/session":
                assert response.status == 500 and "terminal" in body["error"], body
                connection.close()
            else:
                assert response.status == 200 and len(body["items"]) == 3, body
    finally:
        httpd.shutdown()
        httpd.server_close()
        app.images.close()
    err = capsys.readouterr().err
    assert "GET /api/session failed (answered 500)" in err and "a bug nobody foresaw" in err
