"""yolov4-tiny, yolov4, yolov4-csp and yolov7-tiny: generated cfgs against AlexeyAB's canonical files,
parameter counts, forward shapes, ``.weights`` sizes and backbone cut-offs.

The canonical cfgs are not in this repository: tests/fixtures/darknet_cfgs/<name>.layers.json describe
them layer by layer (section type and keys, parsed numbers), written from AlexeyAB/darknet@59596d78 by
tests/fixtures/darknet_cfgs/extract_layers.py (its docstring has the command). The test rebuilds a cfg
from each description, parses it with turboyolo's parser and compares it with the generated network.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from turboyolo.formats.darknet_cfg import format_cfg, parse_cfg_text
from turboyolo.model.darknet import Darknet
from turboyolo.model.loading import load_darknet_weights, save_darknet_weights
from turboyolo.model.zoo import BACKBONE_CUTS, make_spec

FIXTURES = Path(__file__).parents[1] / "fixtures" / "darknet_cfgs"
FAMILY = ("yolov4-tiny", "yolov4", "yolov4-csp", "yolov7-tiny")
# architecture: (trainable parameters, floats in the .weights file) at 80 classes; the float counts are
# those of the official yolov4.weights (257,717,640 bytes) and yolov4-tiny.weights (24,251,276 bytes)
EXPECTED = {
    "yolov4-tiny": (6_056_606, 6_062_814),
    "yolov4": (64_363_101, 64_429_405),
    "yolov4-csp": (52_921_437, 52_986_205),
    "yolov7-tiny": (6_227_101, 6_241_885),
}
HEAD_STRIDES = {
    "yolov4-tiny": [32, 16],
    "yolov4": [8, 16, 32],
    "yolov4-csp": [8, 16, 32],
    "yolov7-tiny": [8, 16, 32],
}


def canonical_text(name: str) -> str:
    """A cfg rebuilt from the fixture's description of AlexeyAB's ``cfg/<name>.cfg``."""
    data = json.loads((FIXTURES / f"{name}.layers.json").read_text())

    def block(section: str, keys: dict) -> str:
        values = (",".join(map(str, v)) if isinstance(v, list) else str(v) for v in keys.values())
        return "\n".join([f"[{section}]"] + [f"{k}={v}" for k, v in zip(keys, values)])

    return "\n\n".join([block("net", data["net"])] + [block(s, keys) for s, keys in data["layers"]]) + "\n"


@pytest.mark.parametrize("arch", FAMILY)
def test_generated_equals_canonical_layer_for_layer(arch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # training-only keys (mosaic, resize, ...) are warned about
        canonical = parse_cfg_text(canonical_text(arch), f"AlexeyAB {arch}.cfg")
        generated = make_spec(arch, num_classes=80)
        again = parse_cfg_text(format_cfg(generated))
    assert len(generated.layers) == len(canonical.layers)
    for index, (ours, theirs) in enumerate(zip(generated.layers, canonical.layers)):
        assert ours == theirs, f"layer {index} differs"
    assert generated.net == canonical.net
    assert again == generated  # the written cfg reads back to the same network


@pytest.mark.parametrize("arch", FAMILY)
def test_parameter_counts_and_head_strides(arch):
    model = Darknet(make_spec(arch, 80))
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == EXPECTED[arch][0]
    assert model.flat_weights().size == EXPECTED[arch][1]
    assert [head.stride for head in model.heads] == HEAD_STRIDES[arch]


def test_other_class_counts_resize_only_the_heads():
    spec = make_spec("yolov7-tiny", num_classes=1, width=128, height=96, batch=8, subdivisions=2)
    assert (spec.net.width, spec.net.height, spec.net.batch, spec.net.subdivisions) == (128, 96, 8, 2)
    heads = [spec.layers[i - 1] for i, _ in spec.yolo_layers]
    assert {head.filters for head in heads} == {18} and {head.activation for head in heads} == {"logistic"}
    model = Darknet(spec).eval()
    with torch.no_grad():
        outputs = model(torch.rand(1, 3, 96, 128))
    assert [tuple(o.shape) for o in outputs] == [(1, 3, 12, 16, 6), (1, 3, 6, 8, 6), (1, 3, 3, 4, 6)]
    assert all(((o >= 0) & (o <= 1)).all() for o in outputs)  # logistic heads: probabilities


# floats in <arch>.conv.N; darknet53.conv.74 (pjreddie) is 162,482,580 bytes = 20 + 4 x 40,620,640, and
# AlexeyAB lists yolov4.conv.137 at 162 MB, yolov4-tiny.conv.29 at 19 MB
CUT_FLOATS = {
    "yolov3": 40_620_640,
    "yolov4": 42_509_664,
    "yolov4-tiny": 4_947_424,
    "yolov4-csp": 36_637_024,
    "yolov7-tiny": 4_460_768,
}


@pytest.mark.parametrize("arch", sorted(CUT_FLOATS))
def test_backbone_cut_sizes(arch):
    model = Darknet(make_spec(arch, 80))
    assert model.flat_weights(cutoff=BACKBONE_CUTS[arch]).size == CUT_FLOATS[arch]


@pytest.mark.parametrize("arch", ["yolov4-tiny", "yolov4-csp", "yolov7-tiny"])
def test_backbone_cut_round_trip(arch, tmp_path):
    spec = make_spec(arch, num_classes=2, width=64, height=64)
    torch.manual_seed(0)
    source = Darknet(spec)
    cut = BACKBONE_CUTS[arch]
    path = save_darknet_weights(source, tmp_path / f"{arch}.conv.{cut}", cutoff=cut)
    target = Darknet(spec)
    load_darknet_weights(target, path)
    own, other = source.state_dict(), target.state_dict()
    loaded = {name for name in own if torch.equal(own[name], other[name]) and name.endswith("conv.weight")}
    layers = sorted({int(name.split(".")[1]) for name in loaded})
    convs = [i for i, module in enumerate(source.layers) if hasattr(module, "conv")]
    assert layers == [i for i in convs if i < cut]


def test_unknown_architecture_is_explained():
    from turboyolo.errors import ConfigError

    with pytest.raises(ConfigError, match="choose one of yolov3, yolov3-tiny, yolov3-spp, yolov4-tiny"):
        make_spec("yolov5", 1)


@pytest.mark.parametrize("arch", FAMILY)
def test_cfg_command_writes_the_family(arch, tmp_path):
    from turboyolo.cli import main
    from turboyolo.formats.darknet_cfg import parse_cfg

    out = tmp_path / f"{arch}.cfg"
    assert main(["cfg", arch, "--num-classes", "1", "-o", str(out)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert parse_cfg(out).layers == make_spec(arch, 1).layers


@pytest.mark.parametrize(
    "exporter, archs",
    [
        pytest.param("dynamo", ("yolov7-tiny", "yolov4-tiny"), marks=[pytest.mark.slow, pytest.mark.full(
            covered_by="tests/model/test_zoo_alexeyab.py::test_family_exports_to_onnx[torchscript-archs1]")]),
        pytest.param("torchscript", ("yolov7-tiny",), marks=pytest.mark.slow),  # yolov4-tiny: test_train_v4
    ],
)
def test_family_exports_to_onnx(exporter, archs, tmp_path):
    pytest.importorskip("onnxruntime")
    import numpy as np

    from turboyolo.infer.export import ExportOptions, compare_with_torch, export_onnx

    images = np.random.default_rng(0).random((2, 3, 64, 64), dtype=np.float32)
    for arch in archs:  # yolov7-tiny: new_coords, scale_x_y 2, SPP; yolov4-tiny: route groups
        torch.manual_seed(0)
        model = Darknet(make_spec(arch, 2, 64, 64)).eval()
        options = ExportOptions((64, 64), decoded=True, dynamic_batch=True, exporter=exporter)
        path = export_onnx(model, tmp_path / f"{arch}.onnx", options)
        assert compare_with_torch(model, path, options, images) < 1e-3  # pixels
