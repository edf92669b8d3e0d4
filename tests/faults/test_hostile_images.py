"""Bomb, truncated, mid-corrupt and entropy-damaged JPEG, bad-CRC PNG, a PNG whose compressed data is
damaged under valid CRCs, truncated BMP/TIFF/WebP, zero-byte and text-as-jpg: counted and named skips in the
scan (``prepare``, ``anchors``; damage under an intact structure at the first decode, ``prepare``'s build)
and in ``detect``, never a traceback, and the same verdict in both."""

from __future__ import annotations

import json
import re
from pathlib import Path

from faults.hostile import DECODE_STAGE, make_split, write_hostile_images


def _assert_named(output: str, expected: dict[str, tuple[str, ...]]) -> None:
    for name, words in expected.items():
        lines = [line for line in output.splitlines() if name in line]
        assert lines, f"{name} not named:\n{output}"
        assert any(word in line for line in lines for word in words), f"{name}: {lines}"


def _with_report(output: str) -> str:
    """The console output and the full scan report it points to ("and M more, see REPORT")."""
    found = re.search(r"more, see (\S+)", output)
    return output + (Path(found.group(1)).read_text(encoding="utf-8") if found else "")


def test_scan_excludes_and_names_every_hostile_image(tmp_path, cli):
    make_split(tmp_path / "set", count=3)
    expected = write_hostile_images(tmp_path / "set" / "images")
    run = cli("prepare", "--data", tmp_path / "set" / "images", "--split", "train", "--img-size", 64,
              "--out", tmp_path / "prepared", "--workers", 1)
    run.assert_clean(0)
    at_scan = len(expected) - len(DECODE_STAGE)  # the others pass the header check; the build refuses them
    assert f"{3 + len(expected)} images found" in run.output and f"{at_scan} excluded" in run.output
    _assert_named(_with_report(run.output), expected)
    assert f"train: 3 images -> {tmp_path / 'prepared' / 'train'} ({len(DECODE_STAGE)} failed" in run.output
    report = (tmp_path / "prepared" / "train" / "scan_report.txt").read_text(encoding="utf-8")
    _assert_named(report, expected)  # every file, with its reason, in the report


def test_anchors_survives_hostile_images(tmp_path, cli):
    make_split(tmp_path / "set", count=3)
    expected = write_hostile_images(tmp_path / "set" / "images")
    run = cli("anchors", "--data", tmp_path / "set" / "images", "--num", 2, "--restarts", 1)
    run.assert_clean(0)
    # anchors reads sizes and boxes, no pixel: what only a decode finds does not concern it
    _assert_named(_with_report(run.output), {k: v for k, v in expected.items() if k not in DECODE_STAGE})


def test_detect_skips_and_names_the_same_images(tmp_path, cli, tiny_model):
    cfg, weights, names, _ = tiny_model
    make_split(tmp_path / "set", count=2)
    expected = write_hostile_images(tmp_path / "set" / "images")
    run = cli("detect", tmp_path / "set" / "images", "--cfg", cfg, "--weights", weights, "--names", names,
              "--project", tmp_path / "runs", "--name", "d", "--save-txt")
    run.assert_clean(0)
    assert f"{len(expected)} unreadable images skipped" in run.output
    _assert_named(run.output, expected)
    out = tmp_path / "runs" / "d"
    skipped = (out / "skipped.txt").read_text(encoding="utf-8")
    _assert_named(skipped, expected)
    assert sorted(json.loads((out / "image_ids.json").read_text()).values()) == [
        str(tmp_path / "set" / "images" / "img0.jpg"), str(tmp_path / "set" / "images" / "img1.jpg")]
    assert not (out / "badcrc.png").exists() and (out / "img0.jpg").exists()


def test_api_and_label_refuse_a_bomb(tmp_path, cli, tiny_model):
    import pytest

    import turboyolo
    from faults.hostile import bomb_png
    from turboyolo.errors import DataError

    cfg, weights, names, checkpoint = tiny_model
    bomb = bomb_png(tmp_path / "set" / "bomb.png")
    model = turboyolo.load(checkpoint, device="cpu")
    with pytest.raises(DataError, match="bomb.png: image declares 30000 x 30000"):
        turboyolo.detect(model, bomb)
    run = cli("label", "--data", tmp_path / "set", "--cfg", cfg, "--weights", weights,
              "--project", tmp_path / "runs", "--name", "l")
    run.assert_clean(0)
    review = (tmp_path / "runs" / "l" / "review.csv").read_text()
    assert "bomb.png" in review and "decompression bomb" in review
