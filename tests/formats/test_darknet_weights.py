from __future__ import annotations

import numpy as np
import pytest
import torch

from turboyolo.errors import WeightsError
from turboyolo.formats.darknet_weights import WeightsHeader, read_weights, write_weights
from turboyolo.model.darknet import Darknet
from turboyolo.model.loading import build_model, load_darknet_weights, save_darknet_weights
from turboyolo.model.zoo import make_spec


def _randomised(spec, seed=0):
    torch.manual_seed(seed)
    model = Darknet(spec)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.dtype.is_floating_point:
                tensor.copy_(torch.rand_like(tensor) + 0.1)
    return model


def test_save_load_bit_exact(tmp_path):
    spec = make_spec("yolov3-tiny", num_classes=2)
    model = _randomised(spec)
    path = save_darknet_weights(model, tmp_path / "m.weights", seen=12345)
    other = Darknet(spec)
    header = load_darknet_weights(other, path)
    assert header.seen == 12345 and header.seen_is_64bit
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values()):
        if a.dtype.is_floating_point:
            assert torch.equal(a, b), name
    assert (tmp_path / "m.weights").read_bytes() == save_darknet_weights(
        other, tmp_path / "n.weights", 12345
    ).read_bytes()


@pytest.mark.parametrize("major,minor,seen_bytes", [(0, 1, 4), (0, 2, 8), (1, 0, 8)])
def test_header_seen_width(tmp_path, major, minor, seen_bytes):
    flat = np.arange(5, dtype=np.float32)
    path = write_weights(tmp_path / "h.weights", WeightsHeader(major, minor, 0, 77), flat)
    assert path.stat().st_size == 12 + seen_bytes + 20
    header, body = read_weights(path)
    assert header.seen == 77 and np.array_equal(body, flat)


def test_truncated_file_is_explained(tmp_path):
    spec = make_spec("yolov3-tiny", num_classes=1)
    path = save_darknet_weights(_randomised(spec), tmp_path / "t.weights")
    data = path.read_bytes()
    (tmp_path / "cut.weights").write_bytes(data[:-4000])
    with pytest.raises(WeightsError, match=r"cut\.weights: the whole network needs \d+ floats .* holds \d+"):
        build_model(spec, tmp_path / "cut.weights")
    (tmp_path / "odd.weights").write_bytes(data[:-3])
    with pytest.raises(WeightsError, match="not a whole number of float32"):
        build_model(spec, tmp_path / "odd.weights")


def test_backbone_cut_by_name(tmp_path):
    spec = make_spec("yolov3-tiny", num_classes=1)
    source = _randomised(spec)
    save_darknet_weights(source, tmp_path / "tiny.conv.13", cutoff=13)
    target = Darknet(spec)
    load_darknet_weights(target, tmp_path / "tiny.conv.13")
    assert torch.equal(target.layers[12].conv.weight, source.layers[12].conv.weight)
    assert not torch.equal(target.layers[13].conv.weight, source.layers[13].conv.weight)
    # the same backbone file without a .conv.N name is a size error that suggests the cut
    (tmp_path / "backbone.weights").write_bytes((tmp_path / "tiny.conv.13").read_bytes())
    with pytest.raises(WeightsError, match=r"\.conv\.13 or pass --cutoff 13"):
        load_darknet_weights(Darknet(spec), tmp_path / "backbone.weights")


def test_official_tiny_weights_load_exactly(tiny_weights):
    model = build_model(make_spec("yolov3-tiny", 80), tiny_weights)
    assert model.flat_weights().size == (tiny_weights.stat().st_size - 20) // 4 == 8_858_734


def test_checkpoint_for_another_class_count_is_explained(tmp_path):
    torch.save({"model": Darknet(make_spec("yolov3-tiny", 3)).state_dict()}, tmp_path / "three.pt")
    with pytest.raises(WeightsError, match=r"three\.pt: tensor shapes do not match the cfg.*size mismatch"):
        build_model(make_spec("yolov3-tiny", 1), tmp_path / "three.pt")
