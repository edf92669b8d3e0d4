"""Data descriptions (.data, data.yaml, folder), list files and the images/ -> labels/ rules."""

from pathlib import Path

import pytest

from turboyolo.errors import ConfigError, DataError
from turboyolo.formats.datasets import (
    darknet_label_path,
    label_path_disagreement,
    label_path_for,
    list_images,
    load_data_config,
    pytorchyolo_label_path,
)


def test_darknet_data_relative_to_file(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.txt").write_text("imgs/a.jpg\n\n# comment\n/abs/b.jpg\n")
    (tmp_path / "d" / "x.names").write_text("cat\ndog\n\n")
    (tmp_path / "d" / "x.data").write_text(
        "classes= 2\ntrain = train.txt\nvalid=train.txt\nnames = x.names\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_data_config("d/x.data")
    assert cfg.names == ["cat", "dog"] and cfg.num_classes == 2
    assert cfg.train[0].resolve() == (tmp_path / "d/train.txt").resolve()
    images = list_images(cfg.train[0])
    assert images[0].resolve() == (tmp_path / "d" / "imgs" / "a.jpg").resolve()
    assert images[1] == Path("/abs/b.jpg") and len(images) == 2


def test_darknet_data_errors(tmp_path):
    (tmp_path / "n.names").write_text("a\n")
    (tmp_path / "x.data").write_text("classes=3\ntrain=t.txt\nvalid=t.txt\nnames=n.names\n")
    with pytest.raises(ConfigError, match="classes = 3"):
        load_data_config(tmp_path / "x.data")
    (tmp_path / "y.data").write_text("train=t.txt\n")
    with pytest.raises(ConfigError, match="valid"):
        load_data_config(tmp_path / "y.data")
    with pytest.raises(ConfigError, match="no such"):
        load_data_config(tmp_path / "missing.data")


def test_yaml_forms(tmp_path):
    (tmp_path / "ds" / "images" / "train").mkdir(parents=True)
    (tmp_path / "a.yaml").write_text(
        "path: ds\ntrain: images/train\nval: [images/train]\nnames: {0: a, 1: b}\n")
    cfg = load_data_config(tmp_path / "a.yaml")
    assert cfg.names == ["a", "b"]
    assert cfg.train[0].resolve() == (tmp_path / "ds/images/train").resolve()
    assert cfg.split("val") == cfg.val and len(cfg.val) == 1
    (tmp_path / "b.yaml").write_text("train: ds/images/train\nnames: [x]\nnc: 2\n")
    with pytest.raises(ConfigError, match="nc = 2"):
        load_data_config(tmp_path / "b.yaml")


def test_image_folder(tmp_path):
    (tmp_path / "imgs" / "sub").mkdir(parents=True)
    for name in ("b.JPG", "a.png", "sub/c.webp", "notes.txt"):
        (tmp_path / "imgs" / name).write_bytes(b"x")
    (tmp_path / "k.names").write_text("k\n")
    cfg = load_data_config(tmp_path / "imgs")
    assert cfg.names == ["k"]
    assert [p.name for p in list_images(cfg.train[0])] == ["a.png", "b.JPG", "c.webp"]
    with pytest.raises(DataError, match="not found"):
        list_images(tmp_path / "nothing")


def test_label_rules():
    img = Path("/data/images/set/images/x.jpg")
    assert label_path_for(img) == Path("/data/images/set/labels/x.txt")
    assert darknet_label_path(img) == Path("/data/labels/set/images/x.txt")
    assert pytorchyolo_label_path(img) == Path("/data/images/set/labels/x.txt")
    assert label_path_for(Path("/a/b/x.png")) == Path("/a/b/x.txt")
    assert pytorchyolo_label_path(Path("/d/myimages/x.png")) == Path("/d/mylabels/x.txt")
    assert label_path_for(Path("/d/myimages/x.png")) == Path("/d/myimages/x.txt")


def test_label_paths_for_is_label_path_for_per_image(tmp_path):
    from turboyolo.formats.datasets import label_paths_for

    (tmp_path / "train_labels").mkdir()  # PyTorch-YOLOv3's sibling folder exists for train_images only
    names = ["x.jpg", "x.tar.jpg", ".hidden", ".hidden.png", "noext", "a.", "a..jpg", "sp ace.JPG",
             "caf\udce9.jpg", "..", "v.JPEG"]
    folders = [tmp_path / "train_images", tmp_path / "val_images", tmp_path / "images" / "s" / "images",
               tmp_path / "images", tmp_path / "plain", Path("images"), Path("rel") / "dir", Path("."),
               Path("/")]
    images = [folder / name for folder in folders for name in names] + ["x.jpg", "images/y.png"]
    assert label_paths_for(images) == [str(label_path_for(image)) for image in images]


def test_disagreement_warning(tmp_path):
    img = tmp_path / "images" / "set" / "images" / "x.jpg"
    img.parent.mkdir(parents=True)
    ours = label_path_for(img)
    ours.parent.mkdir(parents=True)
    ours.write_text("")
    assert label_path_disagreement(img) is None
    theirs = darknet_label_path(img)
    theirs.parent.mkdir(parents=True)
    theirs.write_text("")
    warning = label_path_disagreement(img)
    assert warning and "Darknet" in warning and str(theirs) in warning and str(ours) in warning


def test_folder_walk_and_globs_end_on_link_loops(tmp_path, monkeypatch):
    from faults.hostile import link_loop
    from turboyolo.formats.datasets import glob_files, walk_files

    root = link_loop(tmp_path / "tree")
    (root / "a" / "x.jpg").write_bytes(b"x")
    (root / "a" / "b" / "y.png").write_bytes(b"y")
    (root / "a" / ".hidden").mkdir()
    (root / "a" / ".hidden" / "h.jpg").write_bytes(b"h")
    notes: list[str] = []
    found = [root / "a" / ".hidden" / "h.jpg", root / "a" / "b" / "y.png", root / "a" / "x.jpg"]
    assert _within(120, list_images, root, notes) == found  # hidden folders too, as rglob did
    assert len(notes) == 2 and all("not followed again" in n for n in notes)
    assert any("self" in n for n in notes) and any("up" in n for n in notes)
    assert sorted(walk_files(root)) == found
    assert _within(120, glob_files, str(root / "**" / "*.jpg")) == [root / "a" / "x.jpg"]  # not hidden ones
    assert glob_files(str(root / "a" / "*")) == [root / "a" / "x.jpg"]
    monkeypatch.chdir(root)
    assert glob_files("**/*.png") == [Path("a/b/y.png")]


def test_list_file_naming_a_latin1_file(tmp_path):
    import os

    from faults.hostile import LATIN1_NAME

    folder = tmp_path / "imgs"
    folder.mkdir()
    image = folder / os.fsdecode(LATIN1_NAME)
    image.write_bytes(b"x")
    (tmp_path / "list.txt").write_bytes(b"imgs/" + LATIN1_NAME + b"\n# comment\n")
    assert list_images(tmp_path / "list.txt") == [image] and image.exists()
    assert list_images(folder) == [image]


def _within(seconds, function, *args):
    """``function(*args)`` run in a thread that must finish within ``seconds`` (a walk that loops forever
    fails the test instead of hanging the suite)."""
    import threading

    result = []
    worker = threading.Thread(target=lambda: result.append(function(*args)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{function.__name__} did not finish within {seconds} s"
    return result[0]
