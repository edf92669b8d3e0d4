"""``turboyolo review`` started as a user starts it (the real CLI, in its own process), on a small set."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from turboyolo.formats.labels import write_yolo_labels

# image -> its label rows; boxes apart so that a drag on one never touches another
LABELS = {
    "a.jpg": [[0, 0.25, 0.25, 0.2, 0.2], [1, 0.75, 0.75, 0.2, 0.2]],
    "b.jpg": [[1, 0.5, 0.5, 0.3, 0.4]],
    "c.png": [],  # no label file: an image nobody labelled yet
}


def make_review_set(root: Path, size=(300, 400)) -> Path:
    """``root/images`` (two JPEGs, one PNG, of different colours and sizes), ``root/labels``, ``names``."""
    rng = np.random.default_rng(3)
    (root / "images").mkdir(parents=True)
    (root / "obj.names").write_text("cat\ndog\nbird\n")
    for k, (name, rows) in enumerate(LABELS.items()):
        h, w = size[0] + 20 * k, size[1] + 30 * k
        array = np.full((h, w, 3), rng.integers(30, 90, 3), np.uint8)
        for _, cx, cy, bw, bh in rows:
            top, bottom = int((cy - bh / 2) * h), int((cy + bh / 2) * h)
            array[top:bottom, int((cx - bw / 2) * w) : int((cx + bw / 2) * w)] = rng.integers(120, 255, 3)
        Image.fromarray(array).save(root / "images" / name)
        if rows:
            write_yolo_labels(root / "labels" / f"{Path(name).stem}.txt", rows)
    return root / "images"


class ReviewProcess:
    """A running ``turboyolo review DATA --no-browser``: its URL, token and output."""

    def __init__(self, data: Path, cache: Path, *flags: str, prefix: tuple[str, ...] = ()):
        env = {**os.environ, "TURBOYOLO_CACHE": str(cache)}
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "turboyolo", "review", str(data),
                                      "--no-browser", *flags], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            found = re.search(r"(http://\S+/)\?t=(\S+)", line)
            if found:
                self.base, self.token = found.group(1), found.group(2)
                self.url = f"{self.base}?t={self.token}"
                return
        self.proc.kill()
        raise AssertionError(f"turboyolo review printed no URL: {''.join(self.lines)}")

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, as a person stops it: its exit code and the rest of its output."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rest, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest, _ = self.proc.communicate()
        return self.proc.returncode, "".join(self.lines) + (rest or "")


@pytest.fixture
def review_set(tmp_path) -> Path:
    return make_review_set(tmp_path / "ds")


@pytest.fixture
def start_review(tmp_path):
    started: list[ReviewProcess] = []

    def start(data: Path, *flags: str, prefix: tuple[str, ...] = ()) -> ReviewProcess:
        process = ReviewProcess(data, tmp_path / "cache", *flags, prefix=prefix)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture(scope="module")
def module_review_set(tmp_path_factory) -> Path:
    """A review set of :func:`make_review_set` for a whole module (one server for many requests)."""
    return make_review_set(tmp_path_factory.mktemp("module_review") / "ds")


@pytest.fixture(scope="module")
def start_module_review(tmp_path_factory):
    """``start_review`` for servers that live as long as the module; each is stopped at its end, and
    its output must hold no traceback."""
    started: list[ReviewProcess] = []
    cache = tmp_path_factory.mktemp("module_cache")

    def start(data: Path, *flags: str) -> ReviewProcess:
        process = ReviewProcess(data, cache, *flags)
        started.append(process)
        return process

    yield start
    for process in started:
        code, output = process.stop()
        assert code == 0 and "Traceback" not in output, output
