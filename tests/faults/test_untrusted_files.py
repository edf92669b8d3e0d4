"""Planted pickles and checkpoints turboyolo must refuse: no code from a file ever runs, the refusal
says what the file is and never passes on PyTorch's advice to load it with ``weights_only=False``;
``--resume`` of a plain state_dict and ``--weights`` of a truncated .weights are clear errors."""

from __future__ import annotations

import hashlib

import torch

from faults.hostile import make_split, planted_checkpoint, planted_pickle


def _data_yaml(root):
    make_split(root, count=3)
    (root / "data.yaml").write_text("train: images\nval: images\nnames: [apple, banana]\n")
    return root / "data.yaml"


def test_planted_scan_cache_pickles_run_nothing(tmp_path, cli):
    from turboyolo.assets import cache_dir
    from turboyolo.data.scan import _cache_file

    make_split(tmp_path / "set", count=3)
    data = tmp_path / "set" / "images"
    marker = tmp_path / "MARKER"
    # where the cache lives now (JSON) and where the old pickle cache lived (SCAN_VERSION 1, .pkl)
    planted_pickle(_cache_file(data, "train"), marker)
    old = hashlib.sha1(f"{data.resolve()}|train|1".encode()).hexdigest()[:16]
    planted_pickle(cache_dir() / "scans" / f"images-train-{old}.pkl", marker)
    run = cli("anchors", "--data", data, "--num", 2, "--restarts", 1)
    run.assert_clean(0)
    assert "3 images found" in run.output and not marker.exists()


def test_planted_checkpoint_is_refused_everywhere(tmp_path, cli, tiny_model):
    cfg, _, _, _ = tiny_model
    data = _data_yaml(tmp_path / "set")
    marker = tmp_path / "MARKER"
    evil = planted_checkpoint(tmp_path / "evil.pt", marker)
    runs = {
        "detect": cli("detect", tmp_path / "set" / "images", "--weights", evil, "--project", tmp_path / "r"),
        "test": cli("test", "--weights", evil, "--data", data, "--device", "cpu"),
        "train --weights": cli("train", "--cfg", cfg, "--weights", evil, "--data", data, "--device", "cpu",
                               "--project", tmp_path / "r", "--epochs", 1),
        "train --resume": cli("train", "--resume", evil, "--data", data, "--device", "cpu"),
    }
    for what, run in runs.items():
        run.assert_clean(1)
        assert f"{evil}: refused" in run.output, what
        assert "io.open (a call that opens files)" in run.output, what  # what the file would call
        assert "weights_only" not in run.output and "trusted source" not in run.output, what
    assert not marker.exists()


def test_resume_of_a_plain_state_dict_says_use_weights(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    plain = tmp_path / "plain.pt"
    torch.save(torch.load(checkpoint, weights_only=True)["model"], plain)
    run = cli("train", "--resume", plain, "--data", _data_yaml(tmp_path / "set"), "--device", "cpu")
    run.assert_clean(1)
    assert f"{plain}: not a turboyolo checkpoint: a plain state_dict" in run.output
    assert f"use --weights {plain}" in run.output


def test_truncated_weights_for_transfer_say_truncated_fast(tmp_path, cli, tiny_model, monkeypatch):
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model import loading
    from turboyolo.model.zoo import ARCHITECTURES, make_spec

    layouts = []  # the work, counted rather than timed (timings belong in bench/)
    real_layout = loading._layout
    monkeypatch.setattr(loading, "_layout", lambda spec: layouts.append(spec) or real_layout(spec))

    _, weights, _, _ = tiny_model
    data = weights.read_bytes()
    cut = tmp_path / "cut.weights"
    cut.write_bytes(data[: (len(data) * 2 // 3) // 4 * 4])  # a whole number of floats: no easy tell
    one_class = write_cfg(make_spec("yolov3-tiny", num_classes=1, width=64, height=64, batch=2,
                                    subdivisions=1), tmp_path / "one.cfg")  # another class count: transfer
    run = cli("train", "--cfg", one_class, "--weights", cut, "--data", _data_yaml(tmp_path / "set"),
              "--device", "cpu", "--project", tmp_path / "r", "--epochs", 1, "--workers", 0)
    run.assert_clean(1)
    assert f"{cut}: truncated" in run.output and "nearest layer boundary" in run.output, run.output
    assert "another architecture" not in run.output
    # a few layouts (this cfg's, and two per known network), not a search over 1000 class counts
    assert len(layouts) <= 3 + 2 * len(ARCHITECTURES), len(layouts)
