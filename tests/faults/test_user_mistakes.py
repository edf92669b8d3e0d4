"""A user's mistakes that ended in tracebacks (issue 42, round four): an image whose suffix is not one
of the common six given to ``detect`` (taken for a list file: "embedded null byte"), a file that is
neither an image nor text, and a checkpoint whose stored config is not a mapping given to ``test``."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from synth import make_dataset, micro_cfg


def _pictures(folder, kinds):
    """One picture per ``(name, Pillow format)``, its content in that format."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    for name, kind in kinds:
        Image.fromarray(rng.integers(0, 255, (48, 64, 3), np.uint8)).save(folder / name, format=kind)
    return folder


KINDS = [("g.gif", "GIF"), ("f.jfif", "JPEG"), ("e.jpe", "JPEG"), ("p.ppm", "PPM"), ("t.tga", "TGA"),
         ("U.GIF", "GIF")]


def test_detect_reads_any_image_a_decoder_reads_by_its_suffix(cli, tiny_model, tmp_path):
    cfg, weights, names, _ = tiny_model
    folder = _pictures(tmp_path / "in", KINDS)
    run = cli("detect", *(folder / name for name, _ in KINDS), "--cfg", cfg, "--weights", weights, "--names",
              names, "--device", "cpu", "--project", tmp_path / "runs", "--save-txt")
    run.assert_clean(0)
    assert f"{len(KINDS)} images" in run.output and "skipped" not in run.output, run.output
    for name, _ in KINDS:
        assert (tmp_path / "runs" / "exp" / "labels" / f"{name.split('.')[0]}.txt").exists(), name


def test_detect_of_a_glob_and_a_list_file_takes_those_images_too(cli, tiny_model, tmp_path):
    cfg, weights, names, _ = tiny_model
    globbed = _pictures(tmp_path / "globbed", [("a.gif", "GIF"), ("b.jpe", "JPEG"), ("c.jpg", "JPEG")])
    listed = _pictures(tmp_path / "listed", [("d.gif", "GIF"), ("e.jfif", "JPEG")])
    (tmp_path / "list.txt").write_text(f"{listed / 'd.gif'}\n{listed / 'e.jfif'}\n")
    run = cli("detect", f"{globbed}/*", tmp_path / "list.txt", "--cfg", cfg, "--weights", weights, "--names",
              names, "--device", "cpu", "--project", tmp_path / "runs")
    run.assert_clean(0)
    assert "5 images" in run.output and "skipped" not in run.output, run.output


@pytest.mark.parametrize("content", [b"\x00\x01\x02binary\xff\xfe", bytes(range(256)) * 4,
                                     b"%PDF-1.7\n\x00\x00stream"])
def test_a_file_neither_image_nor_text_is_refused_naming_it(cli, tiny_model, tmp_path, content):
    cfg, weights, names, _ = tiny_model
    blob = tmp_path / "notes.bin"
    blob.write_bytes(content)
    run = cli("detect", blob, "--cfg", cfg, "--weights", weights, "--names", names, "--device", "cpu",
              "--project", tmp_path / "runs")
    run.assert_clean(1)
    assert f"{blob}: neither an image" in run.output and "not text" in run.output, run.output
    assert "null byte" not in run.output


@pytest.mark.parametrize("config,expected", [
    ("yolov3-tiny", "its stored config is str 'yolov3-tiny', not a mapping of options"),
    ([1, 2], "its stored config is list"),
    ({"eval": [0.5]}, "its stored config's eval section is list"),
    ({"eval": {"conf_thres": "high"}}, "conf_thres"),
    ({"eval": {"val_img_size": 33}}, "--val-img-size must be a multiple of 32"),
])
def test_test_of_a_checkpoint_whose_stored_config_is_damaged_says_so(cli, tmp_path, config, expected):
    import torch

    from turboyolo.formats.darknet_cfg import format_cfg, parse_cfg
    from turboyolo.model.darknet import Darknet

    data = make_dataset(tmp_path / "data", 2, 2, num_classes=1)
    spec = parse_cfg(micro_cfg(tmp_path / "m.cfg", num_classes=1))
    checkpoint = tmp_path / "damaged.pt"
    torch.save({"model": Darknet(spec).state_dict(), "cfg_text": format_cfg(spec), "config": config},
               checkpoint)
    run = cli("test", "--weights", checkpoint, "--data", data, "--workers", 0, "--device", "cpu")
    run.assert_clean(1)
    assert str(checkpoint) in run.output and expected in run.output, run.output
