"""examples/: the data.yaml is read by the real parser, and train_custom.py runs end to end (the official
yolov3-tiny weights on a tiny synthetic set at 64 px, one iteration, through its documented
``TURBOYOLO_EXAMPLE_OPTIONS`` override)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from synth import make_dataset
from turboyolo.formats.datasets import load_data_config

EXAMPLES = Path(__file__).parents[1] / "examples"


def _example_data(tmp_path: Path) -> Path:
    """examples/data.yaml with its ``path:`` pointed at a synthetic two-class set."""
    root = tmp_path / "birds"
    make_dataset(root, 2, 1, size=64, num_classes=2)
    doc = yaml.safe_load((EXAMPLES / "data.yaml").read_text(encoding="utf-8"))
    doc["path"] = str(root)
    data = tmp_path / "data.yaml"
    data.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return data


def test_example_data_yaml_is_six_lines_and_reads(tmp_path):
    assert len((EXAMPLES / "data.yaml").read_text(encoding="utf-8").splitlines()) == 6
    config = load_data_config(_example_data(tmp_path))
    assert config.names == ["sparrow", "robin"]
    root = tmp_path / "birds"
    assert config.split("train") == [root / "images" / "train"]
    assert config.split("val") == [root / "images" / "val"]


def test_train_custom_example_runs(tmp_path, tiny_weights):
    data = _example_data(tmp_path)
    options = {"max_batches": 1, "img_size": 64, "batch": 2, "subdivisions": 1, "workers": 0,
               "project": str(tmp_path / "runs"), "checkpoint_interval": 0, "quiet": True}
    src = str(Path(__file__).parents[1] / "src")
    env = dict(os.environ, TURBOYOLO_EXAMPLE_OPTIONS=yaml.safe_dump(options, default_flow_style=True),
               PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    image = tmp_path / "birds" / "images" / "val" / "val0.png"
    done = subprocess.run([sys.executable, str(EXAMPLES / "train_custom.py"), str(data), str(image)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "after 1 iterations" in done.stdout and str(image) in done.stdout
    assert (tmp_path / "runs" / "exp" / "weights" / "best.pt").is_file()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
