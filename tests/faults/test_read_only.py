"""Read-only and odd filesystems (issue 31, round three): a valid prepared cache on a read-only folder is
used as it is; every writer names a folder it cannot write, why, and the option that chooses another.

Root ignores permission bits, so a folder is made read-only the way a read-only mount is: the command
runs in its own mount namespace (``unshare``, as root or in a user namespace) where the folder is bound
read-only. Where that is not possible, a non-root user gets ``chmod 555``; root without ``unshare`` skips
those cases. A file where a folder should be (``path/with/file/as/dir``) refuses every user, root too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from synth import make_dataset, micro_cfg


@pytest.fixture
def small(tmp_path):
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    return data, cfg


def test_a_valid_prepared_cache_on_a_read_only_folder_is_used_as_it_is(tmp_path, cli, read_only, small,
                                                                        monkeypatch):
    data, cfg = small
    cache = tmp_path / "shared-cache"
    monkeypatch.setenv("TURBOYOLO_CACHE", str(cache))
    cli("prepare", "--data", data, "--img-size", 64).assert_clean(0)
    again = read_only(cache, "prepare", "--data", data, "--img-size", 64, cache=cache)
    again.assert_clean(0)
    assert "valid (its folder is read-only" in again.output, again.output
    run = read_only(cache, "train", "--cfg", cfg, "--data", data, "--cache", "disk", "--img-size", 64,
                    "--epochs", 1, "--workers", 0, "--evaluation-interval", 0, "--project", tmp_path / "runs",
                    cache=cache)
    run.assert_clean(0)
    assert "valid (its folder is read-only" in run.output and "run directory" in run.output, run.output


def test_a_missing_cache_on_a_read_only_folder_says_why_and_the_fix(tmp_path, read_only, small):
    data, _ = small
    folder = tmp_path / "ro"
    folder.mkdir()
    run = read_only(folder, "prepare", "--data", data, "--img-size", 64, "--out", folder / "c")
    run.assert_clean(1)
    assert f"{folder}" in run.output and "cannot be written" in run.output and "--cache ram" in run.output


def _writers(tmp_path: Path, data: Path, cfg: Path, weights: Path, out: Path) -> dict[str, list]:
    """Each writer's command line with its output under ``out`` (the flag named in its error)."""
    voc = tmp_path / "voc"
    voc.mkdir(exist_ok=True)
    (voc / "a.xml").write_text("<annotation><filename>a.jpg</filename><size><width>100</width><height>100"
                               "</height></size><object><name>cat</name><bndbox><xmin>10</xmin><ymin>10"
                               "</ymin><xmax>50</xmax><ymax>50</ymax></bndbox></object></annotation>")
    return {
        "-o/--output": ["export", "--cfg", cfg, "--weights", weights, "-o", out / "m.onnx"],
        "--out": ["convert", voc, "--out", out / "labels"],
        "--out (turboyolo prepare)": ["prepare", "--data", data, "--img-size", 64, "--out", out / "cache"],
        "--dest": ["fetch", "trees", "--dest", out / "trees"],
        "-o/--output ": ["cfg", "yolov3-tiny", "-n", 2, "-o", out / "m.cfg"],
        "-o/--output  ": ["anchors", "--data", data, "--cfg", cfg, "-o", out / "fitted.cfg"],
        "--project": ["detect", data.parent / "images" / "val", "--cfg", cfg, "--weights", weights,
                      "--project", out / "runs"],
        "--project ": ["train", "--cfg", cfg, "--data", data, "--epochs", 1, "--project", out / "runs"],
    }


def test_every_writer_names_a_file_where_its_folder_should_be(tmp_path, cli, small, tiny_model, monkeypatch):
    data, _ = small
    cfg, weights, _, _ = tiny_model
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for flag, args in _writers(tmp_path, data, cfg, weights, blocker / "sub").items():
        run = cli(*args)
        run.assert_clean(1)
        assert str(blocker) in run.output and flag.strip() in run.output, (args, run.output)
        assert "Not a directory" in run.output or "is a file, not a folder" in run.output, run.output
    monkeypatch.setenv("TURBOYOLO_CACHE", str(blocker / "cache"))
    run = cli("fetch", "yolov3-tiny")
    run.assert_clean(1)
    assert "TURBOYOLO_CACHE" in run.output and "is a file, not a folder" in run.output, run.output


def test_every_writer_names_a_read_only_folder(tmp_path, read_only, small, tiny_model):
    data, _ = small
    cfg, weights, _, _ = tiny_model
    folder = tmp_path / "ro"
    folder.mkdir()
    for flag, args in _writers(tmp_path, data, cfg, weights, folder).items():
        if args[0] == "prepare":  # a read-only cache folder is a valid use: its own tests above
            continue
        run = read_only(folder, *args)
        run.assert_clean(1)
        assert str(folder) in run.output and flag.strip() in run.output, (args, run.output)
        assert "read-only" in run.output.lower() or "Permission denied" in run.output, run.output
    assert not list(folder.iterdir())  # nothing half-made


def test_label_names_a_read_only_labels_folder_before_any_work(tmp_path, read_only, tiny_model):
    from synth import make_image_folder

    cfg, weights, _, _ = tiny_model
    root = tmp_path / "set"
    make_image_folder(root, count=3, size=(64, 64), num_classes=2)
    labels = root / "labels"
    for label in labels.iterdir():
        label.unlink()
    run = read_only(labels, "label", "--data", root / "images", "--cfg", cfg, "--weights", weights,
                    "--project", tmp_path / "runs")
    run.assert_clean(1)
    assert str(labels) in run.output and "copy the data set somewhere writable" in run.output, run.output
    assert not (tmp_path / "runs").exists()  # no run directory left behind
