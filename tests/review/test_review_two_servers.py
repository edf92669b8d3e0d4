"""Two ``turboyolo review`` servers on one data set (two people, or two tabs of two starts) never lose an
edit: saves of one image from one version succeed exactly once, saves of two images keep both review
records (issue 42). Each round sends its two saves at the same moment, one to each server process."""

from __future__ import annotations

import http.client
import json
import threading
from urllib.parse import urlsplit

import pytest

from synth import read_labels
from turboyolo.data.autolabels import label_status

ROUNDS = 50


class Client:
    """A kept-alive connection to one server, as the page holds one."""

    def __init__(self, process):
        where = urlsplit(process.base)
        self.process = process
        self.connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)

    def get(self, key: str) -> dict:
        token = {"X-Turboyolo-Token": self.process.token}
        self.connection.request("GET", f"/api/labels/{key}", headers=token)
        response = self.connection.getresponse()
        assert response.status == 200
        return json.loads(response.read())

    def post(self, key: str, body: bytes) -> int:
        self.connection.request("POST", f"/api/labels/{key}", body=body, headers={
            "X-Turboyolo-Token": self.process.token, "Content-Type": "application/json"})
        response = self.connection.getresponse()
        response.read()
        return response.status


def at_once(*calls) -> list:
    """Run ``calls`` (client, key, body) in threads released together; their statuses in order."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(k: int) -> None:
        client, key, body = calls[k]
        barrier.wait()
        results[k] = client.post(key, body)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def body(rows, base) -> bytes:
    return json.dumps({"rows": rows, "base": base}).encode()


@pytest.mark.slow
def test_two_servers_on_one_data_set_never_both_save_one_image_nor_lose_a_review(review_set, start_review):
    first, second = start_review(review_set), start_review(review_set)
    one, two = Client(first), Client(second)
    labels = review_set.parent / "labels"
    for k in range(ROUNDS):
        # both pages loaded a.jpg at the same version; both save their own edit at once
        base = one.get("a.jpg")["sha1"]
        assert two.get("a.jpg")["sha1"] == base
        mine, theirs = [[0, 0.3, 0.3, 0.1, 0.1 + k / 1000]], [[1, 0.6, 0.6, 0.2, 0.1 + k / 1000]]
        statuses = at_once((one, "a.jpg", body(mine, base)), (two, "a.jpg", body(theirs, base)))
        assert sorted(statuses) == [200, 409], (k, statuses)
        won = mine if statuses[0] == 200 else theirs
        assert read_labels(labels / "a.txt").tolist()[0] == pytest.approx(won[0]), k
        assert label_status(labels / "a.txt") == "reviewed"
        # two images of one labels folder (one manifest) saved at once: both review records kept
        (labels / "b.txt").write_text(f"1 0.5 0.5 0.3 0.{k + 10}\n")  # another program: human again
        (labels / "a.txt").write_text(f"0 0.25 0.25 0.2 0.{k + 10}\n")
        base_a, base_b = one.get("a.jpg")["sha1"], two.get("b.jpg")["sha1"]
        statuses = at_once((one, "a.jpg", body([[0, 0.25, 0.25, 0.2, 0.2]], base_a)),
                           (two, "b.jpg", body([[2, 0.5, 0.5, 0.3, 0.4]], base_b)))
        assert statuses == [200, 200], (k, statuses)
        assert label_status(labels / "a.txt") == "reviewed", k
        assert label_status(labels / "b.txt") == "reviewed", k
