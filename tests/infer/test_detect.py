"""``turboyolo detect``: Darknet fidelity, the three outputs, bad input."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fidelity import compare, load_fixture
from turboyolo.cli import main
from turboyolo.formats.darknet_cfg import write_cfg
from turboyolo.model import cpu_kernels
from turboyolo.model.darknet import Darknet
from turboyolo.model.loading import save_darknet_weights
from turboyolo.model.zoo import make_spec

FIXTURE_DIR = Path(__file__).parents[1] / "fixtures" / "darknet"
PHOTOS = ("dog", "eagle", "giraffe", "horses", "kite", "person", "scream")
DARKNET_DATA = Path("/usr/share/darknet/data")


def _photos_or_skip() -> list[Path]:
    paths = [DARKNET_DATA / f"{name}.jpg" for name in PHOTOS]
    if not all(p.exists() for p in paths):
        pytest.skip("Darknet's sample photos are not installed (Debian package darknet)")
    return paths


def _detect(tmp_path, *argv) -> Path:
    assert main(["detect", *map(str, argv), "--project", str(tmp_path), "--name", "run"]) == 0
    return tmp_path / "run"


def _assert_matches_reference(predictions, tolerance_report=None):
    reference, images = load_fixture()
    result = compare(reference, predictions, images)
    assert not result["unmatched"], f"reference boxes without a match: {result['unmatched'][:3]}"
    assert result["strong_score"] <= 0.001, result
    assert result["strong_edge"] <= 1.0, result
    assert result["weak_score"] <= 0.005, result
    return result


@pytest.mark.slow
@pytest.mark.parametrize("backend,ways", [
    ("torch", None),  # PyTorch's public modules (the default)
    ("tuned", None),  # each layer's kernel as measured here
    ("tuned", ("winograd",)),  # NNPACK's Winograd wherever a layer can take it, PyTorch's conv elsewhere
    ("tuned", ("onednn",)),  # oneDNN with packed weights and fused activations everywhere
    pytest.param("onnxruntime", None, marks=pytest.mark.skipif(
        importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed")),
])
def test_matches_darknet_reference_fixture(tmp_path, tiny_weights, monkeypatch, backend, ways):
    _photos_or_skip()
    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    if ways:
        monkeypatch.setattr(cpu_kernels, "WAYS", ways)
    run = _detect(
        tmp_path,
        str(DARKNET_DATA / "*.jpg"),
        "--weights",
        tiny_weights,
        "--cfg",
        _tiny_cfg(tmp_path),
        "--conf-thres",
        0.004,
        "--nms-thres",
        0.45,
        "--no-draw",
        "--device",
        "cpu",
        "--backend",
        backend,
    )
    predictions = json.loads((run / "predictions.json").read_text())
    result = _assert_matches_reference(predictions)
    print("worst differences vs darknet:", {k: v for k, v in result.items() if k != "unmatched"})


@pytest.mark.slow
@pytest.mark.darknet
@pytest.mark.skipif(shutil.which("darknet") is None, reason="darknet binary not installed")
def test_matches_live_darknet(tmp_path, tiny_weights):
    """Regenerate the reference with the installed darknet, then compare (guards the fixture too)."""
    _photos_or_skip()
    out = Path(tempfile.mkdtemp(dir=tmp_path))
    subprocess.run(
        ["bash", str(FIXTURE_DIR / "make_reference.sh"), str(tiny_weights), str(out)],
        check=True,
        capture_output=True,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    live = json.loads((out / "yolov3-tiny_valid.json").read_text())
    fixture = json.loads((FIXTURE_DIR / "yolov3-tiny_valid.json").read_text())
    assert live["detections"] == fixture["detections"]


def _tiny_cfg(tmp_path) -> Path:
    cfg = Path("/usr/share/darknet/cfg/yolov3-tiny.cfg")
    if cfg.exists():
        return cfg
    return write_cfg(make_spec("yolov3-tiny", 80, batch=1, subdivisions=1), tmp_path / "yolov3-tiny.cfg")


def _write_photo(path: Path, width=96, height=64, seed=0):
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def tiny_model_files(tmp_path):
    spec = make_spec("yolov3-tiny", num_classes=2, width=64, height=64, batch=1, subdivisions=1)
    model = Darknet(spec)
    with __import__("torch").no_grad():
        # a bias that makes every cell confident, so detections exist without training
        for head in (15, 22):  # head outputs = bias alone: deterministic detections in every cell
            model.layers[head].conv.weight.zero_()
            model.layers[head].conv.bias.fill_(3.0)
    cfg = write_cfg(spec, tmp_path / "m.cfg")
    weights = save_darknet_weights(model, tmp_path / "m.weights")
    names = tmp_path / "m.names"
    names.write_text("apple\nbanana\n")
    return cfg, weights, names


def test_detect_writes_three_outputs_mirroring_paths(tmp_path, tiny_model_files):
    cfg, weights, names = tiny_model_files
    src = tmp_path / "src"
    _write_photo(src / "a" / "x.jpg", seed=1)
    _write_photo(src / "b" / "x.jpg", seed=2)  # same name in another folder: must not collide
    _write_photo(src / "c.d.png", 50, 70, seed=3)
    run = _detect(
        tmp_path,
        src,
        "--cfg",
        cfg,
        "--weights",
        weights,
        "--names",
        names,
        "--save-conf",
        "--max-det",
        5,
        "--conf_thres",
        0.5,
    )
    assert (run / "a" / "x.jpg").exists() and (run / "b" / "x.jpg").exists() and (run / "c.d.png").exists()
    for rel in ("a/x.txt", "b/x.txt", "c.d.txt"):
        rows = np.loadtxt(run / "labels" / rel, ndmin=2)
        assert rows.shape[1] == 6 and 0 < len(rows) <= 5
        assert ((rows[:, 1:5] >= 0) & (rows[:, 1:5] <= 1)).all() and (rows[:, 5] > 0.5).all()
        assert set(rows[:, 0].astype(int)) <= {0, 1}
    predictions = json.loads((run / "predictions.json").read_text())
    ids = json.loads((run / "image_ids.json").read_text())
    assert len(ids) == 3 and {p["file_name"] for p in predictions} == {"a/x.jpg", "b/x.jpg", "c.d.png"}
    one = next(p for p in predictions if p["file_name"] == "c.d.png")
    x, y, w, h = one["bbox"]
    assert 0 <= x and 0 <= y and x + w <= 50.001 and y + h <= 70.001 and one["category_id"] in (0, 1)


def test_detect_says_where_the_nms_caps_bit(tmp_path, tiny_model_files, capsys):
    cfg, weights, names = tiny_model_files  # every cell fires: 60 anchors x 2 classes of candidates
    for seed in range(3):
        _write_photo(tmp_path / "src" / f"{seed}.jpg", seed=seed)
    run = _detect(tmp_path, tmp_path / "src", "--cfg", cfg, "--weights", weights, "--save-txt",
                  "--max-det", 2)
    assert "note: caps: 2 detections (--max-det) reached on 3 of 3 images" in capsys.readouterr().err
    assert all(len(np.loadtxt(path, ndmin=2)) == 2 for path in (run / "labels").glob("*.txt"))
    _detect(tmp_path, tmp_path / "src", "--cfg", cfg, "--weights", weights, "--exist-ok")  # under both caps
    assert "caps:" not in capsys.readouterr().err


def test_second_run_gets_new_directory(tmp_path, tiny_model_files):
    cfg, weights, names = tiny_model_files
    img = _write_photo(tmp_path / "one.jpg")
    for _ in range(2):
        assert (
            main(
                [
                    "detect",
                    str(img),
                    "--cfg",
                    str(cfg),
                    "--weights",
                    str(weights),
                    "--project",
                    str(tmp_path / "runs"),
                ]
            )
            == 0
        )
    assert (tmp_path / "runs" / "exp").is_dir() and (tmp_path / "runs" / "exp2").is_dir()


def test_unreadable_image_is_listed_and_run_continues(tmp_path, tiny_model_files, capsys):
    cfg, weights, names = tiny_model_files
    src = tmp_path / "src"
    _write_photo(src / "good.jpg")
    (src / "broken.jpg").write_bytes(b"this is not a jpeg")
    (src / "empty.png").write_bytes(b"")
    run = _detect(tmp_path, src, "--cfg", cfg, "--weights", weights, "--save-txt")
    err = capsys.readouterr().err
    assert "2 unreadable images skipped" in err and "broken.jpg" in err and "empty.png" in err
    assert (run / "labels" / "good.txt").exists()
    assert len((run / "skipped.txt").read_text().splitlines()) == 2


def test_single_label_and_class_filter(tmp_path, tiny_model_files):
    cfg, weights, names = tiny_model_files
    img = _write_photo(tmp_path / "p.jpg")
    common = (img, "--cfg", cfg, "--weights", weights, "--names", names, "--conf-thres", 0.3)
    variants = {"multi": (), "single": ("--single-label",), "only": ("--class-filter", "banana")}
    count = {
        key: json.loads((_detect(tmp_path / key, *common, *extra) / "predictions.json").read_text())
        for key, extra in variants.items()
    }
    assert len(count["single"]) < len(count["multi"])
    assert count["only"] and all(p["category_id"] == 1 for p in count["only"])


def test_bad_flags_and_files_are_clear_errors(tmp_path, tiny_model_files, capsys, monkeypatch):
    cfg, weights, names = tiny_model_files
    img = _write_photo(tmp_path / "p.jpg")
    monkeypatch.chdir(tmp_path)  # default run directories land here, and must not be created on failure
    assert main(["detect", str(img), "--cfg", str(cfg), "--weights", str(tmp_path / "nope.weights")]) == 1
    assert "nope.weights: no such weights file" in capsys.readouterr().err
    assert main(["detect", str(img), "--cfg", str(cfg), "--weights", str(weights), "--conf-thres", "3"]) == 1
    assert "--conf-thres must lie in [0, 1]" in capsys.readouterr().err
    other = write_cfg(make_spec("yolov3-tiny", num_classes=5, width=64, height=64), tmp_path / "five.cfg")
    assert main(["detect", str(img), "--cfg", str(other), "--weights", str(weights)]) == 1
    assert "Check that the .cfg (classes, filters) matches the weights" in capsys.readouterr().err
    assert main(["detect", str(tmp_path / "missing_dir"), "--cfg", str(cfg), "--weights", str(weights)]) == 1
    assert "missing_dir" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
