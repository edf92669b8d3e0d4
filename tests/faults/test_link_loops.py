"""Folder links that loop back up: a folder data set, a ``**`` glob in detect and the scan all end,
each real folder entered once, and the link not followed again is named."""

from __future__ import annotations

import pytest

from faults.hostile import file_link_loops, good_jpeg, link_loop, make_split


# a fresh process (about 10 s of imports on 2 busy cores), so a regression cannot hang pytest
@pytest.mark.slow
def test_detect_glob_through_a_link_loop_ends(tmp_path, cli, tiny_model):
    cfg, weights, names, _ = tiny_model
    root = link_loop(tmp_path / "tree")
    good_jpeg(root / "a" / "x.jpg")
    good_jpeg(root / "a" / "b" / "y.jpg", seed=1)
    run = cli("detect", f"{root}/**/*.jpg", "--cfg", cfg, "--weights", weights, "--no-draw",
              "--project", tmp_path / "runs", "--name", "d", process=True, timeout=120)
    run.assert_clean(0)
    assert "2 images" in run.output
    run = cli("detect", root, "--cfg", cfg, "--weights", weights, "--no-draw",
              "--project", tmp_path / "runs", "--name", "f")
    run.assert_clean(0)
    assert "2 images" in run.output and "not followed again" in run.output and "self" in run.output


def test_scan_of_a_folder_with_a_link_loop_ends_and_says_so(tmp_path, cli):
    make_split(tmp_path / "set", count=3)
    link_loop(tmp_path / "set" / "images")
    run = cli("anchors", "--data", tmp_path / "set" / "images", "--num", 2, "--restarts", 1)
    run.assert_clean(0)
    assert "3 images found" in run.output and "2 warnings" in run.output
    assert "a/b/up: links to a folder already listed; not followed again" in run.output


def _eight_images_and_link_loops(root):
    for i in range(8):
        good_jpeg(root / ("sub" if i % 2 else "") / f"img{i}.jpg", seed=i)
    return file_link_loops(root)


def test_scan_counts_real_images_once_and_names_every_link_loop(tmp_path, cli):
    root = tmp_path / "set"
    links = _eight_images_and_link_loops(root)
    run = cli("prepare", "--data", root, "--split", "train", "--img-size", 64, "--out", tmp_path / "prep",
              "--workers", 1)
    run.assert_clean(0)
    assert "8 images found" in run.output and "0 excluded" in run.output  # was 12 found, 3 excluded
    report = run.output + (tmp_path / "prep" / "train" / "scan_report.txt").read_text(encoding="utf-8")
    for name in links:
        assert f"{root / name}: " in report, name
    assert "loops back on itself" in report and "already listed" in report and "does not exist" in report


def test_detect_of_a_folder_and_a_glob_with_link_loops_ends_cleanly(tmp_path, cli, tiny_model):
    cfg, weights, names, _ = tiny_model
    root = tmp_path / "set"
    _eight_images_and_link_loops(root)
    for name, source in (("f", root), ("g", f"{root}/**/*.jpg")):  # both ended in RuntimeError: Symlink loop
        run = cli("detect", source, "--cfg", cfg, "--weights", weights, "--no-draw",
                  "--project", tmp_path / "runs", "--name", name)
        run.assert_clean(0)
        assert "8 images" in run.output and "self.jpg: a link that loops back on itself" in run.output


def test_label_links_that_loop_or_point_at_nothing_exclude_their_image(tmp_path, cli):
    """A label file that is a broken link is not a missing label file: counting its image as background
    would train its objects as background without a word."""
    import os

    make_split(tmp_path / "set", count=4)
    labels = tmp_path / "set" / "labels"
    (labels / "img1.txt").unlink()
    os.symlink("img1.txt", labels / "img1.txt")  # loops back on itself
    (labels / "img2.txt").unlink()
    os.symlink("moved/img2.txt", labels / "img2.txt")  # points at nothing
    run = cli("prepare", "--data", tmp_path / "set" / "images", "--split", "train", "--img-size", 64,
              "--out", tmp_path / "prep", "--workers", 1)
    run.assert_clean(0)
    assert "2 labelled (2 boxes), 0 background, 2 excluded" in run.output, run.output
    assert f"label file {labels / 'img1.txt'}: a link that loops back on itself" in run.output
    assert f"label file {labels / 'img2.txt'}: a link to 'moved/img2.txt', which does not exist" in run.output


def test_a_list_file_that_loops_is_named_as_a_loop(tmp_path, cli):
    import os

    make_split(tmp_path / "set", count=2)
    os.symlink("train.txt", tmp_path / "set" / "train.txt")
    sets = tmp_path / "set"
    (tmp_path / "d.yaml").write_text(f"train: {sets / 'train.txt'}\nval: {sets / 'images'}\n"
                                     "names: [apple, banana]\n")
    run = cli("anchors", "--data", tmp_path / "d.yaml", "--num", 2, "--restarts", 1)
    run.assert_clean(1)
    assert f"{tmp_path / 'set' / 'train.txt'}: a link that loops back on itself" in run.output, run.output
