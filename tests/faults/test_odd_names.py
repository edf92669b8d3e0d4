"""File names with a Latin-1 byte (not valid UTF-8), spaces and non-ASCII letters: detect draws and
lists them (it used to die with signal 11 in cv2.imwrite), the scan keeps them when a list file names
them, and reports print them with ``\\xNN`` escapes (they used to raise UnicodeEncodeError)."""

from __future__ import annotations

import json
import os

from faults.hostile import LATIN1_NAME, good_jpeg, make_split, odd_name, zero_byte

NAMES = (LATIN1_NAME, b"with space.jpg", "åker ñ 木.jpg".encode())


def test_detect_draws_and_lists_odd_names(tmp_path, cli, tiny_model):
    cfg, weights, names, _ = tiny_model
    folder = tmp_path / "in"
    for i, raw in enumerate(NAMES):
        good_jpeg(odd_name(folder, raw), seed=i)
    zero_byte(odd_name(folder, b"broken-\xff.jpg"))
    run = cli("detect", folder, "--cfg", cfg, "--weights", weights, "--names", names, "--save-txt",
              "--project", tmp_path / "runs", "--name", "d", process=True)  # it used to crash: own process
    run.assert_clean(0)
    assert "3 images" in run.output and "broken-\\xff.jpg: zero-byte" in run.output
    out = os.fsencode(tmp_path / "runs" / "d")
    for raw in NAMES:
        assert os.path.exists(out + b"/" + raw), raw  # drawn under the same bytes
        assert os.path.exists(out + b"/labels/" + raw.rsplit(b".", 1)[0] + b".txt")
    listed = json.loads((tmp_path / "runs" / "d" / "image_ids.json").read_text())
    assert sorted(os.fsencode(p).rsplit(b"/", 1)[1] for p in listed.values()) == sorted(NAMES)
    assert "broken-\\xff.jpg" in (tmp_path / "runs" / "d" / "skipped.txt").read_text(encoding="utf-8")


def test_scan_through_a_list_file_keeps_and_reports_odd_names(tmp_path, cli):
    make_split(tmp_path, count=2)
    for i, raw in enumerate(NAMES):
        good_jpeg(odd_name(tmp_path / "images", raw), seed=i)
    zero_byte(odd_name(tmp_path / "images", b"bad-\xe9.jpg"))
    listed = NAMES + (b"bad-\xe9.jpg",)
    lines = [b"images/img0.jpg", b"images/img1.jpg"] + [b"images/" + raw for raw in listed]
    (tmp_path / "train.txt").write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "d.data").write_text("classes = 2\ntrain = train.txt\nvalid = train.txt\nnames = m.names\n")
    run = cli("prepare", "--data", tmp_path / "d.data", "--split", "train", "--img-size", 64,
              "--out", tmp_path / "prepared", "--workers", 1)
    run.assert_clean(0)
    assert "6 images found" in run.output and "1 excluded" in run.output
    assert "bad-\\xe9.jpg: zero-byte" in run.output
    assert "train: 5 images" in run.output
