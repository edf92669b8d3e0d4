"""`turboyolo test` says where its time went (inference, decode + NMS, metrics) and where an NMS cap
bit, on a model whose heads fire in every cell (an untrained model's output: a box everywhere)."""

from __future__ import annotations

import re

import pytest
import torch

from synth import make_dataset
from turboyolo.cli import main
from turboyolo.formats.darknet_cfg import format_cfg
from turboyolo.model.darknet import Darknet
from turboyolo.model.zoo import make_spec


@pytest.fixture
def box_everywhere(tmp_path):
    """A 2-class yolov3-tiny checkpoint at 64 px whose heads put a confident box of each class on every
    anchor (60 anchors x 2 classes = 120 candidates per image), and a 5-image val split."""
    spec = make_spec("yolov3-tiny", num_classes=2, width=64, height=64, batch=2, subdivisions=1)
    torch.manual_seed(0)
    model = Darknet(spec)
    with torch.no_grad():
        for head in (15, 22):
            model.layers[head].conv.weight.mul_(0.1)
            model.layers[head].conv.bias.fill_(3.0)
    checkpoint = tmp_path / "m.pt"
    torch.save({"model": model.state_dict(), "cfg_text": format_cfg(spec)}, checkpoint)
    return checkpoint, make_dataset(tmp_path / "data", num_train=1, num_val=5, num_classes=2)


def run_test(capsys, checkpoint, data, *flags) -> str:
    assert main(["test", "--weights", str(checkpoint), "--data", str(data), "--device", "cpu",
                 "--workers", "0", "--batch-size", "2", *flags]) == 0
    return capsys.readouterr().out


def test_the_time_split_and_the_max_det_cap_are_reported(box_everywhere, capsys):
    out = run_test(capsys, *box_everywhere, "--max-det", "7")
    speed = re.search(r"speed: ([\d.]+) ms inference, ([\d.]+) ms decode\+NMS, ([\d.]+) ms waiting for data "
                      r"per image; metrics ([\d.]+) s", out)
    assert speed and float(speed[1]) > 0 and float(speed[2]) > 0
    assert "caps: 7 detections (--max-det) reached on 5 of 5 images, lower-scoring ones dropped" in out
    assert "35 detections on 5 images" in out  # 7 per image, no more
    assert "--max-candidates" not in out


def test_the_candidate_cap_is_reported_where_it_changes_the_output(box_everywhere, capsys):
    out = run_test(capsys, *box_everywhere, "--max-candidates", "3", "--backend", "pycocotools")
    said = "candidates cut to the best 3 (--max-candidates) before NMS on 5 images (up to 120 per image)"
    assert said in out
    assert "--max-det) reached" not in out
    detections = int(re.search(r"\((\d+) detections on 5 images\)", out)[1])
    assert 5 <= detections <= 15  # at most the 3 best candidates of each image survive
    assert "speed: " in out


def test_nothing_is_said_when_no_cap_bites(box_everywhere, capsys):
    out = run_test(capsys, *box_everywhere)  # 120 candidates per image: under both default caps
    assert "caps:" not in out and "speed: " in out


@pytest.mark.parametrize("cores, omp, during", [(3, None, 2), (1, None, 1), (3, "3", 5)])
def test_the_cpu_forward_leaves_a_core_to_the_loader(box_everywhere, capsys, monkeypatch, cores, omp, during):
    """On the CPU the evaluation runs on cores - 1 intra-op threads (at least 1), unless OMP_NUM_THREADS
    is set; the caller's thread count is back afterwards."""
    from turboyolo import devices
    from turboyolo.train import testing

    monkeypatch.setattr(devices, "usable_cpus", lambda: cores)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if omp:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    seen, evaluate = [], testing.evaluate

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(testing, "evaluate", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(5)
    try:
        run_test(capsys, *box_everywhere)
        assert seen == [during] and torch.get_num_threads() == 5
    finally:
        torch.set_num_threads(before)
