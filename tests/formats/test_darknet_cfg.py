from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from turboyolo.errors import ConfigError
from turboyolo.formats.darknet_cfg import (
    ConvSpec,
    MaxPoolSpec,
    YoloSpec,
    format_cfg,
    parse_cfg,
    parse_cfg_text,
    training_only_notes,
)
from turboyolo.model.zoo import make_spec

DARKNET_CFGS = sorted(Path("/usr/share/darknet/cfg").glob("yolov3*.cfg"))

TINY_NET = """[net]
batch=64
subdivisions=2
width=416
height=416
channels=3
momentum=0.9
decay=0.0005
learning_rate=0.001
burn_in=1000
max_batches = 500200
policy=steps
steps=400000,450000
scales=.1,.1
"""

HEAD = """
[convolutional]
size=1
stride=1
pad=1
filters=18
activation=linear

[yolo]
mask = 0,1,2
anchors = 10,14,  23,27,  37,58
classes=1
num=3
"""


def test_parses_net_and_layers():
    spec = parse_cfg_text(
        TINY_NET + "\n[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=1\npad=1\n"
        "activation=leaky\n\n[maxpool]\nsize=2\nstride=1\n" + HEAD
    )
    assert spec.net.batch == 64 and spec.net.subdivisions == 2
    assert spec.net.steps == (400000, 450000) and spec.net.scales == (0.1, 0.1)
    assert spec.net.optimizer == "sgd" and spec.net.power == 4.0
    conv, pool, head, yolo = spec.layers
    assert conv == ConvSpec(filters=16, size=3, stride=1, padding=1, batch_normalize=True, activation="leaky")
    assert pool == MaxPoolSpec(size=2, stride=1, padding=1)
    assert isinstance(yolo, YoloSpec) and yolo.anchors[1] == (23.0, 27.0) and yolo.classes == 1
    assert spec.num_classes == 1


@pytest.mark.parametrize(
    "line,optimizer",
    [("adam=1", "adam"), ("optimizer=adam", "adam"), ("optimizer=sgd", "sgd"), ("adam=0", "sgd")],
)
def test_optimizer_both_spellings(line, optimizer):
    spec = parse_cfg_text(TINY_NET + line + "\n" + HEAD)
    assert spec.net.optimizer == optimizer


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.cfg"
    path.write_text(TINY_NET + "\n[convolutional]\nfilters 16\n" + HEAD)
    with pytest.raises(ConfigError, match=r"bad\.cfg:17: expected `key=value`"):
        parse_cfg(path)


def test_bad_number_names_key_and_line():
    with pytest.raises(ConfigError, match=r":3: `subdivisions=two`"):
        parse_cfg_text("[net]\nbatch=4\nsubdivisions=two\n" + HEAD)


def test_unsupported_keys_are_errors():
    with pytest.raises(
        ConfigError, match=r":19: `groups` in \[convolutional\] changes the network's outputs"
    ):
        parse_cfg_text(TINY_NET + "\n[convolutional]\nfilters=4\nsize=1\ngroups=2\n" + HEAD)
    with pytest.raises(ConfigError, match="antialiasing"):
        parse_cfg_text(TINY_NET + "\n[maxpool]\nsize=2\nstride=2\nantialiasing=1\n" + HEAD)
    with pytest.raises(ConfigError, match=r"\[reorg\] is not supported"):
        parse_cfg_text(TINY_NET + "\n[reorg]\nstride=2\n" + HEAD)
    with pytest.raises(ConfigError, match=r"`iou_loss=siou` is not a valid value \(use one of mse, iou"):
        parse_cfg_text(TINY_NET + HEAD + "iou_loss=siou\n")
    with pytest.raises(ConfigError, match="group_id=2: need groups >= 1 and 0 <= group_id < groups"):
        parse_cfg_text(
            TINY_NET + "\n[convolutional]\nfilters=4\nsize=1\n\n[route]\nlayers=-1\ngroups=2\n"
            "group_id=2\n" + HEAD
        )


def test_unknown_harmless_key_kept_and_warned_once():
    text = TINY_NET + "made_up_key=1\nmosaic=1\n" + HEAD + "iou_norm=0.07\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = parse_cfg_text(text)
    assert ("made_up_key", "1") in spec.net.extra and spec.net.mosaic == 1.0  # mosaic: a NetSpec field
    assert [str(w.message) for w in caught] == [
        "<string>:15: unknown key `made_up_key` in [net] kept but ignored",
        "<string>:30: unknown key `iou_norm` in [yolo] kept but ignored",
    ]
    assert "made_up_key=1" in format_cfg(spec)
    assert "mosaic=1" in format_cfg(spec)


def test_training_only_keys_are_noted_for_training_only():
    net_keys = "ema_alpha=0.9998\ncutmix=0\nletter_box=1\n"
    text = TINY_NET + net_keys + HEAD + "resize=1.5\nobjectness_smooth=0\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # parsing (what inference does) is quiet about them
        spec = parse_cfg_text(text)
    assert ("letter_box", "1") in spec.net.extra and ("resize", "1.5") in spec.layers[-1].extra
    notes = training_only_notes(spec)
    assert len(notes) == 2  # cutmix=0 and objectness_smooth=0 are off; letter_box is what turboyolo does
    assert notes[0].startswith("[net] ema_alpha=0.9998 is a Darknet training setting turboyolo does not")
    assert notes[1].startswith("[yolo] resize=1.5 is a Darknet training setting")


def test_alexeyab_yolo_keys_round_trip():
    text = (
        TINY_NET
        + HEAD
        + (
            "scale_x_y = 1.05\nnew_coords=1\niou_thresh=0.213\niou_loss=ciou\niou_normalizer=0.07\n"
            "obj_normalizer=4.0\ncls_normalizer=0.5\nmax_delta=5\nnms_kind=diounms\nbeta_nms=0.6\n"
        )
    )
    spec = parse_cfg_text(text)
    yolo = spec.layers[-1]
    assert (yolo.scale_x_y, yolo.new_coords, yolo.iou_thresh, yolo.iou_loss) == (1.05, True, 0.213, "ciou")
    assert (yolo.iou_normalizer, yolo.obj_normalizer, yolo.cls_normalizer) == (0.07, 4.0, 0.5)
    assert (yolo.max_delta, yolo.nms_kind, yolo.beta_nms) == (5.0, "diounms", 0.6)
    assert parse_cfg_text(format_cfg(spec)) == spec
    # absent keys stay absent (None) and are not written back
    plain = parse_cfg_text(TINY_NET + HEAD).layers[-1]
    assert plain.scale_x_y is None and "scale_x_y" not in format_cfg(parse_cfg_text(TINY_NET + HEAD))


def test_route_groups_and_maxpool_depth_round_trip():
    text = (
        TINY_NET
        + (
            "\n[convolutional]\nfilters=8\nsize=1\n\n[route]\nlayers=-1\ngroups=2\ngroup_id=1\n"
            "\n[maxpool]\nmaxpool_depth=1\nout_channels=2\nstride=1\nsize=1\n"
        )
        + HEAD
    )
    spec = parse_cfg_text(text)
    route, pool = spec.layers[1], spec.layers[2]
    assert (route.groups, route.group_id) == (2, 1)
    assert pool.maxpool_depth and pool.out_channels == 2
    assert parse_cfg_text(format_cfg(spec)) == spec


def test_head_filter_mismatch_is_explained():
    with pytest.raises(ConfigError, match=r"filters=18 = 3 anchors x \(1 classes \+ 5\), found 255"):
        parse_cfg_text(TINY_NET + HEAD.replace("filters=18", "filters=255"))


def test_reference_outside_network_is_error():
    with pytest.raises(ConfigError, match="not an earlier layer"):
        parse_cfg_text(TINY_NET + "\n[route]\nlayers=-3\n" + HEAD)


@pytest.mark.parametrize("arch", ["yolov3", "yolov3-tiny", "yolov3-spp"])
def test_generated_cfg_round_trip(arch, tmp_path):
    spec = make_spec(arch, num_classes=3, width=320, height=256, batch=32, subdivisions=4)
    again = parse_cfg_text(format_cfg(spec))
    assert again == spec


@pytest.mark.skipif(not DARKNET_CFGS, reason="Debian package darknet (canonical cfgs) not installed")
@pytest.mark.parametrize("path", DARKNET_CFGS, ids=lambda p: p.name)
def test_canonical_cfg_round_trip(path):
    spec = parse_cfg(path)
    assert parse_cfg_text(format_cfg(spec)) == spec


@pytest.mark.skipif(not DARKNET_CFGS, reason="Debian package darknet (canonical cfgs) not installed")
@pytest.mark.parametrize("arch", ["yolov3", "yolov3-tiny", "yolov3-spp"])
def test_zoo_equals_darknet_canonical_cfg(arch):
    canonical = parse_cfg(f"/usr/share/darknet/cfg/{arch}.cfg")
    generated = make_spec(arch, num_classes=80)
    assert len(generated.layers) == len(canonical.layers)
    for index, (ours, theirs) in enumerate(zip(generated.layers, canonical.layers)):
        assert ours == theirs, f"layer {index} differs"


def test_duplicate_key_first_wins_like_darknet():
    with pytest.warns(UserWarning, match="given again"):
        spec = parse_cfg_text("[net]\nbatch=1\nbatch=64\n" + HEAD)
    assert spec.net.batch == 1


def test_spec_without_steps_round_trips():
    spec = make_spec("yolov3-tiny", num_classes=1)
    spec = spec.with_net(policy="cosine", steps=(), scales=())
    text = format_cfg(spec)
    assert "steps=" not in text and parse_cfg_text(text) == spec
